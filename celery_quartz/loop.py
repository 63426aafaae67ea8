"""The scheduling loop: acquire due triggers in batches, fire them, publish them, keep house.

One call of :meth:`SchedulingLoop.run_once` does one step and says how long to sleep before the
next; ``celery beat`` calls it from :meth:`celery_quartz.Scheduler.tick`, tests call it directly
with a fake clock. Nothing here waits while holding a database lock: an acquisition is committed
before the loop sleeps until the batch's fire time.
"""

from __future__ import annotations

import logging
import os
import socket
from datetime import datetime, timedelta

from celery_quartz.clock import Clock, from_millis, to_millis
from celery_quartz.cluster import ClusterManager
from celery_quartz.config import Settings
from celery_quartz.firing import AcquiredFiring, Firing
from celery_quartz.publisher import Publisher
from celery_quartz.store.sql import SqlStore

logger = logging.getLogger(__name__)

#: Longest pause between misfire scans; a scan that found more work runs again at once.
_MAX_MISFIRE_SCAN_INTERVAL = 15.0


class SchedulingLoop:
    """One scheduler instance's loop over a store (Quartz's QuartzSchedulerThread)."""

    def __init__(
        self,
        store: SqlStore,
        publisher: Publisher,
        settings: Settings,
        clock: Clock,
        instance_id: str,
    ) -> None:
        self.store = store
        self.publisher = publisher
        self.settings = settings
        self.clock = clock
        self.instance_id = instance_id
        self.cluster = ClusterManager(
            store,
            clock,
            instance_id,
            checkin_interval=settings.checkin_interval,
            checkin_misfire_threshold=settings.checkin_misfire_threshold,
            clustered=settings.clustered,
            hostname=socket.gethostname(),
            pid=os.getpid(),
        )
        self._batch: list[AcquiredFiring] = []
        # Fired but not yet handed to the broker, by fire instance id.
        self._unpublished: dict[str, Firing] = {}
        self._next_misfire_scan: datetime | None = None
        self._started = False
        #: Firings this loop has published (for the log and for tests).
        self.fired_count = 0

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Check in and take over what a previous life of this instance id left behind."""
        if self._started:
            return
        self.store.set_misfire_threshold(self.settings.misfire_threshold)
        self.cluster.check_in()
        released = self.store.release_acquired(self.instance_id)
        if released:
            logger.info(
                "released %d trigger(s) claimed by an earlier run of %s", released, self.instance_id
            )
        self._take_over_unpublished()
        self._next_misfire_scan = self.clock.now()
        self._started = True
        logger.info(
            "scheduler instance %s started (%s)", self.instance_id, self.store.scheduler_name
        )

    def shutdown(self) -> None:
        """Give back claimed-but-unfired triggers and leave the cluster.

        Firings that could not be published stay in the store under this instance; removing the
        check-in row makes them orphans that a surviving scheduler publishes again.
        """
        if not self._started:
            return
        released = self.store.release_acquired(self.instance_id, self._batch)
        self._batch = []
        if released:
            logger.info("released %d acquired trigger(s) at shutdown", released)
        self.cluster.leave()
        self._started = False

    # -- one step --------------------------------------------------------------------------------

    def run_once(self) -> float:
        """Do what is due now; return the seconds to sleep before the next call."""
        if not self._started:
            self.start()
        now = self.clock.now()
        if self.cluster.check_in_due(now):
            self.cluster.check_in()
            self.cluster.recover_failed_peers()
            self._take_over_unpublished()
        if self._next_misfire_scan is not None and now >= self._next_misfire_scan:
            self._scan_misfires(now)
        if self._unpublished:
            self._publish(list(self._unpublished.values()))
        if not self._batch:
            self._batch = self.store.acquire_next_triggers(
                self.instance_id,
                no_later_than=now + timedelta(seconds=self.settings.idle_wait),
                max_count=self.settings.batch_size,
                time_window=self.settings.fire_ahead_window,
                misfire_threshold=self.settings.misfire_threshold,
            )
        if self._batch:
            wait = (self._batch[0].scheduled_fire_time - self.clock.now()).total_seconds()
            if wait > 0:
                return min(wait, self._until_housekeeping(now))
            batch, self._batch = self._batch, []
            self._publish(self.store.fire(self.instance_id, batch))
            return 0.0
        return min(self.settings.idle_wait, self._until_housekeeping(now))

    def _take_over_unpublished(self) -> None:
        for firing in self.cluster.take_over_unpublished():
            self._unpublished.setdefault(firing.fire_instance_id, firing)

    def _publish(self, firings: list[Firing]) -> None:
        if not firings:
            return
        try:
            self.publisher.publish(firings)
        except Exception:
            # The firings stay FIRED in the store under this instance: retried on the next step,
            # or published by a survivor if this process dies first.
            logger.exception("publishing %d firing(s) failed; will retry", len(firings))
            for firing in firings:
                self._unpublished.setdefault(firing.fire_instance_id, firing)
            return
        for firing in firings:
            self._unpublished.pop(firing.fire_instance_id, None)
        self.store.mark_published([f.fire_instance_id for f in firings])
        self.fired_count += len(firings)
        if logger.isEnabledFor(logging.DEBUG):
            for firing in firings:
                logger.debug(
                    "fired %s for trigger %s (scheduled %s) as %s",
                    firing.task,
                    firing.trigger_key,
                    from_millis(firing.scheduled_millis).isoformat(),
                    firing.fire_instance_id,
                )

    def _scan_misfires(self, now: datetime) -> None:
        handled, more = self.store.handle_misfires(
            threshold=self.settings.misfire_threshold,
            max_count=self.settings.max_misfires_per_round,
        )
        interval = 0.0 if more else min(self.settings.misfire_threshold, _MAX_MISFIRE_SCAN_INTERVAL)
        self._next_misfire_scan = now + timedelta(seconds=interval)
        if handled:
            logger.debug("handled %d misfired trigger(s)", handled)

    def _until_housekeeping(self, now: datetime) -> float:
        due = [self.cluster.next_check_in]
        if self._next_misfire_scan is not None:
            due.append(self._next_misfire_scan)
        soonest = min(to_millis(d) for d in due if d is not None) if due else to_millis(now)
        return max(0.0, (soonest - to_millis(now)) / 1000)
