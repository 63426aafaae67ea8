"""Celery's ``beat_schedule`` read into the store, idempotently.

Each entry becomes a job and a trigger in the group ``celery.beat_schedule``, both named after the
entry. The group is loaded as a source that owns it (:func:`celery_quartz.definitions.owned_group`)
through the same plan as the scheduling files: an entry defined as it is stored is left alone (a
restart keeps its trigger's start and fire times), a changed one is replaced, starting again, and
an entry no longer configured is removed. Several schedulers importing at once produce one job
and one trigger per entry (see :meth:`~celery_quartz.store.abc.JobStore.apply_scheduling_data`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from celery import Celery
from celery.beat import ScheduleEntry
from celery.schedules import maybe_schedule

from celery_quartz.affinity import PreferredNode
from celery_quartz.audit import acting_as
from celery_quartz.celery_schedules import trigger_from_celery_schedule
from celery_quartz.client import check_task_registered
from celery_quartz.clock import Clock
from celery_quartz.definitions import JobChanges, owned_group
from celery_quartz.errors import ValidationError
from celery_quartz.job import Job, check_success_deadline
from celery_quartz.keys import BEAT_SCHEDULE_GROUP, JobKey, TriggerKey
from celery_quartz.overlap import OverlapPolicy
from celery_quartz.retry import RetryPolicy
from celery_quartz.store.abc import JobStore
from celery_quartz.triggers.base import Trigger

logger = logging.getLogger(__name__)

_ENTRY_FIELDS = frozenset({"task", "schedule", "args", "kwargs", "options", "relative", "quartz"})
#: What an entry's ``quartz`` mapping may set on its trigger (and, ``require_success_within``,
#: on its job).
_QUARTZ_FIELDS = frozenset(
    {
        "execution_group",
        "preferred_node",
        "retry_policy",
        "overlap_policy",
        "pause_when_retries_exhausted",
        "require_success_within",
    }
)


def import_beat_schedule(
    app: Celery,
    store: JobStore,
    clock: Clock,
    entries: Mapping[str, Mapping[str, Any] | ScheduleEntry],
    *,
    max_data_bytes: int,
) -> JobChanges:
    """Make the store's ``celery.beat_schedule`` jobs match ``entries``, and say what changed
    by job; raises before writing anything if an entry is invalid (the error names the entry)."""
    default_tz = str(app.conf.timezone or "UTC")
    now = clock.now()
    # Each trigger's start is computed from now (an interval's first fire is one interval
    # later): relative to the load, so a restart keeps the stored one.
    defined = {
        name: (*entry_to_job(app, name, raw, default_tz, now, max_data_bytes), False)
        for name, raw in entries.items()
    }
    data = owned_group("beat_schedule", BEAT_SCHEDULE_GROUP, defined)
    with acting_as("beat_schedule", "beat_schedule"):
        result = store.apply_scheduling_data([data], now).by_job()
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
        require_success_within=_success_deadline(where, fields.get("quartz")),
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


def _success_deadline(where: str, quartz: object) -> timedelta | None:
    """An entry's ``quartz`` ``require_success_within``: a timedelta or seconds."""
    if not isinstance(quartz, Mapping):
        return None  # refused, naming the entry, with the trigger's fields
    value = quartz.get("require_success_within")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, timedelta)):
        raise ValidationError(
            f"{where}: quartz require_success_within must be a timedelta or seconds, got {value!r}"
        )
    deadline = value if isinstance(value, timedelta) else timedelta(seconds=value)
    check_success_deadline(f"{where}: quartz", deadline)
    return deadline


def _apply_quartz_fields(where: str, trigger: Trigger, quartz: object) -> None:
    """An entry's ``quartz`` mapping: the trigger's execution group, preferred node (a
    :class:`PreferredNode`, a worker's node name, or ``"*"`` for automatic), retry policy and
    overlap policy (``allow``, ``skip``, ``buffer_one``, ``cancel_previous``) and whether running
    out of retries pauses it."""
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
    policy = quartz.get("retry_policy")
    if policy is not None and not isinstance(policy, RetryPolicy):
        raise ValidationError(
            f"{where}: quartz retry_policy must be a RetryPolicy, got {type(policy).__name__}"
        )
    trigger.retry_policy = policy
    trigger.overlap_policy = OverlapPolicy.parse(quartz.get("overlap_policy"), f"{where}: quartz")
    pause = quartz.get("pause_when_retries_exhausted")
    if pause not in (None, True, False):
        raise ValidationError(
            f"{where}: quartz pause_when_retries_exhausted must be True or False, got {pause!r}"
        )
    trigger.pause_when_retries_exhausted = pause
