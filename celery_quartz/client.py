"""The scheduler client: schedule, change and inspect jobs and triggers from application code.

``Quartz(app)`` talks to the store only; any scheduler process of the cluster fires what it
stores. Every call is one transaction: it happens whole, or raises and leaves the store as it was.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any, Concatenate, ParamSpec, TypeVar

from celery import Celery

from celery_quartz.audit import acting_as, current_actor
from celery_quartz.calendars import Calendar
from celery_quartz.client_backfill import Backfills
from celery_quartz.client_history import HistoryReads
from celery_quartz.clock import Clock, SystemClock
from celery_quartz.config import Settings
from celery_quartz.editing import TriggerEdit
from celery_quartz.errors import (
    InvalidTriggerError,
    JobNotFoundError,
    TriggerNotFoundError,
    UnknownTaskError,
    ValidationError,
)
from celery_quartz.firing import RUN_ARGUMENTS
from celery_quartz.job import Job
from celery_quartz.keys import JobKey, TriggerKey
from celery_quartz.pausing import PauseRecord, PauseRequest
from celery_quartz.routing import Unserved
from celery_quartz.store import ClientStore, open_store
from celery_quartz.triggers.base import Trigger, TriggerDetailsUpdate

P = ParamSpec("P")
R = TypeVar("R")


def _audited(
    method: Callable[Concatenate[Quartz, P], R],
) -> Callable[Concatenate[Quartz, P], R]:
    """A write of the client: recorded in the audit as the client's ``principal`` when it has
    one (else as :func:`celery_quartz.audit.current_actor`)."""

    @functools.wraps(method)
    def write(self: Quartz, *args: P.args, **kwargs: P.kwargs) -> R:
        if self.principal is None:
            return method(self, *args, **kwargs)
        with acting_as(self.principal, "client"):
            return method(self, *args, **kwargs)

    return write


class Quartz(Backfills, HistoryReads):
    """Schedule jobs for the cluster of ``app`` (same ``quartz_*`` settings as its schedulers)."""

    def __init__(
        self,
        app: Celery,
        *,
        clock: Clock | None = None,
        store: ClientStore | None = None,
        settings: Settings | None = None,
        principal: str | None = None,
    ) -> None:
        #: The Celery app whose registered tasks jobs may name.
        self.app = app
        #: Who the audit records this client's writes as (through ``client``); None: the actor
        #: of the moment (:func:`celery_quartz.audit.acting_as`), by default the OS user.
        self.principal = principal
        if principal is not None:
            from celery_quartz.audit import Actor

            Actor(principal, "client")  # a bad principal is refused here, not at a write
        #: The ``quartz_*`` settings (``settings``, or read from the app's configuration).
        self.settings = settings or Settings.from_app(app)
        #: Where "now" comes from (``trigger_job``'s start time); the system clock by default.
        self.clock = clock or SystemClock()
        if store is None:
            store = open_store(self.settings, clock=self.clock, upgrade_schema=True)
        #: The store every call reads and writes (the settings' store unless one was given).
        self.store = store

    # -- scheduling ------------------------------------------------------------------------------

    def schedule_job(
        self,
        job: Job,
        trigger: Trigger,
        *,
        replace: bool = False,
        paused: bool = False,
        pause_reason: str | None = None,
        requested_by: str | None = None,
    ) -> None:
        """Store ``job`` and ``trigger`` together; the trigger's job key is set to the job's.
        With ``paused``, the trigger is stored paused (with ``pause_reason``) in the same
        transaction, so nothing fires in between."""
        self.schedule_jobs(
            [(job, [trigger])],
            replace=replace,
            paused=paused,
            pause_reason=pause_reason,
            requested_by=requested_by,
        )

    @_audited
    def schedule_jobs(
        self,
        items: Iterable[tuple[Job, Sequence[Trigger]]],
        *,
        replace: bool = False,
        paused: bool = False,
        pause_reason: str | None = None,
        requested_by: str | None = None,
    ) -> None:
        """Store many jobs, each with its triggers, in one transaction: all of them or none;
        every trigger paused with ``paused`` (as :meth:`schedule_job`)."""
        items = list(items)
        if not paused and pause_reason is not None:
            raise ValidationError("pause_reason is given, but paused is not set")
        request = self._pause_request(pause_reason, requested_by) if paused else None
        for job, triggers in items:
            self._check_job(job)
            for trigger in triggers:
                self._attach(trigger, job.key)
        self.store.store_jobs_and_triggers(items, replace=replace, paused=request)

    @_audited
    def add_job(self, job: Job, *, replace: bool = False) -> None:
        """Store a job with no trigger; it must be ``durable`` (Quartz refuses otherwise)."""
        self._check_job(job)
        if not job.durable:
            raise ValidationError(f"job {job.key}: a job stored without a trigger must be durable")
        self.store.store_jobs_and_triggers([(job, [])], replace=replace)

    @_audited
    def schedule_trigger(self, trigger: Trigger) -> None:
        """Store a trigger for a job already stored (its ``job_key``)."""
        if trigger.job_key is None:
            raise InvalidTriggerError(f"trigger {trigger.key} names no job (job_key)")
        self.store.store_jobs_and_triggers([(None, [trigger])])

    @_audited
    def unschedule_job(self, key: TriggerKey) -> bool:
        """Remove a trigger (and its job, if not durable and now without triggers)."""
        return self.store.remove_trigger(key)

    @_audited
    def reschedule_job(self, key: TriggerKey, new_trigger: Trigger) -> bool:
        """Replace the trigger ``key`` by ``new_trigger`` for the same job; False if not stored."""
        return self.store.replace_trigger(key, new_trigger)

    @_audited
    def update_trigger(self, key: TriggerKey, *, dry_run: bool = False, **changes: Any) -> Trigger:
        """Edit the stored trigger ``key`` in place and return it as stored (``dry_run``: as it
        would be; nothing is written). The editable details are the schedule (``cron`` and
        ``time_zone``, ``interval``, ``rrule``), ``priority``, ``misfire_instruction`` (a name or
        a number), ``overlap_policy`` (``allow``, ``skip``, ``buffer_one``, ``cancel_previous``),
        ``preferred_node`` (a worker, ``"*"`` or None), ``execution_group``,
        ``calendar`` and ``description``. A change of schedule or calendar recomputes the next
        fire time as a reschedule does; the trigger keeps its state, counts and pause, and a
        firing in flight is not touched (:mod:`celery_quartz.editing`). Raises
        :class:`TriggerNotFoundError`, or :class:`InvalidTriggerError` /
        :class:`ValidationError` naming the detail at fault (nothing is written then)."""
        edit = TriggerEdit.of(**changes)
        return self.store.edit_trigger(key, edit, dry_run=dry_run)

    @_audited
    def update_trigger_details(self, key: TriggerKey, update: TriggerDetailsUpdate) -> None:
        """Change details of the stored trigger ``key`` in place, without rescheduling it: its
        fire times, state and counts stay as they are. Re-pins a trigger with
        ``TriggerDetailsUpdate(preferred_node=...)``. Raises :class:`TriggerNotFoundError`
        naming ``key`` when it is not stored."""
        if not isinstance(update, TriggerDetailsUpdate):
            raise ValidationError(
                f"trigger {key}: expected a TriggerDetailsUpdate, got {type(update).__name__}"
            )
        self.store.update_trigger_details(key, update)

    @_audited
    def delete_job(self, key: JobKey) -> bool:
        """Remove a job and all its triggers; False if it was not stored."""
        return self.store.remove_job(key)

    @_audited
    def trigger_job(
        self,
        key: JobKey,
        data: dict | None = None,
        *,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
    ) -> Trigger:
        """Fire a stored job now, once, through the cluster (a one-shot trigger). ``args`` and
        ``kwargs``, when given, are what this run calls the task with instead of the job's own
        (a run again of a recorded run); the job is left as it is."""
        from celery_quartz.triggers import SimpleTrigger

        if self.store.retrieve_job(key) is None:
            raise JobNotFoundError(f"job {key} is not stored")
        trigger_data = dict(data or {})
        if args is not None or kwargs is not None:
            if args is not None and (
                isinstance(args, (str, bytes)) or not isinstance(args, Sequence)
            ):
                raise ValidationError(f"job {key}: args must be a list, got {args!r}")
            if kwargs is not None and not isinstance(kwargs, Mapping):
                raise ValidationError(f"job {key}: kwargs must be a mapping, got {kwargs!r}")
            override: dict[str, Any] = {}
            if args is not None:
                override["args"] = list(args)
            if kwargs is not None:
                override["kwargs"] = dict(kwargs)
            trigger_data[RUN_ARGUMENTS] = override
        trigger = SimpleTrigger(
            key=TriggerKey.generate("MANUAL_TRIGGER"),
            job_key=key,
            start_at=self.clock.now(),
            repeat_count=0,
            repeat_interval=timedelta(0),
            data=trigger_data,
        )
        self.store.store_jobs_and_triggers([(None, [trigger])])
        return trigger

    # -- pausing ---------------------------------------------------------------------------------

    @_audited
    def pause_trigger(
        self, key: TriggerKey, *, reason: str | None = None, requested_by: str | None = None
    ) -> None:
        """Pause the trigger ``key``: a WAITING or ACQUIRED trigger becomes PAUSED, a BLOCKED one
        PAUSED_BLOCKED; one in ERROR or COMPLETE stays as it is, as Quartz's job store leaves it
        (read :meth:`get_trigger_state`). The trigger keeps ``reason`` (up to 250 characters),
        ``requested_by`` (default: the caller's principal) and when; every pause below does the
        same, and the resume clears it. Raises :class:`TriggerNotFoundError` naming ``key``
        when it is not stored."""
        request = self._pause_request(reason, requested_by)
        self._require_trigger(key)
        self.store.pause_trigger(key, request)

    @_audited
    def pause_triggers(
        self,
        keys: Iterable[TriggerKey],
        *,
        reason: str | None = None,
        requested_by: str | None = None,
    ) -> None:
        """Pause each of the triggers ``keys``, in one transaction. Raises
        :class:`TriggerNotFoundError` naming the first that is not stored (pausing none)."""
        request = self._pause_request(reason, requested_by)
        keys = list(keys)
        for key in keys:
            self._require_trigger(key)
        self.store.pause_triggers(keys, request)

    @_audited
    def resume_triggers(self, keys: Iterable[TriggerKey]) -> None:
        """Resume each of the paused triggers ``keys``, in one transaction (as
        :meth:`resume_trigger`). Raises :class:`TriggerNotFoundError` naming the first that is
        not stored (resuming none)."""
        keys = list(keys)
        for key in keys:
            self._require_trigger(key)
        self.store.resume_triggers(keys)

    @_audited
    def resume_trigger(self, key: TriggerKey) -> None:
        """Resume the paused trigger ``key``; one the pause made late by more than the misfire
        threshold follows its misfire instruction. A trigger that is not paused stays as it is
        (one in ERROR included: :meth:`reset_trigger_from_error_state` returns it). Raises
        :class:`TriggerNotFoundError` naming ``key`` when it is not stored."""
        self._require_trigger(key)
        self.store.resume_trigger(key)

    @_audited
    def pause_job(
        self, key: JobKey, *, reason: str | None = None, requested_by: str | None = None
    ) -> None:
        """Pause every trigger of the job ``key`` (as :meth:`pause_trigger` pauses one). Raises
        :class:`JobNotFoundError` naming ``key`` when it is not stored."""
        request = self._pause_request(reason, requested_by)
        self._require_job(key)
        self.store.pause_job(key, request)

    @_audited
    def resume_job(self, key: JobKey) -> None:
        """Resume every paused trigger of the job ``key`` (as :meth:`resume_trigger` resumes
        one). Raises :class:`JobNotFoundError` naming ``key`` when it is not stored."""
        self._require_job(key)
        self.store.resume_job(key)

    @_audited
    def pause_trigger_group(
        self, group: str, *, reason: str | None = None, requested_by: str | None = None
    ) -> None:
        """Pause every trigger of ``group`` now and every trigger stored in it later (which
        shows the group's reason)."""
        self.store.pause_trigger_group(group, self._pause_request(reason, requested_by))

    @_audited
    def resume_trigger_group(self, group: str) -> None:
        """Resume every paused trigger of ``group``, and stop pausing the triggers stored in it
        later; a trigger the pause made late follows its misfire instruction."""
        self.store.resume_trigger_group(group)

    @_audited
    def pause_all(self, *, reason: str | None = None, requested_by: str | None = None) -> None:
        """Pause every trigger group, and every trigger stored later (Quartz's PauseAll)."""
        self.store.pause_all(self._pause_request(reason, requested_by))

    @_audited
    def resume_all(self) -> None:
        """Resume every paused trigger, and stop pausing triggers stored later (ResumeAll);
        a trigger the pause made late follows its misfire instruction."""
        self.store.resume_all()

    def get_paused_trigger_groups(self) -> list[str]:
        """The trigger groups paused with :meth:`pause_trigger_group`, sorted."""
        return self.store.paused_trigger_groups()

    def paused_group_records(self) -> dict[str, PauseRecord]:
        """Each paused trigger group's reason, who paused it and when (``"*"``: everything,
        paused by :meth:`pause_all`)."""
        return self.store.paused_group_records()

    def _pause_request(self, reason: str | None, requested_by: str | None) -> PauseRequest:
        return PauseRequest.checked(reason, requested_by or current_actor().principal)

    @_audited
    def reset_trigger_from_error_state(self, *keys: TriggerKey) -> int:
        """Return triggers in ERROR (their job's task was missing when they came due) to their
        schedule; the number reset."""
        return self.store.reset_trigger_from_error_state(keys)

    # -- calendars -------------------------------------------------------------------------------

    @_audited
    def add_calendar(self, name: str, calendar: Calendar, *, replace: bool = False) -> None:
        """Store ``calendar`` under ``name`` for triggers to name in ``calendar_name`` (Quartz's
        ``AddCalendar``). Raises :class:`~celery_quartz.errors.ObjectAlreadyExistsError` when one
        is stored and ``replace`` is false. Replacing a calendar does not move fire times
        already computed: each trigger follows it from its next firing on."""
        if not isinstance(name, str) or not name:
            raise ValidationError(f"a calendar's name must be a non-empty string, not {name!r}")
        if not isinstance(calendar, Calendar):
            raise ValidationError(
                f"calendar {name!r}: expected a celery_quartz.calendars.Calendar, "
                f"not {type(calendar).__name__}"
            )
        self.store.store_calendar(name, calendar, replace=replace)

    def get_calendar(self, name: str) -> Calendar | None:
        """The calendar stored under ``name``, or None."""
        calendar: Calendar | None = self.store.retrieve_calendar(name)
        return calendar

    def get_calendar_names(self) -> list[str]:
        """The names of the stored calendars, sorted."""
        return sorted(self.store.calendars())

    @_audited
    def delete_calendar(self, name: str) -> bool:
        """Remove the calendar ``name``; False when none is stored. Raises
        :class:`~celery_quartz.errors.CalendarInUseError` naming a trigger that still uses it."""
        return self.store.remove_calendar(name)

    # -- reading ---------------------------------------------------------------------------------

    def get_job(self, key: JobKey) -> Job | None:
        """The job stored under ``key``, or None."""
        return self.store.retrieve_job(key)

    def get_trigger(self, key: TriggerKey) -> Trigger | None:
        """The trigger stored under ``key`` (its schedule, next and previous fire times), or
        None."""
        return self.store.retrieve_trigger(key)

    def get_trigger_state(self, key: TriggerKey) -> str:
        """WAITING, ACQUIRED, PAUSED, BLOCKED, PAUSED_BLOCKED, COMPLETE, ERROR, or NONE."""
        return self.store.get_trigger_state(key)

    def get_triggers_of_job(self, key: JobKey) -> list[Trigger]:
        """The triggers of the job ``key``; empty when it has none or is not stored."""
        return self.store.get_triggers_of_job(key)

    def get_job_keys(self, group: str | None = None) -> list[JobKey]:
        """The keys of the stored jobs, of ``group`` only when one is given."""
        return self.store.job_keys(group)

    def unserved_groups(self) -> list[Unserved]:
        """Execution groups of the stored triggers that no live worker serves (their due
        triggers wait, and misfire if held too long), and pinned workers that do not consume
        their triggers' queues. Judged with this client's ``quartz_*`` settings."""
        return self.store.unserved(
            self.settings.router(self.app.conf.task_default_queue or "celery")
        )

    # -- checks ----------------------------------------------------------------------------------

    def _check_job(self, job: Job) -> None:
        if not isinstance(job, Job):
            raise ValidationError(f"expected a Job, got {type(job).__name__}")
        job.validate(self.settings.max_job_data_bytes)
        check_task_registered(self.app, job.task, f"job {job.key}")

    @staticmethod
    def _attach(trigger: Trigger, job_key: JobKey) -> None:
        if not isinstance(trigger, Trigger):
            raise ValidationError(f"expected a Trigger, got {type(trigger).__name__}")
        if trigger.job_key is not None and trigger.job_key != job_key:
            raise InvalidTriggerError(
                f"trigger {trigger.key} names job {trigger.job_key}, "
                f"but is scheduled with job {job_key}"
            )
        trigger.job_key = job_key

    def _require_trigger(self, key: TriggerKey) -> None:
        if self.store.get_trigger_state(key) == "NONE":
            raise TriggerNotFoundError(f"trigger {key} is not stored")

    def _require_job(self, key: JobKey) -> None:
        if self.store.retrieve_job(key) is None:
            raise JobNotFoundError(f"job {key} is not stored")


def check_task_registered(app: Celery, task: str, owner: str) -> None:
    """Job types are limited to the app's registered Celery tasks (DESIGN, invariant 7)."""
    app.loader.import_default_modules()
    if task not in app.tasks:
        raise UnknownTaskError(
            f"{owner}: task {task!r} is not registered with Celery app {app.main!r}"
        )
