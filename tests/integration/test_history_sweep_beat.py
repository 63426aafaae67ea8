"""Two real beat processes on PostgreSQL sweep the history: rows folded into the statistics and
the scheduler's cap kept, by one node at a time, the run status kept."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

from sqlalchemy import func, select

from celery_quartz.keys import JobKey
from celery_quartz.store import SqlStore
from tests.history_rows import history_row, insert_history, insert_status
from tests.integration.ledger_app import environment, prepared_store
from tests.integration.processes import processes, wait_for


def _unfolded(store: SqlStore) -> int:
    h = store.tables.history
    with store.transaction() as conn:
        return int(
            conn.execute(
                select(func.count())
                .select_from(h)
                .where(h.c.sched_name == store.scheduler_name, h.c.unfolded.is_(True))
            ).scalar_one()
        )


def test_beat_sweeps_the_history_on_postgres(tmp_path: Path, pg_url: str, redis_url: str) -> None:
    store = prepared_store(pg_url)
    now = datetime.now(timezone.utc)
    insert_status(store, "job", since=now - timedelta(days=3), last_success=now, runs=400)
    insert_history(
        store,
        *(
            history_row(now - timedelta(seconds=i), "failed" if i % 10 == 0 else "succeeded")
            for i in range(400)
        ),
    )
    before = store.statistics(job=JobKey("job"), window=timedelta(hours=2))
    env = environment(pg_url, redis_url, HISTORY_SWEEP_INTERVAL="0.5", HISTORY_MAX_ROWS="150")
    with processes(tmp_path, env) as procs:
        procs.beat("beat1")
        procs.beat("beat2")
        wait_for(
            lambda: _unfolded(store) == 0 and len(store.history(limit=1000).items) == 150,
            timeout=60,
            message="the sweep to fold every row and keep 150",
        )
        procs.assert_running("beat1", "beat2")
        procs.stop_all()
        logs = procs.log("beat1") + procs.log("beat2")
    kept = store.history(limit=1000).items
    assert kept[-1].event_time > now - timedelta(seconds=151)  # the newest 150
    # Folded into the rollups: the statistics still count every row the sweep deleted.
    after = store.statistics(job=JobKey("job"), window=timedelta(hours=2))
    assert after.total.counts == before.total.counts == {"failed": 40, "succeeded": 360}
    (status,) = store.run_status().items
    assert status.runs == 400 and status.last_success_time is not None
    assert "history sweep of ledger_app: folded 400" in logs, logs[-3000:]
    store.dispose()
