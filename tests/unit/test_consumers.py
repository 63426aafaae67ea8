"""Which workers, with and without the hooks, consume the queues a scheduler publishes to
(celery_quartz.consumers), and what the loop does with an expired firing while it asks them.

The workers' answers to Celery's ``active_queues`` broadcast come from a stand-in for the app's
remote control (real workers answer in tests/integration/test_observability.py); the store is the
RAM store on a fake clock, and firings go to kombu's in-memory broker."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from celery import Celery

from celery_quartz import Job, JobKey, SimpleTrigger, TriggerKey
from celery_quartz.clock import FakeClock
from celery_quartz.config import Settings
from celery_quartz.consumers import QueueWatch
from celery_quartz.health import HealthStatus, health_check
from celery_quartz.loop import SchedulingLoop
from celery_quartz.publisher import Publisher
from celery_quartz.store import MemoryStore
from tests.unit.conftest import T0


class Workers:
    """Stands in for ``app.control``: answers ``inspect(timeout).active_queues()`` with
    :attr:`queues` (worker name -> queue names), after :attr:`gate` opens."""

    def __init__(self) -> None:
        self.queues: dict[str, list[str]] = {}
        self.gate = threading.Event()
        self.gate.set()
        self.asked = 0
        self.answered = threading.Event()

    def inspect(self, timeout: float) -> Workers:
        return self

    def active_queues(self) -> dict[str, list[dict[str, Any]]]:
        self.asked += 1
        self.gate.wait(10)
        self.answered.set()
        return {w: [{"name": q} for q in qs] for w, qs in self.queues.items()}


@pytest.fixture
def workers(app: Celery) -> Workers:
    stand_in = Workers()
    app.control = stand_in  # type: ignore[assignment]
    return stand_in


def check_in_worker(store: MemoryStore, name: str, *queues: str) -> None:
    store.check_in(name, interval=1.0, kind="worker", queues=list(queues), concurrency=1)


def answered(watch: QueueWatch, workers: Workers) -> None:
    assert workers.answered.wait(5)
    for _ in range(100):  # the thread sets done just after the answer
        if not watch.broadcast_pending:
            return
        threading.Event().wait(0.01)


def test_the_workers_are_asked_on_a_thread_of_their_own_while_the_caller_goes_on(
    store: MemoryStore, app: Celery, clock: FakeClock, workers: Workers
) -> None:
    workers.queues = {"plain@h": ["jobs"]}
    workers.gate.clear()  # the workers take their time to answer
    watch = QueueWatch(store, Publisher(app), clock)
    assert watch.read_since(T0) is None  # asked; the caller does not wait for the answer
    assert watch.broadcast_pending and not workers.answered.is_set()
    workers.gate.set()
    answered(watch, workers)
    read = watch.read_since(T0)
    assert read is not None and dict(read.unhooked) == {"jobs": ("plain@h",)}
    assert workers.asked == 1


def test_an_answer_to_a_broadcast_sent_before_a_firing_expired_does_not_decide_it(
    store: MemoryStore, app: Celery, clock: FakeClock, workers: Workers
) -> None:
    watch = QueueWatch(store, Publisher(app), clock)
    assert watch.read_since(T0) is None
    answered(watch, workers)
    clock.advance(timedelta(seconds=5))
    # A worker without the hooks may have started consuming since: ask again.
    assert watch.read_since(T0 + timedelta(seconds=1)) is None
    answered(watch, workers)
    read = watch.read_since(T0 + timedelta(seconds=1))
    assert read is not None and read.started == T0 + timedelta(seconds=5)
    assert workers.asked == 2


def test_a_worker_with_a_check_in_row_is_told_from_one_without_the_hooks_on_the_same_queue(
    store: MemoryStore,
    app: Celery,
    clock: FakeClock,
    workers: Workers,
    caplog: pytest.LogCaptureFixture,
) -> None:
    check_in_worker(store, "hooked@h", "jobs")
    workers.queues = {"hooked@h": ["jobs"], "plain@h": ["jobs", "other"]}
    publisher = Publisher(app)
    publisher.queues.add("jobs")
    watch = QueueWatch(store, publisher, clock)
    with caplog.at_level(logging.WARNING, logger="celery_quartz.consumers"):
        watch.refresh()  # the once-a-minute read asks the workers too
        answered(watch, workers)
        watch.refresh()
    # The queue has a worker with the hooks, so the check-in rows see nothing wrong ...
    assert watch.unhooked_queues == frozenset()
    # ... but the workers' answer does, and only for the queue this scheduler publishes to.
    assert watch.unhooked_consumers == {"jobs": ("plain@h",)}
    assert (
        "queue 'jobs' is consumed by plain@h without the celery-quartz hooks "
        "(celery_quartz.install(app) not called), beside hooked@h with them: its firings run "
        "unrecorded; or by another cluster's worker (its own store), which drops them"
        in caplog.text
    )
    assert "'other'" not in caplog.text


def test_a_broadcast_that_cannot_be_sent_is_no_evidence(
    store: MemoryStore, app: Celery, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    class Down:
        def inspect(self, timeout: float) -> Down:
            return self

        def active_queues(self) -> None:
            raise ConnectionError("broker down")

    app.control = Down()  # type: ignore[assignment]
    watch = QueueWatch(store, Publisher(app), clock)
    assert watch.read_since(T0) is None
    deadline = time.monotonic() + 30  # the broadcast's thread, slow on a loaded machine
    while (read := watch.read_since(T0)) is None and time.monotonic() < deadline:
        threading.Event().wait(0.01)
    assert read is not None and read.failed and read.refusal("jobs") is None
    assert "could not ask the workers which queues they consume: ConnectionError" in caplog.text


# -- the loop ----------------------------------------------------------------------------------


@pytest.fixture
def short_store(clock: FakeClock) -> Iterator[MemoryStore]:
    """A store whose firings' messages expire 8 s after they are sent."""
    store = MemoryStore(scheduler_name="unit", clock=clock, misfire_threshold=8.0)
    yield store
    store.dispose()


def loop_with_short_thresholds(store: MemoryStore, app: Celery, clock: FakeClock) -> SchedulingLoop:
    settings = Settings(
        scheduler_name="unit",
        idle_wait=1.0,
        misfire_threshold=8.0,
        checkin_misfire_threshold=2.0,
    )
    return SchedulingLoop(store, Publisher(app), settings, clock, "sched-a")


def test_an_expired_firing_waits_for_a_fresh_answer_whatever_the_once_a_minute_read_said(
    short_store: MemoryStore, app: Celery, clock: FakeClock, workers: Workers
) -> None:
    """Issue 27, item 1: straight after the once-a-minute read, which saw no queue without a
    worker with the hooks, firings go to a queue that only a worker without the hooks
    consumes. When they expire, they are dropped, not published again (each would run twice)."""
    check_in_worker(short_store, "hooked@h", "celery")
    workers.queues = {"hooked@h": ["celery"]}
    loop = loop_with_short_thresholds(short_store, app, clock)
    loop.publisher.queues.add("celery")
    loop.run_once()  # starts, and the first misfire scan reads the check-in rows
    answered(loop.queue_watch, workers)
    assert loop.queue_watch.unhooked_queues == frozenset()
    job = Job(key=JobKey("once"), task="tasks.report", options={"queue": "unhooked"})
    trigger = SimpleTrigger(key=TriggerKey("once"), job_key=job.key, start_at=T0)
    short_store.store_jobs_and_triggers([(job, [trigger])])
    workers.queues["plain@h"] = ["unhooked"]  # a worker without the hooks, started meanwhile
    clock.advance(timedelta(seconds=1))  # past the idle wait of the first claim
    loop.run_once()
    assert loop.fired_count == 1
    check_in_worker(short_store, "hooked@h", "celery")
    clock.advance(timedelta(seconds=12))  # past the message's expiry and the grace
    check_in_worker(short_store, "hooked@h", "celery")
    for _ in range(50):
        clock.advance(timedelta(seconds=0.5))
        check_in_worker(short_store, "hooked@h", "celery")
        loop.run_once()
        if not short_store.firing_states():
            break
        threading.Event().wait(0.02)
    assert short_store.firing_states() == {}  # decided: dropped
    assert loop.fired_count == 1  # never published again


def test_the_loop_goes_on_stepping_while_the_workers_are_asked(
    short_store: MemoryStore, app: Celery, clock: FakeClock, workers: Workers
) -> None:
    loop = loop_with_short_thresholds(short_store, app, clock)
    job = Job(key=JobKey("once"), task="tasks.report")
    trigger = SimpleTrigger(key=TriggerKey("once"), job_key=job.key, start_at=T0)
    short_store.store_jobs_and_triggers([(job, [trigger])])
    loop.run_once()
    assert loop.fired_count == 1
    workers.gate.clear()  # no worker answers until the gate opens
    clock.advance(timedelta(seconds=12))
    delay = loop.run_once()  # the misfire scan finds the expired firing and asks the workers
    assert workers.asked == 1 and not workers.answered.is_set()
    assert 0 < delay <= loop.queue_watch.broadcast_timeout + 0.5
    assert len(short_store.firing_states()) == 1  # undecided until they answer
    workers.gate.set()
    answered(loop.queue_watch, workers)
    for _ in range(10):
        clock.advance(timedelta(seconds=delay))
        delay = loop.run_once() or 0.1
        if loop.fired_count == 2:
            break
    # No worker consumes the queue: no evidence, so the one-shot's instruction (fire now) holds.
    assert loop.fired_count == 2


def test_health_names_a_worker_without_the_hooks_beside_one_with_them(
    short_store: MemoryStore, app: Celery, clock: FakeClock, workers: Workers
) -> None:
    check_in_worker(short_store, "hooked@h", "celery")
    workers.queues = {"hooked@h": ["celery"], "plain@h": ["celery"]}
    loop = loop_with_short_thresholds(short_store, app, clock)
    loop.publisher.queues.add("celery")
    loop.run_once()  # the first misfire scan reads the check-ins and asks the workers
    answered(loop.queue_watch, workers)
    clock.advance(timedelta(seconds=1))
    check_in_worker(short_store, "hooked@h", "celery")
    loop.queue_watch.refresh()  # takes the answer in (the next misfire scan would)
    report = health_check(loop)
    assert report.status is HealthStatus.DEGRADED
    assert report.data["unhooked_workers"] == {"celery": ["plain@h"]}
    assert "unhooked_queues" not in report.data  # a worker with the hooks consumes it too
    assert report.description == "queue 'celery' is consumed without the hooks by plain@h"
