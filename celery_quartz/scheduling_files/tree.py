"""The document tree every format's reader produces (:mod:`.xml_format`, :mod:`.json_format`,
:mod:`.yaml_format`) and :mod:`.build` checks: mappings keyed by the JSON spelling of
``job_scheduling_data_2_0``, each knowing where it and its keys were written and how its file
spells them; and the keys each mapping may hold. Where a thing was written
(:class:`~celery_quartz.definitions.model.Where`) is the definitions' own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from celery_quartz.definitions.model import Where, spelled

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
    "RequireSuccessWithin",
    "RetryPolicy",
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
    # celery-quartz's own (issue 29), after the 4.x elements.
    "OverlapPolicy",
    # celery-quartz's own (docs/retries.md#pausing-when-retries-run-out).
    "PauseWhenRetriesExhausted",
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
    # No retry, whatever the job or the scheduler's default says.
    "None": (),
}
KEY_KEYS = ("Name", "Group")


# -- the mappings of a document ---------------------------------------------------------------


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


def plain(value: Any) -> Any:
    """``value`` with every :class:`Node` turned into a plain dict (for job data)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value
