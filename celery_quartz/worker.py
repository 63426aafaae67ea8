"""Worker-side hooks: one execution start per firing, and completion of every firing.

``celery_quartz.install(app)`` (one line, in the module that creates the app) wraps every task's
``before_start`` with a guard and listens to ``task_postrun``:

* at start, the firing's row goes FIRED/PUBLISHED → EXECUTING with this worker's node name, by a
  conditional update; a second delivery of the same firing matches nothing and is dropped
  (``Ignore``) before the task body runs;
* at the end (success or failure), the row is removed and what waited on it is released; a task
  that asked Celery to retry it keeps its firing in flight for the next delivery; a failure is
  handed to the trigger's retry policy in the same transaction (see :mod:`celery_quartz.retry`).
  A success whose end releases nothing is recorded with the process's other such ends, at most
  ``quartz_worker_completion_delay`` seconds later (:class:`_CompletionBatch`);
* a pool process stopped while running a firing (its hard time limit, the OOM killer, a revoke
  with ``terminate=True``) cannot record the end: the worker's main process does, when Celery
  reports it (:class:`_LostEnds`).

Messages that did not come from celery-quartz pass through untouched.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from celery import Celery, Task, bootsteps
from celery.exceptions import Ignore, Terminated, TimeLimitExceeded, WorkerLostError
from celery.signals import (
    task_failure,
    task_postrun,
    task_received,
    task_revoked,
    worker_process_shutdown,
    worker_shutdown,
)
from celery.states import FAILURE, RETRY
from celery.worker import state as worker_state
from sqlalchemy.exc import DBAPIError

from celery_quartz.clock import SystemClock, to_millis
from celery_quartz.config import Settings
from celery_quartz.context import JobExecutionContext, firing_header
from celery_quartz.errors import RefireJob
from celery_quartz.firing import HEADER
from celery_quartz.store import Store, check_worker_schema, open_store
from celery_quartz.store.records import FinishedExecution, ProcessLoss
from celery_quartz.store.views import FiringOutcome

logger = logging.getLogger(__name__)

_GUARDED = "_celery_quartz_guarded"


def install(app: Celery) -> None:
    """Install the worker-side hooks on ``app``; idempotent. Call it where the app is created."""
    if getattr(app, "_celery_quartz_installed", False):
        return
    app._celery_quartz_installed = True
    hooks = _WorkerHooks(app)
    app._celery_quartz_hooks = hooks
    from celery_quartz.observability.execution import ExecutionInstrumentation
    from celery_quartz.observability.workerhealth import register_health_command

    instrumentation = ExecutionInstrumentation()
    hooks.middleware.append(instrumentation)
    task_postrun.connect(instrumentation.on_postrun, weak=False)
    register_health_command()
    app.on_after_finalize.connect(lambda sender, **_: hooks.guard_tasks(), weak=False)
    if app.finalized:
        hooks.guard_tasks()
    task_postrun.connect(hooks.on_postrun, weak=False)
    task_received.connect(hooks.on_received, weak=False)
    task_failure.connect(hooks.on_failure, weak=False)
    task_revoked.connect(hooks.on_revoked, weak=False)
    # Before the check-in's own receiver (connected when the worker starts): the ends still
    # waiting are recorded before the worker's check-in row is removed.
    worker_process_shutdown.connect(hooks.record_waiting_ends, weak=False)
    worker_shutdown.connect(hooks.record_waiting_ends, weak=False)
    worker_shutdown.connect(hooks.record_lost_ends, weak=False)
    atexit.register(hooks.record_waiting_ends)
    app.steps["worker"].add(WorkerCheckIn)


class _WorkerHooks:
    def __init__(self, app: Celery) -> None:
        self.app = app
        self._stores: dict[tuple[int, str], Store] = {}
        self._lock = threading.Lock()
        #: Told of each start recorded (``after_start(task, context)``) and refused
        #: (``refused(task, fire_instance_id, header, reason)``), beside the core: instrumentation.
        self.middleware: list[Any] = []
        self._batch: _CompletionBatch | None = None
        #: The firings the worker's main process received and Celery still holds (weakly: gone
        #: with Celery's request), by task id; and that process's pid.
        self._received: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
        self._receiving_pid: int | None = None
        self._lost_ends: _LostEnds | None = None
        #: The scheduler names of the firings the main process received.
        self.scheduler_names: set[str] = set()

    @property
    def batch(self) -> _CompletionBatch:
        """This process's batch of successful ends (a forked child starts its own)."""
        batch = self._batch
        if batch is None or batch.pid != os.getpid():
            with self._lock:
                batch = self._batch
                if batch is None or batch.pid != os.getpid():
                    delay = Settings.from_app(self.app).worker_completion_delay
                    batch = self._batch = _CompletionBatch(self.store, delay)
        return batch

    def record_waiting_ends(self, *_: Any, **__: Any) -> None:
        """Record the ends this process still holds (its pool process, or the worker, stops)."""
        batch = self._batch
        if batch is not None and batch.pid == os.getpid():
            batch.flush()

    def on_received(self, sender: Any = None, request: Any = None, **_: Any) -> None:
        """Celery's ``task_received``, in the worker's main process: a firing's request is
        remembered until Celery drops it, in case its pool process is lost (:meth:`on_failure`)."""
        if (
            request is None
            or getattr(request, "task", None) is None
            or request.task.app is not self.app
        ):
            return
        header = (getattr(request, "request_dict", None) or {}).get(HEADER)
        if isinstance(header, dict):
            self._receiving_pid = os.getpid()
            self._received[request.id] = request
            self.scheduler_names.add(header["scheduler"])

    def on_failure(
        self,
        sender: Any = None,
        task_id: str | None = None,
        exception: BaseException | None = None,
        **_: Any,
    ) -> None:
        """Celery's ``task_failure``: a firing whose pool process was killed at its hard time
        limit, or died, is ended from the worker's main process, which Celery tells; the
        process that would have recorded the end is gone."""
        if isinstance(exception, TimeLimitExceeded):
            self._stopped(task_id, exception, ProcessLoss.TIMED_OUT)
        elif isinstance(exception, WorkerLostError):
            self._stopped(task_id, exception, ProcessLoss.CRASHED)

    def on_revoked(
        self,
        sender: Any = None,
        request: Any = None,
        terminated: bool = False,
        signum: Any = None,
        **_: Any,
    ) -> None:
        """Celery's ``task_revoked``: a firing revoked with ``terminate=True`` while it ran."""
        if terminated and request is not None:
            stopped = Terminated(f"revoked with terminate (signal {signum})")
            self._stopped(request.id, stopped, ProcessLoss.TERMINATED)

    def _stopped(self, task_id: str | None, exception: BaseException, loss: ProcessLoss) -> None:
        """End the firing of ``task_id`` as ``loss`` says, if it is one this process received
        and ran in a pool process. The end is written by a thread (:class:`_LostEnds`), so that
        Celery's event loop never waits on the store."""
        if task_id is None or os.getpid() != self._receiving_pid:
            return  # a pool process's own signal: its task_postrun ends the firing
        if worker_state.should_terminate:
            return  # a cold shutdown: the worker's executions are recovered as a dead worker's
        request = self._received.pop(task_id, None)
        if request is None or getattr(request, "worker_pid", None) == os.getpid():
            return  # not a firing, or it ran in this process, whose task_postrun ends it
        header = request.request_dict[HEADER]
        lost = self._lost_ends
        if lost is None:
            lost = self._lost_ends = _LostEnds(self.store)
        lost.add(
            _LostEnd(
                scheduler_name=header["scheduler"],
                fire_instance_id=str(header.get("fire_instance_id") or task_id),
                worker_name=request.hostname or "unknown",
                outcome=FiringOutcome.of_exception(exception),
                loss=loss,
            )
        )

    def record_orphaned_successes(self, worker_name: str) -> int:
        """In the worker's main process, once a pool process has stopped: the successes it held
        for a batch (:class:`_CompletionBatch`) and never recorded, because it was killed (the
        OOM killer, a signal), are recorded as succeeded now. How many.

        Such a firing is EXECUTING on this worker, and Celery counts its message as succeeded
        and no longer holds it: every other end is recorded before the pool process hands its
        result back, so nothing but a held success looks like that. A live pool process may
        record one of them too; the firing succeeded either way, and the first write wins. The
        finish time recorded is now: the real one was lost with the process."""
        recorded = 0
        for scheduler_name in sorted(self.scheduler_names):
            with _STORE_ACCESS:
                store = self.store(scheduler_name)
                executing = store.executing_task_ids(worker_name)
            if not executing:
                continue
            # After the read: a firing executing then is still held by Celery if it still runs.
            held = {request.id for request in tuple(worker_state.reserved_requests)}
            succeeded = worker_state.successful_requests
            now = to_millis(SystemClock().now())
            ends = [
                FinishedExecution(fire_id, now)
                for task_id, fire_id in executing.items()
                if task_id in succeeded and task_id not in held
            ]
            if not ends:
                continue
            with _STORE_ACCESS:
                done = store.complete_executions(ends)
            recorded += done
            logger.warning(
                "worker %s: %d firing(s) of %r that a stopped pool process had run and not yet "
                "recorded are recorded as succeeded: %s",
                worker_name,
                done,
                scheduler_name,
                ", ".join(end.fire_instance_id for end in ends),
            )
        return recorded

    def record_lost_ends(self, *_: Any, **__: Any) -> None:
        """At the worker's shutdown: the lost pool processes' ends not yet written are."""
        if self._lost_ends is not None:
            self._lost_ends.wait(timeout=_LOST_ENDS_SHUTDOWN_WAIT)

    def store(self, scheduler_name: str) -> Store:
        """This process's store for ``scheduler_name`` (engines are not shared across a fork)."""
        key = (os.getpid(), scheduler_name)
        with self._lock:
            store = self._stores.get(key)
            if store is None:
                # No pre-ping (a round trip per transaction): a connection broken by a database
                # restart fails its statement, and both hooks retry through an outage.
                # A pool as large as a threads-pool worker's concurrency is likely to be: each
                # thread keeps its connection instead of opening one per task past the fifth
                # (connections are opened only when threads need them at once).
                store = open_store(
                    Settings.from_app(self.app),
                    scheduler_name=scheduler_name,
                    pre_ping=False,
                    pool_size=_POOL_SIZE,
                )
                self._stores[key] = store
            return store

    def guard_tasks(self) -> None:
        for task in list(self.app.tasks.values()):
            _guard_class(type(task), self)

    def before_start(self, task: Task, task_id: str) -> None:
        request = task.request
        header = firing_header(request)
        if header is None or getattr(request, "quartz_task_id", None) == task_id:
            return
        # The message's task id is the fire instance id, suffixed once the firing has been
        # published again after an expiry (:attr:`celery_quartz.firing.Firing.task_id`).
        fire_id = str(header.get("fire_instance_id") or task_id)
        worker = request.hostname or "unknown"
        uncertain = _custom_headers(request).get(_UNCERTAIN_START)
        try:
            started = self.store(header["scheduler"]).start_execution(
                fire_id, worker, restart_from=uncertain
            )
        except DBAPIError:
            # The store did not answer (a restart, a blip): deliver the same firing again shortly
            # rather than run it unrecorded or lose it. Whether this start was recorded before
            # the connection broke is unknown; the next delivery may take over from this worker.
            logger.warning("firing %s: the store did not answer; retrying in 1 s", fire_id)
            headers = {**_custom_headers(request), HEADER: header, _UNCERTAIN_START: worker}
            for m in self.middleware:
                m.refused(task, fire_id, header, "the store did not answer; held back")
            raise task.retry(countdown=1, max_retries=None, headers=headers) from None
        if started is None:
            logger.info(
                "firing %s of trigger %s is already executing or complete: not starting it again",
                fire_id,
                ".".join(reversed(header["trigger"])),
            )
            for m in self.middleware:
                m.refused(task, fire_id, header, "already executing or complete")
            raise Ignore()
        request.quartz_task_id = task_id
        request.quartz_batchable = started.batchable
        request.quartz_context = context = JobExecutionContext.from_header(header, worker)
        for m in self.middleware:
            m.after_start(task, context)

    def on_postrun(
        self,
        sender: Any = None,
        task_id: str | None = None,
        task: Task | None = None,
        state: str | None = None,
        retval: Any = None,
        **_: Any,
    ) -> None:
        if task is None or task.app is not self.app:
            return
        request = task.request
        if task_id is None or getattr(request, "quartz_task_id", None) != task_id:
            return
        context: JobExecutionContext = request.quartz_context
        request.quartz_task_id = None
        if state is None:
            # No outcome: a SystemExit or KeyboardInterrupt went through the task, this process
            # being stopped under it (the SIGTERM of a hard time limit or of a revoke with
            # terminate, a cold shutdown). Its end is not a success: it is left to the worker's
            # main process (:meth:`_stopped`), or to the recovery of a dead worker.
            return
        store = self.store(context.scheduler_name)
        fire_id = context.fire_instance_id
        if state == RETRY:
            _persist(lambda: store.return_to_published(fire_id), f"firing {fire_id}")
        elif isinstance(retval, RefireJob):
            self._refire(task, store, context, task_id)
        else:
            header = firing_header(request) or {}
            job_data = context.job_data if header.get("persist_job_data") else None
            # Only an exception counts as a failure: Ignore and Reject end as IGNORED/REJECTED.
            failed = state == FAILURE
            if not failed and job_data is None and getattr(request, "quartz_batchable", False):
                batch = self.batch
                if batch.delay > 0:
                    batch.add(context.scheduler_name, fire_id)
                    return
            # Kept on the trigger as its last outcome, in the completion's own transaction.
            outcome = (
                FiringOutcome.of_exception(retval)
                if failed and isinstance(retval, BaseException)
                else FiringOutcome(failed=failed)
            )
            _persist(
                lambda: store.complete_execution(
                    fire_id, job_data=job_data, failed=failed, outcome=outcome
                ),
                f"firing {fire_id}",
            )

    def _refire(self, task: Task, store: Store, context: JobExecutionContext, task_id: str) -> None:
        """Run the same firing again at once, with ``refire_count`` one higher (the same
        message task id: its message ran, so no worker has it revoked)."""
        fire_id = context.fire_instance_id
        if not _persist(
            lambda: store.return_to_published(fire_id, refire=True), f"firing {fire_id}"
        ):
            return
        request = task.request
        header = dict(firing_header(request) or {})
        header["refire_count"] = context.refire_count + 1
        delivery = request.delivery_info or {}
        task.apply_async(
            args=request.args,
            kwargs=request.kwargs,
            task_id=task_id,
            headers={HEADER: header},
            serializer="json",
            exchange=delivery.get("exchange"),
            routing_key=delivery.get("routing_key"),
        )
        logger.info("firing %s refired (refire count %d)", fire_id, context.refire_count + 1)


#: Header of a firing re-delivered after a start whose recording is uncertain: names the worker.
_UNCERTAIN_START = "quartz_uncertain_start"


def _custom_headers(request: Any) -> dict[str, Any]:
    headers = getattr(request, "headers", None)
    return dict(headers) if isinstance(headers, dict) else {}


#: Connections a worker process's store keeps open.
_POOL_SIZE = 32

#: Longest pause between attempts to record a firing's end while the store does not answer.
_PERSIST_MAX_DELAY = 5.0
#: How often a worker still waiting for the store says so again.
_PERSIST_LOG_INTERVAL = 30.0


def _persist(write: Callable[[], Any], what: str) -> Any:
    """Run a store write for ``what`` (``"firing <id>"``), retrying until the store answers.

    A completion that is never recorded would leave the firing in flight for ever (and a
    disallow_concurrent job blocked), however long the database is down, so the outage is waited
    out here: nothing can start meanwhile anyway (a start needs the store too). A worker stopped
    while it waits (a cold shutdown) leaves the firing EXECUTING on a worker whose check-ins
    stop, and the schedulers recover it as they recover any dead worker's executions.
    """
    delay = 0.2
    began = time.monotonic()
    next_log = began
    while True:
        try:
            result = write()
        except DBAPIError:
            now = time.monotonic()
            if now >= next_log:
                logger.warning(
                    "%s: the store did not answer for %.0fs; still retrying to record the end",
                    what,
                    now - began,
                )
                next_log = now + _PERSIST_LOG_INTERVAL
            time.sleep(delay)
            delay = min(delay * 2, _PERSIST_MAX_DELAY)
            continue
        if time.monotonic() - began > 1.0:
            logger.info("%s: the end recorded after %.0fs", what, time.monotonic() - began)
        return result


#: Most ends a batch holds: one more records them at once.
_BATCH_SIZE = 200


class _CompletionBatch:
    """The successful ends of one process's executions, recorded together.

    An execution whose end releases nothing (its job allows concurrent executions) and whose
    job does not request recovery ends here rather than in a statement of its own: the ends are
    recorded by one statement per scheduler name (:meth:`~celery_quartz.store.abc.WorkerStore.
    complete_executions`) at most ``delay`` seconds after the first of them, at once when
    :data:`_BATCH_SIZE` are waiting, and when the process stops (a pool process's
    ``worker_process_shutdown``, the worker's ``worker_shutdown``, and at exit). Each keeps its
    own finish time. What this changes, and what it does not, is in ``docs/reliability.md``.
    """

    def __init__(self, store: Callable[[str], Store], delay: float) -> None:
        self.pid = os.getpid()
        self.delay = delay
        self._store = store
        self._clock = SystemClock()
        self._lock = threading.Lock()
        self._waiting = threading.Condition(self._lock)
        self._ends: dict[str, list[FinishedExecution]] = {}
        self._count = 0
        self._thread: threading.Thread | None = None

    def add(self, scheduler_name: str, fire_instance_id: str) -> None:
        end = FinishedExecution(fire_instance_id, to_millis(self._clock.now()))
        with self._lock:
            self._ends.setdefault(scheduler_name, []).append(end)
            self._count += 1
            full = self._count >= _BATCH_SIZE
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="celery-quartz-completions", daemon=True
                )
                self._thread.start()
            self._waiting.notify()
        if full:
            self.flush()

    def flush(self) -> None:
        """Record every end waiting now (retrying while the store does not answer). Ends that
        fail otherwise are kept for the next attempt, and the error is raised."""
        with self._lock:
            ends, self._ends, self._count = self._ends, {}, 0
        for scheduler_name in list(ends):
            batch = ends[scheduler_name]
            try:
                store = self._store(scheduler_name)
                _persist(
                    functools.partial(store.complete_executions, batch),
                    f"{len(batch)} firing(s) of {scheduler_name!r}",
                )
            except BaseException:
                with self._lock:
                    for name, kept in ends.items():
                        self._ends[name] = kept + self._ends.get(name, [])
                        self._count += len(kept)
                raise
            del ends[scheduler_name]

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._count:
                    self._waiting.wait()
            time.sleep(self.delay)
            try:
                self.flush()
            except Exception:  # kept: the next round, an add or the process's stop records them
                logger.exception("recording a batch of firings' ends failed; trying again in 1 s")
                time.sleep(1.0)


@dataclass(frozen=True)
class _LostEnd:
    scheduler_name: str
    fire_instance_id: str
    worker_name: str
    outcome: FiringOutcome
    loss: ProcessLoss


#: How long a stopping worker waits for the lost pool processes' ends still to be written.
_LOST_ENDS_SHUTDOWN_WAIT = 10.0


class _LostEnds:
    """The ends of firings whose pool process was lost, written from the worker's main process
    by a thread of their own (:meth:`~celery_quartz.store.abc.WorkerStore.end_lost_execution`),
    in order, each retried while the store does not answer."""

    def __init__(self, store: Callable[[str], Store]) -> None:
        self._store = store
        self._queue: queue.Queue[_LostEnd] = queue.Queue()
        self._thread = threading.Thread(
            target=self._run, name="celery-quartz-lost-ends", daemon=True
        )
        self._thread.start()

    def add(self, end: _LostEnd) -> None:
        self._queue.put(end)

    def wait(self, timeout: float) -> bool:
        """Wait until every end added is written; False if some still wait after ``timeout``."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def _run(self) -> None:
        while True:
            end = self._queue.get()
            try:
                self._write(end)
            except Exception:
                logger.exception(
                    "firing %s: recording its lost execution failed", end.fire_instance_id
                )
            finally:
                self._queue.task_done()

    def _write(self, end: _LostEnd) -> None:
        def write() -> str | None:
            # The store opened under the lock as well: a pool process forked meanwhile must not
            # inherit the hooks' lock, or an engine's, held by this thread.
            with _STORE_ACCESS:
                return self._store(end.scheduler_name).end_lost_execution(
                    end.fire_instance_id, end.worker_name, end.outcome, loss=end.loss
                )

        if _persist(write, f"firing {end.fire_instance_id}") is None:
            logger.info(
                "firing %s: its pool process stopped (%s), but it is not executing on %s: "
                "nothing to end",
                end.fire_instance_id,
                end.outcome.error_type,
                end.worker_name,
            )


def _guard_class(cls: type[Task], hooks: _WorkerHooks) -> None:
    if cls.__dict__.get(_GUARDED):
        return
    original = cls.before_start

    def before_start(self: Task, task_id: str, args: Any, kwargs: Any) -> None:
        hooks.before_start(self, task_id)
        original(self, task_id, args, kwargs)

    cls.before_start = before_start
    setattr(cls, _GUARDED, True)


#: Held while the worker's main process talks to the store, and while it forks a pool process:
#: a child must never start life in the middle of its parent's transaction (with SQLite the
#: child would inherit the parent's view of the file's locks).
_STORE_ACCESS = threading.Lock()
os.register_at_fork(
    before=_STORE_ACCESS.acquire,
    after_in_parent=_STORE_ACCESS.release,
    after_in_child=_STORE_ACCESS.release,
)


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
        self._store: Store | None = None
        #: When this worker last checked in (``time.time()``), None before the first; read by
        #: the ``quartz_health`` remote-control command.
        self.last_checkin: float | None = None
        self.interval: float | None = None
        self.queues: list[str] = []
        #: The prefork pool's processes at the last check-in (None: not a prefork pool, or
        #: not seen yet).
        self._pool_processes: frozenset[int] | None = None
        #: A pool process stopped, and the successes it may have held are not recorded yet.
        self._orphans_pending = False

    def start(self, parent: Any) -> None:
        settings = Settings.from_app(parent.app)
        parent.app._celery_quartz_checkin = self
        # Tables older than this version stop the worker here, with auto-upgrade off, rather than
        # fail each firing it starts.
        check_worker_schema(settings)
        self._store = open_store(settings)
        queues = sorted(parent.app.amqp.queues.consume_from)
        name = parent.hostname
        # Before consuming: whatever this node name was executing belongs to a previous life of
        # the worker (killed, and restarted under the same name), which no one else will recover.
        try:
            with _STORE_ACCESS:
                recovery = self._store.recover_worker(name, seen_checkin_millis=None)
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
        interval = self.interval = settings.checkin_interval
        self.queues = queues
        store = self._store

        hooks: _WorkerHooks | None = getattr(parent.app, "_celery_quartz_hooks", None)

        def run() -> None:
            while not self._stop.is_set():
                try:
                    with _STORE_ACCESS:
                        self._check_in(store, name, interval, queues, concurrency)
                    self.last_checkin = time.time()
                    wait = interval
                except Exception:
                    logger.exception("worker %s: check-in failed; retrying in 1 s", name)
                    wait = min(1.0, interval)
                if hooks is not None and self._pool_process_stopped(parent):
                    self._orphans_pending = True
                if hooks is not None and self._orphans_pending:
                    try:
                        hooks.record_orphaned_successes(name)
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
        store: Store, name: str, interval: float, queues: list[str], concurrency: Any
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
