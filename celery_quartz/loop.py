"""The scheduling loop: acquire due triggers in batches, fire them, publish them, keep house.

One call of :meth:`SchedulingLoop.run_once` does one step and says how long to sleep before the
next; ``celery beat`` calls it from :meth:`celery_quartz.Scheduler.tick`, tests call it directly
with a fake clock. Nothing here waits while holding a database lock: an acquisition is committed
before the loop sleeps until the batch's fire time.

Housekeeping runs in the same loop: check-in and the recovery of dead schedulers and workers
every ``quartz_checkin_interval``; the misfire handler (late triggers, and firings whose message
expired unstarted) at most every 15 s, at once again while it finds more.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Protocol

from sqlalchemy.exc import DBAPIError

from celery_quartz.clock import Clock, from_millis, to_millis
from celery_quartz.cluster import ClusterManager
from celery_quartz.config import Settings
from celery_quartz.consumers import QueueWatch
from celery_quartz.errors import FencedError
from celery_quartz.firing import AcquiredFiring, Firing
from celery_quartz.lifecycle import Lifecycle, SchedulerStatus
from celery_quartz.publisher import Publisher
from celery_quartz.routing import Router, Unserved
from celery_quartz.store.abc import SchedulerStore

logger = logging.getLogger(__name__)

#: Longest pause between misfire scans; a scan that found more work runs again at once.
_MAX_MISFIRE_SCAN_INTERVAL = 15.0
#: How often a group that no live worker serves is logged again while it stays unserved.
_UNSERVED_LOG_INTERVAL_MS = 60_000
#: After the workers are asked which queues they consume, the next misfire scan comes this long
#: after their replies are due (seconds).
_BROADCAST_MARGIN = 0.1
#: Pause before trying again when the store does not answer.
_STORE_RETRY = 1.0


class ReloadsFiles(Protocol):
    """What the loop needs of the scheduling files' watcher
    (:class:`celery_quartz.scheduling_files.SchedulingFilesWatcher`, built by beat): the loop
    does not import the adapter that reads files."""

    @property
    def next_scan(self) -> datetime | None: ...

    def maybe_reload(self) -> Any: ...


class SchedulingLoop:
    """One scheduler instance's loop over a store (Quartz's QuartzSchedulerThread)."""

    def __init__(
        self,
        store: SchedulerStore,
        publisher: Publisher,
        settings: Settings,
        clock: Clock,
        instance_id: str,
        *,
        task_exists: Callable[[str], bool] | None = None,
        router: Router | None = None,
        scheduling_files: ReloadsFiles | None = None,
    ) -> None:
        self.store = store
        #: Reloads ``quartz_scheduling_files`` when they change (beat builds it; None: no files).
        self.scheduling_files = scheduling_files
        self.publisher = publisher
        self.settings = settings
        self.clock = clock
        self.instance_id = instance_id
        #: Whether a job's task can be run; a job whose task is gone puts its trigger in ERROR.
        self.task_exists = task_exists
        #: Routes firings and admits them within execution limits and pinned workers' capacity.
        self.router = router or settings.router()
        # Unserved groups last logged, and when (milliseconds): logged again once a minute.
        self._unserved_logged: dict[Unserved, int] = {}
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
        # Published, not yet recorded as PUBLISHED in the store: (fire instance id, when).
        self._published: list[tuple[str, int]] = []
        self._next_misfire_scan: datetime | None = None
        # No claim before this instant (the last one found nothing due within idle_wait).
        self._next_claim: datetime | None = None
        self._store_down = False
        #: Firings this loop has published (for the log and for tests).
        self.fired_count = 0
        #: When the last claim of the store answered (None before the first): the health check
        #: reports the time since.
        self.last_acquisition: datetime | None = None
        #: Which workers, with and without the hooks, consume the queues this loop publishes to.
        self.queue_watch = QueueWatch(store, publisher, clock)
        # When the misfire scan first counted expired firings it has not yet decided on.
        self._expired_seen_at: datetime | None = None
        #: Status and transitions (start, standby, a non-clustered leader's epoch).
        self.lifecycle = Lifecycle(self, store, self.cluster, settings, instance_id)
        # The thread running a step, while it runs one.
        self._stepping: int | None = None

    # -- lifecycle (celery_quartz.lifecycle makes the transitions) --------------------------------

    @property
    def status(self) -> SchedulerStatus:
        return self.lifecycle.status

    @property
    def auto_start(self) -> bool:
        return self.lifecycle.auto_start

    @property
    def epoch(self) -> int | None:
        """The epoch this instance last led with (non-clustered)."""
        return self.lifecycle.epoch

    @property
    def on_fenced(self) -> list[Callable[[FencedError], None]]:
        """Called (with the error) when another leader has been elected and this one has stood
        down. Elections register here."""
        return self.lifecycle.on_fenced

    def start(self) -> None:
        """Start, or resume from standby (:meth:`Lifecycle.start`)."""
        self.lifecycle.start()

    def standby(self) -> None:
        """Stop acquiring triggers (:meth:`Lifecycle.standby`)."""
        self.lifecycle.standby()

    def take_over(self) -> None:
        released = self.store.release_acquired(self.instance_id)
        if released:
            logger.info(
                "released %d trigger(s) claimed by an earlier run of %s", released, self.instance_id
            )
        self._recover()
        self._next_misfire_scan = self.clock.now()

    def drop_held(self, *, publications: bool) -> None:
        self._batch = []
        self._unpublished.clear()
        if publications:
            self._published = []

    def adopt_unpublished(self, firings: list[Firing]) -> None:
        for firing in firings:
            self._unpublished.setdefault(firing.fire_instance_id, firing)

    def claim_at_once(self) -> None:
        self._next_claim = None

    def shutdown(
        self,
        *,
        wait_for_jobs: bool = False,
        timeout: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """Give back claimed-but-unfired triggers and leave the cluster
        (:meth:`Lifecycle.shutdown`)."""
        self.lifecycle.shutdown(wait_for_jobs=wait_for_jobs, timeout=timeout, sleep=sleep)

    def hand_back(self) -> None:
        # Fired but not published (a stop signal can land between a firing's commit and its
        # publication): hand them to the broker now rather than leave them to a survivor, of
        # which there may be none. What was published is recorded first, so it is not taken
        # for unpublished.
        self._flush_published()
        self.adopt_unpublished(self.store.unpublished_firings(self.instance_id))
        self._publish(list(self._unpublished.values()))
        self._flush_published()
        # Every claim of this instance, not only the batch held: a stop signal can land between
        # a claim's commit and the loop taking its answer (celery beat raises SystemExit
        # wherever the step was), and a claim nobody holds would stay ACQUIRED.
        released = self.store.release_acquired(self.instance_id)
        self._batch = []
        if released:
            logger.info("released %d acquired trigger(s) at shutdown", released)

    # -- one step --------------------------------------------------------------------------------

    def run_once(self) -> float:
        """Do what is due now; return the seconds to sleep before the next call.

        A store that does not answer (a restart, a network blip) is waited out: the step is
        tried again a second later, and nothing is lost meanwhile (claims are committed rows).
        """
        with self.lifecycle.lock:
            self._stepping = threading.get_ident()
            try:
                return self._run_once()
            finally:
                self._stepping = None

    def interrupted_mid_step(self) -> bool:
        """Whether the caller is a signal handler that interrupted this loop's step on the same
        thread: a transaction of that step may be open, holding row locks, and a shutdown run
        now would wait for them for ever (its own connection against the interrupted one)."""
        return self._stepping == threading.get_ident()

    def _run_once(self) -> float:
        if self.status is SchedulerStatus.CREATED and not self.auto_start:
            return self.settings.idle_wait  # built and bound; an election will start it
        if self.status.is_shut_down:
            return self.settings.idle_wait
        try:
            if self.status is SchedulerStatus.CREATED:
                self.start()
            delay = self._step()
        except FencedError as exc:
            self.lifecycle.deposed(exc)
            return self.settings.idle_wait
        except DBAPIError as exc:
            if not self._store_down:
                logger.warning("the store did not answer (%s); retrying", exc.__class__.__name__)
            self._store_down = True
            return _STORE_RETRY
        if self._store_down:
            logger.info("the store answers again")
            self._store_down = False
        return delay

    def _step(self) -> float:
        now = self.clock.now()
        idle_wait = self.settings.idle_wait
        if self.cluster.check_in_due(now):
            self.cluster.check_in()
            self._recover()
        if self.scheduling_files is not None and self.status is SchedulerStatus.RUNNING:
            # Beside the check-in, so a database error here is retried like the step's own;
            # only while running: a standby (a non-clustered follower) writes nothing.
            self.scheduling_files.maybe_reload()
        if self._next_misfire_scan is not None and now >= self._next_misfire_scan:
            self._scan_misfires(now)
        if self._unpublished:
            self._publish(list(self._unpublished.values()))
        if (
            not self._batch
            and self.status is SchedulerStatus.RUNNING
            and (self._next_claim is None or now >= self._next_claim)
        ):
            claim = self.store.claim(
                self.instance_id,
                no_later_than=now + timedelta(seconds=idle_wait),
                max_count=self.settings.batch_size,
                time_window=self.settings.fire_ahead_window,
                published=self._published,
                task_exists=self.task_exists,
                router=self.router,
            )
            self._published = []
            self.last_acquisition = self.clock.now()
            if claim.unserved:
                self._log_unserved(claim.unserved)
            if claim.firings:
                # Due already: claimed and fired in one transaction.
                self._publish(claim.firings)
                return 0.0
            self._batch = claim.acquired
            # Nothing due within idle_wait: what a claim before then could find is only what
            # was added or released meanwhile, which idle_wait allows to wait. A wake-up for
            # housekeeping alone therefore does not claim (an idle node's queries per second).
            self._next_claim = None if self._batch else now + timedelta(seconds=idle_wait)
        if self._batch:
            wait = (self._batch[0].scheduled_fire_time - self.clock.now()).total_seconds()
            if wait > 0:
                return min(wait, self._until_housekeeping(now))
            batch, self._batch = self._batch, []
            self._fire(batch)
            return 0.0
        until_claim = idle_wait  # also in standby, when no claim is made whatever is due
        if self._next_claim is not None and self._next_claim > now:
            until_claim = (self._next_claim - now).total_seconds()
        return min(until_claim, self._until_housekeeping(now))

    def _log_unserved(self, unserved: list[Unserved]) -> None:
        now = to_millis(self.clock.now())
        for item in unserved:
            last = self._unserved_logged.get(item)
            if last is None or now - last >= _UNSERVED_LOG_INTERVAL_MS:
                self._unserved_logged[item] = now
                logger.warning("unserved: %s; its due triggers are held back", item.describe())

    def _fire(self, batch: list[AcquiredFiring]) -> None:
        # A trigger whose task is not registered was put in ERROR by the claim that acquired it.
        try:
            firings = self.store.fire(self.instance_id, batch)
        except DBAPIError:
            # Nothing was written (or, if the commit went through, the claims are no longer
            # ACQUIRED and firing again drops them): try the same batch on the next step.
            self._batch = batch
            raise
        except Exception:
            # A trigger that cannot compute its next fire time must not take the scheduler down
            # (nor, after recovery, every other scheduler in turn): give the batch back.
            logger.exception("firing a batch of %d trigger(s) failed; releasing it", len(batch))
            self.store.release_acquired(self.instance_id, batch)
            return
        self._publish(firings)

    def _recover(self) -> None:
        """Recover dead schedulers and workers, and take over what is now ours to publish.

        Also gives back claims of ours this loop does not hold: an acquisition whose commit went
        through while its answer was lost (the store restarted at that moment) would otherwise
        stay ACQUIRED, owned by a live instance, for ever.
        """
        self._flush_published()
        stale = self.store.release_acquired(
            self.instance_id, keep=[a.fire_instance_id for a in self._batch]
        )
        if stale:
            logger.info("released %d claim(s) this instance no longer held", stale)
        view = self.cluster.read()
        recovered = self.cluster.recover_failed_peers(view)
        recovered_work = self.cluster.recover_failed_workers(view)
        if stale or recovered or recovered_work:
            # Claims released and recovery firings written just now are due: claim at once,
            # not after the idle wait of a claim that found them held by the dead.
            self._next_claim = None
        # Ours and unpublished: a previous life's, a dead peer's just handed to us, or a batch
        # whose commit went through while its answer was lost. Only then is there any to read.
        if recovered or self.instance_id in view.owners.unpublished:
            for firing in self.cluster.take_over_unpublished():
                self._unpublished.setdefault(firing.fire_instance_id, firing)

    def _flush_published(self) -> None:
        if self._published:
            self.store.mark_published(self.instance_id, self._published)
            self._published = []

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
        # Recorded as PUBLISHED with the next claim, in its transaction (one commit fewer per
        # batch). Until then they read as FIRED, which a survivor would publish again if this
        # process died: harmless, the worker guard starts one delivery. A non-clustered leader
        # records them at once: the next leader's recovery pass deletes FIRED rows of other
        # instance ids (Quartz's rule), which would refuse messages already sent.
        published_at = to_millis(self.clock.now())
        self._published.extend((f.fire_instance_id, published_at) for f in firings)
        if not self.settings.clustered:
            self._flush_published()
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
            max_count=self.settings.max_misfires_per_round,
            instance_name=self.instance_id,
            router=self.router,
        )
        self.queue_watch.refresh()
        # A message may be started up to its expiry; the grace lets a worker that took it just
        # in time record the start before the firing counts as missed.
        grace = self.settings.checkin_misfire_threshold + 1.0
        expired: list[Firing] = []
        asking = False
        if self.store.count_expired_firings(grace=grace):
            # Before an expired firing is published again, the workers say (fresh, on a thread
            # of their own: the loop does not wait) whether one without the hooks consumes its
            # queue: it may have run the firing unrecorded. An answer to a broadcast sent after
            # the firings counted now expired speaks for them.
            if self._expired_seen_at is None:
                self._expired_seen_at = now
            read = self.queue_watch.read_since(self._expired_seen_at - timedelta(seconds=grace))
            if read is None:
                asking = True
            else:
                self._expired_seen_at = None
                # Only the firings that expired before the workers were asked: the answer
                # speaks for those.
                since_asked = (self.clock.now() - read.started).total_seconds()
                expired = self.store.resolve_expired_firings(
                    self.instance_id,
                    grace=max(grace, since_asked),
                    max_count=self.settings.max_misfires_per_round,
                    router=self.router,
                    refuse=self.queue_watch.refuse(read),
                )
                self._publish(expired)
        more = more or len(expired) >= self.settings.max_misfires_per_round
        if asking:
            interval = self.queue_watch.broadcast_timeout + _BROADCAST_MARGIN
        elif more:
            interval = 0.0
        else:
            interval = min(self.settings.misfire_threshold, _MAX_MISFIRE_SCAN_INTERVAL)
        self._next_misfire_scan = now + timedelta(seconds=interval)
        if handled:
            logger.debug("handled %d misfired trigger(s)", handled)

    def _until_housekeeping(self, now: datetime) -> float:
        files_scan = self.scheduling_files.next_scan if self.scheduling_files else None
        due = [
            d
            for d in (self.cluster.next_check_in, self._next_misfire_scan, files_scan)
            if d is not None
        ]
        if not due:
            return 0.0
        return max(0.0, (min(to_millis(d) for d in due) - to_millis(now)) / 1000)
