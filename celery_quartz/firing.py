"""A firing: one occurrence of a trigger, from acquisition to the message a worker runs."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from celery_quartz.clock import from_millis
from celery_quartz.keys import JobKey, TriggerKey
from celery_quartz.triggers.base import Trigger

#: The name of the message header that carries a firing to the worker (:class:`FiringHeader`).
HEADER = "quartz"
#: A trigger data key holding ``{"args": [...], "kwargs": {...}}``: the arguments its firings
#: call the job's task with, in place of the job's own (a one-off "Run again" of a recorded
#: run, :meth:`celery_quartz.Quartz.trigger_job`). The task does not see the key.
RUN_ARGUMENTS = "quartz.run_arguments"
#: A trigger data key holding the scheduled time (ms) of the past occurrence a backfill firing
#: runs (:meth:`celery_quartz.Quartz.backfill`); the task reads it as
#: ``current_context().backfill_slot``, not in its trigger data. A retry or recovery firing
#: copies its trigger's data, so it runs the same slot.
BACKFILL_SLOT = "quartz.backfill_slot"
#: The trigger data keys celery-quartz keeps for itself (the task does not see them).
RESERVED_DATA_KEYS = frozenset({RUN_ARGUMENTS, BACKFILL_SLOT})


def backfill_slot_of(trigger_data: Mapping[str, Any] | None) -> int | None:
    """The backfill slot (ms) a trigger's data carries (:data:`BACKFILL_SLOT`), or None."""
    slot = trigger_data.get(BACKFILL_SLOT) if trigger_data else None
    return slot if isinstance(slot, int) and not isinstance(slot, bool) else None


def run_arguments(
    args: list[Any], kwargs: dict[str, Any], trigger_data: dict[str, Any]
) -> tuple[list[Any], dict[str, Any], dict[str, Any]]:
    """The args and kwargs a firing calls its task with, and the trigger data its task sees:
    the job's, unless the trigger carries :data:`RUN_ARGUMENTS`; the data without the keys
    celery-quartz keeps (:data:`RESERVED_DATA_KEYS`)."""
    if not trigger_data or RESERVED_DATA_KEYS.isdisjoint(trigger_data):
        return args, kwargs, trigger_data
    data = {k: v for k, v in trigger_data.items() if k not in RESERVED_DATA_KEYS}
    override = trigger_data.get(RUN_ARGUMENTS)
    if not isinstance(override, Mapping):
        return args, kwargs, data
    new_args = override.get("args")
    new_kwargs = override.get("kwargs")
    return (
        list(new_args) if isinstance(new_args, list) else args,
        dict(new_kwargs) if isinstance(new_kwargs, Mapping) else kwargs,
        data,
    )


def new_ids(count: int) -> list[str]:
    """``count`` random UUIDs (version 4) as strings, the form ``str(uuid.uuid4())`` gives: fire
    instance ids, which are also the task ids of their messages, and delivery tags.

    One read of the system's random source for all of them, where ``uuid.uuid4()`` makes one
    per id (a batch of firings needs two ids each).
    """
    raw = bytearray(os.urandom(16 * count))
    raw[6::16] = bytes(b & 0x0F | 0x40 for b in raw[6::16])  # version 4
    raw[8::16] = bytes(b & 0x3F | 0x80 for b in raw[8::16])  # RFC 4122 variant
    h = raw.hex()
    return [
        f"{h[i : i + 8]}-{h[i + 8 : i + 12]}-{h[i + 12 : i + 16]}-"
        f"{h[i + 16 : i + 20]}-{h[i + 20 : i + 32]}"
        for i in range(0, 32 * count, 32)
    ]


@dataclass
class JobRecord:
    """The parts of a stored job that a firing's message needs."""

    key: JobKey
    task: str
    args: list[Any]
    kwargs: dict[str, Any]
    data: dict[str, Any]
    options: dict[str, Any]
    durable: bool
    requests_recovery: bool
    disallow_concurrent: bool
    persist_job_data: bool


@dataclass
class AcquiredFiring:
    """A trigger this scheduler claimed (state ACQUIRED), to fire at ``scheduled_millis``."""

    fire_instance_id: str
    trigger: Trigger
    job: JobRecord
    #: The trigger's fire time that was claimed.
    scheduled_millis: int
    #: A recovery or retry firing: the occurrence it stands for.
    recovering: bool = False
    origin_trigger_key: TriggerKey | None = None
    origin_scheduled_millis: int | None = None
    retry_attempt: int = 0
    priority: int = 5
    execution_group: str | None = None
    #: Where it is published (see :mod:`celery_quartz.routing`): a queue (None: the job's own
    #: routing), and the worker whose own queue that is.
    queue: str | None = None
    node: str | None = None

    @property
    def scheduled_fire_time(self) -> datetime:
        return from_millis(self.scheduled_millis)

    @property
    def occurrence_millis(self) -> int:
        """The scheduled fire time of the occurrence this firing runs."""
        if self.origin_scheduled_millis is not None:
            return self.origin_scheduled_millis
        return self.scheduled_millis


@dataclass
class Firing:
    """A fired trigger, ready to publish as a Celery task message (task id = fire instance id).

    For a recovery or retry firing, ``trigger_key`` is the one-shot trigger that fired it and
    ``origin_trigger_key`` the trigger of the occurrence it stands for; ``scheduled_millis`` is
    always the occurrence's scheduled fire time.
    """

    fire_instance_id: str
    scheduler_name: str
    task: str
    args: list[Any]
    kwargs: dict[str, Any]
    options: dict[str, Any]
    job_key: JobKey
    trigger_key: TriggerKey
    scheduled_millis: int
    fired_millis: int
    #: The scheduler instance that fired (or republished) it.
    fired_by: str = ""
    job_data: dict[str, Any] = field(default_factory=dict)
    trigger_data: dict[str, Any] = field(default_factory=dict)
    #: After this instant a worker discards the message instead of starting it.
    expires_millis: int | None = None
    recovering: bool = False
    retry_attempt: int = 0
    refire_count: int = 0
    origin_trigger_key: TriggerKey | None = None
    #: The job writes its data back at completion (the worker sends it only then).
    persist_job_data: bool = False
    #: The queue it is routed to (None: the job's options and Celery's routing decide), and the
    #: worker whose own (``worker_direct``) queue that is, for a pinned firing.
    queue: str | None = None
    node: str | None = None
    #: Times its message expired unstarted and it was published again.
    expired_count: int = 0
    #: The task ids of the firings of the same trigger this one replaces (its overlap policy
    #: ``cancel_previous``): revoked with ``terminate=True`` once it is published.
    revokes: tuple[str, ...] = ()
    #: For a backfill firing, the past occurrence's scheduled time it runs (ms).
    backfill_slot_millis: int | None = None

    @property
    def task_id(self) -> str:
        """The Celery task id of its message: the fire instance id, suffixed ``.r<n>`` once it
        has been published again after ``n`` expiries. A worker that discards an expired message
        adds its task id to its revoked set (and shares that set with the workers it meets), so a
        copy sent again under the same id would be discarded too. The worker reads the fire
        instance id from the header (:attr:`FiringHeader.fire_instance_id`)."""
        return message_task_id(self.fire_instance_id, self.expired_count)


def message_task_id(fire_instance_id: str, expired_count: int) -> str:
    """The Celery task id of a firing's message (:attr:`Firing.task_id`)."""
    return f"{fire_instance_id}.r{expired_count}" if expired_count else fire_instance_id


@dataclass(frozen=True)
class FiringHeader:
    """The header a firing's message carries to the worker, under the name :data:`HEADER`: the
    firing's identity and what its :class:`~celery_quartz.context.JobExecutionContext` holds.

    The only code that knows the header's keys. :meth:`of` writes it (both publishing paths);
    :meth:`of_request` and :meth:`in_headers` read it back, and each property reads one value.
    ``fields`` is the header as it travels, a JSON object; a worker that sends a firing on (a
    retry, a refire) sends these fields, so a key written by another version of celery-quartz
    passes through unchanged.
    """

    fields: dict[str, Any]

    @classmethod
    def of(cls, firing: Firing) -> FiringHeader:
        """The header of ``firing``'s message."""
        fields: dict[str, Any] = {
            "scheduler": firing.scheduler_name,
            "fire_instance_id": firing.fire_instance_id,
            "job": [firing.job_key.name, firing.job_key.group],
            "trigger": [firing.trigger_key.name, firing.trigger_key.group],
            "scheduled_fire_time": firing.scheduled_millis,
            "fire_time": firing.fired_millis,
            "fired_by": firing.fired_by,
            "job_data": firing.job_data,
            "trigger_data": firing.trigger_data,
            "recovering": firing.recovering,
            "retry_attempt": firing.retry_attempt,
            "refire_count": firing.refire_count,
        }
        if firing.persist_job_data:
            fields["persist_job_data"] = True
        if firing.origin_trigger_key is not None:
            origin = firing.origin_trigger_key
            fields["origin_trigger"] = [origin.name, origin.group]
        if firing.backfill_slot_millis is not None:
            fields["backfill_slot"] = firing.backfill_slot_millis
        return cls(fields)

    @classmethod
    def in_headers(cls, headers: Mapping[str, Any] | None) -> FiringHeader | None:
        """The firing header among a message's headers; None for a message not ours."""
        fields = (headers or {}).get(HEADER)
        return cls(fields) if isinstance(fields, dict) else None

    @classmethod
    def of_request(cls, request: Any) -> FiringHeader | None:
        """The firing header of a Celery task request (the ``task.request`` a task runs under);
        None for a message not from celery-quartz."""
        fields = getattr(request, HEADER, None)
        if fields is None:
            return cls.in_headers(getattr(request, "headers", None))
        return cls(fields) if isinstance(fields, dict) else None

    @property
    def scheduler_name(self) -> str:
        return self.fields["scheduler"]

    @property
    def fire_instance_id(self) -> str:
        """The firing's id, which every version of celery-quartz writes. The message's task id is
        not always the same (:attr:`Firing.task_id`)."""
        return self.fields["fire_instance_id"]

    @property
    def job_key(self) -> JobKey:
        return JobKey(*self.fields["job"])

    @property
    def trigger_key(self) -> TriggerKey:
        return TriggerKey(*self.fields["trigger"])

    @property
    def scheduled_millis(self) -> int:
        return self.fields["scheduled_fire_time"]

    @property
    def fired_millis(self) -> int:
        return self.fields["fire_time"]

    @property
    def fired_by(self) -> str:
        return str(self.fields.get("fired_by", ""))

    @property
    def job_data(self) -> dict[str, Any]:
        """A copy of the job's data as published."""
        return dict(self.fields.get("job_data") or {})

    @property
    def trigger_data(self) -> dict[str, Any]:
        return dict(self.fields.get("trigger_data") or {})

    @property
    def recovering(self) -> bool:
        return bool(self.fields.get("recovering", False))

    @property
    def origin_trigger_key(self) -> TriggerKey | None:
        origin = self.fields.get("origin_trigger")
        return TriggerKey(*origin) if origin else None

    @property
    def retry_attempt(self) -> int:
        return int(self.fields.get("retry_attempt", 0))

    @property
    def refire_count(self) -> int:
        return int(self.fields.get("refire_count", 0))

    @property
    def backfill_slot_millis(self) -> int | None:
        """The past occurrence a backfill firing runs (ms); None for any other firing."""
        slot = self.fields.get("backfill_slot")
        return slot if isinstance(slot, int) else None

    @property
    def persist_job_data(self) -> bool:
        return bool(self.fields.get("persist_job_data"))

    def refired(self) -> FiringHeader:
        """The header of the same firing run again at once, its refire count one higher."""
        return FiringHeader({**self.fields, "refire_count": self.refire_count + 1})
