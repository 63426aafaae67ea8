"""Day-of-month lists with L, L-n, LW, LW-n, L-nW and nW, against a day-by-day brute force.

The oracle reads each item's meaning from the documentation, not from the parser: it looks at every
day of the month and asks whether some item names it, finding "the nearest weekday" by distance.
"""

from __future__ import annotations

import calendar
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from celery_quartz.cron import CronExpression

ZONES = ["UTC", "Europe/Berlin", "America/Santiago", "Asia/Kathmandu", "Australia/Lord_Howe"]


def _nearest_weekday(year: int, month: int, day: int) -> int:
    last = calendar.monthrange(year, month)[1]
    weekdays = [d for d in range(1, last + 1) if date(year, month, d).weekday() < 5]
    return min(weekdays, key=lambda d: abs(d - day))


def _item_days(item: str, year: int, month: int) -> set[int]:
    last = calendar.monthrange(year, month)[1]
    if item.startswith("L"):
        body, _, before = item.partition("W")
        offset = int(body[2:]) if body.startswith("L-") else 0
        base = last - offset
        if base < 1:
            return set()
        if "W" not in item:
            return {base}
        minus = int(before[1:]) if before else 0
        return {max(_nearest_weekday(year, month, base) - minus, 1)}
    if item.endswith("W"):
        return {_nearest_weekday(year, month, min(int(item[:-1]), last))}
    day = int(item)
    return {day} if day <= last else set()


def oracle_dates(dom: str, year: int) -> list[date]:
    out = []
    for month in range(1, 13):
        for day in range(1, calendar.monthrange(year, month)[1] + 1):
            if any(day in _item_days(item, year, month) for item in dom.split(",")):
                out.append(date(year, month, day))
    return out


_OFFSET = st.integers(0, 30)
_ITEM = st.one_of(
    st.just("L"),
    _OFFSET.map(lambda n: f"L-{n}"),
    st.just("LW"),
    _OFFSET.map(lambda n: f"LW-{n}"),
    _OFFSET.map(lambda n: f"L-{n}W"),
    st.tuples(_OFFSET, _OFFSET).map(lambda p: f"L-{p[0]}W-{p[1]}"),
    st.integers(1, 31).map(lambda d: f"{d}W"),
    st.integers(1, 31).map(str),
)
_LISTS = st.lists(_ITEM, min_size=1, max_size=5).map(",".join)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dom=_LISTS, year=st.integers(1971, 2198), zone=st.sampled_from(ZONES))
def test_day_lists_fire_on_the_days_the_brute_force_finds(dom: str, year: int, zone: str) -> None:
    cron = CronExpression(f"0 0 12 {dom} * ?", time_zone=zone)
    tz = ZoneInfo(zone)
    after = datetime(year, 1, 1, tzinfo=tz) - timedelta(seconds=1)
    end = datetime(year + 1, 1, 1, tzinfo=tz)
    fired = []
    t = cron.next_valid_time_after(after)
    while t is not None and t < end:
        local = t.astimezone(tz)
        assert (local.hour, local.minute, local.second) == (12, 0, 0)
        fired.append(local.date())
        t = cron.next_valid_time_after(t)
    assert fired == oracle_dates(dom, year), dom


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dom=_LISTS, year=st.integers(1971, 2198), month=st.integers(1, 12))
def test_is_satisfied_by_agrees_with_the_brute_force_day_by_day(
    dom: str, year: int, month: int
) -> None:
    cron = CronExpression(f"0 0 12 {dom} * ?")
    wanted = {d for d in oracle_dates(dom, year) if d.month == month}
    for day in range(1, calendar.monthrange(year, month)[1] + 1):
        noon = datetime(year, month, day, 12, tzinfo=ZoneInfo("UTC"))
        assert cron.is_satisfied_by(noon) == (date(year, month, day) in wanted), (dom, day)
