"""A cluster of real ``celery beat -S celery_quartz.Scheduler`` processes and a real worker fires
every occurrence exactly once: on PostgreSQL, on SQLite, and with a scheduler killed mid-run."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import create_engine, func, select

from celery_quartz import Job, JobKey, Quartz, SimpleTrigger, TriggerKey
from celery_quartz.clock import to_millis
from celery_quartz.store import SqlStore
from tests.integration import ledger_app
from tests.integration.processes import processes, wait_for
from tests.stores import store_at

SCHEDULER_NAME = "ledger_app"
INTERVALS = (1.0, 1.25, 1.5, 1.75, 2.0)


def schedule_fifty_triggers(store: SqlStore, start: datetime) -> list[SimpleTrigger]:
    """10 jobs x 5 triggers, every 1 to 2 seconds, all starting at ``start``."""
    quartz = Quartz(ledger_app.app, store=store)
    triggers = []
    items = []
    for j in range(10):
        job = Job(key=JobKey(f"job-{j}", "cluster"), task="ledger.record")
        mine = [
            SimpleTrigger(
                key=TriggerKey(f"t-{j}-{i}", "cluster"),
                start_at=start,
                repeat_interval=timedelta(seconds=interval),
                repeat_count=-1,
            )
            for i, interval in enumerate(INTERVALS)
        ]
        triggers.extend(mine)
        items.append((job, mine))
    quartz.schedule_jobs(items)
    return triggers


def due_occurrences(triggers: list[SimpleTrigger], until: datetime) -> set[tuple[str, int]]:
    due = set()
    for trigger in triggers:
        assert trigger.start_at is not None
        t: datetime | None = trigger.start_at
        while t is not None and t <= until:
            due.add((trigger.key.name, to_millis(t)))
            t = trigger.next_fire_time_after(t)
    return due


def run_cluster(
    tmp_path: Path,
    *,
    store_url: str,
    broker_url: str,
    ledger_url: str,
    schedulers: int,
    seconds: float,
    kill_one_at: float | None = None,
) -> None:
    store = store_at(store_url, SCHEDULER_NAME, upgrade_schema=True)
    ledger_app.create_ledger(ledger_url)
    start = datetime.now(timezone.utc) + timedelta(seconds=3)
    triggers = schedule_fifty_triggers(store, start)
    env = {"CQ_BROKER_URL": broker_url, "CQ_STORE_URL": store_url, "CQ_LEDGER_URL": ledger_url}
    beats = [f"beat{i}" for i in range(1, schedulers + 1)]
    with processes(tmp_path, env) as procs:
        procs.worker("worker1", concurrency=4)
        for name in beats:
            procs.beat(name)
        began = time.monotonic()
        if kill_one_at is not None:
            time.sleep(kill_one_at)
            procs.assert_running(*beats)
            procs.kill(beats[0])
            beats = beats[1:]
        time.sleep(max(0.0, seconds - (time.monotonic() - began)))
        procs.assert_running("worker1", *beats)
        stopped = datetime.now(timezone.utc)
        for name in beats:
            assert procs.stop(name) == 0, procs.log(name)[-4000:]
        # A scheduler fires until it has stopped, and stopping one after the other takes a
        # while on a loaded machine: later instants are possible until the last has stopped.
        all_stopped = datetime.now(timezone.utc)
        # Everything published must run and complete: no fired row left in flight.
        wait_for(lambda: not store.firing_states(), timeout=30, message="fired rows to drain")
        procs.assert_running("worker1")

    ledger = create_engine(ledger_url)
    with ledger.connect() as conn:
        rows = conn.execute(
            select(
                ledger_app.ledger.c.trigger_name,
                ledger_app.ledger.c.scheduled_ms,
                ledger_app.ledger.c.fired_by,
            )
        ).all()
        duplicate_count = conn.execute(
            select(func.count()).select_from(ledger_app.duplicates)
        ).scalar_one()
    ledger.dispose()

    executed = {(r.trigger_name, r.scheduled_ms) for r in rows}
    # Occurrences due up to three seconds before the schedulers stopped must all have run.
    due = due_occurrences(triggers, stopped - timedelta(seconds=3))
    possible = due_occurrences(triggers, all_stopped + timedelta(seconds=5))
    assert len(due) > 500
    assert duplicate_count == 0, f"{duplicate_count} occurrence(s) started twice"
    assert due - executed == set(), f"{len(due - executed)} due occurrence(s) never ran"
    assert executed <= possible, "an execution for an instant that is no occurrence"
    fired_by = {r.fired_by for r in rows}
    assert len(fired_by) > 1, f"only {fired_by} fired"
    store.dispose()


@pytest.mark.slow
def test_three_schedulers_on_postgres_fire_every_occurrence_exactly_once(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    run_cluster(
        tmp_path,
        store_url=pg_url,
        broker_url=redis_url,
        ledger_url=pg_url,
        schedulers=3,
        seconds=30,
    )


@pytest.mark.slow
def test_two_schedulers_on_sqlite_fire_every_occurrence_exactly_once(
    tmp_path: Path, redis_url: str
) -> None:
    run_cluster(
        tmp_path,
        store_url=f"sqlite:///{tmp_path / 'quartz.db'}",
        broker_url=redis_url,
        ledger_url=f"sqlite:///{tmp_path / 'ledger.db'}",
        schedulers=2,
        seconds=30,
    )


@pytest.mark.slow
def test_a_scheduler_killed_mid_run_loses_and_duplicates_nothing(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    run_cluster(
        tmp_path,
        store_url=pg_url,
        broker_url=redis_url,
        ledger_url=pg_url,
        schedulers=3,
        seconds=25,
        kill_one_at=10,
    )
