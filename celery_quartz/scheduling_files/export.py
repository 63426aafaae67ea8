"""The export's document tree: stored jobs and triggers turned back into the tree every format
writes (the inverse of :mod:`.model`'s reading), in the schema's order, defaults of
celery-quartz's own fields left out."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from typing import Any

from celery_quartz.errors import SchedulingFileError
from celery_quartz.job import Job
from celery_quartz.overlap import OverlapPolicy
from celery_quartz.retry import RetryPolicy
from celery_quartz.scheduling_files.build import SCHEDULE_MISFIRE_NAMES, SIMPLE_MISFIRE_NAMES
from celery_quartz.triggers import (
    DEFAULT_PRIORITY,
    CalendarIntervalTrigger,
    CronTrigger,
    SimpleTrigger,
    Trigger,
)

UTC = timezone.utc


def format_time(when: datetime) -> str:
    """An instant as export writes it: UTC, ``Z``, milliseconds only when there are some."""
    when = when.astimezone(UTC)
    text = when.strftime("%Y-%m-%dT%H:%M:%S")
    if when.microsecond:
        text += f".{when.microsecond:06d}".rstrip("0")
    return text + "Z"


def millis(delta: timedelta, owner: str, key: str) -> int:
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    if micros % 1000:
        raise SchedulingFileError(
            f"{owner}: {key} {delta} has microseconds; a scheduling file holds milliseconds"
        )
    return micros // 1000


def job_tree(job: Job) -> dict[str, Any]:
    """A stored job as the document tree writes it (defaults of the extensions left out)."""
    tree: dict[str, Any] = {"Name": job.key.name, "Group": job.key.group}
    if job.description is not None:
        tree["Description"] = job.description
    tree["JobType"] = job.task
    tree["Durable"] = bool(job.durable)
    tree["Recover"] = bool(job.requests_recovery)
    if job.data:
        tree["JobDataMap"] = dict(job.data)
    if job.disallow_concurrent:
        tree["DisallowConcurrentExecution"] = True
    if job.persist_job_data:
        tree["PersistJobDataAfterExecution"] = True
    if job.args:
        tree["Args"] = list(job.args)
    if job.kwargs:
        tree["Kwargs"] = dict(job.kwargs)
    if job.options:
        tree["Options"] = dict(job.options)
    if job.require_success_within is not None:
        owner = f"job {job.key}"
        tree["RequireSuccessWithin"] = millis(job.require_success_within, owner, "deadline")
    if job.retry_policy is not None:
        tree["RetryPolicy"] = retry_tree(job.retry_policy, f"job {job.key}")
    return tree


def trigger_tree(trigger: Trigger) -> dict[str, Any]:
    """A stored trigger as the document tree writes it; kinds a scheduling file cannot hold
    (daily-time-interval, recurrence) are refused, naming the trigger."""
    owner = f"trigger {trigger.key}"
    assert trigger.job_key is not None
    tree: dict[str, Any] = {"Name": trigger.key.name, "Group": trigger.key.group}
    if trigger.description is not None:
        tree["Description"] = trigger.description
    tree["JobName"] = trigger.job_key.name
    tree["JobGroup"] = trigger.job_key.group
    if trigger.priority != DEFAULT_PRIORITY:
        tree["Priority"] = trigger.priority
    if trigger.calendar_name is not None:
        tree["CalendarName"] = trigger.calendar_name
    if trigger.retry_policy is not None:
        tree["RetryPolicy"] = retry_tree(trigger.retry_policy, owner)
    if trigger.preferred_node.is_automatic:
        tree["PreferredNode"] = "*"
    elif trigger.preferred_node.node is not None:
        tree["PreferredNode"] = trigger.preferred_node.node
    if trigger.execution_group is not None:
        tree["ExecutionGroup"] = trigger.execution_group
    policy = OverlapPolicy.parse(trigger.overlap_policy, owner)
    if policy is not OverlapPolicy.ALLOW:
        tree["OverlapPolicy"] = policy.value
    if trigger.pause_when_retries_exhausted is not None:
        tree["PauseWhenRetriesExhausted"] = trigger.pause_when_retries_exhausted
    if trigger.data:
        tree["JobDataMap"] = dict(trigger.data)
    if trigger.start_at is not None:
        tree["StartTime"] = format_time(trigger.start_at)
    if trigger.end_at is not None:
        tree["EndTime"] = format_time(trigger.end_at)
    schedule: dict[str, Any] = {}
    if isinstance(trigger, SimpleTrigger):
        kind, names = "Simple", SIMPLE_MISFIRE_NAMES
    elif isinstance(trigger, CronTrigger):
        kind, names = "Cron", SCHEDULE_MISFIRE_NAMES
    elif isinstance(trigger, CalendarIntervalTrigger):
        kind, names = "CalendarInterval", SCHEDULE_MISFIRE_NAMES
    else:
        raise SchedulingFileError(
            f"{owner}: a {trigger.kind} trigger has no form in a scheduling file "
            "(only simple, cron and calendar-interval triggers do)"
        )
    if trigger.misfire_instruction != 0:
        by_value = {int(v): k for k, v in names.items()}
        schedule["MisfireInstruction"] = by_value[int(trigger.misfire_instruction)]
    if isinstance(trigger, SimpleTrigger):
        schedule["RepeatCount"] = trigger.repeat_count
        schedule["RepeatInterval"] = millis(trigger.repeat_interval, owner, "RepeatInterval")
    elif isinstance(trigger, CronTrigger):
        schedule["Expression"] = trigger.expression
        schedule["TimeZone"] = trigger.time_zone
    elif isinstance(trigger, CalendarIntervalTrigger):
        schedule["RepeatInterval"] = trigger.repeat_interval
        schedule["RepeatIntervalUnit"] = trigger.repeat_interval_unit.value.capitalize()
        schedule["TimeZone"] = trigger.time_zone
        if trigger.preserve_hour_of_day_across_daylight_savings:
            schedule["PreserveHourOfDayAcrossDaylightSavings"] = True
        if trigger.skip_day_if_hour_does_not_exist:
            schedule["SkipDayIfHourDoesNotExist"] = True
    tree[kind] = schedule
    return tree


def retry_tree(policy: RetryPolicy, owner: str) -> dict[str, Any]:
    """A retry policy as the tree writes it, read back from its stored form."""
    kind, _, rest = policy.to_string().partition(":")
    fields = rest.split(":")
    if kind == "f":
        return {"Fixed": {"MaxAttempts": int(fields[0]), "Delay": int(fields[1])}}
    if kind == "e":
        spec: dict[str, Any] = {"MaxAttempts": int(fields[0]), "InitialDelay": int(fields[1])}
        factor = float(fields[2])
        spec["Factor"] = int(factor) if factor.is_integer() else factor
        if len(fields) == 4:
            spec["MaxDelay"] = int(fields[3])
        return {"Exponential": spec}
    if kind == "x":
        return {
            "Explicit": {
                "MaxAttempts": int(fields[0]),
                "Delays": [int(d) for d in fields[1].split(",")],
            }
        }
    if kind == "n":
        return {"None": {}}
    raise SchedulingFileError(f"{owner}: retry policy {policy!r} has no form in a file")


def document_tree(jobs: Iterable[Job], triggers: Iterable[Trigger]) -> dict[str, Any]:
    """The document of an export: jobs then triggers, each sorted by key."""
    return {
        "Jobs": [job_tree(job) for job in sorted(jobs, key=lambda j: (j.key.group, j.key.name))],
        "Triggers": [
            trigger_tree(t) for t in sorted(triggers, key=lambda t: (t.key.group, t.key.name))
        ],
    }
