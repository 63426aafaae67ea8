"""Properties every trigger kind keeps, over generated triggers, zones and instants.

For any instant ``t``: the next fire time is strictly later, in UTC, is itself a fire time, and
asking from any instant between ``t`` and it gives the same answer (nothing fires in between).
"""

from __future__ import annotations

from datetime import datetime, time, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from celery_quartz.triggers import (
    CalendarIntervalTrigger,
    CronTrigger,
    DailyTimeIntervalTrigger,
    IntervalUnit,
    RecurrenceTrigger,
    SimpleTrigger,
    Trigger,
)

UTC = timezone.utc
ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"]
_starts = st.datetimes(
    min_value=datetime(2025, 1, 1), max_value=datetime(2026, 12, 31), timezones=st.just(UTC)
)
_zones = st.sampled_from(ZONES)

_simple = st.builds(
    lambda start, seconds, count: SimpleTrigger(
        start_at=start, repeat_interval=timedelta(seconds=seconds), repeat_count=count
    ),
    _starts,
    st.integers(1, 86_400 * 3),
    st.integers(-1, 50),
)
_cron = st.builds(
    lambda expr, zone: CronTrigger(expression=expr, time_zone=zone),
    st.sampled_from(
        ["0 30 2 * * ?", "0 0/30 * * * ?", "0 0 9 ? * MON-FRI", "0 15 1 L * ?", "0 0 0 ? * 6#5"]
    ),
    _zones,
)
_calendar_interval = st.builds(
    lambda start, n, unit, zone, preserve, skip: CalendarIntervalTrigger(
        start_at=start,
        repeat_interval=n,
        repeat_interval_unit=unit,
        time_zone=zone,
        preserve_hour_of_day_across_daylight_savings=preserve,
        skip_day_if_hour_does_not_exist=skip,
    ),
    _starts,
    st.integers(1, 5),
    st.sampled_from(list(IntervalUnit)),
    _zones,
    st.booleans(),
    st.booleans(),
)
_daily = st.builds(
    lambda start, h0, h1, n, unit, days, zone: DailyTimeIntervalTrigger(
        start_at=start,
        start_time_of_day=time(min(h0, h1), 30),
        end_time_of_day=time(max(h0, h1), 45),
        repeat_interval=n,
        repeat_interval_unit=unit,
        days_of_week=days,
        time_zone=zone,
    ),
    _starts,
    st.integers(0, 23),
    st.integers(0, 23),
    st.integers(1, 90),
    st.sampled_from([IntervalUnit.SECOND, IntervalUnit.MINUTE, IntervalUnit.HOUR]),
    st.frozensets(st.integers(1, 7), min_size=1),
    _zones,
)
_recurrence = st.builds(
    lambda start, rule, zone: RecurrenceTrigger(start_at=start, rule=rule, time_zone=zone),
    _starts,
    st.sampled_from(
        [
            "FREQ=WEEKLY;INTERVAL=2;BYDAY=MO",
            "FREQ=MONTHLY;BYDAY=-2FR",
            "FREQ=DAILY;INTERVAL=3",
            "FREQ=HOURLY;INTERVAL=5",
            "FREQ=DAILY;BYHOUR=2;BYMINUTE=30",
            "FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1",
        ]
    ),
    _zones,
)
_triggers = st.one_of(_simple, _cron, _calendar_interval, _daily, _recurrence)


@settings(max_examples=400, deadline=None)
@given(trigger=_triggers, after=_starts, fraction=st.floats(0, 1))
def test_next_fire_time_is_later_is_a_fire_time_and_nothing_fires_before_it(
    trigger: Trigger, after: datetime, fraction: float
) -> None:
    fire = trigger.next_fire_time_after(after)
    if fire is None:
        return
    assert fire > after and fire.tzinfo is UTC
    assert trigger.fires_at(fire)
    between = after + (fire - after) * fraction
    if between < fire:
        assert trigger.next_fire_time_after(between) == fire
