"""The operators' read side as values: filters, pages and views of
:class:`~celery_quartz.store.abc.StoreReader`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Generic, TypeVar

from celery_quartz.keys import JobKey, TriggerKey
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

    @classmethod
    def of_exception(cls, exc: BaseException) -> FiringOutcome:
        return cls(True, type(exc).__qualname__, str(exc))


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
