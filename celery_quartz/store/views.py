"""The operators' read side as values: filters, pages and views of
:class:`~celery_quartz.store.abc.StoreReader`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from celery_quartz.keys import JobKey, TriggerKey
from celery_quartz.pausing import PauseRecord
from celery_quartz.triggers.base import Trigger

Item = TypeVar("Item")
Cursor = TypeVar("Cursor")

#: The largest page a listing returns, whatever is asked.
MAX_PAGE = 1000


@dataclass(frozen=True)
class Page(Generic[Item, Cursor]):
    """One page of a keyset-paged listing. ``next_after`` is the ``after`` argument of the next
    page, None on the last one; a page does not shift when rows before it change."""

    items: list[Item]
    next_after: Cursor | None


@dataclass(frozen=True)
class JobFilter:
    """Conditions on jobs; None means any."""

    group: str | None = None
    task: str | None = None


@dataclass(frozen=True)
class TriggerFilter:
    """Conditions on triggers; None means any. ``paused`` selects PAUSED and PAUSED_BLOCKED
    (True) or every other state (False)."""

    group: str | None = None
    state: str | None = None
    execution_group: str | None = None
    preferred_node: str | None = None
    task: str | None = None
    paused: bool | None = None
    job: JobKey | None = None


@dataclass(frozen=True)
class FiringFilter:
    """Conditions on fired instances; None means any."""

    state: str | None = None
    trigger: TriggerKey | None = None
    job: JobKey | None = None
    instance_name: str | None = None
    worker_name: str | None = None
    execution_group: str | None = None


@dataclass(frozen=True)
class FiringOutcome:
    """How a firing ended, as its worker reports it to
    :meth:`~celery_quartz.store.abc.WorkerStore.complete_execution`: success, or the exception's
    type and message."""

    failed: bool = False
    error_type: str | None = None
    error_message: str | None = None
    #: When it finished (epoch milliseconds); None: when its end is recorded.
    finished_millis: int | None = None
    #: What the task reported (``current_context().report``): a summary, and metrics as JSON,
    #: each within its bound (:mod:`celery_quartz.history`).
    summary: str | None = None
    metrics: str | None = None
    #: Ended by a revoke (with ``terminate=True`` while it ran): recorded as cancelled.
    cancelled: bool = False

    @classmethod
    def of_exception(
        cls, exc: BaseException, *, summary: str | None = None, metrics: str | None = None
    ) -> FiringOutcome:
        return cls(True, type(exc).__qualname__, str(exc), summary=summary, metrics=metrics)


@dataclass(frozen=True)
class LastOutcome:
    """A trigger's last finished firing: when it started and finished, whether it failed and
    how, and how many firings in a row have failed up to it."""

    started_time: datetime | None
    finished_time: datetime
    succeeded: bool
    error_type: str | None
    error_message: str | None
    consecutive_failures: int

    @property
    def duration(self) -> float | None:
        """Seconds from start to finish; None when the start is unknown."""
        if self.started_time is None:
            return None
        return (self.finished_time - self.started_time).total_seconds()


@dataclass(frozen=True)
class TriggerView:
    """A stored trigger as operators see it: the trigger, its state, its job's task, its last
    outcome (None before a firing of it finished) and, in ERROR, why."""

    trigger: Trigger
    state: str
    task: str
    last_outcome: LastOutcome | None = None
    error_reason: str | None = None
    #: Why it is paused, by whom, since when (None: not paused, or paused with no record).
    pause: PauseRecord | None = None

    @property
    def key(self) -> TriggerKey:
        return self.trigger.key


@dataclass(frozen=True)
class FiringView:
    """A fired-trigger row: one firing from its claim to its completion."""

    fire_instance_id: str
    trigger_key: TriggerKey
    job_key: JobKey | None
    state: str
    instance_name: str
    worker_name: str | None
    scheduled_time: datetime
    fired_time: datetime
    published_time: datetime | None
    started_time: datetime | None
    expires_time: datetime | None
    priority: int
    execution_group: str | None
    queue: str | None
    recovering: bool
    retry_attempt: int
    refire_count: int
    #: What the running task last reported of its progress (None: nothing reported).
    progress: Progress | None = None


@dataclass(frozen=True)
class Progress:
    """A running firing's last progress report: a percentage, a message, when it was written."""

    percent: float
    message: str | None
    updated_at: datetime


@dataclass(frozen=True)
class NodeView:
    """A scheduler or worker process that checks in, and whether it counts as alive."""

    instance_name: str
    kind: str
    alive: bool
    last_checkin_time: datetime
    checkin_interval: float
    started_time: datetime | None
    clustered: bool
    hostname: str | None
    pid: int | None
    status: str | None
    epoch: int | None
    queues: list[str] | None
    concurrency: int | None


@dataclass(frozen=True)
class GroupOccupancy:
    """An execution group's firings in flight and its due triggers held back (not claimed)."""

    execution_group: str | None
    in_flight: int
    due_waiting: int


@dataclass(frozen=True)
class StateSummary:
    """The triggers in one state: how many, the earliest next fire time among them, and how
    many are due by more than the misfire threshold."""

    count: int
    earliest_next_fire_time: datetime | None
    overdue: int


@dataclass(frozen=True)
class OwedTriggers:
    """What is owed and not happening, by kind, oldest first: triggers due by more than the
    misfire threshold and not claimed (``overdue``), BLOCKED longer than asked (``blocked``),
    and in ERROR (``errors``, with their reason). Each list holds at most the limit asked;
    each count is capped (``count_cap``): a count equal to it means "at least"."""

    overdue: list[TriggerView]
    blocked: list[TriggerView]
    errors: list[TriggerView]
    overdue_count: int
    blocked_count: int
    error_count: int
    count_cap: int


# -- run history and audit (docs/history.md) ----------------------------------------------------

#: Where a history or audit page resumes: (event time in epoch ms, row id) of its last row.
HistoryCursor = tuple[int, int]


@dataclass(frozen=True)
class HistoryFilter:
    """Conditions on history rows; None means any. ``results`` holds result names (see
    :class:`celery_quartz.history.RunResult`); ``since`` is inclusive, ``until`` exclusive."""

    job: JobKey | None = None
    trigger: TriggerKey | None = None
    group: str | None = None
    results: frozenset[str] | None = None
    since: datetime | None = None
    until: datetime | None = None


@dataclass(frozen=True)
class HistoryEntry:
    """One row of the run history: a finished execution, or an occurrence that did not run."""

    history_id: int
    event_time: datetime
    result: str
    trigger_key: TriggerKey
    job_key: JobKey | None
    scheduled_fire_time: datetime | None
    fire_instance_id: str | None
    task_name: str | None
    task_id: str | None
    published_time: datetime | None
    started_time: datetime | None
    finished_time: datetime | None
    #: Seconds from start to finish; start lateness: seconds from the scheduled time to start.
    duration: float | None
    start_lateness: float | None
    error_type: str | None
    error_message: str | None
    worker_name: str | None
    instance_name: str | None
    retry_attempt: int
    recovering: bool
    reason: str | None
    summary: str | None
    metrics: dict[str, Any] | None
    args: list[Any] | None
    kwargs: dict[str, Any] | None


@dataclass(frozen=True)
class StatisticsBucket:
    """The history in one bucket: counts by result, and duration and start lateness
    percentiles (seconds) of the executions that started."""

    start: datetime
    counts: dict[str, int]
    duration_p50: float | None
    duration_p95: float | None
    duration_max: float | None
    lateness_p50: float | None
    lateness_p95: float | None
    lateness_max: float | None


@dataclass(frozen=True)
class Statistics:
    """:meth:`~celery_quartz.store.abc.HistoryReader.statistics`: buckets of ``bucket`` from
    ``since`` to ``until`` for ``job`` (None: the whole scheduler), oldest first, and the
    whole window's totals as one more bucket starting at ``since``."""

    job: JobKey | None
    since: datetime
    until: datetime
    bucket: timedelta
    buckets: list[StatisticsBucket]
    total: StatisticsBucket


@dataclass(frozen=True)
class RunStatus:
    """A job's or trigger's runs in short, kept when its history rows are swept."""

    kind: str  # "job" or "trigger"
    key: JobKey | TriggerKey
    since: datetime
    last_run_time: datetime | None
    last_result: str | None
    last_success_time: datetime | None
    consecutive_failures: int
    runs: int
    failures: int
    #: A job's success deadline (None: none), and whether it is past it now.
    require_success_within: timedelta | None = None
    overdue: bool = False


@dataclass(frozen=True)
class AuditFilter:
    """Conditions on audit rows; None means any. ``since`` inclusive, ``until`` exclusive."""

    principal: str | None = None
    via: str | None = None
    action: str | None = None
    target: str | None = None
    since: datetime | None = None
    until: datetime | None = None


@dataclass(frozen=True)
class AuditEntry:
    """One change: who (``principal``), through what (``via``), which action, on what, and
    what changed (``changes``: field → [before, after], secrets redacted), when."""

    audit_id: int
    event_time: datetime
    principal: str
    via: str
    action: str
    target_kind: str
    target: str | None
    changes: dict[str, Any] | None


@dataclass(frozen=True)
class SweepReport:
    """What one :meth:`~celery_quartz.store.abc.HistoryKeeper.sweep_history` did."""

    folded: int = 0
    deleted_by_age: int = 0
    deleted_by_cap: int = 0
    audit_deleted: int = 0
    rollups_deleted: int = 0
    #: More remained than one sweep's batches took: sweep again soon.
    more: bool = False
