"""What a scheduling file says, independent of its format, and how it becomes jobs and triggers.

Each format's reader (:mod:`.xml_format`, :mod:`.json_format`, :mod:`.yaml_format`) produces the
same tree of :class:`Node` mappings, keyed by the JSON spelling of ``job_scheduling_data_2_0``
(``Jobs``, ``Triggers``, ``JobName``, ``Cron``…), each mapping knowing where it was written. This
module checks that tree and builds :class:`SchedulingData` from it (:mod:`.export` turns stored
jobs and triggers back into the same tree). Every error is a :class:`SchedulingFileError` naming
the file, the line (or JSON path) and the job or trigger.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any

from celery_quartz.affinity import PreferredNode
from celery_quartz.errors import CronSyntaxError, QuartzError, SchedulingFileError
from celery_quartz.job import DEFAULT_MAX_DATA_BYTES, Job, encode_json_object
from celery_quartz.keys import (
    BEAT_SCHEDULE_GROUP,
    DEFAULT_GROUP,
    RECOVERING_JOBS_GROUP,
    RETRYING_JOBS_GROUP,
    JobKey,
    TriggerKey,
)
from celery_quartz.retry import RetryPolicy
from celery_quartz.triggers import (
    DEFAULT_PRIORITY,
    CalendarIntervalTrigger,
    CronMisfireInstruction,
    CronTrigger,
    IntervalUnit,
    SimpleMisfireInstruction,
    SimpleTrigger,
    Trigger,
)
from celery_quartz.tz import resolve_time_zone

UTC = timezone.utc

#: Groups a scheduling file may not define, and that its delete commands never touch (Quartz's
#: "groups to never delete"): the one-off recovery and retry triggers, and ``beat_schedule``'s
#: own group, which its import keeps.
PROTECTED_GROUPS = frozenset({RECOVERING_JOBS_GROUP, RETRYING_JOBS_GROUP, BEAT_SCHEDULE_GROUP})
#: A delete command's group meaning "every group".
ALL_GROUPS = "*"

#: Quartz's misfire instruction names, per trigger kind.
SIMPLE_MISFIRE_NAMES: dict[str, int] = {
    "SmartPolicy": SimpleMisfireInstruction.SMART_POLICY,
    "IgnoreMisfirePolicy": SimpleMisfireInstruction.IGNORE_MISFIRE_POLICY,
    "FireNow": SimpleMisfireInstruction.FIRE_NOW,
    "RescheduleNowWithExistingRepeatCount": (
        SimpleMisfireInstruction.RESCHEDULE_NOW_WITH_EXISTING_REPEAT_COUNT
    ),
    "RescheduleNowWithRemainingRepeatCount": (
        SimpleMisfireInstruction.RESCHEDULE_NOW_WITH_REMAINING_REPEAT_COUNT
    ),
    "RescheduleNextWithRemainingCount": (
        SimpleMisfireInstruction.RESCHEDULE_NEXT_WITH_REMAINING_COUNT
    ),
    "RescheduleNextWithExistingCount": (
        SimpleMisfireInstruction.RESCHEDULE_NEXT_WITH_EXISTING_COUNT
    ),
}
SCHEDULE_MISFIRE_NAMES: dict[str, int] = {
    "SmartPolicy": CronMisfireInstruction.SMART_POLICY,
    "IgnoreMisfirePolicy": CronMisfireInstruction.IGNORE_MISFIRE_POLICY,
    "FireOnceNow": CronMisfireInstruction.FIRE_ONCE_NOW,
    "DoNothing": CronMisfireInstruction.DO_NOTHING,
}
#: Quartz's interval unit names.
UNIT_NAMES = {unit.value.capitalize(): unit for unit in IntervalUnit}

#: The trigger kinds a scheduling file has, by their key in the tree.
KINDS = ("Simple", "Cron", "CalendarInterval")

DOCUMENT_KEYS = ("PreProcessingCommands", "ProcessingDirectives", "Jobs", "Triggers")
COMMAND_KEYS = ("DeleteJobsInGroup", "DeleteTriggersInGroup", "DeleteJob", "DeleteTrigger")
DIRECTIVE_KEYS = ("OverwriteExistingData", "IgnoreDuplicates")
JOB_KEYS = (
    "Name",
    "Group",
    "Description",
    "JobType",
    "Durable",
    "Recover",
    "JobDataMap",
    # celery-quartz's own: what Quartz's JobDetail has no word for.
    "DisallowConcurrentExecution",
    "PersistJobDataAfterExecution",
    "Args",
    "Kwargs",
    "Options",
)
TRIGGER_KEYS = (
    "Name",
    "Group",
    "Description",
    "JobName",
    "JobGroup",
    "Priority",
    "CalendarName",
    # The 4.x elements, in this order (seed 002: preferred-node after retry-policy, before
    # job-data-map).
    "RetryPolicy",
    "PreferredNode",
    "ExecutionGroup",
    "JobDataMap",
    "StartTime",
    "StartTimeSecondsInFuture",
    "EndTime",
    *KINDS,
)
KIND_KEYS = {
    "Simple": ("MisfireInstruction", "RepeatCount", "RepeatInterval"),
    "Cron": ("MisfireInstruction", "Expression", "TimeZone"),
    "CalendarInterval": (
        "MisfireInstruction",
        "RepeatInterval",
        "RepeatIntervalUnit",
        "TimeZone",
        "PreserveHourOfDayAcrossDaylightSavings",
        "SkipDayIfHourDoesNotExist",
    ),
}
RETRY_KEYS = {
    "Fixed": ("MaxAttempts", "Delay"),
    "Exponential": ("MaxAttempts", "InitialDelay", "Factor", "MaxDelay"),
    "Explicit": ("MaxAttempts", "Delays"),
}
KEY_KEYS = ("Name", "Group")


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


class Node(dict[str, Any]):
    """A mapping of a scheduling file, with where it and each of its keys were written."""

    def __init__(
        self,
        values: Mapping[str, Any] = (),  # type: ignore[assignment]
        where: Where | None = None,
        key_wheres: Mapping[str, Where] | None = None,
    ) -> None:
        super().__init__(values)
        self.where = where or Where("<unknown>")
        self.key_wheres = dict(key_wheres or {})

    def at(self, key: str) -> Where:
        """Where ``key``'s value was written (the mapping's own place when unknown)."""
        return self.key_wheres.get(key, self.where)


def plain(value: Any) -> Any:
    """``value`` with every :class:`Node` turned into a plain dict (for job data)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


# -- the model --------------------------------------------------------------------------------


@dataclass
class JobDefinition:
    job: Job
    where: Where


@dataclass
class TriggerDefinition:
    """A trigger as the file defines it. ``start_at`` is given explicitly (``StartTime``), or
    relative to the load (``StartTimeSecondsInFuture``, or now when neither is given)."""

    trigger: Trigger
    where: Where
    start_at: datetime | None = None
    start_in_seconds: int = 0

    @property
    def explicit_start(self) -> bool:
        return self.start_at is not None

    def build(self, now: datetime) -> Trigger:
        """A fresh trigger with its start time resolved against ``now``."""
        trigger = copy.copy(self.trigger)
        trigger.data = dict(trigger.data)
        trigger.start_at = (
            self.start_at
            if self.start_at is not None
            else now + timedelta(seconds=self.start_in_seconds)
        )
        return trigger


@dataclass
class SchedulingData:
    """One scheduling file, read and checked (not yet against a Celery app or a store)."""

    source: str
    delete_job_groups: list[str] = field(default_factory=list)
    delete_trigger_groups: list[str] = field(default_factory=list)
    delete_jobs: list[JobKey] = field(default_factory=list)
    delete_triggers: list[TriggerKey] = field(default_factory=list)
    #: Replace stored jobs and triggers of the same keys (Quartz's default, true).
    overwrite_existing_data: bool = True
    #: With ``overwrite_existing_data`` false: leave stored ones alone instead of failing.
    ignore_duplicates: bool = False
    jobs: list[JobDefinition] = field(default_factory=list)
    triggers: list[TriggerDefinition] = field(default_factory=list)


# -- reading the tree --------------------------------------------------------------------------


def build(root: Node, *, max_data_bytes: int = DEFAULT_MAX_DATA_BYTES) -> SchedulingData:
    """Check a document's tree and build what it defines."""
    _mapping(root, root.where, "the document")
    _known(root, DOCUMENT_KEYS, "the document")
    data = SchedulingData(source=root.where.file)
    commands = root.get("PreProcessingCommands")
    if commands is not None:
        where = root.at("PreProcessingCommands")
        _mapping(commands, where, "PreProcessingCommands")
        _known(commands, COMMAND_KEYS, "PreProcessingCommands")
        for name in _list(commands, "DeleteJobsInGroup"):
            data.delete_job_groups.append(_group_name(name, commands, "DeleteJobsInGroup"))
        for name in _list(commands, "DeleteTriggersInGroup"):
            data.delete_trigger_groups.append(_group_name(name, commands, "DeleteTriggersInGroup"))
        for item in _items(commands, "DeleteJob"):
            name, group = _key(item, commands.at("DeleteJob"), "DeleteJob")
            data.delete_jobs.append(_make_key(JobKey, name, group, item))
        for item in _items(commands, "DeleteTrigger"):
            name, group = _key(item, commands.at("DeleteTrigger"), "DeleteTrigger")
            data.delete_triggers.append(_make_key(TriggerKey, name, group, item))
    directives = root.get("ProcessingDirectives")
    if directives is not None:
        where = root.at("ProcessingDirectives")
        _mapping(directives, where, "ProcessingDirectives")
        _known(directives, DIRECTIVE_KEYS, "ProcessingDirectives")
        overwrite = _bool(directives, "OverwriteExistingData", "ProcessingDirectives")
        ignore = _bool(directives, "IgnoreDuplicates", "ProcessingDirectives")
        data.overwrite_existing_data = True if overwrite is None else overwrite
        data.ignore_duplicates = bool(ignore)
    seen_jobs: dict[JobKey, Where] = {}
    for node in _items(root, "Jobs"):
        definition = build_job(node, max_data_bytes)
        key = definition.job.key
        if key in seen_jobs:
            raise definition.where.error(
                f"job {key} is defined twice in this file (first at line or path "
                f"{_short(seen_jobs[key])})"
            )
        seen_jobs[key] = definition.where
        data.jobs.append(definition)
    seen_triggers: dict[TriggerKey, Where] = {}
    for node in _items(root, "Triggers"):
        trigger_definition = build_trigger(node, max_data_bytes)
        tkey = trigger_definition.trigger.key
        if tkey in seen_triggers:
            raise trigger_definition.where.error(
                f"trigger {tkey} is defined twice in this file (first at line or path "
                f"{_short(seen_triggers[tkey])})"
            )
        seen_triggers[tkey] = trigger_definition.where
        data.triggers.append(trigger_definition)
    return data


def _short(where: Where) -> str:
    return str(where.line) if where.line is not None else str(where.path)


def build_job(node: Any, max_data_bytes: int = DEFAULT_MAX_DATA_BYTES) -> JobDefinition:
    where = node.where if isinstance(node, Node) else None
    _mapping(node, where, "a job")
    name = _text(node, "Name", "a job", required=True)
    group = _text(node, "Group", "a job") or DEFAULT_GROUP
    key = _make_key(JobKey, name, group, node)
    owner = f"job {key}"
    _known(node, JOB_KEYS, owner)
    if group in PROTECTED_GROUPS:
        raise node.at("Group").error(f"{owner}: group {group!r} is kept by celery-quartz itself")
    task = _text(node, "JobType", owner, required=True)
    args = node.get("Args", [])
    if not isinstance(args, list):
        raise node.at("Args").error(f"{owner}: Args must be a list, got {_type(args)}")
    kwargs = _json_object(node, "Kwargs", owner)
    options = _json_object(node, "Options", owner)
    data = _data_map(node, "JobDataMap", owner)
    job = Job(
        key=key,
        task=str(task),
        args=tuple(plain(args)),
        kwargs=kwargs,
        data=data,
        options=options,
        description=_text(node, "Description", owner),
        durable=bool(_bool(node, "Durable", owner)),
        requests_recovery=bool(_bool(node, "Recover", owner)),
        disallow_concurrent=bool(_bool(node, "DisallowConcurrentExecution", owner)),
        persist_job_data=bool(_bool(node, "PersistJobDataAfterExecution", owner)),
    )
    try:
        job.validate(max_data_bytes)
    except QuartzError as exc:
        raise node.where.error(str(exc)) from None
    return JobDefinition(job, node.where)


def build_trigger(node: Any, max_data_bytes: int = DEFAULT_MAX_DATA_BYTES) -> TriggerDefinition:
    where = node.where if isinstance(node, Node) else None
    _mapping(node, where, "a trigger")
    name = _text(node, "Name", "a trigger", required=True)
    group = _text(node, "Group", "a trigger") or DEFAULT_GROUP
    key = _make_key(TriggerKey, name, group, node)
    owner = f"trigger {key}"
    _known(node, TRIGGER_KEYS, owner)
    job_name = _text(node, "JobName", owner, required=True)
    job_group = _text(node, "JobGroup", owner) or DEFAULT_GROUP
    job_key = _make_key(JobKey, job_name, job_group, node, owner=owner)
    for what, value in (("Group", group), ("JobGroup", job_group)):
        if value in PROTECTED_GROUPS:
            raise node.at(what).error(f"{owner}: group {value!r} is kept by celery-quartz itself")
    kinds = [kind for kind in KINDS if kind in node]
    if len(kinds) != 1:
        raise node.where.error(
            f"{owner}: give exactly one schedule ({', '.join(KINDS)}), "
            f"got {', '.join(kinds) or 'none'}"
        )
    kind = kinds[0]
    schedule = node[kind]
    _mapping(schedule, node.at(kind), f"{owner}: {kind}")
    _known(schedule, KIND_KEYS[kind], f"{owner}: {kind}")
    zone_name = _text(schedule, "TimeZone", owner) if kind != "Simple" else None
    zone = _zone(schedule, zone_name, owner) if zone_name else UTC
    start = _datetime(node, "StartTime", owner, zone)
    in_future = _int(node, "StartTimeSecondsInFuture", owner, minimum=0)
    if in_future is not None and in_future > _MAX_SECONDS_IN_FUTURE:
        raise node.at("StartTimeSecondsInFuture").error(
            f"{owner}: StartTimeSecondsInFuture {in_future} is more than "
            f"{_MAX_SECONDS_IN_FUTURE} (about a hundred years)"
        )
    if start is not None and in_future is not None:
        raise node.at("StartTimeSecondsInFuture").error(
            f"{owner}: give StartTime or StartTimeSecondsInFuture, not both"
        )
    priority = _int(node, "Priority", owner)
    common: dict[str, Any] = {
        "key": key,
        "job_key": job_key,
        "description": _text(node, "Description", owner),
        "priority": DEFAULT_PRIORITY if priority is None else priority,
        "end_at": _datetime(node, "EndTime", owner, zone),
        "data": _data_map(node, "JobDataMap", owner),
        "calendar_name": _text(node, "CalendarName", owner),
        "execution_group": _text(node, "ExecutionGroup", owner),
        "retry_policy": _retry_policy(node, owner),
        "preferred_node": _preferred_node(node, owner),
    }
    try:
        encode_json_object(owner, "JobDataMap", common["data"], max_data_bytes)
        trigger = _schedule(kind, schedule, owner, common)
        trigger.validate()
    except SchedulingFileError:
        raise
    except CronSyntaxError as exc:
        raise schedule.at("Expression").error(str(exc)) from None
    except QuartzError as exc:
        raise schedule.where.error(str(exc)) from None
    return TriggerDefinition(trigger, node.where, start, in_future or 0)


def _schedule(kind: str, schedule: Node, owner: str, common: dict[str, Any]) -> Trigger:
    instruction = _text(schedule, "MisfireInstruction", owner)
    names = SIMPLE_MISFIRE_NAMES if kind == "Simple" else SCHEDULE_MISFIRE_NAMES
    if instruction is not None:
        if instruction not in names:
            raise schedule.at("MisfireInstruction").error(
                f"{owner}: misfire instruction {instruction!r} is not one of a {kind} "
                f"trigger's ({', '.join(names)})"
            )
        common["misfire_instruction"] = names[instruction]
    if kind == "Simple":
        count = _int(schedule, "RepeatCount", owner, minimum=-1)
        interval = _duration(schedule, "RepeatInterval", owner)
        return SimpleTrigger(
            repeat_count=0 if count is None else count,
            repeat_interval=interval or timedelta(0),
            **common,
        )
    if kind == "Cron":
        expression = _text(schedule, "Expression", owner, required=True)
        zone = _text(schedule, "TimeZone", owner) or "UTC"
        return CronTrigger(expression=str(expression), time_zone=zone, **common)
    unit_name = _text(schedule, "RepeatIntervalUnit", owner) or "Day"
    unit = UNIT_NAMES.get(unit_name.capitalize())
    if unit is None:
        raise schedule.at("RepeatIntervalUnit").error(
            f"{owner}: interval unit {unit_name!r} is not one of {', '.join(UNIT_NAMES)}"
        )
    steps = _int(schedule, "RepeatInterval", owner, minimum=1)
    return CalendarIntervalTrigger(
        repeat_interval=1 if steps is None else steps,
        repeat_interval_unit=unit,
        time_zone=_text(schedule, "TimeZone", owner) or "UTC",
        preserve_hour_of_day_across_daylight_savings=bool(
            _bool(schedule, "PreserveHourOfDayAcrossDaylightSavings", owner)
        ),
        skip_day_if_hour_does_not_exist=bool(_bool(schedule, "SkipDayIfHourDoesNotExist", owner)),
        **common,
    )


def _retry_policy(node: Node, owner: str) -> RetryPolicy:
    policy = node.get("RetryPolicy")
    if policy is None:
        return RetryPolicy.NONE
    where = node.at("RetryPolicy")
    _mapping(policy, where, f"{owner}: RetryPolicy")
    kinds = [kind for kind in RETRY_KEYS if kind in policy]
    if len(policy) != 1 or len(kinds) != 1:
        raise where.error(
            f"{owner}: RetryPolicy takes exactly one of {', '.join(RETRY_KEYS)}, "
            f"got {', '.join(map(str, policy)) or 'none'}"
        )
    kind = kinds[0]
    spec = policy[kind]
    _mapping(spec, policy.at(kind), f"{owner}: RetryPolicy {kind}")
    _known(spec, RETRY_KEYS[kind], f"{owner}: RetryPolicy {kind}")
    attempts = _int(spec, "MaxAttempts", owner, minimum=1)
    try:
        if kind == "Fixed":
            delay = _duration(spec, "Delay", owner, required=True)
            return RetryPolicy.fixed(attempts or 1, delay)  # type: ignore[arg-type]
        if kind == "Exponential":
            initial = _duration(spec, "InitialDelay", owner, required=True)
            factor = _number(spec, "Factor", owner)
            cap = _duration(spec, "MaxDelay", owner)
            return RetryPolicy.exponential(
                attempts or 1,
                initial,  # type: ignore[arg-type]
                2 if factor is None else factor,
                cap,
            )
        delays = spec.get("Delays")
        if not isinstance(delays, list) or not delays:
            raise spec.at("Delays").error(f"{owner}: RetryPolicy Explicit needs Delays")
        parsed = [_duration_value(d, spec.at("Delays"), owner, "Delays") for d in delays]
        return RetryPolicy.explicit(*parsed, max_attempts=attempts)
    except SchedulingFileError:
        raise
    except QuartzError as exc:
        raise spec.where.error(f"{owner}: {exc}") from None


def _preferred_node(node: Node, owner: str) -> PreferredNode:
    value = node.get("PreferredNode")
    if value is None:
        return PreferredNode.NONE
    if not isinstance(value, str):
        raise node.at("PreferredNode").error(
            f"{owner}: PreferredNode must be a worker's node name or '*', got {_type(value)}"
        )
    try:
        return PreferredNode.parse(value.strip(), owner=owner)
    except QuartzError as exc:
        raise node.at("PreferredNode").error(str(exc)) from None


# -- scalar readers: each takes a JSON value or the text of an XML element --------------------


def _type(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _mapping(value: Any, where: Where | None, what: str) -> None:
    if not isinstance(value, Node):
        place = where or Where("<unknown>")
        raise place.error(f"{what} must be a mapping, got {_type(value)}")


def _known(node: Node, allowed: Iterable[str], owner: str) -> None:
    unknown = [key for key in node if key not in allowed]
    if unknown:
        raise node.at(str(unknown[0])).error(
            f"{owner}: unknown field {unknown[0]!r} (known: {', '.join(allowed)})"
        )


def _list(node: Node, key: str) -> list[Any]:
    value = node.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise node.at(key).error(f"{key} must be a list, got {_type(value)}")
    return value


def _items(node: Node, key: str) -> list[Node]:
    """The mappings listed under ``key``."""
    items = _list(node, key)
    for index, item in enumerate(items):
        if not isinstance(item, Node):
            raise node.at(key).error(f"{key}[{index}] must be a mapping, got {_type(item)}")
    return items


def _text(node: Node, key: str, owner: str, *, required: bool = False) -> str | None:
    """A string, trimmed; empty counts as absent (Quartz's TrimEmptyToNull)."""
    value = node.get(key)
    if value is not None and not isinstance(value, str):
        raise node.at(key).error(f"{owner}: {key} must be a string, got {_type(value)}")
    text = value.strip() if value is not None else None
    if not text:
        if required:
            raise node.at(key).error(f"{owner}: {key} is required")
        return None
    return text


def _group_name(value: Any, node: Node, key: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise node.at(key).error(f"{key}: a group name is a non-empty string, got {value!r}")
    return value.strip()


def _key(value: Any, where: Where, what: str) -> tuple[str, str]:
    _mapping(value, where, what)
    _known(value, KEY_KEYS, what)
    name = _text(value, "Name", what, required=True)
    return str(name), _text(value, "Group", what) or DEFAULT_GROUP


def _make_key(
    cls: Callable[[str, str], Any], name: Any, group: str, node: Node, owner: str = ""
) -> Any:
    try:
        return cls(name, group)
    except QuartzError as exc:
        raise node.where.error(f"{owner}: {exc}" if owner else str(exc)) from None


_TRUE = {"true": True, "1": True, "false": False, "0": False}


def _bool(node: Node, key: str, owner: str) -> bool | None:
    value = node.get(key)
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE:
        return _TRUE[value.strip().lower()]
    raise node.at(key).error(f"{owner}: {key} must be true or false, got {value!r}")


def _int(node: Node, key: str, owner: str, *, minimum: int | None = None) -> int | None:
    value = node.get(key)
    if value is None:
        return None
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and re.fullmatch(r"\s*[-+]?\d{1,18}\s*", value):
        number = int(value)
    if number is None or abs(number) >= 2**63:
        raise node.at(key).error(f"{owner}: {key} must be a whole number, got {value!r}")
    if minimum is not None and number < minimum:
        raise node.at(key).error(f"{owner}: {key} must be at least {minimum}, got {number}")
    return number


def _number(node: Node, key: str, owner: str) -> float | None:
    value = node.get(key)
    if value is None:
        return None
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    if numeric or (
        isinstance(value, str) and re.fullmatch(r"\s*[-+]?\d{1,18}(\.\d{1,18})?\s*", value)
    ):
        number = float(value)
    else:
        raise node.at(key).error(f"{owner}: {key} must be a number, got {value!r}")
    if not math.isfinite(number):
        raise node.at(key).error(f"{owner}: {key} must be finite, got {value!r}")
    return number


_TIMESPAN = re.compile(r"(?:(\d{1,6})\.)?(\d{1,2}):(\d{2}):(\d{2})(?:\.(\d{1,7}))?")
#: Longest interval or delay a file may give (a trigger firing every thousand years is a typo).
_MAX_DURATION = timedelta(days=366_000)


def _duration(node: Node, key: str, owner: str, *, required: bool = False) -> timedelta | None:
    value = node.get(key)
    if value is None:
        if required:
            raise node.at(key).error(f"{owner}: {key} is required")
        return None
    return _duration_value(value, node.at(key), owner, key)


def _duration_value(value: Any, where: Where, owner: str, key: str) -> timedelta:
    """Milliseconds (a whole number, as Quartz's XML writes repeat-interval), or a .NET
    TimeSpan string ``[d.]hh:mm:ss[.fffffff]``."""
    result: timedelta | None = None
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**53:
        result = timedelta(milliseconds=value)
    elif isinstance(value, str):
        text = value.strip()
        if re.fullmatch(r"\d{1,16}", text):
            result = timedelta(milliseconds=int(text))
        else:
            match = _TIMESPAN.fullmatch(text)
            if match:
                days, hours, minutes, seconds, fraction = match.groups()
                if int(minutes) < 60 and int(seconds) < 60:
                    result = timedelta(
                        days=int(days or 0),
                        hours=int(hours),
                        minutes=int(minutes),
                        seconds=int(seconds),
                        microseconds=int((fraction or "0").ljust(7, "0")) // 10,
                    )
    if result is None or result > _MAX_DURATION:
        raise where.error(
            f"{owner}: {key} must be milliseconds or a [d.]hh:mm:ss time span, got {value!r}"
        )
    return result


def _zone(node: Node, name: str, owner: str) -> tzinfo:
    try:
        return resolve_time_zone(name)
    except (ValueError, QuartzError) as exc:
        raise node.at("TimeZone").error(f"{owner}: {exc}") from None


#: The years a file's start and end times may fall in (the cron dialect's last year is 2299).
_FIRST_YEAR, _LAST_YEAR = 1970, 2299
#: Longest StartTimeSecondsInFuture: about a hundred years.
_MAX_SECONDS_IN_FUTURE = 100 * 366 * 86_400


def _datetime(node: Node, key: str, owner: str, zone: tzinfo) -> datetime | None:
    """An ISO 8601 date and time; without an offset it is read in the trigger's time zone (UTC
    for a simple trigger)."""
    value = node.get(key)
    if value is None:
        return None
    when: datetime | None = None
    if isinstance(value, datetime):
        when = value
    elif isinstance(value, str):
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        try:
            when = datetime.fromisoformat(text) if "T" in text or " " in text else None
        except ValueError:
            when = None
    if when is None:
        raise node.at(key).error(f"{owner}: {key} must be an ISO 8601 date and time, got {value!r}")
    if when.tzinfo is None or when.utcoffset() is None:
        when = when.replace(tzinfo=zone)
    try:
        when = when.astimezone(UTC)
    except (OverflowError, ValueError):
        when = None
    if when is None or not _FIRST_YEAR <= when.year <= _LAST_YEAR:
        raise node.at(key).error(
            f"{owner}: {key} {value!r} is outside the years {_FIRST_YEAR} to {_LAST_YEAR}"
        )
    return when


def _data_map(node: Node, key: str, owner: str) -> dict[str, Any]:
    value = node.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise node.at(key).error(f"{owner}: {key} must be a mapping, got {_type(value)}")
    return plain(value)


def _json_object(node: Node, key: str, owner: str) -> dict[str, Any]:
    value = node.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise node.at(key).error(f"{owner}: {key} must be a mapping, got {_type(value)}")
    return plain(value)
