"""Cluster membership: check-in, failure detection, recovery of dead scheduler instances.

Processes never talk to each other. Each writes its own check-in row; each looks at the others'
rows and declares a peer dead by Quartz's rule; the recovery of a dead peer is one transaction
that only one survivor can win (see
:meth:`~celery_quartz.store.abc.ClusterStore.recover_scheduler`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from celery_quartz.clock import Clock, from_millis, to_millis
from celery_quartz.errors import SchedulerStateError
from celery_quartz.firing import Firing
from celery_quartz.liveness import failed_after
from celery_quartz.store.abc import SchedulerStore
from celery_quartz.store.records import CheckIn, FiringOwners

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClusterView:
    """What a recovery pass reads: who holds fired rows in flight, then every check-in row."""

    owners: FiringOwners
    check_ins: list[CheckIn]

    def of_kind(self, kind: str) -> list[CheckIn]:
        return [c for c in self.check_ins if c.kind == kind]


class ClusterManager:
    """One scheduler instance's view of the cluster."""

    def __init__(
        self,
        store: SchedulerStore,
        clock: Clock,
        instance_id: str,
        *,
        checkin_interval: float,
        checkin_misfire_threshold: float,
        clustered: bool = True,
        hostname: str | None = None,
        pid: int | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.instance_id = instance_id
        self.checkin_interval = checkin_interval
        self.threshold_millis = int(checkin_misfire_threshold * 1000)
        self.clustered = clustered
        self.hostname = hostname
        self.pid = pid
        self.next_check_in: datetime | None = None
        #: Off while a non-clustered scheduler stands by: the row then shows the leader alone
        #: (replicas may share the leader's instance id). Check-ins fall due as usual.
        self.writing = True
        self._previous_checkin_millis: int | None = None
        self._last_checkin_millis: int | None = None

    @property
    def last_checkin_millis(self) -> int | None:
        """When this instance last wrote its check-in (None before the first)."""
        return self._last_checkin_millis

    def check_in_due(self, now: datetime) -> bool:
        return self.next_check_in is None or now >= self.next_check_in

    def check_in(self) -> None:
        """Write this instance's check-in row; warn if another instance had recovered us."""
        if not self.writing:
            self.next_check_in = self.clock.now() + timedelta(seconds=self.checkin_interval)
            return
        first = self._last_checkin_millis is None
        row_was_there = self.store.check_in(
            self.instance_id,
            interval=self.checkin_interval,
            clustered=self.clustered,
            hostname=self.hostname,
            pid=self.pid,
        )
        if not first and not row_was_there:
            logger.warning(
                "scheduler instance %s is still active but was recovered by another instance",
                self.instance_id,
            )
        now = self.clock.now()
        self._previous_checkin_millis = self._last_checkin_millis
        self._last_checkin_millis = to_millis(now)
        self.next_check_in = now + timedelta(seconds=self.checkin_interval)

    def failed_peers(
        self, kind: str = "scheduler", check_ins: list[CheckIn] | None = None
    ) -> list[CheckIn]:
        """Instances of ``kind`` (schedulers or workers) whose check-in is too old by Quartz's
        rule; from ``check_ins`` when the caller has read them already."""
        now = to_millis(self.clock.now())
        return [
            peer
            for peer in (self.store.check_ins(kind=kind) if check_ins is None else check_ins)
            if peer.instance_name != self.instance_id
            and now
            > failed_after(
                peer,
                now_millis=now,
                my_last_checkin_millis=self._previous_checkin_millis,
                threshold_millis=self.threshold_millis,
            )
        ]

    def read(self) -> ClusterView:
        """Read the cluster for a recovery pass: two statements, whatever it finds.

        The fired rows are read first: an instance checks in before it claims, so one whose rows
        were seen and whose check-in row is missing from the later read has really gone (read the
        other way round, an instance starting in between would look like an orphan).
        """
        owners = self.store.firing_owners()
        return ClusterView(owners, self.store.check_ins())

    def recover_failed_workers(self, view: ClusterView | None = None) -> int:
        """Resolve the executions of dead workers: their own check-in is too old, or they never
        checked in at all and have been executing longer than a check-in window.

        A ``disallow_concurrent`` execution is deferred by two check-in intervals plus the
        threshold first (Quartz 4.x), in case the worker is only slow. Workers outlive schedulers
        in either mode, so a non-clustered leader does this too. ``view``: what :meth:`read`
        returned, when the caller has read it already.
        """
        view = view or self.read()
        defer = int(2 * self.checkin_interval * 1000) + self.threshold_millis
        resolved = 0
        workers = view.of_kind("worker")
        for worker in self.failed_peers(kind="worker", check_ins=workers):
            logger.info(
                "worker %s last checked in at %s; recovering what it was running",
                worker.instance_name,
                from_millis(worker.last_checkin_millis).isoformat(),
            )
            result = self.store.recover_worker(
                worker.instance_name,
                seen_checkin_millis=worker.last_checkin_millis,
                defer_nonconcurrent_millis=defer,
            )
            if result is not None:
                resolved += result.recovered + result.interrupted
        known = {w.instance_name for w in workers}
        window = int(self.checkin_interval * 1000) + self.threshold_millis
        now = to_millis(self.clock.now())
        for worker_name, since in view.owners.executing_since.items():
            if worker_name in known or since >= now - window:
                continue
            logger.info("worker %s never checked in; recovering what it was running", worker_name)
            result = self.store.recover_worker(
                worker_name, seen_checkin_millis=None, defer_nonconcurrent_millis=defer
            )
            if result is not None:
                resolved += result.recovered + result.interrupted
        return resolved

    def refuse_mixed_modes(self) -> None:
        """A clustered scheduler refuses tables in use by a live non-clustered one, and the other
        way round: a non-clustered scheduler resets the state of every firing at start and would
        undo the cluster's work (Quartz only warns about this)."""
        now = to_millis(self.clock.now())
        live_other_mode = [
            peer.instance_name
            for peer in self.store.check_ins(kind="scheduler")
            if peer.instance_name != self.instance_id
            and peer.clustered != self.clustered
            and now
            <= failed_after(
                peer,
                now_millis=now,
                my_last_checkin_millis=None,
                threshold_millis=self.threshold_millis,
            )
        ]
        if live_other_mode:
            mine, theirs = (
                ("clustered", "non-clustered")
                if self.clustered
                else (
                    "non-clustered",
                    "clustered",
                )
            )
            raise SchedulerStateError(
                f"scheduler {self.store.scheduler_name!r}: this {mine} instance "
                f"{self.instance_id} refuses to start: {theirs} instance(s) "
                f"{', '.join(sorted(live_other_mode))} are live on the same tables. Give one of "
                "them another quartz_scheduler_name, table prefix or database."
            )

    def recover_failed_peers(self, view: ClusterView | None = None) -> int:
        """Recover every dead peer and every orphan (fired rows with no check-in row at all);
        ``view`` as for :meth:`recover_failed_workers`."""
        if not self.clustered:
            return 0
        view = view or self.read()
        recovered = 0
        for peer in self.failed_peers(check_ins=view.of_kind("scheduler")):
            logger.info(
                "scheduler instance %s last checked in at %s; recovering it",
                peer.instance_name,
                from_millis(peer.last_checkin_millis).isoformat(),
            )
            result = self.store.recover_scheduler(
                peer.instance_name,
                seen_checkin_millis=peer.last_checkin_millis,
                recovered_by=self.instance_id,
            )
            recovered += result is not None
        checked_in = {c.instance_name for c in view.check_ins}
        for orphan in sorted(view.owners.schedulers - checked_in - {self.instance_id}):
            self.store.recover_scheduler(
                orphan, seen_checkin_millis=None, recovered_by=self.instance_id
            )
            recovered += 1
        return recovered

    def take_over_unpublished(self) -> list[Firing]:
        """Firings assigned to this instance (its own from a previous life, or a dead peer's)
        that are fired but not recorded as published: they are to be published (again)."""
        return self.store.unpublished_firings(self.instance_id)

    def leave(self, *, only_if_mine: bool = False) -> None:
        """Remove this instance's check-in row; with ``only_if_mine``, only if this process
        wrote it last (a deposed non-clustered leader may share the new leader's instance id)."""
        if only_if_mine:
            self.store.remove_check_in_of_process(
                self.instance_id, hostname=self.hostname, pid=self.pid
            )
            return
        self.store.remove_check_in(self.instance_id)
