"""The decisions the store only records, as pure functions: no database, no clock.

A retry granted or dropped (:func:`celery_quartz.retry.decide_retry`), what becomes of a firing
whose message expired unstarted (:func:`celery_quartz.misfire.expired_firing_outcome`), and
Quartz's batch rule with admission against limits and pins
(:func:`celery_quartz.routing.take_batch`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from celery_quartz import RetryPolicy
from celery_quartz.clock import to_millis
from celery_quartz.misfire import expired_firing_outcome
from celery_quartz.retry import decide_retry
from celery_quartz.routing import HeldBack, Hold, Route, take_batch
from celery_quartz.triggers import CronMisfireInstruction, SimpleMisfireInstruction
from tests.unit.builders import cron, one_shot
from tests.unit.conftest import at

S = timedelta(seconds=1)
FAILED = to_millis(at(0))


def test_a_retry_runs_after_the_policys_delay() -> None:
    decision = decide_retry(
        RetryPolicy.fixed(3, 30 * S),
        1,
        failed_at_millis=FAILED,
        next_fire_millis=None,
        end_millis=None,
    )
    assert decision.granted
    assert decision.at_millis == FAILED + 30_000


def test_no_retry_once_the_policys_attempts_are_spent() -> None:
    decision = decide_retry(
        RetryPolicy.fixed(3, 30 * S),
        4,
        failed_at_millis=FAILED,
        next_fire_millis=None,
        end_millis=None,
    )
    assert not decision.granted
    assert decision.at_millis is None


def test_a_retry_within_a_second_of_the_next_occurrence_gives_way_to_it() -> None:
    decision = decide_retry(
        RetryPolicy.fixed(3, 30 * S),
        1,
        failed_at_millis=FAILED,
        next_fire_millis=FAILED + 30_500,
        end_millis=None,
    )
    assert not decision.granted
    assert decision.at_millis == FAILED + 30_000
    assert decision.dropped_because is not None
    assert "next occurrence" in decision.dropped_because


def test_a_retry_just_over_a_second_before_the_next_occurrence_runs() -> None:
    decision = decide_retry(
        RetryPolicy.fixed(3, 30 * S),
        1,
        failed_at_millis=FAILED,
        next_fire_millis=FAILED + 31_001,
        end_millis=None,
    )
    assert decision.granted


def test_a_retry_after_the_triggers_end_is_dropped() -> None:
    decision = decide_retry(
        RetryPolicy.fixed(3, 30 * S),
        1,
        failed_at_millis=FAILED,
        next_fire_millis=None,
        end_millis=FAILED + 29_999,
    )
    assert not decision.granted
    assert decision.dropped_because is not None
    assert "end" in decision.dropped_because


def test_no_policy_grants_no_retry() -> None:
    decision = decide_retry(
        RetryPolicy.NONE, 1, failed_at_millis=FAILED, next_fire_millis=None, end_millis=None
    )
    assert not decision.granted


def test_an_expired_firing_of_a_fire_once_now_trigger_is_published_again() -> None:
    trigger = cron("c", "0 * * * * ?", misfire=CronMisfireInstruction.FIRE_ONCE_NOW)
    assert expired_firing_outcome(trigger, recovering=False, expired_count=0).republish


def test_an_expired_firing_of_a_do_nothing_trigger_is_dropped() -> None:
    trigger = cron("c", "0 * * * * ?", misfire=CronMisfireInstruction.DO_NOTHING)
    outcome = expired_firing_outcome(trigger, recovering=False, expired_count=0)
    assert not outcome.republish
    assert "skips a missed occurrence" in outcome.why


def test_a_firing_that_expires_a_second_time_is_dropped_whatever_its_instruction() -> None:
    trigger = cron("c", "0 * * * * ?", misfire=CronMisfireInstruction.FIRE_ONCE_NOW)
    outcome = expired_firing_outcome(trigger, recovering=True, expired_count=1)
    assert not outcome.republish
    assert "expired again" in outcome.why


def test_a_recovery_firing_is_published_again_whatever_its_instruction() -> None:
    trigger = one_shot(
        "r", at(0), misfire=SimpleMisfireInstruction.RESCHEDULE_NEXT_WITH_REMAINING_COUNT
    )
    assert expired_firing_outcome(trigger, recovering=True, expired_count=0).republish


def test_an_expired_firing_whose_trigger_was_removed_is_dropped_and_says_so() -> None:
    outcome = expired_firing_outcome(None, recovering=False, expired_count=0)
    assert not outcome.republish
    assert "removed" in outcome.why


# -- the batch rule with admission (routing.take_batch) -----------------------------------------


@dataclass(frozen=True)
class Row:
    name: str
    next_fire_time: int
    execution_group: str | None = None
    preferred_node: str | None = None


def admit_all(group: str | None, node: str | None) -> Route | Hold:
    return Route(queue=None if group is None else f"q.{group}", node=node)


def names(batch: list[tuple[Row, Route]]) -> list[str]:
    return [row.name for row, _ in batch]


def test_the_batch_takes_triggers_due_within_the_window_after_the_first() -> None:
    rows = [Row("a", 1000), Row("b", 1400), Row("c", 1600)]
    batch, held_more = take_batch(
        rows, admit_all, HeldBack(), now_ms=900, no_later_than_ms=2000, window_ms=500
    )
    assert names(batch) == ["a", "b"]  # c is after max(1000, 900) + 500
    assert not held_more


def test_the_window_counts_from_now_when_the_first_trigger_is_late() -> None:
    rows = [Row("a", 1000), Row("b", 1900)]
    batch, _ = take_batch(
        rows, admit_all, HeldBack(), now_ms=1500, no_later_than_ms=2000, window_ms=500
    )
    assert names(batch) == ["a", "b"]


def test_nothing_is_taken_when_the_first_trigger_is_due_after_the_claim_horizon() -> None:
    batch, _ = take_batch(
        [Row("a", 3000)], admit_all, HeldBack(), now_ms=0, no_later_than_ms=2000, window_ms=0
    )
    assert batch == []


def test_a_held_back_trigger_is_skipped_and_what_held_it_recorded() -> None:
    full = Hold(group_full=True, group="reindex")

    def decide(group: str | None, node: str | None) -> Route | Hold:
        return full if group == "reindex" else admit_all(group, node)

    held = HeldBack()
    rows = [Row("a", 1000, "reindex"), Row("b", 1000), Row("c", 1000, "reindex")]
    batch, held_more = take_batch(
        rows, decide, held, now_ms=1000, no_later_than_ms=1000, window_ms=0
    )
    assert names(batch) == ["b"]
    assert held_more
    assert held.groups == {"reindex"}
    # The same hold again excludes nothing new.
    assert (
        take_batch(rows, decide, held, now_ms=1000, no_later_than_ms=1000, window_ms=0)[1] is False
    )
