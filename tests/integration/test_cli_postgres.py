"""``celery quartz`` against a real PostgreSQL: a database without the tables is named as such,
and the listings page through the server's rows."""

from __future__ import annotations

import json
from types import SimpleNamespace

from celery import Celery
from click.testing import CliRunner, Result

from celery_quartz import Quartz
from celery_quartz.cli import quartz
from celery_quartz.job import Job
from celery_quartz.keys import JobKey, TriggerKey
from celery_quartz.store.migrate import head_revision
from celery_quartz.triggers import CronTrigger

#: The schema version this checkout migrates to.
HEAD = head_revision()


def run(app: Celery, *args: str) -> Result:
    return CliRunner().invoke(quartz, list(args), obj=SimpleNamespace(app=app))


def test_a_postgres_database_without_tables_names_the_upgrade(pg_url: str) -> None:
    app = Celery("cli_pg", set_as_current=False)
    app.conf.quartz_store_url = pg_url

    def task() -> None: ...

    app.task(name="tasks.report", shared=False)(task)
    for verb in ("status", "jobs", "triggers", "firings", "nodes"):
        result = run(app, verb)
        assert result.exit_code == 1, verb
        assert "tables are missing" in result.output, result.output
        assert "quartz schema upgrade" in result.output
        assert len(result.output.strip().splitlines()) == 1

    assert run(app, "schema", "upgrade").exit_code == 0
    client = Quartz(app)
    client.schedule_jobs(
        (
            Job(key=JobKey(f"j{i:02}", "g"), task="tasks.report"),
            [CronTrigger(key=TriggerKey(f"t{i:02}", "g"), expression="0 0 * * * ?")],
        )
        for i in range(25)
    )
    client.store.dispose()
    names: list[str] = []
    after: list[str] = []
    while True:
        page = json.loads(run(app, "triggers", "--limit", "10", *after, "--json").output)
        names += [t["key"]["name"] for t in page["items"]]
        if page["next_after"] is None:
            break
        after = ["--after", page["next_after"]]
    assert names == [f"t{i:02}" for i in range(25)]


def _app(pg_url: str) -> Celery:
    app = Celery("cli_pg", set_as_current=False)
    app.conf.quartz_store_url = pg_url
    return app


def test_schema_check_on_an_empty_postgres_database_names_the_missing_tables(pg_url: str) -> None:
    result = run(_app(pg_url), "schema", "check")
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert lines[0] == f"schema quartz_*: at nothing, expected {HEAD}"
    assert lines[1:-1] == [
        f"  missing table quartz_{name}"
        for name in (
            "audit",
            "backfill_slots",
            "calendars",
            "fired_triggers",
            "history",
            "history_rollups",
            "jobs",
            "locks",
            "paused_trigger_grps",
            "run_status",
            "scheduler_state",
            "triggers",
        )
    ]
    assert lines[-1] == "create the tables with `celery -A <app> quartz schema upgrade`"


def test_schema_check_names_a_column_of_another_type_on_postgres(pg_url: str) -> None:
    from sqlalchemy import text

    from celery_quartz.store.engine import create_store_engine

    app = _app(pg_url)
    assert run(app, "schema", "upgrade").exit_code == 0
    engine = create_store_engine(pg_url)
    with engine.begin() as conn:
        conn.execute(text("ALTER TABLE quartz_jobs ALTER COLUMN description TYPE varchar(100)"))
        conn.execute(text("ALTER TABLE quartz_jobs ALTER COLUMN task_name DROP NOT NULL"))
    engine.dispose()
    result = run(app, "schema", "check", "--json")
    assert result.exit_code == 1
    assert json.loads(result.output)["differences"] == [
        "column quartz_jobs.description is VARCHAR(100), expected VARCHAR(250)",
        "column quartz_jobs.task_name is nullable, expected NOT NULL",
    ]


def test_status_json_on_postgres(pg_url: str) -> None:
    app = _app(pg_url)
    assert json.loads(run(app, "schema", "upgrade", "--json").output)["after"] == HEAD
    result = run(app, "status", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {
        "scheduler": "cli_pg",
        "nodes": [],
        "jobs": 0,
        "triggers": 0,
        "firings_in_flight": {},
    }
