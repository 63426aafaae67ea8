"""The store's decisions, on the RAM store (the SQL store on in-memory SQLite) with a fake clock.

Each test names one behaviour the scheduling loop, the cluster manager or the worker relies on.
"""

from __future__ import annotations

from collections import namedtuple
from datetime import timedelta

import pytest

from celery_quartz.clock import FakeClock, to_millis
from celery_quartz.definitions import JobChanges, owned_group
from celery_quartz.errors import JobNotFoundError
from celery_quartz.firing import AcquiredFiring
from celery_quartz.hooks import StoreOperation
from celery_quartz.job import Job
from celery_quartz.keys import JobKey, TriggerKey
from celery_quartz.store import NONE_STATE, FiringState, MemoryStore, TriggerState
from celery_quartz.store.abc import (
    ClusterStore,
    HistoryKeeper,
    HistoryReader,
    JobStore,
    PauseStore,
    SchedulingStore,
    StoreReader,
    WorkerStore,
)
from celery_quartz.store.abc_backfill import BackfillStore
from celery_quartz.store.sql import SqlStore, _Operation, in_acquisition_order
from celery_quartz.triggers import (
    REPEAT_INDEFINITELY,
    CronMisfireInstruction,
    SimpleMisfireInstruction,
    SimpleTrigger,
)
from tests.unit.builders import (
    IGNORE,
    A,
    B,
    C,
    acquire,
    add,
    cron,
    fire_one,
    fire_times,
    names,
    next_fire,
    one_shot,
    repeating,
    state,
)
from tests.unit.conftest import at


def test_acquisition_orders_by_next_fire_time_then_higher_priority(store: MemoryStore) -> None:
    add(
        store,
        one_shot("later", at(2)),
        one_shot("low", at(1), priority=1),
        one_shot("high", at(1), priority=9),
    )
    assert names(acquire(store, until=at(5), window=5)) == ["high", "low", "later"]


def test_acquisition_claims_each_trigger_with_a_fired_row_of_its_own(store: MemoryStore) -> None:
    add(store, one_shot("t1", at(1)))
    [claimed] = acquire(store)
    assert state(store, "t1") == TriggerState.ACQUIRED
    assert store.firing_states() == {claimed.fire_instance_id: FiringState.ACQUIRED}
    assert claimed.scheduled_fire_time == at(1)


def test_acquisition_takes_at_most_max_count(store: MemoryStore) -> None:
    add(store, *(one_shot(f"t{i}", at(1)) for i in range(5)))
    assert len(acquire(store, max_count=3)) == 3


def test_a_second_instance_acquires_only_what_the_first_did_not_claim(store: MemoryStore) -> None:
    add(store, one_shot("t1", at(1)), one_shot("t2", at(1)), one_shot("t3", at(1)))
    first = acquire(store, A, max_count=2)
    second = acquire(store, B)
    assert names(first) == ["t1", "t2"]
    assert names(second) == ["t3"]
    assert acquire(store, C) == []


def test_triggers_due_after_no_later_than_are_not_acquired(store: MemoryStore) -> None:
    add(store, one_shot("soon", at(1)), one_shot("later", at(1.001)))
    assert names(acquire(store, until=at(1))) == ["soon"]
    assert state(store, "later") == TriggerState.WAITING


def test_the_first_trigger_of_a_batch_must_be_due_by_no_later_than(store: MemoryStore) -> None:
    add(store, one_shot("later", at(1.001)))
    assert acquire(store, until=at(1), window=10) == []


def test_the_window_lets_later_triggers_join_the_batch_beyond_no_later_than(
    store: MemoryStore,
) -> None:
    # Quartz selects up to no_later_than + window; the batch rule then bounds the rest.
    add(store, one_shot("first", at(1)), one_shot("joins", at(3)), one_shot("too-late", at(3.001)))
    assert names(acquire(store, until=at(1), window=2)) == ["first", "joins"]


def test_the_batch_ends_at_the_first_fire_time_plus_the_window(store: MemoryStore) -> None:
    add(store, one_shot("t1", at(5)), one_shot("t2", at(7)), one_shot("t3", at(7.001)))
    assert names(acquire(store, until=at(60), window=2)) == ["t1", "t2"]


def test_with_no_window_the_batch_holds_only_triggers_due_with_the_first(
    store: MemoryStore,
) -> None:
    add(store, one_shot("t1", at(5)), one_shot("t2", at(5)), one_shot("t3", at(5.001)))
    assert names(acquire(store, until=at(60))) == ["t1", "t2"]


def test_a_late_first_trigger_opens_the_window_from_now(
    store: MemoryStore, clock: FakeClock
) -> None:
    add(store, one_shot("late", at(5)), one_shot("t2", at(11)), one_shot("t3", at(12.001)))
    clock.set(at(10))
    # max(first = 5 s, now = 10 s) + 2 s: due by 12 s.
    assert names(acquire(store, until=at(60), window=2)) == ["late", "t2"]


def test_the_batch_rule_reads_rows_by_fire_time_whatever_order_the_database_returned() -> None:
    # PostgreSQL sorts before it locks: a row fired meanwhile by another scheduler comes back in
    # its old place with its new fire time (a repeat interval later).
    row = namedtuple("row", "name next_fire_time priority")
    returned = [row("fired-meanwhile", 2000, 5), row("low", 1001, 1), row("high", 1001, 9)]
    assert [r.name for r in in_acquisition_order(returned)] == ["high", "low", "fired-meanwhile"]


def test_a_trigger_later_than_the_misfire_threshold_is_left_to_the_misfire_handler(
    store: MemoryStore, clock: FakeClock
) -> None:
    add(store, one_shot("missed", at(0)), one_shot("just_in_time", at(0.001)))
    clock.set(at(60.001))
    assert names(acquire(store, until=at(61), window=60)) == ["just_in_time"]
    assert state(store, "missed") == TriggerState.WAITING


def test_a_late_trigger_that_ignores_misfires_is_acquired(
    store: MemoryStore, clock: FakeClock
) -> None:
    add(store, one_shot("ignores", at(0), misfire=IGNORE))
    clock.set(at(3600))
    assert names(acquire(store, until=at(3601))) == ["ignores"]


def test_paused_triggers_are_not_acquired(store: MemoryStore) -> None:
    add(store, one_shot("t1", at(1)))
    store.pause_trigger(TriggerKey("t1"))
    assert acquire(store) == []


# -- firing ------------------------------------------------------------------------------------


def test_fire_advances_the_trigger_and_turns_its_row_fired(
    store: MemoryStore, clock: FakeClock
) -> None:
    add(store, repeating("every10", at(0), 10))
    [claimed] = acquire(store, until=at(0))
    clock.set(at(0.25))
    [firing] = store.fire(A, [claimed])
    trigger = store.retrieve_trigger(TriggerKey("every10"))
    assert trigger is not None
    assert (trigger.next_fire_time, trigger.previous_fire_time, trigger.times_triggered) == (
        at(10),
        at(0),
        1,
    )
    assert state(store, "every10") == TriggerState.WAITING
    assert store.firing_states() == {claimed.fire_instance_id: FiringState.FIRED}
    assert (firing.fire_instance_id, firing.scheduled_millis, firing.fired_millis) == (
        claimed.fire_instance_id,
        to_millis(at(0)),
        to_millis(at(0.25)),
    )


def test_the_firing_carries_the_job_and_the_merged_data(store: MemoryStore) -> None:
    key = JobKey("job")
    store.store_jobs_and_triggers(
        [
            (
                Job(
                    key=key,
                    task="tasks.work",
                    args=(1, "two"),
                    kwargs={"k": 3},
                    data={"a": 1, "b": 1},
                    options={"queue": "reports"},
                ),
                [one_shot("t1", at(0), data={"b": 2})],
            )
        ]
    )
    [firing] = store.fire(A, acquire(store))
    assert (firing.task, firing.args, firing.kwargs, firing.options) == (
        "tasks.work",
        [1, "two"],
        {"k": 3},
        {"queue": "reports"},
    )
    assert (firing.job_key, firing.trigger_key, firing.fired_by) == (key, TriggerKey("t1"), A)
    assert (firing.job_data, firing.trigger_data) == ({"a": 1, "b": 1}, {"b": 2})


def test_fire_completes_a_trigger_with_no_later_fire_time(store: MemoryStore) -> None:
    add(store, one_shot("once", at(0)))
    store.fire(A, acquire(store))
    assert state(store, "once") == TriggerState.COMPLETE
    assert next_fire(store, "once") is None


def test_fire_drops_a_firing_whose_trigger_was_paused_meanwhile(store: MemoryStore) -> None:
    add(store, one_shot("t1", at(1)))
    claimed = acquire(store)
    store.pause_trigger(TriggerKey("t1"))
    assert store.fire(A, claimed) == []
    assert store.firing_states() == {}
    assert state(store, "t1") == TriggerState.PAUSED
    assert next_fire(store, "t1") == at(1)


def test_fire_drops_a_firing_whose_trigger_was_rescheduled_meanwhile(store: MemoryStore) -> None:
    add(store, one_shot("t1", at(1)))
    claimed = acquire(store)
    store.replace_trigger(TriggerKey("t1"), one_shot("t1", at(30)))
    assert store.fire(A, claimed) == []
    assert store.firing_states() == {}
    assert (state(store, "t1"), next_fire(store, "t1")) == (TriggerState.WAITING, at(30))


def test_fire_drops_a_firing_whose_claim_was_recovered_and_taken_by_another_instance(
    store: MemoryStore,
) -> None:
    add(store, one_shot("t1", at(1)))
    stale = acquire(store, A)
    store.recover_scheduler(A, seen_checkin_millis=None, recovered_by=B)
    [taken] = acquire(store, B)
    assert store.fire(A, stale) == []
    assert store.firing_states() == {taken.fire_instance_id: FiringState.ACQUIRED}
    assert [f.fire_instance_id for f in store.fire(B, [taken])] == [taken.fire_instance_id]


def test_release_acquired_returns_claims_to_waiting(store: MemoryStore) -> None:
    add(store, one_shot("t1", at(1)), one_shot("t2", at(1)))
    claimed = acquire(store)
    assert store.release_acquired(A, claimed[:1]) == 1
    assert (state(store, "t1"), state(store, "t2")) == (TriggerState.WAITING, TriggerState.ACQUIRED)
    assert store.firing_states() == {claimed[1].fire_instance_id: FiringState.ACQUIRED}


def test_release_acquired_without_a_list_releases_every_claim_of_the_instance(
    store: MemoryStore,
) -> None:
    add(store, one_shot("t1", at(1)), one_shot("t2", at(1)), one_shot("t3", at(1)))
    acquire(store, A, max_count=2)
    [other] = acquire(store, B)
    assert store.release_acquired(A) == 2
    assert store.firing_states() == {other.fire_instance_id: FiringState.ACQUIRED}
    assert [state(store, n) for n in ("t1", "t2", "t3")] == [
        TriggerState.WAITING,
        TriggerState.WAITING,
        TriggerState.ACQUIRED,
    ]


def test_mark_published_turns_fired_rows_published(store: MemoryStore) -> None:
    add(store, one_shot("t1", at(0)))
    fire_id = fire_one(store, "t1")
    store.mark_published(B, [fire_id])  # not B's: unchanged
    assert store.firing_states() == {fire_id: FiringState.FIRED}
    store.mark_published(A, [fire_id])
    assert store.firing_states() == {fire_id: FiringState.PUBLISHED}


# -- execution on a worker ---------------------------------------------------------------------


def test_start_execution_succeeds_once(store: MemoryStore) -> None:
    add(store, one_shot("t1", at(0)))
    fire_id = fire_one(store, "t1")
    assert store.start_execution(fire_id, "w1@host") is not None
    assert store.start_execution(fire_id, "w2@host") is None
    assert store.firing_states() == {fire_id: FiringState.EXECUTING}


def test_start_execution_accepts_a_published_firing(store: MemoryStore) -> None:
    add(store, one_shot("t1", at(0)))
    fire_id = fire_one(store, "t1")
    store.mark_published(A, [fire_id])
    assert store.start_execution(fire_id, "w1@host") is not None


def test_start_execution_refuses_a_firing_that_is_only_acquired(store: MemoryStore) -> None:
    add(store, one_shot("t1", at(0)))
    [claimed] = acquire(store)
    assert store.start_execution(claimed.fire_instance_id, "w1@host") is None


def test_complete_execution_removes_the_fired_row(store: MemoryStore) -> None:
    add(store, repeating("t1", at(0), 10))
    fire_id = fire_one(store, "t1")
    store.start_execution(fire_id, "w1@host")
    assert store.complete_execution(fire_id) is True
    assert store.firing_states() == {}
    assert state(store, "t1") == TriggerState.WAITING
    assert store.complete_execution(fire_id) is False


def test_complete_execution_of_a_firing_not_started_does_nothing(store: MemoryStore) -> None:
    add(store, one_shot("t1", at(0)))
    fire_id = fire_one(store, "t1")
    assert store.complete_execution(fire_id) is False
    assert store.firing_states() == {fire_id: FiringState.FIRED}


def test_completing_the_last_firing_of_a_trigger_removes_it_and_its_non_durable_job(
    store: MemoryStore,
) -> None:
    key = add(store, one_shot("once", at(0)))
    fire_id = fire_one(store, "once")
    store.start_execution(fire_id, "w1@host")
    store.complete_execution(fire_id)
    assert state(store, "once") == NONE_STATE
    assert store.retrieve_job(key) is None


def test_completing_the_last_firing_keeps_a_durable_job(store: MemoryStore) -> None:
    key = add(store, one_shot("once", at(0)), durable=True)
    fire_id = fire_one(store, "once")
    store.start_execution(fire_id, "w1@host")
    store.complete_execution(fire_id)
    assert state(store, "once") == NONE_STATE
    job = store.retrieve_job(key)
    assert job is not None and job.durable is True


def test_completion_writes_back_the_data_of_a_job_that_persists_it(store: MemoryStore) -> None:
    key = add(store, repeating("t1", at(0), 10), persist_job_data=True)
    fire_id = fire_one(store, "t1")
    store.start_execution(fire_id, "w1@host")
    store.complete_execution(fire_id, job_data={"count": 1})
    job = store.retrieve_job(key)
    assert job is not None and dict(job.data) == {"count": 1}


def test_completion_does_not_write_data_back_to_a_job_that_does_not_persist_it(
    store: MemoryStore,
) -> None:
    key = add(store, repeating("t1", at(0), 10))
    fire_id = fire_one(store, "t1")
    store.start_execution(fire_id, "w1@host")
    store.complete_execution(fire_id, job_data={"count": 1})
    job = store.retrieve_job(key)
    assert job is not None and dict(job.data) == {}


# -- disallow concurrent execution -------------------------------------------------------------


def test_a_non_concurrent_job_blocks_its_triggers_while_a_firing_is_in_flight(
    store: MemoryStore,
) -> None:
    add(store, repeating("fired", at(0), 10), one_shot("other", at(5)), disallow_concurrent=True)
    fire_one(store, "fired")
    assert (state(store, "fired"), state(store, "other")) == (
        TriggerState.BLOCKED,
        TriggerState.BLOCKED,
    )
    assert acquire(store, until=at(3600), window=3600) == []


def test_a_paused_trigger_of_a_non_concurrent_job_becomes_paused_blocked(
    store: MemoryStore,
) -> None:
    add(store, repeating("fired", at(0), 10), one_shot("paused", at(5)), disallow_concurrent=True)
    store.pause_trigger(TriggerKey("paused"))
    fire_one(store, "fired")
    assert state(store, "paused") == TriggerState.PAUSED_BLOCKED


def test_completion_releases_the_blocked_triggers_of_a_non_concurrent_job(
    store: MemoryStore,
) -> None:
    add(
        store,
        repeating("fired", at(0), 10),
        one_shot("other", at(5)),
        one_shot("paused", at(5)),
        disallow_concurrent=True,
    )
    store.pause_trigger(TriggerKey("paused"))
    fire_id = fire_one(store, "fired")
    store.start_execution(fire_id, "w1@host")
    store.complete_execution(fire_id)
    assert [state(store, n) for n in ("fired", "other", "paused")] == [
        TriggerState.WAITING,
        TriggerState.WAITING,
        TriggerState.PAUSED,
    ]


def test_a_trigger_added_to_a_non_concurrent_job_in_flight_starts_blocked(
    store: MemoryStore,
) -> None:
    key = add(store, repeating("fired", at(0), 10), disallow_concurrent=True)
    fire_one(store, "fired")
    late = one_shot("late", at(5))
    late.job_key = key
    store.store_jobs_and_triggers([(None, [late])])
    assert state(store, "late") == TriggerState.BLOCKED


def test_a_concurrent_job_keeps_its_other_triggers_waiting(store: MemoryStore) -> None:
    add(store, repeating("fired", at(0), 10), one_shot("other", at(5)))
    fire_one(store, "fired")
    assert state(store, "other") == TriggerState.WAITING


def test_two_triggers_of_a_non_concurrent_job_in_one_batch_fire_once(store: MemoryStore) -> None:
    add(store, one_shot("t1", at(0)), one_shot("t2", at(0)), disallow_concurrent=True)
    claimed = acquire(store)
    firings = store.fire(A, claimed)
    assert [f.trigger_key.name for f in firings] == ["t1"]
    assert list(store.firing_states().values()) == [FiringState.FIRED]
    assert state(store, "t2") == TriggerState.BLOCKED


# -- pause and resume --------------------------------------------------------------------------


def test_pause_and_resume_a_trigger(store: MemoryStore) -> None:
    add(store, one_shot("t1", at(1)), one_shot("t2", at(1)))
    store.pause_trigger(TriggerKey("t1"))
    assert (state(store, "t1"), state(store, "t2")) == (TriggerState.PAUSED, TriggerState.WAITING)
    store.resume_trigger(TriggerKey("t1"))
    assert state(store, "t1") == TriggerState.WAITING
    assert next_fire(store, "t1") == at(1)


def test_pausing_an_acquired_trigger_pauses_it(store: MemoryStore) -> None:
    add(store, one_shot("t1", at(1)))
    acquire(store)
    store.pause_trigger(TriggerKey("t1"))
    assert state(store, "t1") == TriggerState.PAUSED


def test_pause_and_resume_a_job_pauses_and_resumes_all_its_triggers(store: MemoryStore) -> None:
    key = add(store, one_shot("t1", at(1)), one_shot("t2", at(2)))
    add(store, one_shot("other", at(1), job="other"), job="other")
    store.pause_job(key)
    assert [state(store, n) for n in ("t1", "t2", "other")] == [
        TriggerState.PAUSED,
        TriggerState.PAUSED,
        TriggerState.WAITING,
    ]
    store.resume_job(key)
    assert [state(store, n) for n in ("t1", "t2")] == [TriggerState.WAITING, TriggerState.WAITING]


def test_a_trigger_stored_in_a_paused_group_starts_paused(store: MemoryStore) -> None:
    # The store has no call to pause a group yet; the paused-groups table is what it reads.
    paused = store.tables.paused_trigger_groups
    with store.transaction() as conn:
        conn.execute(
            paused.insert().values(sched_name=store.scheduler_name, trigger_group="nightly")
        )
    in_group = SimpleTrigger(key=TriggerKey("t1", "nightly"), job_key=JobKey("job"), start_at=at(1))
    add(store, in_group, one_shot("t2", at(1)))
    assert store.get_trigger_state(TriggerKey("t1", "nightly")) == TriggerState.PAUSED
    assert state(store, "t2") == TriggerState.WAITING


def test_resuming_a_blocked_trigger_keeps_it_blocked(store: MemoryStore) -> None:
    add(store, repeating("fired", at(0), 10), one_shot("other", at(5)), disallow_concurrent=True)
    fire_one(store, "fired")
    store.pause_trigger(TriggerKey("other"))
    assert state(store, "other") == TriggerState.PAUSED_BLOCKED
    store.resume_trigger(TriggerKey("other"))
    assert state(store, "other") == TriggerState.BLOCKED


def test_resuming_a_trigger_the_pause_made_late_fires_it_now_by_smart_policy(
    store: MemoryStore, clock: FakeClock
) -> None:
    add(store, one_shot("t1", at(10)))
    store.pause_trigger(TriggerKey("t1"))
    clock.set(at(100))
    store.resume_trigger(TriggerKey("t1"))
    assert (state(store, "t1"), next_fire(store, "t1")) == (TriggerState.WAITING, at(100))


def test_resuming_a_late_cron_trigger_that_does_nothing_waits_for_its_next_time(
    store: MemoryStore, clock: FakeClock
) -> None:
    add(store, cron("minutely", "0 * * * * ?", misfire=CronMisfireInstruction.DO_NOTHING))
    store.pause_trigger(TriggerKey("minutely"))
    clock.set(at(100))
    store.resume_trigger(TriggerKey("minutely"))
    assert next_fire(store, "minutely") == at(120)


def test_resuming_a_late_counted_repeat_restarts_it_now_with_the_fire_times_it_had_left(
    store: MemoryStore, clock: FakeClock
) -> None:
    add(store, repeating("counted", at(0), 10, count=2))
    fire_one(store, "counted")
    store.pause_trigger(TriggerKey("counted"))
    clock.set(at(100))
    store.resume_trigger(TriggerKey("counted"))
    assert fire_times(store, clock, "counted") == [at(100), at(110)]


def test_resuming_a_trigger_within_the_misfire_threshold_keeps_its_fire_time(
    store: MemoryStore, clock: FakeClock
) -> None:
    add(store, one_shot("t1", at(10)))
    store.pause_trigger(TriggerKey("t1"))
    clock.set(at(70))
    store.resume_trigger(TriggerKey("t1"))
    assert next_fire(store, "t1") == at(10)


# -- misfires ----------------------------------------------------------------------------------


def test_a_late_one_shot_simple_trigger_fires_now(store: MemoryStore, clock: FakeClock) -> None:
    add(store, one_shot("t1", at(0), misfire=SimpleMisfireInstruction.FIRE_NOW))
    clock.set(at(120))
    assert store.handle_misfires(max_count=20) == (1, False)
    assert (state(store, "t1"), next_fire(store, "t1")) == (TriggerState.WAITING, at(120))


def test_a_late_cron_trigger_that_does_nothing_moves_to_its_next_time_after_now(
    store: MemoryStore, clock: FakeClock
) -> None:
    add(store, cron("hourly", "0 0 * * * ?", misfire=CronMisfireInstruction.DO_NOTHING))
    clock.set(at(90))
    assert store.handle_misfires(max_count=20) == (1, False)
    assert next_fire(store, "hourly") == at(3600)


def test_a_late_repeating_trigger_restarted_now_keeps_its_remaining_fire_count(
    store: MemoryStore, clock: FakeClock
) -> None:
    # Fires at 0 s and 10 s, misses 20 s; RESCHEDULE_NOW_WITH_EXISTING_REPEAT_COUNT (the smart
    # policy of a counted repeat) restarts at now with the 4 fire times it had left.
    add(store, repeating("counted", at(0), 10, count=5))
    fire_one(store, "counted")
    clock.set(at(10))
    fire_one(store, "counted")
    clock.set(at(95))
    store.handle_misfires(max_count=20)
    assert fire_times(store, clock, "counted") == [at(95), at(105), at(115), at(125)]


def test_the_misfire_handler_leaves_triggers_within_the_threshold_alone(
    store: MemoryStore, clock: FakeClock
) -> None:
    add(store, one_shot("t1", at(0)))
    clock.set(at(60))
    assert store.handle_misfires(max_count=20) == (0, False)
    assert next_fire(store, "t1") == at(0)


def test_the_misfire_handler_leaves_triggers_that_ignore_misfires_alone(
    store: MemoryStore, clock: FakeClock
) -> None:
    add(store, one_shot("t1", at(0), misfire=IGNORE))
    clock.set(at(3600))
    assert store.handle_misfires(max_count=20) == (0, False)
    assert next_fire(store, "t1") == at(0)


def test_the_misfire_handler_takes_at_most_max_count_earliest_first_and_reports_more(
    store: MemoryStore, clock: FakeClock
) -> None:
    add(store, one_shot("third", at(2)), one_shot("first", at(0)), one_shot("second", at(1)))
    clock.set(at(120))
    assert store.handle_misfires(max_count=2) == (2, True)
    assert [next_fire(store, n) for n in ("first", "second", "third")] == [at(120), at(120), at(2)]
    assert store.handle_misfires(max_count=2) == (1, False)
    assert next_fire(store, "third") == at(120)


def test_a_misfired_trigger_with_no_fire_time_left_is_removed_with_its_job(
    store: MemoryStore, clock: FakeClock
) -> None:
    ends = SimpleTrigger(
        key=TriggerKey("ends"),
        job_key=JobKey("job"),
        start_at=at(0),
        end_at=at(30),
        repeat_interval=timedelta(seconds=10),
        repeat_count=REPEAT_INDEFINITELY,
        misfire_instruction=SimpleMisfireInstruction.RESCHEDULE_NEXT_WITH_EXISTING_COUNT,
    )
    key = add(store, ends)
    clock.set(at(120))
    assert store.handle_misfires(max_count=20) == (1, False)
    assert state(store, "ends") == NONE_STATE
    assert store.retrieve_job(key) is None


# -- check-in and recovery ---------------------------------------------------------------------


def test_check_in_returns_false_when_the_row_had_been_removed(store: MemoryStore) -> None:
    assert store.check_in(A, interval=7.5) is False
    assert store.check_in(A, interval=7.5) is True
    store.remove_check_in(A)
    assert store.check_in(A, interval=7.5) is False
    assert [c.instance_name for c in store.check_ins()] == [A]


def test_check_in_records_the_time_and_interval(store: MemoryStore, clock: FakeClock) -> None:
    store.check_in(A, interval=7.5)
    clock.set(at(7))
    store.check_in(A, interval=7.5)
    [row] = store.check_ins()
    assert (row.last_checkin_millis, row.checkin_interval_millis) == (to_millis(at(7)), 7500)


def _claim_two_fire_one(store: MemoryStore) -> tuple[AcquiredFiring, AcquiredFiring]:
    add(store, one_shot("fired", at(0)), one_shot("claimed", at(0)))
    fired, claimed = acquire(store, A)
    store.fire(A, [fired])
    return fired, claimed


def test_recovery_releases_the_claims_and_hands_the_fired_rows_to_the_recoverer(
    store: MemoryStore,
) -> None:
    store.check_in(A, interval=7.5)
    fired, _ = _claim_two_fire_one(store)
    [row] = store.check_ins()
    assert store.recover_scheduler(
        A, seen_checkin_millis=row.last_checkin_millis, recovered_by=B
    ) == (1, 1)
    assert state(store, "claimed") == TriggerState.WAITING
    assert store.firing_states() == {fired.fire_instance_id: FiringState.FIRED}
    assert store.unpublished_firings(A) == []
    [firing] = store.unpublished_firings(B)
    assert (
        firing.fire_instance_id,
        firing.trigger_key,
        firing.scheduled_millis,
        firing.fired_by,
    ) == (fired.fire_instance_id, TriggerKey("fired"), to_millis(at(0)), B)
    assert store.check_ins() == []


def test_only_one_of_two_recoverers_of_the_same_check_in_wins(store: MemoryStore) -> None:
    store.check_in(A, interval=7.5)
    fired, _ = _claim_two_fire_one(store)
    seen = store.check_ins()[0].last_checkin_millis
    assert store.recover_scheduler(A, seen_checkin_millis=seen, recovered_by=B) == (1, 1)
    assert store.recover_scheduler(A, seen_checkin_millis=seen, recovered_by=C) is None
    assert [f.fire_instance_id for f in store.unpublished_firings(B)] == [fired.fire_instance_id]
    assert store.unpublished_firings(C) == []


def test_a_scheduler_that_checked_in_again_is_not_recovered(
    store: MemoryStore, clock: FakeClock
) -> None:
    store.check_in(A, interval=7.5)
    _claim_two_fire_one(store)
    seen = store.check_ins()[0].last_checkin_millis
    clock.set(at(20))
    store.check_in(A, interval=7.5)
    assert store.recover_scheduler(A, seen_checkin_millis=seen, recovered_by=B) is None
    assert state(store, "claimed") == TriggerState.ACQUIRED
    assert store.unpublished_firings(B) == []
    assert len(store.unpublished_firings(A)) == 1


def test_the_firing_owners_are_the_instances_with_claims_or_unpublished_firings(
    store: MemoryStore,
) -> None:
    _claim_two_fire_one(store)
    add(store, one_shot("claimed-by-b", at(0)), job="other")
    acquire(store, B)
    owners = store.firing_owners()
    assert (owners.schedulers, owners.unpublished) == ({A, B}, {A})
    store.mark_published(A, list(store.firing_states()))
    assert store.firing_owners().unpublished == set()


def test_the_firing_owners_name_each_executing_worker_with_its_earliest_start(
    store: MemoryStore, clock: FakeClock
) -> None:
    add(store, one_shot("t1", at(0)), one_shot("t2", at(0)), one_shot("t3", at(0)))
    started = to_millis(clock.now())
    assert store.start_execution(fire_one(store, "t1"), "w1")
    clock.set(at(5))
    assert store.start_execution(fire_one(store, "t2"), "w1")
    assert store.start_execution(fire_one(store, "t3"), "w2")
    assert store.firing_owners().executing_since == {"w1": started, "w2": to_millis(at(5))}


# -- loading a group of jobs a source owns ----------------------------------------------------


def _load_owned(store: MemoryStore, *entries: tuple[str, str]) -> JobChanges:
    """Load the group "imported" as a source that owns it, (name, task) → a job with a
    trigger every minute from at(60)."""
    defined = {}
    for name, task in entries:
        key = JobKey(name, "imported")
        trigger = SimpleTrigger(
            key=TriggerKey(name, "imported"),
            job_key=key,
            start_at=at(60),
            repeat_interval=timedelta(minutes=1),
            repeat_count=-1,
        )
        defined[name] = (Job(key=key, task=task), trigger, True)
    data = owned_group("test", "imported", defined)
    return store.apply_scheduling_data([data], store.clock.now()).by_job()


def test_loading_an_owned_group_adds_updates_removes_and_leaves_unchanged(
    store: MemoryStore, clock: FakeClock
) -> None:
    _load_owned(store, ("keep", "tasks.keep"), ("change", "tasks.old"), ("drop", "tasks.d"))
    clock.set(at(30))
    result = _load_owned(store, ("keep", "tasks.keep"), ("change", "tasks.new"), ("add", "tasks.a"))
    assert (result.added, result.updated, result.removed, result.unchanged) == (
        [JobKey("add", "imported")],
        [JobKey("change", "imported")],
        [JobKey("drop", "imported")],
        [JobKey("keep", "imported")],
    )
    assert store.job_keys("imported") == [
        JobKey("add", "imported"),
        JobKey("change", "imported"),
        JobKey("keep", "imported"),
    ]
    changed = store.retrieve_job(JobKey("change", "imported"))
    assert changed is not None and changed.task == "tasks.new"
    assert store.get_trigger_state(TriggerKey("drop", "imported")) == NONE_STATE


def test_loading_an_owned_group_leaves_an_unchanged_job_s_trigger_as_it_was(
    store: MemoryStore, clock: FakeClock
) -> None:
    _load_owned(store, ("keep", "tasks.keep"))
    clock.set(at(60))
    store.fire(A, acquire(store, until=at(60)))
    result = _load_owned(store, ("keep", "tasks.keep"))
    assert result.unchanged == [JobKey("keep", "imported")]
    trigger = store.retrieve_trigger(TriggerKey("keep", "imported"))
    assert trigger is not None
    assert (trigger.next_fire_time, trigger.times_triggered) == (at(120), 1)


def test_loading_an_owned_group_leaves_other_groups_alone(store: MemoryStore) -> None:
    key = add(store, one_shot("t1", at(1)))
    _load_owned(store)
    assert store.job_keys() == [key]


def test_a_trigger_for_a_missing_job_is_refused_and_nothing_is_stored(store: MemoryStore) -> None:
    from celery_quartz.errors import JobNotFoundError

    before = store.count_rows()
    with pytest.raises(
        JobNotFoundError, match=r"trigger DEFAULT\.t1: job DEFAULT\.ghost is not stored"
    ):
        store.store_jobs_and_triggers(
            [
                (Job(key=JobKey("real"), task="tasks.work"), [one_shot("t0", at(1), job="real")]),
                (None, [one_shot("t1", at(1), job="ghost")]),
            ]
        )
    assert store.count_rows() == before


def test_a_claim_of_a_batch_already_due_fires_it_in_the_same_transaction(
    store: MemoryStore,
) -> None:
    add(store, one_shot("t1", at(0)), repeating("t2", at(0), 10))
    claim = store.claim(A, no_later_than=at(1), max_count=10, time_window=0)
    assert claim.acquired == []
    assert sorted(f.trigger_key.name for f in claim.firings) == ["t1", "t2"]
    assert sorted(store.firing_states().values()) == [FiringState.FIRED] * 2
    assert (state(store, "t1"), state(store, "t2")) == (TriggerState.COMPLETE, TriggerState.WAITING)
    assert next_fire(store, "t2") == at(10)


def test_a_claim_of_a_batch_due_later_only_claims_it(store: MemoryStore) -> None:
    add(store, one_shot("t1", at(0.5)))
    claim = store.claim(A, no_later_than=at(1), max_count=10, time_window=0)
    assert (claim.firings, names(claim.acquired)) == ([], ["t1"])
    assert state(store, "t1") == TriggerState.ACQUIRED


def test_a_direct_claim_fires_a_disallow_concurrent_job_once_and_blocks_its_other_trigger(
    store: MemoryStore,
) -> None:
    add(store, one_shot("t1", at(0)), one_shot("t2", at(0)), disallow_concurrent=True)
    claim = store.claim(A, no_later_than=at(1), max_count=10, time_window=0)
    assert [f.trigger_key.name for f in claim.firings] == ["t1"]
    assert len(store.firing_states()) == 1
    assert state(store, "t2") == TriggerState.BLOCKED


def test_a_claimed_trigger_whose_task_is_unknown_goes_to_error(store: MemoryStore) -> None:
    add(store, one_shot("t1", at(0)))
    claim = store.claim(
        A,
        no_later_than=at(1),
        max_count=10,
        time_window=0,
        task_exists=lambda name: False,
    )
    assert (claim.firings, claim.acquired) == ([], [])
    assert state(store, "t1") == TriggerState.ERROR
    assert store.firing_states() == {}


def test_a_claim_records_the_previous_batch_as_published(store: MemoryStore) -> None:
    add(store, one_shot("t1", at(0)))
    [firing] = store.claim(A, no_later_than=at(1), max_count=10, time_window=0).firings
    store.claim(
        A,
        no_later_than=at(1),
        max_count=10,
        time_window=0,
        published=[firing.fire_instance_id],
    )
    assert store.firing_states() == {firing.fire_instance_id: FiringState.PUBLISHED}


# -- the store's hooks ---------------------------------------------------------------------------


class _Recorder:
    """Store hooks that note what they see."""

    def __init__(self, name: str, seen: list[tuple[str, ...]]) -> None:
        self.name, self.seen = name, seen

    def before_store_operation(self, operation: StoreOperation) -> str:
        self.seen.append((self.name, "before", operation.name))
        return self.name

    def after_store_operation(
        self,
        operation: StoreOperation,
        before: str,
        *,
        result: object = None,
        exception: BaseException | None = None,
    ) -> None:
        outcome = type(exception).__name__ if exception else repr(result)
        self.seen.append((before, "after", operation.name, outcome))


def test_every_role_operation_of_the_interfaces_is_an_operation_of_the_sql_store() -> None:
    roles = (
        JobStore,
        PauseStore,
        BackfillStore,
        SchedulingStore,
        ClusterStore,
        WorkerStore,
        StoreReader,
        HistoryReader,
        HistoryKeeper,
    )
    declared = set().union(*(role.__abstractmethods__ for role in roles))
    hooked = {name for name, value in vars(SqlStore).items() if isinstance(value, _Operation)}
    assert hooked == declared


def test_a_role_operation_runs_between_the_hooks_first_added_outermost(
    store: MemoryStore,
) -> None:
    seen: list[tuple[str, ...]] = []
    store.add_hooks(_Recorder("outer", seen))
    store.add_hooks(_Recorder("inner", seen))
    assert store.get_trigger_state(TriggerKey("none")) == NONE_STATE
    with pytest.raises(JobNotFoundError):
        store.store_jobs_and_triggers([(None, [one_shot("t1", at(1))])])
    assert seen == [
        ("outer", "before", "get_trigger_state"),
        ("inner", "before", "get_trigger_state"),
        ("inner", "after", "get_trigger_state", repr(NONE_STATE)),
        ("outer", "after", "get_trigger_state", repr(NONE_STATE)),
        ("outer", "before", "store_jobs_and_triggers"),
        ("inner", "before", "store_jobs_and_triggers"),
        ("inner", "after", "store_jobs_and_triggers", "JobNotFoundError"),
        ("outer", "after", "store_jobs_and_triggers", "JobNotFoundError"),
    ]
