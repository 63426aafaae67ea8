"""The store's views as JSON-ready values, in the one shape the HTTP API (its OpenAPI document,
:mod:`celery_quartz.dashboard.openapi`) and the CLI's ``--json`` both print.

Keys are nested as they are in the store (``{"key": {"group", "name"}}``), times are ISO 8601 in
UTC, and job and trigger data pass through a :class:`Redactor` (the dashboard hides the values
under secret-looking keys; the CLI, run by whoever holds the store's URL, shows them). Neither
the dashboard's framework nor the CLI's is imported here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from celery_quartz.audit import Redaction
from celery_quartz.backfill import BackfillResult
from celery_quartz.clock import to_millis
from celery_quartz.firing import Firing
from celery_quartz.job import Job
from celery_quartz.keys import JobKey, TriggerKey
from celery_quartz.overlap import OverlapPolicy
from celery_quartz.pausing import PauseRecord
from celery_quartz.retry import stored_policy
from celery_quartz.store.abc import ClientStore
from celery_quartz.store.views import (
    AuditEntry,
    FiringView,
    HistoryCursor,
    HistoryEntry,
    LastOutcome,
    NodeView,
    RunStatus,
    Statistics,
    StatisticsBucket,
    TriggerView,
)
from celery_quartz.triggers.base import Trigger

REDACTED = "***"


class Redactor(Redaction):
    """Replaces the values under keys matching ``pattern`` (at any depth, in any case) by
    ``***``; an empty pattern replaces none (the audit's redaction, shown the dashboard's way)."""

    def __init__(self, pattern: str) -> None:
        super().__init__(pattern, marker=REDACTED)


#: Shows every value (the CLI's).
NO_REDACTION = Redactor("")


def iso(value: datetime | None) -> str | None:
    """``value`` as ISO 8601 in UTC, or None."""
    return None if value is None else value.astimezone(timezone.utc).isoformat()


def key(k: JobKey | TriggerKey | None) -> dict[str, str] | None:
    return None if k is None else {"group": k.group, "name": k.name}


def outcome(o: LastOutcome | None) -> dict[str, Any] | None:
    if o is None:
        return None
    return {
        "started_time": iso(o.started_time),
        "finished_time": iso(o.finished_time),
        "succeeded": o.succeeded,
        "error_type": o.error_type,
        "error_message": o.error_message,
        "duration": o.duration,
        "consecutive_failures": o.consecutive_failures,
    }


def trigger(view: TriggerView, redact: Redactor = NO_REDACTION) -> dict[str, Any]:
    """A trigger with its state, its job's task, its last outcome and, in ERROR, why."""
    t = view.trigger
    return {
        "key": key(t.key),
        "job": key(t.job_key),
        "kind": t.kind,
        "state": view.state,
        "task": view.task,
        "description": t.description,
        "priority": t.priority,
        "next_fire_time": iso(t.next_fire_time),
        "previous_fire_time": iso(t.previous_fire_time),
        "start_time": iso(t.start_at),
        "end_time": iso(t.end_at),
        "times_triggered": t.times_triggered,
        "calendar": t.calendar_name,
        "misfire_instruction": int(t.misfire_instruction),
        "execution_group": t.execution_group,
        # The pinned worker (None: none, or an automatic pin no worker claimed yet), and
        # whether the pin is automatic (claimed by the first worker to start a firing).
        "preferred_node": t.preferred_node.node,
        "preferred_node_auto": t.preferred_node.is_automatic,
        # Its own retry policy in stored form ("n": none); null: its job's or the default.
        "retry_policy": stored_policy(t.retry_policy),
        "pause_when_retries_exhausted": t.pause_when_retries_exhausted,
        "overlap_policy": str(OverlapPolicy.parse(t.overlap_policy)),
        "schedule": t.detail(),
        "data": redact(t.data),
        "last_outcome": outcome(view.last_outcome),
        "error_reason": view.error_reason,
        "pause": pause(view.pause),
    }


def trigger_edit(
    before: TriggerView, edited: Trigger, *, dry_run: bool, redact: Redactor = NO_REDACTION
) -> dict[str, Any]:
    """An edit's answer: the trigger as edited, what changed (``{field: [before, after]}``)
    and whether it was only a dry run."""
    old = trigger(before, redact)
    new = trigger(dataclasses.replace(before, trigger=edited), redact)
    changed = {name: [old[name], new[name]] for name in new if new[name] != old[name]}
    return {"trigger": new, "changed": changed, "dry_run": dry_run}


def pause(record: PauseRecord | None) -> dict[str, Any] | None:
    """A pause record: ``{"reason", "requested_by", "paused_at"}``, or None."""
    if record is None:
        return None
    return {
        "reason": record.reason,
        "requested_by": record.requested_by,
        "paused_at": iso(record.paused_at),
    }


def job(j: Job, redact: Redactor = NO_REDACTION) -> dict[str, Any]:
    return {
        "key": key(j.key),
        "task": j.task,
        "description": j.description,
        "args": redact(list(j.args)),
        "kwargs": redact(dict(j.kwargs)),
        "data": redact(dict(j.data)),
        "options": redact(dict(j.options)),
        "durable": j.durable,
        "requests_recovery": j.requests_recovery,
        "disallow_concurrent": j.disallow_concurrent,
        "persist_job_data": j.persist_job_data,
        "require_success_within": None
        if j.require_success_within is None
        else j.require_success_within.total_seconds(),
        "retry_policy": stored_policy(j.retry_policy),
    }


def firing(f: FiringView) -> dict[str, Any]:
    """A firing in flight; its ``queue`` as :func:`with_queues` found it."""
    return {
        "fire_instance_id": f.fire_instance_id,
        "trigger": key(f.trigger_key),
        "job": key(f.job_key),
        "state": f.state,
        "instance_name": f.instance_name,
        "worker_name": f.worker_name,
        "scheduled_time": iso(f.scheduled_time),
        "fired_time": iso(f.fired_time),
        "published_time": iso(f.published_time),
        "started_time": iso(f.started_time),
        "expires_time": iso(f.expires_time),
        "priority": f.priority,
        "execution_group": f.execution_group,
        "queue": f.queue,
        "recovering": f.recovering,
        "retry_attempt": f.retry_attempt,
        "refire_count": f.refire_count,
        "progress": None
        if f.progress is None
        else {
            "percent": f.progress.percent,
            "message": f.progress.message,
            "updated_at": iso(f.progress.updated_at),
        },
    }


def node(n: NodeView) -> dict[str, Any]:
    return {
        "instance_name": n.instance_name,
        "kind": n.kind,
        "alive": n.alive,
        "last_checkin_time": iso(n.last_checkin_time),
        "checkin_interval": n.checkin_interval,
        "started_time": iso(n.started_time),
        "clustered": n.clustered,
        "hostname": n.hostname,
        "pid": n.pid,
        "status": n.status,
        "epoch": n.epoch,
        "queues": n.queues,
        "concurrency": n.concurrency,
    }


def with_queues(
    views: Sequence[FiringView],
    store: ClientStore,
    queue_of: Callable[[Firing], str | None],
) -> list[FiringView]:
    """``views`` with the queue each firing was sent to. A firing with a route of its own (its
    execution group's queue, its pinned worker's) has it stored; any other went where its job's
    ``queue`` option or Celery's routing of its task sends it, decided from the job as stored
    now by ``queue_of``, the publisher's own rule
    (:meth:`celery_quartz.publisher.Publisher.queue_of`). It stays None when the job is gone."""
    jobs: dict[JobKey, Job | None] = {}
    found = []
    for view in views:
        if view.queue is None and view.job_key is not None:
            if view.job_key not in jobs:
                jobs[view.job_key] = store.retrieve_job(view.job_key)
            stored = jobs[view.job_key]
            if stored is not None:
                routed = Firing(
                    fire_instance_id=view.fire_instance_id,
                    scheduler_name=store.scheduler_name,
                    task=stored.task,
                    args=list(stored.args),
                    kwargs=dict(stored.kwargs),
                    options=dict(stored.options),
                    job_key=view.job_key,
                    trigger_key=view.trigger_key,
                    scheduled_millis=to_millis(view.scheduled_time),
                    fired_millis=to_millis(view.fired_time),
                )
                view = dataclasses.replace(view, queue=queue_of(routed))
        found.append(view)
    return found


# -- the run history (docs/history.md) ----------------------------------------------------------


def history_entry(e: HistoryEntry, redact: Redactor = NO_REDACTION) -> dict[str, Any]:
    """A history row under the names of issue 28's fields (``job``, ``worker``,
    ``scheduler_instance``, ``scheduled_fire_time``, …); arguments pass through ``redact``."""
    return {
        "history_id": e.history_id,
        "event_time": iso(e.event_time),
        "result": e.result,
        "fire_instance_id": e.fire_instance_id,
        "job": key(e.job_key),
        "trigger": key(e.trigger_key),
        "task_name": e.task_name,
        "task_id": e.task_id,
        "scheduled_fire_time": iso(e.scheduled_fire_time),
        "published_time": iso(e.published_time),
        "started_time": iso(e.started_time),
        "finished_time": iso(e.finished_time),
        "duration": e.duration,
        "start_lateness": e.start_lateness,
        "error_type": e.error_type,
        "error_message": e.error_message,
        "worker": e.worker_name,
        "scheduler_instance": e.instance_name,
        "retry_attempt": e.retry_attempt,
        "recovering": e.recovering,
        "reason": e.reason,
        "summary": e.summary,
        "metrics": e.metrics,
        "args": redact(e.args),
        "kwargs": redact(e.kwargs),
    }


def statistics_bucket(b: StatisticsBucket) -> dict[str, Any]:
    return {
        "start": iso(b.start),
        "counts": b.counts,
        "duration_p50": b.duration_p50,
        "duration_p95": b.duration_p95,
        "duration_max": b.duration_max,
        "start_lateness_p50": b.lateness_p50,
        "start_lateness_p95": b.lateness_p95,
        "start_lateness_max": b.lateness_max,
    }


def statistics(s: Statistics) -> dict[str, Any]:
    """Buckets oldest first, and the window's total; times in seconds."""
    return {
        "job": key(s.job),
        "since": iso(s.since),
        "until": iso(s.until),
        "bucket": s.bucket.total_seconds(),
        "buckets": [statistics_bucket(b) for b in s.buckets],
        "total": statistics_bucket(s.total),
    }


def run_status(s: RunStatus) -> dict[str, Any]:
    deadline = s.require_success_within
    return {
        "kind": s.kind,
        "key": key(s.key),
        "since": iso(s.since),
        "last_run_time": iso(s.last_run_time),
        "last_result": s.last_result,
        "last_success_time": iso(s.last_success_time),
        "consecutive_failures": s.consecutive_failures,
        "runs": s.runs,
        "failures": s.failures,
        "require_success_within": None if deadline is None else deadline.total_seconds(),
        "overdue": s.overdue,
    }


def audit_entry(e: AuditEntry, redact: Redactor = NO_REDACTION) -> dict[str, Any]:
    return {
        "audit_id": e.audit_id,
        "event_time": iso(e.event_time),
        "principal": e.principal,
        "via": e.via,
        "action": e.action,
        "target_kind": e.target_kind,
        "target": e.target,
        "changes": redact(e.changes),
    }


def encode_history_cursor(cursor: HistoryCursor | None) -> str | None:
    """A history or audit page's cursor (event time in ms, row id) as one word."""
    return None if cursor is None else f"{cursor[0]}.{cursor[1]}"


def decode_history_cursor(text: str) -> HistoryCursor:
    """The cursor :func:`encode_history_cursor` printed; ValueError otherwise."""
    millis, _, row = text.partition(".")
    if not (millis.isdigit() and row.isdigit()) or len(text) > 40:
        raise ValueError(f"{text!r} is not a cursor printed by a previous page")
    return int(millis), int(row)


def backfill(result: BackfillResult) -> dict[str, Any]:
    """A backfill's answer (``dry_run``: what it would do): its range, its counts, and each
    slot with its outcome, when its firing is due and the one-shot trigger that fires it."""
    return {
        "trigger": key(result.trigger_key),
        "from": iso(result.start),
        "to": iso(result.end),
        "dry_run": result.dry_run,
        "slots_found": result.slots_found,
        "scheduled": result.scheduled,
        "already_scheduled": result.already_scheduled,
        "already_succeeded": result.already_succeeded,
        "slots": [
            {
                "slot": iso(s.slot),
                "outcome": s.outcome.value,
                "fire_at": iso(s.fire_at),
                "firing_trigger": None if s.firing_trigger is None else key(s.firing_trigger),
            }
            for s in result.slots
        ],
    }


def parse_time(text: str) -> datetime:
    """An ISO 8601 time; one without a UTC offset is UTC. ValueError otherwise."""
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not an ISO 8601 time (2026-12-01T09:00:00Z)") from None
    return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str) -> timedelta:
    """``90s``, ``5m``, ``24h``, ``7d``, ``2w`` (or seconds as a number); ValueError otherwise."""
    word = text.strip().lower()
    unit = _UNITS.get(word[-1:]) if word else None
    number = word[:-1] if unit is not None else word
    try:
        seconds = float(number) * (unit or 1)
    except ValueError:
        raise ValueError(f"{text!r} is not a duration such as 5m, 1h, 24h or 7d") from None
    if not 0 < seconds <= 10 * 366 * 86400:
        raise ValueError(f"{text!r}: a duration from 1s to 10 years")
    return timedelta(seconds=seconds)
