"""The worker's role of the store on each dialect and driver: on PostgreSQL a start (with its
automatic pin's claim) and a completion that releases nothing are each one statement committed on
its own; everything else takes the general transaction. Both must decide the same."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from sqlalchemy import event, select

from celery_quartz.affinity import PreferredNode
from celery_quartz.clock import FakeClock, to_millis
from celery_quartz.keys import TriggerKey
from celery_quartz.store import NONE_STATE, FiringState, SqlStore, TriggerState
from tests.services import PostgresServer, postgres_server
from tests.stores import store_at
from tests.unit.builders import A, add, one_shot, repeating
from tests.unit.conftest import at

W1, W2 = "celery@w1", "celery@w2"


def fired(db: SqlStore, *names: str, second: int = 1) -> dict[str, str]:
    """Fire the triggers ``names`` due by ``second``; their fire instance ids by trigger name."""
    claim = db.claim(A, no_later_than=at(second), max_count=10, time_window=0.0)
    ids = {f.trigger_key.name: f.fire_instance_id for f in claim.firings}
    assert set(names) <= set(ids)
    db.mark_published(A, list(ids.values()))
    return ids


def pin(db: SqlStore, name: str) -> tuple[str | None, bool]:
    t = db.tables.triggers
    with db.transaction() as conn:
        row = conn.execute(
            select(t.c.preferred_node, t.c.preferred_node_auto).where(t.c.trigger_name == name)
        ).one()
    return row.preferred_node, row.preferred_node_auto


def statements(db: SqlStore) -> list[str]:
    """The statements ``db`` sends from now on, over either of its engines (PostgreSQL's single
    statements go through one whose connections commit each statement)."""
    seen: list[str] = []
    engines = [db.engine] + ([db.context.autocommit] if db.dialect == "postgresql" else [])
    for engine in engines:
        event.listen(engine, "before_cursor_execute", lambda *a: seen.append(a[2]))
    return seen


def test_a_firing_starts_once_and_a_second_delivery_is_refused(db: SqlStore) -> None:
    add(db, repeating("t1", at(0), 60))
    fire_id = fired(db, "t1")["t1"]
    assert db.start_execution(fire_id, W1)
    assert not db.start_execution(fire_id, W2)
    assert db.firing_states() == {fire_id: FiringState.EXECUTING}


def test_a_start_claims_an_automatic_pin(db: SqlStore) -> None:
    trigger = repeating("t1", at(0), 60)
    trigger.preferred_node = PreferredNode.AUTO
    add(db, trigger)
    first = fired(db, "t1")["t1"]
    assert db.start_execution(first, W1)
    assert pin(db, "t1") == (W1, True)
    assert db.complete_execution(first)


def test_a_start_does_not_claim_a_pin_changed_since_the_firing(db: SqlStore) -> None:
    from celery_quartz.triggers.base import TriggerDetailsUpdate

    trigger = repeating("t1", at(0), 60)
    trigger.preferred_node = PreferredNode.AUTO
    add(db, trigger)
    fire_id = fired(db, "t1")["t1"]
    db.update_trigger_details(
        TriggerKey("t1"), TriggerDetailsUpdate(preferred_node=PreferredNode.for_node(W2))
    )
    assert db.start_execution(fire_id, W1)
    assert pin(db, "t1") == (W2, False)


def test_a_completion_that_releases_nothing_is_one_statement_on_postgresql(db: SqlStore) -> None:
    add(db, repeating("t1", at(0), 60))
    fire_id = fired(db, "t1")["t1"]
    assert db.start_execution(fire_id, W1)
    seen = statements(db)
    assert db.complete_execution(fire_id)
    assert db.firing_states() == {}
    if db.dialect == "postgresql":
        # On psycopg2 the statement is prepared on the connection first (see below).
        ran = [s for s in seen if s.lstrip().upper().startswith(("DELETE", "WITH", "EXECUTE"))]
        assert len(ran) == 1
        prepared = [s for s in seen if s.startswith("PREPARE")]
        assert len(seen) == 2 + len(prepared)  # the completion, and firing_states' read
    assert not db.complete_execution(fire_id)  # already done


def test_on_psycopg2_the_worker_statements_are_prepared_once_per_connection(
    pg_url: str, clock: FakeClock
) -> None:
    """psycopg2 sends statements as text, so PostgreSQL would parse and plan the start and the
    completion on every execution: they are prepared once per connection and run by name."""
    db = store_at(pg_url, clock=clock, pool_size=1)
    db.create_tables()
    try:
        add(db, repeating("t1", at(0), 1))
        seen = statements(db)
        for second in range(3):
            clock.set(at(second))
            fire_id = fired(db, "t1", second=second)["t1"]
            assert db.start_execution(fire_id, W1)
            assert db.complete_execution(fire_id)
        worker = [s for s in seen if s.startswith(("PREPARE", "EXECUTE"))]
        assert [s.split()[0] for s in worker] == ["PREPARE", "EXECUTE", "PREPARE"] + ["EXECUTE"] * 5
        with db.context.autocommit.connect() as conn:
            names = set(conn.exec_driver_sql("SELECT name FROM pg_prepared_statements").scalars())
        assert names == {s.split()[1].partition("(")[0] for s in worker[:3:2]}
    finally:
        db.dispose()


@pytest.mark.parametrize("watched", [False, True], ids=["direct", "through-a-connection"])
def test_a_prepared_statement_gone_from_its_session_is_run_unprepared_from_then_on(
    pg_url: str, clock: FakeClock, caplog: pytest.LogCaptureFixture, watched: bool
) -> None:
    """A pooler that hands a connection's statements to different sessions (PgBouncer in
    transaction mode) loses what was prepared: the store notices, says so once, and runs its
    statements as text from then on; no start or completion is lost. The same on the driver
    connection directly and, while a listener watches the statements, through a Connection."""
    db = store_at(pg_url, clock=clock, pool_size=1)
    db.create_tables()
    try:
        add(db, repeating("t1", at(0), 1))
        first = fired(db, "t1", second=0)["t1"]
        assert db.start_execution(first, W1)
        assert db.complete_execution(first)
        with db.context.autocommit.connect() as conn:
            prepared = conn.exec_driver_sql("SELECT count(*) FROM pg_prepared_statements")
            assert prepared.scalar() == 2  # the start and the completion
            conn.exec_driver_sql("DEALLOCATE ALL")
        seen = statements(db) if watched else []
        clock.set(at(1))
        second = fired(db, "t1", second=1)["t1"]
        with caplog.at_level(logging.WARNING, logger="celery_quartz.store"):
            assert db.start_execution(second, W1)
        assert "unprepared from now on" in caplog.text
        assert not db.start_execution(second, W2)
        assert db.complete_execution(second)
        assert db.firing_states() == {}
        if watched:
            executed = [s.split()[0] for s in seen if s.startswith(("PREPARE", "EXECUTE"))]
            assert executed == ["EXECUTE"]
        with db.context.autocommit.connect() as conn:
            prepared = conn.exec_driver_sql("SELECT count(*) FROM pg_prepared_statements")
            assert prepared.scalar() == 0
    finally:
        db.dispose()


def test_the_one_statement_start_and_completions_open_no_sqlalchemy_connection(
    db: SqlStore,
) -> None:
    """On PostgreSQL the worker's per-execution statements run on a pooled driver connection
    directly: a SQLAlchemy Connection and its result added half again to the worker's CPU
    per statement. Nothing listens to the statements here, so none goes through a Connection."""
    from celery_quartz.store.records import FinishedExecution

    add(db, repeating("t1", at(0), 60), repeating("t2", at(0), 60))
    ids = fired(db, "t1", "t2")
    connections: list[object] = []
    engines = [db.engine] + ([db.context.autocommit] if db.dialect == "postgresql" else [])
    for engine in engines:
        event.listen(engine, "engine_connect", connections.append)
    started = db.start_execution(ids["t1"], W1)
    assert started is not None and db.start_execution(ids["t2"], W1)
    assert not db.start_execution(ids["t1"], W2)
    assert db.complete_execution(ids["t1"])
    assert db.complete_executions([FinishedExecution(ids["t2"], to_millis(at(2)))]) == 1
    if db.dialect == "postgresql":
        assert connections == []
        assert started.batchable
    assert db.firing_states() == {}


def test_a_connection_broken_under_a_start_is_a_dbapi_error_and_the_next_start_reconnects(
    pg_url: str, clock: FakeClock
) -> None:
    """The driver's error on the direct path reaches the worker hooks as SQLAlchemy's
    DBAPIError (they retry those through an outage), and the pool replaces the broken
    connection. Without pre-ping, as the worker opens its store."""
    from sqlalchemy.exc import DBAPIError

    db = store_at(pg_url, clock=clock, pool_size=1, pre_ping=False)
    db.create_tables()
    try:
        add(db, repeating("t1", at(0), 60), repeating("t2", at(0), 60))
        ids = fired(db, "t1", "t2")
        assert db.start_execution(ids["t1"], W1)
        with db.engine.connect() as conn:
            conn.exec_driver_sql(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        with pytest.raises(DBAPIError) as raised:
            db.start_execution(ids["t2"], W1)
        assert raised.value.connection_invalidated
        assert db.firing_states()[ids["t2"]] != FiringState.EXECUTING
        assert db.start_execution(ids["t2"], W1)
        assert db.firing_states() == {i: FiringState.EXECUTING for i in ids.values()}
    finally:
        db.dispose()


@pytest.fixture(scope="module")
def restartable_postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL server of this module's own: restarting it leaves the session's server,
    and whatever other tests keep connected to it, alone."""
    with postgres_server() as server:
        yield server


@pytest.mark.integration
@pytest.mark.parametrize("driver", ["psycopg2", "psycopg"])
def test_after_a_database_restart_one_start_fails_however_many_connections_the_pool_kept(
    restartable_postgres: PostgresServer, driver: str, clock: FakeClock
) -> None:
    """A disconnect found on the direct path renews the whole pool, as SQLAlchemy does through
    a Connection: every connection opened before the broken one died with the same server.
    Without it, each stale pooled connection failed a start of its own after a restart (a
    worker keeps up to 32), and each failed start is delivered again later. Without pre-ping,
    as the worker opens its store."""
    from sqlalchemy.exc import DBAPIError

    pooled = 4
    db = store_at(
        restartable_postgres.create_database(f"restart_{driver}", driver),
        clock=clock,
        pool_size=pooled,
        pre_ping=False,
    )
    db.create_tables()
    try:
        names = [f"t{i}" for i in range(pooled + 2)]
        add(db, *(repeating(name, at(0), 60) for name in names))
        ids = fired(db, *names)
        held = [db.context.autocommit.raw_connection() for _ in range(pooled)]
        for connection in held:
            connection.close()  # back to the pool, open: the pool keeps all of them
        restartable_postgres.restart()
        failed = []
        for name in names:
            try:
                assert db.start_execution(ids[name], W1)
            except DBAPIError:
                failed.append(name)
        assert failed in ([], names[:1])
        for name in failed:
            assert db.start_execution(ids[name], W1)
    finally:
        db.dispose()


def test_the_last_firing_of_a_complete_trigger_removes_it(db: SqlStore) -> None:
    add(db, one_shot("once", at(0)))
    fire_id = fired(db, "once")["once"]
    assert db.get_trigger_state(TriggerKey("once")) == TriggerState.COMPLETE
    assert db.start_execution(fire_id, W1)
    assert db.complete_execution(fire_id)
    assert db.get_trigger_state(TriggerKey("once")) == NONE_STATE
    assert db.count_rows()["jobs"] == 0


def test_a_disallow_concurrent_jobs_completion_unblocks_its_other_triggers(db: SqlStore) -> None:
    add(db, repeating("t1", at(0), 60), repeating("t2", at(30), 60), disallow_concurrent=True)
    fire_id = fired(db, "t1")["t1"]
    assert db.get_trigger_state(TriggerKey("t2")) == TriggerState.BLOCKED
    assert db.start_execution(fire_id, W1)
    assert db.complete_execution(fire_id)
    assert db.get_trigger_state(TriggerKey("t2")) == TriggerState.WAITING


def test_a_completion_keeps_its_outcome_on_the_trigger_whichever_path_it_takes(
    db: SqlStore, clock: FakeClock
) -> None:
    from celery_quartz.store.views import FiringOutcome

    add(db, repeating("t1", at(0), 1))
    t = db.tables.triggers

    def outcome() -> tuple[str | None, str | None, int | None, bool]:
        with db.transaction() as conn:
            row = conn.execute(select(t).where(t.c.trigger_name == "t1")).one()
        return (
            row.last_outcome,
            row.last_error_type,
            row.consecutive_failures,
            row.last_started_time is not None and row.last_finished_time is not None,
        )

    for second, failed in enumerate((True, True, False)):
        clock.set(at(second))
        claim = db.claim(A, no_later_than=at(second), max_count=1, time_window=0.0)
        [firing] = claim.firings
        assert db.start_execution(firing.fire_instance_id, W1)
        result = FiringOutcome(True, "RuntimeError", "boom") if failed else FiringOutcome()
        assert db.complete_execution(firing.fire_instance_id, outcome=result)
        if failed:
            assert outcome()[:2] == ("FAILED", "RuntimeError")
    assert outcome() == ("SUCCEEDED", None, 0, True)


def outcomes(db: SqlStore) -> dict[str, tuple[str | None, int | None, int | None]]:
    t = db.tables.triggers
    with db.transaction() as conn:
        rows = conn.execute(
            select(
                t.c.trigger_name, t.c.last_outcome, t.c.last_finished_time, t.c.last_started_time
            )
        )
        return {r[0]: (r[1], r[2], r[3]) for r in rows}


def test_a_start_says_whether_its_end_may_be_recorded_in_a_batch(db: SqlStore) -> None:
    """Only an end that releases nothing, of a job that does not request recovery, and on a
    database that records a batch in one statement."""
    add(db, repeating("plain", at(0), 60, job="plain"), job="plain")
    add(db, repeating("alone", at(0), 60, job="alone"), job="alone", disallow_concurrent=True)
    add(db, repeating("recover", at(0), 60, job="recover"), job="recover", requests_recovery=True)
    ids = fired(db, "plain", "alone", "recover")
    started = {name: db.start_execution(fire_id, W1) for name, fire_id in ids.items()}
    assert all(s is not None for s in started.values())
    batchable = {name: s.batchable for name, s in started.items() if s is not None}
    postgres = db.dialect == "postgresql"
    assert batchable == {"plain": postgres, "alone": False, "recover": False}


def test_ends_recorded_together_keep_each_triggers_latest_success(
    db: SqlStore, clock: FakeClock
) -> None:
    from celery_quartz.store.records import FinishedExecution

    add(db, repeating("t1", at(0), 1), repeating("t2", at(0), 1))
    firings: list[tuple[str, str]] = []  # (trigger, fire id)
    for second in range(2):
        clock.set(at(second))
        for name, fire_id in fired(db, "t1", "t2", second=second).items():
            assert db.start_execution(fire_id, W1)
            firings.append((name, fire_id))
    finished = [
        FinishedExecution(fire_id, 5_000 + n * 10) for n, (_, fire_id) in enumerate(firings)
    ]
    seen = statements(db)
    assert db.complete_executions(list(reversed(finished))) == 4
    assert db.firing_states() == {}
    if db.dialect == "postgresql":
        ran = [s for s in seen if s.lstrip().upper().startswith(("WITH", "EXECUTE", "DELETE"))]
        assert len(ran) == 1, "one statement for the whole batch"
    last = outcomes(db)
    assert last["t1"][:2] == ("SUCCEEDED", 5_020)
    assert last["t2"][:2] == ("SUCCEEDED", 5_030)
    assert last["t1"][2] is not None  # its start
    assert db.complete_executions(finished) == 0  # already complete


@pytest.fixture(
    params=[
        pytest.param("pg_store_url", id="pg_url"),
        pytest.param("pg_store_url_psycopg3", id="pg_url_psycopg3"),
    ]
)
def pg_db(request: pytest.FixtureRequest, clock: FakeClock) -> Iterator[SqlStore]:
    db = store_at(request.getfixturevalue(request.param), clock=clock)
    yield db
    db.dispose()


def test_an_end_recorded_late_does_not_hide_a_later_failure(
    pg_db: SqlStore, clock: FakeClock
) -> None:
    """On PostgreSQL, where the worker holds ends to record them together: a held success
    that finished before a failure recorded meanwhile leaves the failure as the trigger's last
    outcome."""
    db = pg_db
    from celery_quartz.clock import to_millis
    from celery_quartz.store.records import FinishedExecution
    from celery_quartz.store.views import FiringOutcome

    add(db, repeating("t1", at(0), 1))
    first = fired(db, "t1", second=0)["t1"]
    assert db.start_execution(first, W1)
    held = FinishedExecution(first, to_millis(at(0)) + 500)
    clock.set(at(1))
    second = fired(db, "t1", second=1)["t1"]
    assert db.start_execution(second, W1)
    clock.set(at(2))
    assert db.complete_execution(second, outcome=FiringOutcome(True, "RuntimeError", "boom"))
    assert db.complete_executions([held]) == 1
    assert outcomes(db)["t1"][:2] == ("FAILED", to_millis(at(2)))
    assert db.firing_states() == {}


def test_ends_recorded_together_release_what_they_must_one_by_one(db: SqlStore) -> None:
    """A batch's firing whose trigger finished (COMPLETE) is completed as alone: the trigger
    and its job are removed. One recovered meanwhile is not executing and is left alone."""
    from celery_quartz.store.records import FinishedExecution

    add(db, one_shot("once", at(0), job="once"), job="once")
    add(db, repeating("t1", at(0), 60, job="repeating"), job="repeating")
    ids = fired(db, "once", "t1")
    for fire_id in ids.values():
        assert db.start_execution(fire_id, W1)
    assert (
        db.complete_executions([FinishedExecution(ids["once"], 1), FinishedExecution(ids["t1"], 1)])
        == 2
    )
    assert db.get_trigger_state(TriggerKey("once")) == NONE_STATE
    assert db.firing_states() == {}
    assert db.complete_executions([FinishedExecution(ids["once"], 2)]) == 0
