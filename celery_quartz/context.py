"""What a task can know about the firing it runs: Quartz's IJobExecutionContext."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from celery_quartz.clock import from_millis
from celery_quartz.firing import FiringHeader
from celery_quartz.history import MAX_METRICS_BYTES, MAX_SUMMARY_CHARS
from celery_quartz.keys import JobKey, TriggerKey

logger = logging.getLogger(__name__)


#: Longest progress message kept (a longer one is cut).
MAX_PROGRESS_MESSAGE = 250


@dataclass
class JobExecutionContext:
    """The firing a task is running. Read it with :func:`current_context`."""

    #: The scheduler name (``quartz_scheduler_name``) of the store the firing belongs to.
    scheduler_name: str
    #: The firing's id; also its Celery task id (suffixed ``.r<n>`` when published again).
    fire_instance_id: str
    #: The job that fired.
    job_key: JobKey
    #: The trigger that fired (for a recovery or retry firing, its one-shot trigger).
    trigger_key: TriggerKey
    #: The occurrence: when the trigger was scheduled to fire (for a recovery or retry firing,
    #: the original occurrence's).
    scheduled_fire_time: datetime
    #: When the scheduler fired it (published the message).
    fire_time: datetime
    #: The scheduler instance that published the message.
    fired_by: str = ""
    #: The job's own data. For a job with ``persist_job_data``, what the task leaves here is
    #: written back to the job when the firing completes (Quartz's JobDetail.JobDataMap).
    job_data: dict[str, Any] = field(default_factory=dict)
    #: The trigger's data.
    trigger_data: dict[str, Any] = field(default_factory=dict)
    #: A recovery firing: the worker that ran the original died mid-job.
    recovering: bool = False
    #: For a recovery or retry firing, the trigger of the original occurrence.
    recovering_trigger_key: TriggerKey | None = None
    #: For a firing of the trigger's retry policy, which retry it is (1 for the first); 0 on
    #: the first run.
    retry_attempt: int = 0
    #: How many times the task asked to run this firing again at once (``RefireJob``,
    #: Quartz's refire-immediately).
    refire_count: int = 0
    #: The Celery worker running it (its node name), when known.
    worker_name: str | None = None
    #: For a firing of a backfill (:meth:`celery_quartz.Quartz.backfill`), the original
    #: scheduled time of the past occurrence it runs (UTC); None for any other firing.
    backfill_slot: datetime | None = None
    #: The summary the task reported with :meth:`report`, kept in its history row (None:
    #: nothing reported, or dropped for its size).
    summary: str | None = None
    #: The metrics the task reported with :meth:`report`, as JSON (None: nothing reported, or
    #: dropped for its size).
    metrics: str | None = None
    #: The Celery task id of its message (the fire instance id, suffixed after an expiry), when
    #: a worker runs it.
    task_id: str | None = None
    #: Where :meth:`report_progress` hands a report: the worker's progress writer (None outside
    #: a worker running the hooks: the report goes nowhere).
    progress_sink: Callable[[JobExecutionContext, float, str | None], None] | None = field(
        default=None, repr=False, compare=False
    )
    #: Set by the worker when the store says a later firing of the trigger replaced this one
    #: (:meth:`note_cancel_requested`); read by :attr:`cancelled`.
    _cancel_requested: bool = field(default=False, init=False, repr=False, compare=False)

    def report_progress(self, percent: float, message: str | None = None) -> None:
        """Report how far this run is (``percent``, 0 to 100) and, optionally, what it is doing
        (``message``, cut to :data:`MAX_PROGRESS_MESSAGE` characters). Never blocks: the
        worker writes the latest report of each firing at most once a second, and only when it
        changed; the CLI, the API and the dashboard show it while the firing runs. A percent
        that is not a number from 0 to 100 raises a ValueError."""
        if isinstance(percent, bool) or not isinstance(percent, (int, float)):
            raise ValueError(f"report_progress: percent must be a number, got {percent!r}")
        if not 0 <= percent <= 100:  # NaN fails this too
            raise ValueError(f"report_progress: percent must be from 0 to 100, got {percent!r}")
        if message is not None:
            if not isinstance(message, str):
                raise ValueError(f"report_progress: message must be text, got {message!r}")
            message = message.replace("\x00", "")[:MAX_PROGRESS_MESSAGE]
        if self.progress_sink is not None:
            self.progress_sink(self, float(percent), message)

    def report(self, summary: str | None = None, metrics: Mapping[str, Any] | None = None) -> None:
        """Report what this run did, for its history row: a one-line ``summary`` (at most
        :data:`~celery_quartz.history.MAX_SUMMARY_CHARS` characters) and ``metrics`` (a JSON
        object of at most :data:`~celery_quartz.history.MAX_METRICS_BYTES` bytes). Each call
        replaces what it gives. One over its bound is dropped, with a warning, and the run is
        recorded without it; metrics that are not a JSON object raise a TypeError."""
        if summary is not None:
            if not isinstance(summary, str):
                raise TypeError(f"report(summary=...) must be a string, got {type(summary)}")
            if len(summary) > MAX_SUMMARY_CHARS:
                logger.warning(
                    "firing %s: the summary reported (%d characters) is over the bound of %d; "
                    "dropped",
                    self.fire_instance_id,
                    len(summary),
                    MAX_SUMMARY_CHARS,
                )
            else:
                self.summary = summary
        if metrics is not None:
            if not isinstance(metrics, Mapping):
                raise TypeError(f"report(metrics=...) must be a mapping, got {type(metrics)}")
            try:
                encoded = json.dumps(dict(metrics), separators=(",", ":"), allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise TypeError(f"report(metrics=...) must be JSON: {exc}") from None
            size = len(encoded.encode())
            if size > MAX_METRICS_BYTES:
                logger.warning(
                    "firing %s: the metrics reported (%d bytes of JSON) are over the bound of "
                    "%d; dropped",
                    self.fire_instance_id,
                    size,
                    MAX_METRICS_BYTES,
                )
            else:
                self.metrics = encoded

    @property
    def cancelled(self) -> bool:
        """Whether this firing was cancelled while it runs: its trigger's overlap policy
        ``cancel_previous`` replaced it, or an operator revoked it. A prefork pool's process is
        terminated instead (it never sees this turn true). On a pool that cannot terminate a
        task (solo, threads), a long task checks it and returns early, and its run is recorded
        ``cancelled``. It turns true when the worker's revoked ids
        (``celery.worker.state.revoked``, which Celery's remote control fills) hold its task id,
        or when the worker read from the store that a later firing replaced it (about once a
        second while it runs: a solo worker reads no remote-control message while a task runs).
        Outside a worker, False."""
        if self._cancel_requested:
            return True
        try:
            from celery.worker import state
        except ImportError:  # pragma: no cover - Celery is a dependency
            return False
        return (self.task_id or self.fire_instance_id) in state.revoked

    def note_cancel_requested(self) -> None:
        """The worker read from the store that a later firing of the trigger replaced this
        one (``cancel_previous``): :attr:`cancelled` is true from now on. Called by the worker
        (:mod:`celery_quartz.worker.cancels`), from a thread of its own."""
        self._cancel_requested = True

    @property
    def merged_job_data(self) -> dict[str, Any]:
        """Job data with the trigger's data over it (Quartz's MergedJobDataMap); a copy."""
        return {**self.job_data, **self.trigger_data}

    @property
    def occurrence(self) -> tuple[TriggerKey, datetime]:
        """(trigger, scheduled fire time) of the occurrence this firing runs, recovery or not."""
        return (self.recovering_trigger_key or self.trigger_key, self.scheduled_fire_time)

    @classmethod
    def from_header(
        cls, header: FiringHeader, worker_name: str | None = None, task_id: str | None = None
    ) -> JobExecutionContext:
        """The context of the firing ``header`` carries, run on ``worker_name`` as the task
        ``task_id``."""
        return cls(
            task_id=task_id,
            scheduler_name=header.scheduler_name,
            fire_instance_id=header.fire_instance_id,
            job_key=header.job_key,
            trigger_key=header.trigger_key,
            scheduled_fire_time=from_millis(header.scheduled_millis),
            fire_time=from_millis(header.fired_millis),
            fired_by=header.fired_by,
            job_data=header.job_data,
            trigger_data=header.trigger_data,
            recovering=header.recovering,
            recovering_trigger_key=header.origin_trigger_key,
            retry_attempt=header.retry_attempt,
            refire_count=header.refire_count,
            worker_name=worker_name,
            backfill_slot=None
            if header.backfill_slot_millis is None
            else from_millis(header.backfill_slot_millis),
        )


#: The attribute of a Celery task request under which the worker hooks keep its firing.
_RUNNING = "quartz_running"


@dataclass(frozen=True)
class RunningFiring:
    """A firing whose start this worker recorded, kept on the Celery task request that runs it
    (:func:`running_firing`) from the start until its end is recorded."""

    #: The message's task id (the fire instance id, suffixed after an expiry).
    task_id: str
    header: FiringHeader
    context: JobExecutionContext
    #: Its success may be recorded with other ends (the store said so at the start).
    batchable: bool


def running_firing(request: Any) -> RunningFiring | None:
    """The firing the worker hooks started under this Celery task request, if any."""
    running = getattr(request, _RUNNING, None)
    return running if isinstance(running, RunningFiring) else None


def set_running_firing(request: Any, running: RunningFiring | None) -> None:
    """Keep ``running`` on the request (None: its end is recorded, it is running no longer)."""
    setattr(request, _RUNNING, running)


def current_context() -> JobExecutionContext | None:
    """The firing the current task runs; ``None`` outside a task or for a message not ours."""
    from celery import current_task

    if current_task is None:
        return None
    request = current_task.request
    running = running_firing(request)
    if running is not None:
        return running.context
    header = FiringHeader.of_request(request)
    if header is None:
        return None
    return JobExecutionContext.from_header(header, request.hostname, request.id)
