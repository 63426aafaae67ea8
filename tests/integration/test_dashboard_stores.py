"""One dashboard, API and CLI over two PostgreSQL databases, each its own cluster (the documented
way past one database, docs/operations.md#past-one-database): a real beat and worker on each,
both scheduler names ``ledger_app``; the dashboard shows each cluster as one row with its nodes
alive, pages each store's own triggers, and ``--store NAME`` reaches one store."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from click.testing import CliRunner

from celery_quartz import Job, JobKey, Quartz, SimpleTrigger, TriggerKey
from celery_quartz.cli import quartz
from tests.integration import ledger_app
from tests.integration.dashboard_helpers import ADMIN, client
from tests.integration.processes import processes, wait_for
from tests.services import PostgresServer


@contextlib.contextmanager
def _second_database(postgres: PostgresServer) -> Iterator[str]:
    name = "t_dashboard_stores_west"
    url = postgres.create_database(name, "psycopg2")
    try:
        yield url
    finally:
        with contextlib.suppress(Exception):
            postgres.drop_database(name)


def _schedule(url: str, name: str, queue: str) -> None:
    store = ledger_app.prepared_store(url)
    try:
        Quartz(ledger_app.app, store=store).schedule_job(
            Job(key=JobKey(name, "stores"), task="ledger.record", options={"queue": queue}),
            SimpleTrigger(
                key=TriggerKey(name, "stores"),
                start_at=datetime.now(timezone.utc),
                repeat_count=-1,
                repeat_interval=timedelta(seconds=1),
            ),
        )
    finally:
        store.dispose()


def _alive(api: Any) -> dict[str, set[str]]:
    body = api.get("/api/v1/schedulers").json()
    return {
        row["name"]: {n["kind"] for n in row["nodes"] or () if n["alive"]} for row in body["items"]
    }


def test_one_dashboard_and_cli_over_two_clusters_on_two_databases(
    pg_url: str, postgres: PostgresServer, redis_url: str, tmp_path: Path
) -> None:
    with _second_database(postgres) as west_url:
        # Each cluster's firings go to a queue of its own (docs/operations.md#past-one-database):
        # both are named ledger_app on one broker, and a worker that took the other cluster's
        # firing would not find it in its own database.
        _schedule(pg_url, "east-report", "east")
        _schedule(west_url, "west-report", "west")
        stores = {"east": pg_url, "west": west_url}
        api = client(pg_url, dashboard_stores=stores)
        env = {"IDLE_WAIT": "0.5", "CHECKIN_INTERVAL": "1", "CHECKIN_THRESHOLD": "1"}
        (tmp_path / "east").mkdir()
        (tmp_path / "west").mkdir()
        with (
            processes(tmp_path / "east", ledger_app.environment(pg_url, redis_url, **env)) as east,
            processes(
                tmp_path / "west", ledger_app.environment(west_url, redis_url, **env)
            ) as west,
        ):
            east.beat("beat-east")
            east.worker("w-east", concurrency=1, queues="east")
            west.beat("beat-west")
            west.worker("w-west", concurrency=1, queues="west")
            wait_for(
                lambda: (
                    _alive(api)
                    == {
                        "east:ledger_app": {"scheduler", "worker"},
                        "west:ledger_app": {"scheduler", "worker"},
                    }
                ),
                timeout=60,
                message="both clusters' beat and worker alive in one listing",
            )
            rows = api.get("/api/v1/schedulers").json()["items"]
            page = api.get("/", headers={"Authorization": f"Bearer {ADMIN}"}).text
            for row in rows:
                for node in row["nodes"]:
                    assert f"{node['kind']} {node['instance_name']}" in page

            def names(store: str) -> list[str]:
                items = api.get(f"/api/v1/schedulers/{store}:ledger_app/triggers").json()["items"]
                return sorted(i["key"]["name"] for i in items if i["key"]["group"] == "stores")

            assert names("east") == ["east-report"]
            assert names("west") == ["west-report"]

            ledger_app.app.conf.quartz_dashboard_stores = stores
            try:
                listed = CliRunner().invoke(
                    quartz,
                    ["triggers", "--group", "stores", "--store", "west", "--json"],
                    obj=SimpleNamespace(app=ledger_app.app),
                )
            finally:
                ledger_app.app.conf.quartz_dashboard_stores = None
            assert listed.exit_code == 0, listed.output
            items = json.loads(listed.output)["items"]
            assert [i["key"]["name"] for i in items] == ["west-report"]
            wait_for(
                lambda: (
                    ledger_app.row_count(pg_url, ledger_app.ledger) > 0
                    and ledger_app.row_count(west_url, ledger_app.ledger) > 0
                ),
                timeout=30,
                message="both clusters' firings run",
            )
            east.assert_running("beat-east", "w-east")
            west.assert_running("beat-west", "w-west")
