"""Node affinity with real workers: an auto-pin keeps a trigger on the first worker that ran it
and moves, claimed by compare-and-swap, when that worker is killed; a named pin comes back to its
worker when the worker starts again."""

from __future__ import annotations

import socket
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from sqlalchemy import create_engine, select

from celery_quartz import (
    Job,
    JobKey,
    PreferredNode,
    Quartz,
    SimpleMisfireInstruction,
    SimpleTrigger,
    TriggerKey,
)
from celery_quartz.store import SqlStore
from tests.integration import ledger_app
from tests.integration.brokers import on_both_brokers
from tests.integration.processes import Processes, processes, wait_for

KEY = TriggerKey("pinned", "affinity")
HOST = socket.gethostname()


def node(name: str) -> str:
    return f"{name}@{HOST}"


def _setup(url: str, pin: PreferredNode) -> tuple[SqlStore, Quartz]:
    store = ledger_app.prepared_store(url)
    quartz = Quartz(ledger_app.app, store=store)
    trigger = SimpleTrigger(
        key=KEY,
        start_at=datetime.now(timezone.utc) + timedelta(seconds=1),
        repeat_interval=timedelta(milliseconds=500),
        repeat_count=-1,
        preferred_node=pin,
        misfire_instruction=SimpleMisfireInstruction.RESCHEDULE_NEXT_WITH_REMAINING_COUNT,
    )
    quartz.schedule_job(Job(key=JobKey("pinned", "affinity"), task="ledger.record"), trigger)
    return store, quartz


def _env(url: str, broker_url: str) -> dict[str, str]:
    return ledger_app.environment(
        url, broker_url, CHECKIN_INTERVAL="1", CHECKIN_THRESHOLD="1", MISFIRE_THRESHOLD="3"
    )


def _runs(url: str, since: float) -> list[tuple[int, str]]:
    """(scheduled ms, worker) of the trigger's executions scheduled after ``since`` (epoch s)."""
    engine = create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(
            select(ledger_app.ledger.c.scheduled_ms, ledger_app.ledger.c.worker)
            .where(
                ledger_app.ledger.c.trigger_name == KEY.name,
                ledger_app.ledger.c.scheduled_ms > int(since * 1000),
            )
            .order_by(ledger_app.ledger.c.scheduled_ms)
        ).all()
    engine.dispose()
    return [(r.scheduled_ms, r.worker) for r in rows]


def _workers_up(procs: Processes, store: SqlStore, *names: str) -> None:
    """Start workers and wait for each process (not an earlier one of the same name) to check in."""
    expected = {(node(name), procs.worker(name, concurrency=2).pid) for name in names}
    wait_for(
        lambda: expected <= {(c.instance_name, c.pid) for c in store.check_ins("worker")},
        timeout=60,
        message=f"{', '.join(names)} to check in",
    )


def _pin(quartz: Quartz) -> PreferredNode:
    trigger = quartz.get_trigger(KEY)
    assert trigger is not None
    return trigger.preferred_node


@on_both_brokers
def test_an_auto_pin_stays_on_its_first_worker_and_moves_when_that_worker_dies(
    tmp_path: Path, pg_url: str, broker_url: str
) -> None:
    store, quartz = _setup(pg_url, PreferredNode.AUTO)
    with processes(tmp_path, _env(pg_url, broker_url)) as procs:
        _workers_up(procs, store, "worker1", "worker2")
        procs.beat("beat1")
        wait_for(lambda: _pin(quartz).node is not None, timeout=30, message="the auto-pin claim")
        first = _pin(quartz)
        assert first.is_automatic
        claimed_at = time.time()
        time.sleep(4)
        # Firings acquired after the claim all ran on the claiming worker.
        settled = _runs(pg_url, claimed_at + 1.5)
        assert len(settled) >= 4
        assert {w for _, w in settled} == {first.node}

        owner = first.node.partition("@")[0]  # type: ignore[union-attr]
        survivor = node("worker2" if owner == "worker1" else "worker1")
        procs.kill(owner)
        killed_at = time.time()
        wait_for(
            lambda: _pin(quartz).node == survivor,
            timeout=20,
            message="the survivor to claim the pin",
        )
        moved_after = time.time() - killed_at
        assert _pin(quartz).is_automatic
        time.sleep(3)
        after = _runs(pg_url, time.time() - 2.5)
        assert after and {w for _, w in after} == {survivor}
        procs.assert_running("beat1", "worker1" if owner == "worker2" else "worker2")
    # Detection window: check-in interval (1 s) + threshold (1 s), and a step of recovery.
    assert moved_after < 10, f"the pin moved {moved_after:.1f}s after the kill"
    store.dispose()


def test_a_named_pin_returns_to_its_worker_when_it_starts_again(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    store, quartz = _setup(pg_url, PreferredNode.for_node(node("worker1")))
    with processes(tmp_path, _env(pg_url, redis_url)) as procs:
        _workers_up(procs, store, "worker1", "worker2")
        procs.beat("beat1")
        wait_for(lambda: len(_runs(pg_url, 0)) >= 4, timeout=30, message="first runs")
        assert {w for _, w in _runs(pg_url, 0)} == {node("worker1")}

        procs.kill("worker1")
        wait_for(
            lambda: any(w == node("worker2") for _, w in _runs(pg_url, 0)),
            timeout=20,
            message="worker2 to take the trigger over",
        )
        assert _pin(quartz) == PreferredNode.for_node(node("worker1"))  # a named pin never moves

        _workers_up(procs, store, "worker1")
        back = time.time()
        wait_for(
            lambda: len(_runs(pg_url, back + 1.5)) >= 3,
            timeout=20,
            message="runs after worker1 is back",
        )
        assert {w for _, w in _runs(pg_url, back + 1.5)} == {node("worker1")}
    store.dispose()
