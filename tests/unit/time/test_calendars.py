"""Exclusion calendars: what each excludes, chaining, JSON, and triggers skipping them."""

from __future__ import annotations

import json
from datetime import date, time, timedelta, timezone

import pytest

from celery_quartz.calendars import (
    AnnualCalendar,
    Calendar,
    CronCalendar,
    DailyCalendar,
    HolidayCalendar,
    MonthlyCalendar,
    WeeklyCalendar,
    calendar_from_dict,
)
from celery_quartz.errors import InvalidTriggerError, ValidationError
from celery_quartz.triggers import CronMisfireInstruction, CronTrigger, SimpleTrigger
from tests.unit.conftest import utc

UTC = timezone.utc


# -- each calendar -----------------------------------------------------------------------------


def test_holiday_calendar_excludes_its_dates() -> None:
    holidays = HolidayCalendar([date(2026, 12, 25)])
    assert not holidays.is_time_included(utc(2026, 12, 25, 12))
    assert holidays.is_time_included(utc(2026, 12, 26, 0))


def test_holiday_dates_are_local_days_of_the_calendar_zone() -> None:
    holidays = HolidayCalendar([date(2026, 12, 25)], time_zone="Europe/Helsinki")
    assert not holidays.is_time_included(utc(2026, 12, 24, 22, 30))  # 00:30 on the 25th there
    assert holidays.next_included_time(utc(2026, 12, 25, 12)) == utc(2026, 12, 25, 22)


def test_weekly_calendar_excludes_the_weekend_by_default() -> None:
    weekly = WeeklyCalendar()
    assert not weekly.is_time_included(utc(2026, 1, 3, 12))  # Saturday
    assert weekly.next_included_time(utc(2026, 1, 3, 12)) == utc(2026, 1, 5)


def test_weekly_calendar_may_not_exclude_every_day() -> None:
    with pytest.raises(ValidationError, match="every day"):
        WeeklyCalendar(range(1, 8))


def test_monthly_calendar_excludes_days_of_the_month() -> None:
    monthly = MonthlyCalendar([1, 15])
    assert not monthly.is_time_included(utc(2026, 2, 15, 8))
    assert monthly.next_included_time(utc(2026, 2, 15, 8)) == utc(2026, 2, 16)


def test_annual_calendar_excludes_the_same_day_every_year() -> None:
    annual = AnnualCalendar([(1, 1)])
    assert not annual.is_time_included(utc(2031, 1, 1, 5))
    assert annual.is_time_included(utc(2031, 1, 2, 5))


def test_daily_calendar_excludes_a_stretch_of_every_day_inclusively() -> None:
    nights = DailyCalendar(time(0), time(6))
    assert not nights.is_time_included(utc(2026, 1, 1, 6, 0))
    assert nights.is_time_included(utc(2026, 1, 1, 6, 0, 1))


def test_inverted_daily_calendar_excludes_outside_the_stretch() -> None:
    office = DailyCalendar(time(9), time(17), invert=True)
    assert not office.is_time_included(utc(2026, 1, 1, 18))
    assert office.next_included_time(utc(2026, 1, 1, 18)) == utc(2026, 1, 2, 9)


def test_daily_calendar_next_included_time_is_just_after_the_stretch() -> None:
    lunch = DailyCalendar(time(12), time(13))
    assert lunch.next_included_time(utc(2026, 1, 1, 12, 30)) == utc(2026, 1, 1, 13) + timedelta(
        microseconds=1
    )


def test_cron_calendar_excludes_the_seconds_its_expression_matches() -> None:
    nights = CronCalendar("* * 0-5 ? * *")
    assert not nights.is_time_included(utc(2026, 1, 1, 3, 15, 7))
    assert nights.is_time_included(utc(2026, 1, 1, 6))
    assert nights.next_included_time(utc(2026, 1, 1, 3, 15, 7)) == utc(2026, 1, 1, 6)


def test_cron_calendar_next_included_time_crosses_whole_days() -> None:
    weekends = CronCalendar("* * * ? * SAT,SUN")
    assert weekends.next_included_time(utc(2026, 1, 3, 1)) == utc(2026, 1, 5)


# -- chaining ----------------------------------------------------------------------------------


def test_a_time_is_included_only_when_the_base_calendar_includes_it_too() -> None:
    chained = HolidayCalendar([date(2026, 12, 25)], base_calendar=WeeklyCalendar())
    assert not chained.is_time_included(utc(2026, 12, 26, 12))  # Saturday, by the base
    assert not chained.is_time_included(utc(2026, 12, 25, 12))  # the holiday itself
    assert chained.next_included_time(utc(2026, 12, 25, 12)) == utc(2026, 12, 28)


# -- JSON --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "calendar",
    [
        HolidayCalendar([date(2026, 12, 25), date(2027, 1, 1)], description="holidays"),
        WeeklyCalendar([1], time_zone="America/New_York"),
        MonthlyCalendar([31]),
        AnnualCalendar([(12, 24), (12, 31)]),
        DailyCalendar(time(8, 30), time(17, 0, 0, 500), invert=True, time_zone="Asia/Tokyo"),
        CronCalendar("0 * 1 ? * MON-FRI", base_calendar=HolidayCalendar([date(2026, 5, 1)])),
    ],
)
def test_every_calendar_round_trips_through_json(calendar: Calendar) -> None:
    text = json.dumps(calendar.to_dict())
    rebuilt = calendar_from_dict(json.loads(text))
    assert type(rebuilt) is type(calendar)
    assert rebuilt == calendar
    assert rebuilt.is_time_included(utc(2026, 5, 1, 1)) == calendar.is_time_included(
        utc(2026, 5, 1, 1)
    )


def test_an_unknown_calendar_type_is_refused() -> None:
    with pytest.raises(ValidationError, match="not a calendar"):
        calendar_from_dict({"type": "lunar"})


# -- triggers skip what a calendar excludes ----------------------------------------------------


def test_a_cron_trigger_skips_excluded_days() -> None:
    trigger = CronTrigger(expression="0 0 9 * * ?", start_at=utc(2026, 12, 24))
    holidays = HolidayCalendar([date(2026, 12, 25), date(2026, 12, 26)])
    assert trigger.compute_first_fire_time(holidays) == utc(2026, 12, 24, 9)
    trigger.triggered(holidays)
    assert trigger.next_fire_time == utc(2026, 12, 27, 9)


def test_a_simple_trigger_skips_excluded_times() -> None:
    trigger = SimpleTrigger(
        start_at=utc(2026, 1, 1, 11), repeat_interval=timedelta(hours=1), repeat_count=-1
    )
    lunch = DailyCalendar(time(12), time(13, 30))
    trigger.compute_first_fire_time(lunch)
    trigger.triggered(lunch)
    assert trigger.next_fire_time == utc(2026, 1, 1, 14)


def test_do_nothing_misfire_skips_excluded_times() -> None:
    trigger = CronTrigger(
        expression="0 0 9 * * ?", misfire_instruction=CronMisfireInstruction.DO_NOTHING
    )
    trigger.next_fire_time = utc(2026, 1, 1, 9)
    trigger.update_after_misfire(utc(2026, 1, 2, 10), WeeklyCalendar())  # Friday 2 January
    assert trigger.next_fire_time == utc(2026, 1, 5, 9)


def test_a_calendar_excluding_every_fire_time_leaves_no_fire_time() -> None:
    trigger = CronTrigger(expression="0 0 9 ? * SAT", start_at=utc(2026, 1, 1))
    assert trigger.compute_first_fire_time(WeeklyCalendar()) is None


def test_a_calendar_excluding_an_endless_schedule_is_reported() -> None:
    trigger = SimpleTrigger(
        start_at=utc(2026, 1, 3), repeat_interval=timedelta(days=7), repeat_count=-1
    )
    with pytest.raises(InvalidTriggerError, match="excludes every fire time"):
        trigger.compute_first_fire_time(WeeklyCalendar())
