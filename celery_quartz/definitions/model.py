"""What a definition source says, whatever it was read from: the jobs and triggers it defines,
the ones it deletes, how it treats those already stored, and where each was written.

A scheduling file (:mod:`celery_quartz.scheduling_files`), Celery's ``beat_schedule``
(:mod:`celery_quartz.beat_schedule`) and another scheduler's periodic tasks
(:mod:`celery_quartz.importers`) are each read into :class:`SchedulingData`; :mod:`.plan` decides
what loading them changes in the store. Every error is a :class:`SchedulingFileError` naming
where the job or trigger at fault was written (:class:`Where`), and :class:`Problems` gathers
every error of a load, not only the first.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import ParamSpec, TypeVar

from celery_quartz.errors import SchedulingFileError
from celery_quartz.job import Job
from celery_quartz.keys import (
    BACKFILL_JOBS_GROUP,
    BEAT_SCHEDULE_GROUP,
    RECOVERING_JOBS_GROUP,
    RETRYING_JOBS_GROUP,
    JobKey,
    TriggerKey,
)
from celery_quartz.triggers.base import Trigger

_P = ParamSpec("_P")
_T = TypeVar("_T")

#: Groups a scheduling file may not define, and that its delete commands never touch (Quartz's
#: "groups to never delete"): the one-off recovery, retry and backfill triggers, and
#: ``beat_schedule``'s own group, which its import keeps.
PROTECTED_GROUPS = frozenset(
    {RECOVERING_JOBS_GROUP, RETRYING_JOBS_GROUP, BACKFILL_JOBS_GROUP, BEAT_SCHEDULE_GROUP}
)
#: A delete command's group meaning "every group".
ALL_GROUPS = "*"


# -- the model --------------------------------------------------------------------------------


@dataclass
class JobDefinition:
    job: Job
    where: Where


@dataclass
class TriggerDefinition:
    """A trigger as its source defines it. ``start_at`` is given explicitly (a file's
    ``StartTime``), or relative to the load: ``StartTimeSecondsInFuture`` (now when neither is
    given), or, with ``own_start``, the trigger's own ``start_at``, which its source computed
    from the load's time (``beat_schedule``'s first interval after now; now when it has none).
    A start relative to the load is not compared with the stored one: a trigger stored earlier
    keeps its own."""

    trigger: Trigger
    where: Where
    start_at: datetime | None = None
    start_in_seconds: int = 0
    own_start: bool = False

    @property
    def explicit_start(self) -> bool:
        return self.start_at is not None

    def build(self, now: datetime) -> Trigger:
        """A fresh trigger with its start time resolved against ``now``."""
        trigger = copy.copy(self.trigger)
        trigger.data = dict(trigger.data)
        if self.start_at is not None:
            trigger.start_at = self.start_at
        elif not self.own_start or trigger.start_at is None:
            trigger.start_at = now + timedelta(seconds=self.start_in_seconds)
        return trigger


@dataclass
class SchedulingData:
    """What one source defines, read and checked (not yet against a Celery app or a store): a
    scheduling file, or the entries of a source that owns a job group (:func:`owned_group`)."""

    source: str
    delete_job_groups: list[str] = field(default_factory=list)
    delete_trigger_groups: list[str] = field(default_factory=list)
    delete_jobs: list[JobKey] = field(default_factory=list)
    delete_triggers: list[TriggerKey] = field(default_factory=list)
    #: Replace stored jobs and triggers of the same keys (Quartz's default, true).
    overwrite_existing_data: bool = True
    #: With ``overwrite_existing_data`` false: leave stored ones alone instead of failing.
    ignore_duplicates: bool = False
    #: Quartz.NET's ``schedule-trigger-relative-to-replaced-trigger`` (default false): a trigger
    #: that replaces one, with a start less than 5 s after the load (none given, say), keeps the
    #: replaced one's start and previous fire time and fires next at its own first fire time
    #: after that previous fire time (or, when it never fired, after that start).
    schedule_trigger_relative_to_replaced_trigger: bool = False
    jobs: list[JobDefinition] = field(default_factory=list)
    triggers: list[TriggerDefinition] = field(default_factory=list)
    #: How the file spells the model's keys (XML's element names; None: as the keys are).
    spelling: Mapping[str, str] | None = None
    #: Job groups the source defines whole (``beat_schedule``'s, an importer's): a stored job
    #: of one that it does not define is deleted with its triggers. Unlike a file's delete
    #: commands, this reaches a protected group: the source that owns it.
    owned_job_groups: list[str] = field(default_factory=list)
    #: Each job is one entry with the triggers defined with it (``beat_schedule``, an
    #: importer): a job replaced has them replaced too, starting again, where a file's
    #: replaced job keeps its triggers' fire times.
    entries: bool = False

    def name(self, key: str) -> str:
        """``key`` as this file spells it."""
        return spelled(self.spelling, key)


def owned_group(
    source: str, group: str, entries: Mapping[str, tuple[Job, Trigger, bool]]
) -> SchedulingData:
    """The definitions of a source that owns the job group ``group`` (``beat_schedule``, an
    importer): each entry, by name, is a job with its one trigger, and whether that trigger's
    start is the source's own (compared with the stored one, as a file's ``StartTime``) or,
    false, computed from the load's time (kept as stored). Loaded, the group holds exactly
    these jobs, and an entry defined as it is stored is left alone."""
    data = SchedulingData(source=source, owned_job_groups=[group], entries=True)
    for name, (job, trigger, explicit_start) in entries.items():
        where = Where(source, path=repr(name))
        data.jobs.append(JobDefinition(job, where))
        data.triggers.append(
            TriggerDefinition(
                trigger,
                where,
                start_at=trigger.start_at if explicit_start else None,
                own_start=not explicit_start,
            )
        )
    return data


# -- where things are written ---------------------------------------------------------------------


@dataclass(frozen=True)
class Where:
    """A place in a scheduling file: a line (XML, YAML) or a path in the document (JSON)."""

    file: str
    line: int | None = None
    path: str | None = None

    def __str__(self) -> str:
        if self.line is not None:
            return f"{self.file}:{self.line}"
        if self.path is not None:
            return f"{self.file} at {self.path}"
        return self.file

    def error(self, message: str) -> SchedulingFileError:
        return SchedulingFileError(
            f"{self}: {message}", file=self.file, line=self.line, path=self.path
        )


def spelled(spelling: Mapping[str, str] | None, key: str) -> str:
    return key if spelling is None else spelling.get(key, key)


class Problems:
    """The errors found while reading or loading files, gathered so that one load reports
    every one of them instead of stopping at the first."""

    def __init__(self) -> None:
        self.errors: list[SchedulingFileError] = []

    def read(self, reader: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T | None:
        """``reader(*args, **kwargs)``; None when it raises a SchedulingFileError, which is kept."""
        try:
            return reader(*args, **kwargs)
        except SchedulingFileError as error:
            self.errors.extend(error.errors)
            return None

    def raise_if_any(self) -> None:
        """Raise what was found: one error as it is, several as one error listing each."""
        if len(self.errors) == 1:
            raise self.errors[0]
        if self.errors:
            files = list(dict.fromkeys(error.file for error in self.errors))
            head = f"{len(self.errors)} errors in {', '.join(files)}"
            raise SchedulingFileError(
                head + "".join(f"\n{error}" for error in self.errors),
                file=files[0],
                errors=self.errors,
            )
