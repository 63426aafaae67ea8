"""CalendarIntervalTrigger: fixed units are lengths of time, days and longer are calendar steps."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from celery_quartz.errors import InvalidTriggerError
from celery_quartz.triggers import (
    TRIGGER_KINDS,
    CalendarIntervalTrigger,
    CronMisfireInstruction,
    IntervalUnit,
)
from tests.unit.conftest import utc

UTC = timezone.utc
BERLIN = ZoneInfo("Europe/Berlin")


def berlin(*args: int) -> datetime:
    return datetime(*args, tzinfo=BERLIN)


def walk(trigger: CalendarIntervalTrigger, after: datetime, n: int) -> list[datetime]:
    out = []
    for _ in range(n):
        nxt = trigger.next_fire_time_after(after)
        if nxt is None:
            break
        out.append(nxt)
        after = nxt
    return out


def test_hours_are_exact_lengths_of_time_across_daylight_saving() -> None:
    trigger = CalendarIntervalTrigger(
        start_at=utc(2026, 3, 29, 0),
        repeat_interval=1,
        repeat_interval_unit=IntervalUnit.HOUR,
        time_zone="Europe/Berlin",
    )
    assert walk(trigger, utc(2026, 3, 29, 0), 2) == [utc(2026, 3, 29, 1), utc(2026, 3, 29, 2)]


def test_the_start_is_the_first_fire_time() -> None:
    trigger = CalendarIntervalTrigger(start_at=utc(2026, 1, 1, 9), repeat_interval_unit="MINUTE")
    assert trigger.next_fire_time_after(utc(2025, 1, 1)) == utc(2026, 1, 1, 9)


def test_every_90_seconds() -> None:
    trigger = CalendarIntervalTrigger(
        start_at=utc(2026, 1, 1), repeat_interval=90, repeat_interval_unit="SECOND"
    )
    assert trigger.next_fire_time_after(utc(2026, 1, 1, 0, 2)) == utc(2026, 1, 1, 0, 3)


def test_days_without_preserving_the_hour_follow_the_start_offset() -> None:
    # Quartz's default: 09:00 CET steps 24 hours at a time, so it reads 10:00 in summer time.
    trigger = CalendarIntervalTrigger(start_at=berlin(2026, 3, 28, 9), time_zone="Europe/Berlin")
    assert walk(trigger, berlin(2026, 3, 28, 9), 2) == [utc(2026, 3, 29, 8), utc(2026, 3, 30, 8)]


def test_days_preserving_the_hour_keep_the_wall_clock_time() -> None:
    trigger = CalendarIntervalTrigger(
        start_at=berlin(2026, 3, 28, 9),
        time_zone="Europe/Berlin",
        preserve_hour_of_day_across_daylight_savings=True,
    )
    assert walk(trigger, berlin(2026, 3, 28, 9), 2) == [utc(2026, 3, 29, 7), utc(2026, 3, 30, 7)]


def test_preserved_hour_that_does_not_exist_fires_when_the_gap_ends() -> None:
    trigger = CalendarIntervalTrigger(
        start_at=berlin(2026, 3, 27, 2, 30),
        time_zone="Europe/Berlin",
        preserve_hour_of_day_across_daylight_savings=True,
    )
    assert walk(trigger, berlin(2026, 3, 28, 2, 30), 2) == [
        utc(2026, 3, 29, 1, 0),  # 03:00 CEST: 02:30 does not exist
        utc(2026, 3, 30, 0, 30),  # 02:30 CEST
    ]


def test_preserved_hour_that_does_not_exist_can_skip_the_day() -> None:
    trigger = CalendarIntervalTrigger(
        start_at=berlin(2026, 3, 27, 2, 30),
        time_zone="Europe/Berlin",
        preserve_hour_of_day_across_daylight_savings=True,
        skip_day_if_hour_does_not_exist=True,
    )
    assert walk(trigger, berlin(2026, 3, 28, 2, 30), 1) == [utc(2026, 3, 30, 0, 30)]


def test_preserved_hour_repeated_by_fall_back_fires_at_the_first_pass() -> None:
    trigger = CalendarIntervalTrigger(
        start_at=berlin(2026, 10, 24, 2, 30),
        time_zone="Europe/Berlin",
        preserve_hour_of_day_across_daylight_savings=True,
    )
    assert walk(trigger, berlin(2026, 10, 24, 2, 30), 1) == [utc(2026, 10, 25, 0, 30)]


def test_weeks() -> None:
    trigger = CalendarIntervalTrigger(
        start_at=utc(2026, 1, 5, 9), repeat_interval=2, repeat_interval_unit=IntervalUnit.WEEK
    )
    assert walk(trigger, utc(2026, 1, 5, 9), 2) == [utc(2026, 1, 19, 9), utc(2026, 2, 2, 9)]


def test_months_keep_the_day_of_month_clamped_to_shorter_months() -> None:
    trigger = CalendarIntervalTrigger(start_at=utc(2026, 1, 31, 12), repeat_interval_unit="MONTH")
    assert walk(trigger, utc(2026, 1, 31, 12), 3) == [
        utc(2026, 2, 28, 12),
        utc(2026, 3, 31, 12),
        utc(2026, 4, 30, 12),
    ]


def test_years_from_a_leap_day() -> None:
    trigger = CalendarIntervalTrigger(start_at=utc(2024, 2, 29), repeat_interval_unit="YEAR")
    assert walk(trigger, utc(2024, 2, 29), 4) == [
        utc(2025, 2, 28),
        utc(2026, 2, 28),
        utc(2027, 2, 28),
        utc(2028, 2, 29),
    ]


def test_a_question_years_later_is_answered_in_phase() -> None:
    trigger = CalendarIntervalTrigger(
        start_at=utc(2000, 1, 1, 6), repeat_interval=3, repeat_interval_unit="DAY"
    )
    # 2026-01-01 is 9497 days after 2000-01-01; the next multiple of 3 is day 9498.
    assert trigger.next_fire_time_after(utc(2026, 1, 1)) == utc(2026, 1, 2, 6)


def test_end_time_is_exclusive() -> None:
    trigger = CalendarIntervalTrigger(
        start_at=utc(2026, 1, 1), end_at=utc(2026, 1, 3), repeat_interval_unit="DAY"
    )
    assert walk(trigger, utc(2026, 1, 1), 3) == [utc(2026, 1, 2)]


def test_interval_below_one_is_invalid() -> None:
    with pytest.raises(InvalidTriggerError, match="repeat_interval"):
        CalendarIntervalTrigger(start_at=utc(2026, 1, 1), repeat_interval=0).validate()


def test_detail_round_trips_through_the_kind_registry() -> None:
    trigger = CalendarIntervalTrigger(
        start_at=berlin(2026, 3, 28, 9),
        repeat_interval=2,
        repeat_interval_unit="DAY",
        time_zone="Europe/Berlin",
        preserve_hour_of_day_across_daylight_savings=True,
        skip_day_if_hour_does_not_exist=True,
    )
    rebuilt = TRIGGER_KINDS["CAL_INT"].from_detail(trigger.detail(), start_at=trigger.start_at)
    assert rebuilt.detail() == trigger.detail()
    assert rebuilt.next_fire_time_after(utc(2026, 3, 29)) == utc(2026, 3, 30, 7)


def test_do_nothing_resumes_at_the_next_occurrence_after_now() -> None:
    trigger = CalendarIntervalTrigger(
        start_at=utc(2026, 1, 1, 9),
        repeat_interval_unit="DAY",
        misfire_instruction=CronMisfireInstruction.DO_NOTHING,
    )
    trigger.next_fire_time = utc(2026, 1, 2, 9)
    trigger.update_after_misfire(utc(2026, 1, 4, 10))
    assert trigger.next_fire_time == utc(2026, 1, 5, 9)


def test_smart_policy_fires_once_now_then_keeps_the_time_of_day() -> None:
    trigger = CalendarIntervalTrigger(start_at=utc(2026, 1, 1, 9), repeat_interval_unit="DAY")
    trigger.next_fire_time = utc(2026, 1, 2, 9)
    trigger.update_after_misfire(utc(2026, 1, 4, 10))
    assert trigger.next_fire_time == utc(2026, 1, 4, 10)
    trigger.triggered()
    assert trigger.next_fire_time == utc(2026, 1, 5, 9)


def test_final_fire_time_is_an_end_that_is_itself_a_fire_time() -> None:
    # Quartz.NET's CalendarIntervalTriggerTest.TestFinalFireTimes: every 5 days, an end 10 days
    # after the start is the final fire time; every 5 minutes, an end 2 minutes short of a fire
    # time leaves the one 5 minutes before it.
    start = utc(2010, 3, 12, 9)
    daily = CalendarIntervalTrigger(
        start_at=start, repeat_interval=5, repeat_interval_unit=IntervalUnit.DAY,
        end_at=start + timedelta(days=10),
    )  # fmt: skip
    assert daily.final_fire_time() == start + timedelta(days=10)
    end = start + timedelta(days=15, minutes=-2)
    minutely = CalendarIntervalTrigger(
        start_at=start, repeat_interval=5, repeat_interval_unit=IntervalUnit.MINUTE, end_at=end
    )
    assert minutely.final_fire_time() == end - timedelta(minutes=3)


def test_the_trigger_does_not_fire_at_an_end_that_is_its_final_fire_time() -> None:
    start = utc(2010, 3, 12, 9)
    trigger = CalendarIntervalTrigger(
        start_at=start, repeat_interval=5, repeat_interval_unit=IntervalUnit.DAY,
        end_at=start + timedelta(days=10),
    )  # fmt: skip
    assert walk(trigger, start, 5) == [start + timedelta(days=5)]


def test_final_fire_time_of_fixed_units_is_the_last_at_or_before_the_end() -> None:
    trigger = CalendarIntervalTrigger(
        start_at=utc(2026, 1, 1), repeat_interval=90, repeat_interval_unit=IntervalUnit.SECOND,
        end_at=utc(2026, 1, 1, 0, 29, 59),
    )  # fmt: skip
    assert trigger.final_fire_time() == utc(2026, 1, 1, 0, 28, 30)
    trigger.end_at = utc(2026, 1, 1, 0, 30)
    assert trigger.final_fire_time() == utc(2026, 1, 1, 0, 30)


def test_final_fire_time_of_months_is_the_last_clamped_month_at_or_before_the_end() -> None:
    trigger = CalendarIntervalTrigger(
        start_at=utc(2026, 1, 31), repeat_interval=1, repeat_interval_unit=IntervalUnit.MONTH,
        end_at=utc(2026, 4, 30, 12),
    )  # fmt: skip
    assert trigger.final_fire_time() == utc(2026, 4, 30)
    trigger.end_at = utc(2026, 3, 30, 23)
    assert trigger.final_fire_time() == utc(2026, 2, 28)


def test_final_fire_time_skips_a_day_whose_hour_does_not_exist() -> None:
    trigger = CalendarIntervalTrigger(
        start_at=berlin(2026, 3, 27, 2, 30), repeat_interval=1,
        repeat_interval_unit=IntervalUnit.DAY, time_zone="Europe/Berlin",
        preserve_hour_of_day_across_daylight_savings=True, skip_day_if_hour_does_not_exist=True,
        end_at=berlin(2026, 3, 29, 12),
    )  # fmt: skip
    assert trigger.final_fire_time() == berlin(2026, 3, 28, 2, 30)


def test_final_fire_time_without_an_end_is_none() -> None:
    trigger = CalendarIntervalTrigger(start_at=utc(2026, 1, 1), repeat_interval=1)
    assert trigger.final_fire_time() is None
