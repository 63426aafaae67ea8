"""Progress seen in flight: a real worker runs a task that reports its progress; while it runs,
the CLI's ``firings --json`` and the API show the latest report, and the report moves on."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from click.testing import CliRunner

from celery_quartz import Job, JobKey, Quartz, SimpleTrigger, TriggerKey
from celery_quartz.cli import quartz
from tests.integration import ledger_app
from tests.integration.dashboard_helpers import API, client
from tests.integration.processes import processes, wait_for


def _cli_progress(url: str) -> list[dict[str, Any] | None]:
    ledger_app.app.conf.quartz_store_url = url
    try:
        result = CliRunner().invoke(
            quartz, ["firings", "--json"], obj=SimpleNamespace(app=ledger_app.app)
        )
    finally:
        ledger_app.app.conf.quartz_store_url = None
    assert result.exit_code == 0, result.output
    return [f["progress"] for f in json.loads(result.output)["items"]]


def test_a_running_tasks_progress_is_seen_in_flight_by_the_cli_and_the_api(
    pg_url: str, redis_url: str, tmp_path: Path
) -> None:
    store = ledger_app.prepared_store(pg_url)
    Quartz(ledger_app.app, store=store).schedule_job(
        Job(key=JobKey("long", "progress"), task="ledger.progress", kwargs={"steps": 4}),
        SimpleTrigger(key=TriggerKey("long", "progress"), start_at=datetime.now(timezone.utc)),
    )
    api = client(pg_url)
    env = ledger_app.environment(pg_url, redis_url, IDLE_WAIT="0.5", CHECKIN_INTERVAL="1")
    with processes(tmp_path, env) as procs:
        procs.beat("beat1")
        procs.worker("w1", concurrency=1)

        seen: list[dict[str, Any]] = []

        def reported(message: str) -> bool:
            # What the CLI showed is kept: read again, it may be the task's next report.
            seen[:] = [p for p in _cli_progress(pg_url) if p and p["message"] == message]
            return bool(seen)

        wait_for(lambda: reported("step 1 of 4"), timeout=60, message="the first report")
        (first,) = seen
        assert first["percent"] == 0
        wait_for(lambda: reported("step 3 of 4"), timeout=20, message="a later report")
        items = api.get(f"{API}/firings").json()["items"]
        (shown,) = [f["progress"] for f in items if f["progress"]]
        assert shown["percent"] >= 50 and shown["message"].startswith("step ")
        page = api.get("/s/ledger_app/firings").text
        assert "<progress" in page
        wait_for(lambda: not _cli_progress(pg_url), timeout=30, message="the firing's end")
        procs.assert_running("beat1", "w1")
