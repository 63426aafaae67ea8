"""What loading definitions changes: a pure decision over what the store holds.

:func:`plan` replays each source's pre-processing commands (a scheduling file's) and then its
jobs and triggers (with its processing directives) over a snapshot of the stored jobs and triggers
it touches, the way Quartz's ``XMLSchedulingDataProcessor`` does against a scheduler, and then
compares the result with the snapshot. A job or trigger that ends as it was stored is *unchanged*
and is not written, even if a delete command removed it and the source defined it again: so
loading the same definitions twice changes nothing the second time, and a trigger keeps its fire
times across restarts.

No database here: the store reads the snapshot and writes the plan in one transaction
(:meth:`celery_quartz.store.abc.JobStore.apply_scheduling_data`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from celery_quartz.clock import to_millis
from celery_quartz.definitions.model import (
    ALL_GROUPS,
    PROTECTED_GROUPS,
    Problems,
    SchedulingData,
    TriggerDefinition,
    Where,
)
from celery_quartz.errors import QuartzError, SchedulingFileError
from celery_quartz.job import Job
from celery_quartz.keys import JobKey, TriggerKey
from celery_quartz.overlap import OverlapPolicy
from celery_quartz.triggers.base import Trigger


@dataclass
class Snapshot:
    """The stored jobs and triggers a load touches. Every trigger of a job in ``jobs`` is in
    ``triggers`` (so removing a job's last trigger can be judged)."""

    jobs: dict[JobKey, Job] = field(default_factory=dict)
    triggers: dict[TriggerKey, Trigger] = field(default_factory=dict)
    #: Job groups and trigger groups read whole (``"*"`` when every group was read).
    job_groups: frozenset[str] = frozenset()
    trigger_groups: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Needs:
    """What the snapshot must hold for :func:`plan` to decide."""

    job_groups: frozenset[str]
    trigger_groups: frozenset[str]
    job_keys: frozenset[JobKey]
    trigger_keys: frozenset[TriggerKey]


def needs(files: Sequence[SchedulingData]) -> Needs:
    job_groups: set[str] = set()
    trigger_groups: set[str] = set()
    job_keys: set[JobKey] = set()
    trigger_keys: set[TriggerKey] = set()
    for data in files:
        job_groups.update(data.delete_job_groups)
        job_groups.update(data.owned_job_groups)
        trigger_groups.update(data.delete_trigger_groups)
        job_keys.update(data.delete_jobs)
        job_keys.update(d.job.key for d in data.jobs)
        trigger_keys.update(data.delete_triggers)
        for definition in data.triggers:
            trigger_keys.add(definition.trigger.key)
            assert definition.trigger.job_key is not None
            job_keys.add(definition.trigger.job_key)
    return Needs(
        frozenset(job_groups),
        frozenset(trigger_groups),
        frozenset(job_keys),
        frozenset(trigger_keys),
    )


@dataclass
class Plan:
    """What a load changes, by key. ``jobs_to_write`` and ``triggers_to_write`` are the added and
    replaced ones, ready to store; the deleted ones are removed first."""

    jobs_added: list[JobKey] = field(default_factory=list)
    jobs_replaced: list[JobKey] = field(default_factory=list)
    jobs_deleted: list[JobKey] = field(default_factory=list)
    jobs_unchanged: list[JobKey] = field(default_factory=list)
    triggers_added: list[TriggerKey] = field(default_factory=list)
    triggers_replaced: list[TriggerKey] = field(default_factory=list)
    triggers_deleted: list[TriggerKey] = field(default_factory=list)
    triggers_unchanged: list[TriggerKey] = field(default_factory=list)
    jobs_to_write: list[Job] = field(default_factory=list)
    triggers_to_write: list[Trigger] = field(default_factory=list)
    #: The next fire time of each trigger to write that is scheduled relative to the one it
    #: replaces (``schedule-trigger-relative-to-replaced-trigger``): the store keeps it instead
    #: of computing a first fire time from the start.
    next_fire_times: dict[TriggerKey, datetime] = field(default_factory=dict)
    #: The job of each trigger added, replaced or deleted.
    job_of: dict[TriggerKey, JobKey] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return bool(
            self.jobs_added
            or self.jobs_replaced
            or self.jobs_deleted
            or self.triggers_added
            or self.triggers_replaced
            or self.triggers_deleted
        )

    def as_dict(self) -> dict[str, dict[str, list[str]]]:
        """Each kind of change as lists of ``group.name`` (for ``--json``)."""
        return {
            "jobs": {
                "added": [str(k) for k in self.jobs_added],
                "replaced": [str(k) for k in self.jobs_replaced],
                "deleted": [str(k) for k in self.jobs_deleted],
                "unchanged": [str(k) for k in self.jobs_unchanged],
            },
            "triggers": {
                "added": [str(k) for k in self.triggers_added],
                "replaced": [str(k) for k in self.triggers_replaced],
                "deleted": [str(k) for k in self.triggers_deleted],
                "unchanged": [str(k) for k in self.triggers_unchanged],
            },
        }

    def by_job(self) -> JobChanges:
        """What changes told by job, a job with its triggers being one entry (of
        ``beat_schedule``, of an importer): a job kept whose triggers change is updated."""
        touched = {self.job_of[tkey] for tkey in self.triggers_changed}
        return JobChanges(
            added=list(self.jobs_added),
            updated=sorted(
                set(self.jobs_replaced) | (set(self.jobs_unchanged) & touched), key=_by_group
            ),
            removed=list(self.jobs_deleted),
            unchanged=[key for key in self.jobs_unchanged if key not in touched],
        )

    @property
    def triggers_changed(self) -> list[TriggerKey]:
        return [*self.triggers_added, *self.triggers_replaced, *self.triggers_deleted]

    def summary(self) -> str:
        return (
            f"jobs: {len(self.jobs_added)} added, {len(self.jobs_replaced)} replaced, "
            f"{len(self.jobs_deleted)} deleted, {len(self.jobs_unchanged)} unchanged; "
            f"triggers: {len(self.triggers_added)} added, {len(self.triggers_replaced)} "
            f"replaced, {len(self.triggers_deleted)} deleted, "
            f"{len(self.triggers_unchanged)} unchanged"
        )

    def lines(self) -> list[str]:
        """One line per job or trigger: ``+`` added, ``~`` replaced, ``-`` deleted,
        ``=`` unchanged."""
        out: list[str] = []
        for mark, kind, keys in (
            ("+", "job", self.jobs_added),
            ("~", "job", self.jobs_replaced),
            ("-", "job", self.jobs_deleted),
            ("=", "job", self.jobs_unchanged),
            ("+", "trigger", self.triggers_added),
            ("~", "trigger", self.triggers_replaced),
            ("-", "trigger", self.triggers_deleted),
            ("=", "trigger", self.triggers_unchanged),
        ):
            out.extend(f"{mark} {kind} {key}" for key in sorted(keys, key=_by_group))
        return out


@dataclass
class JobChanges:
    """A plan told by job (:meth:`Plan.by_job`)."""

    added: list[JobKey] = field(default_factory=list)
    updated: list[JobKey] = field(default_factory=list)
    removed: list[JobKey] = field(default_factory=list)
    unchanged: list[JobKey] = field(default_factory=list)


#: Finds a stored calendar for a trigger (raises naming the trigger when it is not stored).
CalendarLookup = Callable[[str, TriggerKey], Any]


def plan(
    snapshot: Snapshot,
    files: Sequence[SchedulingData],
    now: datetime,
    calendar: CalendarLookup | None = None,
) -> Plan:
    """Decide what loading ``files`` (in order) into the snapshot's store changes.

    Raises :class:`SchedulingFileError` naming the file, line or path and the job or trigger
    (one error listing every one found): a duplicate, stored or defined earlier in the load,
    that the directives do not allow, a trigger naming a job neither stored nor defined, a job
    left with no trigger that is not durable, a trigger that will never fire.
    """
    jobs: dict[JobKey, Job] = dict(snapshot.jobs)
    triggers: dict[TriggerKey, Trigger] = dict(snapshot.triggers)
    explicit_start: dict[TriggerKey, bool] = {}
    defined_where: dict[JobKey | TriggerKey, Where] = {}
    # Each job's triggers, kept beside ``triggers``: a "*" delete of a large store is linear.
    of_job: dict[JobKey, set[TriggerKey]] = {}
    for tkey, trigger in triggers.items():
        if trigger.job_key is not None:
            of_job.setdefault(trigger.job_key, set()).add(tkey)

    def put(trigger: Trigger) -> None:
        triggers[trigger.key] = trigger
        assert trigger.job_key is not None
        of_job.setdefault(trigger.job_key, set()).add(trigger.key)

    def delete_job(key: JobKey) -> None:
        if jobs.pop(key, None) is None:
            return
        for tkey in of_job.pop(key, set()):
            del triggers[tkey]

    def unschedule(key: TriggerKey) -> None:
        trigger = triggers.pop(key, None)
        if trigger is None or trigger.job_key is None:
            return
        remaining = of_job.get(trigger.job_key, set())
        remaining.discard(key)
        job = jobs.get(trigger.job_key)
        if job is not None and not job.durable and not remaining:
            del jobs[job.key]  # Quartz: a non-durable job goes with its last trigger

    found = Problems()
    # Each definition of this load, by key: a second one is judged against the first as a stored
    # one is (Quartz.NET stores the first, then replaces it: the last wins when overwriting).
    defined: set[JobKey | TriggerKey] = set()
    relative_next: dict[TriggerKey, datetime] = {}
    # The triggers defined with their job as one entry: replaced whenever it is.
    with_job: set[TriggerKey] = set()
    for data in files:
        for group in data.owned_job_groups:
            for key in [k for k in jobs if k.group == group]:
                delete_job(key)
        for group in data.delete_job_groups:
            for key in [k for k in jobs if _in_group(k.group, group)]:
                delete_job(key)
        for group in data.delete_trigger_groups:
            for tkey in [k for k in triggers if _in_group(k.group, group)]:
                unschedule(tkey)
        for key in data.delete_jobs:
            if key.group not in PROTECTED_GROUPS:
                delete_job(key)
        for tkey in data.delete_triggers:
            if tkey.group not in PROTECTED_GROUPS:
                unschedule(tkey)

        for job_definition in data.jobs:
            job = job_definition.job
            stored = jobs.get(job.key)
            if stored is not None and not data.overwrite_existing_data:
                if data.ignore_duplicates or same_job(stored, job):
                    continue
                found.errors.append(
                    job_definition.where.error(
                        f"job {job.key} {_already(job.key, defined, defined_where)}, and the "
                        "file's processing directives neither overwrite it nor ignore duplicates"
                    )
                )
                continue
            defined.add(job.key)
            defined_where[job.key] = job_definition.where
            jobs[job.key] = job

        for definition in data.triggers:
            tkey = definition.trigger.key
            stored_trigger = triggers.get(tkey)
            if stored_trigger is not None and not data.overwrite_existing_data:
                if data.ignore_duplicates or _same_definition(stored_trigger, definition):
                    continue
                found.errors.append(
                    definition.where.error(
                        f"trigger {tkey} {_already(tkey, defined, defined_where)}, and the "
                        "file's processing directives neither overwrite it nor ignore duplicates"
                    )
                )
                continue
            job_key = definition.trigger.job_key
            assert job_key is not None
            if job_key not in jobs:
                found.errors.append(
                    definition.where.error(
                        f"trigger {tkey}: job {job_key} is neither stored nor defined"
                    )
                )
                continue
            defined.add(tkey)
            defined_where[tkey] = definition.where
            if stored_trigger is not None and stored_trigger.job_key != job_key:
                unschedule(tkey)
            trigger = definition.build(now)
            relative_next.pop(tkey, None)
            if (
                data.schedule_trigger_relative_to_replaced_trigger
                and stored_trigger is not None
                and _starts_at_load(trigger, now)
            ):
                next_fire_time = _relative_to(trigger, stored_trigger)
                if next_fire_time is not None:
                    relative_next[tkey] = next_fire_time
            put(trigger)
            explicit_start[tkey] = definition.explicit_start
            if data.entries:
                with_job.add(tkey)
            else:
                with_job.discard(tkey)

        # Quartz: a job left without triggers must be durable (said once for a job defined
        # twice, at its last definition).
        last_definitions = {d.job.key: d for d in data.jobs}
        for job_definition in last_definitions.values():
            job = jobs.get(job_definition.job.key)  # type: ignore[assignment]
            if job is not None and not job.durable and not of_job.get(job.key):
                found.errors.append(
                    job_definition.where.error(
                        f"job {job.key} has no trigger, so it must be durable "
                        f"({data.name('Durable')} true)"
                    )
                )

    found.raise_if_any()
    return _compare(
        snapshot, jobs, triggers, explicit_start, defined_where, calendar, relative_next, with_job
    )


#: How soon after the load a replacing trigger's start may be for it to be scheduled relative
#: to the trigger it replaces (Quartz.NET's: a start "not given" is the load's time).
RELATIVE_START_WINDOW = timedelta(seconds=5)


def _starts_at_load(trigger: Trigger, now: datetime) -> bool:
    assert trigger.start_at is not None
    return trigger.start_at - now < RELATIVE_START_WINDOW


def _relative_to(trigger: Trigger, replaced: Trigger) -> datetime | None:
    """Schedule ``trigger`` relative to the trigger it replaces, as Quartz.NET's
    XMLSchedulingDataProcessor does: the replaced one's start and previous fire time are kept,
    and the next fire time is the new schedule's first after that previous fire time (after
    the start when it never fired). None when the new schedule has none: the store then
    computes the first fire time from the start, as Quartz.NET does."""
    trigger.start_at = replaced.start_at
    trigger.previous_fire_time = replaced.previous_fire_time
    after = replaced.previous_fire_time or replaced.start_at
    assert after is not None
    trigger.next_fire_time = trigger.next_fire_time_after(after)
    return trigger.next_fire_time


def _already(
    key: JobKey | TriggerKey,
    defined: set[JobKey | TriggerKey],
    defined_where: dict[JobKey | TriggerKey, Where],
) -> str:
    if key in defined:
        return f"is defined twice (first at {defined_where[key]})"
    return "is already stored"


def _compare(
    snapshot: Snapshot,
    jobs: dict[JobKey, Job],
    triggers: dict[TriggerKey, Trigger],
    explicit_start: dict[TriggerKey, bool],
    defined_where: dict[JobKey | TriggerKey, Where],
    calendar: CalendarLookup | None,
    relative_next: dict[TriggerKey, datetime],
    with_job: set[TriggerKey],
) -> Plan:
    result = Plan()
    found = Problems()
    for key in sorted(snapshot.jobs.keys() | jobs.keys(), key=_by_group):
        before, after = snapshot.jobs.get(key), jobs.get(key)
        if after is None:
            result.jobs_deleted.append(key)
        elif before is None:
            result.jobs_added.append(key)
            result.jobs_to_write.append(after)
        elif before is after or same_job(before, after):
            result.jobs_unchanged.append(key)
        else:
            result.jobs_replaced.append(key)
            result.jobs_to_write.append(after)
    calendars: dict[str, Any] = {}
    replaced_jobs = set(result.jobs_replaced)
    for tkey in sorted(snapshot.triggers.keys() | triggers.keys(), key=_by_group):
        stored, wanted = snapshot.triggers.get(tkey), triggers.get(tkey)
        if wanted is None:
            assert stored is not None and stored.job_key is not None
            result.triggers_deleted.append(tkey)
            result.job_of[tkey] = stored.job_key
            continue
        assert wanted.job_key is not None
        if (
            stored is wanted
            or (stored is not None and same_trigger(stored, wanted, explicit_start.get(tkey, True)))
        ) and not (tkey in with_job and wanted.job_key in replaced_jobs):
            result.triggers_unchanged.append(tkey)
            continue
        if found.read(_check_fires, wanted, defined_where.get(tkey), calendar, calendars) is None:
            continue
        (result.triggers_added if stored is None else result.triggers_replaced).append(tkey)
        result.job_of[tkey] = wanted.job_key
        result.triggers_to_write.append(wanted)
        if tkey in relative_next:
            result.next_fire_times[tkey] = relative_next[tkey]
    found.raise_if_any()
    return result


def _check_fires(
    trigger: Trigger,
    where: Where | None,
    lookup: CalendarLookup | None,
    calendars: dict[str, Any],
) -> bool:
    """A trigger about to be written: its calendar is stored and it will fire at least once."""
    place = where or Where("<store>")
    owner = f"trigger {trigger.key}"
    try:
        trigger.validate()
        cal = None
        name = trigger.calendar_name
        if name is not None and lookup is not None:
            if name not in calendars:
                calendars[name] = lookup(name, trigger.key)
            cal = calendars[name]
        probe = _copy_state(trigger)
        if probe.compute_first_fire_time(cal) is None:
            raise place.error(f"{owner}: based on its schedule it will never fire")
        return True
    except SchedulingFileError:
        raise
    except QuartzError as exc:
        message = str(exc)
        raise place.error(message if owner in message else f"{owner}: {message}") from None


def _copy_state(trigger: Trigger) -> Trigger:
    return copy.copy(trigger)


def _by_group(key: JobKey | TriggerKey) -> tuple[str, str]:
    return key.group, key.name


def _in_group(group: str, selector: str) -> bool:
    if group in PROTECTED_GROUPS:
        return False
    return selector == ALL_GROUPS or group == selector


# -- "the same definition" --------------------------------------------------------------------


def same_job(a: Job, b: Job) -> bool:
    """Whether two jobs say the same thing (what a reload compares)."""
    return (
        a.key == b.key
        and a.task == b.task
        and list(a.args) == list(b.args)
        and dict(a.kwargs) == dict(b.kwargs)
        and dict(a.data) == dict(b.data)
        and dict(a.options) == dict(b.options)
        and a.description == b.description
        and bool(a.durable) == bool(b.durable)
        and bool(a.requests_recovery) == bool(b.requests_recovery)
        and bool(a.disallow_concurrent) == bool(b.disallow_concurrent)
        and bool(a.persist_job_data) == bool(b.persist_job_data)
        and a.require_success_within == b.require_success_within
        and a.retry_policy == b.retry_policy
    )


def same_trigger(stored: Trigger, wanted: Trigger, explicit_start: bool) -> bool:
    """Whether the stored trigger already is what the file defines.

    The start time counts only when the file gives one (``StartTime``): a start relative to the
    load (none, or ``StartTimeSecondsInFuture``) is whenever the trigger was first stored. An
    automatic pin is the same whichever worker has claimed it. Times compare to the
    millisecond, as the store keeps them.
    """
    return (
        stored.kind == wanted.kind
        and stored.detail() == wanted.detail()
        and stored.job_key == wanted.job_key
        and stored.description == wanted.description
        and stored.priority == wanted.priority
        and int(stored.misfire_instruction) == int(wanted.misfire_instruction)
        and dict(stored.data) == dict(wanted.data)
        and stored.calendar_name == wanted.calendar_name
        and stored.execution_group == wanted.execution_group
        and stored.retry_policy == wanted.retry_policy
        and OverlapPolicy.parse(stored.overlap_policy) == OverlapPolicy.parse(wanted.overlap_policy)
        and stored.pause_when_retries_exhausted == wanted.pause_when_retries_exhausted
        and _same_pin(stored, wanted)
        and _millis(stored.end_at) == _millis(wanted.end_at)
        and (not explicit_start or _millis(stored.start_at) == _millis(wanted.start_at))
    )


def _same_definition(stored: Trigger, definition: TriggerDefinition) -> bool:
    probe = definition.trigger
    if definition.explicit_start:
        probe = _copy_state(probe)
        probe.start_at = definition.start_at
    return same_trigger(stored, probe, definition.explicit_start)


def _same_pin(a: Trigger, b: Trigger) -> bool:
    if a.preferred_node.is_automatic or b.preferred_node.is_automatic:
        return a.preferred_node.is_automatic == b.preferred_node.is_automatic
    return a.preferred_node.node == b.preferred_node.node


def _millis(when: datetime | None) -> int | None:
    return None if when is None else to_millis(when)
