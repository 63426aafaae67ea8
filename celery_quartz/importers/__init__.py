"""Importers: the periodic tasks of another Celery scheduler (django-celery-beat, redbeat) as jobs
and triggers, idempotently.

Each source module reads its scheduler's own storage (django-celery-beat's tables over a
database URL, redbeat's keys in Redis) into :class:`SourceEntry` values; :func:`run_import` turns
them into one job and one trigger each, in a group of their own (``django_celery_beat``,
``redbeat``), and loads that group as a source that owns it
(:func:`celery_quartz.definitions.owned_group`) in one transaction, through the same plan as the
scheduling files (:meth:`~celery_quartz.store.abc.JobStore.apply_scheduling_data`): an entry
imported again unchanged is left alone (its trigger keeps its fire times), a changed one is
replaced, one no longer in the source is removed. What cannot be represented exactly (solar
schedules, rrules, custom message headers, tasks the app does not register) is reported by name
and skipped, never approximated.

See docs/migrating.md.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from celery_quartz.audit import acting_as
from celery_quartz.celery_schedules import trigger_from_celery_schedule
from celery_quartz.definitions import owned_group
from celery_quartz.errors import QuartzError, ValidationError
from celery_quartz.job import Job
from celery_quartz.keys import JobKey, TriggerKey
from celery_quartz.triggers import CalendarIntervalTrigger, SimpleTrigger
from celery_quartz.triggers.base import Trigger

if TYPE_CHECKING:
    from celery import Celery

    from celery_quartz.store.abc import ClientStore

__all__ = ["ImportReport", "SourceEntry", "disabled_group", "read_crontab", "run_import"]

logger = logging.getLogger(__name__)


def disabled_group(group: str) -> str:
    """The trigger group of a source's disabled entries: paused once, so every trigger stored
    in it is stored PAUSED (in the same transaction as the rest of the import)."""
    return f"{group}.disabled"


@dataclass
class SourceEntry:
    """One periodic task of the source scheduler, as that scheduler runs it.

    ``schedule`` is a Celery schedule (``crontab``, ``schedule``, ``solar``...) or, for a
    one-off at a fixed time (django-celery-beat's clocked schedule), that aware datetime.
    ``first_fire`` is when an interval schedule next runs under the source scheduler (from its
    last run), ``not_before`` a start time before which nothing runs, ``end_at`` when it
    expires.
    """

    name: str
    task: str
    schedule: Any
    time_zone: str
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    enabled: bool = True
    one_off: bool = False
    first_fire: datetime | None = None
    not_before: datetime | None = None
    end_at: datetime | None = None
    description: str | None = None
    #: Why the source module already knows it cannot import this entry (None: it can).
    skip_reason: str | None = None


@dataclass
class ImportReport:
    """What an import did (or, in a dry run, would do), by entry name."""

    source: str
    group: str
    dry_run: bool
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return bool(self.added or self.updated or self.removed)

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "group": self.group,
            "dry_run": self.dry_run,
            "added": self.added,
            "updated": self.updated,
            "removed": self.removed,
            "unchanged": self.unchanged,
            "skipped": self.skipped,
        }

    def lines(self) -> list[str]:
        out = [f"+ {name}" for name in self.added]
        out += [f"~ {name}" for name in self.updated]
        out += [f"- {name}" for name in self.removed]
        out += [f"! skipped {name}: {why}" for name, why in sorted(self.skipped.items())]
        return out

    def summary(self) -> str:
        return (
            f"{self.source} -> group {self.group}: {len(self.added)} added, "
            f"{len(self.updated)} updated, {len(self.removed)} removed, "
            f"{len(self.unchanged)} unchanged, {len(self.skipped)} skipped"
        )


def read_crontab(fields: dict[str, Any]) -> tuple[Any, str | None]:
    """Celery's ``crontab`` of a source's crontab ``fields``, or ``(None, why)`` when Celery
    cannot read them (a source may store what its own validator accepts and Celery refuses,
    such as django-celery-beat's day of week ``7``): the entry is then skipped, by name."""
    from celery.schedules import ParseException, crontab

    try:
        return crontab(**fields), None
    except (ValueError, TypeError, ParseException) as exc:
        error = exc
    for name, value in fields.items():  # name the field at fault when one alone is
        try:
            crontab(**{name: value})
        except (ValueError, TypeError, ParseException) as exc:
            return None, f"Celery cannot read the crontab's {name} {value!r}: {exc}"
    return None, f"Celery cannot read the crontab {fields!r}: {error}"


def build(
    app: Celery, entry: SourceEntry, group: str, now: datetime, max_data_bytes: int
) -> tuple[Job, Trigger, bool]:
    """The job and trigger that run ``entry`` as its scheduler would, and whether the trigger's
    start is the source's own (a fixed time, a start time still ahead) rather than computed
    from ``now`` or the source's last run; raises :class:`ValidationError` naming the entry for
    what no trigger can say exactly."""
    if entry.skip_reason:
        raise ValidationError(entry.skip_reason)
    app.loader.import_default_modules()
    if entry.task not in app.tasks:
        raise ValidationError(f"task {entry.task!r} is not registered with Celery app {app.main!r}")
    key = JobKey(entry.name, group)
    job = Job(
        key=key,
        task=entry.task,
        args=tuple(entry.args),
        kwargs=dict(entry.kwargs),
        options=dict(entry.options),
        description=entry.description,
    )
    job.validate(max_data_bytes)
    trigger_key = TriggerKey(entry.name, group if entry.enabled else disabled_group(group))
    trigger: Trigger
    explicit_start = isinstance(entry.schedule, datetime)
    if isinstance(entry.schedule, datetime):
        trigger = _once(trigger_key, entry.schedule)
    else:
        trigger = trigger_from_celery_schedule(
            entry.schedule,
            entry_name=entry.name,
            key=trigger_key,
            default_time_zone=entry.time_zone,
            now=now,
        )
        if isinstance(trigger, (SimpleTrigger, CalendarIntervalTrigger)):
            trigger.start_at = _interval_start(entry, trigger.start_at or now, now)
            # Held back by the source's start time: its own, not one counted from a run.
            explicit_start = entry.not_before is not None and trigger.start_at == entry.not_before
        elif entry.not_before is not None and entry.not_before > now:
            trigger.start_at = entry.not_before
            explicit_start = True
        if entry.one_off:
            # Runs once, at the schedule's first time, then the source disables it.
            probe = _copy_for_probe(trigger, now)
            first_fire = probe.compute_first_fire_time()
            if first_fire is None:
                raise ValidationError("a one-off task whose schedule never fires")
            trigger = _once(trigger_key, first_fire)
            explicit_start = False
    trigger.description = entry.description
    trigger.end_at = entry.end_at
    trigger.job_key = key
    trigger.validate()
    if entry.end_at is not None and entry.end_at <= now:
        raise ValidationError(f"expired at {entry.end_at.isoformat()}")
    return job, trigger, explicit_start


def _interval_start(entry: SourceEntry, translated: datetime, now: datetime) -> datetime:
    """An interval's first fire: its next run as the source scheduler counts it (from its last
    run), which a start time only holds back (django-celery-beat's ``is_due``); when that is
    past, at once, except for a relative interval, which keeps Celery's rounded times and fires
    at the next of them after now (``translated``)."""
    first = entry.first_fire or translated
    if entry.not_before is not None:
        first = max(first, entry.not_before)
    if first > now:
        return first
    return translated if getattr(entry.schedule, "relative", False) else now


def _once(key: TriggerKey, when: datetime) -> SimpleTrigger:
    return SimpleTrigger(key=key, start_at=when, repeat_count=0, repeat_interval=timedelta(0))


def _copy_for_probe(trigger: Trigger, now: datetime) -> Trigger:
    import copy

    probe = copy.deepcopy(trigger)
    probe.start_at = probe.start_at or now
    return probe


def run_import(
    app: Celery,
    store: ClientStore,
    *,
    source: str,
    group: str,
    entries: list[SourceEntry],
    now: datetime,
    dry_run: bool = False,
) -> ImportReport:
    """Make the store's jobs of ``group`` the importable ``entries``, in one transaction (with
    ``dry_run``, report what would change and write nothing). Running it twice over the same
    entries changes nothing the second time."""
    report = ImportReport(source=source, group=group, dry_run=dry_run)
    defined: dict[str, tuple[Job, Trigger, bool]] = {}
    any_disabled = False
    for entry in entries:
        try:
            defined[entry.name] = build(app, entry, group, now, store.max_data_bytes)
        except QuartzError as exc:
            report.skipped[entry.name] = _reason(entry.name, exc)
            continue
        any_disabled = any_disabled or not entry.enabled
    data = owned_group(f"import:{source}", group, defined)
    with acting_as(f"import:{source}", "import"):
        if (
            not dry_run
            and any_disabled
            and disabled_group(group) not in store.paused_trigger_groups()
        ):
            # Paused before the import's transaction, so its disabled triggers are stored PAUSED
            # in it; pausing a group is idempotent and a group with no trigger changes nothing.
            store.pause_trigger_group(disabled_group(group))
        changes = store.apply_scheduling_data([data], now, dry_run=dry_run).by_job()
    report.added = [k.name for k in changes.added]
    report.updated = [k.name for k in changes.updated]
    report.removed = [k.name for k in changes.removed]
    report.unchanged = [k.name for k in changes.unchanged]
    if not dry_run:
        logger.info("import %s", report.summary())
    return report


def _reason(name: str, error: BaseException) -> str:
    text = " ".join(str(error).split())
    # The schedule translation names the entry itself ("beat entry 'x': ..."); say it once.
    prefix = f"beat entry {name!r}: "
    return text[len(prefix) :] if text.startswith(prefix) else text
