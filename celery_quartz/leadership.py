"""The two callbacks every leader election has, whatever it calls them.

Wire :meth:`SchedulerLeadership.on_started_leading` and
:meth:`~SchedulerLeadership.on_stopped_leading`
to your election (a Kubernetes Lease elector, a distributed lock's acquire and release, the
built-in elections in :mod:`celery_quartz.elections`). See docs/leadership.md.
"""

from __future__ import annotations

import logging
from typing import Protocol

from celery_quartz.lifecycle import SchedulerStatus

logger = logging.getLogger(__name__)


class Startable(Protocol):
    """What a leadership drives: a :class:`~celery_quartz.loop.SchedulingLoop` or the beat
    :class:`celery_quartz.Scheduler`."""

    @property
    def status(self) -> SchedulerStatus: ...

    def start(self) -> None: ...

    def standby(self) -> None: ...


class SchedulerLeadership:
    """Starts the scheduler when this process is elected, stands it down when it is not."""

    def __init__(self, scheduler: Startable) -> None:
        #: The scheduler it starts and stands down.
        self.scheduler = scheduler

    def on_started_leading(self) -> None:
        """This process was elected: start the scheduler, or resume it from standby (nothing while
        it shuts down)."""
        # The first acquisition starts the scheduler and every later one resumes it from
        # standby; start() does both, and nothing when the scheduler is already running.
        if self.scheduler.status.is_shut_down:
            # Elected while the process stops: nothing to start; the election lets go shortly.
            logger.info("elected leader while shutting down: not starting")
            return
        logger.info("elected leader: starting the scheduler")
        self.scheduler.start()

    def on_stopped_leading(self) -> None:
        """This process no longer leads: put a running scheduler in standby (not shut down: it may
        lead again)."""
        # Standby, not shutdown: a shut-down scheduler cannot be started again, and this process
        # may well be elected once more in a minute. Losing the lease while the process is
        # already stopping is ordinary, and standby() raises once the scheduler has shut down.
        if self.scheduler.status is SchedulerStatus.RUNNING:
            logger.info("no longer leader: the scheduler stands down")
            self.scheduler.standby()
