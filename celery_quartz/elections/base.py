"""The shape every built-in election shares: a daemon thread that contends for a lock, calls
:meth:`SchedulerLeadership.on_started_leading` when it wins, checks (or renews) the lock while it
leads, and calls :meth:`~SchedulerLeadership.on_stopped_leading` the moment it cannot."""

from __future__ import annotations

import logging
import threading

from celery_quartz.leadership import SchedulerLeadership

logger = logging.getLogger(__name__)


class Election:
    """Contend, lead, lose, contend again, until :meth:`stop`."""

    #: What this election is, for the log.
    kind = "election"

    def __init__(
        self, leadership: SchedulerLeadership, *, retry_interval: float, hold_interval: float
    ) -> None:
        self.leadership = leadership
        #: Seconds between attempts to take the lock.
        self.retry_interval = retry_interval
        #: Seconds between checks (or renewals) of a held lock.
        self.hold_interval = hold_interval
        self._stop = threading.Event()
        self._stand_down = threading.Event()
        #: Seconds to stay out of the contest after the store refused us (fenced): another
        #: leader runs, and taking the lock straight back would only depose it in turn.
        self.fenced_backoff = 10 * retry_interval
        self._thread: threading.Thread | None = None
        #: Whether this process holds the lock now.
        self.leading = False

    # -- what each election implements --------------------------------------------------------

    def try_acquire(self) -> bool:
        """Take the lock if it is free; never wait for it."""
        raise NotImplementedError

    def still_held(self) -> bool:
        """Check (or renew) the lock; False when it is lost."""
        raise NotImplementedError

    def release(self) -> None:
        """Give the lock up (best effort: a lost lock is already given up)."""
        raise NotImplementedError

    def close(self) -> None:
        """Close connections."""

    # -- the thread ---------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name=f"celery-quartz {self.kind}", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop contending and give the lock up. Call it after the scheduler has shut down, so
        the next leader starts only once this one has finished what it began."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self.close()

    def stand_down(self, *_: object) -> None:
        """Let go of the lock and contend again (the store refused us: another leader was
        elected while we thought we held it). Safe to call from any thread."""
        self._stand_down.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                won = self.try_acquire()
            except Exception as exc:
                logger.warning("%s: could not contend (%s)", self.kind, exc)
                won = False
            if not won:
                self._stop.wait(self.retry_interval)
                continue
            self.leading = True
            self._stand_down.clear()
            logger.info("%s: this process is the leader", self.kind)
            try:
                self.leadership.on_started_leading()
            except Exception:
                logger.exception("%s: the scheduler did not start; giving the lock up", self.kind)
                self._lose()
                self._stop.wait(self.retry_interval)
                continue
            while not self._stop.is_set() and not self._stand_down.is_set():
                if self._stop.wait(self.hold_interval) or self._stand_down.is_set():
                    break
                try:
                    held = self.still_held()
                except Exception as exc:
                    logger.warning("%s: checking the lock failed (%s)", self.kind, exc)
                    held = False
                if not held:
                    logger.warning("%s: leadership lost", self.kind)
                    break
            if self._stop.is_set():
                # Stopping: the scheduler has shut down (or is shutting down); the lock goes
                # with it, and on_stopped_leading sees a status it need not act on.
                self._lose()
                return
            fenced = self._stand_down.is_set()
            self._lose()
            self._stop.wait(self.fenced_backoff if fenced else self.retry_interval)

    def _lose(self) -> None:
        self.leading = False
        try:
            self.leadership.on_stopped_leading()
        except Exception:
            logger.exception("%s: standing the scheduler down failed", self.kind)
        try:
            self.release()
        except Exception as exc:
            logger.debug("%s: release failed (%s)", self.kind, exc)
