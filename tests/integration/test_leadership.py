"""Non-clustered schedulers under a built-in leader election, in real ``celery beat`` processes:
exactly one runs; a killed leader is replaced within the lock's detection time and the rest
fires; a graceful handover fires nothing twice; a paused leader resumed after the lease moved is
fenced off and stands down."""

from __future__ import annotations

import os
import signal
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import create_engine, func, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from celery_quartz import Job, JobKey, Quartz, SimpleTrigger, TriggerKey
from celery_quartz.clock import to_millis
from celery_quartz.config import Settings
from celery_quartz.store import SqlStore, migrate, open_store
from tests.integration import ledger_app
from tests.integration.processes import Processes, processes, wait_for

SCHEDULER_NAME = "ledger_app"


def schedule(store: SqlStore, start: datetime) -> list[SimpleTrigger]:
    """Four jobs, each with a trigger every half second: a leader nearly always holds a batch."""
    quartz = Quartz(ledger_app.app, store=store)
    triggers = []
    for j in range(4):
        trigger = SimpleTrigger(
            key=TriggerKey(f"t-{j}", "leader"),
            start_at=start,
            repeat_interval=timedelta(seconds=0.5),
            repeat_count=-1,
        )
        quartz.schedule_jobs(
            [(Job(key=JobKey(f"job-{j}", "leader"), task="ledger.record"), [trigger])]
        )
        triggers.append(trigger)
    return triggers


def occurrences(
    triggers: list[SimpleTrigger], since: datetime, until: datetime
) -> set[tuple[str, int]]:
    due = set()
    for trigger in triggers:
        t: datetime | None = trigger.start_at
        while t is not None and t <= until:
            if t >= since:
                due.add((trigger.key.name, to_millis(t)))
            t = trigger.next_fire_time_after(t)
    return due


def statuses(store: SqlStore, procs: Processes) -> dict[str, str | None]:
    """Status of each live beat process that has checked in, by process name."""
    s = store.tables.scheduler_state
    with store.transaction() as conn:
        rows = conn.execute(select(s.c.pid, s.c.status).where(s.c.kind == "scheduler")).all()
    by_pid = {r.pid: r.status for r in rows}
    return {
        name: by_pid.get(proc.pid)
        for name, proc in procs.procs.items()
        if name.startswith("beat") and proc.poll() is None and proc.pid in by_pid
    }


def leader_of(store: SqlStore, procs: Processes) -> str | None:
    running = [name for name, status in statuses(store, procs).items() if status == "RUNNING"]
    assert len(running) <= 1, f"two schedulers RUNNING at once: {running}"
    return running[0] if running else None


def ledger_rows(url: str) -> tuple[set[tuple[str, int]], int]:
    engine = create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(
            select(ledger_app.ledger.c.trigger_name, ledger_app.ledger.c.scheduled_ms)
        ).all()
        duplicates = conn.execute(
            select(func.count()).select_from(ledger_app.duplicates)
        ).scalar_one()
    engine.dispose()
    return {(r.trigger_name, r.scheduled_ms) for r in rows}, duplicates


def setup(pg_url: str) -> tuple[SqlStore, list[SimpleTrigger]]:
    store = ledger_app.prepared_store(pg_url)
    return store, schedule(store, datetime.now(timezone.utc) + timedelta(seconds=2))


def run_failover(
    tmp_path: Path,
    pg_url: str,
    redis_url: str,
    env: dict[str, str],
    detection: float,
    *,
    shared_id: bool,
) -> None:
    """With ``shared_id`` every replica has the same instance id and nothing may be missing;
    with generated ids, an occurrence the killed leader fired within a second of its death may
    be (its firing is dropped by the next leader: the instance id decides, docs/leadership.md)."""
    store, triggers = setup(pg_url)
    env = {
        "CQ_BROKER_URL": redis_url,
        "CQ_STORE_URL": pg_url,
        "CQ_LEDGER_URL": pg_url,
        "CQ_CLUSTERED": "0",
        **env,
    }
    if shared_id:
        env["CQ_INSTANCE_ID"] = "leader"
    with processes(tmp_path, env) as procs:
        procs.worker("worker1", concurrency=4)
        procs.beat("beat1")
        procs.beat("beat2")
        wait_for(lambda: leader_of(store, procs) is not None, 30, message="a leader")
        time.sleep(3)
        first = leader_of(store, procs)
        assert first is not None
        standby = "beat2" if first == "beat1" else "beat1"
        # Exactly one is RUNNING; the other is built and bound, never started (no check-in).
        assert statuses(store, procs).get(standby) is None

        procs.kill(first)
        killed = time.monotonic()
        killed_at = datetime.now(timezone.utc)
        wait_for(
            lambda: leader_of(store, procs) == standby,
            detection + 5,
            interval=0.05,
            message=f"{standby} to take over",
        )
        took = time.monotonic() - killed
        assert took <= detection + 2, f"took over after {took:.1f}s"
        time.sleep(4)

        # Graceful handover back: the killed one returns as a standby, the leader stops.
        procs.beat(first + "b")
        time.sleep(2)
        assert procs.stop(standby) == 0, procs.log(standby)[-4000:]
        wait_for(lambda: leader_of(store, procs) == first + "b", detection + 10, message="handover")
        time.sleep(3)
        procs.assert_running("worker1", first + "b")
        stopped = datetime.now(timezone.utc)
        assert procs.stop(first + "b") == 0
        wait_for(lambda: not store.firing_states(), timeout=20, message="fired rows to drain")

    executed, duplicates = ledger_rows(pg_url)
    assert duplicates == 0, f"{duplicates} occurrence(s) started twice"
    start = triggers[0].start_at
    assert start is not None
    # Everything due before the kill, and from a second after it to the end, ran; only an
    # occurrence the killed leader fired but had not published may be missing.
    margin = timedelta(seconds=0 if shared_id else 1)
    must = occurrences(triggers, start, killed_at - margin) | occurrences(
        triggers, killed_at + margin, stopped - timedelta(seconds=2)
    )
    # A sanity bound (the run covered enough occurrences to mean something), not a rate: the
    # phases' lengths depend on process start-up, so the count varies by a few around 60.
    assert len(must) > 40, len(must)
    assert must - executed == set(), f"{len(must - executed)} due occurrence(s) never ran"
    store.dispose()


def test_postgres_advisory_lock_election_fails_over_and_hands_over(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    # The server frees a dead session's advisory lock at once: detection is one retry interval.
    run_failover(
        tmp_path, pg_url, redis_url, {"CQ_ELECTION": "postgresql"}, detection=1.0, shared_id=False
    )


def test_redis_lock_election_fails_over_and_hands_over(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    # A killed holder's lock expires after its timeout.
    run_failover(
        tmp_path,
        pg_url,
        redis_url,
        {
            "CQ_ELECTION": "redis",
            "CQ_ELECTION_REDIS_URL": redis_url,
            "CQ_ELECTION_LOCK_TIMEOUT": "2",
        },
        detection=2.5,
        shared_id=True,
    )


@pytest.mark.parametrize("election", ["postgresql", "redis"])
def test_a_paused_leader_is_replaced_and_resumed_is_fenced_and_stands_down(
    tmp_path: Path, pg_url: str, redis_url: str, election: str
) -> None:
    """SIGSTOP the leader (a paused VM, a long GC pause), let another replica take over, then
    SIGCONT it. PostgreSQL: the frozen holder's idle session is ended by the server after the
    lock timeout, which frees the advisory lock. Redis: the lock expires. The resumed leader's
    writes, its check-in included, are refused; it stands down, and the shared check-in row keeps
    showing the new leader RUNNING."""
    store, _ = setup(pg_url)
    lock_timeout = 3.0
    env = {
        "CQ_BROKER_URL": redis_url,
        "CQ_STORE_URL": pg_url,
        "CQ_LEDGER_URL": pg_url,
        "CQ_CLUSTERED": "0",
        "CQ_ELECTION": election,
        "CQ_ELECTION_REDIS_URL": redis_url,
        "CQ_ELECTION_LOCK_TIMEOUT": str(lock_timeout),
        # One id for both: without the fence, the deposed leader would release and publish the
        # new leader's rows as its own, and write its pid and status over the new leader's.
        "CQ_INSTANCE_ID": "leader",
        # Check in often, so the resumed leader's check-in is due at once.
        "CQ_CHECKIN_INTERVAL": "1",
    }
    with processes(tmp_path, env) as procs:
        procs.worker("worker1", concurrency=4)
        procs.beat("beat1")
        wait_for(lambda: "leads with epoch" in procs.log("beat1"), 30, message="beat1 leads")
        procs.beat("beat2")
        time.sleep(3)
        old = procs.procs["beat1"]
        os.kill(old.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            # Bounded: the lock timeout, one retry interval (1 s), and start-up slack.
            wait_for(
                lambda: "leads with epoch" in procs.log("beat2"),
                lock_timeout + 6,
                interval=0.1,
                message="beat2 to lead while beat1 is frozen",
            )
            took = time.monotonic() - stopped
            assert took <= lock_timeout + 3, f"took over after {took:.1f}s"
            time.sleep(3)  # frozen past its check-in interval
        finally:
            os.kill(old.pid, signal.SIGCONT)
        # Whichever it notices first: its election's check (PostgreSQL: the session is gone;
        # Redis: the renewal fails), or a write the fence refuses.
        wait_for(
            lambda: any(
                sign in procs.log("beat1") for sign in ("this write is refused", "leadership lost")
            ),
            15,
            message="the deposed leader to notice",
        )
        wait_for(
            lambda: "stands down" in procs.log("beat1") or "in standby" in procs.log("beat1"),
            10,
            message="the deposed leader to stand down",
        )
        new_pid = procs.procs["beat2"].pid
        for _ in range(4):  # the row stays the new leader's
            time.sleep(1)
            assert check_in_rows(store) == [(new_pid, "RUNNING")]
        procs.assert_running("beat1", "beat2", "worker1")
        for name in ("beat2", "beat1"):
            assert procs.stop(name) == 0, procs.log(name)[-4000:]
        wait_for(lambda: not store.firing_states(), timeout=20, message="fired rows to drain")

    executed, duplicates = ledger_rows(pg_url)
    assert duplicates == 0, f"{duplicates} occurrence(s) started twice"
    assert len(executed) > 20
    store.dispose()


def check_in_rows(store: SqlStore) -> list[tuple[int | None, str | None]]:
    s = store.tables.scheduler_state
    with store.transaction() as conn:
        rows = conn.execute(select(s.c.pid, s.c.status).where(s.c.kind == "scheduler")).all()
    return [(r.pid, r.status) for r in rows]


def test_losing_the_advisory_lock_connection_stands_the_leader_down_at_once(pg_url: str) -> None:
    from celery_quartz.elections.postgres import PostgresAdvisoryLockElection
    from celery_quartz.leadership import SchedulerLeadership
    from celery_quartz.lifecycle import SchedulerStatus

    class Scheduler:
        status = SchedulerStatus.CREATED

        def start(self) -> None:
            self.status = SchedulerStatus.RUNNING

        def standby(self) -> None:
            self.status = SchedulerStatus.STANDBY

    first, second = Scheduler(), Scheduler()
    elections = [
        PostgresAdvisoryLockElection(
            pg_url, SchedulerLeadership(s), scheduler_name="s", retry_interval=0.2
        )
        for s in (first, second)
    ]
    elections[0].start()
    try:
        wait_for(lambda: first.status is SchedulerStatus.RUNNING, 10, message="first leads")
        elections[1].start()
        time.sleep(0.5)
        assert second.status is SchedulerStatus.CREATED
        # The server ends the leader's session (a network cut, a restart, an administrator).
        admin = create_engine(pg_url)
        with admin.begin() as conn:
            ended = conn.exec_driver_sql(
                "SELECT pg_terminate_backend(pid) FROM pg_locks "
                "WHERE locktype = 'advisory' AND granted AND pid <> pg_backend_pid()"
            ).all()
        admin.dispose()
        assert len(ended) == 1
        began = time.monotonic()
        wait_for(lambda: first.status is SchedulerStatus.STANDBY, 5, 0.02, "first stands down")
        wait_for(lambda: second.status is SchedulerStatus.RUNNING, 5, 0.02, "second leads")
        assert time.monotonic() - began < 1.5
    finally:
        for election in elections:
            election.stop()


def _idle_transaction_timeout(store: SqlStore) -> str:
    with store.engine.connect() as conn:
        return str(conn.exec_driver_sql("SHOW idle_in_transaction_session_timeout").scalar())


@pytest.mark.parametrize("driver", ["psycopg2", "psycopg"])
def test_with_an_election_a_transaction_left_idle_is_ended_within_the_lock_timeout(
    pg_url: str, driver: str
) -> None:
    """A leader frozen inside a store transaction (SIGSTOP, a paused VM) holds its row locks,
    and its successor's epoch advance and recovery pass would wait on them until it resumed.
    With an election, PostgreSQL ends a store session left idle inside a transaction for the
    lock timeout, and the locks go with it; without one, the setting is left alone."""
    lock_timeout = 2.0
    url = make_url(pg_url).set(drivername=f"postgresql+{driver}").render_as_string(False)
    elected = Settings(
        store_url=url,
        scheduler_name="frozen",
        clustered=False,
        election="postgresql",
        election_lock_timeout=lock_timeout,
    )
    frozen = open_store(elected)
    migrate.upgrade(frozen.engine)
    successor = open_store(elected)
    plain = open_store(Settings(store_url=url, scheduler_name="frozen"))
    assert frozen.engine.dialect.driver == driver
    assert _idle_transaction_timeout(frozen) == "2s"
    assert _idle_transaction_timeout(plain) == "0"
    frozen.check_in("leader", interval=1.0)
    s = frozen.tables.scheduler_state
    row = select(s).where(s.c.sched_name == "frozen").with_for_update()
    with frozen.engine.connect() as held:
        held.execute(row).one()  # locked, then the client goes quiet
        began = time.monotonic()
        with successor.transaction() as conn:
            conn.exec_driver_sql("SET LOCAL lock_timeout = '10s'")
            conn.execute(row).one()
        waited = time.monotonic() - began
        assert lock_timeout - 0.5 <= waited <= lock_timeout + 2, f"waited {waited:.1f}s"
        with pytest.raises(DBAPIError):  # the session was ended by the server
            held.execute(select(func.count()).select_from(s)).scalar()
    for store in (frozen, successor, plain):
        store.dispose()
