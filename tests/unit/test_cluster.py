"""Cluster membership: Quartz's failure rule, check-in, and recovery of dead scheduler instances."""

from __future__ import annotations

import logging

import pytest
from sqlalchemy import event

from celery_quartz import Job, JobKey, SimpleTrigger, TriggerKey
from celery_quartz.clock import FakeClock, to_millis
from celery_quartz.cluster import ClusterManager
from celery_quartz.liveness import failed_after
from celery_quartz.store import CheckIn, FiringState, MemoryStore, SqlStore, TriggerState
from tests.unit.conftest import at

A, B, C = "sched-a", "sched-b", "sched-c"


def peer(last_checkin_millis: int, interval_millis: int = 7_500) -> CheckIn:
    return CheckIn(
        instance_name=B,
        kind="scheduler",
        last_checkin_millis=last_checkin_millis,
        checkin_interval_millis=interval_millis,
        clustered=True,
        hostname=None,
        pid=None,
    )


@pytest.mark.parametrize(
    ("last", "interval", "now", "mine", "threshold", "expected"),
    [
        # last check-in + the peer's interval + threshold, while we check in on time
        (10_000, 7_500, 20_000, 19_000, 7_500, 25_000),
        (10_000, 7_500, 20_000, None, 7_500, 25_000),
        (10_000, 20_000, 20_000, 19_000, 7_500, 37_500),
        (10_000, 7_500, 20_000, 19_000, 0, 17_500),
        # our own gap since our last check-in stretches the window (we may have been paused)
        (10_000, 7_500, 100_000, 40_000, 7_500, 77_500),
        (10_000, 7_500, 20_000, 12_499, 7_500, 25_001),
    ],
    ids=["on-time", "first-check-in", "longer-peer-interval", "no-threshold", "we-slept", "edge"],
)
def test_failed_after_is_quartz_calc_failed_if_after(
    last: int, interval: int, now: int, mine: int | None, threshold: int, expected: int
) -> None:
    assert (
        failed_after(
            peer(last, interval),
            now_millis=now,
            my_last_checkin_millis=mine,
            threshold_millis=threshold,
        )
        == expected
    )


@pytest.fixture
def manager(store: MemoryStore, clock: FakeClock) -> ClusterManager:
    return ClusterManager(store, clock, A, checkin_interval=7.5, checkin_misfire_threshold=7.5)


def check_in_at(manager: ClusterManager, clock: FakeClock, *seconds: float) -> None:
    for s in seconds:
        clock.set(at(s))
        manager.check_in()


# -- check-in ----------------------------------------------------------------------------------


def test_check_in_writes_the_row_and_sets_the_next_check_in(
    store: MemoryStore, clock: FakeClock, manager: ClusterManager
) -> None:
    check_in_at(manager, clock, 3)
    [row] = store.check_ins()
    assert (row.instance_name, row.last_checkin_millis, row.checkin_interval_millis) == (
        A,
        to_millis(at(3)),
        7_500,
    )
    assert manager.next_check_in == at(10.5)
    assert manager.check_in_due(at(10.499)) is False
    assert manager.check_in_due(at(10.5)) is True


def test_an_instance_whose_row_vanished_warns_that_it_was_recovered(
    store: MemoryStore,
    clock: FakeClock,
    manager: ClusterManager,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="celery_quartz.cluster"):
        check_in_at(manager, clock, 0)
        store.remove_check_in(A)  # what a survivor that judged us dead does
        check_in_at(manager, clock, 7.5)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage() for r in warnings] == [
        f"scheduler instance {A} is still active but was recovered by another instance"
    ]
    assert [r.instance_name for r in store.check_ins()] == [A]


def test_the_first_check_in_does_not_warn(
    clock: FakeClock, manager: ClusterManager, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="celery_quartz.cluster"):
        check_in_at(manager, clock, 0)
    assert caplog.records == []


def test_leave_removes_the_check_in_row(
    store: MemoryStore, clock: FakeClock, manager: ClusterManager
) -> None:
    check_in_at(manager, clock, 0)
    manager.leave()
    assert store.check_ins() == []


@pytest.mark.parametrize("kind", ["scheduler", "worker"])
def test_a_check_in_is_stamped_when_its_connection_is_held_not_when_it_was_asked_for(
    db: SqlStore, clock: FakeClock, kind: str
) -> None:
    """A process kept waiting for its connection (a hung primary, a new connection to a
    standby being promoted, a pool others hold) writes the time it got one, as Quartz reads
    the time after it has the connection: a check-in stamped when it was asked for is already
    that old when it is written, and peers judge the process dead that much sooner. Scheduler
    and worker check-ins alike; here the pool's checkout takes 20 s."""
    db.check_in("p1", interval=7.5, kind=kind)  # the row exists: this is every later check-in

    def checkout_takes_20_s(*_: object) -> None:
        clock.advance(20)

    event.listen(db.engine, "checkout", checkout_takes_20_s)
    try:
        assert db.check_in("p1", interval=7.5, kind=kind)
    finally:
        event.remove(db.engine, "checkout", checkout_takes_20_s)
    [row] = db.check_ins(kind)
    assert row.last_checkin_millis == to_millis(at(20))


# -- failure detection -------------------------------------------------------------------------


def test_a_peer_silent_longer_than_interval_plus_threshold_has_failed(
    store: MemoryStore, clock: FakeClock, manager: ClusterManager
) -> None:
    store.check_in(B, interval=7.5)
    # Our own gap between the last two check-ins (5 s) is below B's interval, so B is dead after
    # 0 s + 7.5 s + 7.5 s.
    check_in_at(manager, clock, 0, 10, 15.001)
    assert [p.instance_name for p in manager.failed_peers()] == [B]


def test_a_peer_within_interval_plus_threshold_has_not_failed(
    store: MemoryStore, clock: FakeClock, manager: ClusterManager
) -> None:
    store.check_in(B, interval=7.5)
    check_in_at(manager, clock, 0, 10, 15)
    assert manager.failed_peers() == []


def test_a_peer_is_given_longer_when_we_ourselves_were_silent(
    store: MemoryStore, clock: FakeClock, manager: ClusterManager
) -> None:
    store.check_in(B, interval=7.5)
    # We slept 20 s between check-ins: B gets 20 s + 7.5 s too, not 15 s.
    check_in_at(manager, clock, 0, 20)
    assert manager.failed_peers() == []
    check_in_at(manager, clock, 27.501)
    assert [p.instance_name for p in manager.failed_peers()] == [B]


def test_an_instance_never_judges_itself(clock: FakeClock, manager: ClusterManager) -> None:
    check_in_at(manager, clock, 0, 100, 100.001)
    assert manager.failed_peers() == []


def test_workers_are_not_judged_as_schedulers(
    store: MemoryStore, clock: FakeClock, manager: ClusterManager
) -> None:
    store.check_in("worker1@host", interval=7.5, kind="worker")
    check_in_at(manager, clock, 0, 7.5, 15, 22.5, 30)
    assert manager.failed_peers() == []


# -- recovery ----------------------------------------------------------------------------------


def claim_and_fire(store: MemoryStore, instance: str) -> str:
    """``instance`` claims two triggers and fires one; returns the fire instance id it fired."""
    job = Job(key=JobKey("report"), task="tasks.report")
    store.store_jobs_and_triggers(
        [
            (
                job,
                [
                    SimpleTrigger(key=TriggerKey("fired"), job_key=job.key, start_at=at(0)),
                    SimpleTrigger(key=TriggerKey("claimed"), job_key=job.key, start_at=at(0)),
                ],
            )
        ]
    )
    fired, _ = store.acquire_next_triggers(
        instance, no_later_than=at(0), max_count=10, time_window=0
    )
    [firing] = store.fire(instance, [fired])
    return firing.fire_instance_id


def test_a_failed_peer_is_recovered(
    store: MemoryStore, clock: FakeClock, manager: ClusterManager
) -> None:
    store.check_in(B, interval=7.5)
    fire_id = claim_and_fire(store, B)
    check_in_at(manager, clock, 0, 10, 15.001)
    assert manager.recover_failed_peers() == 1
    assert [r.instance_name for r in store.check_ins()] == [A]
    assert store.get_trigger_state(TriggerKey("claimed")) == TriggerState.WAITING
    assert [f.fire_instance_id for f in manager.take_over_unpublished()] == [fire_id]
    assert store.firing_states() == {fire_id: FiringState.FIRED}


def test_a_peer_within_the_window_is_not_recovered(
    store: MemoryStore, clock: FakeClock, manager: ClusterManager
) -> None:
    store.check_in(B, interval=7.5)
    claim_and_fire(store, B)
    check_in_at(manager, clock, 0, 10, 15)
    assert manager.recover_failed_peers() == 0
    assert [r.instance_name for r in store.check_ins()] == [A, B]
    assert store.get_trigger_state(TriggerKey("claimed")) == TriggerState.ACQUIRED
    assert manager.take_over_unpublished() == []


def test_a_peer_that_checked_in_after_being_judged_is_not_recovered(
    store: MemoryStore, clock: FakeClock, manager: ClusterManager
) -> None:
    store.check_in(B, interval=7.5)
    claim_and_fire(store, B)
    check_in_at(manager, clock, 0, 10, 15.001)
    [judged] = manager.failed_peers()
    store.check_in(B, interval=7.5)  # B was only slow; it checks in before A recovers it
    assert (
        store.recover_scheduler(B, seen_checkin_millis=judged.last_checkin_millis, recovered_by=A)
        is None
    )
    assert store.get_trigger_state(TriggerKey("claimed")) == TriggerState.ACQUIRED
    assert manager.take_over_unpublished() == []


def test_of_two_survivors_judging_the_same_peer_one_recovers_it(
    store: MemoryStore, clock: FakeClock, manager: ClusterManager
) -> None:
    other = ClusterManager(store, clock, C, checkin_interval=7.5, checkin_misfire_threshold=7.5)
    store.check_in(B, interval=7.5)
    fire_id = claim_and_fire(store, B)
    for s in (0, 10, 15.001):
        clock.set(at(s))
        manager.check_in()
        other.check_in()
    assert manager.recover_failed_peers() == 1
    assert other.recover_failed_peers() == 0
    assert [f.fire_instance_id for f in manager.take_over_unpublished()] == [fire_id]
    assert other.take_over_unpublished() == []


def test_an_orphan_without_a_check_in_row_is_recovered(
    store: MemoryStore, clock: FakeClock, manager: ClusterManager
) -> None:
    fire_id = claim_and_fire(store, B)  # B never checked in (or its row was removed)
    check_in_at(manager, clock, 0)
    assert manager.recover_failed_peers() == 1
    assert store.get_trigger_state(TriggerKey("claimed")) == TriggerState.WAITING
    assert [f.fire_instance_id for f in manager.take_over_unpublished()] == [fire_id]


def test_recovery_is_logged(
    store: MemoryStore,
    clock: FakeClock,
    manager: ClusterManager,
    caplog: pytest.LogCaptureFixture,
) -> None:
    store.check_in(B, interval=7.5)
    claim_and_fire(store, B)
    check_in_at(manager, clock, 0, 10, 15.001)
    with caplog.at_level(logging.INFO):
        manager.recover_failed_peers()
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.INFO] == [
        f"scheduler instance {B} last checked in at 2026-03-02T09:00:00+00:00; recovering it",
        f"recovered scheduler instance {B}: 1 claimed trigger(s) released, 1 firing(s) to "
        f"publish again (by {A})",
    ]


def test_an_unclustered_instance_recovers_nobody(store: MemoryStore, clock: FakeClock) -> None:
    alone = ClusterManager(
        store, clock, A, checkin_interval=7.5, checkin_misfire_threshold=7.5, clustered=False
    )
    store.check_in(B, interval=7.5)
    claim_and_fire(store, B)
    for s in (0, 10, 15.001):
        clock.set(at(s))
        alone.check_in()
    assert alone.recover_failed_peers() == 0
    assert [r.instance_name for r in store.check_ins()] == [A, B]
