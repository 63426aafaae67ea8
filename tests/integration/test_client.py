"""The client API against a running cluster: real ``celery beat`` and worker processes on
PostgreSQL and Redis see what the client changes, while they run: a paused trigger and a paused
group stop firing and fire again once resumed, a deleted job stops, a triggered job runs once
now, a rescheduled trigger fires at its new time."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, select

from celery_quartz import Job, JobKey, Quartz, SimpleTrigger, TriggerKey
from celery_quartz.clock import to_millis
from tests.integration import ledger_app
from tests.integration.processes import processes, wait_for


def _runs(url: str) -> list[Any]:
    engine = create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(select(ledger_app.ledger)).all()
    engine.dispose()
    return rows


def _started(url: str, group: str, name: str | None = None) -> list[float]:
    return sorted(
        r.started
        for r in _runs(url)
        if r.trigger_group == group and (name is None or r.trigger_name == name)
    )


def _every_second(name: str, group: str, start: datetime) -> SimpleTrigger:
    return SimpleTrigger(
        key=TriggerKey(name, group),
        start_at=start,
        repeat_interval=timedelta(seconds=1),
        repeat_count=-1,
    )


def test_a_running_cluster_follows_pauses_resumes_deletions_manual_firings_and_reschedules(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    store = ledger_app.prepared_store(pg_url)
    quartz = Quartz(ledger_app.app, store=store)
    start = datetime.now(timezone.utc) + timedelta(seconds=2)
    later = start + timedelta(hours=1)
    quartz.schedule_jobs(
        [
            (Job(key=JobKey("paused"), task="ledger.record"), [_every_second("a", "c", start)]),
            (Job(key=JobKey("grouped"), task="ledger.record"), [_every_second("b", "g", start)]),
            (Job(key=JobKey("deleted"), task="ledger.record"), [_every_second("d", "c", start)]),
            (
                Job(key=JobKey("moved"), task="ledger.record"),
                [
                    SimpleTrigger(
                        key=TriggerKey("m", "c"),
                        start_at=later,
                        repeat_count=0,
                        repeat_interval=timedelta(0),
                    )
                ],
            ),
        ]
    )
    quartz.add_job(Job(key=JobKey("manual"), task="ledger.record", durable=True))
    env = ledger_app.environment(
        pg_url, redis_url, IDLE_WAIT="0.5", CHECKIN_INTERVAL="1", CHECKIN_THRESHOLD="1"
    )
    with processes(tmp_path, env) as procs:
        procs.worker("worker1", concurrency=4)
        procs.beat("beat1")
        procs.beat("beat2")
        wait_for(
            lambda: all(_started(pg_url, g, n) for g, n in (("c", "a"), ("g", "b"), ("c", "d"))),
            timeout=60,
            message="the repeating triggers to fire",
        )
        quartz.pause_trigger(TriggerKey("a", "c"))
        quartz.pause_trigger_group("g")
        assert quartz.delete_job(JobKey("deleted"))
        paused_at = time.time()
        manual = quartz.trigger_job(JobKey("manual"))
        moved_to = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(seconds=3)
        assert quartz.reschedule_job(
            TriggerKey("m", "c"),
            SimpleTrigger(
                key=TriggerKey("m", "c"),
                job_key=JobKey("moved"),
                start_at=moved_to,
                repeat_count=0,
                repeat_interval=timedelta(0),
            ),
        )
        assert quartz.get_trigger_state(TriggerKey("a", "c")) == "PAUSED"
        assert quartz.get_trigger_state(TriggerKey("b", "g")) == "PAUSED"
        assert quartz.get_paused_trigger_groups() == ["g"]
        wait_for(
            lambda: _started(pg_url, "c", "m") and _started(pg_url, manual.key.group),
            timeout=30,
            message="the manual firing and the rescheduled trigger",
        )
        time.sleep(3)
        # A firing already claimed or published when the change was made may still run.
        for group, name in (("c", "a"), ("g", "b"), ("c", "d")):
            late = [s for s in _started(pg_url, group, name) if s > paused_at + 2]
            assert late == [], (group, name, [s - paused_at for s in late])
        resumed_at = time.time()
        quartz.resume_trigger(TriggerKey("a", "c"))
        quartz.resume_trigger_group("g")
        wait_for(
            lambda: all(
                any(s > resumed_at for s in _started(pg_url, g, n))
                for g, n in (("c", "a"), ("g", "b"))
            ),
            timeout=30,
            message="the resumed triggers to fire again",
        )
        procs.assert_running("worker1", "beat1", "beat2")
    rows = _runs(pg_url)
    [manual_run] = [r for r in rows if r.trigger_group == manual.key.group]
    assert manual_run.trigger_name == manual.key.name
    [moved] = [r for r in rows if r.trigger_name == "m"]
    assert moved.scheduled_ms == to_millis(moved_to)
    assert quartz.get_job(JobKey("deleted")) is None
    assert quartz.get_job(JobKey("manual")) is not None  # durable: kept after its firing
    store.dispose()
