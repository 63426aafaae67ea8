"""The ends the worker records off the task's own path: successes held for a batch, and the
ends of firings whose pool process was lost.

* :class:`CompletionBatch`: the successful ends of one process's executions, recorded together
  by a thread of their own;
* :class:`LostEnds`: in the worker's main process, the firings whose pool process was stopped
  under them (a hard time limit, the OOM killer, a revoke with ``terminate=True``), ended from
  what Celery reports, and the successes a killed pool process held and never recorded.

Both write through :func:`persist`, which waits out a store that does not answer.
"""

from __future__ import annotations

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

from celery.exceptions import Terminated, TimeLimitExceeded, WorkerLostError
from celery.worker import state as worker_state
from sqlalchemy.exc import DBAPIError

from celery_quartz.clock import Clock, to_millis
from celery_quartz.firing import FiringHeader
from celery_quartz.store import WorkerStore
from celery_quartz.store.records import FinishedExecution, ProcessLoss
from celery_quartz.store.views import FiringOutcome

logger = logging.getLogger(__name__)

#: Held while the worker's main process talks to the store, and while it forks a pool process:
#: a child must never start life in the middle of its parent's transaction (with SQLite the
#: child would inherit the parent's view of the file's locks).
STORE_ACCESS = threading.Lock()
os.register_at_fork(
    before=STORE_ACCESS.acquire,
    after_in_parent=STORE_ACCESS.release,
    after_in_child=STORE_ACCESS.release,
)

#: Longest pause between attempts to record a firing's end while the store does not answer.
_PERSIST_MAX_DELAY = 5.0
#: How often a worker still waiting for the store says so again.
_PERSIST_LOG_INTERVAL = 30.0


def persist(write: Callable[[], Any], what: str) -> Any:
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


class CompletionBatch:
    """The successful ends of one process's executions, recorded together.

    An execution whose end releases nothing (its job allows concurrent executions) and whose
    job does not request recovery ends here rather than in a statement of its own: the ends are
    recorded by one statement per scheduler name (:meth:`~celery_quartz.store.abc.WorkerStore.
    complete_executions`) at most ``delay`` seconds after the first of them, at once when
    :data:`_BATCH_SIZE` are waiting, and when the process stops (a pool process's
    ``worker_process_shutdown``, the worker's ``worker_shutdown``, and at exit). Each keeps its
    own finish time, read from ``clock``. What this changes, and what it does not, is in
    ``docs/reliability.md``.
    """

    def __init__(self, store: Callable[[str], WorkerStore], delay: float, clock: Clock) -> None:
        self.pid = os.getpid()
        self.delay = delay
        self._store = store
        self._clock = clock
        self._lock = threading.Lock()
        self._waiting = threading.Condition(self._lock)
        self._ends: dict[str, list[FinishedExecution]] = {}
        self._count = 0
        self._thread: threading.Thread | None = None

    def add(
        self,
        scheduler_name: str,
        fire_instance_id: str,
        summary: str | None = None,
        metrics: str | None = None,
    ) -> None:
        end = FinishedExecution(fire_instance_id, to_millis(self._clock.now()), summary, metrics)
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
                persist(
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
    #: None: revoked before it started (its message discarded), so cancelled.
    loss: ProcessLoss | None


#: How long a stopping worker waits for the lost pool processes' ends still to be written.
_LOST_ENDS_SHUTDOWN_WAIT = 10.0


class LostEnds:
    """In the worker's main process: the firings it received, and the ends of those whose pool
    process was lost, written by a thread of their own (:meth:`~celery_quartz.store.abc.
    WorkerStore.end_lost_execution`), in order, each retried while the store does not answer.

    Its methods ``on_received``, ``on_failure`` and ``on_revoked`` are Celery's signals of the
    same names; a pool process's own signal is left to that process's ``task_postrun``.
    """

    def __init__(self, app: Any, store: Callable[[str], WorkerStore], clock: Clock) -> None:
        self._app = app
        self._store = store
        self._clock = clock
        #: The firings the worker's main process received and Celery still holds (weakly: gone
        #: with Celery's request), by task id; and that process's pid.
        self._received: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
        self._receiving_pid: int | None = None
        #: The scheduler names of the firings the main process received.
        self.scheduler_names: set[str] = set()
        self._queue: queue.Queue[_LostEnd] = queue.Queue()
        self._thread: threading.Thread | None = None

    def on_received(self, sender: Any = None, request: Any = None, **_: Any) -> None:
        """Celery's ``task_received``, in the worker's main process: a firing's request is
        remembered until Celery drops it, in case its pool process is lost (:meth:`on_failure`)."""
        if (
            request is None
            or getattr(request, "task", None) is None
            or request.task.app is not self._app
        ):
            return
        header = FiringHeader.in_headers(getattr(request, "request_dict", None))
        if header is not None:
            self._receiving_pid = os.getpid()
            self._received[request.id] = request
            self.scheduler_names.add(header.scheduler_name)

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
        expired: bool = False,
        **_: Any,
    ) -> None:
        """Celery's ``task_revoked`` (always in the worker's main process, where Celery's
        requests live): a firing revoked with ``terminate=True`` while it ran, or one revoked
        before it started (its message discarded by this worker; not one whose message
        expired, which its scheduler resolves)."""
        if request is None:
            return
        if terminated:
            stopped = Terminated(f"revoked with terminate (signal {signum})")
            self._stopped(request.id, stopped, ProcessLoss.TERMINATED)
        elif not expired:
            self._discarded(request)

    def _discarded(self, request: Any) -> None:
        """A firing's message discarded unstarted because it was revoked: cancelled."""
        header = FiringHeader.of_request(request)
        if header is None:
            return
        self._put(
            _LostEnd(
                scheduler_name=header.scheduler_name,
                fire_instance_id=header.fire_instance_id,
                worker_name=getattr(request, "hostname", None) or "unknown",
                outcome=FiringOutcome(),
                loss=None,
            )
        )

    def _stopped(self, task_id: str | None, exception: BaseException, loss: ProcessLoss) -> None:
        """End the firing of ``task_id`` as ``loss`` says, if it is one this process received
        and ran in a pool process. The end is written by a thread, so that Celery's event loop
        never waits on the store."""
        if task_id is None or os.getpid() != self._receiving_pid:
            return  # a pool process's own signal: its task_postrun ends the firing
        if worker_state.should_terminate:
            return  # a cold shutdown: the worker's executions are recovered as a dead worker's
        request = self._received.pop(task_id, None)
        if request is None or getattr(request, "worker_pid", None) == os.getpid():
            return  # not a firing, or it ran in this process, whose task_postrun ends it
        header = FiringHeader.in_headers(request.request_dict)
        assert header is not None  # received as a firing
        self._put(
            _LostEnd(
                scheduler_name=header.scheduler_name,
                fire_instance_id=header.fire_instance_id,
                worker_name=request.hostname or "unknown",
                outcome=FiringOutcome.of_exception(exception),
                loss=loss,
            )
        )

    def _put(self, end: _LostEnd) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="celery-quartz-lost-ends", daemon=True
            )
            self._thread.start()
        self._queue.put(end)

    def record_orphaned_successes(self, worker_name: str) -> int:
        """In the worker's main process, once a pool process has stopped: the successes it held
        for a batch (:class:`CompletionBatch`) and never recorded, because it was killed (the
        OOM killer, a signal), are recorded as succeeded now. How many.

        Such a firing is EXECUTING on this worker, and Celery counts its message as succeeded
        and no longer holds it: every other end is recorded before the pool process hands its
        result back, so nothing but a held success looks like that. A live pool process may
        record one of them too; the firing succeeded either way, and the first write wins. The
        finish time recorded is now: the real one was lost with the process."""
        recorded = 0
        for scheduler_name in sorted(self.scheduler_names):
            with STORE_ACCESS:
                store = self._store(scheduler_name)
                executing = store.executing_task_ids(worker_name)
            if not executing:
                continue
            # After the read: a firing executing then is still held by Celery if it still runs.
            held = {request.id for request in tuple(worker_state.reserved_requests)}
            succeeded = worker_state.successful_requests
            now = to_millis(self._clock.now())
            ends = [
                FinishedExecution(fire_id, now)
                for task_id, fire_id in executing.items()
                if task_id in succeeded and task_id not in held
            ]
            if not ends:
                continue
            with STORE_ACCESS:
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
        if self._thread is not None:
            self.wait(timeout=_LOST_ENDS_SHUTDOWN_WAIT)

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
            with STORE_ACCESS:
                store = self._store(end.scheduler_name)
                if end.loss is None:
                    cancelled = store.cancel_firing(end.fire_instance_id, end.worker_name)
                    return "cancelled" if cancelled else "not cancelled"
                return store.end_lost_execution(
                    end.fire_instance_id, end.worker_name, end.outcome, loss=end.loss
                )

        if persist(write, f"firing {end.fire_instance_id}") is None:
            logger.info(
                "firing %s: its pool process stopped (%s), but it is not executing on %s: "
                "nothing to end",
                end.fire_instance_id,
                end.outcome.error_type,
                end.worker_name,
            )
