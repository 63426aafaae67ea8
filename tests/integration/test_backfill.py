"""Backfill with real services: two backfills at once on PostgreSQL schedule each slot once, and
real beat and worker processes (PostgreSQL, Redis) run each slot once, one at a time for a
``disallow_concurrent`` job, with the slot in the task's context and in the trigger's history."""

from __future__ import annotations

import itertools
import json
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from celery import Celery
from click.testing import CliRunner
from sqlalchemy import create_engine, insert, select, text

from celery_quartz import Job, JobKey, Quartz, SimpleTrigger, TriggerKey
from celery_quartz.backfill import BackfillResult, SlotOutcome
from celery_quartz.cli import quartz as quartz_cli
from celery_quartz.clock import FakeClock, to_millis
from celery_quartz.keys import BACKFILL_JOBS_GROUP
from celery_quartz.store import SqlStore
from tests.integration import ledger_app
from tests.integration.processes import processes, wait_for
from tests.stores import store_at

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc)
KEY = TriggerKey("minutely", "backfill")
JOB = JobKey("minutely", "backfill")
#: Sessions of this database waiting for a lock another holds.
WAITING_ON_A_LOCK = text(
    "SELECT count(*) FROM pg_stat_activity "
    "WHERE wait_event_type = 'Lock' AND datname = current_database()"
)


def _app() -> Celery:
    app = Celery("backfill", broker="memory://", set_as_current=False)
    app.task(name="tasks.work", shared=False)(_work)
    return app


def _work() -> None:
    return None


def _schedule(store: SqlStore) -> None:
    """A trigger every minute from T0, paused (only backfills fire)."""
    Quartz(_app(), store=store).schedule_job(
        Job(key=JOB, task="tasks.work"),
        SimpleTrigger(key=KEY, start_at=T0, repeat_interval=timedelta(minutes=1), repeat_count=-1),
        paused=True,
    )


def _one_shot_slots(store: SqlStore) -> list[int]:
    t = store.tables.triggers
    with store.transaction() as conn:
        return list(
            conn.execute(
                select(t.c.origin_sched_time).where(t.c.trigger_group == BACKFILL_JOBS_GROUP)
            ).scalars()
        )


def test_two_backfills_at_once_on_postgresql_schedule_each_slot_once(pg_url: str) -> None:
    clock = FakeClock(T0 + timedelta(hours=2))
    stores = [store_at(pg_url, "unit", clock=clock, upgrade_schema=True) for _ in range(4)]
    _schedule(stores[0])
    # Overlapping ranges of 60 slots each, 90 slots in all, four backfills at once, twice.
    ranges = [(0, 60), (30, 90), (0, 90), (15, 75)]
    start = threading.Barrier(len(stores))

    def backfill(i: int) -> BackfillResult:
        low, high = ranges[i]
        quartz = Quartz(_app(), store=stores[i], clock=clock)
        start.wait()
        return quartz.backfill(
            KEY, T0 + timedelta(minutes=low), T0 + timedelta(minutes=high), max_slots=100
        )

    try:
        with ThreadPoolExecutor(len(stores)) as pool:
            results = list(pool.map(backfill, range(len(stores))))
        slots = _one_shot_slots(stores[0])
        assert sorted(slots) == [to_millis(T0 + timedelta(minutes=m)) for m in range(90)]
        assert sum(r.scheduled for r in results) == 90
        for result, (low, high) in zip(results, ranges, strict=True):
            assert result.slots_found == high - low
            assert result.scheduled + result.already_scheduled == high - low
        scheduled_by = Counter(
            s.slot for r in results for s in r.slots if s.outcome is SlotOutcome.SCHEDULED
        )
        assert set(scheduled_by.values()) == {1}
    finally:
        for store in stores:
            store.dispose()


def test_a_backfill_waits_for_a_slot_another_holds_and_counts_it_already_scheduled(
    pg_url: str,
) -> None:
    clock = FakeClock(T0 + timedelta(hours=1))
    store = store_at(pg_url, "unit", clock=clock, upgrade_schema=True)
    _schedule(store)
    engine = create_engine(pg_url)
    b = store.tables.backfill_slots
    held = to_millis(T0 + timedelta(minutes=1))
    try:
        with engine.connect() as other:
            # Another backfill has inserted this slot and not committed yet.
            other.execute(
                insert(b).values(
                    sched_name="unit",
                    trigger_group=KEY.group,
                    trigger_name=KEY.name,
                    slot_time=held,
                    created_time=held,
                    firing_trigger_name="backfill_other",
                )
            )
            with ThreadPoolExecutor(1) as pool:
                running = pool.submit(
                    Quartz(_app(), store=store, clock=clock).backfill,
                    KEY,
                    T0,
                    T0 + timedelta(minutes=3),
                )

                def waiting_on_a_lock() -> bool:
                    with engine.connect() as conn:
                        return bool(conn.execute(WAITING_ON_A_LOCK).scalar())

                wait_for(waiting_on_a_lock, timeout=20, message="the backfill waits for the slot")
                assert not running.done()
                other.commit()
                result = running.result(timeout=20)
        assert [(s.slot, s.outcome) for s in result.slots] == [
            (T0, SlotOutcome.SCHEDULED),
            (T0 + timedelta(minutes=1), SlotOutcome.ALREADY_SCHEDULED),
            (T0 + timedelta(minutes=2), SlotOutcome.SCHEDULED),
        ]
        assert sorted(_one_shot_slots(store)) == [
            to_millis(T0),
            to_millis(T0 + timedelta(minutes=2)),
        ]
    finally:
        engine.dispose()
        store.dispose()


def _ledger(url: str) -> list[Any]:
    engine = create_engine(url)
    table = ledger_app.backfills
    try:
        with engine.connect() as conn:
            return list(conn.execute(select(table).order_by(table.c.started)).all())
    finally:
        engine.dispose()


def test_real_workers_run_each_slot_once_one_at_a_time_with_the_slot_in_the_context(
    pg_url: str, redis_url: str, tmp_path: Path
) -> None:
    store = ledger_app.prepared_store(pg_url)
    quartz = Quartz(ledger_app.app, store=store)
    now = datetime.now(timezone.utc).replace(microsecond=0)
    start = now - timedelta(minutes=10)
    key = TriggerKey("every-10s", "backfill")
    # A disallow_concurrent job whose runs take 0.6 s; its trigger paused: only backfills run.
    quartz.schedule_job(
        Job(
            key=JobKey("every-10s", "backfill"),
            task="ledger.backfill",
            kwargs={"sleep": 0.6},
            disallow_concurrent=True,
        ),
        SimpleTrigger(
            key=key,
            start_at=start,
            repeat_interval=timedelta(seconds=10),
            repeat_count=-1,
            priority=7,
        ),
        paused=True,
    )
    result = quartz.backfill(key, start, start + timedelta(seconds=40))
    slots = [start + timedelta(seconds=10 * i) for i in range(4)]
    assert [s.slot for s in result.slots] == slots and result.scheduled == 4
    env = ledger_app.environment(pg_url, redis_url, IDLE_WAIT="0.5", CHECKIN_INTERVAL="1")
    with processes(tmp_path, env) as procs:
        procs.beat("beat1")
        procs.worker("w1", concurrency=4)
        wait_for(lambda: len(_ledger(pg_url)) == 4, timeout=60, message="four slots run")
        wait_for(lambda: not store.firing_states(), timeout=20, message="nothing in flight")
        procs.assert_running("beat1", "w1")
    runs = _ledger(pg_url)
    # Each slot once, as the trigger's occurrence, its context saying the slot.
    assert [(r.trigger_group, r.trigger_name) for r in runs] == [(key.group, key.name)] * 4
    assert sorted(r.scheduled_ms for r in runs) == [to_millis(s) for s in slots]
    assert [r.backfill_slot_ms for r in runs] == [r.scheduled_ms for r in runs]
    # One at a time (disallow_concurrent), though the worker could run four at once.
    for earlier, later in itertools.pairwise(runs):
        assert later.started >= earlier.ended
    # The trigger's history shows them, at their slots.
    history = ledger_app.history_rows(pg_url, trigger_name=key.name, result="succeeded")
    assert sorted(h.scheduled_time for h in history) == [to_millis(s) for s in slots]
    # A second backfill of a wider range, through the CLI, schedules only what the first did not.
    ledger_app.app.conf.quartz_store_url = pg_url
    try:
        cli = CliRunner().invoke(
            quartz_cli,
            ["backfill", key.name, "-g", key.group, "--from", (start - timedelta(seconds=30))
             .isoformat(), "--to", (start + timedelta(seconds=50)).isoformat(), "--json"],
            obj=SimpleNamespace(app=ledger_app.app),
        )  # fmt: skip
    finally:
        ledger_app.app.conf.quartz_store_url = None
    assert cli.exit_code == 0, cli.output
    again = json.loads(cli.output)
    assert (again["slots_found"], again["already_scheduled"], again["scheduled"]) == (5, 4, 1)
    assert again["already_succeeded"] == 0  # a slot scheduled before counts as that first
    assert [s["outcome"] for s in again["slots"]] == ["already_scheduled"] * 4 + ["scheduled"]
    store.dispose()


def test_slots_real_runs_succeeded_are_skipped_unless_included(
    pg_url: str, redis_url: str, tmp_path: Path
) -> None:
    store = ledger_app.prepared_store(pg_url)
    quartz = Quartz(ledger_app.app, store=store)
    start = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(seconds=2)
    key = TriggerKey("every-second", "backfill")
    quartz.schedule_job(
        Job(key=JobKey("every-second", "backfill"), task="ledger.backfill"),
        SimpleTrigger(
            key=key, start_at=start, repeat_interval=timedelta(seconds=1), repeat_count=-1
        ),
    )
    first_three = [to_millis(start + timedelta(seconds=s)) for s in range(3)]
    env = ledger_app.environment(pg_url, redis_url, IDLE_WAIT="0.5", CHECKIN_INTERVAL="1")
    with processes(tmp_path, env) as procs:
        procs.beat("beat1")
        procs.worker("w1", concurrency=2)

        def ran_on_schedule() -> set[int]:
            return {r.scheduled_ms for r in _ledger(pg_url) if r.backfill_slot_ms is None}

        wait_for(lambda: set(first_three) <= ran_on_schedule(), timeout=60, message="three runs")
        quartz.pause_trigger(key)
        wait_for(lambda: not store.firing_states(), timeout=20, message="nothing in flight")
        end = start + timedelta(seconds=3)
        wait_for(lambda: datetime.now(timezone.utc) >= end, timeout=5, message="the range past")
        skipped = quartz.backfill(key, start, end)
        assert (skipped.slots_found, skipped.already_succeeded, skipped.scheduled) == (3, 3, 0)
        included = quartz.backfill(key, start, end, include_succeeded=True)
        assert (included.scheduled, included.already_succeeded) == (3, 0)

        def backfilled() -> list[int]:
            return sorted(r.backfill_slot_ms for r in _ledger(pg_url) if r.backfill_slot_ms)

        wait_for(lambda: backfilled() == first_three, timeout=60, message="the three again")
        procs.assert_running("beat1", "w1")
    store.dispose()
