"""``health_check`` of real ``celery beat -S celery_quartz.Scheduler`` processes, read from the file
the ledger app's beat writes (test-only: the package has no HTTP endpoint yet): healthy while
running, degraded while an execution group has no live worker and while a replica waits to be
elected, unhealthy once its store stops answering."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, make_url, text

from celery_quartz import Job, JobKey, Quartz, SimpleTrigger, TriggerKey
from tests.integration import ledger_app
from tests.integration.processes import processes, wait_for


def _health(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())  # type: ignore[no-any-return]
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _wait_status(path: Path, status: str, timeout: float = 60) -> dict[str, Any]:
    wait_for(
        lambda: (_health(path) or {}).get("status") == status,
        timeout=timeout,
        message=f"{path.name} to say {status} (last: {_health(path)})",
    )
    report = _health(path)
    assert report is not None
    return report


def test_a_running_beat_is_healthy_degraded_while_a_group_is_unserved_and_unhealthy_without_store(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    store = ledger_app.prepared_store(pg_url)
    health = tmp_path / "beat1-health.json"
    env = ledger_app.environment(
        pg_url,
        redis_url,
        CHECKIN_INTERVAL="1",
        HEALTH_FILE=str(health),
        EXECUTION_LIMITS=json.dumps({"reindex": 2}),
    )
    with processes(tmp_path, env) as procs:
        procs.worker("worker1", concurrency=2, queues="celery,reindex")
        wait_for(lambda: len(store.check_ins(kind="worker")) == 1, 60, message="worker check-in")
        procs.beat("beat1")
        report = _wait_status(health, "healthy")
        assert report["description"] == "running, and the store answers"
        assert report["data"]["status"] == "RUNNING" and report["data"]["clustered"] is True

        # A trigger of group 'reindex', whose only serving worker goes away.
        Quartz(ledger_app.app, store=store).schedule_job(
            Job(key=JobKey("reindex"), task="ledger.record"),
            SimpleTrigger(
                key=TriggerKey("reindex"),
                start_at=datetime.now(timezone.utc) + timedelta(hours=1),
                repeat_count=0,
                repeat_interval=timedelta(0),
                execution_group="reindex",
            ),
        )
        assert procs.stop("worker1") == 0
        report = _wait_status(health, "degraded")
        assert report["data"]["unserved"] == [
            "execution group 'reindex': no live worker consumes queue 'reindex'"
        ], report
        procs.worker("worker2", concurrency=2, queues="celery,reindex")
        _wait_status(health, "healthy")

        # The store goes away under the running scheduler.
        admin = create_engine(
            make_url(pg_url).set(database="postgres"), isolation_level="AUTOCOMMIT"
        )
        name = make_url(pg_url).database
        assert procs.stop("worker2") == 0
        store.dispose()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
        admin.dispose()
        report = _wait_status(health, "unhealthy")
        assert report["description"] == "the store does not answer", report
        assert "error" in report["data"]
        procs.assert_running("beat1")


def test_a_replica_waiting_for_its_election_reports_degraded(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    store = ledger_app.prepared_store(pg_url)
    env = ledger_app.environment(
        pg_url, redis_url, CLUSTERED="0", ELECTION="postgresql", INSTANCE_ID="leader"
    )
    with processes(tmp_path, env) as procs:
        procs.env["CQ_HEALTH_FILE"] = str(tmp_path / "beat1-health.json")
        procs.beat("beat1")
        leader = _wait_status(tmp_path / "beat1-health.json", "healthy")
        assert leader["data"]["clustered"] is False
        procs.env["CQ_HEALTH_FILE"] = str(tmp_path / "beat2-health.json")
        procs.beat("beat2")
        replica = _wait_status(tmp_path / "beat2-health.json", "degraded")
        assert replica["description"] == "not started: waiting to be elected (auto-start is off)"
        assert replica["data"]["status"] == "CREATED"
        # Killing the leader elects the replica, and it turns healthy.
        procs.kill("beat1")
        _wait_status(tmp_path / "beat2-health.json", "healthy")
    store.dispose()
