"""CronTrigger: an expression in a zone, bounded by start and end, with cron misfire handling."""

from __future__ import annotations

from datetime import timedelta, timezone

import pytest

from celery_quartz.errors import CronSyntaxError, InvalidTriggerError
from celery_quartz.triggers import TRIGGER_KINDS, CronMisfireInstruction, CronTrigger
from tests.unit.conftest import utc

UTC = timezone.utc
M = CronMisfireInstruction


def nightly(**kw: object) -> CronTrigger:
    return CronTrigger(expression="0 0 2 * * ?", time_zone="Europe/Helsinki", **kw)


def test_fires_at_the_wall_clock_time_of_its_zone() -> None:
    # 02:00 in Helsinki in January is 00:00 UTC (UTC+2).
    assert nightly().next_fire_time_after(utc(2026, 1, 10, 12)) == utc(2026, 1, 11, 0)


def test_zone_defaults_to_utc() -> None:
    trigger = CronTrigger(expression="0 0 2 * * ?")
    assert trigger.next_fire_time_after(utc(2026, 1, 10, 12)) == utc(2026, 1, 11, 2)


def test_start_time_is_inclusive() -> None:
    trigger = nightly(start_at=utc(2026, 1, 11, 0))
    assert trigger.next_fire_time_after(utc(2025, 6, 1)) == utc(2026, 1, 11, 0)


def test_end_time_is_inclusive_and_ends_the_schedule() -> None:
    trigger = nightly(end_at=utc(2026, 1, 11, 0))
    assert trigger.next_fire_time_after(utc(2026, 1, 10, 12)) == utc(2026, 1, 11, 0)
    assert trigger.next_fire_time_after(utc(2026, 1, 11, 0)) is None


def test_expression_is_stored_in_its_canonical_spelling() -> None:
    assert CronTrigger(expression="0  0 2 * *  ?").expression == "0 0 2 * * ?"


def test_a_bad_expression_is_refused_naming_the_trigger() -> None:
    with pytest.raises(CronSyntaxError, match=r"trigger .*hour"):
        CronTrigger(expression="0 0 25 * * ?")


def test_an_unknown_zone_is_refused() -> None:
    with pytest.raises(InvalidTriggerError, match="Mars/Olympus"):
        CronTrigger(expression="0 0 2 * * ?", time_zone="Mars/Olympus")


def test_detail_round_trips_through_the_kind_registry() -> None:
    trigger = nightly(priority=3)
    rebuilt = TRIGGER_KINDS["CRON"].from_detail(trigger.detail(), key=trigger.key, priority=3)
    assert isinstance(rebuilt, CronTrigger)
    assert (rebuilt.expression, rebuilt.time_zone) == ("0 0 2 * * ?", "Europe/Helsinki")
    assert rebuilt.next_fire_time_after(utc(2026, 1, 10)) == utc(2026, 1, 11, 0)


def test_compute_first_fire_time_uses_the_start_when_it_matches() -> None:
    trigger = nightly(start_at=utc(2026, 1, 11, 0))
    assert trigger.compute_first_fire_time() == utc(2026, 1, 11, 0)


def test_triggered_advances_to_the_next_night() -> None:
    trigger = nightly(start_at=utc(2026, 1, 11, 0))
    trigger.compute_first_fire_time()
    trigger.triggered()
    assert trigger.next_fire_time == utc(2026, 1, 12, 0)


NOW = utc(2026, 1, 11, 5, 17)


def missed(instruction: int) -> CronTrigger:
    trigger = nightly(misfire_instruction=instruction)
    trigger.next_fire_time = utc(2026, 1, 11, 0)
    return trigger


def test_smart_policy_fires_once_now() -> None:
    trigger = missed(M.SMART_POLICY)
    trigger.update_after_misfire(NOW)
    assert trigger.next_fire_time == NOW


def test_fire_once_now_fires_now() -> None:
    trigger = missed(M.FIRE_ONCE_NOW)
    trigger.update_after_misfire(NOW)
    assert trigger.next_fire_time == NOW


def test_do_nothing_resumes_at_the_next_occurrence_after_now() -> None:
    trigger = missed(M.DO_NOTHING)
    trigger.update_after_misfire(NOW)
    assert trigger.next_fire_time == utc(2026, 1, 12, 0)


def test_ignore_misfire_policy_keeps_the_missed_time() -> None:
    trigger = missed(M.IGNORE_MISFIRE_POLICY)
    trigger.update_after_misfire(NOW)
    assert trigger.next_fire_time == utc(2026, 1, 11, 0)


def test_a_simple_trigger_instruction_is_not_a_cron_one() -> None:
    with pytest.raises(InvalidTriggerError, match="misfire"):
        nightly(misfire_instruction=4).validate()


def test_fires_at_returns_true_only_for_fire_times() -> None:
    trigger = nightly()
    assert trigger.fires_at(utc(2026, 1, 11, 0))
    assert not trigger.fires_at(utc(2026, 1, 11, 0) + timedelta(seconds=1))


def test_final_fire_time_is_the_last_fire_at_or_before_the_end() -> None:
    trigger = nightly(start_at=utc(2026, 1, 1), end_at=utc(2026, 3, 10))
    assert trigger.final_fire_time() == utc(2026, 3, 10, 0)  # 02:00 in Helsinki
    trigger.end_at = utc(2026, 3, 9, 23, 59)
    assert trigger.final_fire_time() == utc(2026, 3, 9, 0)


def test_final_fire_time_of_an_expression_with_a_last_year() -> None:
    trigger = CronTrigger(expression="0 0 12 L * ? 2027", start_at=utc(2026, 1, 1))
    assert trigger.final_fire_time() == utc(2027, 12, 31, 12)


def test_final_fire_time_of_an_unbounded_expression_is_none() -> None:
    assert nightly(start_at=utc(2026, 1, 1)).final_fire_time() is None


def test_final_fire_time_before_the_start_is_none() -> None:
    trigger = nightly(start_at=utc(2026, 3, 10, 1), end_at=utc(2026, 3, 10, 12))
    assert trigger.final_fire_time() is None
