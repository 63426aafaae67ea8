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
from celery_quartz.triggers import CronTrigger


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
        names += [t["name"] for t in page["items"]]
        if page["next_after"] is None:
            break
        after = ["--after", page["next_after"]]
    assert names == [f"t{i:02}" for i in range(25)]
