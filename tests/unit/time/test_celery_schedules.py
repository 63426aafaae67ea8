"""Translating Celery beat schedules into triggers."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from celery import Celery
from celery.schedules import crontab, schedule, solar

from celery_quartz.celery_schedules import trigger_from_celery_schedule
from celery_quartz.errors import ValidationError
from celery_quartz.keys import TriggerKey
from celery_quartz.triggers import (
    REPEAT_INDEFINITELY,
    CalendarIntervalTrigger,
    CronTrigger,
    SimpleTrigger,
)

UTC = timezone.utc
NOW = datetime(2026, 5, 4, 10, 17, 23, 500000, tzinfo=UTC)
KEY = TriggerKey("report", "celery.beat_schedule")


def translate(value: object, zone: str = "UTC"):  # type: ignore[no-untyped-def]
    return trigger_from_celery_schedule(
        value, entry_name="report", key=KEY, default_time_zone=zone, now=NOW
    )


def test_a_number_of_seconds_first_fires_one_interval_after_now() -> None:
    trigger = translate(30)
    assert isinstance(trigger, SimpleTrigger)
    assert trigger.start_at == NOW + timedelta(seconds=30)
    assert (trigger.repeat_interval, trigger.repeat_count) == (
        timedelta(seconds=30),
        REPEAT_INDEFINITELY,
    )


def test_a_timedelta_repeats_forever() -> None:
    trigger = translate(timedelta(minutes=5))
    assert trigger.next_fire_time_after(NOW + timedelta(minutes=5)) == NOW + timedelta(minutes=10)


def test_the_trigger_keeps_the_given_key() -> None:
    assert translate(10).key == KEY


def test_a_schedule_object_is_its_interval() -> None:
    trigger = translate(schedule(timedelta(hours=2)))
    assert trigger.start_at == NOW + timedelta(hours=2)


def test_a_relative_schedule_lands_on_whole_minutes() -> None:
    trigger = translate(schedule(timedelta(minutes=10), relative=True))
    assert trigger.start_at == datetime(2026, 5, 4, 10, 27, tzinfo=UTC)


def test_a_relative_schedule_lands_on_whole_hours() -> None:
    trigger = translate(schedule(timedelta(hours=1), relative=True))
    assert trigger.start_at == datetime(2026, 5, 4, 11, 0, tzinfo=UTC)


def test_a_relative_schedule_of_uneven_units_is_refused() -> None:
    with pytest.raises(ValidationError, match=r"'report'.*whole number"):
        translate(schedule(timedelta(minutes=90), relative=True))


def test_a_non_positive_interval_is_refused_naming_the_entry() -> None:
    with pytest.raises(ValidationError, match="beat entry 'report'"):
        translate(0)


def test_crontab_fires_at_second_zero_in_the_default_zone() -> None:
    trigger = translate(crontab(minute=30, hour=4), zone="Europe/Helsinki")
    assert isinstance(trigger, CronTrigger)
    assert trigger.expression == "0 30 4 * * ?"
    assert trigger.next_fire_time_after(NOW) == datetime(2026, 5, 5, 1, 30, tzinfo=UTC)


def test_crontab_day_of_week_is_renumbered_from_celery() -> None:
    trigger = translate(crontab(minute=0, hour=0, day_of_week="sunday"))
    assert trigger.expression == "0 0 0 ? * 1"
    assert trigger.next_fire_time_after(NOW) == datetime(2026, 5, 10, tzinfo=UTC)  # a Sunday


def test_crontab_keeps_a_step_so_it_stays_an_interval_expression() -> None:
    trigger = translate(crontab(minute="*/15"))
    assert trigger.expression == "0 */15 * * * ?"


def test_crontab_restricting_both_day_fields_is_refused() -> None:
    with pytest.raises(ValidationError, match=r"'report'.*both"):
        translate(crontab(day_of_week="mon", day_of_month="1-7"))


def test_crontab_uses_its_apps_time_zone() -> None:
    app = Celery(set_as_current=False)
    app.conf.timezone = "America/New_York"
    trigger = translate(crontab(minute=0, hour=9, app=app), zone="UTC")
    assert trigger.time_zone == "America/New_York"
    assert trigger.next_fire_time_after(NOW) == datetime(2026, 5, 4, 13, 0, tzinfo=UTC)


def test_an_unknown_schedule_type_is_refused_naming_the_entry() -> None:
    with pytest.raises(ValidationError, match="beat entry 'report'"):
        translate("every day")


def test_a_relative_schedule_of_days_runs_at_local_midnight() -> None:
    trigger = translate(schedule(timedelta(days=2), relative=True), zone="Europe/Helsinki")
    assert isinstance(trigger, CalendarIntervalTrigger)
    # NOW is 13:17 in Helsinki on 4 May; two days on, midnight there is 21:00 UTC on the 5th.
    assert trigger.start_at == datetime(2026, 5, 5, 21, 0, tzinfo=UTC)
    assert trigger.next_fire_time_after(trigger.start_at) == datetime(2026, 5, 7, 21, tzinfo=UTC)


def test_a_relative_daily_schedule_keeps_midnight_across_daylight_saving() -> None:
    trigger = trigger_from_celery_schedule(
        schedule(timedelta(days=1), relative=True),
        entry_name="report",
        key=KEY,
        default_time_zone="Europe/Helsinki",
        now=datetime(2026, 10, 20, 12, tzinfo=UTC),
    )
    after = datetime(2026, 10, 24, 21, 30, tzinfo=UTC)  # 00:30 on 25 October, still summer time
    assert trigger.next_fire_time_after(after) == datetime(2026, 10, 25, 22, 0, tzinfo=UTC)


def test_a_solar_schedule_is_refused_naming_the_entry() -> None:
    sunrise = solar.__new__(solar)  # celery's solar needs ephem only to compute, not to refuse
    sunrise.event = "sunrise"
    with pytest.raises(ValidationError, match=r"beat entry 'report'.*solar"):
        translate(sunrise)


def test_crontab_month_and_day_of_month() -> None:
    trigger = translate(crontab(minute=0, hour=6, day_of_month="1,15", month_of_year="1-3"))
    assert trigger.expression == "0 0 6 1,15 1-3 ?"
    assert trigger.next_fire_time_after(NOW) == datetime(2027, 1, 1, 6, tzinfo=UTC)


def test_crontab_names_in_day_of_week_are_renumbered() -> None:
    trigger = translate(crontab(minute=0, hour=8, day_of_week="mon-fri"))
    assert trigger.expression == "0 0 8 ? * 2-6"


def test_crontab_uses_the_zone_of_its_nowfun() -> None:
    def now_in_tokyo() -> datetime:
        return datetime(2026, 1, 1, tzinfo=ZoneInfo("Asia/Tokyo"))

    trigger = translate(crontab(minute=0, hour=9, nowfun=now_in_tokyo))
    assert trigger.time_zone == "Asia/Tokyo"
    assert trigger.next_fire_time_after(NOW) == datetime(2026, 5, 5, 0, 0, tzinfo=UTC)


def test_crontab_hour_list_stays_a_fixed_time_expression() -> None:
    trigger = translate(crontab(minute=30, hour="2,3"))
    assert isinstance(trigger, CronTrigger)
    assert trigger.expression == "0 30 2,3 * * ?"
    assert not trigger.cron_expression.is_interval
