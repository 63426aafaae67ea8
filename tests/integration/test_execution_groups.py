"""Execution limits hold with real schedulers, workers, PostgreSQL and Redis (the cluster-scoped
limit on RabbitMQ too): the ledger's
start/end times never overlap more than the group's capacity, the broker never holds more of the
group's messages than may run, and held-back occurrences end by their misfire instruction."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import redis as redis_client
from sqlalchemy import create_engine, select

from celery_quartz import Job, JobKey, Quartz, SimpleMisfireInstruction, SimpleTrigger, TriggerKey
from celery_quartz.store import SqlStore
from tests.integration import ledger_app
from tests.integration.brokers import QueueSampler, on_both_brokers
from tests.integration.processes import Processes, processes, wait_for

GROUP = "reindex"
TRIGGERS = 10
RUN_SECONDS = 15.0
TASK_SECONDS = 1.0


def _schedule(store: SqlStore, start: datetime) -> None:
    """Ten triggers of the group, each due every second: far more than two at a time can run."""
    quartz = Quartz(ledger_app.app, store=store)
    items = []
    for i in range(TRIGGERS):
        trigger = SimpleTrigger(
            key=TriggerKey(f"t{i}", "groups"),
            start_at=start,
            repeat_interval=timedelta(seconds=1),
            repeat_count=-1,
            execution_group=GROUP,
            # A held-back occurrence that misfires is skipped: the next one is waited for.
            misfire_instruction=SimpleMisfireInstruction.RESCHEDULE_NEXT_WITH_REMAINING_COUNT,
        )
        job = Job(key=JobKey(f"j{i}", "groups"), task="ledger.record", kwargs={"sleep": 1.0})
        items.append((job, [trigger]))
    quartz.schedule_jobs(items)


def _max_overlap(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    running = most = 0
    for _, step in events:  # an end sorts before a start at the same instant
        running += step
        most = max(most, running)
    return most


def _run(
    tmp_path: Path, pg_url: str, broker_url: str, limits: dict[str, object]
) -> tuple[int, QueueSampler, list[tuple[float, float]], SqlStore]:
    store = ledger_app.prepared_store(pg_url)
    env = ledger_app.environment(
        pg_url,
        broker_url,
        CHECKIN_INTERVAL="1",
        CHECKIN_THRESHOLD="2",
        MISFIRE_THRESHOLD="3",
        EXECUTION_LIMITS=json.dumps(limits),
    )
    with processes(tmp_path, env) as procs:
        _start_workers(procs, store)
        start = datetime.now(timezone.utc) + timedelta(seconds=2)
        _schedule(store, start)
        with QueueSampler(broker_url, GROUP) as sampler:
            procs.beat("beat1")
            procs.beat("beat2")
            time.sleep(RUN_SECONDS)
            procs.assert_running("beat1", "beat2", "worker1", "worker2")
            stopped = datetime.now(timezone.utc)
            assert procs.stop("beat1") == 0, procs.log("beat1")[-3000:]
            assert procs.stop("beat2") == 0, procs.log("beat2")[-3000:]
        wait_for(lambda: not store.firing_states(), timeout=30, message="fired rows to drain")
        cap_logs = procs.log("beat1") + procs.log("beat2")
    engine = create_engine(pg_url)
    with engine.connect() as conn:
        rows = conn.execute(
            select(ledger_app.ledger.c.started, ledger_app.ledger.c.ended).where(
                ledger_app.ledger.c.trigger_group == "groups"
            )
        ).all()
    engine.dispose()
    assert all(r.ended is not None for r in rows), "an execution never ended"
    assert "misfire" in cap_logs, "no held-back occurrence misfired"
    _assert_schedules_moved_on(store, stopped)
    return len(rows), sampler, [(r.started, r.ended) for r in rows], store


def _start_workers(procs: Processes, store: SqlStore) -> None:
    procs.worker("worker1", concurrency=8, queues=GROUP)
    procs.worker("worker2", concurrency=8, queues=GROUP)
    wait_for(
        lambda: len(store.check_ins(kind="worker")) == 2,
        timeout=60,
        message="both workers to check in",
    )


def _assert_schedules_moved_on(store: SqlStore, stopped: datetime) -> None:
    """Held triggers were not left behind: when the schedulers stopped, each waited for a fire
    time no older than the misfire threshold (3 s), a misfire scan interval (3 s) and some slack
    (a stuck one would still point at the run's start, 15 s earlier)."""
    quartz = Quartz(ledger_app.app, store=store)
    for i in range(TRIGGERS):
        trigger = quartz.get_trigger(TriggerKey(f"t{i}", "groups"))
        assert trigger is not None and trigger.next_fire_time is not None
        assert trigger.next_fire_time > stopped - timedelta(seconds=9), trigger


@on_both_brokers
@pytest.mark.slow
def test_a_cluster_scoped_limit_of_two_holds_across_two_workers_of_eight(
    tmp_path: Path, pg_url: str, broker_url: str
) -> None:
    count, sampler, intervals, store = _run(
        tmp_path, pg_url, broker_url, {GROUP: {"max_concurrent": 2, "scope": "cluster"}}
    )
    assert _max_overlap(intervals) <= 2
    assert sampler.samples > 100 and sampler.longest <= 2
    # Due: 10 a second for about 15 s; at most 2 a second can run. The rest misfired.
    assert 6 <= count <= 2 * (RUN_SECONDS + 2) / TASK_SECONDS
    store.dispose()


@pytest.mark.slow
def test_a_node_scoped_limit_of_two_allows_two_per_serving_worker(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    count, sampler, intervals, store = _run(tmp_path, pg_url, redis_url, {GROUP: 2})
    overlap = _max_overlap(intervals)
    assert 3 <= overlap <= 4, f"{overlap} overlapping executions"
    assert sampler.longest <= 4
    assert count <= 4 * (RUN_SECONDS + 2) / TASK_SECONDS
    store.dispose()


def test_a_cluster_scoped_group_with_no_live_worker_publishes_up_to_its_limit_and_waits(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    """docs/execution-groups.md: a cluster-scoped limit does not depend on the workers, so its
    group is acquired with no worker consuming its queue; the messages wait in the broker,
    counted in flight, and run once a worker consumes the queue."""
    store = ledger_app.prepared_store(pg_url)
    env = ledger_app.environment(
        pg_url,
        redis_url,
        CHECKIN_INTERVAL="1",
        CHECKIN_THRESHOLD="1",
        EXECUTION_LIMITS=json.dumps({"billing": {"max_concurrent": 2, "scope": "cluster"}}),
    )
    start = datetime.now(timezone.utc) + timedelta(seconds=2)
    Quartz(ledger_app.app, store=store).schedule_jobs(
        [
            (
                Job(key=JobKey(f"b{i}", "billing"), task="ledger.record"),
                [
                    SimpleTrigger(
                        key=TriggerKey(f"b{i}", "billing"),
                        start_at=start,
                        repeat_count=0,
                        repeat_interval=timedelta(0),
                        execution_group="billing",
                    )
                ],
            )
            for i in range(5)
        ]
    )
    queue = redis_client.Redis.from_url(redis_url)
    with processes(tmp_path, env) as procs:
        # A live worker, but not on the group's queue.
        procs.worker("other", concurrency=2, queues="celery")
        wait_for(lambda: len(store.check_ins(kind="worker")) == 1, 60, message="check-in")
        procs.beat("beat1")
        wait_for(lambda: queue.llen("billing") == 2, 30, message="two messages in 'billing'")
        time.sleep(3)  # no more than the limit is published, however long it waits
        assert queue.llen("billing") == 2
        assert sorted(store.firing_states().values()) == ["PUBLISHED", "PUBLISHED"]
        assert "unserved:" not in procs.log("beat1")
        procs.worker("billing", concurrency=2, queues="billing")
        wait_for(lambda: len(_ledger_rows(pg_url, "billing")) == 5, 60, message="all five to run")
        wait_for(lambda: not store.firing_states(), 30, message="nothing in flight")
    queue.close()
    assert {r.worker.split("@")[0] for r in _ledger_rows(pg_url, "billing")} == {"billing"}
    store.dispose()


def _ledger_rows(url: str, group: str) -> list:  # type: ignore[type-arg]
    engine = create_engine(url)
    led = ledger_app.ledger
    with engine.connect() as conn:
        rows = conn.execute(select(led).where(led.c.trigger_group == group)).all()
    engine.dispose()
    return list(rows)
