"""SimpleTrigger: Quartz's start/interval/count arithmetic and its misfire instructions."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from celery_quartz.errors import InvalidTriggerError
from celery_quartz.keys import TriggerKey
from celery_quartz.triggers import (
    REPEAT_INDEFINITELY,
    TRIGGER_KINDS,
    SimpleMisfireInstruction,
    SimpleTrigger,
)

UTC = timezone.utc
START = datetime(2026, 1, 1, 0, 0, tzinfo=UTC)
M = SimpleMisfireInstruction


def at(minute: int, second: int = 0) -> datetime:
    return START + timedelta(minutes=minute, seconds=second)


def every_minute(count: int = REPEAT_INDEFINITELY, **kw: object) -> SimpleTrigger:
    return SimpleTrigger(
        start_at=START, repeat_interval=timedelta(minutes=1), repeat_count=count, **kw
    )


def test_first_fire_time_is_the_start_time() -> None:
    assert every_minute().next_fire_time_after(START - timedelta(hours=5)) == START


def test_fire_times_are_start_plus_whole_intervals() -> None:
    assert every_minute().next_fire_time_after(at(3, 30)) == at(4)


def test_an_instant_on_a_fire_time_gives_the_next_one() -> None:
    assert every_minute().next_fire_time_after(at(4)) == at(5)


def test_repeat_count_counts_repeats_after_the_first_fire() -> None:
    trigger = every_minute(count=2)
    assert trigger.next_fire_time_after(at(1)) == at(2)
    assert trigger.next_fire_time_after(at(2)) is None


def test_one_shot_trigger_has_nothing_after_its_start() -> None:
    trigger = SimpleTrigger(start_at=START)
    assert trigger.next_fire_time_after(START - timedelta(seconds=1)) == START
    assert trigger.next_fire_time_after(START) is None


def test_end_time_is_exclusive() -> None:
    trigger = every_minute(end_at=at(3))
    assert trigger.next_fire_time_after(at(1)) == at(2)
    assert trigger.next_fire_time_after(at(2)) is None


def test_fire_times_ignore_daylight_saving() -> None:
    start = datetime(2026, 3, 29, 0, 30, tzinfo=UTC)  # Berlin springs forward at 01:00 UTC
    trigger = SimpleTrigger(start_at=start, repeat_interval=timedelta(hours=1), repeat_count=-1)
    assert trigger.next_fire_time_after(start) == datetime(2026, 3, 29, 1, 30, tzinfo=UTC)


def test_an_aware_non_utc_start_is_returned_in_utc() -> None:
    helsinki = timezone(timedelta(hours=2))
    trigger = SimpleTrigger(start_at=datetime(2026, 1, 1, 2, 0, tzinfo=helsinki))
    first = trigger.next_fire_time_after(datetime(2025, 1, 1, tzinfo=UTC))
    assert first == START and first.tzinfo is UTC


def test_a_trigger_without_start_has_no_fire_time_to_compute() -> None:
    with pytest.raises(InvalidTriggerError, match="start_at"):
        SimpleTrigger(repeat_count=0).next_fire_time_after(START)


def test_a_repeating_trigger_needs_a_positive_interval() -> None:
    with pytest.raises(InvalidTriggerError, match="repeat_interval"):
        SimpleTrigger(start_at=START, repeat_count=3).validate()


def test_repeat_count_below_minus_one_is_invalid() -> None:
    with pytest.raises(InvalidTriggerError, match="repeat_count"):
        SimpleTrigger(start_at=START, repeat_count=-2, repeat_interval=timedelta(1)).validate()


def test_a_trigger_built_without_a_key_gets_one() -> None:
    assert isinstance(SimpleTrigger(start_at=START).key, TriggerKey)
    assert SimpleTrigger(start_at=START).key != SimpleTrigger(start_at=START).key


def test_detail_round_trips_through_the_kind_registry() -> None:
    trigger = every_minute(count=7, priority=9, end_at=at(30))
    trigger.times_triggered = 3
    common = {
        name: getattr(trigger, name)
        for name in ("key", "start_at", "end_at", "priority", "times_triggered")
    }
    rebuilt = TRIGGER_KINDS["SIMPLE"].from_detail(trigger.detail(), **common)
    assert isinstance(rebuilt, SimpleTrigger)
    assert (rebuilt.repeat_interval, rebuilt.repeat_count) == (timedelta(minutes=1), 7)
    assert rebuilt.next_fire_time_after(at(4)) == at(5)


def test_compute_first_fire_time_and_triggered_walk_the_schedule() -> None:
    trigger = every_minute(count=1)
    assert trigger.compute_first_fire_time() == START
    trigger.triggered()
    assert (trigger.previous_fire_time, trigger.next_fire_time) == (START, at(1))
    trigger.triggered()
    assert trigger.next_fire_time is None and trigger.times_triggered == 2


# -- misfires ----------------------------------------------------------------------------------

NOW = at(10, 30)


def misfired(count: int, instruction: int, triggered: int = 2) -> SimpleTrigger:
    """A trigger that fired ``triggered`` times and then missed ``at(triggered)``."""
    trigger = every_minute(count=count, misfire_instruction=instruction)
    trigger.times_triggered = triggered
    trigger.next_fire_time = at(triggered)
    return trigger


def test_smart_policy_on_a_one_shot_trigger_fires_now() -> None:
    trigger = SimpleTrigger(start_at=START)
    trigger.next_fire_time = START
    trigger.update_after_misfire(NOW)
    assert trigger.next_fire_time == NOW


def test_smart_policy_on_a_forever_trigger_skips_to_the_next_occurrence() -> None:
    trigger = misfired(REPEAT_INDEFINITELY, M.SMART_POLICY)
    trigger.update_after_misfire(NOW)
    assert trigger.next_fire_time == at(11)
    assert trigger.times_triggered == 2 + 9  # the nine skipped occurrences count as fired


def test_smart_policy_on_a_counted_trigger_fires_now_keeping_the_remaining_count() -> None:
    trigger = misfired(20, M.SMART_POLICY)
    trigger.update_after_misfire(NOW)
    assert (trigger.next_fire_time, trigger.start_at) == (NOW, NOW)
    assert (trigger.repeat_count, trigger.times_triggered) == (18, 0)


def test_fire_now_on_a_repeating_trigger_subtracts_the_missed_occurrences() -> None:
    trigger = misfired(20, M.FIRE_NOW)
    trigger.update_after_misfire(NOW)
    # 2 fired, 8 whole intervals missed between 00:02 and 00:10:30: 20 - 10 remain.
    assert (trigger.next_fire_time, trigger.repeat_count, trigger.times_triggered) == (NOW, 10, 0)


def test_reschedule_now_with_remaining_count_never_goes_below_zero() -> None:
    trigger = misfired(5, M.RESCHEDULE_NOW_WITH_REMAINING_REPEAT_COUNT)
    trigger.update_after_misfire(NOW)
    assert (trigger.next_fire_time, trigger.repeat_count) == (NOW, 0)


def test_reschedule_now_past_the_end_time_ends_the_trigger() -> None:
    trigger = misfired(20, M.RESCHEDULE_NOW_WITH_EXISTING_REPEAT_COUNT)
    trigger.end_at = at(5)
    trigger.update_after_misfire(NOW)
    assert trigger.next_fire_time is None


def test_reschedule_next_with_existing_count_keeps_times_triggered() -> None:
    trigger = misfired(20, M.RESCHEDULE_NEXT_WITH_EXISTING_COUNT)
    trigger.update_after_misfire(NOW)
    assert (trigger.next_fire_time, trigger.times_triggered) == (at(11), 2)


def test_reschedule_next_with_remaining_count_ends_when_the_count_is_spent() -> None:
    trigger = misfired(5, M.RESCHEDULE_NEXT_WITH_REMAINING_COUNT)
    trigger.update_after_misfire(NOW)
    assert trigger.next_fire_time is None


def test_ignore_misfire_policy_leaves_the_trigger_alone() -> None:
    trigger = misfired(20, M.IGNORE_MISFIRE_POLICY)
    trigger.update_after_misfire(NOW)
    assert (trigger.next_fire_time, trigger.times_triggered) == (at(2), 2)


def test_unknown_misfire_instruction_is_invalid() -> None:
    with pytest.raises(InvalidTriggerError, match="misfire"):
        every_minute(misfire_instruction=7).validate()


# -- seed 004, "Do not start a trigger in the past" --------------------------------------------


def test_a_one_shot_trigger_started_in_the_past_fires_immediately_on_the_default() -> None:
    trigger = SimpleTrigger(start_at=START - timedelta(days=90))
    first = trigger.compute_first_fire_time()
    assert first == START - timedelta(days=90)  # already behind any misfire threshold
    trigger.update_after_misfire(NOW)
    assert trigger.next_fire_time == NOW


def test_a_forever_trigger_started_in_the_past_resumes_in_its_old_phase() -> None:
    trigger = SimpleTrigger(
        start_at=START - timedelta(days=90, seconds=20),
        repeat_interval=timedelta(minutes=1),
        repeat_count=REPEAT_INDEFINITELY,
    )
    trigger.compute_first_fire_time()
    trigger.update_after_misfire(NOW)
    assert trigger.next_fire_time == NOW + timedelta(seconds=10)  # :40 past, as it always was


def test_a_number_as_repeat_interval_is_seconds() -> None:
    trigger = SimpleTrigger(start_at=START, repeat_interval=90, repeat_count=-1)  # type: ignore[arg-type]
    assert trigger.repeat_interval == timedelta(seconds=90)


def test_final_fire_time_of_a_counted_trigger() -> None:
    assert every_minute(count=3).final_fire_time() == at(3)


def test_final_fire_time_before_an_exclusive_end() -> None:
    assert every_minute(end_at=at(5)).final_fire_time() == at(4)
    assert every_minute(end_at=at(5, 3)).final_fire_time() == at(5)


def test_a_forever_trigger_without_end_has_no_final_fire_time() -> None:
    assert every_minute().final_fire_time() is None
