"""The run history written by real scheduler and worker processes on PostgreSQL and Redis
(docs/history.md): a batch of successes with what each task reported and the job's status, and
every reason an occurrence did not run, with the instance that decided it. The other results
are checked where their paths are exercised: retried and failed in test_retries, a killed
worker's interrupted and recovered executions and the expired firings in test_recovery, a
hard time limit (failed), a killed pool process (recovered) and a revoke with terminate
(cancelled) in test_worker."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

from celery_quartz import Job, JobKey, Quartz, SimpleTrigger, TriggerKey
from celery_quartz.store import SqlStore
from celery_quartz.triggers import SimpleMisfireInstruction
from tests.integration import ledger_app
from tests.integration.processes import processes, wait_for

GROUP = "history"
#: A one-shot that misfires is finished, and its occurrence recorded.
FINISH = SimpleMisfireInstruction.RESCHEDULE_NEXT_WITH_REMAINING_COUNT


def _one_shot(name: str, at: datetime, *, group: str | None = None) -> SimpleTrigger:
    trigger = SimpleTrigger(
        key=TriggerKey(name, GROUP),
        start_at=at,
        repeat_count=0,
        repeat_interval=timedelta(0),
        misfire_instruction=FINISH,
    )
    trigger.execution_group = group
    return trigger


def _beat_instance(store: SqlStore) -> str:
    wait_for(
        lambda: len(store.check_ins(kind="scheduler")) == 1,
        timeout=60,
        message="the scheduler to check in",
    )
    [beat] = store.check_ins(kind="scheduler")
    return beat.instance_name


def test_batched_successes_are_recorded_with_their_report_and_fold_the_jobs_status(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    store = ledger_app.prepared_store(pg_url)
    quartz = Quartz(ledger_app.app, store=store)
    env = ledger_app.environment(pg_url, redis_url, CHECKIN_INTERVAL="1", CHECKIN_THRESHOLD="1")
    with processes(tmp_path, env) as procs:
        procs.worker("worker1", concurrency=2)
        procs.beat("beat1")
        beat = _beat_instance(store)
        start = datetime.now(timezone.utc) + timedelta(seconds=1)
        trigger = SimpleTrigger(
            key=TriggerKey("reporter", GROUP),
            start_at=start,
            repeat_count=2,
            repeat_interval=timedelta(seconds=1),
        )
        job = Job(key=JobKey("reporter", GROUP), task="ledger.report", kwargs={"rows": 1200})
        quartz.schedule_jobs([(job, [trigger])])
        wait_for(
            lambda: len(ledger_app.history_rows(pg_url)) == 3,
            timeout=30,
            message="three runs recorded",
        )
    rows = ledger_app.history_rows(pg_url)
    assert {(r.result, r.trigger_name, r.job_name, r.task_name) for r in rows} == {
        ("succeeded", "reporter", "reporter", "ledger.report")
    }
    assert [r.scheduled_time for r in rows] == [
        int((start + timedelta(seconds=i)).timestamp() * 1000) for i in range(3)
    ]
    for row in rows:
        assert (row.summary, json.loads(row.metrics)) == ("1200 rows", {"rows": 1200})
        assert (row.instance_name, row.worker_name.split("@")[0]) == (beat, "worker1")
        assert row.task_id == row.fire_instance_id and json.loads(row.kwargs) == {"rows": 1200}
        assert row.duration_ms == row.finished_time - row.started_time >= 0
        assert row.lateness_ms == row.started_time - row.scheduled_time
    status = ledger_app.run_status(pg_url, "job", "reporter")
    assert (status.runs, status.failures, status.consecutive_failures) == (3, 0, 0)
    assert status.last_success_time == status.last_run_time == max(r.finished_time for r in rows)
    assert ledger_app.run_status(pg_url, "trigger", "reporter").runs == 3
    store.dispose()


def test_every_occurrence_not_run_is_recorded_with_its_reason_and_deciding_node(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    """A trigger found late (misfired), one held back by its execution group's limit past the
    misfire threshold (held, by the scheduler), and one held back by its disallow_concurrent
    job's running firing until it was late (held, at that firing's end, by its worker)."""
    store = ledger_app.prepared_store(pg_url)
    quartz = Quartz(ledger_app.app, store=store)
    env = ledger_app.environment(
        pg_url,
        redis_url,
        CHECKIN_INTERVAL="1",
        CHECKIN_THRESHOLD="1",
        MISFIRE_THRESHOLD="2",
        EXECUTION_LIMITS=json.dumps({"capped": 0}),
    )
    with processes(tmp_path, env) as procs:
        procs.worker("worker1", concurrency=2)
        procs.beat("beat1")
        beat = _beat_instance(store)
        now = datetime.now(timezone.utc)
        exclusive = Job(
            key=JobKey("exclusive", GROUP),
            task="ledger.record",
            kwargs={"sleep": 5},
            disallow_concurrent=True,
        )
        quartz.schedule_jobs(
            [
                (
                    Job(key=JobKey("late", GROUP), task="ledger.record"),
                    [_one_shot("late", now - timedelta(seconds=30))],
                ),
                (
                    Job(key=JobKey("capped", GROUP), task="ledger.record"),
                    [_one_shot("capped", now + timedelta(seconds=1), group="capped")],
                ),
                (
                    exclusive,
                    [
                        _one_shot("first", now + timedelta(seconds=1)),
                        _one_shot("second", now + timedelta(seconds=2)),
                    ],
                ),
            ]
        )
        wait_for(
            lambda: len(ledger_app.history_rows(pg_url)) == 4,
            timeout=40,
            message="three occurrences not run and one run recorded",
        )
    rows = {r.trigger_name: r for r in ledger_app.history_rows(pg_url)}
    assert {name: r.result for name, r in rows.items()} == {
        "late": "misfired",
        "capped": "held",
        "first": "succeeded",
        "second": "held",
    }
    assert rows["late"].instance_name == beat
    assert "RESCHEDULE_NEXT_WITH_REMAINING_COUNT" in rows["late"].reason
    assert rows["capped"].instance_name == beat
    assert rows["capped"].reason.startswith(
        "held back by execution group 'capped' at its execution limit"
    )
    assert rows["second"].worker_name is None
    assert rows["second"].instance_name.split("@")[0] == "worker1"
    assert "disallow_concurrent: a firing of job history.exclusive was running" in (
        rows["second"].reason
    )
    for name in ("late", "capped", "second"):
        row = rows[name]
        assert (row.fire_instance_id, row.started_time, row.job_group) == (None, None, GROUP)
        assert row.event_time >= row.scheduled_time
    assert ledger_app.run_status(pg_url, "job", "capped") is None
    assert ledger_app.run_status(pg_url, "job", "exclusive").runs == 1
    store.dispose()
