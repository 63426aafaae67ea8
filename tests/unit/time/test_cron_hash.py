"""H tokens: a value drawn from the trigger's identity, the same on every node and process."""

from __future__ import annotations

import itertools
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import pytest

from celery_quartz.cron import CronExpression, hash_value
from celery_quartz.errors import CronSyntaxError
from celery_quartz.keys import TriggerKey
from celery_quartz.triggers import CronTrigger

UTC = timezone.utc


def _values(table: list[int]) -> set[int]:
    return {v for i, v in enumerate(table) if v == i}


def test_h_alone_is_one_value_in_the_field() -> None:
    cron = CronExpression("H H H * * ?", hash_key="reports.nightly")
    for table in (cron._seconds, cron._minutes):
        assert len(_values(table)) == 1
    assert len(_values(cron._hours)) == 1 and max(_values(cron._hours)) <= 23


def test_h_in_a_range_stays_in_the_range() -> None:
    for name in ("a", "b", "c", "d", "e", "f"):
        cron = CronExpression("0 H(0-29) H(9-17) * * ?", hash_key=name)
        assert _values(cron._minutes) <= set(range(30))
        assert _values(cron._hours) <= set(range(9, 18))


def test_h_with_a_step_starts_at_a_hashed_offset_below_the_step() -> None:
    cron = CronExpression("0 H/15 * * * ?", hash_key="cleanup")
    minutes = sorted(_values(cron._minutes))
    assert len(minutes) == 4 and minutes[0] < 15
    assert [b - a for a, b in itertools.pairwise(minutes)] == [15, 15, 15]


def test_the_value_is_the_documented_sha256_of_the_key_and_field() -> None:
    import hashlib

    digest = hashlib.sha256(b"DEFAULT.t1\x00minute").digest()
    expected = int.from_bytes(digest[:8], "big") % 60
    cron = CronExpression("0 H * * * ?", hash_key="DEFAULT.t1")
    assert _values(cron._minutes) == {expected}
    assert hash_value("DEFAULT.t1", "minute") % 60 == expected


def test_the_value_is_the_same_in_another_process() -> None:
    code = "from celery_quartz.cron import hash_value; print(hash_value('g.t', 'hour'))"
    other = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert int(other) == hash_value("g.t", "hour")


def test_many_triggers_spread_out() -> None:
    minutes = set()
    for i in range(200):
        cron = CronExpression("0 H * * * ?", hash_key=f"DEFAULT.trigger-{i}")
        minutes |= _values(cron._minutes)
    assert len(minutes) > 40


def _days_of_month(cron: CronExpression) -> set[int]:
    return _values(cron._day_table(2026, 1))  # January has every day 1-31


def _months(cron: CronExpression) -> set[int]:
    return _values(cron._months)


def _days_of_week(cron: CronExpression) -> set[int]:
    # 1 February 2026 is a Sunday, so the days of its first week are days-of-week 1-7.
    return {d for d in _values(cron._day_table(2026, 2)) if d <= 7}


@pytest.mark.parametrize(
    ("expression", "field", "size", "read"),
    [
        # Quartz.NET's CronExpressionHashTest: ResolveHash_DayOfMonthField_InRange1To31,
        # _MonthField_InRange1To12 and _DayOfWeekField_InRange1To7, over a hundred keys.
        ("* * * H * ?", "day-of-month", 31, _days_of_month),
        ("* * * ? H *", "month", 12, _months),
        ("* * * ? * H", "day-of-week", 7, _days_of_week),
    ],
)
def test_h_in_the_day_and_month_fields_is_one_value_from_1_to_the_fields_size(
    expression: str, field: str, size: int, read: Callable[[CronExpression], set[int]]
) -> None:
    seen = set()
    for i in range(100):
        key = f"reports.trigger-{i}"
        value = 1 + hash_value(key, field) % size
        assert read(CronExpression(expression, hash_key=key)) == {value}
        seen.add(value)
    assert len(seen) > size // 2


def test_a_hashed_day_of_week_fires_weekly_on_that_day() -> None:
    cron = CronExpression("0 0 9 ? * H", hash_key="reports.weekly")
    day = 1 + hash_value("reports.weekly", "day-of-week") % 7  # 1 = Sunday
    times = []
    after = datetime(2026, 1, 1, tzinfo=UTC)
    for _ in range(3):
        nxt = cron.next_valid_time_after(after)
        assert nxt is not None
        times.append(nxt)
        after = nxt
    assert {t.isoweekday() % 7 + 1 for t in times} == {day}
    assert [b - a for a, b in itertools.pairwise(times)] == [timedelta(days=7)] * 2


def test_h_with_a_step_in_the_month_and_day_fields_starts_below_the_step() -> None:
    cron = CronExpression("0 0 0 H/10 H(1-6)/3 ?", hash_key="k")
    months = sorted(_values(cron._months))
    assert len(months) == 2 and months[0] <= 3 and months[1] == months[0] + 3
    days = sorted(_values(cron._day_table(2026, 1)))
    assert days[0] <= 10 and days == list(range(days[0], 32, 10))


def test_h_beside_plain_days_and_last_day_forms_in_day_of_month() -> None:
    cron = CronExpression("0 0 0 H(2-9),L * ?", hash_key="k")
    day = 2 + hash_value("k", "day-of-month") % 8
    assert _values(cron._day_table(2026, 4)) == {day, 30}
    assert cron.hash_key == "k"


def test_a_day_name_with_an_h_in_it_is_not_a_hash_token() -> None:
    cron = CronExpression("0 0 0 ? * THU")
    assert cron.hash_key is None


def test_h_without_an_identity_is_a_syntax_error() -> None:
    with pytest.raises(CronSyntaxError, match="hash_key"):
        CronExpression("0 H * * * ?")


@pytest.mark.parametrize(
    ("expression", "field"),
    [
        ("0 0 0 1 * ? H", "year"),
        ("0 0 0 HW * ?", "day-of-month"),
        ("0 0 0 H(0-5) * ?", "day-of-month"),
        ("0 0 0 ? * H#2", "day-of-week"),
        ("0 0 0 ? * H(1-8)", "day-of-week"),
        ("0 0 0 1 H(1-13) ?", "month"),
        ("0 H(30-10) * * * ?", "minute"),
        ("0 H(0-60) * * * ?", "minute"),
        ("0 H/0 * * * ?", "minute"),
        ("0 HH * * * ?", "minute"),
        ("0 H(5) * * * ?", "minute"),
    ],
)
def test_misplaced_or_malformed_h_is_refused(expression: str, field: str) -> None:
    with pytest.raises(CronSyntaxError, match=f"{field} field"):
        CronExpression(expression, hash_key="k")


def test_a_fixed_h_time_is_not_an_interval_expression() -> None:
    assert not CronExpression("H H(0-29) H(1-4) * * ?", hash_key="k").is_interval
    assert CronExpression("0 H/10 2 * * ?", hash_key="k").is_interval


def test_the_cron_trigger_hashes_its_own_key() -> None:
    key = TriggerKey("nightly", "reports")
    trigger = CronTrigger(key=key, expression="0 H 2 * * ?")
    assert trigger.cron_expression == CronExpression("0 H 2 * * ?", hash_key="reports.nightly")
    fire = trigger.next_fire_time_after(datetime(2026, 1, 1, tzinfo=UTC))
    assert fire is not None and fire.hour == 2
    assert fire.minute == hash_value("reports.nightly", "minute") % 60


def test_a_stored_h_trigger_reads_back_with_the_same_fire_times() -> None:
    trigger = CronTrigger(key=TriggerKey("t", "g"), expression="H H/20 * * * ?")
    again = CronTrigger.from_detail(trigger.detail(), key=TriggerKey("t", "g"))
    after = datetime(2026, 5, 1, tzinfo=UTC)
    assert again.next_fire_time_after(after) == trigger.next_fire_time_after(after)


def test_the_unix_form_takes_h_in_minute_and_hour() -> None:
    from celery_quartz.cron import CronFormat

    cron = CronExpression("H H * * *", format=CronFormat.UNIX, hash_key="k")
    assert cron.expression == "0 H H * * ?"
