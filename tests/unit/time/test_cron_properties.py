"""Properties of next_valid_time_after over generated expressions, zones and instants.

The oracle below decides at one instant whether an expression fires, from the parsed field sets
and the zone's offsets alone, without the search: a wall time that matches fires; at its second
pass only for an interval expression; and the instant a spring-forward gap ends fires when any
wall time inside the gap matches.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from celery_quartz.cron import CronExpression

UTC = timezone.utc
ONE = timedelta(seconds=1)
ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"]
WINDOW = 900  # seconds checked one by one after each instant


def _wall_matches(cron: CronExpression, w: datetime) -> bool:
    if cron._years is not None and w.year not in cron._years:
        return False
    return (
        cron._months[w.month] == w.month
        and w.day in cron._days.days(w.year, w.month)
        and cron._hours[w.hour] == w.hour
        and cron._minutes[w.minute] == w.minute
        and cron._seconds[w.second] == w.second
    )


def oracle_fires(cron: CronExpression, t: datetime) -> bool:
    zone = cron.zone
    local = t.astimezone(zone)
    wall = local.replace(tzinfo=None)
    if _wall_matches(cron, wall):
        ambiguous = local.replace(fold=0).utcoffset() != local.replace(fold=1).utcoffset()
        if not (ambiguous and local.fold == 1) or cron.is_interval:
            return True
    before = (t - ONE).astimezone(zone)
    offset_before, offset_now = before.utcoffset(), local.utcoffset()
    assert offset_before is not None and offset_now is not None
    if offset_now > offset_before:  # ``t`` is the end of a gap: did the gap swallow a match?
        gap_start = (t.replace(tzinfo=None) + offset_before).replace(microsecond=0)
        w = gap_start
        while w < wall:
            if _wall_matches(cron, w):
                return True
            w += ONE
    return False


def _values(lo: int, hi: int) -> st.SearchStrategy[str]:
    number = st.integers(lo, hi)
    return st.one_of(
        st.just("*"),
        number.map(str),
        st.tuples(number, number).map(lambda p: f"{min(p)}-{max(p)}"),
        st.tuples(number, st.integers(1, max(1, hi - lo))).map(lambda p: f"{p[0]}/{p[1]}"),
        st.integers(1, max(1, hi - lo)).map(lambda n: f"*/{n}"),
        st.lists(number, min_size=2, max_size=4, unique=True).map(
            lambda xs: ",".join(map(str, sorted(xs)))
        ),
    )


_DOM = st.one_of(
    _values(1, 31),
    st.sampled_from(["L", "LW", "L-1", "L-3", "L-3W", "15W", "1W", "31W", "1W,15W"]),
)
_DOW = st.one_of(
    _values(1, 7),
    st.sampled_from(["MON-FRI", "SAT,SUN", "MON/2", "2#1", "6#5", "6L", "1L", "L", "TUE#3"]),
)
_DAYS = st.one_of(
    _DOM.map(lambda dom: f"{dom} * ?"),
    st.tuples(_DOM, _values(1, 12)).map(lambda p: f"{p[0]} {p[1]} ?"),
    _DOW.map(lambda dow: f"? * {dow}"),
)
# Dense schedules, so that the checked window usually holds fire times.
_DENSE = st.builds(
    lambda s, m, h, days: f"{s} {m} {h} {days}",
    _values(0, 59),
    st.one_of(st.just("*"), _values(0, 59)),
    st.one_of(st.just("*"), _values(0, 23)),
    _DAYS,
)
_INSTANTS = st.datetimes(
    min_value=datetime(2024, 1, 1), max_value=datetime(2029, 12, 31), timezones=st.just(UTC)
)
# Instants near this period's daylight-saving changes, where the rules matter.
_CHANGES = [
    datetime(2026, 3, 29, 1, tzinfo=UTC),  # Berlin spring
    datetime(2026, 10, 25, 1, tzinfo=UTC),  # Berlin autumn
    datetime(2026, 3, 8, 7, tzinfo=UTC),  # New York spring
    datetime(2026, 11, 1, 6, tzinfo=UTC),  # New York autumn
    datetime(2026, 10, 3, 15, 30, tzinfo=UTC),  # Lord Howe spring
    datetime(2026, 4, 4, 15, tzinfo=UTC),  # Lord Howe autumn
]
_NEAR_CHANGES = st.builds(
    lambda base, offset: base + timedelta(seconds=offset),
    st.sampled_from(_CHANGES),
    st.integers(-5400, 5400),
)


def _check(expression: str, zone: str, after: datetime) -> None:
    cron = CronExpression(expression, time_zone=zone)
    result = cron.next_valid_time_after(after)
    if result is not None:
        assert result > after
        assert result.tzinfo is UTC
        assert cron.is_satisfied_by(result)
        assert oracle_fires(cron, result), f"{expression} in {zone}: {result} is not a fire time"
    t = after.replace(microsecond=0) + ONE
    horizon = after + timedelta(seconds=WINDOW)
    while t < horizon and (result is None or t < result):
        assert not oracle_fires(cron, t), f"{expression} in {zone}: skipped {t} (after {after})"
        t += ONE


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expression=_DENSE, zone=st.sampled_from(ZONES), after=_INSTANTS)
def test_next_time_is_the_first_later_fire_time(
    expression: str, zone: str, after: datetime
) -> None:
    _check(expression, zone, after)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expression=_DENSE, zone=st.sampled_from(ZONES[1:4]), after=_NEAR_CHANGES)
def test_next_time_is_the_first_later_fire_time_across_daylight_saving_changes(
    expression: str, zone: str, after: datetime
) -> None:
    _check(expression, zone, after)


@settings(max_examples=150, deadline=None)
@given(expression=_DENSE, zone=st.sampled_from(ZONES), after=_INSTANTS)
def test_consecutive_fire_times_strictly_increase(
    expression: str, zone: str, after: datetime
) -> None:
    cron = CronExpression(expression, time_zone=zone)
    previous = after
    for _ in range(20):
        nxt = cron.next_valid_time_after(previous)
        if nxt is None:
            return
        assert nxt > previous
        previous = nxt
