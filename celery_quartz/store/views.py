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
class TriggerView:
    """A stored trigger as operators see it: the trigger, its state and its job's task."""

    trigger: Trigger
    state: str
    task: str

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
