"""A PostgreSQL failover under a running cluster: the store on a primary with a synchronous
standby, reached through a multi-host URL with ``target_session_attrs=read-write``; the primary
stopped in immediate mode and the standby promoted mid-run. A beat and a worker carry on without
a restart, and the ledger shows every occurrence started once. The time from the promotion to the
first start after it is printed (measured, not asserted)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from celery_quartz import Job, JobKey, Quartz, SimpleTrigger, TriggerKey
from celery_quartz.store import SqlStore, migrate
from tests.integration import ledger_app
from tests.integration.processes import processes, wait_for
from tests.services import PostgresServer, multi_host_url, postgres_primary_and_standby

GROUP = "failover"
# The pair of servers is this module's own fixture, which conftest's marking does not know.
pytestmark = pytest.mark.integration


@pytest.fixture
def primary_and_standby() -> Iterator[tuple[PostgresServer, PostgresServer]]:
    with postgres_primary_and_standby() as servers:
        yield servers


def _schedule(store: SqlStore, start: datetime) -> tuple[SimpleTrigger, list[SimpleTrigger]]:
    """A trigger every second from ``start``, and one-shots every 1.5 s between them."""
    quartz = Quartz(ledger_app.app, store=store)
    every_second = SimpleTrigger(
        key=TriggerKey("every-second", GROUP),
        start_at=start,
        repeat_interval=timedelta(seconds=1),
        repeat_count=-1,
    )
    one_shots = [
        SimpleTrigger(
            key=TriggerKey(f"once-{i}", GROUP),
            start_at=start + timedelta(seconds=0.5 + 1.5 * i),
            repeat_count=0,
        )
        for i in range(16)
    ]
    quartz.schedule_jobs(
        [
            (Job(key=JobKey("tick", GROUP), task="ledger.record"), [every_second]),
            (Job(key=JobKey("once", GROUP), task="ledger.record"), one_shots),
        ]
    )
    return every_second, one_shots


def _starts(ledger_url: str) -> list[tuple[str, int, float, str | None]]:
    return [
        (r.trigger_name, r.scheduled_ms, r.started, r.worker)
        for r in ledger_app.ledger_rows(ledger_url)
    ]


def test_both_drivers_find_the_promoted_standby_through_the_multi_host_url(
    primary_and_standby: tuple[PostgresServer, PostgresServer],
) -> None:
    primary, standby = primary_and_standby
    stores = [
        SqlStore(multi_host_url([primary, standby], driver), scheduler_name="s")
        for driver in ("psycopg2", "psycopg")
    ]
    try:
        migrate.upgrade(stores[0].engine)

        def server_port(store: SqlStore) -> int:
            with store.engine.begin() as conn:
                # A write: only a primary takes it.
                conn.exec_driver_sql("CREATE TEMPORARY TABLE probe (x int)")
                return int(conn.exec_driver_sql("SELECT inet_server_port()").scalar_one())

        assert [server_port(store) for store in stores] == [primary.port, primary.port]
        primary.stop_immediately()
        standby.promote()
        # The pooled connections are dead; the pool's pre-ping replaces them through the URL.
        assert [server_port(store) for store in stores] == [standby.port, standby.port]
    finally:
        for store in stores:
            store.dispose()


@pytest.mark.slow
def test_a_promoted_synchronous_standby_takes_over_with_nothing_lost_or_started_twice(
    tmp_path: Path,
    primary_and_standby: tuple[PostgresServer, PostgresServer],
    pg_url: str,
    redis_url: str,
) -> None:
    primary, standby = primary_and_standby
    store_url = multi_host_url([primary, standby])
    # The ledger lives apart, on the suite's own server: the source of truth does not fail over.
    ledger_url = pg_url
    store = SqlStore(store_url, scheduler_name="ledger_app")
    migrate.upgrade(store.engine)
    ledger_app.create_ledger(ledger_url)
    start = datetime.now(timezone.utc) + timedelta(seconds=4)
    every_second, one_shots = _schedule(store, start)
    env = ledger_app.environment(store_url, redis_url, CHECKIN_THRESHOLD="5")
    env["CQ_LEDGER_URL"] = ledger_url

    with processes(tmp_path, env) as procs:
        procs.worker("worker1", concurrency=4)
        procs.beat("beat1")
        wait_for(
            lambda: sum(name == "every-second" for name, *_ in _starts(ledger_url)) >= 4,
            timeout=30,
            message="the cluster to run on the primary",
        )
        pids = {name: procs.procs[name].pid for name in ("beat1", "worker1")}

        primary.stop_immediately()
        time.sleep(1.0)  # what an HA manager takes to notice, at the least
        standby.promote()
        promoted = time.time()
        wait_for(
            lambda: any(started > promoted for *_, started, _ in _starts(ledger_url)),
            timeout=30,
            message="a start after the promotion",
        )
        first_after = min(started for *_, started, _ in _starts(ledger_url) if started > promoted)
        print(f"\npromotion to the first start after it: {first_after - promoted:.2f} s")
        time.sleep(8)

        procs.assert_running("beat1", "worker1")
        assert {name: procs.procs[name].pid for name in ("beat1", "worker1")} == pids
        stopped = datetime.now(timezone.utc)
        assert procs.stop("beat1") == 0, procs.log("beat1")[-4000:]
        all_stopped = datetime.now(timezone.utc)
        wait_for(lambda: not store.firing_states(), timeout=30, message="fired rows to drain")
        procs.assert_running("worker1")
    store.dispose()

    rows = _starts(ledger_url)
    executed = {(name, scheduled) for name, scheduled, *_ in rows}
    due, possible = ledger_app.occurrences_owed(
        every_second, one_shots, start, stopped, all_stopped
    )

    assert ledger_app.row_count(ledger_url, ledger_app.duplicates) == 0, (
        "an occurrence started twice"
    )
    assert ledger_app.row_count(ledger_url, ledger_app.recoveries) == 0, (
        "a live worker's firing recovered"
    )
    assert due - executed == set(), f"never ran: {sorted(due - executed)}"
    assert executed <= possible, f"not occurrences: {sorted(executed - possible)}"
    # The same worker ran firings on both sides of the failover.
    assert {worker for *_, started, worker in rows if started < promoted} == {
        worker for *_, started, worker in rows if started > promoted
    }
    assert sum(started > promoted for *_, started, _ in rows) >= 5
