"""What the worker side's parts share: one :class:`WorkerRuntime` per app with the hooks."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from celery import Celery

from celery_quartz.clock import Clock, SystemClock
from celery_quartz.config import Settings
from celery_quartz.context import JobExecutionContext
from celery_quartz.hooks import ExecutionHooks
from celery_quartz.store import WorkerNodeStore, open_store
from celery_quartz.worker.cancels import CancelWatch
from celery_quartz.worker.ends import CompletionBatch, LostEnds
from celery_quartz.worker.progress import ProgressWriter

#: Connections a worker process's store keeps open.
_POOL_SIZE = 32

#: The attribute of the app that holds its runtime (the only one the worker side sets on it).
_ATTRIBUTE = "_celery_quartz"


@dataclass
class CheckInStatus:
    """What the worker's check-in last did (read by ``celery inspect quartz_health``)."""

    #: Seconds between check-ins; None before the check-in starts.
    interval: float | None = None
    #: The queues the worker consumes, as checked in.
    queues: list[str] = field(default_factory=list)
    #: When the worker last checked in (the runtime's clock); None before the first.
    last_checkin: datetime | None = None


class WorkerRuntime:
    """The state the worker side's parts share, one per app (:func:`runtime_of`): the settings,
    read once; one store per scheduler name and process; the clock; the execution hooks; this
    process's successes held for a batch; the lost ends; the check-in's status; the progress
    writer and the cancel watch.

    Constructing it attaches it to ``app``; :func:`celery_quartz.worker.install` does.
    """

    def __init__(self, app: Celery, clock: Clock | None = None) -> None:
        self.app = app
        self.clock: Clock = clock or SystemClock()
        #: Told of each firing's execution in this process, in order.
        self.execution_hooks: list[ExecutionHooks] = []
        #: The lost pool processes' ends (the worker's main process).
        self.lost_ends = LostEnds(app, self.store, self.clock)
        self.checkin = CheckInStatus()
        self._settings: Settings | None = None
        self._stores: dict[tuple[int, str], WorkerNodeStore] = {}
        self._batch: CompletionBatch | None = None
        self._progress: ProgressWriter | None = None
        self._cancels: CancelWatch | None = None
        #: The worker's main process (its pid), once Celery's ``worker_init`` said so.
        self._worker_process: int | None = None
        #: The prefork pool process this is (its pid), if it is one: a revoke terminates it.
        self._pool_process: int | None = None
        self._lock = threading.Lock()
        self._receivers: list[tuple[Any, Callable[..., Any]]] = []
        setattr(app, _ATTRIBUTE, self)

    @property
    def settings(self) -> Settings:
        """The ``quartz_*`` settings, read from the app's configuration once, at first use: the
        hooks are installed where the app is created, usually before it is configured."""
        settings = self._settings
        if settings is None:
            settings = self._settings = Settings.from_app(self.app)
        return settings

    def store(self, scheduler_name: str) -> WorkerNodeStore:
        """This process's store for ``scheduler_name`` (engines are not shared across a fork)."""
        key = (os.getpid(), scheduler_name)
        settings = self.settings
        with self._lock:
            store = self._stores.get(key)
            if store is None:
                # No pre-ping (a round trip per transaction): a connection broken by a database
                # restart fails its statement, and every writer retries through an outage.
                # A pool as large as a threads-pool worker's concurrency is likely to be: each
                # thread keeps its connection instead of opening one per task past the fifth
                # (connections are opened only when threads need them at once).
                store = open_store(
                    settings,
                    clock=self.clock,
                    scheduler_name=scheduler_name,
                    pre_ping=False,
                    pool_size=_POOL_SIZE,
                )
                self._stores[key] = store
            return store

    @property
    def batch(self) -> CompletionBatch:
        """This process's batch of successful ends (a forked child starts its own)."""
        batch = self._batch
        if batch is None or batch.pid != os.getpid():
            delay = self.settings.worker_completion_delay
            with self._lock:
                batch = self._batch
                if batch is None or batch.pid != os.getpid():
                    batch = self._batch = CompletionBatch(self.store, delay, self.clock)
        return batch

    def report_progress(
        self, context: JobExecutionContext, percent: float, message: str | None
    ) -> None:
        """The sink of a running firing's ``report_progress``: this process's progress writer
        (a forked child starts its own) keeps it, to write off the task's path."""
        writer = self._progress
        if writer is None or writer.pid != os.getpid():
            with self._lock:
                writer = self._progress
                if writer is None or writer.pid != os.getpid():
                    writer = self._progress = ProgressWriter(self.store, self.clock)
        writer.offer(context, percent, message)

    def forget_progress(self, fire_instance_id: str) -> None:
        """The firing ended: its progress is no longer written."""
        writer = self._progress
        if writer is not None and writer.pid == os.getpid():
            writer.forget(fire_instance_id)

    def in_worker_process(self, *_: Any, **__: Any) -> None:
        """Celery's ``worker_init``, in the worker's main process (before its pool starts)."""
        self._worker_process = os.getpid()

    def in_pool_process(self, *_: Any, **__: Any) -> None:
        """Celery's ``worker_process_init``, sent in each prefork pool process (forked, or a
        fresh interpreter) and, by the solo pool, in the worker's main process. A prefork pool
        process is stopped by a revoke with ``terminate=True``: it does not read cancel
        requests. The solo pool runs its tasks in the main process, which does."""
        if self._worker_process != os.getpid():
            self._pool_process = os.getpid()

    @property
    def reads_cancel_requests(self) -> bool:
        """Whether this process reads the cancel requests of the firings it runs: it runs
        tasks itself (solo, threads), not as a prefork pool process a revoke terminates."""
        return self._pool_process != os.getpid()

    def watch_cancel(self, context: JobExecutionContext) -> None:
        """A firing started in this process: unless a revoke can terminate it (a prefork pool
        process), its cancel request is read from the store while it runs (a forked child
        starts its own watch)."""
        if not self.reads_cancel_requests:
            return
        watch = self._cancels
        if watch is None or watch.pid != os.getpid():
            with self._lock:
                watch = self._cancels
                if watch is None or watch.pid != os.getpid():
                    watch = self._cancels = CancelWatch(self.store)
        watch.watch(context)

    def forget_cancel(self, fire_instance_id: str) -> None:
        """The firing ended: its cancel request is no longer read."""
        watch = self._cancels
        if watch is not None and watch.pid == os.getpid():
            watch.forget(fire_instance_id)

    def record_waiting_ends(self, *_: Any, **__: Any) -> None:
        """Record the ends this process still holds (its pool process, or the worker, stops)."""
        batch = self._batch
        if batch is not None and batch.pid == os.getpid():
            batch.flush()

    def connect(self, signal: Any, receiver: Callable[..., Any]) -> None:
        """Connect ``receiver`` to one of Celery's signals, for as long as the runtime lives."""
        signal.connect(receiver, weak=False)
        self._receivers.append((signal, receiver))

    def close(self) -> None:
        """Disconnect every receiver :meth:`connect` connected and close this process's stores
        (an app whose hooks are no longer wanted: tests)."""
        for signal, receiver in self._receivers:
            signal.disconnect(receiver)
        self._receivers.clear()
        with self._lock:
            stores = [s for (pid, _), s in self._stores.items() if pid == os.getpid()]
        for store in stores:
            store.dispose()


def runtime_of(app: Any) -> WorkerRuntime | None:
    """The runtime of ``app``'s worker hooks; None when they are not installed."""
    runtime = getattr(app, _ATTRIBUTE, None)
    return runtime if isinstance(runtime, WorkerRuntime) else None
