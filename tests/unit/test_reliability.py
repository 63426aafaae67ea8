"""Nothing is silently lost: dead workers' executions, messages no worker started, triggers whose
job cannot run, and triggers blocked past their fire time. RAM store, fake clock."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

import pytest
from sqlalchemy.exc import OperationalError

from celery_quartz.clock import FakeClock, to_millis
from celery_quartz.cluster import ClusterManager
from celery_quartz.errors import SchedulerStateError
from celery_quartz.firing import FiringHeader
from celery_quartz.keys import RECOVERING_JOBS_GROUP, RETRYING_JOBS_GROUP, JobKey, TriggerKey
from celery_quartz.retry import RetryPolicy
from celery_quartz.store import NONE_STATE, FiringState, MemoryStore, TriggerState
from celery_quartz.store.records import ProcessLoss
from celery_quartz.store.views import FiringOutcome
from celery_quartz.triggers import CronMisfireInstruction, CronTrigger, SimpleMisfireInstruction
from tests.unit.builders import A, B, acquire, add, cron, fire_one, one_shot, repeating, state
from tests.unit.conftest import at

WORKER = "celery@w1"


def executing(store: MemoryStore, name: str, worker: str = WORKER) -> str:
    """Fire ``name`` and start it on ``worker``; its fire instance id."""
    fire_id = fire_one(store, name)
    assert store.start_execution(fire_id, worker)
    return fire_id


def cluster(store: MemoryStore, clock: FakeClock, instance: str = B) -> ClusterManager:
    return ClusterManager(
        store, clock, instance, checkin_interval=7.5, checkin_misfire_threshold=7.5
    )


# -- a dead worker's executions ----------------------------------------------------------------


def test_a_dead_workers_recoverable_execution_gets_a_recovery_firing(store: MemoryStore) -> None:
    add(store, one_shot("t1", at(0)), requests_recovery=True)
    fire_id = executing(store, "t1")
    result = store.recover_worker(WORKER, seen_checkin_millis=None)
    assert result is not None and (result.recovered, result.interrupted) == (1, 0)
    recovery = TriggerKey(f"recover_{fire_id}", RECOVERING_JOBS_GROUP)
    assert store.get_trigger_state(recovery) == TriggerState.WAITING
    assert store.firing_states() == {}


def test_the_recovery_firing_runs_the_original_occurrence_marked_recovering(
    store: MemoryStore, clock: FakeClock
) -> None:
    add(store, one_shot("t1", at(0), data={"from": "trigger"}), requests_recovery=True)
    executing(store, "t1")
    clock.set(at(30))
    store.recover_worker(WORKER, seen_checkin_millis=None)
    [claimed] = acquire(store, until=at(30))
    [firing] = store.fire(A, [claimed])
    assert (
        firing.recovering,
        firing.origin_trigger_key,
        firing.scheduled_millis,
        firing.trigger_key.group,
        firing.trigger_data,
    ) == (True, TriggerKey("t1"), to_millis(at(0)), RECOVERING_JOBS_GROUP, {"from": "trigger"})
    assert FiringHeader.of(firing).fields["origin_trigger"] == ["t1", "DEFAULT"]


def test_recovering_a_recovery_firing_keeps_the_first_occurrence(
    store: MemoryStore, clock: FakeClock
) -> None:
    add(store, one_shot("t1", at(0)), requests_recovery=True)
    executing(store, "t1")
    clock.set(at(30))
    store.recover_worker(WORKER, seen_checkin_millis=None)
    [claimed] = acquire(store, until=at(30))
    [firing] = store.fire(A, [claimed])
    store.start_execution(firing.fire_instance_id, "celery@w2")
    store.recover_worker("celery@w2", seen_checkin_millis=None)
    [again] = acquire(store, until=at(30))
    [refired] = store.fire(A, [again])
    assert (refired.origin_trigger_key, refired.scheduled_millis) == (
        TriggerKey("t1"),
        to_millis(at(0)),
    )


def test_a_dead_workers_plain_execution_is_closed_as_interrupted(
    store: MemoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    add(store, repeating("t1", at(0), 60))
    executing(store, "t1")
    with caplog.at_level(logging.INFO, logger="celery_quartz"):
        result = store.recover_worker(WORKER, seen_checkin_millis=None)
    assert result is not None and (result.recovered, result.interrupted) == (0, 1)
    assert store.firing_states() == {}
    assert store.count_rows()["triggers"] == 1
    assert "closed as interrupted" in caplog.text and "t1" in caplog.text


def test_an_interrupted_one_shot_trigger_is_removed_with_its_job(store: MemoryStore) -> None:
    add(store, one_shot("t1", at(0)))
    executing(store, "t1")
    store.recover_worker(WORKER, seen_checkin_millis=None)
    assert store.count_rows()["triggers"] == 0 and store.count_rows()["jobs"] == 0


def test_a_disallow_concurrent_execution_is_deferred_before_it_is_recovered(
    store: MemoryStore, clock: FakeClock
) -> None:
    add(
        store,
        repeating("t1", at(0), 60),
        one_shot("other", at(1)),
        requests_recovery=True,
        disallow_concurrent=True,
    )
    fire_id = executing(store, "t1")
    assert state(store, "other") == TriggerState.BLOCKED
    first = store.recover_worker(
        WORKER, seen_checkin_millis=None, defer_nonconcurrent_millis=22_500
    )
    assert first is not None and (first.deferred, first.recovered) == (1, 0)
    assert store.firing_states() == {fire_id: FiringState.EXECUTING}
    clock.set(at(22.4))
    store.recover_worker(WORKER, seen_checkin_millis=None, defer_nonconcurrent_millis=22_500)
    assert store.firing_states() == {fire_id: FiringState.EXECUTING}
    clock.set(at(22.5))
    last = store.recover_worker(WORKER, seen_checkin_millis=None, defer_nonconcurrent_millis=22_500)
    assert last is not None and last.recovered == 1
    assert store.firing_states() == {}
    assert state(store, "other") == TriggerState.WAITING


def test_a_worker_that_checked_in_again_is_not_recovered(
    store: MemoryStore, clock: FakeClock
) -> None:
    add(store, one_shot("t1", at(0)), requests_recovery=True)
    store.check_in(WORKER, interval=7.5, kind="worker")
    seen = store.check_ins("worker")[0].last_checkin_millis
    executing(store, "t1")
    clock.set(at(5))
    store.check_in(WORKER, interval=7.5, kind="worker")
    assert store.recover_worker(WORKER, seen_checkin_millis=seen) is None
    assert len(store.firing_states()) == 1


def test_a_completion_after_recovery_finds_nothing_to_complete(store: MemoryStore) -> None:
    add(store, one_shot("t1", at(0)), requests_recovery=True)
    fire_id = executing(store, "t1")
    store.recover_worker(WORKER, seen_checkin_millis=None)
    assert store.complete_execution(fire_id) is False


def test_the_cluster_manager_recovers_a_worker_silent_past_the_window(
    store: MemoryStore, clock: FakeClock
) -> None:
    add(store, one_shot("t1", at(0)))
    store.check_in(WORKER, interval=7.5, kind="worker")
    executing(store, "t1")
    manager = cluster(store, clock)
    manager.check_in()
    clock.set(at(15))
    assert manager.recover_failed_workers() == 0
    clock.set(at(15.001))
    assert manager.recover_failed_workers() == 1
    assert store.check_ins("worker") == []


def test_a_worker_that_never_checked_in_is_recovered_after_a_window(
    store: MemoryStore, clock: FakeClock
) -> None:
    add(store, one_shot("t1", at(0)))
    executing(store, "t1", worker="celery@ghost")
    manager = cluster(store, clock)
    manager.check_in()
    clock.set(at(15))
    assert manager.recover_failed_workers() == 0
    clock.set(at(15.001))
    assert manager.recover_failed_workers() == 1


# -- a pool process lost while running a firing ---------------------------------------------------

LOST = FiringOutcome(True, "WorkerLostError", "Worker exited prematurely: signal 9 (SIGKILL)")
TIMED_OUT = FiringOutcome(True, "TimeLimitExceeded", "TimeLimitExceeded(2,)")


def test_a_lost_process_of_a_recoverable_job_gets_a_recovery_firing(store: MemoryStore) -> None:
    add(store, one_shot("t1", at(0)), requests_recovery=True)
    fire_id = executing(store, "t1")
    assert store.end_lost_execution(fire_id, WORKER, LOST, loss=ProcessLoss.CRASHED) == "recovered"
    recovery = TriggerKey(f"recover_{fire_id}", RECOVERING_JOBS_GROUP)
    assert store.get_trigger_state(recovery) == TriggerState.WAITING
    assert store.firing_states() == {}


def test_a_lost_process_of_a_plain_job_is_closed_as_interrupted_with_its_outcome_kept(
    store: MemoryStore, clock: FakeClock
) -> None:
    add(store, repeating("t1", at(0), 60))
    fire_id = executing(store, "t1")
    clock.set(at(5))
    assert (
        store.end_lost_execution(fire_id, WORKER, LOST, loss=ProcessLoss.CRASHED) == "interrupted"
    )
    assert store.firing_states() == {}
    view = store.trigger_view(TriggerKey("t1"))
    assert view is not None and view.last_outcome is not None
    last = view.last_outcome
    assert (last.succeeded, last.error_type, last.error_message, last.finished_time) == (
        False,
        "WorkerLostError",
        LOST.error_message,
        at(5),
    )
    assert store.count_rows()["triggers"] == 1  # not run again: its next occurrence stands


def test_a_firing_killed_at_its_hard_time_limit_fails_and_gets_its_retry(
    store: MemoryStore, clock: FakeClock
) -> None:
    trigger = repeating("t1", at(0), 3600)
    trigger.retry_policy = RetryPolicy.fixed(3, timedelta(seconds=30))
    add(store, trigger, requests_recovery=True)
    fire_id = executing(store, "t1")
    clock.set(at(2))
    assert (
        store.end_lost_execution(fire_id, WORKER, TIMED_OUT, loss=ProcessLoss.TIMED_OUT)
        == "retried"
    )
    assert store.firing_states() == {}
    retries = [t for t in store.get_triggers_of_job(JobKey("job")) if t.key.group != "DEFAULT"]
    assert [(t.key.group, t.next_fire_time) for t in retries] == [(RETRYING_JOBS_GROUP, at(32))]
    view = store.trigger_view(TriggerKey("t1"))
    assert view is not None and view.last_outcome is not None
    assert view.last_outcome.error_type == "TimeLimitExceeded"


def test_a_terminated_firing_is_closed_as_cancelled_neither_retried_nor_recovered(
    store: MemoryStore,
) -> None:
    trigger = repeating("t1", at(0), 3600)
    trigger.retry_policy = RetryPolicy.fixed(3, timedelta(seconds=30))
    add(store, trigger, requests_recovery=True)
    fire_id = executing(store, "t1")
    terminated = FiringOutcome(True, "Terminated", "15")
    ended = store.end_lost_execution(fire_id, WORKER, terminated, loss=ProcessLoss.TERMINATED)
    assert ended == "cancelled"
    assert store.firing_states() == {}
    assert [t.key for t in store.get_triggers_of_job(JobKey("job"))] == [TriggerKey("t1")]


@pytest.mark.parametrize(
    ("loss", "ended"),
    [
        (ProcessLoss.TIMED_OUT, "failed"),
        (ProcessLoss.CRASHED, "interrupted"),
        (ProcessLoss.TERMINATED, "cancelled"),
    ],
)
def test_a_lost_process_releases_its_disallow_concurrent_job_at_once(
    store: MemoryStore, loss: ProcessLoss, ended: str
) -> None:
    add(store, repeating("t1", at(0), 60), one_shot("other", at(1)), disallow_concurrent=True)
    fire_id = executing(store, "t1")
    assert state(store, "other") == TriggerState.BLOCKED
    assert store.end_lost_execution(fire_id, WORKER, LOST, loss=loss) == ended
    assert state(store, "other") == TriggerState.WAITING
    assert state(store, "t1") == TriggerState.WAITING


def test_a_lost_process_ends_only_a_firing_executing_on_its_own_worker(
    store: MemoryStore,
) -> None:
    add(store, repeating("t1", at(0), 60), repeating("t2", at(0), 60))
    elsewhere = executing(store, "t1", worker="celery@w2")
    assert store.end_lost_execution(elsewhere, WORKER, LOST, loss=ProcessLoss.CRASHED) is None
    not_started = fire_one(store, "t2")
    assert store.end_lost_execution(not_started, WORKER, LOST, loss=ProcessLoss.CRASHED) is None
    assert store.firing_states() == {
        elsewhere: FiringState.EXECUTING,
        not_started: FiringState.FIRED,
    }
    assert (
        store.end_lost_execution(elsewhere, "celery@w2", LOST, loss=ProcessLoss.CRASHED)
        == "interrupted"
    )
    assert store.end_lost_execution(elsewhere, "celery@w2", LOST, loss=ProcessLoss.CRASHED) is None


# -- messages no worker started ----------------------------------------------------------------


def published_firing(store: MemoryStore, name: str) -> str:
    [claimed] = [
        a for a in acquire(store, until=at(3600), window=3600) if a.trigger.key.name == name
    ]
    [firing] = store.fire(A, [claimed])
    store.mark_published(A, [firing.fire_instance_id])
    return firing.fire_instance_id


def ending_cron(name: str, expression: str, *, end: datetime, misfire: int = 0) -> CronTrigger:
    return CronTrigger(
        key=TriggerKey(name),
        job_key=JobKey("job"),
        start_at=at(0),
        end_at=end,
        expression=expression,
        misfire_instruction=misfire,
    )


def expire(store: MemoryStore, instance: str = B) -> list[str]:
    return [
        f.fire_instance_id for f in store.resolve_expired_firings(instance, grace=8.5, max_count=20)
    ]


def test_a_firing_is_published_with_an_expiry_of_the_misfire_threshold(store: MemoryStore) -> None:
    add(store, cron("c1", "0 * * * * ?"))
    [claimed] = acquire(store, until=at(0))
    [firing] = store.fire(A, [claimed])
    assert firing.expires_millis == to_millis(at(60))


def test_an_expired_firing_whose_instruction_runs_it_now_is_published_again_once(
    store: MemoryStore, clock: FakeClock
) -> None:
    add(store, cron("c1", "0 0 * * * ?", misfire=CronMisfireInstruction.FIRE_ONCE_NOW))
    fire_id = published_firing(store, "c1")
    clock.set(at(68.5))
    assert expire(store) == []  # within the grace
    clock.set(at(68.501))
    assert expire(store) == [fire_id]
    assert store.firing_states() == {fire_id: FiringState.FIRED}
    [again] = store.unpublished_firings(B)
    assert (again.fire_instance_id, again.expires_millis) == (fire_id, to_millis(at(128.501)))


def test_the_firings_executing_on_a_worker_are_listed_by_their_messages_task_ids(
    store: MemoryStore, clock: FakeClock
) -> None:
    add(store, cron("c1", "0 0 * * * ?", misfire=CronMisfireInstruction.FIRE_ONCE_NOW))
    add(store, repeating("t2", at(0), 3600), job="other")
    plain = executing(store, "t2", worker="celery@w2")
    republished = published_firing(store, "c1")
    clock.set(at(68.501))
    assert expire(store) == [republished]
    [again] = store.unpublished_firings(B)
    assert again.task_id == f"{republished}.r1"
    assert store.start_execution(republished, WORKER)
    assert store.executing_task_ids(WORKER) == {again.task_id: republished}
    assert store.executing_task_ids("celery@w2") == {plain: plain}
    assert store.executing_task_ids("celery@w3") == {}


def test_the_expired_firings_are_counted_as_resolving_them_would_find_them(
    store: MemoryStore, clock: FakeClock
) -> None:
    add(
        store,
        cron("c1", "0 0 * * * ?", misfire=CronMisfireInstruction.FIRE_ONCE_NOW),
        cron("c2", "0 0 * * * ?"),
    )
    firings = store.fire(A, acquire(store, until=at(3600), window=3600))
    store.mark_published(A, [f.fire_instance_id for f in firings])
    started = next(f for f in firings if f.trigger_key.name == "c2")
    assert store.start_execution(started.fire_instance_id, WORKER)
    clock.set(at(68.5))
    assert store.count_expired_firings(grace=8.5) == 0  # within the grace
    clock.set(at(68.501))
    assert store.count_expired_firings(grace=8.5) == 1  # the started one is not expired
    assert len(expire(store)) == 1
    assert store.count_expired_firings(grace=8.5) == 0  # published again, a fresh expiry


def test_a_firing_that_expires_a_second_time_is_dropped(
    store: MemoryStore, clock: FakeClock
) -> None:
    add(store, cron("c1", "0 0 * * * ?"))
    fire_id = published_firing(store, "c1")
    clock.set(at(70))
    assert expire(store) == [fire_id]
    store.mark_published(B, [fire_id])
    clock.set(at(140))
    assert expire(store) == []
    assert store.firing_states() == {}


@pytest.mark.parametrize(
    "trigger",
    [
        cron("c1", "0 0 * * * ?", misfire=CronMisfireInstruction.DO_NOTHING),
        repeating("c1", at(0), 3600),  # SmartPolicy of a forever-repeating simple trigger
        repeating(
            "c1", at(0), 3600, misfire=SimpleMisfireInstruction.RESCHEDULE_NEXT_WITH_EXISTING_COUNT
        ),
    ],
    ids=["cron-do-nothing", "simple-smart-forever", "simple-reschedule-next"],
)
def test_an_expired_firing_whose_instruction_skips_it_is_dropped(
    store: MemoryStore, clock: FakeClock, trigger: object
) -> None:
    add(store, trigger)  # type: ignore[arg-type]
    published_firing(store, "c1")
    clock.set(at(70))
    assert expire(store) == []
    assert store.firing_states() == {}
    assert state(store, "c1") == TriggerState.WAITING


def test_an_expired_one_shot_that_is_dropped_leaves_no_trigger_or_job(
    store: MemoryStore, clock: FakeClock
) -> None:
    add(store, one_shot("once", at(0), misfire=SimpleMisfireInstruction.FIRE_NOW))
    fire_id = published_firing(store, "once")
    clock.set(at(70))
    assert expire(store) == [fire_id]
    store.mark_published(B, [fire_id])
    clock.set(at(140))
    expire(store)
    assert store.count_rows() == {
        "jobs": 0,
        "triggers": 0,
        "fired_triggers": 0,
        "calendars": 0,
        "paused_trigger_groups": 0,
        "backfill_slots": 0,
    }


def test_an_ending_trigger_outlives_its_last_firing_in_flight(
    store: MemoryStore, clock: FakeClock
) -> None:
    """Every 2 s until 4 s: the firing at 0 s is published to a worker that is then killed with
    it prefetched; the firings at 2 s and 4 s (the last) run and complete. The trigger is COMPLETE
    but stays until the firing at 0 s ends, so that firing's expiry is resolved by the trigger's
    instruction (a cron trigger's SmartPolicy publishes it again once), not lost."""
    add(store, ending_cron("c1", "0/2 * * * * ?", end=at(4)))
    lost = published_firing(store, "c1")
    for second in (2, 4):
        clock.set(at(second))
        fire_id = fire_one(store, "c1")
        assert store.start_execution(fire_id, WORKER)
        assert store.complete_execution(fire_id)
    assert state(store, "c1") == TriggerState.COMPLETE
    clock.set(at(70))
    assert expire(store) == [lost]
    assert state(store, "c1") == TriggerState.COMPLETE
    assert store.start_execution(lost, WORKER)
    assert store.complete_execution(lost)
    assert state(store, "c1") == NONE_STATE
    assert store.count_rows()["jobs"] == 0


def test_an_ending_triggers_expired_firing_that_its_instruction_skips_is_dropped_and_it_goes(
    store: MemoryStore, clock: FakeClock
) -> None:
    add(
        store,
        ending_cron("c1", "0/2 * * * * ?", end=at(2), misfire=CronMisfireInstruction.DO_NOTHING),
    )
    lost = published_firing(store, "c1")
    clock.set(at(2))
    last = fire_one(store, "c1")
    assert store.start_execution(last, WORKER)
    assert store.complete_execution(last)
    assert state(store, "c1") == TriggerState.COMPLETE
    clock.set(at(70))
    assert expire(store) == []
    assert lost not in store.firing_states()
    assert state(store, "c1") == NONE_STATE


def test_a_firing_a_worker_started_is_not_expired(store: MemoryStore, clock: FakeClock) -> None:
    add(store, cron("c1", "0 0 * * * ?"))
    fire_id = published_firing(store, "c1")
    store.start_execution(fire_id, WORKER)
    clock.set(at(600))
    assert expire(store) == []
    assert store.firing_states() == {fire_id: FiringState.EXECUTING}


# -- triggers whose job cannot run, blocked triggers, refire ------------------------------------


def test_a_trigger_in_error_is_not_acquired_until_reset(store: MemoryStore) -> None:
    add(store, one_shot("t1", at(0)))
    [claimed] = acquire(store)
    store.set_trigger_error(claimed, "task missing")
    assert state(store, "t1") == TriggerState.ERROR
    assert store.firing_states() == {}
    assert acquire(store) == []
    assert store.reset_trigger_from_error_state([TriggerKey("t1"), TriggerKey("absent")]) == 1
    assert state(store, "t1") == TriggerState.WAITING
    assert [a.trigger.key.name for a in acquire(store)] == ["t1"]


def test_unblocking_applies_the_misfire_instruction_to_a_trigger_made_late(
    store: MemoryStore, clock: FakeClock
) -> None:
    add(
        store,
        repeating("long", at(0), 3600),
        cron("every-minute", "0 * * * * ?", misfire=CronMisfireInstruction.DO_NOTHING),
        disallow_concurrent=True,
    )
    fire_id = executing(store, "long")
    assert state(store, "every-minute") == TriggerState.BLOCKED
    clock.set(at(300.5))
    store.complete_execution(fire_id)
    trigger = store.retrieve_trigger(TriggerKey("every-minute"))
    assert trigger is not None
    assert (state(store, "every-minute"), trigger.next_fire_time) == (TriggerState.WAITING, at(360))


def test_a_refire_puts_the_firing_back_in_flight_with_its_count_up(store: MemoryStore) -> None:
    add(store, one_shot("t1", at(0)))
    fire_id = executing(store, "t1")
    assert store.return_to_published(fire_id, refire=True)
    assert store.firing_states() == {fire_id: FiringState.PUBLISHED}
    assert store.start_execution(fire_id, WORKER)
    assert store.firing_states() == {fire_id: FiringState.EXECUTING}


# -- one mode per set of tables ----------------------------------------------------------------


def test_a_clustered_scheduler_refuses_tables_a_live_non_clustered_one_uses(
    store: MemoryStore, clock: FakeClock
) -> None:
    store.check_in("solo", interval=7.5, clustered=False)
    with pytest.raises(SchedulerStateError, match="solo"):
        cluster(store, clock).refuse_mixed_modes()


def test_a_dead_non_clustered_scheduler_does_not_block_a_clustered_one(
    store: MemoryStore, clock: FakeClock
) -> None:
    store.check_in("solo", interval=7.5, clustered=False)
    clock.set(at(15.001))
    cluster(store, clock).refuse_mixed_modes()  # raises SchedulerStateError when it refuses


# -- a store that restarted mid-transaction ------------------------------------------------------


def test_claims_the_instance_no_longer_holds_are_released(store: MemoryStore) -> None:
    add(store, one_shot("held", at(0)), one_shot("lost", at(0)))
    held, lost = acquire(store)
    assert store.release_acquired(A, keep=[held.fire_instance_id]) == 1
    assert (state(store, held.trigger.key.name), state(store, lost.trigger.key.name)) == (
        TriggerState.ACQUIRED,
        TriggerState.WAITING,
    )


def test_a_start_whose_recording_was_uncertain_may_be_taken_over_from_that_worker(
    store: MemoryStore,
) -> None:
    add(store, one_shot("t1", at(0)))
    fire_id = executing(store, "t1", worker="celery@w1")
    assert not store.start_execution(fire_id, "celery@w2")
    assert not store.start_execution(fire_id, "celery@w2", restart_from="celery@w3")
    assert store.start_execution(fire_id, "celery@w2", restart_from="celery@w1")
    assert not store.start_execution(fire_id, "celery@w2", restart_from="celery@w1")


def test_firing_a_batch_again_after_its_commit_went_through_keeps_the_fired_rows(
    store: MemoryStore,
) -> None:
    add(store, one_shot("t1", at(0)))
    batch = acquire(store)
    [firing] = store.fire(A, batch)
    # The first answer was lost (the store restarted): the loop fires the same batch again.
    assert store.fire(A, batch) == []
    assert store.firing_states() == {firing.fire_instance_id: FiringState.FIRED}
    assert [f.fire_instance_id for f in store.unpublished_firings(A)] == [firing.fire_instance_id]


def test_firing_a_batch_again_after_a_failed_attempt_fires_the_claimed_occurrence(
    store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    add(store, repeating("t1", at(0), 1))
    batch = acquire(store)
    working = store.context.transaction

    def outage() -> object:
        monkeypatch.setattr(store.context, "transaction", working)
        raise OperationalError("COMMIT", {}, Exception("server closed the connection"))

    monkeypatch.setattr(store.context, "transaction", outage)
    with pytest.raises(OperationalError):
        store.fire(A, batch)
    [firing] = store.fire(A, batch)
    assert firing.scheduled_millis == to_millis(at(0))
    trigger = store.retrieve_trigger(TriggerKey("t1"))
    assert trigger is not None and trigger.next_fire_time == at(1)


def test_a_non_clustered_scheduler_also_recovers_a_dead_worker(
    store: MemoryStore, clock: FakeClock
) -> None:
    add(store, one_shot("t1", at(0)), requests_recovery=True)
    store.check_in(WORKER, interval=7.5, kind="worker")
    executing(store, "t1")
    manager = ClusterManager(
        store, clock, B, checkin_interval=7.5, checkin_misfire_threshold=7.5, clustered=False
    )
    manager.check_in()
    clock.set(at(20))
    assert manager.recover_failed_workers() == 1
