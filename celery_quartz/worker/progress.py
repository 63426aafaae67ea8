"""The progress running tasks report (``current_context().report_progress``), written off the
task's path.

A report only replaces the firing's latest one in memory (a lock held for a dictionary update:
the task never waits on the store). A thread of its own writes, for each firing, the latest
report at most once every :data:`MIN_INTERVAL` seconds and only when it changed, all firings due
in one statement per scheduler name. Progress is shown, not kept: a write the store refuses is
logged and the next report is written instead, and a report that arrives after its firing ended
changes nothing.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from celery_quartz.clock import Clock, to_millis
from celery_quartz.context import JobExecutionContext
from celery_quartz.store import WorkerStore
from celery_quartz.store.records import ProgressReport

logger = logging.getLogger(__name__)

#: Shortest time between two writes of one firing's progress, in seconds.
MIN_INTERVAL = 1.0
#: How often the writer looks for reports to write, in seconds.
_TICK = 0.25


@dataclass
class _Latest:
    scheduler_name: str
    report: ProgressReport
    #: What was last written (percent, message), and when (monotonic seconds).
    written: tuple[float, str | None] | None = None
    written_at: float = float("-inf")


class ProgressWriter:
    """One process's progress reports, and the thread that writes them."""

    def __init__(self, store: Callable[[str], WorkerStore], clock: Clock) -> None:
        self.pid = os.getpid()
        self._store = store
        self._clock = clock
        self._lock = threading.Lock()
        self._latest: dict[str, _Latest] = {}
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def offer(self, context: JobExecutionContext, percent: float, message: str | None) -> None:
        """The sink of ``context.report_progress``: keep the report as the firing's latest."""
        report = ProgressReport(
            context.fire_instance_id, percent, message, to_millis(self._clock.now())
        )
        with self._lock:
            latest = self._latest.get(report.fire_instance_id)
            if latest is None:
                self._latest[report.fire_instance_id] = _Latest(context.scheduler_name, report)
            else:
                latest.report = report
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="celery-quartz-progress", daemon=True
                )
                self._thread.start()
        self._wake.set()

    def forget(self, fire_instance_id: str) -> None:
        """The firing ended: drop its report (a write of it would change nothing)."""
        with self._lock:
            self._latest.pop(fire_instance_id, None)

    def write_due(self, now: float | None = None) -> int:
        """Write every report that changed since its firing's last write, once that write is
        :data:`MIN_INTERVAL` old (``now``: monotonic seconds); how many rows took one."""
        now = time.monotonic() if now is None else now
        due: dict[str, list[tuple[_Latest, ProgressReport]]] = {}
        with self._lock:
            for latest in self._latest.values():
                report = latest.report
                if (report.percent, report.message) == latest.written:
                    continue
                if now - latest.written_at < MIN_INTERVAL:
                    continue
                due.setdefault(latest.scheduler_name, []).append((latest, report))
        written = 0
        for scheduler_name, entries in due.items():
            try:
                written += self._store(scheduler_name).record_progress([r for _, r in entries])
            except Exception:  # shown, not kept: the next report is written instead
                logger.warning(
                    "writing the progress of %d firing(s) of %r failed",
                    len(entries),
                    scheduler_name,
                    exc_info=True,
                )
                continue
            with self._lock:
                for latest, report in entries:
                    latest.written = (report.percent, report.message)
                    latest.written_at = now
        return written

    def _run(self) -> None:
        while True:
            self._wake.wait(_TICK)
            self._wake.clear()
            try:
                self.write_due()
            except Exception:
                logger.exception("the progress writer failed; going on")
            time.sleep(_TICK)
