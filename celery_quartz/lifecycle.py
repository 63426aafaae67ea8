"""A scheduler's lifecycle: CREATED, RUNNING, STANDBY, SHUTTING_DOWN, SHUTDOWN.

Quartz 4.x's ``SchedulerStatus`` and its rules, for a scheduler started and stood down by a
leader election (see docs/leadership.md):

* ``start()`` is idempotent and resumes from standby; only the first start runs start-up
  recovery (a non-clustered leader also runs the leader-move pass whenever another leader held
  the epoch since it last led).
* ``standby()`` stops acquiring. It does not stop running jobs, does not release an acquired
  batch (only shutdown does), and does not stop the misfire handler once started. A
  never-started scheduler stands down to CREATED.
* After shutdown, ``start()`` raises "cannot be restarted after shutdown" and ``standby()``
  raises "has been shut down".

:class:`Lifecycle` holds the status and makes the transitions, with a non-clustered scheduler's
leadership (its fencing epoch, and standing down when deposed); the loop it drives does the work
(:class:`HeldWork`). This module also holds the clustering guard checked at start.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from sqlalchemy.exc import DBAPIError

from celery_quartz.config import AUTO, CLUSTER_ONLY, NON_CLUSTERED_ONLY, Settings
from celery_quartz.errors import ConfigurationError, FencedError, SchedulerStateError
from celery_quartz.store.records import Fence

if TYPE_CHECKING:
    from celery_quartz.cluster import ClusterManager
    from celery_quartz.firing import Firing
    from celery_quartz.store.abc import SchedulerStore

logger = logging.getLogger(__name__)


class SchedulerStatus(enum.Enum):
    """Where a scheduler is in its life (Quartz 4.x's ``SchedulerStatus``)."""

    #: Built, not started yet (an election starts it when this process leads).
    CREATED = "CREATED"
    #: Acquiring and firing triggers.
    RUNNING = "RUNNING"
    #: Started, not acquiring: ``start()`` resumes it.
    STANDBY = "STANDBY"
    #: Shutting down: releasing what it holds, checking out.
    SHUTTING_DOWN = "SHUTTING_DOWN"
    #: Shut down; it cannot be started again.
    SHUTDOWN = "SHUTDOWN"

    @property
    def is_shut_down(self) -> bool:
        """Whether the scheduler is shutting down or shut down (it can no longer start)."""
        return self in (SchedulerStatus.SHUTTING_DOWN, SchedulerStatus.SHUTDOWN)


def refuse_start(status: SchedulerStatus, scheduler: str) -> None:
    """Raise if a scheduler in ``status`` may not start."""
    if status.is_shut_down:
        raise SchedulerStateError(
            f"scheduler {scheduler}: cannot be restarted after shutdown; build a new one "
            "(use standby() and start() to pause and resume)"
        )


def refuse_standby(status: SchedulerStatus, scheduler: str) -> None:
    """Raise if a scheduler in ``status`` may not stand down."""
    if status.is_shut_down:
        raise SchedulerStateError(
            f"scheduler {scheduler}: has been shut down; check its status before standby() "
            "(losing leadership while the process stops is ordinary)"
        )


def check_clustering(settings: Settings) -> None:
    """Refuse a configuration that mixes clustered and non-clustered settings, saying why.

    Checked when a scheduler starts, for that scheduler's settings only, so a sibling scheduler
    (another ``quartz_scheduler_name``) can run un-clustered beside a cluster.
    """
    set_here = settings.explicitly_set
    who = f"scheduler {settings.scheduler_name!r}"
    if not settings.clustered:
        wrong = sorted(f"quartz_{n}" for n in CLUSTER_ONLY if n in set_here)
        if wrong:
            raise ConfigurationError(
                f"{who}: {', '.join(wrong)} configure(s) clustering, but quartz_clustered is "
                "False: a non-clustered scheduler detects no failed peers, so the setting would "
                "do nothing. Remove it, or turn clustering on (and leave it on) for every node."
            )
    else:
        wrong = sorted(
            f"quartz_{n}" for n in NON_CLUSTERED_ONLY if n in set_here and getattr(settings, n)
        )
        if wrong:
            raise ConfigurationError(
                f"{who}: {', '.join(wrong)} elects one leader for a non-clustered scheduler, but "
                "quartz_clustered is True: a cluster needs no election (every node schedules). "
                "Set quartz_clustered = False to run under the election."
            )


def warn_generated_instance_id(settings: Settings, instance_id: str) -> None:
    """A non-clustered scheduler with a generated id loses unpublished firings at a leader move."""
    if not settings.clustered and settings.instance_id == AUTO:
        logger.warning(
            "non-clustered scheduler %r runs with a generated instance id (%s): when the leader "
            "moves, the firings it fired but did not publish are dropped, not published again. "
            "Set quartz_instance_id to one fixed name for every replica (it names the leader, "
            "of which there is one). See docs/leadership.md.",
            settings.scheduler_name,
            instance_id,
        )


class HeldWork(Protocol):
    """What a lifecycle transition asks of the loop it drives."""

    def take_over(self) -> None:
        """The first start's recovery: give back claims of an earlier run of this instance id,
        recover dead peers, and begin the misfire scans."""

    def drop_held(self, *, publications: bool) -> None:
        """Forget the claimed batch and the unpublished firings (and, with ``publications``,
        the publications not yet recorded): another leader's recovery owns them now."""

    def adopt_unpublished(self, firings: list[Firing]) -> None:
        """Publish these firings, fired but not published, at the next step."""

    def claim_at_once(self) -> None:
        """Claim at the next step, whatever the last claim found."""

    def hand_back(self) -> None:
        """At shutdown: publish what this instance fired and did not publish, and give back
        every claim of this instance."""


class Lifecycle:
    """One scheduler instance's status and its transitions (Quartz 4.x's ``Start()``,
    ``Standby()``, ``Shutdown()``), and a non-clustered leader's epoch. Transitions come from
    beat's thread and from an election's; :attr:`lock` orders them with the loop's steps."""

    def __init__(
        self,
        work: HeldWork,
        store: SchedulerStore,
        cluster: ClusterManager,
        settings: Settings,
        instance_id: str,
    ) -> None:
        self.work = work
        self.store = store
        self.cluster = cluster
        self.settings = settings
        self.instance_id = instance_id
        self.status = SchedulerStatus.CREATED
        #: Whether the first start (its check-in and recovery) has run.
        self.started = False
        #: Whether a step starts a CREATED scheduler by itself (off: an election or the
        #: application calls start()).
        self.auto_start = settings.auto_start and not settings.election
        #: Called (with the error) when the store refuses a write because another leader has
        #: been elected; the scheduler has already stood down. Elections register here.
        self.on_fenced: list[Callable[[FencedError], None]] = []
        #: The epoch this instance last led with (non-clustered).
        self.epoch: int | None = None
        self.lock = threading.RLock()

    @property
    def name(self) -> str:
        return f"{self.store.scheduler_name!r} (instance {self.instance_id})"

    def start(self) -> None:
        """Start, or resume from standby; nothing when already running.

        The first start checks in, refuses a mixed clustered/non-clustered setup, and takes over
        what a previous life of this instance id or a dead peer left behind. A non-clustered
        scheduler takes the next fencing epoch at every start (each one is a leadership), and
        runs the leader-move recovery pass whenever another leader held the epoch meanwhile.
        Raises :class:`~celery_quartz.errors.SchedulerStateError` after shutdown.
        """
        with self.lock:
            refuse_start(self.status, self.name)
            if self.status is SchedulerStatus.RUNNING:
                return
            if not self.started:
                self._first_start()
            elif not self.settings.clustered:
                # The new epoch first: the check-in is fenced, and the old fence is stale if
                # another leader held the epoch meanwhile.
                self.take_leadership()
                self.cluster.writing = True
                self.cluster.check_in()
            self.work.claim_at_once()
            self.set_status(SchedulerStatus.RUNNING)

    def standby(self) -> None:
        """Stop acquiring triggers. Running jobs, an acquired batch and the misfire handler go
        on; a never-started scheduler stays CREATED. Raises after shutdown."""
        with self.lock:
            refuse_standby(self.status, self.name)
            if self.status is SchedulerStatus.RUNNING:
                self.set_status(SchedulerStatus.STANDBY)
                logger.info("scheduler instance %s is in standby", self.instance_id)

    def deposed(self, error: FencedError) -> None:
        """Another leader was elected while this one still ran: stand down by ourselves."""
        with self.lock:
            # The claims, unpublished firings and unrecorded publications belong to the new
            # leader's recovery now (recording them would only be refused again).
            self.work.drop_held(publications=True)
            if self.status is not SchedulerStatus.RUNNING:
                # Already stood down: the misfire handler's writes go on being refused.
                logger.debug("%s (in %s)", error, self.status.value)
                return
            logger.warning("%s; scheduler instance %s stands down", error, self.instance_id)
            self.set_status(SchedulerStatus.STANDBY)
        for callback in list(self.on_fenced):
            try:
                callback(error)
            except Exception:
                logger.exception("a fencing callback failed")

    def shutdown(
        self,
        *,
        wait_for_jobs: bool = False,
        timeout: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """Give back claimed-but-unfired triggers and leave the cluster.

        With ``wait_for_jobs``, first wait (at most ``timeout`` seconds) until the firings this
        instance published have finished on the workers. Firings that could not be published
        stay in the store under this instance; removing the check-in row makes them orphans that
        a surviving scheduler publishes again.
        """
        with self.lock:
            if self.status.is_shut_down:
                return
            self.status = SchedulerStatus.SHUTTING_DOWN
            began = time.monotonic()
            logger.info("scheduler instance %s shutting down", self.instance_id)
            try:
                if self.started:
                    self._leave(wait_for_jobs, timeout, sleep)
            finally:
                self.status = SchedulerStatus.SHUTDOWN
                logger.info(
                    "scheduler instance %s shut down in %.1fs",
                    self.instance_id,
                    time.monotonic() - began,
                )

    def _leave(self, wait_for_jobs: bool, timeout: float, sleep: Callable[[float], None]) -> None:
        try:
            self.work.hand_back()
            if wait_for_jobs:
                self._wait_for_jobs(timeout, sleep)
            # Non-clustered replicas may share the leader's id: remove the row only if ours.
            self.cluster.leave(only_if_mine=not self.settings.clustered)
        except FencedError as exc:
            # Deposed meanwhile: what we held is the new leader's to recover, and the check-in
            # row may be the new leader's too (a shared instance id).
            logger.info("shutdown: %s", exc)
            self.cluster.leave(only_if_mine=True)
        except DBAPIError:
            logger.exception("shutdown: the store did not answer; survivors will recover us")

    def _wait_for_jobs(self, timeout: float, sleep: Callable[[float], None]) -> None:
        poll = 0.5
        for _ in range(max(1, int(timeout / poll))):
            if not self.store.in_flight(self.instance_id):
                return
            sleep(poll)
        logger.warning(
            "shutdown: %d firing(s) of %s still running after %.0fs; leaving them to the workers",
            self.store.in_flight(self.instance_id),
            self.instance_id,
            timeout,
        )

    def set_status(self, status: SchedulerStatus) -> None:
        if not self.settings.clustered and status is not SchedulerStatus.RUNNING:
            self._record_status(status)  # the last write before check-ins pause
            self.cluster.writing = False
            self.status = status
            return
        self.status = status
        self.cluster.writing = True
        self._record_status(status)

    def take_leadership(self) -> None:
        """Non-clustered: take the next epoch; recover if another leader held it meanwhile."""
        previous, epoch = self.store.advance_epoch(self.instance_id)
        moved = self.epoch is None or previous != self.epoch
        self.epoch = epoch
        self.store.fence = fence = Fence(epoch, self.instance_id)
        logger.info("scheduler instance %s leads with epoch %d", self.instance_id, epoch)
        if moved:
            self.work.drop_held(publications=False)
            self.store.recover_leader_move(self.instance_id, fence)
            # Step 2: every misfire, with no limit (the background handler is bounded).
            while True:
                _, more = self.store.handle_misfires(
                    max_count=self.settings.max_misfires_per_round,
                    instance_name=self.instance_id,
                )
                if not more:
                    break
            self.work.adopt_unpublished(self.cluster.take_over_unpublished())

    def _first_start(self) -> None:
        check_clustering(self.settings)
        warn_generated_instance_id(self.settings, self.instance_id)
        self.cluster.refuse_mixed_modes()
        self.cluster.check_in()
        if not self.settings.clustered:
            self.take_leadership()
        self.work.take_over()
        self.started = True
        logger.info(
            "scheduler instance %s started (%s)", self.instance_id, self.store.scheduler_name
        )

    def _record_status(self, status: SchedulerStatus) -> None:
        if not self.started:
            return
        try:
            self.store.record_status(
                self.instance_id,
                status.value,
                hostname=self.cluster.hostname,
                pid=self.cluster.pid,
            )
        except DBAPIError:
            logger.warning("could not record status %s of %s", status.value, self.instance_id)
        except FencedError:
            # Deposed: the row is the new leader's to write.
            logger.debug("status %s of %s not recorded: deposed", status.value, self.instance_id)
