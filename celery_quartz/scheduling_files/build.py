"""A scheduling file's document tree checked and built into definitions.

Each format's reader (:mod:`.xml_format`, :mod:`.json_format`, :mod:`.yaml_format`) produces the
same tree of :class:`~.tree.Node` mappings (:mod:`.tree`), keyed by the JSON spelling of
``job_scheduling_data_2_0`` (``Jobs``, ``Triggers``, ``JobName``, ``Cron``…), each mapping knowing
where it was written and how its file spells its keys. This module checks that tree and builds
:class:`~celery_quartz.definitions.model.SchedulingData` from it (:mod:`.export` turns stored
jobs and triggers back into the same tree). Every error is a :class:`SchedulingFileError`
naming the file, the line (or JSON path) and the job or trigger, and every error of a file is
reported, not only the first.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any

from celery_quartz.affinity import PreferredNode
from celery_quartz.definitions.model import (
    PROTECTED_GROUPS,
    JobDefinition,
    Problems,
    SchedulingData,
    TriggerDefinition,
    Where,
)
from celery_quartz.errors import CronSyntaxError, QuartzError, SchedulingFileError
from celery_quartz.job import DEFAULT_MAX_DATA_BYTES, Job, encode_json_object
from celery_quartz.keys import DEFAULT_GROUP, JobKey, TriggerKey
from celery_quartz.overlap import OverlapPolicy
from celery_quartz.retry import RetryPolicy
from celery_quartz.scheduling_files.tree import (
    COMMAND_KEYS,
    DIRECTIVE_KEYS,
    DOCUMENT_KEYS,
    JOB_KEYS,
    KEY_KEYS,
    KIND_KEYS,
    KINDS,
    RETRY_KEYS,
    TRIGGER_KEYS,
    Node,
    plain,
)
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

# -- reading the tree --------------------------------------------------------------------------


def build(
    root: Node,
    *,
    max_data_bytes: int = DEFAULT_MAX_DATA_BYTES,
    problems: Problems | None = None,
) -> SchedulingData:
    """Check a document's tree and build what it defines.

    Every error is found, not only the first: they are added to ``problems`` when given (the
    caller raises them), else raised together here. A job or trigger at fault is left out.
    """
    found = Problems() if problems is None else problems
    _mapping(root, root.where, "the document")
    data = SchedulingData(source=root.where.file, spelling=root.spelling)
    found.read(_known, root, DOCUMENT_KEYS, "the document")
    commands = root.get("PreProcessingCommands")
    if commands is not None:
        found.read(_commands, commands, root, data, found)
    directives = root.get("ProcessingDirectives")
    if directives is not None:
        found.read(_directives, directives, root, data, found)
    # A job or trigger defined twice is decided by the processing directives, as one already
    # stored is (plan): with overwrite-existing-data the last definition wins.
    for node in found.read(_items, root, "Jobs") or []:
        definition = found.read(build_job, node, max_data_bytes)
        if definition is not None:
            data.jobs.append(definition)
    for node in found.read(_items, root, "Triggers") or []:
        trigger_definition = found.read(build_trigger, node, max_data_bytes)
        if trigger_definition is not None:
            data.triggers.append(trigger_definition)
    if problems is None:
        found.raise_if_any()
    return data


def _commands(commands: Any, root: Node, data: SchedulingData, found: Problems) -> None:
    what = root.name("PreProcessingCommands")
    _mapping(commands, root.at("PreProcessingCommands"), what)
    found.read(_known, commands, COMMAND_KEYS, what)
    for key, groups in (
        ("DeleteJobsInGroup", data.delete_job_groups),
        ("DeleteTriggersInGroup", data.delete_trigger_groups),
    ):
        for name in found.read(_list, commands, key) or []:
            group = found.read(_group_name, name, commands, key)
            if group is not None:
                groups.append(group)
    for item in found.read(_items, commands, "DeleteJob") or []:
        job_key = found.read(_key, item, commands, "DeleteJob", JobKey)
        if job_key is not None:
            data.delete_jobs.append(job_key)
    for item in found.read(_items, commands, "DeleteTrigger") or []:
        trigger_key = found.read(_key, item, commands, "DeleteTrigger", TriggerKey)
        if trigger_key is not None:
            data.delete_triggers.append(trigger_key)


def _directives(directives: Any, root: Node, data: SchedulingData, found: Problems) -> None:
    what = root.name("ProcessingDirectives")
    _mapping(directives, root.at("ProcessingDirectives"), what)
    found.read(_known, directives, DIRECTIVE_KEYS, what)
    overwrite = found.read(_bool, directives, "OverwriteExistingData", what)
    ignore = found.read(_bool, directives, "IgnoreDuplicates", what)
    relative = found.read(_bool, directives, "ScheduleTriggerRelativeToReplacedTrigger", what)
    data.overwrite_existing_data = True if overwrite is None else overwrite
    data.ignore_duplicates = bool(ignore)
    data.schedule_trigger_relative_to_replaced_trigger = bool(relative)


def _identity(node: Node, cls: Callable[[str, str], Any], what: str, found: Problems) -> Any:
    """The key a job or trigger node names (None, with the error kept, when it names none)."""
    name = found.read(_text, node, "Name", what, required=True)
    group = found.read(_text, node, "Group", what) or DEFAULT_GROUP
    return None if name is None else found.read(_make_key, cls, name, group, node)


def build_job(node: Any, max_data_bytes: int = DEFAULT_MAX_DATA_BYTES) -> JobDefinition:
    """A job's definition; raises every error found in it together."""
    where = node.where if isinstance(node, Node) else None
    _mapping(node, where, "a job")
    found = Problems()
    read = found.read
    key = _identity(node, JobKey, "a job", found)
    owner = "a job" if key is None else f"job {key}"
    read(_known, node, JOB_KEYS, owner)
    if key is not None and key.group in PROTECTED_GROUPS:
        found.errors.append(
            node.at("Group").error(f"{owner}: group {key.group!r} is kept by celery-quartz itself")
        )
    task = read(_text, node, "JobType", owner, required=True)
    args = read(_json_list, node, "Args", owner)
    kwargs = read(_json_object, node, "Kwargs", owner)
    options = read(_json_object, node, "Options", owner)
    data = read(_json_object, node, "JobDataMap", owner)
    description = read(_text, node, "Description", owner)
    deadline = read(_duration, node, "RequireSuccessWithin", owner)
    retry_policy = read(_retry_policy, node, owner)
    flags: dict[str, bool] = {
        attribute: bool(read(_bool, node, name, owner))
        for attribute, name in (
            ("durable", "Durable"),
            ("requests_recovery", "Recover"),
            ("disallow_concurrent", "DisallowConcurrentExecution"),
            ("persist_job_data", "PersistJobDataAfterExecution"),
        )
    }
    found.raise_if_any()
    job = Job(
        key=key,
        task=str(task),
        args=tuple(plain(args or [])),
        kwargs=kwargs or {},
        data=data or {},
        options=options or {},
        description=description,
        durable=flags["durable"],
        requests_recovery=flags["requests_recovery"],
        disallow_concurrent=flags["disallow_concurrent"],
        persist_job_data=flags["persist_job_data"],
        require_success_within=deadline,
        retry_policy=retry_policy,
    )
    try:
        job.validate(max_data_bytes)
    except QuartzError as exc:
        raise node.where.error(str(exc)) from None
    return JobDefinition(job, node.where)


def build_trigger(node: Any, max_data_bytes: int = DEFAULT_MAX_DATA_BYTES) -> TriggerDefinition:
    """A trigger's definition; raises every error found in it together."""
    where = node.where if isinstance(node, Node) else None
    _mapping(node, where, "a trigger")
    found = Problems()
    read = found.read
    key = _identity(node, TriggerKey, "a trigger", found)
    owner = "a trigger" if key is None else f"trigger {key}"
    read(_known, node, TRIGGER_KEYS, owner)
    job_name = read(_text, node, "JobName", owner, required=True)
    job_group = read(_text, node, "JobGroup", owner) or DEFAULT_GROUP
    job_key = (
        None if job_name is None else read(_make_key, JobKey, job_name, job_group, node, owner)
    )
    for what, value in (("Group", key.group if key else None), ("JobGroup", job_group)):
        if value in PROTECTED_GROUPS:
            found.errors.append(
                node.at(what).error(f"{owner}: group {value!r} is kept by celery-quartz itself")
            )
    chosen = read(_schedule_of, node, owner)
    zone: tzinfo = UTC
    if chosen is not None and chosen[0] != "Simple":
        zone_name = read(_text, chosen[1], "TimeZone", owner)
        if zone_name:
            zone = read(_zone, chosen[1], zone_name, owner) or UTC
    start = read(_datetime, node, "StartTime", owner, zone)
    in_future = read(_seconds_in_future, node, owner)
    if start is not None and in_future is not None:
        found.errors.append(
            node.at("StartTimeSecondsInFuture").error(
                f"{owner}: give {node.name('StartTime')} or "
                f"{node.name('StartTimeSecondsInFuture')}, not both"
            )
        )
    priority = read(_int, node, "Priority", owner)
    common: dict[str, Any] = {
        "key": key,
        "job_key": job_key,
        "description": read(_text, node, "Description", owner),
        "priority": DEFAULT_PRIORITY if priority is None else priority,
        "end_at": read(_datetime, node, "EndTime", owner, zone),
        "data": read(_bounded_data_map, node, owner, max_data_bytes) or {},
        "calendar_name": read(_text, node, "CalendarName", owner),
        "execution_group": read(_text, node, "ExecutionGroup", owner),
        "retry_policy": read(_retry_policy, node, owner),
        "pause_when_retries_exhausted": read(_bool, node, "PauseWhenRetriesExhausted", owner),
        "preferred_node": read(_preferred_node, node, owner) or PreferredNode.NONE,
        "overlap_policy": read(_overlap_policy, node, owner) or OverlapPolicy.ALLOW,
    }
    made = None if chosen is None else read(_schedule, chosen[0], chosen[1], owner, common)
    found.raise_if_any()
    assert chosen is not None and made is not None
    cls, values = made
    schedule = chosen[1]
    try:
        trigger = cls(**values, **common)
        trigger.validate()
    except CronSyntaxError as exc:
        raise schedule.at("Expression").error(str(exc)) from None
    except QuartzError as exc:
        raise schedule.where.error(str(exc)) from None
    return TriggerDefinition(trigger, node.where, start, in_future or 0)


def _schedule_of(node: Node, owner: str) -> tuple[str, Node]:
    """The trigger's one schedule: its kind and its mapping."""
    kinds = [kind for kind in KINDS if kind in node]
    if len(kinds) != 1:
        raise node.where.error(
            f"{owner}: give exactly one schedule ({', '.join(map(node.name, KINDS))}), "
            f"got {', '.join(map(node.name, kinds)) or 'none'}"
        )
    kind = kinds[0]
    schedule = node[kind]
    _mapping(schedule, node.at(kind), f"{owner}: {node.name(kind)}")
    _known(schedule, KIND_KEYS[kind], f"{owner}: {node.name(kind)}")
    return kind, schedule


def _seconds_in_future(node: Node, owner: str) -> int | None:
    seconds = _int(node, "StartTimeSecondsInFuture", owner, minimum=0)
    if seconds is not None and seconds > _MAX_SECONDS_IN_FUTURE:
        raise node.at("StartTimeSecondsInFuture").error(
            f"{owner}: {node.name('StartTimeSecondsInFuture')} {seconds} is more than "
            f"{_MAX_SECONDS_IN_FUTURE} (about a hundred years)"
        )
    return seconds


def _bounded_data_map(node: Node, owner: str, max_data_bytes: int) -> dict[str, Any]:
    data = _json_object(node, "JobDataMap", owner)
    try:
        encode_json_object(owner, node.name("JobDataMap"), data, max_data_bytes)
    except QuartzError as exc:
        raise node.at("JobDataMap").error(str(exc)) from None
    return data


def _schedule(
    kind: str, schedule: Node, owner: str, common: dict[str, Any]
) -> tuple[type[Trigger], dict[str, Any]]:
    """The class and the schedule's values of a trigger of ``kind`` (the misfire instruction
    is set in ``common``); every error in its schedule is raised together."""
    found = Problems()
    read = found.read
    instruction = read(_text, schedule, "MisfireInstruction", owner)
    names = SIMPLE_MISFIRE_NAMES if kind == "Simple" else SCHEDULE_MISFIRE_NAMES
    if instruction is not None:
        if instruction in names:
            common["misfire_instruction"] = names[instruction]
        else:
            found.errors.append(
                schedule.at("MisfireInstruction").error(
                    f"{owner}: misfire instruction {instruction!r} is not one of a "
                    f"{schedule.name(kind)} trigger's ({', '.join(names)})"
                )
            )
    values: dict[str, Any]
    if kind == "Simple":
        count = read(_int, schedule, "RepeatCount", owner, minimum=-1)
        interval = read(_duration, schedule, "RepeatInterval", owner)
        values = {
            "repeat_count": 0 if count is None else count,
            "repeat_interval": interval or timedelta(0),
        }
    elif kind == "Cron":
        expression = read(_text, schedule, "Expression", owner, required=True)
        values = {
            "expression": str(expression),
            "time_zone": read(_text, schedule, "TimeZone", owner) or "UTC",
        }
    else:
        unit_name = read(_text, schedule, "RepeatIntervalUnit", owner) or "Day"
        unit = UNIT_NAMES.get(unit_name.capitalize())
        if unit is None:
            found.errors.append(
                schedule.at("RepeatIntervalUnit").error(
                    f"{owner}: interval unit {unit_name!r} is not one of {', '.join(UNIT_NAMES)}"
                )
            )
        steps = read(_int, schedule, "RepeatInterval", owner, minimum=1)
        values = {
            "repeat_interval": 1 if steps is None else steps,
            "repeat_interval_unit": unit,
            "time_zone": read(_text, schedule, "TimeZone", owner) or "UTC",
            "preserve_hour_of_day_across_daylight_savings": bool(
                read(_bool, schedule, "PreserveHourOfDayAcrossDaylightSavings", owner)
            ),
            "skip_day_if_hour_does_not_exist": bool(
                read(_bool, schedule, "SkipDayIfHourDoesNotExist", owner)
            ),
        }
    found.raise_if_any()
    classes: dict[str, type[Trigger]] = {"Simple": SimpleTrigger, "Cron": CronTrigger}
    return classes.get(kind, CalendarIntervalTrigger), values


def _retry_policy(node: Node, owner: str) -> RetryPolicy | None:
    policy = node.get("RetryPolicy")
    if policy is None:
        return None
    where = node.at("RetryPolicy")
    what = f"{owner}: {node.name('RetryPolicy')}"
    _mapping(policy, where, what)
    kinds = [kind for kind in RETRY_KEYS if kind in policy]
    if len(policy) != 1 or len(kinds) != 1:
        raise where.error(
            f"{what} takes exactly one of {', '.join(map(node.name, RETRY_KEYS))}, "
            f"got {', '.join(map(node.name, map(str, policy))) or 'none'}"
        )
    kind = kinds[0]
    spec = policy[kind]
    what = f"{what} {node.name(kind)}"
    if kind == "None" and spec is None:  # JSON's null, YAML's empty value
        return RetryPolicy.none()
    _mapping(spec, policy.at(kind), what)
    _known(spec, RETRY_KEYS[kind], what)
    if kind == "None":
        return RetryPolicy.none()
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
            raise spec.at("Delays").error(f"{what} needs {spec.name('Delays')}")
        parsed = [_duration_value(d, spec.at("Delays"), owner, spec.name("Delays")) for d in delays]
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
            f"{owner}: {node.name('PreferredNode')} must be a worker's node name or '*', "
            f"got {_type(value)}"
        )
    try:
        return PreferredNode.parse(value.strip(), owner=owner)
    except QuartzError as exc:
        raise node.at("PreferredNode").error(str(exc)) from None


def _overlap_policy(node: Node, owner: str) -> OverlapPolicy:
    value = _text(node, "OverlapPolicy", owner)
    try:
        return OverlapPolicy.parse(value, owner)
    except QuartzError as exc:
        raise node.at("OverlapPolicy").error(
            str(exc).replace("overlap_policy", node.name("OverlapPolicy"), 1)
        ) from None


# -- scalar readers: each takes a JSON value or the text of an XML element --------------------


def _type(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _mapping(value: Any, where: Where | None, what: str) -> None:
    if not isinstance(value, Node):
        place = where or Where("<unknown>")
        raise place.error(f"{what} must be a mapping, got {_type(value)}")


def _known(node: Node, allowed: Iterable[str], owner: str) -> None:
    """Every key of ``node`` is one of ``allowed`` (each one that is not is an error)."""
    known = ", ".join(map(node.name, allowed))
    found = Problems()
    for key in node:
        if key not in allowed:
            found.errors.append(
                node.at(str(key)).error(f"{owner}: unknown field {key!r} (known: {known})")
            )
    found.raise_if_any()


def _list(node: Node, key: str) -> list[Any]:
    value = node.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise node.at(key).error(f"{node.name(key)} must be a list, got {_type(value)}")
    return value


def _items(node: Node, key: str) -> list[Node]:
    """The mappings listed under ``key``."""
    items = _list(node, key)
    for index, item in enumerate(items):
        if not isinstance(item, Node):
            raise node.at(key).error(
                f"{node.name(key)}[{index}] must be a mapping, got {_type(item)}"
            )
    return items


def _text(node: Node, key: str, owner: str, *, required: bool = False) -> str | None:
    """A string, trimmed; empty counts as absent (Quartz's TrimEmptyToNull)."""
    value = node.get(key)
    if value is not None and not isinstance(value, str):
        raise node.at(key).error(f"{owner}: {node.name(key)} must be a string, got {_type(value)}")
    text = value.strip() if value is not None else None
    if not text:
        if required:
            raise node.at(key).error(f"{owner}: {node.name(key)} is required")
        return None
    return text


def _group_name(value: Any, node: Node, key: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise node.at(key).error(
            f"{node.name(key)}: a group name is a non-empty string, got {value!r}"
        )
    return value.strip()


def _key(value: Any, node: Node, key: str, cls: Callable[[str, str], Any]) -> Any:
    """The job or trigger key a delete command names."""
    what = node.name(key)
    _mapping(value, node.at(key), what)
    _known(value, KEY_KEYS, what)
    name = _text(value, "Name", what, required=True)
    return _make_key(cls, name, _text(value, "Group", what) or DEFAULT_GROUP, value)


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
    raise node.at(key).error(f"{owner}: {node.name(key)} must be true or false, got {value!r}")


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
        raise node.at(key).error(f"{owner}: {node.name(key)} must be a whole number, got {value!r}")
    if minimum is not None and number < minimum:
        raise node.at(key).error(
            f"{owner}: {node.name(key)} must be at least {minimum}, got {number}"
        )
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
        raise node.at(key).error(f"{owner}: {node.name(key)} must be a number, got {value!r}")
    if not math.isfinite(number):
        raise node.at(key).error(f"{owner}: {node.name(key)} must be finite, got {value!r}")
    return number


_TIMESPAN = re.compile(r"(?:(\d{1,6})\.)?(\d{1,2}):(\d{2}):(\d{2})(?:\.(\d{1,7}))?")
#: Longest interval or delay a file may give (a trigger firing every thousand years is a typo).
_MAX_DURATION = timedelta(days=366_000)


def _duration(node: Node, key: str, owner: str, *, required: bool = False) -> timedelta | None:
    value = node.get(key)
    if value is None:
        if required:
            raise node.at(key).error(f"{owner}: {node.name(key)} is required")
        return None
    return _duration_value(value, node.at(key), owner, node.name(key))


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
        raise node.at(key).error(
            f"{owner}: {node.name(key)} must be an ISO 8601 date and time, got {value!r}"
        )
    if when.tzinfo is None or when.utcoffset() is None:
        when = when.replace(tzinfo=zone)
    try:
        when = when.astimezone(UTC)
    except (OverflowError, ValueError):
        when = None
    if when is None or not _FIRST_YEAR <= when.year <= _LAST_YEAR:
        raise node.at(key).error(
            f"{owner}: {node.name(key)} {value!r} is outside the years "
            f"{_FIRST_YEAR} to {_LAST_YEAR}"
        )
    return when


def _json_list(node: Node, key: str, owner: str) -> list[Any]:
    value = node.get(key, [])
    if not isinstance(value, list):
        raise node.at(key).error(f"{owner}: {node.name(key)} must be a list, got {_type(value)}")
    return value


def _json_object(node: Node, key: str, owner: str) -> dict[str, Any]:
    value = node.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise node.at(key).error(f"{owner}: {node.name(key)} must be a mapping, got {_type(value)}")
    return plain(value)
