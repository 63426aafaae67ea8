"""The worker side on a real worker: one execution start per firing, and completion."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from sqlalchemy import create_engine, func, select

from celery_quartz import Job, JobKey, Quartz, SimpleTrigger, TriggerKey
from celery_quartz.publisher import Publisher
from celery_quartz.store import SqlStore, migrate
from tests.integration import ledger_app
from tests.integration.processes import processes, wait_for


def _ledger_counts(url: str) -> tuple[int, int]:
    engine = create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(select(func.count()).select_from(ledger_app.ledger)).scalar_one()
        dups = conn.execute(select(func.count()).select_from(ledger_app.duplicates)).scalar_one()
    engine.dispose()
    return rows, dups


def test_the_same_firing_published_twice_starts_once(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    store = SqlStore(pg_url, scheduler_name="ledger_app")
    migrate.upgrade(store.engine)
    ledger_app.create_ledger(pg_url)
    now = datetime.now(timezone.utc)
    Quartz(ledger_app.app, store=store).schedule_job(
        Job(key=JobKey("once"), task="ledger.record", kwargs={"sleep": 1.0}),
        SimpleTrigger(
            key=TriggerKey("once"), start_at=now, repeat_count=0, repeat_interval=timedelta(0)
        ),
    )
    acquired = store.acquire_next_triggers(
        "by-hand",
        no_later_than=now + timedelta(seconds=1),
        max_count=10,
        time_window=0,
    )
    firings = store.fire("by-hand", acquired)
    assert len(firings) == 1

    publisher = Publisher(Celery("ledger_app", broker=redis_url, set_as_current=False))
    env = {"CQ_BROKER_URL": redis_url, "CQ_STORE_URL": pg_url, "CQ_LEDGER_URL": pg_url}
    with processes(tmp_path, env) as procs:
        publisher.publish(firings)
        publisher.publish(firings)
        procs.worker("worker1", concurrency=2)
        wait_for(lambda: not store.firing_states(), timeout=30, message="the firing to complete")
        # The second delivery is refused at start; give it time to arrive and be refused.
        wait_for(
            lambda: "not starting it again" in procs.log("worker1"),
            timeout=15,
            message="the duplicate delivery to be refused",
        )
        time.sleep(0.5)
    assert _ledger_counts(pg_url) == (1, 0)
    # The one-shot trigger completed: removed with its non-durable job.
    assert store.count_rows()["triggers"] == 0
    assert store.count_rows()["jobs"] == 0
    store.dispose()


def test_a_failing_task_completes_its_firing_and_is_not_run_again(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    store = SqlStore(pg_url, scheduler_name="ledger_app")
    migrate.upgrade(store.engine)
    ledger_app.create_ledger(pg_url)
    now = datetime.now(timezone.utc)
    # ledger.record with a non-numeric sleep raises TypeError after recording its start.
    Quartz(ledger_app.app, store=store).schedule_job(
        Job(key=JobKey("fails"), task="ledger.record", kwargs={"sleep": "not a number"}),
        SimpleTrigger(
            key=TriggerKey("fails"), start_at=now, repeat_count=0, repeat_interval=timedelta(0)
        ),
    )
    env = {"CQ_BROKER_URL": redis_url, "CQ_STORE_URL": pg_url, "CQ_LEDGER_URL": pg_url}
    with processes(tmp_path, env) as procs:
        procs.worker("worker1", concurrency=2)
        procs.beat("beat1")
        wait_for(lambda: _ledger_counts(pg_url)[0] == 1, timeout=30, message="the task to start")
        wait_for(lambda: not store.firing_states(), timeout=30, message="the firing to complete")
        time.sleep(2)
        assert "TypeError" in procs.log("worker1")
    assert _ledger_counts(pg_url) == (1, 0)
    store.dispose()


def _attempts(url: str) -> list[Any]:
    engine = create_engine(url)
    a = ledger_app.attempts
    with engine.connect() as conn:
        rows = conn.execute(select(a).order_by(a.c.started)).all()
    engine.dispose()
    return rows


@pytest.mark.parametrize(
    ("task", "kwargs"),
    [("ledger.celery_retry", {"retries": 2}), ("ledger.refire", {"refires": 2})],
    ids=["celery-self-retry", "refire-job"],
)
def test_a_celery_retry_and_a_refire_run_the_same_firing_again_on_a_real_worker(
    tmp_path: Path, pg_url: str, redis_url: str, task: str, kwargs: dict[str, int]
) -> None:
    store = ledger_app.prepared_store(pg_url)
    quartz = Quartz(ledger_app.app, store=store)
    quartz.schedule_job(
        Job(key=JobKey("again"), task=task, kwargs=kwargs),
        SimpleTrigger(
            key=TriggerKey("again"),
            start_at=datetime.now(timezone.utc),
            repeat_count=0,
            repeat_interval=timedelta(0),
        ),
    )
    env = ledger_app.environment(pg_url, redis_url)
    with processes(tmp_path, env) as procs:
        procs.worker("worker1", concurrency=2)
        procs.beat("beat1")
        wait_for(lambda: len(_attempts(pg_url)) == 3, timeout=60, message="three runs")
        wait_for(lambda: not store.firing_states(), timeout=30, message="the firing to complete")
        time.sleep(2)  # time for a fourth run, were there one
    rows = _attempts(pg_url)
    # One firing, run three times: its fire instance id throughout, its count going up.
    assert [r.retry_attempt for r in rows] == [0, 1, 2]
    assert len({r.fire_instance_id for r in rows}) == 1
    assert {r.firing_trigger_group for r in rows} == {"DEFAULT"}
    # The one-shot trigger completed once, at the end: removed with its job.
    assert quartz.get_trigger(TriggerKey("again")) is None
    assert quartz.get_job(JobKey("again")) is None
    store.dispose()
