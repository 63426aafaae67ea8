"""The overview's judgements, as JSON-ready values: group ceilings, the leader, what is owed and
not happening, computed from the store's reads. The store's views themselves are presented by
:mod:`celery_quartz.presentation`, as the CLI presents them."""

from __future__ import annotations

from typing import Any

from celery_quartz.config import Settings
from celery_quartz.lifecycle import SchedulerStatus
from celery_quartz.presentation import Redactor, iso, key, node, trigger
from celery_quartz.routing import LiveWorker
from celery_quartz.store import ClientStore, StoreReader
from celery_quartz.store.views import NodeView, RunStatus


def nodes(store: StoreReader, views: list[NodeView] | None = None) -> dict[str, Any]:
    """The check-ins with their liveness, and the non-clustered leader with the current epoch:
    the live non-clustered scheduler RUNNING at the current epoch (None in a clustered
    deployment, or while no leader runs). ``views``: the check-ins, when already read."""
    views = store.list_nodes() if views is None else views
    epoch = store.current_epoch()
    leaders = [
        n.instance_name
        for n in views
        if n.kind == "scheduler"
        and not n.clustered
        and n.alive
        and n.status == SchedulerStatus.RUNNING.value
        and (n.epoch or 0) == epoch
    ]
    return {
        "nodes": [node(n) for n in views],
        "leader": leaders[0] if leaders else None,
        "epoch": epoch,
    }


def groups(
    store: StoreReader, settings: Settings, default_queue: str, views: list[NodeView] | None = None
) -> list[dict[str, Any]]:
    """Each execution group: its limit and scope, its capacity now (what the live workers on
    its queue allow, or the cluster quota), firings in flight, due triggers held back, whether
    it is parked at its ceiling, and whether any live worker serves its queue."""
    router = settings.router(default_queue)
    limits = settings.limits
    live = {
        n.instance_name: LiveWorker(n.instance_name, frozenset(n.queues or ()), n.concurrency)
        for n in (store.list_nodes() if views is None else views)
        if n.kind == "worker" and n.alive
    }
    admission = router.admission(live, {}, {})
    occupancy = {g.execution_group: g for g in store.group_occupancy()}
    names: list[str | None] = sorted(
        {*occupancy, *limits.named_groups}, key=lambda g: (g is not None, g or "")
    )
    rows = []
    for group in names:
        o = occupancy.get(group)
        limit = limits.limit_for(group)
        capacity = admission.capacity(group)
        in_flight = o.in_flight if o else 0
        queue = router.served_queue(group)
        rows.append(
            {
                "execution_group": group,
                "queue": queue,
                "max_concurrent": None if limit is None else limit.max_concurrent,
                "scope": None if limit is None else limit.scope.value,
                "capacity": capacity,
                "in_flight": in_flight,
                "held_back": o.due_waiting if o else 0,
                "parked": capacity is not None and in_flight >= capacity,
                # Ungrouped and unlimited firings follow their job's own routing: not judged.
                "served": None
                if group is None and limit is None
                else any(queue in w.queues for w in live.values()),
            }
        )
    return rows


def owed(
    store: ClientStore,
    settings: Settings,
    default_queue: str,
    redact: Redactor,
    views: list[NodeView] | None = None,
    group_rows: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """What is owed and not happening (seed 004, "what to watch"): overdue triggers, triggers
    BLOCKED for long, triggers in ERROR with their reason, jobs past their success deadline
    (docs/history.md#success-deadlines), groups parked at their ceiling with
    work held back, dead nodes, and queues of stored triggers' groups that no live worker
    consumes. ``views`` and ``group_rows``: the check-ins and groups, when already read."""
    found = store.owed_triggers(blocked_for=settings.dashboard_blocked_threshold)
    views = store.list_nodes() if views is None else views
    if group_rows is None:
        group_rows = groups(store, settings, default_queue, views)
    return {
        "overdue": [trigger(v, redact) for v in found.overdue],
        "overdue_count": found.overdue_count,
        "blocked": [trigger(v, redact) for v in found.blocked],
        "blocked_count": found.blocked_count,
        "errors": [trigger(v, redact) for v in found.errors],
        "error_count": found.error_count,
        "count_cap": found.count_cap,
        "parked_groups": [g for g in group_rows if g["parked"] and g["held_back"]],
        "dead_nodes": [node(n) for n in views if not n.alive],
        "unserved": unserved(store, settings, default_queue),
        "overdue_jobs": [
            late_job(s) for s in store.overdue_jobs(settings.success_deadlines, limit=100)
        ],
    }


def late_job(status: RunStatus) -> dict[str, Any]:
    """A job past its success deadline, as the owed listing shows it."""
    assert status.require_success_within is not None
    due = (status.last_success_time or status.since) + status.require_success_within
    return {
        "key": key(status.key),
        "require_success_within": status.require_success_within.total_seconds(),
        "last_success_time": iso(status.last_success_time),
        "last_run_time": iso(status.last_run_time),
        "last_result": status.last_result,
        "consecutive_failures": status.consecutive_failures,
        "due_time": iso(due),
    }


def unserved(store: StoreReader, settings: Settings, default_queue: str) -> list[dict[str, Any]]:
    """Queues of stored triggers' groups that no live worker consumes, and pinned workers that
    do not consume their triggers' queues (best effort: judged from the workers' check-ins)."""
    return [
        {"execution_group": u.group, "queue": u.queue, "node": u.node, "why": u.describe()}
        for u in store.unserved(settings.router(default_queue))
    ]


def overview(
    store: ClientStore, settings: Settings, default_queue: str, redact: Redactor
) -> dict[str, Any]:
    """Nodes, leader, groups and what is owed, reading the check-ins and the groups once."""
    views = store.list_nodes()
    group_rows = groups(store, settings, default_queue, views)
    return {
        **nodes(store, views),
        "groups": group_rows,
        "owed": owed(store, settings, default_queue, redact, views, group_rows),
    }
