"""The fencing epoch of non-clustered schedulers, and the recovery pass when the leader moves.

Two leaders are two loops, each with its own store object over one in-memory database (as two
processes would have their own engines over one database)."""

from __future__ import annotations

import pytest
from celery import Celery
from sqlalchemy import event

from celery_quartz import SchedulerStatus
from celery_quartz.clock import FakeClock
from celery_quartz.config import Settings
from celery_quartz.errors import FencedError
from celery_quartz.loop import SchedulingLoop
from celery_quartz.publisher import Publisher
from celery_quartz.store import FiringState, MemoryStore, SqlStore
from tests.unit.builders import acquire, add, fire_one, one_shot, repeating, state
from tests.unit.conftest import at


def process(store: MemoryStore, clock: FakeClock) -> SqlStore:
    """Another process's store over the same database."""
    return SqlStore(engine=store.engine, scheduler_name=store.scheduler_name, clock=clock)


def leader(
    store: SqlStore, app: Celery, clock: FakeClock, instance: str, **changes: object
) -> SchedulingLoop:
    values: dict[str, object] = {
        "scheduler_name": store.scheduler_name,
        "clustered": False,
        "instance_id": instance,
        "idle_wait": 1.0,
    }
    values.update(changes)
    return SchedulingLoop(store, Publisher(app), Settings(**values), clock, instance)  # type: ignore[arg-type]


def firing_rows(store: SqlStore) -> list[tuple[str, str]]:
    f = store.tables.fired_triggers
    with store.transaction() as conn:
        return [(r.instance_name, r.state) for r in conn.execute(f.select())]


# -- the epoch -----------------------------------------------------------------------------------


def test_each_leadership_takes_the_next_epoch(
    store: MemoryStore, app: Celery, clock: FakeClock
) -> None:
    first = leader(store, app, clock, "one")
    second = leader(process(store, clock), app, clock, "two")
    first.start()
    second.start()
    first.standby()
    first.start()
    assert (first.epoch, second.epoch) == (3, 2)
    assert store.current_epoch() == 3


def test_the_epoch_is_copied_to_the_leader_s_check_in_row(
    store: MemoryStore, app: Celery, clock: FakeClock
) -> None:
    leader(store, app, clock, "one").start()
    s = store.tables.scheduler_state
    with store.transaction() as conn:
        assert conn.execute(s.select()).one().epoch == 1


def test_a_deposed_leader_s_acquisition_is_refused(
    store: MemoryStore, app: Celery, clock: FakeClock
) -> None:
    add(store, one_shot("t1", at(0)))
    old = leader(store, app, clock, "old")
    old.start()
    leader(process(store, clock), app, clock, "new").start()
    with pytest.raises(FencedError, match="another leader has been elected"):
        acquire(store, "old")
    assert state(store, "t1") == "WAITING"


def test_a_deposed_leader_s_fire_is_refused_and_nothing_fires(
    store: MemoryStore, app: Celery, clock: FakeClock
) -> None:
    add(store, one_shot("t1", at(0)))
    old = leader(store, app, clock, "old")
    old.start()
    claimed = acquire(store, "old")
    leader(process(store, clock), app, clock, "new").start()
    with pytest.raises(FencedError):
        store.fire("old", claimed)
    assert all(s != FiringState.FIRED for _, s in firing_rows(store))


def test_a_deposed_leader_s_publication_record_is_refused(
    store: MemoryStore, app: Celery, clock: FakeClock
) -> None:
    add(store, one_shot("t1", at(0)))
    old = leader(store, app, clock, "old")
    old.start()
    fire_id = fire_one(store, "t1", instance="old")
    leader(process(store, clock), app, clock, "new").start()
    with pytest.raises(FencedError):
        store.mark_published("old", [fire_id])


def test_a_deposed_leader_s_misfire_handling_is_refused(
    store: MemoryStore, app: Celery, clock: FakeClock
) -> None:
    old = leader(store, app, clock, "old")
    old.start()
    leader(process(store, clock), app, clock, "new").start()
    with pytest.raises(FencedError):
        store.handle_misfires(max_count=20)
    with pytest.raises(FencedError):
        store.release_acquired("old")


def test_a_deposed_leader_stands_down_by_itself(
    store: MemoryStore, app: Celery, clock: FakeClock
) -> None:
    add(store, repeating("t1", at(0), 1))
    old = leader(store, app, clock, "old")
    told: list[FencedError] = []
    old.on_fenced.append(told.append)
    old.start()
    new = leader(process(store, clock), app, clock, "new")
    new.start()
    old.run_once()
    assert old.status is SchedulerStatus.STANDBY
    assert len(told) == 1
    assert old.fired_count == 0
    new.run_once()
    assert new.fired_count == 1


def test_a_deposed_leader_s_held_batch_does_not_fire_twice(
    store: MemoryStore, app: Celery, clock: FakeClock
) -> None:
    add(store, one_shot("t1", at(0.5)))
    old = leader(store, app, clock, "old")
    old.start()
    old.run_once()  # holds the batch, waiting for at(0.5)
    new = leader(process(store, clock), app, clock, "new")
    new.start()  # its recovery pass frees the claim
    clock.advance(0.5)
    new.run_once()
    old.run_once()
    assert (new.fired_count, old.fired_count) == (1, 0)
    assert old.status is SchedulerStatus.STANDBY


def test_a_worker_s_completion_is_not_fenced(
    store: MemoryStore, app: Celery, clock: FakeClock
) -> None:
    add(store, one_shot("t1", at(0)))
    old = leader(store, app, clock, "old")
    old.start()
    fire_id = fire_one(store, "t1", instance="old")
    store.mark_published("old", [fire_id])
    assert store.start_execution(fire_id, "worker@host")
    leader(process(store, clock), app, clock, "new").start()
    worker = process(store, clock)  # a worker's own store carries no fence
    assert worker.complete_execution(fire_id)


def test_a_clustered_scheduler_carries_no_fence_and_reads_no_epoch(
    store: MemoryStore, app: Celery, clock: FakeClock
) -> None:
    add(store, one_shot("t1", at(0)))
    loop = leader(store, app, clock, "node", clustered=True)
    loop.start()
    statements: list[str] = []

    def record(conn: object, cursor: object, statement: str, *args: object) -> None:
        statements.append(statement)

    event.listen(store.engine, "before_cursor_execute", record)
    try:
        loop.run_once()
    finally:
        event.remove(store.engine, "before_cursor_execute", record)
    assert store.fence is None
    assert loop.fired_count == 1
    assert not [s for s in statements if "quartz_locks" in s]


# -- the recovery pass when the leader moves -----------------------------------------------------


def test_a_new_leader_releases_the_previous_leader_s_claims(
    store: MemoryStore, app: Celery, clock: FakeClock
) -> None:
    add(store, one_shot("t1", at(0.5)))
    acquire(store, "dead")
    leader(process(store, clock), app, clock, "new").start()
    assert state(store, "t1") == "WAITING"
    assert firing_rows(store) == []


def test_unpublished_firings_of_the_same_instance_id_are_published_again(
    store: MemoryStore, app: Celery, clock: FakeClock
) -> None:
    add(store, one_shot("t1", at(0)))
    fire_one(store, "t1", instance="leader")  # fired, publication not recorded; then died
    new = leader(process(store, clock), app, clock, "leader")
    new.start()
    new.run_once()
    assert new.fired_count == 1
    assert firing_rows(store) == [("leader", FiringState.PUBLISHED)]


def test_unpublished_firings_of_another_instance_id_are_dropped(
    store: MemoryStore, app: Celery, clock: FakeClock
) -> None:
    add(store, one_shot("t1", at(0)), requests_recovery=True)
    fire_one(store, "t1", instance="previous")
    new = leader(process(store, clock), app, clock, "other")
    new.start()
    new.run_once()
    assert new.fired_count == 0
    assert firing_rows(store) == []


def test_published_and_executing_firings_are_left_to_the_workers(
    store: MemoryStore, app: Celery, clock: FakeClock
) -> None:
    add(store, one_shot("t1", at(0), job="a"), job="a")
    add(store, one_shot("t2", at(0), job="b"), job="b")
    one = fire_one(store, "t1", instance="previous")
    two = fire_one(store, "t2", instance="previous")
    store.mark_published("previous", [one, two])
    store.start_execution(two, "worker@host")
    leader(process(store, clock), app, clock, "other").start()
    assert sorted(s for _, s in firing_rows(store)) == [
        FiringState.EXECUTING,
        FiringState.PUBLISHED,
    ]


def test_blocked_triggers_stay_blocked_while_their_job_runs_and_are_freed_otherwise(
    store: MemoryStore, app: Celery, clock: FakeClock
) -> None:
    add(
        store,
        one_shot("r1", at(0), job="running"),
        one_shot("r2", at(60), job="running"),
        job="running",
        disallow_concurrent=True,
    )
    add(
        store,
        one_shot("s1", at(0), job="stale"),
        one_shot("s2", at(60), job="stale"),
        job="stale",
        disallow_concurrent=True,
    )
    running = fire_one(store, "r1", instance="previous")
    store.mark_published("previous", [running])
    store.start_execution(running, "worker@host")
    fire_one(store, "s1", instance="previous")  # unpublished, other id: dropped
    assert (state(store, "r2"), state(store, "s2")) == ("BLOCKED", "BLOCKED")
    leader(process(store, clock), app, clock, "other").start()
    assert (state(store, "r2"), state(store, "s2")) == ("BLOCKED", "WAITING")


def test_a_new_leader_handles_every_misfire_with_no_limit(
    store: MemoryStore, app: Celery, clock: FakeClock
) -> None:
    for i in range(7):
        add(store, repeating(f"t{i}", at(0), 10, job=f"j{i}"), job=f"j{i}")
    clock.advance(600)
    new = leader(process(store, clock), app, clock, "new", max_misfires_per_round=2)
    new.start()
    late = [
        t
        for i in range(7)
        if (t := store.retrieve_trigger(one_shot(f"t{i}", at(0)).key)) is not None
        and t.next_fire_time is not None
        and t.next_fire_time < at(540)
    ]
    assert late == []


def test_re_election_after_another_leader_runs_the_pass_again(
    store: MemoryStore, app: Celery, clock: FakeClock
) -> None:
    add(store, one_shot("t1", at(0.5)))
    first = leader(store, app, clock, "one")
    first.start()
    first.standby()
    other_store = process(store, clock)
    second = leader(other_store, app, clock, "two")
    second.start()
    second.run_once()  # claims t1, then "dies" holding it
    assert state(store, "t1") == "ACQUIRED"
    first.start()
    assert state(store, "t1") == "WAITING"


def test_re_election_with_no_other_leader_between_keeps_the_batch(
    store: MemoryStore, app: Celery, clock: FakeClock
) -> None:
    add(store, one_shot("t1", at(0.5)))
    first = leader(store, app, clock, "one")
    first.start()
    first.run_once()
    first.standby()
    first.start()
    assert state(store, "t1") == "ACQUIRED"
    clock.advance(0.5)
    first.run_once()
    assert first.fired_count == 1


# -- replicas sharing the leader's instance id ---------------------------------------------------


def check_in_row(store: SqlStore) -> tuple[int | None, str | None, int]:
    s = store.tables.scheduler_state
    with store.transaction() as conn:
        row = conn.execute(s.select()).one()
    return row.pid, row.status, row.last_checkin_time


def test_a_non_clustered_scheduler_in_standby_stops_checking_in(
    store: MemoryStore, app: Celery, clock: FakeClock
) -> None:
    loop = leader(store, app, clock, "leader")
    loop.start()
    loop.standby()
    written = check_in_row(store)
    clock.advance(60)
    loop.run_once()
    assert check_in_row(store) == written
    loop.start()
    assert check_in_row(store)[1:] == ("RUNNING", int(clock.now().timestamp() * 1000))


def test_a_deposed_leader_leaves_the_new_leader_s_row_alone(
    store: MemoryStore, app: Celery, clock: FakeClock
) -> None:
    add(store, repeating("t1", at(0), 1))
    old = leader(store, app, clock, "leader")
    old.cluster.pid = 111  # another process, same instance id
    old.start()
    new = leader(process(store, clock), app, clock, "leader")
    new.cluster.pid = 222
    new.start()
    old.run_once()  # refused: stands down
    assert old.status is SchedulerStatus.STANDBY
    old.shutdown()
    assert check_in_row(store)[:2] == (222, "RUNNING")


def test_a_deposed_leader_s_due_check_in_is_refused_and_leaves_the_row_alone(
    store: MemoryStore, app: Celery, clock: FakeClock
) -> None:
    """The old leader resumes (SIGCONT) after the new one took over under the same instance id,
    with its check-in due: the check-in is fenced like every other write, so the row keeps the
    new leader's pid and RUNNING."""
    add(store, repeating("t1", at(0), 1))
    old = leader(store, app, clock, "leader")
    old.cluster.pid = 111  # another process, same instance id
    old.start()
    new = leader(process(store, clock), app, clock, "leader")
    new.cluster.pid = 222
    new.start()
    clock.advance(30)  # old was frozen past its check-in interval
    old.run_once()
    assert old.status is SchedulerStatus.STANDBY
    assert check_in_row(store)[:2] == (222, "RUNNING")
    old.shutdown()
    assert check_in_row(store)[:2] == (222, "RUNNING")


def test_a_deposed_leader_s_check_in_is_refused(
    store: MemoryStore, app: Celery, clock: FakeClock
) -> None:
    leader(store, app, clock, "old").start()
    leader(process(store, clock), app, clock, "new").start()
    with pytest.raises(FencedError):
        store.check_in("old", interval=7.5, clustered=False)
    with pytest.raises(FencedError):
        store.record_status("old", "STANDBY", hostname=None, pid=None)
