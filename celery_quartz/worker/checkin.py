"""The worker's check-in, so its liveness is known from the database alone, and
``celery -A proj inspect quartz_health``, which asks a worker whether it is checking in."""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from celery import bootsteps
from celery.signals import worker_shutdown
from celery.worker.control import inspect_command
from sqlalchemy.exc import DBAPIError

from celery_quartz.store import ClusterStore, WorkerNodeStore, check_worker_schema
from celery_quartz.worker.ends import STORE_ACCESS
from celery_quartz.worker.runtime import WorkerRuntime, runtime_of

logger = logging.getLogger(__name__)


class WorkerCheckIn(bootsteps.StartStopStep):
    """Checks the worker in to the store, so its liveness is known from the database alone.

    Every ``quartz_checkin_interval`` seconds, from a thread of the worker's main process: the
    node name (``celery@host``), the queues it consumes and its concurrency. A check-in that fails
    (a database blip) is retried after a second, inside the detection window, not a whole interval
    later. After a warm shutdown (the running tasks are done) the row is removed; after a cold one
    it is left to age, and the schedulers recover what the worker was running.
    """

    label = "celery-quartz check-in"

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._store: WorkerNodeStore | None = None
        #: The prefork pool's processes at the last check-in (None: not a prefork pool, or
        #: not seen yet).
        self._pool_processes: frozenset[int] | None = None
        #: A pool process stopped, and the successes it may have held are not recorded yet.
        self._orphans_pending = False

    def start(self, parent: Any) -> None:
        runtime = runtime_of(parent.app)
        assert runtime is not None, "added to the worker's steps by celery_quartz.install"
        settings = runtime.settings
        # Tables older than this version stop the worker here, with auto-upgrade off, rather than
        # fail each firing it starts.
        check_worker_schema(settings)
        store = self._store = runtime.store(settings.scheduler_name)
        queues = sorted(parent.app.amqp.queues.consume_from)
        name = parent.hostname
        # Before consuming: whatever this node name was executing belongs to a previous life of
        # the worker (killed, and restarted under the same name), which no one else will recover.
        try:
            with STORE_ACCESS:
                recovery = store.recover_worker(name, seen_checkin_millis=None)
            if recovery and (recovery.recovered or recovery.interrupted):
                logger.info(
                    "worker %s: %d firing(s) of a previous run recovered, %d closed as interrupted",
                    name,
                    recovery.recovered,
                    recovery.interrupted,
                )
        except DBAPIError:
            logger.exception("worker %s: could not recover a previous run's firings", name)
        concurrency = getattr(parent, "concurrency", None)
        interval = settings.checkin_interval
        status = runtime.checkin
        status.interval = interval
        status.queues = queues

        def run() -> None:
            while not self._stop.is_set():
                try:
                    with STORE_ACCESS:
                        self._check_in(store, name, interval, queues, concurrency)
                    status.last_checkin = runtime.clock.now()
                    wait = interval
                except Exception:
                    logger.exception("worker %s: check-in failed; retrying in 1 s", name)
                    wait = min(1.0, interval)
                if self._pool_process_stopped(parent):
                    self._orphans_pending = True
                if self._orphans_pending:
                    try:
                        runtime.lost_ends.record_orphaned_successes(name)
                        self._orphans_pending = False
                    except Exception:
                        logger.exception(
                            "worker %s: recording a stopped pool process's successes failed; "
                            "trying again at the next check-in",
                            name,
                        )
                self._stop.wait(wait)

        self._thread = threading.Thread(target=run, name="celery-quartz-checkin", daemon=True)
        self._thread.start()
        worker_shutdown.connect(self._on_worker_shutdown, sender=parent, weak=False)
        logger.info(
            "worker %s checks in every %.1fs (queues %s)", name, interval, ", ".join(queues)
        )

    def _pool_process_stopped(self, parent: Any) -> bool:
        """Whether a process of the worker's prefork pool has stopped since the last look
        (the pool's own ``info``, as ``celery inspect stats`` shows it)."""
        try:
            processes = parent.pool.info.get("processes")
        except Exception:  # not started yet, stopping, or a pool without processes
            return False
        if not isinstance(processes, list) or not processes:
            return False
        seen, self._pool_processes = self._pool_processes, frozenset(processes)
        return seen is not None and not seen <= self._pool_processes

    @staticmethod
    def _check_in(
        store: ClusterStore, name: str, interval: float, queues: list[str], concurrency: Any
    ) -> None:
        store.check_in(
            name,
            interval=interval,
            kind="worker",
            hostname=name.partition("@")[2] or None,
            pid=os.getpid(),
            queues=queues,
            concurrency=concurrency,
        )

    def stop(self, parent: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _on_worker_shutdown(self, sender: Any = None, **_: Any) -> None:
        # Sent after a warm shutdown has drained the pool: nothing of ours is running any more.
        if self._store is None:
            return
        try:
            self._store.remove_check_in(sender.hostname)
        finally:
            self._store.dispose()
            self._store = None


def worker_health(runtime: WorkerRuntime | None, hostname: str | None = None) -> dict[str, Any]:
    """A worker's hook report: ``status`` is ``healthy`` when the hooks are installed
    (``runtime``) and the last check-in is recent (its interval plus the check-in misfire
    threshold), ``unhealthy`` otherwise."""
    last = interval = None
    queues: list[str] = []
    age = None
    if runtime is not None:
        status = runtime.checkin
        last, interval, queues = status.last_checkin, status.interval, status.queues
        if last is not None:
            age = (runtime.clock.now() - last).total_seconds()
    interval = interval or 0.0
    checking_in = (
        runtime is not None
        and age is not None
        and age <= interval + runtime.settings.checkin_misfire_threshold
    )
    report: dict[str, Any] = {
        "status": "healthy" if checking_in else "unhealthy",
        "hooks_installed": runtime is not None,
        "checking_in": checking_in,
        "last_checkin_age": None if age is None else round(age, 3),
        "checkin_interval": interval,
        "queues": list(queues),
    }
    if hostname:
        report["node"] = hostname
    return report


_registered = False


def register_health_command() -> None:
    """Register ``quartz_health`` with Celery's remote control (once per process). A worker
    started without the hooks does not know the command, and ``inspect`` shows it answering
    nothing (or an error) for it, which is the answer."""
    global _registered
    if _registered:
        return
    _registered = True

    @inspect_command()
    def quartz_health(state: Any, **kwargs: Any) -> dict[str, Any]:
        """celery-quartz: whether this worker's hooks are installed and checking in."""
        consumer = state.consumer
        return worker_health(runtime_of(consumer.app), getattr(consumer, "hostname", None))
