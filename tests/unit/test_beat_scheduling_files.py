"""``celery beat -S celery_quartz.Scheduler`` with ``quartz_scheduling_files``: the files are
loaded at start (a bad one stops the start), and rescanned by the loop beside its check-in."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from celery_quartz.beat import Scheduler
from celery_quartz.clock import FakeClock
from celery_quartz.errors import SchedulingFileError
from celery_quartz.keys import TriggerKey
from celery_quartz.triggers import CronTrigger

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)
CRON = """\
<job-scheduling-data>
  <schedule>
    <job><name>report</name><job-type>tasks.report</job-type></job>
    <trigger>
      <cron>
        <name>nightly</name>
        <job-name>report</job-name>
        <cron-expression>{expression}</cron-expression>
      </cron>
    </trigger>
  </schedule>
</job-scheduling-data>
"""


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Celery]:
    app = Celery("files", set_as_current=False)
    app.conf.broker_url = "memory://"
    app.conf.quartz_store_url = f"sqlite:///{tmp_path / 'quartz.db'}"

    def task() -> None: ...

    app.task(name="tasks.report", shared=False)(task)
    yield app
    app.close()


def _scheduler(app: Celery, path: Path, clock: FakeClock, scan: float) -> Any:
    app.conf.quartz_scheduling_files = [str(path)]
    app.conf.quartz_scheduling_files_scan_interval = scan
    return Scheduler(app, lazy=False, clock=clock)


def _expression(scheduler: Any) -> str:
    trigger = scheduler.loop.store.retrieve_trigger(TriggerKey("nightly"))
    assert isinstance(trigger, CronTrigger)
    return str(trigger.expression)


def test_beat_loads_the_files_at_start_and_rescans_them(app: Celery, tmp_path: Path) -> None:
    path = tmp_path / "quartz_jobs.xml"
    path.write_text(CRON.format(expression="0 0 2 * * ?"))
    clock = FakeClock(T0)
    scheduler = _scheduler(app, path, clock, scan=2)
    try:
        assert _expression(scheduler) == "0 0 2 * * ?"
        assert scheduler.tick() <= 2  # beat wakes for the next scan
        path.write_text(CRON.format(expression="0 30 3 * * ?"))
        clock.advance(1)
        scheduler.tick()
        assert _expression(scheduler) == "0 0 2 * * ?"  # the scan is not due yet
        clock.advance(1.5)
        scheduler.tick()
        assert _expression(scheduler) == "0 30 3 * * ?"
    finally:
        scheduler.close()


def test_without_a_scan_interval_the_files_load_at_start_only(app: Celery, tmp_path: Path) -> None:
    path = tmp_path / "quartz_jobs.xml"
    path.write_text(CRON.format(expression="0 0 2 * * ?"))
    clock = FakeClock(T0)
    scheduler = _scheduler(app, path, clock, scan=0)
    try:
        path.write_text(CRON.format(expression="0 30 3 * * ?"))
        clock.advance(3600)
        scheduler.tick()
        assert _expression(scheduler) == "0 0 2 * * ?"
    finally:
        scheduler.close()


def test_a_bad_file_stops_beat_from_starting(app: Celery, tmp_path: Path) -> None:
    path = tmp_path / "quartz_jobs.xml"
    path.write_text("<nope/>")
    with pytest.raises(SchedulingFileError, match="expected <job-scheduling-data>"):
        _scheduler(app, path, FakeClock(T0), scan=0)
