"""One way to open a store: every kind of process opens it with ``open_store`` from the same
settings, so each judges lateness by the configured ``quartz_misfire_threshold``."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from celery import Celery

from celery_quartz import Job, JobKey, Quartz, SimpleTrigger, TriggerKey, install
from celery_quartz.beat import Scheduler
from celery_quartz.clock import to_millis
from celery_quartz.config import Settings
from celery_quartz.errors import ConfigurationError
from celery_quartz.firing import HEADER, FiringHeader
from celery_quartz.store import TriggerState, open_store
from celery_quartz.store.schema import build_tables
from celery_quartz.worker import runtime_of

THRESHOLD = 300.0


@pytest.fixture
def configured(tmp_path: Path, app: Celery) -> Iterator[Celery]:
    """The shared app on a SQLite file, with a five-minute misfire threshold and the worker
    hooks installed."""
    app.conf.quartz_store_url = f"sqlite:///{tmp_path / 'quartz.db'}"
    app.conf.quartz_misfire_threshold = THRESHOLD
    app.conf.quartz_auto_start = False
    install(app)
    app.finalize()
    yield app
    runtime = runtime_of(app)
    assert runtime is not None
    runtime.close()


def test_open_store_takes_every_store_setting_from_the_settings() -> None:
    settings = Settings(
        store_url="sqlite://",
        scheduler_name="billing",
        table_prefix="qz_",
        misfire_threshold=90,
        checkin_misfire_threshold=3,
        max_job_data_bytes=1024,
    )
    store = open_store(settings)
    try:
        assert store.scheduler_name == "billing"
        assert store.tables.jobs.name == "qz_jobs"
        assert store.misfire_threshold_ms == 90_000
        assert store.checkin_misfire_threshold_ms == 3_000
        assert store.max_data_bytes == 1024
    finally:
        store.dispose()


def test_beat_the_client_and_the_worker_see_the_configured_misfire_threshold(
    configured: Celery,
) -> None:
    beat = Scheduler(configured, lazy=False)
    client = Quartz(configured)
    runtime = runtime_of(configured)
    assert runtime is not None
    worker = runtime.store("t")
    try:
        assert beat.loop is not None
        assert beat.loop.store.misfire_threshold_ms == 300_000
        assert client.store.misfire_threshold_ms == 300_000
        assert worker.misfire_threshold_ms == 300_000
    finally:
        beat.close()
        client.store.dispose()


def test_a_worker_judges_a_blocked_trigger_late_by_the_configured_threshold(
    configured: Celery,
) -> None:
    """A disallow_concurrent job's other trigger waits BLOCKED while the first one's firing runs.
    When the worker completes that firing, the waiting trigger is 120 s late: within the
    configured five minutes, so it keeps its fire time and is not handed to its misfire
    instruction (a worker judging by 60 s would fire it at a new time)."""
    now = datetime.now(timezone.utc).replace(microsecond=0)
    client = Quartz(configured)
    job = Job(key=JobKey("solo"), task="tasks.report", disallow_concurrent=True)
    first = SimpleTrigger(key=TriggerKey("first"), start_at=now - timedelta(seconds=130))
    second = SimpleTrigger(key=TriggerKey("second"), start_at=now - timedelta(seconds=120))
    client.schedule_jobs([(job, [first, second])])
    store = client.store
    try:
        claim = store.claim("sched-a", no_later_than=now, max_count=10, time_window=0)
        [firing] = claim.firings
        assert firing.trigger_key == TriggerKey("first")
        assert store.get_trigger_state(TriggerKey("second")) == TriggerState.BLOCKED

        result = configured.tasks[firing.task].apply(
            args=firing.args,
            kwargs=firing.kwargs,
            task_id=firing.fire_instance_id,
            headers={HEADER: FiringHeader.of(firing).fields},
            throw=False,
        )

        assert result.state == "SUCCESS"
        assert store.firing_states() == {}
        waiting = store.retrieve_trigger(TriggerKey("second"))
        assert waiting is not None and waiting.next_fire_time is not None
        assert store.get_trigger_state(TriggerKey("second")) == TriggerState.WAITING
        assert to_millis(waiting.next_fire_time) == to_millis(now - timedelta(seconds=120))
    finally:
        store.dispose()


def test_stores_of_one_table_prefix_share_its_table_definitions(tmp_path: Path) -> None:
    """The tables are declared once per prefix and process, and shared by stores on any engine;
    another prefix has its own; a bad prefix is refused at every call, never remembered."""
    first = open_store(Settings(store_url="sqlite://", table_prefix="qz_"))
    second = open_store(
        Settings(store_url=f"sqlite:///{tmp_path / 'q.db'}", table_prefix="qz_"),
        upgrade_schema=True,
    )
    other = open_store(Settings(store_url="sqlite://", table_prefix="other_"))
    try:
        assert second.tables is first.tables is build_tables("qz_")
        assert first.tables.triggers.name == "qz_triggers"
        assert other.tables.triggers.name == "other_triggers"
    finally:
        for store in (first, second, other):
            store.dispose()
    for _ in range(2):
        with pytest.raises(ConfigurationError, match="9bad"):
            build_tables("9bad")
