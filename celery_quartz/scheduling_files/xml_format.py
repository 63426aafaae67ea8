"""``quartz_jobs.xml``: Quartz's ``job_scheduling_data_2_0`` XML, read safely and written back.

Read with the standard library's expat parser and no DTD at all: a document type declaration
(and so any entity, internal or external) is refused, so neither entity expansion nor external
resolution can happen. Elements keep their line, so errors name it, and the element as the file
spells it. Element order follows the schema's sequences; an element out of order, repeated or
unknown is an error naming its line. Every job, trigger and section at fault is reported, not
only the first.

Written, the document holds only what Quartz.NET's ``job_scheduling_data_2_0.xsd`` allows, so
Quartz.NET reads the export; what the schema has no element for is refused, naming it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from xml.parsers import expat

from celery_quartz.definitions.model import Problems, Where
from celery_quartz.errors import SchedulingFileError, ValidationError
from celery_quartz.scheduling_files.tree import Node

#: The namespaces of ``job_scheduling_data_2_0``: Quartz.NET's (written on export) and Quartz's.
NAMESPACE = "http://quartznet.sourceforge.net/JobSchedulingData"
JAVA_NAMESPACE = "http://www.quartz-scheduler.org/xml/JobSchedulingData"
_NAMESPACES = {"", NAMESPACE, JAVA_NAMESPACE}
_SEP = "\x1f"  # expat's namespace separator: a character no URI or name contains

#: A field of a sequence: (element, key in the tree, how its value is read).
#: Kinds: "text", "texts" (repeated, a list), "data" (job-data-map), "json" (JSON text),
#: "keys" (repeated delete-job/delete-trigger), "retry" (retry-policy).
_Field = tuple[str, str, str]

_JOB: Sequence[_Field] = (
    ("name", "Name", "text"),
    ("group", "Group", "text"),
    ("description", "Description", "text"),
    ("job-type", "JobType", "text"),
    ("durable", "Durable", "text"),
    ("recover", "Recover", "text"),
    ("job-data-map", "JobDataMap", "data"),
    ("disallow-concurrent-execution", "DisallowConcurrentExecution", "text"),
    ("persist-job-data-after-execution", "PersistJobDataAfterExecution", "text"),
    ("args", "Args", "json"),
    ("kwargs", "Kwargs", "json"),
    ("options", "Options", "json"),
    ("require-success-within", "RequireSuccessWithin", "text"),
    ("retry-policy", "RetryPolicy", "retry"),
)
_TRIGGER_COMMON: Sequence[_Field] = (
    ("name", "Name", "text"),
    ("group", "Group", "text"),
    ("description", "Description", "text"),
    ("job-name", "JobName", "text"),
    ("job-group", "JobGroup", "text"),
    ("priority", "Priority", "text"),
    ("calendar-name", "CalendarName", "text"),
    ("retry-policy", "RetryPolicy", "retry"),
    ("preferred-node", "PreferredNode", "text"),
    ("execution-group", "ExecutionGroup", "text"),
    ("overlap-policy", "OverlapPolicy", "text"),
    ("pause-when-retries-exhausted", "PauseWhenRetriesExhausted", "text"),
    ("job-data-map", "JobDataMap", "data"),
    ("start-time", "StartTime", "text"),
    ("start-time-seconds-in-future", "StartTimeSecondsInFuture", "text"),
    ("end-time", "EndTime", "text"),
)
_KINDS: dict[str, tuple[str, Sequence[_Field]]] = {
    "simple": (
        "Simple",
        (
            ("misfire-instruction", "MisfireInstruction", "text"),
            ("repeat-count", "RepeatCount", "text"),
            ("repeat-interval", "RepeatInterval", "text"),
        ),
    ),
    "cron": (
        "Cron",
        (
            ("misfire-instruction", "MisfireInstruction", "text"),
            ("cron-expression", "Expression", "text"),
            ("time-zone", "TimeZone", "text"),
        ),
    ),
    "calendar-interval": (
        "CalendarInterval",
        (
            ("misfire-instruction", "MisfireInstruction", "text"),
            ("repeat-interval", "RepeatInterval", "text"),
            ("repeat-interval-unit", "RepeatIntervalUnit", "text"),
            ("time-zone", "TimeZone", "text"),
            (
                "preserve-hour-of-day-across-daylight-savings",
                "PreserveHourOfDayAcrossDaylightSavings",
                "text",
            ),
            ("skip-day-if-hour-does-not-exist", "SkipDayIfHourDoesNotExist", "text"),
        ),
    ),
}
_RETRY: dict[str, tuple[str, Sequence[_Field]]] = {
    "fixed": ("Fixed", (("max-attempts", "MaxAttempts", "text"), ("delay", "Delay", "text"))),
    "exponential": (
        "Exponential",
        (
            ("max-attempts", "MaxAttempts", "text"),
            ("initial-delay", "InitialDelay", "text"),
            ("factor", "Factor", "text"),
            ("max-delay", "MaxDelay", "text"),
        ),
    ),
    "explicit": (
        "Explicit",
        (("max-attempts", "MaxAttempts", "text"), ("delay", "Delays", "texts")),
    ),
    "none": ("None", ()),
}
_COMMANDS: Sequence[_Field] = (
    ("delete-jobs-in-group", "DeleteJobsInGroup", "texts"),
    ("delete-triggers-in-group", "DeleteTriggersInGroup", "texts"),
    ("delete-job", "DeleteJob", "keys"),
    ("delete-trigger", "DeleteTrigger", "keys"),
)
_DIRECTIVES: Sequence[_Field] = (
    ("overwrite-existing-data", "OverwriteExistingData", "text"),
    ("ignore-duplicates", "IgnoreDuplicates", "text"),
    (
        "schedule-trigger-relative-to-replaced-trigger",
        "ScheduleTriggerRelativeToReplacedTrigger",
        "text",
    ),
)
_KEY: Sequence[_Field] = (("name", "Name", "text"), ("group", "Group", "text"))
_ENTRY: Sequence[_Field] = (("key", "key", "text"), ("value", "value", "text"))

#: Each key of the document tree as the XML spells it (the model names elements by it).
SPELLING: dict[str, str] = {
    "PreProcessingCommands": "pre-processing-commands",
    "ProcessingDirectives": "processing-directives",
    "Jobs": "job",
    "Triggers": "trigger",
    **{key: name for name, (key, _) in {**_KINDS, **_RETRY}.items()},
    **{
        key: name
        for spec in (_JOB, _TRIGGER_COMMON, _COMMANDS, _DIRECTIVES, _KEY)
        for name, key, _ in spec
    },
    **{key: name for _, fields in {**_KINDS, **_RETRY}.values() for name, key, _ in fields},
}

#: What ``job_scheduling_data_2_0.xsd`` has no element for: celery-quartz's own elements, which
#: the reader takes but the export never writes.
_OWN_ELEMENTS = frozenset(
    {
        "disallow-concurrent-execution",
        "persist-job-data-after-execution",
        "args",
        "kwargs",
        "options",
        "require-success-within",
        "retry-policy",
        "preferred-node",
        "execution-group",
        "overlap-policy",
        "pause-when-retries-exhausted",
        "preserve-hour-of-day-across-daylight-savings",
        "skip-day-if-hour-does-not-exist",
    }
)


_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


@dataclass
class _Element:
    name: str
    line: int
    children: list[_Element] = field(default_factory=list)
    text: list[str] = field(default_factory=list)


def read_xml(content: str | bytes, file: str, problems: Problems | None = None) -> Node:
    """The document tree of a ``job_scheduling_data_2_0`` file.

    A job, trigger or section at fault is left out of the tree and its error added to
    ``problems`` (raised here, all together, when none is given); a document that does not
    parse raises at once.
    """
    found = Problems() if problems is None else problems
    root = _parse(content, file)
    if root.name != "job-scheduling-data":
        raise Where(file, root.line).error(
            f"the root element is <{root.name}>, expected <job-scheduling-data>"
        )
    _no_text(root, file)
    tree = _node(Where(file, root.line))
    jobs: list[Node] = []
    triggers: list[Node] = []
    directives_at: Where | None = None
    for child in root.children:
        where = Where(file, child.line)
        if child.name == "pre-processing-commands":
            # The schema repeats the document's sequence, and Quartz.NET applies every
            # <pre-processing-commands>: their commands are read as one list of each kind.
            commands = found.read(_sequence, child, _COMMANDS, file, ordered=False)
            if commands is not None:
                _merge_commands(tree, commands, where)
        elif child.name == "processing-directives":
            if directives_at is not None:
                found.errors.append(
                    where.error(
                        f"<{child.name}> is given twice (first at line {directives_at.line})"
                    )
                )
                continue
            directives_at = where
            directives = found.read(_sequence, child, _DIRECTIVES, file)
            if directives is not None:
                tree["ProcessingDirectives"] = directives
                tree.key_wheres["ProcessingDirectives"] = where
        elif child.name == "schedule":
            found.read(_no_text, child, file)
            for item in child.children:
                if item.name == "job":
                    job = found.read(_sequence, item, _JOB, file, _owner(item, "job"))
                    if job is not None:
                        jobs.append(job)
                elif item.name == "trigger":
                    trigger = found.read(_trigger, item, file)
                    if trigger is not None:
                        triggers.append(trigger)
                else:
                    found.errors.append(
                        Where(file, item.line).error(
                            f"unknown element <{item.name}> in <schedule> (known: job, trigger)"
                        )
                    )
        else:
            found.errors.append(
                where.error(
                    f"unknown element <{child.name}> in <job-scheduling-data> (known: "
                    "pre-processing-commands, processing-directives, schedule)"
                )
            )
    if jobs:
        tree["Jobs"] = jobs
    if triggers:
        tree["Triggers"] = triggers
    if problems is None:
        found.raise_if_any()
    return tree


def _node(
    where: Where, values: dict[str, Any] | None = None, key_wheres: dict[str, Where] | None = None
) -> Node:
    """A mapping of the tree that names its keys as the XML spells them."""
    return Node(values or {}, where, key_wheres, spelling=SPELLING)


def _merge_commands(tree: Node, commands: Node, where: Where) -> None:
    merged = tree.get("PreProcessingCommands")
    if merged is None:
        tree["PreProcessingCommands"] = commands
        tree.key_wheres["PreProcessingCommands"] = where
        return
    for key, items in commands.items():
        merged.setdefault(key, []).extend(items)
        merged.key_wheres.setdefault(key, commands.at(key))


def _trigger(element: _Element, file: str) -> Node:
    _no_text(element, file)
    if len(element.children) != 1 or element.children[0].name not in _KINDS:
        raise Where(file, element.line).error(
            "a <trigger> holds exactly one of <simple>, <cron>, <calendar-interval>"
        )
    inner = element.children[0]
    kind, kind_fields = _KINDS[inner.name]
    both = _sequence(inner, (*_TRIGGER_COMMON, *kind_fields), file, _owner(inner, "trigger"))
    common_keys = {key for _, key, _ in _TRIGGER_COMMON}
    tree = _node(both.where)
    schedule = _node(both.where)
    for key, value in both.items():
        target = tree if key in common_keys else schedule
        target[key] = value
        target.key_wheres[key] = both.at(key)
    tree[kind] = schedule
    tree.key_wheres[kind] = both.where
    return tree


def _owner(element: _Element, what: str) -> str:
    """``job group.name`` or ``trigger group.name`` from the element's own children, for errors
    found before the model names it."""
    texts = {
        child.name: "".join(child.text).strip()
        for child in element.children
        if child.name in ("name", "group") and not child.children
    }
    name = texts.get("name") or "(no name)"
    return f"{what} {texts.get('group') or 'DEFAULT'}.{name}: "


def _sequence(
    element: _Element, spec: Sequence[_Field], file: str, owner: str = "", *, ordered: bool = True
) -> Node:
    """The children of ``element`` read by ``spec``, in the schema's order (any order when not
    ``ordered``); ``owner`` prefixes the errors (the job or trigger being read)."""
    try:
        return _read_sequence(element, spec, file, owner, ordered)
    except SchedulingFileError as error:
        if not owner or owner in str(error):
            raise
        where = Where(error.file, error.line)
        raise where.error(owner + str(error).split(": ", 1)[-1]) from None


def _read_sequence(
    element: _Element, spec: Sequence[_Field], file: str, owner: str, ordered: bool
) -> Node:
    _no_text(element, file)
    node = _node(Where(file, element.line))
    positions = {name: i for i, (name, _, _) in enumerate(spec)}
    last = -1
    for child in element.children:
        where = Where(file, child.line)
        if child.name not in positions:
            known = ", ".join(name for name, _, _ in spec)
            raise where.error(
                f"unknown element <{child.name}> in <{element.name}> (known: {known})"
            )
        position = positions[child.name]
        _, key, kind = spec[position]
        repeats = kind in ("texts", "keys")
        if ordered and (position < last or (position == last and not repeats)):
            raise where.error(
                f"<{child.name}> is out of place in <{element.name}>: the order is "
                + ", ".join(name for name, _, _ in spec)
            )
        last = position
        if kind == "text":
            _leaf(child, file)
            node[key] = "".join(child.text)
        elif kind == "texts":
            _leaf(child, file)
            node.setdefault(key, []).append("".join(child.text))
        elif kind == "keys":
            node.setdefault(key, []).append(_sequence(child, _KEY, file))
        elif kind == "data":
            node[key] = _data_map(child, file)
        elif kind == "json":
            _leaf(child, file)
            node[key] = _json(child, file)
        else:  # retry
            node[key] = _retry(child, file)
        node.key_wheres.setdefault(key, where)
    return node


def _retry(element: _Element, file: str) -> Node:
    _no_text(element, file)
    if len(element.children) != 1 or element.children[0].name not in _RETRY:
        raise Where(file, element.line).error(
            "a <retry-policy> holds exactly one of <fixed>, <exponential>, <explicit>, <none>"
        )
    inner = element.children[0]
    key, spec = _RETRY[inner.name]
    return _node(
        Where(file, element.line),
        {key: _sequence(inner, spec, file)},
        {key: Where(file, inner.line)},
    )


def _data_map(element: _Element, file: str) -> Node:
    _no_text(element, file)
    node = _node(Where(file, element.line))
    for entry in element.children:
        where = Where(file, entry.line)
        if entry.name != "entry":
            raise where.error(f"unknown element <{entry.name}> in <job-data-map> (known: entry)")
        pair = _sequence(entry, _ENTRY, file)
        if "key" not in pair or "value" not in pair:
            raise where.error("an <entry> needs a <key> and a <value>")
        key = pair["key"].strip()
        if not key:
            raise where.error("an <entry>'s <key> is empty")
        if key in node:
            raise where.error(f"job-data-map key {key!r} is given twice")
        # Quartz's TrimEmptyToNull: the value trimmed, and an empty one is null.
        node[key] = pair["value"].strip() or None
        node.key_wheres[key] = where
    return node


def _json(element: _Element, file: str) -> Any:
    text = "".join(element.text)

    def no_constant(name: str) -> Any:
        raise ValidationError(f"{name} is not JSON")

    try:
        return json.loads(text, parse_constant=no_constant) if text.strip() else None
    except (ValueError, RecursionError) as exc:
        raise Where(file, element.line).error(f"<{element.name}> must hold JSON: {exc}") from None


def _leaf(element: _Element, file: str) -> None:
    if element.children:
        raise Where(file, element.children[0].line).error(
            f"<{element.name}> holds text only, not <{element.children[0].name}>"
        )


def _no_text(element: _Element, file: str) -> None:
    if "".join(element.text).strip():
        raise Where(file, element.line).error(f"<{element.name}> holds elements, not text")


#: Deepest nesting read: the schema's documents are six levels deep.
_MAX_DEPTH = 32


def _parse(content: str | bytes, file: str) -> _Element:
    parser = expat.ParserCreate(namespace_separator=_SEP)
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    stack: list[_Element] = []
    roots: list[_Element] = []

    def refuse(*_: Any) -> None:
        raise Where(file, parser.CurrentLineNumber).error(
            "a document type declaration (DTD) is not allowed in a scheduling file"
        )

    def start(name: str, _attributes: Any) -> None:
        uri, _, local = name.rpartition(_SEP)
        if uri not in _NAMESPACES:
            raise Where(file, parser.CurrentLineNumber).error(
                f"element <{local}> is in namespace {uri!r}, not job_scheduling_data's"
            )
        if len(stack) >= _MAX_DEPTH:
            raise Where(file, parser.CurrentLineNumber).error("elements nest too deep")
        element = _Element(local, parser.CurrentLineNumber)
        if stack:
            stack[-1].children.append(element)
        else:
            roots.append(element)
        stack.append(element)

    def end(_name: str) -> None:
        stack.pop()

    def text(data: str) -> None:
        if stack:
            stack[-1].text.append(data)

    parser.StartDoctypeDeclHandler = refuse
    parser.EntityDeclHandler = refuse
    parser.UnparsedEntityDeclHandler = refuse
    parser.ExternalEntityRefHandler = refuse  # type: ignore[assignment]
    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.CharacterDataHandler = text
    try:
        parser.Parse(content, True)
    except expat.ExpatError as exc:
        message = expat.errors.messages.get(exc.code, str(exc)) if exc.code else str(exc)
        raise Where(file, exc.lineno).error(f"not well-formed XML: {message}") from None
    except RecursionError:
        raise Where(file).error("elements nest too deep") from None
    if not roots:
        raise Where(file).error("no root element")
    return roots[0]


# -- writing ----------------------------------------------------------------------------------


def write_xml(tree: dict[str, Any]) -> str:
    """The export document as ``job_scheduling_data_2_0`` XML (Quartz.NET's namespace), valid
    against Quartz.NET's schema.

    Raises :class:`SchedulingFileError` naming the job or trigger for what the schema has no
    element for (celery-quartz's own fields, a calendar-interval trigger's time zone other than
    UTC, a negative priority) and for job data the reader would not give back as it is.
    """
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<job-scheduling-data xmlns="{NAMESPACE}" version="2.0">',
    ]
    jobs, triggers = tree.get("Jobs", []), tree.get("Triggers", [])
    if jobs or triggers:
        out.append("  <schedule>")
        for job in jobs:
            out.append("    <job>")
            _write_fields(out, job, _JOB, 6, f"job {job['Group']}.{job['Name']}", "job")
            out.append("    </job>")
        for trigger in triggers:
            kind = next(k for k in ("Simple", "Cron", "CalendarInterval") if k in trigger)
            element, kind_fields = next(
                (name, spec) for name, (key, spec) in _KINDS.items() if key == kind
            )
            owner = f"trigger {trigger['Group']}.{trigger['Name']}"
            schedule = dict(trigger[kind])
            if kind == "CalendarInterval" and schedule.get("TimeZone") == "UTC":
                del schedule["TimeZone"]  # the reader's default, which the schema cannot say
            out.append("    <trigger>")
            out.append(f"      <{element}>")
            _write_fields(out, trigger, _TRIGGER_COMMON, 8, owner, element)
            _write_fields(out, schedule, kind_fields, 8, owner, element)
            out.append(f"      </{element}>")
            out.append("    </trigger>")
        out.append("  </schedule>")
    out.append("</job-scheduling-data>")
    return "\n".join(out) + "\n"


def _write_fields(
    out: list[str],
    tree: dict[str, Any],
    spec: Sequence[_Field],
    indent: int,
    owner: str,
    parent: str,
) -> None:
    pad = " " * indent
    for element, key, kind in spec:
        if key not in tree:
            continue
        value = tree[key]
        if element in _OWN_ELEMENTS or (parent == "calendar-interval" and element == "time-zone"):
            raise SchedulingFileError(
                f"{owner}: Quartz.NET's job_scheduling_data_2_0 schema has no <{element}> in "
                f"<{parent}> (here {_scalar(value)!r}); export as json or yaml"
            )
        if element == "priority" and value < 0:
            raise SchedulingFileError(
                f"{owner}: priority {value} is negative, and the schema's <priority> is not; "
                "export as json or yaml"
            )
        if kind == "data":
            out.append(f"{pad}<{element}>")
            for name, item in value.items():
                out.append(
                    f"{pad}  <entry><key>{_escape(name)}</key>"
                    f"<value>{_escape(_data_value(owner, name, item))}</value></entry>"
                )
            out.append(f"{pad}</{element}>")
        else:
            out.append(f"{pad}<{element}>{_scalar(value)}</{element}>")


def _data_value(owner: str, name: str, item: Any) -> str:
    """A job data value as XML writes it: what the reader gives back is the value itself."""
    if item is None:
        return ""  # read back as null
    if not isinstance(item, str):
        raise SchedulingFileError(
            f"{owner}: job data {name!r} is a {type(item).__name__}; XML holds strings only "
            "(export as json or yaml)"
        )
    if not item.strip() or item != item.strip() or name != name.strip():
        raise SchedulingFileError(
            f"{owner}: job data {name!r} is {item!r}, which XML cannot give back: Quartz trims "
            "a key and a value and reads an empty value as null (export as json or yaml)"
        )
    return item


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return _escape(str(value))


def _escape(text: str) -> str:
    if _NOT_XML.search(text):
        raise SchedulingFileError(
            f"{text[:40]!r} holds a control character that XML 1.0 cannot carry "
            "(export as json or yaml)"
        )
    return (
        text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("\r", "&#13;")
    )
