"""Beat and worker processes on psycopg 3 (``postgresql+psycopg://``), not only the store: two
clustered schedulers and a worker fire every occurrence once, and the worker's start and
completion, the check-ins and the claims all go through the psycopg 3 driver."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from sqlalchemy import create_engine, select

from celery_quartz import Job, JobKey, Quartz, SimpleTrigger, TriggerKey
from tests.integration import ledger_app
from tests.integration.processes import processes, wait_for
from tests.integration.test_cluster import due_occurrences


def test_two_schedulers_and_a_worker_on_psycopg3_fire_every_occurrence_once(
    tmp_path: Path, pg_url_psycopg3: str, redis_url: str
) -> None:
    url = pg_url_psycopg3
    assert url.startswith("postgresql+psycopg://")
    store = ledger_app.prepared_store(url)
    assert store.engine.dialect.driver == "psycopg"
    quartz = Quartz(ledger_app.app, store=store)
    start = datetime.now(timezone.utc) + timedelta(seconds=4)
    triggers = [
        SimpleTrigger(
            key=TriggerKey(f"t{i}", "psycopg3"),
            start_at=start,
            repeat_interval=timedelta(seconds=1 + i / 4),
            repeat_count=-1,
        )
        for i in range(4)
    ]
    quartz.schedule_jobs(
        [(Job(key=JobKey(t.key.name, "psycopg3"), task="ledger.record"), [t]) for t in triggers]
    )
    env = ledger_app.environment(url, redis_url, CHECKIN_INTERVAL="1", CHECKIN_THRESHOLD="1")
    with processes(tmp_path, env) as procs:
        procs.worker("worker1", concurrency=4)
        procs.beat("beat1")
        procs.beat("beat2")
        time.sleep(16)
        procs.assert_running("worker1", "beat1", "beat2")
        wait_for(
            lambda: len(store.check_ins(kind="worker")) == 1, 10, message="the worker's check-in"
        )
        stopped = datetime.now(timezone.utc)
        for name in ("beat1", "beat2"):
            assert procs.stop(name) == 0, procs.log(name)[-4000:]
        wait_for(lambda: not store.firing_states(), timeout=30, message="fired rows to drain")
        banner = procs.log("beat1")
    engine = create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(select(ledger_app.ledger)).all()
        duplicates = conn.execute(select(ledger_app.duplicates)).all()
    engine.dispose()
    executed = {(r.trigger_name, r.scheduled_ms) for r in rows}
    due = due_occurrences(triggers, stopped - timedelta(seconds=3))
    assert len(due) > 30
    assert duplicates == []
    assert due - executed == set(), f"{len(due - executed)} due occurrence(s) never ran"
    assert executed <= due_occurrences(triggers, stopped + timedelta(seconds=5))
    assert "store -> postgresql+psycopg://" in banner
    store.dispose()
