"""The time before an instant and the next time an expression does not fire (Quartz.NET's API)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from celery_quartz.cron import CronExpression
from tests.unit.conftest import utc

UTC = timezone.utc
ONE = timedelta(seconds=1)


def test_time_before_a_daily_time_is_the_day_before() -> None:
    cron = CronExpression("0 30 2 * * ?")
    assert cron.time_before(utc(2026, 5, 17, 2, 30)) == utc(2026, 5, 16, 2, 30)
    assert cron.time_before(utc(2026, 5, 17, 2, 30, 0) + timedelta(microseconds=1)) == utc(
        2026, 5, 17, 2, 30
    )


def test_time_before_every_second_is_the_second_before() -> None:
    assert CronExpression("* * * * * ?").time_before(utc(2026, 1, 1)) == utc(
        2025, 12, 31, 23, 59, 59
    )


def test_time_before_a_rare_expression_reaches_back_years() -> None:
    cron = CronExpression("0 0 0 29 2 ?")
    assert cron.time_before(utc(2027, 1, 1)) == utc(2024, 2, 29)


def test_time_before_the_first_year_of_a_year_field_is_none() -> None:
    assert CronExpression("0 0 0 1 1 ? 2030").time_before(utc(2030, 1, 1)) is None
    assert CronExpression("0 0 0 1 1 ? 2030").time_before(utc(2031, 1, 1)) == utc(2030, 1, 1)


def test_time_before_a_spring_forward_day_is_the_gap_end() -> None:
    cron = CronExpression("0 30 2 * * ?", time_zone="Europe/Berlin")
    assert cron.time_before(utc(2026, 3, 29, 12)) == utc(2026, 3, 29, 1)


def test_next_invalid_time_after_a_run_of_seconds() -> None:
    cron = CronExpression("* * 9-17 * * ?")
    assert cron.next_invalid_time_after(utc(2026, 5, 17, 10, 15, 3)) == utc(2026, 5, 17, 18)


def test_next_invalid_time_of_a_time_that_does_not_fire_is_that_second() -> None:
    cron = CronExpression("0 0 12 * * ?")
    assert cron.next_invalid_time_after(utc(2026, 5, 17, 11, 0, 0, 500)) == utc(2026, 5, 17, 11)


def test_next_invalid_time_after_a_single_fire_time_is_one_second_later() -> None:
    cron = CronExpression("0 0 12 * * ?")
    assert cron.next_invalid_time_after(utc(2026, 5, 17, 12)) == utc(2026, 5, 17, 12, 0, 1)


def test_next_invalid_time_skips_whole_matching_days() -> None:
    cron = CronExpression("* * * ? * MON-FRI")
    # Monday 18 May 2026 to Friday 22 May: the first second not matched is Saturday 00:00.
    assert cron.next_invalid_time_after(utc(2026, 5, 18, 3)) == utc(2026, 5, 23)


_EXPRESSIONS = st.sampled_from(
    [
        "0 0 0 * * ?",
        "0 30 2 * * ?",
        "0 0/15 * * * ?",
        "0 0 0 L * ?",
        "0 0 12 LW-2,15W * ?",
        "0 0 0 ? * 6#5",
        "0 0 0 29 2 ?",
        "*/20 * 1-3 * * ?",
    ]
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    expression=_EXPRESSIONS,
    zone=st.sampled_from(["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"]),
    at=st.datetimes(
        min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
    ),
)
def test_time_before_is_the_fire_time_whose_successor_is_at_or_after_the_instant(
    expression: str, zone: str, at: datetime
) -> None:
    cron = CronExpression(expression, time_zone=zone)
    before = cron.time_before(at)
    assert before is not None
    assert before < at
    assert cron.is_satisfied_by(before)
    following = cron.next_valid_time_after(before)
    assert following is not None and following >= at


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    expression=st.sampled_from(["* 0-30 * * * ?", "* * 2 * * ?", "*/2 * * * * ?", "* * * ? * 2-6"]),
    zone=st.sampled_from(["UTC", "Europe/Berlin"]),
    at=st.datetimes(
        min_value=datetime(2020, 1, 1), max_value=datetime(2030, 1, 1), timezones=st.just(UTC)
    ),
)
def test_next_invalid_time_is_the_first_second_not_fired_at(
    expression: str, zone: str, at: datetime
) -> None:
    cron = CronExpression(expression, time_zone=zone)
    found = cron.next_invalid_time_after(at)
    start = at.replace(microsecond=0)
    if found is None:
        return
    assert found >= start and not cron.is_satisfied_by(found)
    t = start
    while t < found and t < start + timedelta(minutes=10):
        assert cron.is_satisfied_by(t)
        t += ONE
