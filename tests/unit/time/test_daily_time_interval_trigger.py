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
from tests.unit.conftest import utc

UTC = timezone.utc
BERLIN = ZoneInfo("Europe/Berlin")


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


def test_repeat_count_counts_repeats_per_day() -> None:
    # Quartz.NET: the repeat count limits each day's repeats after its first fire.
    assert walk(office_hours(repeat_count=2), utc(2026, 1, 1), 6) == [
        utc(2026, 1, 1, 9, 0),
        utc(2026, 1, 1, 9, 20),
        utc(2026, 1, 1, 9, 40),
        utc(2026, 1, 2, 9, 0),
        utc(2026, 1, 2, 9, 20),
        utc(2026, 1, 2, 9, 40),
    ]


def test_repeat_count_zero_fires_once_a_day_at_the_start_time_of_day() -> None:
    assert walk(office_hours(repeat_count=0), utc(2026, 1, 1), 3) == [
        utc(2026, 1, 1, 9, 0),
        utc(2026, 1, 2, 9, 0),
        utc(2026, 1, 5, 9, 0),
    ]


def test_times_triggered_does_not_end_a_counted_trigger() -> None:
    trigger = office_hours(repeat_count=1)
    trigger.compute_first_fire_time()
    fires = []
    for _ in range(5):
        fires.append(trigger.next_fire_time)
        trigger.triggered()
    assert fires == [
        utc(2026, 1, 1, 9, 0),
        utc(2026, 1, 1, 9, 20),
        utc(2026, 1, 2, 9, 0),
        utc(2026, 1, 2, 9, 20),
        utc(2026, 1, 5, 9, 0),
    ]


def test_a_once_a_day_trigger_fires_once_on_a_25_hour_day() -> None:
    # Berlin falls back on 25 October 2020. 00:01 plus 24 hours of elapsed time is 23:01 the
    # same day; Quartz.NET does not fire there, and neither do we.
    trigger = DailyTimeIntervalTrigger(
        start_at=utc(2020, 10, 20),
        start_time_of_day=time(0, 1),
        repeat_interval=24,
        repeat_interval_unit=IntervalUnit.HOUR,
        time_zone="Europe/Berlin",
    )
    local = [t.astimezone(BERLIN) for t in walk(trigger, utc(2020, 10, 23), 5)]
    assert [(t.day, t.hour, t.minute) for t in local] == [
        (24, 0, 1),
        (25, 0, 1),
        (26, 0, 1),
        (27, 0, 1),
        (28, 0, 1),
    ]


def test_an_hourly_trigger_fires_through_the_25th_hour() -> None:
    trigger = DailyTimeIntervalTrigger(
        start_at=utc(2020, 10, 20),
        start_time_of_day=time(0, 1),
        repeat_interval=1,
        repeat_interval_unit=IntervalUnit.HOUR,
        time_zone="Europe/Berlin",
    )
    fires = walk(trigger, utc(2020, 10, 24, 22), 26)  # from 00:01 CEST on the 25th
    on_the_day = [t for t in fires if t.astimezone(BERLIN).day == 25]
    assert len(on_the_day) == 25
    assert on_the_day[-1].astimezone(BERLIN).hour == 23


def test_final_fire_time_is_the_last_fire_at_or_before_the_end() -> None:
    assert office_hours(end_at=utc(2026, 1, 2, 9, 30)).final_fire_time() == utc(2026, 1, 2, 9, 20)
    # Sunday 4 January: back to Friday's last fire.
    assert office_hours(end_at=utc(2026, 1, 4, 12)).final_fire_time() == utc(2026, 1, 2, 10)
    assert office_hours(end_at=utc(2026, 1, 2, 9, 30), repeat_count=0).final_fire_time() == utc(
        2026, 1, 2, 9
    )


def test_final_fire_time_without_an_end_is_none() -> None:
    assert office_hours(repeat_count=3).final_fire_time() is None


def test_final_fire_time_before_the_start_is_none() -> None:
    trigger = office_hours(start_at=utc(2026, 1, 2, 9, 30), end_at=utc(2026, 1, 2, 9, 31))
    assert trigger.final_fire_time() is None


@pytest.mark.parametrize(
    ("interval", "unit"),
    [(25, IntervalUnit.HOUR), (1441, IntervalUnit.MINUTE), (86_401, IntervalUnit.SECOND)],
)
def test_an_interval_over_24_hours_is_refused(interval: int, unit: IntervalUnit) -> None:
    with pytest.raises(InvalidTriggerError, match="24 hours"):
        office_hours(repeat_interval=interval, repeat_interval_unit=unit).validate()


def test_an_interval_of_exactly_24_hours_is_accepted() -> None:
    office_hours(repeat_interval=24, repeat_interval_unit=IntervalUnit.HOUR).validate()


@pytest.mark.parametrize("name", ["start_time_of_day", "end_time_of_day"])
def test_a_time_of_day_with_fractional_seconds_is_refused(name: str) -> None:
    with pytest.raises(InvalidTriggerError, match=name):
        office_hours(**{name: time(9, 30, 0, 500_000)}).validate()


def test_a_stored_counted_trigger_reads_back_with_its_per_day_count() -> None:
    trigger = office_hours(repeat_count=1)
    again = TRIGGER_KINDS[trigger.kind].from_detail(trigger.detail(), start_at=trigger.start_at)
    assert again.detail() == trigger.detail()
    assert walk(again, utc(2026, 1, 1), 3) == walk(trigger, utc(2026, 1, 1), 3)


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
