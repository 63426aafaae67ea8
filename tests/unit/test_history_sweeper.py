"""The history's sweep inside beat: a thread of its own, every interval, only while its
scheduler runs, stopped at close."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

from celery import Celery
from sqlalchemy import func, select

from celery_quartz.clock import FakeClock
from celery_quartz.history import HistoryRetention
from celery_quartz.history_sweep import HistorySweeper
from celery_quartz.store import MemoryStore, SqlStore
from tests.history_rows import history_row, insert_history
from tests.stores import store_at
from tests.unit.conftest import at


def _folded(store: SqlStore) -> int:
    h = store.tables.history
    with store.transaction() as conn:
        return int(
            conn.execute(
                select(func.count()).select_from(h).where(h.c.unfolded.is_(False))
            ).scalar_one()
        )


def _wait_for(condition, timeout: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def test_a_sweep_goes_on_while_a_pass_reports_more(store: MemoryStore, clock: FakeClock) -> None:
    clock.set(at(30 * 86400))
    insert_history(store, *(history_row(at(i)) for i in range(25)))
    sweeper = HistorySweeper(
        store, HistoryRetention(max_age=timedelta(days=1)), interval=60.0, batch=4
    )
    report = sweeper.sweep()
    assert not report.more
    assert sweeper.passes >= 7  # 25 rows, four at a time
    assert store.history().items == []


def test_the_thread_sweeps_every_interval_only_while_told_to(
    tmp_path: Path, clock: FakeClock
) -> None:
    store = store_at(f"sqlite:///{tmp_path / 'q.db'}", clock=clock, upgrade_schema=True)
    running = False
    sweeper = HistorySweeper(
        store, HistoryRetention(), interval=0.05, should_sweep=lambda: running
    ).start()
    try:
        insert_history(store, *(history_row(at(i)) for i in range(3)))
        time.sleep(0.3)
        assert sweeper.passes == 0 and _folded(store) == 0
        running = True
        assert _wait_for(lambda: _folded(store) == 3)
    finally:
        sweeper.stop()
        store.dispose()
    assert sweeper._thread is None


def test_beat_runs_the_sweep_from_the_settings_and_stops_it_at_close(
    tmp_path: Path, app: Celery
) -> None:
    from celery_quartz.beat import Scheduler

    app.conf.quartz_store_url = f"sqlite:///{tmp_path / 'quartz.db'}"
    app.conf.quartz_history_sweep_interval = 0.05
    app.conf.quartz_history_max_rows = 2
    scheduler = Scheduler(app, lazy=False)
    try:
        sweeper = scheduler.history_sweeper
        assert sweeper is not None
        assert sweeper.retention.max_rows == 2 and sweeper.interval == 0.05
        assert scheduler.loop is not None
        store = scheduler.loop.store
        assert isinstance(store, SqlStore)
        now = store.clock.now()
        insert_history(store, *(history_row(now - timedelta(seconds=i)) for i in range(5)))
        assert _wait_for(lambda: len(store.history().items) == 2)
    finally:
        scheduler.close()
    assert scheduler.history_sweeper is None
