"""health_check: one row per state of the scheduler and its store."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from celery import Celery

from celery_quartz.clock import FakeClock
from celery_quartz.config import Settings
from celery_quartz.health import HealthStatus, health_check
from celery_quartz.loop import SchedulingLoop
from celery_quartz.publisher import Publisher
from celery_quartz.store import MemoryStore

HEALTHY, DEGRADED, UNHEALTHY = HealthStatus.HEALTHY, HealthStatus.DEGRADED, HealthStatus.UNHEALTHY


def nothing(loop: SchedulingLoop, clock: FakeClock) -> None:
    pass


def start(loop: SchedulingLoop, clock: FakeClock) -> None:
    loop.start()


def standby(loop: SchedulingLoop, clock: FakeClock) -> None:
    loop.start()
    loop.standby()


def shutting_down(loop: SchedulingLoop, clock: FakeClock) -> None:
    from celery_quartz.lifecycle import SchedulerStatus

    loop.start()
    loop.lifecycle.status = SchedulerStatus.SHUTTING_DOWN  # the moment inside shutdown()


def shut_down(loop: SchedulingLoop, clock: FakeClock) -> None:
    loop.start()
    loop.shutdown()


def store_down(loop: SchedulingLoop, clock: FakeClock) -> None:
    loop.start()

    def refuse() -> None:
        raise ConnectionError("connection refused")

    loop.store.engine.connect = refuse  # type: ignore[method-assign, assignment]


def store_gone_after_the_ping(loop: SchedulingLoop, clock: FakeClock) -> None:
    """The store answers the ping and is gone for the reads after it (its database dropped in
    between): the check still answers, reporting the failed reads."""
    loop.start()

    def gone(*_: object, **__: object) -> None:
        raise ConnectionError("database does not exist")

    for read in ("trigger_summary", "overdue_jobs", "unserved"):
        setattr(loop.store, read, gone)


def check_in_stale(loop: SchedulingLoop, clock: FakeClock) -> None:
    loop.start()
    clock.advance(7.5 + 7.5 + 1)  # no step ran: the node's own check-in is past the threshold


def check_in_fresh(loop: SchedulingLoop, clock: FakeClock) -> None:
    loop.start()
    clock.advance(7.0)


def group_unserved(loop: SchedulingLoop, clock: FakeClock) -> None:
    from celery_quartz.keys import JobKey
    from celery_quartz.triggers import SimpleTrigger
    from tests.unit.builders import add

    trigger = SimpleTrigger(start_at=clock.now(), job_key=JobKey("job"), execution_group="reindex")
    add(loop.store, trigger)  # type: ignore[arg-type]
    loop.start()


def group_served(loop: SchedulingLoop, clock: FakeClock) -> None:
    group_unserved(loop, clock)
    loop.store.check_in("celery@w1", interval=7.5, kind="worker", queues=["reindex"])


def job_past_its_deadline(loop: SchedulingLoop, clock: FakeClock) -> None:
    """Job DEFAULT.job must succeed hourly; it last did two hours ago."""
    from datetime import timedelta

    from sqlalchemy import update

    from celery_quartz.keys import JobKey
    from celery_quartz.triggers import SimpleTrigger
    from tests.history_rows import insert_status
    from tests.unit.builders import add

    add(loop.store, SimpleTrigger(start_at=clock.now(), job_key=JobKey("job")))  # type: ignore[arg-type]
    j = loop.store.tables.jobs  # type: ignore[attr-defined]
    with loop.store.transaction() as conn:  # type: ignore[attr-defined]
        conn.execute(update(j).values(require_success_within=3600 * 1000))
    insert_status(loop.store, "job", since=clock.now(), last_success=clock.now())  # type: ignore[arg-type]
    clock.advance(timedelta(hours=2))
    loop.start()


def job_within_its_deadline(loop: SchedulingLoop, clock: FakeClock) -> None:
    """The same job, which succeeded five minutes ago."""
    from sqlalchemy import update

    from celery_quartz.clock import to_millis

    job_past_its_deadline(loop, clock)
    s = loop.store.tables.run_status  # type: ignore[attr-defined]
    five_minutes_ago = to_millis(clock.now()) - 300_000
    with loop.store.transaction() as conn:  # type: ignore[attr-defined]
        conn.execute(update(s).values(last_success_time=five_minutes_ago))


Setup = Callable[[SchedulingLoop, FakeClock], None]

CASES: list[tuple[str, dict[str, object], Setup, HealthStatus]] = [
    ("running, store answers", {}, start, HEALTHY),
    ("running, not clustered", {"clustered": False}, start, HEALTHY),
    ("standby", {}, standby, DEGRADED),
    ("created, auto-start off", {"auto_start": False}, nothing, DEGRADED),
    ("created, auto-start on", {}, nothing, UNHEALTHY),
    ("shutting down", {}, shutting_down, UNHEALTHY),
    ("shut down", {}, shut_down, UNHEALTHY),
    ("store does not answer", {}, store_down, UNHEALTHY),
    ("store gone after the ping", {}, store_gone_after_the_ping, HEALTHY),
    ("clustered, own check-in too old", {}, check_in_stale, DEGRADED),
    ("clustered, own check-in recent", {}, check_in_fresh, HEALTHY),
    ("non-clustered, check-in old", {"clustered": False}, check_in_stale, HEALTHY),
    ("a group no live worker serves", {}, group_unserved, DEGRADED),
    ("every group served", {}, group_served, HEALTHY),
    ("a job past its success deadline", {}, job_past_its_deadline, DEGRADED),
    (
        "a job past its deadline, configured unhealthy",
        {"health_overdue_jobs": "unhealthy"},
        job_past_its_deadline,
        UNHEALTHY,
    ),
    ("a job within its success deadline", {}, job_within_its_deadline, HEALTHY),
]


@pytest.mark.parametrize(("case", "changes", "setup", "expected"), CASES, ids=[c[0] for c in CASES])
def test_health(
    store: MemoryStore,
    app: Celery,
    clock: FakeClock,
    case: str,
    changes: dict[str, object],
    setup: Setup,
    expected: HealthStatus,
) -> None:
    values: dict[str, object] = {"scheduler_name": "unit", "instance_id": "node"}
    values.update(changes)
    loop = SchedulingLoop(store, Publisher(app), Settings(**values), clock, "node")  # type: ignore[arg-type]
    setup(loop, clock)
    report = health_check(loop)
    assert report.status is expected, report.description
    assert report.data["instance"] == "node"
    if setup is job_past_its_deadline:
        assert report.data["overdue_jobs"] == ["DEFAULT.job"]
        assert "DEFAULT.job" in report.description
    if setup is store_gone_after_the_ping:
        for read in ("overdue_error", "overdue_jobs_error", "unserved_error"):
            assert report.data[read] == "ConnectionError: database does not exist", read
    if setup is group_unserved:
        assert report.data["unserved"] == [
            "execution group 'reindex': no live worker consumes queue 'reindex'"
        ]
