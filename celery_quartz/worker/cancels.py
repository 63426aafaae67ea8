"""The cancel requests a process learns from the store, for the runs its pool cannot terminate
(``current_context().cancelled``).

A trigger's overlap policy ``cancel_previous`` revokes the firing it replaces through Celery's
remote control, and its claim marks that firing's row cancel-requested. A prefork pool process
is terminated by the revoke; a threads pool records the revoked id; but a solo worker reads no
remote-control message while its task runs. So, in a process that runs tasks itself (not a
prefork pool process), a thread of its own asks the store, at most once every
:data:`INTERVAL` seconds and only while firings run here, which of them are cancel-requested
(one read per scheduler name), and tells their contexts
(:meth:`~celery_quartz.context.JobExecutionContext.note_cancel_requested`). The task is never
blocked; a read the store refuses is logged and made again at the next round.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from celery_quartz.context import JobExecutionContext
from celery_quartz.store import WorkerStore

logger = logging.getLogger(__name__)

#: Shortest time between two reads of the cancel requests, in seconds.
INTERVAL = 1.0


class CancelWatch:
    """One process's running firings, and the thread that reads their cancel requests."""

    def __init__(self, store: Callable[[str], WorkerStore]) -> None:
        self.pid = os.getpid()
        self._store = store
        self._lock = threading.Lock()
        self._running: dict[str, JobExecutionContext] = {}
        self._busy = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, context: JobExecutionContext) -> None:
        """``context``'s firing started in this process: read its cancel request from now on."""
        with self._lock:
            self._running[context.fire_instance_id] = context
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="celery-quartz-cancels", daemon=True
                )
                self._thread.start()
        self._busy.set()

    def forget(self, fire_instance_id: str) -> None:
        """The firing ended (its context keeps what was read)."""
        with self._lock:
            self._running.pop(fire_instance_id, None)
            if not self._running:
                self._busy.clear()

    def read_requests(self) -> int:
        """Ask the store which running firings not yet known cancelled are cancel-requested,
        and tell their contexts; how many were told."""
        by_scheduler: dict[str, list[JobExecutionContext]] = {}
        with self._lock:
            for context in self._running.values():
                if not context.cancelled:
                    by_scheduler.setdefault(context.scheduler_name, []).append(context)
        told = 0
        for scheduler_name, contexts in by_scheduler.items():
            try:
                requested = self._store(scheduler_name).cancel_requested(
                    [c.fire_instance_id for c in contexts]
                )
            except Exception:  # read again at the next round
                logger.warning(
                    "reading the cancel requests of %d firing(s) of %r failed",
                    len(contexts),
                    scheduler_name,
                    exc_info=True,
                )
                continue
            for context in contexts:
                if context.fire_instance_id in requested:
                    context.note_cancel_requested()
                    told += 1
                    logger.info(
                        "firing %s of trigger %s: cancel requested (a later firing of its "
                        "trigger replaced it); current_context().cancelled is now true",
                        context.fire_instance_id,
                        context.trigger_key,
                    )
        return told

    def _run(self) -> None:
        while True:
            self._busy.wait()
            time.sleep(INTERVAL)
            try:
                self.read_requests()
            except Exception:
                logger.exception("the cancel watch failed; going on")
