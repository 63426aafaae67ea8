"""``celery beat -S celery_quartz.Scheduler``: a thin adapter from beat's ``tick()`` to our loop.

Everything that decides what fires lives in :class:`~celery_quartz.loop.SchedulingLoop`; this
class only builds it from the app's ``quartz_*`` settings, imports ``beat_schedule`` and loads
the scheduling files at start, and hands beat the number of seconds to sleep.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import beat

from celery_quartz.beat_schedule import import_beat_schedule
from celery_quartz.clock import Clock, SystemClock
from celery_quartz.config import Settings
from celery_quartz.elections import Election, build_election
from celery_quartz.health import HealthReport, health_check
from celery_quartz.history_sweep import HistorySweeper
from celery_quartz.leadership import SchedulerLeadership
from celery_quartz.lifecycle import SchedulerStatus, check_clustering
from celery_quartz.loop import SchedulingLoop
from celery_quartz.observability.gauges import StoreGauges
from celery_quartz.observability.http import HealthServer
from celery_quartz.observability.publishing import PublishTracing
from celery_quartz.observability.store import StoreObservation
from celery_quartz.publisher import Publisher
from celery_quartz.scheduling_files import SchedulingFilesWatcher
from celery_quartz.store import open_store

logger = logging.getLogger(__name__)


class Scheduler(beat.Scheduler):
    """A celery-quartz scheduler instance inside ``celery beat``; run as many as you like."""

    #: beat sleeps what tick() returns, never longer than this.
    max_interval = 5.0

    def __init__(self, app: Any, *args: Any, clock: Clock | None = None, **kwargs: Any) -> None:
        self._clock = clock or SystemClock()
        self.loop: SchedulingLoop | None = None
        self.quartz_settings = Settings.from_app(app)
        #: The built-in election (``quartz_election``), if any; it starts and stands us down.
        self.election: Election | None = None
        self._status_after_close = SchedulerStatus.CREATED
        #: The store gauges, when ``quartz_metrics_gauges`` is on.
        self.gauges: StoreGauges | None = None
        #: The HTTP health endpoint, when ``quartz_health_port`` is set.
        self.health_server: HealthServer | None = None
        #: The history's sweep, on a thread of its own while this scheduler runs.
        self.history_sweeper: HistorySweeper | None = None
        kwargs.setdefault("max_interval", self.max_interval)
        super().__init__(app, *args, **kwargs)

    def setup_schedule(self) -> None:
        settings = self.quartz_settings
        # Refused here, not at the first election: a replica that is never elected must fail too.
        check_clustering(settings)
        store = open_store(settings, clock=self._clock, pre_ping=False, upgrade_schema=True)
        if settings.import_beat_schedule:
            entries: dict[str, Any] = dict(self.app.conf.beat_schedule or {})
            # celery.backend_cleanup, when the result backend needs it, as stock beat adds it.
            self.data: dict[str, Any] = {}
            self.install_default_entries(self.data)
            for name, entry in self.data.items():
                entries.setdefault(name, entry)
            import_beat_schedule(
                self.app, store, self._clock, entries, max_data_bytes=settings.max_job_data_bytes
            )
        self.data = {}
        # Scheduling files (quartz_scheduling_files) after beat_schedule, before the loop: a bad
        # file stops the start. Every node loads them; the load is one transaction under the
        # TRIGGER_ACCESS lock and idempotent, so they are applied once per cluster.
        watcher = SchedulingFilesWatcher(
            self.app,
            store,
            settings.scheduling_file_paths,
            scan_interval=settings.scheduling_files_scan_interval,
            clock=self._clock,
        )
        watcher.load_at_start()
        instance_id = settings.resolve_instance_id()
        # Observed through the store's hooks: every store operation timed and traced, and
        # acquisition, misfires, check-in and recovery measured from what the roles return.
        observation = StoreObservation(
            store.scheduler_name,
            instance_id=instance_id,
            clock=self._clock,
            checkin_misfire_threshold=settings.checkin_misfire_threshold,
        )
        store.add_hooks(observation)
        publisher = Publisher(
            self.app,
            batch_size=settings.batch_size,
            clock=self._clock,
            hooks=PublishTracing(instance_id),
        )
        router = settings.router(self.app.conf.task_default_queue or "celery")
        self.loop = SchedulingLoop(
            store,
            publisher,
            settings,
            self._clock,
            instance_id,
            task_exists=self.app.tasks.__contains__,
            router=router,
            scheduling_files=watcher if watcher.paths else None,
        )
        if settings.metrics_gauges:
            self.gauges = StoreGauges(
                store,
                observation.attributes,
                self._clock,
                is_collector=lambda: self._collects_gauges(observation, instance_id),
                limit_for=lambda group: _max_concurrent(router, group),
                groups=lambda: router.limits.named_groups,
                deadlines=lambda: settings.success_deadlines,
            )
        # Off the scheduling path: a thread of its own, sweeping while this scheduler runs.
        loop = self.loop
        self.history_sweeper = HistorySweeper(
            store,
            settings.history_retention_policy(),
            interval=settings.history_sweep_interval,
            should_sweep=lambda: loop.status is SchedulerStatus.RUNNING,
        ).start()
        if settings.health_port is not None and self.health_server is None:
            # Kept until the process exits: after close() it answers 503 (shut down).
            self.health_server = HealthServer(
                self.health, settings.health_address, settings.health_port
            ).start()
        if settings.election:
            # Built, initialised and bound, left in CREATED: the election starts it.
            self.election = build_election(settings, self.app, SchedulerLeadership(self.loop))
            self.loop.on_fenced.append(self.election.stand_down)
            self.election.start()
        elif self.loop.auto_start:
            self.loop.start()

    def _collects_gauges(self, observation: StoreObservation, instance_id: str) -> bool:
        """Whether this node reads the store gauges: it runs, and its instance id sorts first
        among the live scheduler check-ins it last read (one node per scheduler name)."""
        loop = self.loop
        if loop is None or loop.status is not SchedulerStatus.RUNNING:
            return False
        return observation.live_schedulers[:1] == [instance_id]

    def health(self) -> HealthReport:
        """:func:`~celery_quartz.health.health_check` of this scheduler."""
        return health_check(self)

    # -- lifecycle, for an election or application code (see celery_quartz.lifecycle) ----------

    @property
    def status(self) -> SchedulerStatus:
        """Where the scheduler is in its life (CREATED, RUNNING, STANDBY, SHUTTING_DOWN,
        SHUTDOWN)."""
        return self._status_after_close if self.loop is None else self.loop.status

    def start(self) -> None:
        """Start, or resume from standby (idempotent)."""
        assert self.loop is not None, "setup_schedule() has not run"
        self.loop.start()

    def standby(self) -> None:
        """Stop acquiring; running jobs, the acquired batch and the misfire handler go on."""
        assert self.loop is not None, "setup_schedule() has not run"
        self.loop.standby()

    def tick(self, *args: Any, **kwargs: Any) -> float:
        assert self.loop is not None, "setup_schedule() has not run"
        return self.loop.run_once()

    def sync(self) -> None:
        """Nothing to sync: every decision is already committed to the store."""

    def close(self) -> None:
        if self.loop is not None and self.loop.interrupted_mid_step():
            # celery beat's SIGTERM/SIGINT handler closes the scheduler and then raises
            # SystemExit, wherever the step was: perhaps inside a transaction. Let the exit unwind
            # the step (rolling its transaction back); beat closes again once it has.
            logger.debug("close() interrupted a step; the shutdown runs once the step unwinds")
            return
        if self.loop is not None:
            self.loop.shutdown(
                wait_for_jobs=self.quartz_settings.shutdown_wait_for_jobs,
                timeout=self.quartz_settings.shutdown_timeout,
            )
            # After the shutdown: the next leader starts once this one has finished.
            if self.election is not None:
                self.election.stop()
                self.election = None
            if self.history_sweeper is not None:
                self.history_sweeper.stop()
                self.history_sweeper = None
            self.loop.store.dispose()
            if self.gauges is not None:
                self.gauges.close()
                self.gauges = None
            self._status_after_close = self.loop.status
            self.loop = None

    @property
    def info(self) -> str:
        settings = self.quartz_settings
        instance = self.loop.instance_id if self.loop else "?"
        return (
            f"    . store -> {_safe_url(settings.store_url)}\n"
            f"    . scheduler -> {settings.scheduler_name} (instance {instance}, "
            f"{'clustered' if settings.clustered else 'not clustered'}"
            f"{f', election {settings.election}' if settings.election else ''})"
        )


def _max_concurrent(router: Any, group: str | None) -> int | None:
    limit = router.limits.limit_for(group)
    return None if limit is None else limit.max_concurrent


def _safe_url(url: str) -> str:
    from celery_quartz.store.engine import redact_url

    return redact_url(url)
