"""The document tree every format's reader produces (:mod:`.xml_format`, :mod:`.json_format`,
:mod:`.yaml_format`) and :mod:`.model` checks: mappings keyed by the JSON spelling of
``job_scheduling_data_2_0``, each knowing where it and its keys were written and how its file
spells them; the keys each mapping may hold; and the errors found while reading, gathered.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

from celery_quartz.errors import SchedulingFileError

_P = ParamSpec("_P")
_T = TypeVar("_T")

#: The trigger kinds a scheduling file has, by their key in the tree.
KINDS = ("Simple", "Cron", "CalendarInterval")

DOCUMENT_KEYS = ("PreProcessingCommands", "ProcessingDirectives", "Jobs", "Triggers")
COMMAND_KEYS = ("DeleteJobsInGroup", "DeleteTriggersInGroup", "DeleteJob", "DeleteTrigger")
DIRECTIVE_KEYS = (
    "OverwriteExistingData",
    "IgnoreDuplicates",
    "ScheduleTriggerRelativeToReplacedTrigger",
)
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
    """A mapping of a scheduling file, with where it and each of its keys were written, and how
    the file spells each key (``spelling``: the XML element names; None: as the key)."""

    def __init__(
        self,
        values: Mapping[str, Any] = (),  # type: ignore[assignment]
        where: Where | None = None,
        key_wheres: Mapping[str, Where] | None = None,
        spelling: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(values)
        self.where = where or Where("<unknown>")
        self.key_wheres = dict(key_wheres or {})
        self.spelling = spelling

    def at(self, key: str) -> Where:
        """Where ``key``'s value was written (the mapping's own place when unknown)."""
        return self.key_wheres.get(key, self.where)

    def name(self, key: str) -> str:
        """``key`` as the file spells it (``job-type`` in XML, ``JobType`` in JSON and YAML)."""
        return spelled(self.spelling, key)


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


def plain(value: Any) -> Any:
    """``value`` with every :class:`Node` turned into a plain dict (for job data)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value
