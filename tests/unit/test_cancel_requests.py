"""Cancel requests for the runs a pool cannot terminate (docs/steering.md#overlap-policy): the
claim that decides ``cancel_previous`` marks the replaced firings' rows in its transaction, the
worker's watch reads them (once a second, only while firings run) and
``current_context().cancelled`` turns true. The store's statements run on SQLite and PostgreSQL
(the ``db`` fixture); the lock test on PostgreSQL alone."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

import pytest
from sqlalchemy import select

from celery_quartz.clock import FakeClock
from celery_quartz.store import SqlStore
from celery_quartz.worker.cancels import CancelWatch
from tests.stores import store_at
from tests.unit.builders import A, add, claim, every, execution_context, fire_one, running
from tests.unit.conftest import at


def _claim(db: SqlStore) -> list[str]:
    """The fire instance ids of one claim."""
    return [f.fire_instance_id for f in claim(db)]


def _requested_at(db: SqlStore, fire_id: str) -> int | None:
    f = db.tables.fired_triggers
    with db.transaction() as conn:
        return conn.execute(
            select(f.c.cancel_requested_time).where(f.c.fire_instance_id == fire_id)
        ).scalar_one()


# -- the store ---------------------------------------------------------------------------------


def test_the_claim_that_cancels_a_running_firing_marks_it_cancel_requested(
    db: SqlStore, clock: FakeClock
) -> None:
    add(db, every("t", 10, "cancel_previous"))
    first = running(db, "t")
    assert db.cancel_requested([first]) == set()
    clock.set(at(10))
    [new] = _claim(db)
    assert db.cancel_requested([first, new]) == {first}
    assert _requested_at(db, first) == int(at(10).timestamp() * 1000)
    assert _requested_at(db, new) is None


def test_a_firing_still_in_the_broker_is_marked_too(db: SqlStore, clock: FakeClock) -> None:
    add(db, every("t", 10, "cancel_previous"))
    first = fire_one(db, "t")
    db.mark_published(A, [first])
    clock.set(at(10))
    _claim(db)
    assert db.cancel_requested([first]) == {first}


def test_the_first_request_is_kept_when_a_later_firing_replaces_the_same_one_again(
    db: SqlStore, clock: FakeClock
) -> None:
    add(db, every("t", 10, "cancel_previous"))
    first = running(db, "t")
    clock.set(at(10))
    [second] = _claim(db)
    clock.set(at(20))
    _claim(db)
    assert db.cancel_requested([first, second]) == {first, second}
    assert _requested_at(db, first) == int(at(10).timestamp() * 1000)


@pytest.mark.parametrize("policy", ["allow", "skip", "buffer_one"])
def test_no_other_policy_marks_the_firing_in_flight(
    db: SqlStore, clock: FakeClock, policy: str
) -> None:
    add(db, every("t", 10, policy))
    first = running(db, "t")
    clock.set(at(10))
    _claim(db)
    assert db.cancel_requested([first]) == set()


def test_an_ended_or_unknown_firing_is_not_cancel_requested(db: SqlStore, clock: FakeClock) -> None:
    add(db, every("t", 10, "cancel_previous"))
    first = running(db, "t")
    clock.set(at(10))
    _claim(db)
    assert db.complete_execution(first)
    assert db.cancel_requested([first, "nobody"]) == set()
    assert db.cancel_requested([]) == set()


@pytest.fixture
def pg(pg_url: str, clock: FakeClock) -> Iterator[SqlStore]:
    store = store_at(pg_url, "unit", clock=clock)
    store.create_tables()
    yield store
    store.dispose()


@pytest.mark.integration
def test_a_row_held_by_another_transaction_is_skipped_not_waited_for(
    pg: SqlStore, clock: FakeClock
) -> None:
    """A worker ending the firing holds its row and then waits for the trigger's, which the
    claim holds: the claim must not wait for the fired row (a deadlock). It fires, unmarked."""
    add(pg, every("t", 10, "cancel_previous"))
    first = running(pg, "t")
    f = pg.tables.fired_triggers
    clock.set(at(10))
    with pg.engine.connect() as holder:
        holder.execute(select(f).where(f.c.fire_instance_id == first).with_for_update())
        answer: list[list[str]] = []
        claiming = threading.Thread(target=lambda: answer.append(_claim(pg)))
        claiming.start()
        claiming.join(timeout=10)
        assert not claiming.is_alive(), "the claim waited for the fired row"
        holder.rollback()
    assert len(answer) == 1 and len(answer[0]) == 1
    assert pg.cancel_requested([first]) == set()


# -- the worker's watch --------------------------------------------------------------------------


class _Requests:
    """A store that answers from a set of cancel-requested ids, and counts its reads."""

    def __init__(self, requested: set[str]) -> None:
        self.requested = requested
        self.reads: list[list[str]] = []
        self.fail = False

    def cancel_requested(self, fire_instance_ids: Sequence[str]) -> set[str]:
        self.reads.append(sorted(fire_instance_ids))
        if self.fail:
            raise RuntimeError("database down")
        return self.requested & set(fire_instance_ids)


def test_the_watch_tells_a_running_firing_its_cancel_request() -> None:
    store = _Requests({"a"})
    watch = CancelWatch(lambda name: store)  # type: ignore[arg-type,return-value]
    a, b = execution_context("a"), execution_context("b")
    watch._running = {"a": a, "b": b}  # as watch() keeps them, without its thread
    assert not a.cancelled
    assert watch.read_requests() == 1
    assert a.cancelled and not b.cancelled
    # One known cancelled is not asked about again; an ended one not at all.
    watch.forget("b")
    assert watch.read_requests() == 0
    assert store.reads == [["a", "b"]]


def test_the_watch_reads_each_scheduler_name_once_per_round() -> None:
    stores = {"one": _Requests({"x"}), "two": _Requests(set())}
    watch = CancelWatch(lambda name: stores[name])  # type: ignore[arg-type,return-value]
    watch._running = {
        "x": execution_context("x", "one"),
        "y": execution_context("y", "one"),
        "z": execution_context("z", "two"),
    }
    assert watch.read_requests() == 1
    assert stores["one"].reads == [["x", "y"]] and stores["two"].reads == [["z"]]


def test_a_read_the_store_refuses_is_made_again_at_the_next_round() -> None:
    store = _Requests({"a"})
    store.fail = True
    watch = CancelWatch(lambda name: store)  # type: ignore[arg-type,return-value]
    a = execution_context("a")
    watch._running = {"a": a}
    assert watch.read_requests() == 0 and not a.cancelled
    store.fail = False
    assert watch.read_requests() == 1 and a.cancelled


def test_the_watch_reads_the_real_store_once_a_second_while_a_firing_runs_and_never_after(
    store: SqlStore, clock: FakeClock
) -> None:
    """The thread: a firing cancel-requested while it runs sees ``cancelled`` within about a
    second; once nothing runs, the store is not read."""
    reads: list[Sequence[str]] = []

    class Counting:
        def cancel_requested(self, ids: Sequence[str]) -> set[str]:
            reads.append(list(ids))
            return store.cancel_requested(ids)

    add(store, every("t", 10, "cancel_previous"))
    first = running(store, "t")
    watch = CancelWatch(lambda name: Counting())  # type: ignore[arg-type,return-value]
    context = execution_context(first)
    watch.watch(context)
    clock.set(at(10))
    _claim(store)
    deadline = threading.Event()
    for _ in range(40):
        if context.cancelled:
            break
        deadline.wait(0.1)
    assert context.cancelled
    assert 1 <= len(reads) <= 3
    watch.forget(first)
    seen = len(reads)
    deadline.wait(2.5)
    assert len(reads) <= seen + 1  # at most the round already under way


def test_a_worker_process_reads_cancel_requests_and_a_prefork_pool_process_does_not() -> None:
    """Celery sends ``worker_process_init`` in each prefork pool process (forked, or a fresh
    interpreter that never saw ``worker_init``) and, from the solo pool, in the worker's main
    process after its ``worker_init``."""
    from celery import Celery

    from celery_quartz.worker import WorkerRuntime

    threads = WorkerRuntime(Celery("threads"))  # no worker_process_init at all
    assert threads.reads_cancel_requests
    solo = WorkerRuntime(Celery("solo"))
    solo.in_worker_process()
    solo.in_pool_process()
    assert solo.reads_cancel_requests
    forked = WorkerRuntime(Celery("prefork"))
    forked.in_worker_process()
    forked._worker_process = -1  # the parent's pid, inherited by the fork
    forked.in_pool_process()
    assert not forked.reads_cancel_requests
    spawned = WorkerRuntime(Celery("spawned"))
    spawned.in_pool_process()
    assert not spawned.reads_cancel_requests
