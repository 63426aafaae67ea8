"""Celery's ``beat_schedule`` read into the store, idempotently.

Each entry becomes a job and a trigger in the group ``celery.beat_schedule``, both named after the
entry. The import compares a hash of each entry's definition with the one stored beside its job:
unchanged entries are left alone (a restart keeps their fire times), changed ones are replaced,
entries no longer configured are removed. Several schedulers importing at once produce one job
and one trigger per entry (see :meth:`~celery_quartz.store.abc.JobStore.sync_job_group`).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from typing import Any

from celery import Celery
from celery.beat import ScheduleEntry
from celery.schedules import maybe_schedule

from celery_quartz.affinity import PreferredNode
from celery_quartz.celery_schedules import trigger_from_celery_schedule
from celery_quartz.client import check_task_registered
from celery_quartz.clock import Clock
from celery_quartz.errors import ValidationError
from celery_quartz.job import Job
from celery_quartz.keys import BEAT_SCHEDULE_GROUP, JobKey, TriggerKey
from celery_quartz.retry import RetryPolicy
from celery_quartz.store.abc import JobStore
from celery_quartz.store.records import SyncResult
from celery_quartz.triggers.base import Trigger

logger = logging.getLogger(__name__)

_ENTRY_FIELDS = frozenset({"task", "schedule", "args", "kwargs", "options", "relative", "quartz"})
#: What an entry's ``quartz`` mapping may set on its trigger.
_QUARTZ_FIELDS = frozenset({"execution_group", "preferred_node", "retry_policy"})


def import_beat_schedule(
    app: Celery,
    store: JobStore,
    clock: Clock,
    entries: Mapping[str, Mapping[str, Any] | ScheduleEntry],
    *,
    max_data_bytes: int,
) -> SyncResult:
    """Make the store's ``celery.beat_schedule`` jobs match ``entries``; raises before writing
    anything if an entry is invalid (the error names the entry)."""
    default_tz = str(app.conf.timezone or "UTC")
    now = clock.now()
    desired: dict[JobKey, tuple[Job, list[Trigger], str]] = {}
    for name, raw in entries.items():
        job, trigger = entry_to_job(app, name, raw, default_tz, now, max_data_bytes)
        desired[job.key] = (job, [trigger], definition_hash(job, trigger))
    result = store.sync_job_group(BEAT_SCHEDULE_GROUP, desired)
    logger.info(
        "beat_schedule: %d added, %d updated, %d removed, %d unchanged",
        len(result.added),
        len(result.updated),
        len(result.removed),
        len(result.unchanged),
    )
    return result


def entry_to_job(
    app: Celery,
    name: str,
    raw: Mapping[str, Any] | ScheduleEntry,
    default_time_zone: str,
    now: Any,
    max_data_bytes: int,
) -> tuple[Job, Trigger]:
    where = f"beat entry {name!r}"
    if isinstance(raw, ScheduleEntry):
        fields: dict[str, Any] = {
            "task": raw.task,
            "schedule": raw.schedule,
            "args": raw.args,
            "kwargs": raw.kwargs,
            "options": raw.options,
        }
    elif isinstance(raw, Mapping):
        unknown = set(raw) - _ENTRY_FIELDS
        if unknown:
            raise ValidationError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
        fields = dict(raw)
    else:
        raise ValidationError(f"{where}: expected a dict, got {type(raw).__name__}")
    for required in ("task", "schedule"):
        if fields.get(required) is None:
            raise ValidationError(f"{where}: {required!r} is required")
    try:
        schedule = maybe_schedule(fields["schedule"], fields.get("relative", False), app=app)
    except Exception as exc:
        raise ValidationError(
            f"{where}: schedule {fields['schedule']!r} is not valid: {exc}"
        ) from None
    # Checked here, not coerced: tuple("abc") would be ("a", "b", "c"), and a string of kwargs
    # would raise an error naming no entry. Stock beat refuses such args too.
    args = fields.get("args") or ()
    if not isinstance(args, (list, tuple)):
        raise ValidationError(f"{where}: args must be a list or tuple, got {type(args).__name__}")
    for mapping in ("kwargs", "options"):
        value = fields.get(mapping) or {}
        if not isinstance(value, Mapping):
            raise ValidationError(f"{where}: {mapping} must be a dict, got {type(value).__name__}")
    key = JobKey(name, BEAT_SCHEDULE_GROUP)
    job = Job(
        key=key,
        task=fields["task"],
        args=tuple(args),
        kwargs=dict(fields.get("kwargs") or {}),
        options=dict(fields.get("options") or {}),
        description=f"beat_schedule entry {name}",
    )
    job.validate(max_data_bytes)
    check_task_registered(app, job.task, where)
    trigger = trigger_from_celery_schedule(
        schedule,
        entry_name=name,
        key=TriggerKey(name, BEAT_SCHEDULE_GROUP),
        default_time_zone=default_time_zone,
        now=now,
    )
    trigger.job_key = key
    _apply_quartz_fields(where, trigger, fields.get("quartz"))
    trigger.validate()
    return job, trigger


def _apply_quartz_fields(where: str, trigger: Trigger, quartz: object) -> None:
    """An entry's ``quartz`` mapping: the trigger's execution group, preferred node (a
    :class:`PreferredNode`, a worker's node name, or ``"*"`` for automatic) and retry policy."""
    if quartz is None:
        return
    if not isinstance(quartz, Mapping):
        raise ValidationError(f"{where}: quartz must be a dict, got {type(quartz).__name__}")
    unknown = set(quartz) - _QUARTZ_FIELDS
    if unknown:
        raise ValidationError(f"{where}: unknown quartz field(s) {', '.join(sorted(unknown))}")
    trigger.execution_group = quartz.get("execution_group")
    pin = quartz.get("preferred_node")
    trigger.preferred_node = (
        pin if isinstance(pin, PreferredNode) else PreferredNode.parse(pin, owner=where)
    )
    policy = quartz.get("retry_policy", RetryPolicy.NONE)
    if not isinstance(policy, RetryPolicy):
        raise ValidationError(
            f"{where}: quartz retry_policy must be a RetryPolicy, got {type(policy).__name__}"
        )
    trigger.retry_policy = policy


def definition_hash(job: Job, trigger: Trigger) -> str:
    """What the entry says, hashed: equal hashes mean the stored job and trigger stand as is."""
    definition = {
        "task": job.task,
        "args": list(job.args),
        "kwargs": dict(job.kwargs),
        "options": dict(job.options),
        "trigger": [
            trigger.kind,
            trigger.detail(),
            trigger.priority,
            int(trigger.misfire_instruction),
        ],
    }
    # Only when set: entries imported before these fields existed keep their hash.
    if trigger.execution_group is not None:
        definition["execution_group"] = trigger.execution_group
    if not trigger.preferred_node.is_none:
        definition["preferred_node"] = trigger.preferred_node.to_columns()
    if trigger.retry_policy:
        definition["retry_policy"] = trigger.retry_policy.to_string()
    encoded = json.dumps(definition, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(encoded.encode()).hexdigest()
