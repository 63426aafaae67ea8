"""DailyTimeIntervalTrigger: an interval between two times of day, on chosen days of the week."""

from __future__ import annotations

from datetime import datetime, time, timezone
from zoneinfo import ZoneInfo

import pytest

from celery_quartz.errors import InvalidTriggerError
from celery_quartz.triggers import (
    MONDAY_THROUGH_FRIDAY,
    TRIGGER_KINDS,
    DailyTimeIntervalTrigger,
    IntervalUnit,
)

UTC = timezone.utc
BERLIN = ZoneInfo("Europe/Berlin")


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def walk(trigger: DailyTimeIntervalTrigger, after: datetime, n: int) -> list[datetime]:
    out = []
    for _ in range(n):
        nxt = trigger.next_fire_time_after(after)
        if nxt is None:
            break
        out.append(nxt)
        after = nxt
    return out


def office_hours(**kw: object) -> DailyTimeIntervalTrigger:
    defaults: dict[str, object] = {
        "start_at": utc(2026, 1, 1),
        "start_time_of_day": time(9),
        "end_time_of_day": time(10),
        "repeat_interval": 20,
        "repeat_interval_unit": IntervalUnit.MINUTE,
        "days_of_week": MONDAY_THROUGH_FRIDAY,
    }
    defaults.update(kw)
    return DailyTimeIntervalTrigger(**defaults)  # type: ignore[arg-type]


def test_fires_from_start_to_end_time_of_day_inclusive() -> None:
    assert walk(office_hours(), utc(2026, 1, 1), 5) == [
        utc(2026, 1, 1, 9, 0),
        utc(2026, 1, 1, 9, 20),
        utc(2026, 1, 1, 9, 40),
        utc(2026, 1, 1, 10, 0),
        utc(2026, 1, 2, 9, 0),
    ]


def test_skips_days_not_in_days_of_week() -> None:
    # 2 January 2026 is a Friday; the next fire after its last is Monday the 5th.
    assert office_hours().next_fire_time_after(utc(2026, 1, 2, 10)) == utc(2026, 1, 5, 9)


def test_each_day_restarts_at_the_start_time_of_day() -> None:
    trigger = office_hours(repeat_interval=25)
    assert walk(trigger, utc(2026, 1, 1, 9, 30), 3) == [
        utc(2026, 1, 1, 9, 50),
        utc(2026, 1, 2, 9, 0),
        utc(2026, 1, 2, 9, 25),
    ]


def test_times_of_day_are_read_in_the_zone() -> None:
    trigger = office_hours(time_zone="Europe/Berlin")
    assert trigger.next_fire_time_after(utc(2026, 1, 1)) == utc(2026, 1, 1, 8)  # 09:00 CET


def test_start_time_of_day_in_a_gap_reads_with_the_offset_before_it() -> None:
    trigger = DailyTimeIntervalTrigger(
        start_at=utc(2026, 3, 28),
        start_time_of_day=time(2, 30),
        end_time_of_day=time(2, 30),
        repeat_interval_unit="HOUR",
        time_zone="Europe/Berlin",
    )
    # 29 March: 02:30 does not exist; with CET it is 01:30 UTC (03:30 CEST).
    assert walk(trigger, utc(2026, 3, 28, 12), 2) == [
        utc(2026, 3, 29, 1, 30),
        utc(2026, 3, 30, 0, 30),
    ]


def test_repeat_count_counts_repeats_over_all_days() -> None:
    trigger = office_hours(repeat_count=4)
    trigger.compute_first_fire_time()
    fires = []
    while trigger.next_fire_time is not None:
        fires.append(trigger.next_fire_time)
        trigger.triggered()
    assert fires == [
        utc(2026, 1, 1, 9, 0),
        utc(2026, 1, 1, 9, 20),
        utc(2026, 1, 1, 9, 40),
        utc(2026, 1, 1, 10, 0),
        utc(2026, 1, 2, 9, 0),
    ]


def test_start_and_end_bound_the_fire_times() -> None:
    trigger = office_hours(start_at=utc(2026, 1, 1, 9, 30), end_at=utc(2026, 1, 2, 9, 0))
    assert walk(trigger, utc(2025, 1, 1), 5) == [
        utc(2026, 1, 1, 9, 40),
        utc(2026, 1, 1, 10, 0),
        utc(2026, 1, 2, 9, 0),
    ]


def test_day_units_are_invalid() -> None:
    with pytest.raises(InvalidTriggerError, match="SECOND, MINUTE or HOUR"):
        office_hours(repeat_interval_unit="DAY").validate()


def test_start_of_day_after_end_of_day_is_invalid() -> None:
    with pytest.raises(InvalidTriggerError, match="start_time_of_day"):
        office_hours(start_time_of_day=time(11)).validate()


def test_detail_round_trips_through_the_kind_registry() -> None:
    trigger = office_hours(time_zone="Europe/Berlin", repeat_count=9)
    rebuilt = TRIGGER_KINDS["DAILY_I"].from_detail(trigger.detail(), start_at=trigger.start_at)
    assert rebuilt.detail() == trigger.detail()
    assert rebuilt.next_fire_time_after(utc(2026, 1, 1)) == utc(2026, 1, 1, 8)


def test_a_repeated_time_of_day_reads_at_its_first_pass_and_the_day_runs_on_elapsed_time() -> None:
    # 25 October 2026, Berlin: 03:00 CEST becomes 02:00 CET at 01:00 UTC; 02:00-02:59 repeats.
    trigger = DailyTimeIntervalTrigger(
        start_at=utc(2026, 10, 24, 22),  # local midnight
        end_at=utc(2026, 10, 25, 12),
        start_time_of_day=time(1, 40),
        end_time_of_day=time(2, 30),
        repeat_interval=20,
        repeat_interval_unit="MINUTE",
        time_zone="Europe/Berlin",
    )
    # 01:40 CEST is 23:40 UTC; the end, 02:30, is read at its first pass (00:30 UTC): fifty
    # minutes of elapsed time, not the hour and fifty minutes the wall clock shows at the second.
    assert walk(trigger, utc(2026, 10, 24, 12), 5) == [
        utc(2026, 10, 24, 23, 40),
        utc(2026, 10, 25, 0, 0),
        utc(2026, 10, 25, 0, 20),
    ]
