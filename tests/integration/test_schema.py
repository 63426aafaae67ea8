"""The shipped migrations create the schema the package expects, on every supported driver, and
``celery quartz schema upgrade/check`` work from Celery's own command line."""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import inspect

from celery_quartz.store import migrate
from celery_quartz.store.engine import create_store_engine
from tests.integration.processes import REPO

#: The schema version this checkout migrates to.
HEAD = migrate.head_revision()


@pytest.mark.parametrize("fixture", ["pg_url", "pg_url_psycopg3"])
def test_migrations_build_the_declared_schema_on_postgres(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    engine = create_store_engine(request.getfixturevalue(fixture))
    migrate.upgrade(engine)
    report = migrate.check(engine)
    assert report.ok, report
    indexes = {ix["name"] for ix in inspect(engine).get_indexes("quartz_triggers")}
    assert "ix_quartz_triggers_acquire" in indexes
    engine.dispose()


def test_migrations_build_the_declared_schema_on_sqlite(tmp_path: Path) -> None:
    engine = create_store_engine(f"sqlite:///{tmp_path / 'q.db'}")
    migrate.upgrade(engine, "custom_")
    assert migrate.check(engine, "custom_").ok
    assert not migrate.check(engine).ok  # the default prefix has no tables here
    engine.dispose()


def test_upgrading_from_0001_keeps_the_rows_makes_the_indexes_partial_and_renames_the_id(
    pg_url: str,
) -> None:
    from sqlalchemy import text

    engine = create_store_engine(pg_url)
    migrate.upgrade(engine, revision="0001")
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO quartz_fired_triggers (sched_name, entry_id, trigger_name, "
                "trigger_group, instance_name, fired_time, sched_time, priority, state, "
                "worker_name) VALUES ('s', 'f1', 't', 'g', 'n', 1, 1, 5, 'EXECUTING', 'w@h')"
            )
        )
    migrate.upgrade(engine)
    assert migrate.check(engine).ok
    fired = {ix["name"]: ix for ix in inspect(engine).get_indexes("quartz_fired_triggers")}
    assert "ix_quartz_fired_exec_group" not in fired
    worker_where = fired["ix_quartz_fired_worker"]["dialect_options"]["postgresql_where"]
    assert "worker_name IS NOT NULL" in worker_where
    triggers = {ix["name"]: ix for ix in inspect(engine).get_indexes("quartz_triggers")}
    group_where = triggers["ix_quartz_triggers_exec_group"]["dialect_options"]["postgresql_where"]
    assert "execution_group IS NOT NULL" in group_where
    with engine.connect() as conn:
        assert conn.execute(
            text("SELECT fire_instance_id FROM quartz_fired_triggers WHERE worker_name = 'w@h'")
        ).all() == [("f1",)]
    engine.dispose()


def _plan(url: str, query: str) -> str:
    """PostgreSQL's plan of ``query`` on a migrated store, with sequential scans discouraged (an
    empty table would otherwise be scanned)."""
    from sqlalchemy import text

    engine = create_store_engine(url)
    try:
        migrate.upgrade(engine)
        with engine.begin() as conn:
            conn.execute(text("SET enable_seqscan = off"))
            return "\n".join(r[0] for r in conn.execute(text(f"EXPLAIN {query}")))
    finally:
        engine.dispose()


def test_acquisition_is_an_index_range_scan_on_postgres(pg_url: str) -> None:
    plan = _plan(
        pg_url,
        "SELECT trigger_name FROM quartz_triggers WHERE sched_name = 'x' "
        "AND trigger_state = 'WAITING' AND next_fire_time <= 1000 "
        "ORDER BY next_fire_time, priority DESC LIMIT 100",
    )
    assert "ix_quartz_triggers_acquire" in plan, plan
    # Ordered as the index is: the batch is the index's first rows, with no sort of all that is due.
    assert "Sort" not in plan, plan


def test_a_page_of_one_execution_group_is_an_index_range_scan_on_postgres(pg_url: str) -> None:
    plan = _plan(
        pg_url,
        "SELECT trigger_name FROM quartz_triggers WHERE sched_name = 'x' "
        "AND execution_group = 'reports' AND (trigger_group, trigger_name) > ('g', 'n') "
        "ORDER BY trigger_group, trigger_name LIMIT 101",
    )
    assert "ix_quartz_triggers_exec_group_page" in plan, plan
    # The page is the index's next rows: no sort of every trigger of the group.
    assert "Sort" not in plan, plan


def _celery(args: list[str], store_url: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "CQ_STORE_URL": store_url}
    return subprocess.run(
        [sys.executable, "-m", "celery", "-A", "tests.integration.ledger_app", "quartz", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_celery_quartz_schema_commands(tmp_path: Path, pg_url: str) -> None:
    before = _celery(["schema", "check"], pg_url, tmp_path)
    assert before.returncode == 1, before.stdout + before.stderr
    assert f"expected {HEAD}" in before.stdout
    upgraded = _celery(["schema", "upgrade"], pg_url, tmp_path)
    assert upgraded.returncode == 0, upgraded.stderr
    assert f"empty -> {HEAD}" in upgraded.stdout
    after = _celery(["schema", "check"], pg_url, tmp_path)
    assert after.returncode == 0, after.stdout + after.stderr
    assert "matches" in after.stdout
    status = _celery(["status"], pg_url, tmp_path)
    assert status.returncode == 0, status.stderr
    assert "jobs 0, triggers 0" in status.stdout


def _older_revision() -> str:
    """The revision before this version's head."""
    from alembic.script import ScriptDirectory

    from celery_quartz.store.migrate import _config

    script = ScriptDirectory.from_config(_config(None, "quartz_"))
    head = script.get_revision(migrate.head_revision())
    assert head is not None and isinstance(head.down_revision, str)
    return head.down_revision


def test_with_auto_upgrade_off_a_node_refuses_tables_older_than_this_version(
    pg_url: str,
) -> None:
    from celery_quartz.config import Settings
    from celery_quartz.errors import SchemaVersionError
    from celery_quartz.store import check_worker_schema, open_store

    older = _older_revision()
    engine = create_store_engine(pg_url)
    migrate.upgrade(engine, revision=older)
    settings = Settings(store_url=pg_url, schema_auto_upgrade=False)
    with pytest.raises(SchemaVersionError) as scheduler:
        open_store(settings, upgrade_schema=True)
    with pytest.raises(SchemaVersionError) as worker:
        check_worker_schema(settings)
    for refused in (scheduler, worker):
        message = str(refused.value)
        assert older in message and migrate.head_revision() in message, message
        assert "quartz schema upgrade" in message
    assert migrate.current_revision(engine) == older  # left as it was
    engine.dispose()


@contextlib.contextmanager
def migrate_log() -> Iterator[list[str]]:
    """The messages logged by the schema check, captured on its own logger (as unittest's
    assertLogs does): whatever an earlier test in this process did to the root logger's
    handlers, these are seen."""
    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    logger = logging.getLogger("celery_quartz.store.migrate")
    handler, level = Collect(logging.INFO), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield messages
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def test_with_auto_upgrade_on_a_worker_leaves_older_tables_to_the_schedulers(
    pg_url: str,
) -> None:
    from celery_quartz.config import Settings
    from celery_quartz.store import check_worker_schema, open_store

    older = _older_revision()
    engine = create_store_engine(pg_url)
    migrate.upgrade(engine, revision=older)
    settings = Settings(store_url=pg_url)
    with migrate_log() as logged:
        check_worker_schema(settings)
    assert migrate.current_revision(engine) == older
    assert any("a scheduler upgrades them" in m for m in logged), logged
    open_store(settings, upgrade_schema=True).dispose()
    assert migrate.current_revision(engine) == migrate.head_revision()
    engine.dispose()


def test_a_node_runs_on_tables_a_newer_version_upgraded(pg_url: str) -> None:
    from sqlalchemy import text

    from celery_quartz.config import Settings
    from celery_quartz.store import check_worker_schema, open_store

    engine = create_store_engine(pg_url)
    migrate.upgrade(engine)
    with engine.begin() as conn:  # as a later version's migration would leave it
        conn.execute(text("UPDATE quartz_alembic_version SET version_num = '9999'"))
    with migrate_log() as logged:
        for auto in (True, False):
            settings = Settings(store_url=pg_url, schema_auto_upgrade=auto)
            open_store(settings, upgrade_schema=True).dispose()
            check_worker_schema(settings)
    assert migrate.current_revision(engine) == "9999"
    newer = [m for m in logged if "schema revision 9999, newer than this version's" in m]
    assert len(newer) == 4, logged  # each node, each setting
    engine.dispose()


def test_a_beat_and_a_worker_with_auto_upgrade_off_stop_at_start_on_older_tables(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    from tests.integration import ledger_app
    from tests.integration.processes import processes, wait_for

    older = _older_revision()
    engine = create_store_engine(pg_url)
    migrate.upgrade(engine, revision=older)
    engine.dispose()
    env = ledger_app.environment(pg_url, redis_url, SCHEMA_AUTO_UPGRADE="0")
    with processes(tmp_path, env) as procs:
        procs.worker("worker1", concurrency=1)
        procs.beat("beat1")
        for name in ("worker1", "beat1"):
            proc = procs.procs[name]
            wait_for(lambda: proc.poll() is not None, 30, message=f"{name} to stop")  # noqa: B023
            assert proc.returncode != 0
            log = procs.log(name)
            assert f"are at schema revision {older}; this version needs" in log, log[-3000:]
