"""The history's sweep, run by beat on a thread of its own, off the scheduling path.

Every ``quartz_history_sweep_interval`` seconds, while its scheduler runs, the thread calls the
store's :meth:`~celery_quartz.store.abc.HistoryKeeper.sweep_history`, again at once while a pass
reports more to do (a backlog after a pause), for at most one interval of work. Every scheduler
process runs one; the store lets one node of the cluster sweep at a time (the others' passes
find its lock row taken and return), so a cluster sweeps as fast as one node does.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from celery_quartz.history import HistoryRetention
from celery_quartz.store.abc import HistoryKeeper
from celery_quartz.store.views import SweepReport

logger = logging.getLogger(__name__)

#: Rows each batch of a pass takes at most.
DEFAULT_SWEEP_BATCH = 5000


class HistorySweeper:
    """Sweeps one store's history every ``interval`` seconds while ``should_sweep()``."""

    def __init__(
        self,
        keeper: HistoryKeeper,
        retention: HistoryRetention,
        *,
        interval: float,
        should_sweep: Callable[[], bool] = lambda: True,
        batch: int = DEFAULT_SWEEP_BATCH,
    ) -> None:
        self.keeper = keeper
        self.retention = retention
        self.interval = interval
        self.should_sweep = should_sweep
        self.batch = batch
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: Passes made (for tests and the log).
        self.passes = 0

    def sweep(self) -> SweepReport:
        """Sweep now: passes until one reports nothing more to do, or one interval of work has
        gone by (the next wake-up goes on). Returns the last pass's report."""
        began = time.monotonic()
        while True:
            report = self.keeper.sweep_history(self.retention, batch=self.batch)
            self.passes += 1
            if not report.more or self._stop.is_set():
                return report
            if time.monotonic() - began >= self.interval:
                logger.info("history sweep: more to sweep; going on at the next interval")
                return report

    def start(self) -> HistorySweeper:
        """Run :meth:`sweep` every interval on a daemon thread."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="celery-quartz-history-sweep", daemon=True
            )
            self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the thread, waiting for a pass under way to end (its batch commits or rolls
        back on its own)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            if not self.should_sweep():
                continue
            try:
                self.sweep()
            except Exception as exc:  # the store down, a deadlock victim: try at the next one
                logger.warning(
                    "history sweep failed (%s); trying again in %.0fs", exc, self.interval
                )
