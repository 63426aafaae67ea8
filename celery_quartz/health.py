"""A health check of one scheduler (Quartz 4.x's ``AddQuartz()`` health check), no web stack.

It asserts less than its name suggests: that the scheduler is in a state that can fire and that
the store answers a query. It does not assert that any trigger is firing: pair it with an alert on
a job you expect to see regularly.

====================================  ===========
state                                 result
====================================  ===========
RUNNING, the store answers            healthy
STANDBY                               degraded (a non-leader replica stays in rotation)
CREATED with auto-start off           degraded (waiting to be elected)
CREATED otherwise                     unhealthy
SHUTTING_DOWN, SHUTDOWN               unhealthy
the store does not answer             unhealthy
clustered, own check-in too old       degraded
an execution group no live worker     degraded (``data["unserved"]`` says which)
serves
a queue it publishes to that no       degraded (``data["unhooked_queues"]``)
worker with the hooks checks in for
a queue it publishes to that a        degraded (``data["unhooked_workers"]``: queue ->
worker without the hooks consumes     workers, from their last answer to the broadcast)
more overdue triggers than            degraded (``quartz_health_overdue_threshold``; off by
``quartz_health_overdue_threshold``   default)
a job past its success deadline       degraded, or unhealthy with
                                      ``quartz_health_overdue_jobs = "unhealthy"``
                                      (``data["overdue_jobs"]`` names them)
====================================  ===========

Beyond Quartz, ``data`` also gives the seconds since the last successful acquisition
(``last_acquisition_age``, None before the first) and the number of triggers due by more than the
misfire threshold (``overdue``), read with one grouped query.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from celery_quartz.clock import from_millis, to_millis
from celery_quartz.lifecycle import SchedulerStatus

#: The most jobs past their success deadline a report names.
MAX_OVERDUE_JOBS = 100
#: States whose overdue triggers are owed a firing (a paused or completed one is not).
OVERDUE_STATES = ("WAITING", "ACQUIRED", "BLOCKED")


def overdue_triggers(summary: dict[str, Any]) -> int:
    """Triggers due by more than the misfire threshold, in a state that owes a firing, from
    :meth:`~celery_quartz.store.abc.StoreReader.trigger_summary`."""
    return sum(summary[state].overdue for state in OVERDUE_STATES if state in summary)


def _overdue_jobs(loop: Any, data: dict[str, Any]) -> str:
    """Jobs past their success deadline (stored on the job, or in
    ``quartz_require_success_within``), put in ``data["overdue_jobs"]``; the sentence that
    says so, or "" when none is."""
    try:
        late = loop.store.overdue_jobs(loop.settings.success_deadlines, limit=MAX_OVERDUE_JOBS)
    except Exception as exc:  # the ping answered; a failed read is reported, not judged
        data["overdue_jobs_error"] = f"{exc.__class__.__name__}: {exc}"
        return ""
    data["overdue_jobs"] = [str(s.key) for s in late]
    if not late:
        return ""
    more = "" if len(late) < MAX_OVERDUE_JOBS else " (at least)"
    return (
        f"{len(late)}{more} job(s) have not succeeded within their success deadline: "
        + ", ".join(str(s.key) for s in late[:5])
        + (", ..." if len(late) > 5 else "")
    )


class HealthStatus(enum.Enum):
    HEALTHY = "healthy"
    DEGRADED = "degraded"
    UNHEALTHY = "unhealthy"


@dataclass(frozen=True)
class HealthReport:
    """The result of :func:`health_check`: a status, why, and what it looked at."""

    status: HealthStatus
    description: str
    data: dict[str, Any] = field(default_factory=dict)


def health_check(scheduler: Any) -> HealthReport:
    """Check a :class:`~celery_quartz.loop.SchedulingLoop` or a beat
    :class:`celery_quartz.Scheduler` (its loop)."""
    loop = getattr(scheduler, "loop", scheduler)
    if loop is None:  # a beat scheduler closed (or not yet set up)
        return HealthReport(HealthStatus.UNHEALTHY, "the scheduler is not set up or was closed")
    status: SchedulerStatus = loop.status
    data: dict[str, Any] = {
        "scheduler": loop.store.scheduler_name,
        "instance": loop.instance_id,
        "status": status.value,
        "clustered": loop.settings.clustered,
    }
    if status.is_shut_down:
        return HealthReport(HealthStatus.UNHEALTHY, f"the scheduler is {status.value}", data)
    if status is SchedulerStatus.CREATED and loop.auto_start:
        return HealthReport(
            HealthStatus.UNHEALTHY, "the scheduler was never started (auto-start is on)", data
        )
    try:
        loop.store.ping()
    except Exception as exc:
        data["error"] = f"{exc.__class__.__name__}: {exc}"
        return HealthReport(HealthStatus.UNHEALTHY, "the store does not answer", data)
    last = getattr(loop, "last_acquisition", None)
    data["last_acquisition_age"] = (
        None if last is None else round((loop.clock.now() - last).total_seconds(), 3)
    )
    try:
        overdue: int | None = overdue_triggers(loop.store.trigger_summary())
    except Exception as exc:  # the ping answered; a failed count is reported, not judged
        data["overdue_error"] = f"{exc.__class__.__name__}: {exc}"
        overdue = None
    data["overdue"] = overdue
    late_jobs = _overdue_jobs(loop, data)
    if late_jobs and loop.settings.health_overdue_jobs == HealthStatus.UNHEALTHY.value:
        return HealthReport(HealthStatus.UNHEALTHY, late_jobs, data)
    if status is SchedulerStatus.CREATED:
        return HealthReport(
            HealthStatus.DEGRADED, "not started: waiting to be elected (auto-start is off)", data
        )
    if status is SchedulerStatus.STANDBY:
        return HealthReport(HealthStatus.DEGRADED, "in standby: not acquiring triggers", data)
    if loop.settings.clustered:
        last = loop.cluster.last_checkin_millis
        allowed = loop.settings.checkin_interval + loop.settings.checkin_misfire_threshold
        if last is not None:
            data["last_checkin"] = from_millis(last).isoformat()
            age = (to_millis(loop.clock.now()) - last) / 1000
            if age > allowed:
                return HealthReport(
                    HealthStatus.DEGRADED,
                    f"this node last checked in {age:.1f}s ago (peers write it off after "
                    f"{allowed:.1f}s)",
                    data,
                )
    try:
        unserved = loop.store.unserved(loop.router)
    except Exception as exc:  # the ping answered; a failed read is reported, not judged
        data["unserved_error"] = f"{exc.__class__.__name__}: {exc}"
        unserved = []
    if unserved:
        data["unserved"] = [u.describe() for u in unserved]
        return HealthReport(
            HealthStatus.DEGRADED,
            f"{len(unserved)} execution group(s) have no live worker to run them",
            data,
        )
    watch = loop.queue_watch
    unhooked = sorted(watch.unhooked_queues)
    consumers = {
        queue: list(workers) for queue, workers in sorted(watch.unhooked_consumers.items())
    }
    if unhooked or consumers:
        if unhooked:
            data["unhooked_queues"] = unhooked
        if consumers:
            data["unhooked_workers"] = consumers
        reasons = []
        if unhooked:
            reasons.append(
                "no worker with the celery-quartz hooks checks in for queue(s) "
                + ", ".join(map(repr, unhooked))
            )
        for queue, workers in consumers.items():
            reasons.append(f"queue {queue!r} is consumed without the hooks by {', '.join(workers)}")
        return HealthReport(HealthStatus.DEGRADED, "; ".join(reasons), data)
    threshold = loop.settings.health_overdue_threshold
    if threshold is not None and overdue is not None and overdue > threshold:
        return HealthReport(
            HealthStatus.DEGRADED,
            f"{overdue} trigger(s) are overdue by more than the misfire threshold "
            f"(degraded past {threshold})",
            data,
        )
    if late_jobs:
        return HealthReport(HealthStatus.DEGRADED, late_jobs, data)
    return HealthReport(HealthStatus.HEALTHY, "running, and the store answers", data)
