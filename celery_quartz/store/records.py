"""What the store hands back: small value objects of its roles
(see :mod:`celery_quartz.store.abc`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from celery_quartz.firing import AcquiredFiring, Firing
from celery_quartz.routing import Unserved

#: ``get_trigger_state`` of a key that is not stored (Quartz's ``TriggerState.None``).
NONE_STATE = "NONE"


class ProcessLoss(str, Enum):
    """How a worker's pool process stopped in the middle of a firing, as the worker's main
    process learns it from Celery (:meth:`~celery_quartz.store.abc.WorkerStore.
    end_lost_execution`)."""

    #: It died (the OOM killer, a signal): Celery's ``WorkerLostError``. Ended as a dead
    #: worker's execution: a recovery firing for a job that requests recovery, otherwise
    #: closed as interrupted.
    CRASHED = "crashed"
    #: Killed at its hard time limit: ``TimeLimitExceeded``. A failed execution, handed to its
    #: trigger's retry policy.
    TIMED_OUT = "timed_out"
    #: Revoked with ``terminate=True``: closed as cancelled, neither retried nor recovered.
    TERMINATED = "terminated"


@dataclass
class Claim:
    """What one :meth:`~celery_quartz.store.abc.SchedulingStore.claim` took: firings to publish
    now, or claims to fire later."""

    firings: list[Firing] = field(default_factory=list)
    acquired: list[AcquiredFiring] = field(default_factory=list)
    #: Groups (or pinned workers) whose due triggers were held back because no live worker
    #: serves them (see :mod:`celery_quartz.routing`).
    unserved: list[Unserved] = field(default_factory=list)


@dataclass
class FiringOwners:
    """What :meth:`~celery_quartz.store.abc.ClusterStore.firing_owners` read from the fired rows
    in flight."""

    #: Scheduler instances holding claims (ACQUIRED) or firings not yet published (FIRED).
    schedulers: set[str] = field(default_factory=set)
    #: Of those, the instances holding firings not yet published.
    unpublished: set[str] = field(default_factory=set)
    #: Worker node name → the earliest start time (ms) of the firings it is executing.
    executing_since: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckIn:
    """A row of ``scheduler_state``: a scheduler or worker process and its last check-in."""

    instance_name: str
    kind: str
    last_checkin_millis: int
    checkin_interval_millis: int
    clustered: bool
    hostname: str | None
    pid: int | None


@dataclass
class WorkerRecovery:
    """What :meth:`~celery_quartz.store.abc.ClusterStore.recover_worker` did with a dead
    worker's executions."""

    worker_name: str
    recovered: int = 0
    interrupted: int = 0
    deferred: int = 0
    #: Automatic pins it had claimed, reset to unclaimed (only once it is confirmed dead).
    pins_reset: int = 0


@dataclass(frozen=True)
class StartedExecution:
    """A start that :meth:`~celery_quartz.store.abc.WorkerStore.start_execution` recorded."""

    #: Its success may be recorded later, with others
    #: (:meth:`~celery_quartz.store.abc.WorkerStore.complete_executions`): its end releases
    #: nothing (its job allows concurrent executions), its job does not request recovery (a
    #: worker lost before recording the end would have it run again), and the store records a
    #: batch in one statement (PostgreSQL).
    batchable: bool


@dataclass(frozen=True)
class FinishedExecution:
    """A successful execution whose end is still to be recorded."""

    fire_instance_id: str
    #: When it finished (epoch milliseconds): its trigger's last finish time.
    finished_millis: int
    #: What the task reported (``current_context().report``), bounded; metrics as JSON.
    summary: str | None = None
    metrics: str | None = None


@dataclass(frozen=True)
class Fence:
    """The epoch a non-clustered scheduler was elected with; its writes require it unchanged."""

    epoch: int
    instance_name: str


@dataclass(frozen=True)
class LeaderMoveRecovery:
    """What :meth:`~celery_quartz.store.abc.ClusterStore.recover_leader_move` did."""

    released: int
    unblocked: int
    republish: int
    dropped: int
    dropped_recovery: int
    completed_removed: int


@dataclass(frozen=True)
class ProgressReport:
    """A running firing's progress, as its task reported it
    (:meth:`~celery_quartz.store.abc.WorkerStore.record_progress`)."""

    fire_instance_id: str
    percent: float
    message: str | None
    #: When the task reported it (epoch milliseconds).
    reported_millis: int
