"""A trigger's overlap policy, decided by the store in the transaction that fires an occurrence
(docs/steering.md#overlap-policy): ``skip`` drops it, ``buffer_one`` holds it until the firing in
flight ends, ``cancel_previous`` fires it and names the firing to revoke. On SQLite and PostgreSQL
(the ``db`` fixture), by a claim that fires at once and by a claim fired later."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select

from celery_quartz.clock import FakeClock, to_millis
from celery_quartz.errors import InvalidTriggerError
from celery_quartz.firing import Firing
from celery_quartz.keys import JobKey, TriggerKey
from celery_quartz.overlap import OverlapPolicy
from celery_quartz.retry import RetryPolicy
from celery_quartz.store import FiringState, SqlStore, TriggerState
from celery_quartz.store.views import FiringOutcome
from celery_quartz.triggers import (
    CalendarIntervalTrigger,
    CronTrigger,
    DailyTimeIntervalTrigger,
    RecurrenceTrigger,
    SimpleMisfireInstruction,
    SimpleTrigger,
    Trigger,
)
from celery_quartz.triggers.base import TRIGGER_KINDS
from tests.stores import store_at
from tests.unit.builders import (
    W1,
    A,
    B,
    acquire,
    add,
    claim,
    every,
    fire_one,
    next_fire,
    running,
    state,
)
from tests.unit.conftest import at


def history(db: SqlStore) -> list[Any]:
    h = db.tables.history
    with db.transaction() as conn:
        return list(conn.execute(select(h).order_by(h.c.history_id)).all())


def not_run(db: SqlStore) -> list[tuple[str, str, int]]:
    return [
        (r.result, r.trigger_name, r.scheduled_time)
        for r in history(db)
        if r.result in ("skipped", "held", "misfired")
    ]


def fire_due(db: SqlStore, instance: str = A) -> list[Firing]:
    """A claim acquired, then fired (the loop's path for what is due a little later)."""
    acquired = acquire(db, instance, until=db.clock.now())
    return db.fire(instance, acquired)


def ms(seconds: float) -> int:
    return to_millis(at(seconds))


@pytest.fixture(params=["claim", "acquire_then_fire"])
def fire(request: pytest.FixtureRequest) -> Any:
    return claim if request.param == "claim" else fire_due


# -- allow ---------------------------------------------------------------------------------


def test_allow_fires_the_next_occurrence_while_the_previous_firing_runs(
    db: SqlStore, clock: FakeClock, fire: Any
) -> None:
    add(db, every("t", 10, "allow"))
    running(db, "t")
    clock.set(at(10))
    assert [f.trigger_key.name for f in fire(db)] == ["t"]
    assert not_run(db) == []


# -- skip ----------------------------------------------------------------------------------


def test_skip_drops_the_occurrence_due_while_the_previous_firing_runs_and_moves_on(
    db: SqlStore, clock: FakeClock, fire: Any
) -> None:
    add(db, every("t", 10, "skip"))
    first = running(db, "t")
    clock.set(at(10))
    assert fire(db) == []
    assert next_fire(db, "t") == at(20)
    assert state(db, "t") == TriggerState.WAITING
    trigger = db.retrieve_trigger(TriggerKey("t"))
    assert trigger is not None and trigger.times_triggered == 1
    assert trigger.previous_fire_time == at(0)
    assert list(db.firing_states()) == [first]
    [row] = [r for r in history(db) if r.result == "skipped"]
    assert (row.trigger_name, row.scheduled_time, row.instance_name) == ("t", ms(10), A)
    assert row.reason.startswith("overlap")
    assert first in row.reason


def test_skip_fires_again_once_the_previous_firing_has_ended(
    db: SqlStore, clock: FakeClock
) -> None:
    add(db, every("t", 10, "skip"))
    first = running(db, "t")
    clock.set(at(10))
    assert claim(db) == []
    assert db.complete_execution(first)
    clock.set(at(20))
    assert [f.scheduled_millis for f in claim(db)] == [ms(20)]


def test_a_published_firing_not_yet_started_is_in_flight_too(
    db: SqlStore, clock: FakeClock
) -> None:
    add(db, every("t", 10, "skip"))
    fire_id = fire_one(db, "t")
    db.mark_published(A, [fire_id])
    clock.set(at(10))
    assert claim(db) == []
    assert [r[0] for r in not_run(db)] == ["skipped"]


def test_a_skipped_last_occurrence_completes_the_trigger_and_its_firings_end_removes_it(
    db: SqlStore, clock: FakeClock
) -> None:
    add(db, every("t", 10, "skip", count=1))
    first = running(db, "t")
    clock.set(at(10))
    assert claim(db) == []
    assert state(db, "t") == TriggerState.COMPLETE
    assert db.complete_execution(first)
    assert db.retrieve_trigger(TriggerKey("t")) is None


def test_two_schedulers_skip_the_same_occurrence_once(db: SqlStore, clock: FakeClock) -> None:
    add(db, every("t", 10, "skip"))
    running(db, "t")
    clock.set(at(10))
    assert claim(db, A) == [] and claim(db, B) == []
    assert not_run(db) == [("skipped", "t", ms(10))]


def test_another_trigger_of_the_same_job_running_is_not_an_overlap(
    db: SqlStore, clock: FakeClock
) -> None:
    add(db, every("t", 10, "skip"), every("other", 10, "skip"))
    running(db, "other")
    clock.set(at(10))
    assert "t" in {f.trigger_key.name for f in claim(db)}
    assert [r for r in not_run(db) if r[1] == "t"] == []


def test_a_retry_of_the_trigger_in_flight_is_not_an_overlap_and_is_never_skipped(
    db: SqlStore, clock: FakeClock
) -> None:
    trigger = every("t", 10, "skip")
    trigger.retry_policy = RetryPolicy.fixed(3, timedelta(seconds=2))
    add(db, trigger)
    first = running(db, "t")
    clock.set(at(1))
    assert db.complete_execution(first, failed=True)
    clock.set(at(3))
    [retry] = claim(db)
    assert retry.retry_attempt == 1
    db.mark_published(A, [retry.fire_instance_id])
    assert db.start_execution(retry.fire_instance_id, W1)
    clock.set(at(10))
    assert [f.trigger_key.name for f in claim(db)] == ["t"]
    assert not_run(db) == []


def test_a_skip_is_not_a_misfire(db: SqlStore, clock: FakeClock) -> None:
    add(db, every("t", 10, "skip"))
    running(db, "t")
    clock.set(at(10))
    claim(db)
    assert db.handle_misfires(max_count=10) == (0, False)
    assert [r[0] for r in not_run(db)] == ["skipped"]


def test_disallow_concurrent_wins_over_the_overlap_policy(db: SqlStore, clock: FakeClock) -> None:
    add(db, every("t", 10, "skip"), disallow_concurrent=True)
    first = running(db, "t")
    assert state(db, "t") == TriggerState.BLOCKED
    clock.set(at(10))
    assert claim(db) == []
    assert db.complete_execution(first)
    assert [f.scheduled_millis for f in claim(db)] == [ms(10)]
    assert not_run(db) == []


# -- buffer_one ----------------------------------------------------------------------------


def test_buffer_one_holds_the_occurrence_blocked_until_the_firing_ends_then_fires_it(
    db: SqlStore, clock: FakeClock, fire: Any
) -> None:
    add(db, every("t", 10, "buffer_one"))
    first = running(db, "t")
    clock.set(at(10))
    assert fire(db) == []
    assert state(db, "t") == TriggerState.BLOCKED
    assert next_fire(db, "t") == at(10)
    clock.set(at(14))
    assert db.complete_execution(first)
    assert state(db, "t") == TriggerState.WAITING
    [held] = claim(db)
    assert held.scheduled_millis == ms(10)
    assert next_fire(db, "t") == at(20)
    assert not_run(db) == []


def test_buffer_one_skips_the_occurrences_that_came_due_while_one_was_held(
    db: SqlStore, clock: FakeClock
) -> None:
    add(db, every("t", 10, "buffer_one"))
    first = running(db, "t")
    clock.set(at(10))
    assert claim(db) == []
    clock.set(at(35))
    assert db.complete_execution(first)
    [held] = claim(db)
    assert held.scheduled_millis == ms(10)
    assert next_fire(db, "t") == at(40)
    assert not_run(db) == [("skipped", "t", ms(20)), ("skipped", "t", ms(30))]


def test_buffer_one_hands_a_held_occurrence_past_the_misfire_threshold_to_its_instruction(
    db: SqlStore, clock: FakeClock
) -> None:
    add(
        db,
        every(
            "t",
            10,
            "buffer_one",
            misfire=SimpleMisfireInstruction.RESCHEDULE_NEXT_WITH_REMAINING_COUNT,
        ),
    )
    first = running(db, "t")
    clock.set(at(10))
    assert claim(db) == []
    clock.set(at(95))  # the threshold is 60 s
    assert db.complete_execution(first)
    assert state(db, "t") == TriggerState.WAITING
    assert next_fire(db, "t") == at(100)
    [(result, name, scheduled)] = not_run(db)
    assert (result, name, scheduled) == ("held", "t", ms(10))
    assert "overlap" in history(db)[-1].reason


def test_buffer_one_keeps_the_held_occurrence_through_pause_and_resume(
    db: SqlStore, clock: FakeClock
) -> None:
    add(db, every("t", 10, "buffer_one"))
    first = running(db, "t")
    clock.set(at(10))
    assert claim(db) == []
    db.pause_trigger(TriggerKey("t"))
    assert state(db, "t") == TriggerState.PAUSED_BLOCKED
    db.resume_trigger(TriggerKey("t"))
    assert state(db, "t") == TriggerState.BLOCKED
    db.pause_trigger(TriggerKey("t"))
    clock.set(at(12))
    assert db.complete_execution(first)
    assert state(db, "t") == TriggerState.PAUSED
    assert next_fire(db, "t") == at(10)
    db.resume_trigger(TriggerKey("t"))
    [held] = claim(db)
    assert held.scheduled_millis == ms(10)


def test_buffer_one_is_released_by_a_firing_that_expired_unstarted(
    db: SqlStore, clock: FakeClock
) -> None:
    add(db, every("t", 10, "buffer_one", misfire=SimpleMisfireInstruction.IGNORE_MISFIRE_POLICY))
    fire_id = fire_one(db, "t")
    db.mark_published(A, [fire_id])
    clock.set(at(10))
    assert claim(db) == []
    assert state(db, "t") == TriggerState.BLOCKED
    assert db.cancel_firing(fire_id, W1)
    assert state(db, "t") == TriggerState.WAITING


# -- cancel_previous -----------------------------------------------------------------------


def test_cancel_previous_fires_and_names_the_firing_in_flight_to_revoke(
    db: SqlStore, clock: FakeClock, fire: Any
) -> None:
    add(db, every("t", 10, "cancel_previous"))
    first = running(db, "t")
    clock.set(at(10))
    [new] = fire(db)
    assert new.scheduled_millis == ms(10)
    assert new.revokes == (first,)
    assert set(db.firing_states()) == {first, new.fire_instance_id}


def test_cancel_previous_names_nothing_when_nothing_is_in_flight(
    db: SqlStore, clock: FakeClock
) -> None:
    add(db, every("t", 10, "cancel_previous"))
    first = running(db, "t")
    assert db.complete_execution(first)
    clock.set(at(10))
    [new] = claim(db)
    assert new.revokes == ()


def test_a_run_ended_cooperatively_after_its_revoke_is_recorded_cancelled(
    db: SqlStore, clock: FakeClock
) -> None:
    add(db, every("t", 10, "cancel_previous"))
    first = running(db, "t")
    assert db.complete_execution(first, outcome=FiringOutcome(cancelled=True))
    assert [r.result for r in history(db)] == ["cancelled"]


# -- the policy ----------------------------------------------------------------------------


def test_the_policy_is_stored_and_read_back(db: SqlStore) -> None:
    add(db, every("t", 10, "buffer_one"), every("a", 10, "allow"))
    trigger = db.retrieve_trigger(TriggerKey("t"))
    assert trigger is not None and trigger.overlap_policy is OverlapPolicy.BUFFER_ONE
    allowed = db.retrieve_trigger(TriggerKey("a"))
    assert allowed is not None and allowed.overlap_policy is OverlapPolicy.ALLOW


def test_an_unknown_policy_is_refused_naming_it_and_nothing_is_stored(db: SqlStore) -> None:
    with pytest.raises(
        InvalidTriggerError, match=r"trigger DEFAULT\.t: overlap_policy 'sometimes'"
    ):
        add(db, every("t", 10, "sometimes"))
    assert db.retrieve_job(JobKey("job")) is None


def test_the_policy_names_are_read_in_any_case_and_with_dashes() -> None:
    assert OverlapPolicy.parse("Buffer-One") is OverlapPolicy.BUFFER_ONE
    assert OverlapPolicy.parse(None) is OverlapPolicy.ALLOW
    with pytest.raises(InvalidTriggerError, match="is not one of allow, skip, buffer_one"):
        OverlapPolicy.parse(3)


#: Each trigger kind, built with the given common fields.
KINDS: dict[str, Callable[..., Trigger]] = {
    "simple": lambda **common: SimpleTrigger(key=TriggerKey("simple"), **common),
    "cron": lambda **common: CronTrigger(
        key=TriggerKey("cron"), expression="0 * * * * ?", **common
    ),
    "calendar": lambda **common: CalendarIntervalTrigger(key=TriggerKey("calendar"), **common),
    "daily": lambda **common: DailyTimeIntervalTrigger(key=TriggerKey("daily"), **common),
    "rrule": lambda **common: RecurrenceTrigger(
        key=TriggerKey("rrule"), rule="FREQ=DAILY", **common
    ),
}


def test_every_trigger_kind_reads_its_policy_into_the_enum_at_construction() -> None:
    kinds = [build(overlap_policy="Buffer-One") for build in KINDS.values()]
    assert {type(t).kind for t in kinds} == set(TRIGGER_KINDS)
    assert all(t.overlap_policy is OverlapPolicy.BUFFER_ONE for t in kinds)
    assert all(build().overlap_policy is OverlapPolicy.ALLOW for build in KINDS.values())
    assert all(
        build(overlap_policy=None).overlap_policy is OverlapPolicy.ALLOW for build in KINDS.values()
    )
    later = kinds[0]
    later.overlap_policy = "CANCEL-previous"
    assert later.overlap_policy is OverlapPolicy.CANCEL_PREVIOUS


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_trigger_kind_refuses_an_unknown_policy_at_construction_naming_it(
    kind: str,
) -> None:
    with pytest.raises(
        InvalidTriggerError,
        match=rf"trigger DEFAULT\.{kind}: overlap_policy 'sometimes' is not one of allow",
    ):
        KINDS[kind](overlap_policy="sometimes")
    trigger = KINDS[kind](overlap_policy="skip")
    with pytest.raises(InvalidTriggerError, match=rf"trigger DEFAULT\.{kind}: overlap_policy 7"):
        trigger.overlap_policy = 7  # type: ignore[assignment]
    assert trigger.overlap_policy is OverlapPolicy.SKIP  # left as it was


def test_the_firings_in_flight_are_fired_published_or_executing() -> None:
    from celery_quartz.store.sql._overlaps import IN_FLIGHT

    assert set(IN_FLIGHT) == {FiringState.FIRED, FiringState.PUBLISHED, FiringState.EXECUTING}


def test_a_resume_releases_a_hold_whose_firing_ended_without_releasing_it(
    db: SqlStore, clock: FakeClock
) -> None:
    add(db, every("t", 10, "buffer_one"))
    first = running(db, "t")
    clock.set(at(10))
    assert claim(db) == []
    # The firing's row removed as an older version's worker ends it: no release.
    f = db.tables.fired_triggers
    with db.transaction() as conn:
        conn.execute(f.delete().where(f.c.fire_instance_id == first))
    assert state(db, "t") == TriggerState.BLOCKED
    db.pause_trigger(TriggerKey("t"))
    db.resume_trigger(TriggerKey("t"))
    assert state(db, "t") == TriggerState.WAITING
    [held] = claim(db)
    assert held.scheduled_millis == ms(10)


def test_a_resume_keeps_a_hold_whose_firing_still_runs(db: SqlStore, clock: FakeClock) -> None:
    add(db, every("t", 10, "buffer_one"))
    running(db, "t")
    clock.set(at(10))
    claim(db)
    db.pause_trigger(TriggerKey("t"))
    db.resume_trigger(TriggerKey("t"))
    assert state(db, "t") == TriggerState.BLOCKED


@pytest.fixture
def pg(pg_store_url: str, clock: FakeClock) -> Iterator[SqlStore]:
    """The SQL store on PostgreSQL alone: two threads claim on it at once (the RAM store is one
    connection)."""
    store = store_at(pg_store_url, "unit", clock=clock)
    yield store
    store.dispose()


@pytest.mark.integration
def test_two_schedulers_claiming_at_the_same_moment_record_each_skip_once(
    pg: SqlStore, clock: FakeClock
) -> None:
    """Claims of two instances run in two threads, released together, occurrence after
    occurrence: each occurrence due while the first firing runs is skipped by one of them."""
    import threading

    db = pg
    add(db, every("t", 10, "skip"))
    running(db, "t")
    for n in range(1, 6):
        clock.set(at(10 * n))
        barrier = threading.Barrier(2)
        fired: list[list[Firing]] = []

        def race(instance: str, barrier: threading.Barrier, fired: list[list[Firing]]) -> None:
            barrier.wait()
            fired.append(claim(db, instance))

        threads = [threading.Thread(target=race, args=(i, barrier, fired)) for i in (A, B)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert fired == [[], []]
    assert not_run(db) == [("skipped", "t", ms(10 * n)) for n in range(1, 6)]


def test_cancelled_reads_the_workers_revoked_task_ids() -> None:
    from celery.worker import state

    from celery_quartz.context import JobExecutionContext

    context = JobExecutionContext(
        scheduler_name="unit",
        fire_instance_id="f-1",
        job_key=JobKey("job"),
        trigger_key=TriggerKey("t"),
        scheduled_fire_time=at(0),
        fire_time=at(0),
        task_id="f-1.r1",
    )
    assert not context.cancelled
    state.revoked.add("f-1")  # the firing's first message, expired: not this run's
    try:
        assert not context.cancelled
        state.revoked.add("f-1.r1")
        assert context.cancelled
    finally:
        state.revoked.discard("f-1")
        state.revoked.discard("f-1.r1")
