"""The API while a real ``celery beat`` fires and a real worker runs the firings: pages keyed by
trigger neither skip nor repeat a row while every trigger's next fire time moves, the nodes
show alive, and each trigger's last outcome is what its worker reported. A job past its success
deadline degrades beat's health and shows on its gauges, and still on the dashboard's own
/metrics once every beat is stopped."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import func, select, update

from celery_quartz import Job, JobKey, Quartz, SimpleTrigger, TriggerKey
from celery_quartz.keys import BEAT_SCHEDULE_GROUP
from celery_quartz.store import SqlStore
from celery_quartz.triggers import CronTrigger
from tests.history_rows import insert_status
from tests.integration import ledger_app
from tests.integration.dashboard_helpers import ADMIN, API, client, serve
from tests.integration.otel_files import read_points
from tests.integration.processes import processes, wait_for
from tests.services import free_port


def _env(pg_url: str, redis_url: str) -> dict[str, str]:
    return ledger_app.environment(
        pg_url, redis_url, IDLE_WAIT="0.5", CHECKIN_INTERVAL="1", CHECKIN_THRESHOLD="1"
    )


def _every_second(name: str, group: str) -> SimpleTrigger:
    return SimpleTrigger(
        key=TriggerKey(name, group),
        start_at=datetime.now(timezone.utc),
        repeat_count=-1,
        repeat_interval=timedelta(seconds=1),
    )


def _fired(store: SqlStore) -> int:
    t = store.tables.triggers
    with store.engine.connect() as conn:
        return int(conn.execute(select(func.sum(t.c.times_triggered))).scalar_one() or 0)


def _all_pages(api: Any, params: dict[str, Any]) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []
    after = None
    while True:
        page = api.get(f"{API}/triggers", params={**params, **({"after": after} if after else {})})
        assert page.status_code == 200, page.text
        body = page.json()
        seen += [(i["key"]["group"], i["key"]["name"]) for i in body["items"]]
        after = body["next_after"]
        if after is None:
            return seen


def test_pages_neither_skip_nor_repeat_a_trigger_while_triggers_fire(
    pg_url: str, redis_url: str, tmp_path: Path
) -> None:
    store = ledger_app.prepared_store(pg_url)
    quartz = Quartz(ledger_app.app, store=store)
    triggers = [_every_second(f"t{i:03d}", f"g{i % 3}") for i in range(120)]
    quartz.schedule_jobs(
        [(Job(key=JobKey("pager", "paging"), task="ledger.noop", durable=True), triggers)]
    )
    expected = sorted((t.key.group, t.key.name) for t in triggers)
    api = client(pg_url)
    with processes(tmp_path, _env(pg_url, redis_url)) as procs:
        procs.beat("beat1")
        procs.worker("w1", concurrency=2)
        wait_for(lambda: _fired(store) >= 240, timeout=60, message="two rounds of firings")
        for _ in range(3):
            fired_before = _fired(store)
            seen = _all_pages(api, {"limit": 7})
            # celery's own backend_cleanup entry is imported from beat_schedule as well.
            assert [k for k in seen if k[0] != BEAT_SCHEDULE_GROUP] == expected
            assert _all_pages(api, {"limit": 11, "group": "g1"}) == [
                k for k in expected if k[0] == "g1"
            ]
            # Triggers fired (and moved their next fire time) while the pages were read.
            wait_for(lambda b=fired_before: _fired(store) > b, timeout=10, message="firings")
        nodes = api.get(f"{API}/nodes").json()["nodes"]
        assert {n["kind"] for n in nodes if n["alive"]} == {"scheduler", "worker"}
        procs.assert_running("beat1", "w1")


def test_each_trigger_keeps_the_outcome_its_worker_reported(
    pg_url: str, redis_url: str, tmp_path: Path
) -> None:
    store = ledger_app.prepared_store(pg_url)
    quartz = Quartz(ledger_app.app, store=store)
    quartz.schedule_jobs(
        [
            (
                Job(key=JobKey("ok", "outcomes"), task="ledger.noop"),
                [_every_second("fine", "outcomes")],
            ),
            (
                # No retry policy: every occurrence is attempt 0, and fails.
                Job(key=JobKey("bad", "outcomes"), task="ledger.flaky", kwargs={"failures": 5}),
                [_every_second("failing", "outcomes")],
            ),
        ]
    )
    api = client(pg_url)

    def outcome(name: str) -> dict[str, Any] | None:
        body = api.get(f"{API}/triggers/outcomes/{name}").json()
        return body["last_outcome"]

    with processes(tmp_path, _env(pg_url, redis_url)) as procs:
        procs.beat("beat1")
        procs.worker("w1", concurrency=2)
        wait_for(
            lambda: (outcome("failing") or {}).get("consecutive_failures", 0) >= 2,
            timeout=60,
            message="two failures in a row",
        )
        wait_for(lambda: outcome("fine") is not None, timeout=30, message="a success")
    failed = outcome("failing")
    assert failed is not None
    assert failed["succeeded"] is False
    assert failed["error_type"] == "RuntimeError"
    assert "fails on purpose" in failed["error_message"]
    assert failed["duration"] is not None and failed["duration"] >= 0
    succeeded = outcome("fine")
    assert succeeded is not None
    assert succeeded["succeeded"] is True and succeeded["consecutive_failures"] == 0
    assert succeeded["error_type"] is None
    started = datetime.fromisoformat(succeeded["started_time"])
    assert started <= datetime.fromisoformat(succeeded["finished_time"])


# -- success deadlines (docs/history.md#success-deadlines) -------------------------------------


def _http_json(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())
    except urllib.error.URLError:  # not listening (yet, or any more)
        return 0, {}


def _scrape(base: str) -> str:
    request = urllib.request.Request(
        f"{base}/metrics", headers={"Authorization": f"Bearer {ADMIN}"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return str(answer.read().decode())


def _job_points(otel: Path, name: str) -> list[dict[str, Any]]:
    return [
        p
        for p in read_points(otel).get(name, [])
        if p["attributes"].get("quartz.job.name") == "billing"
    ]


def test_a_job_past_its_deadline_trips_health_the_gauges_and_the_dashboards_metrics(
    pg_url: str, redis_url: str, tmp_path: Path
) -> None:
    store = ledger_app.prepared_store(pg_url)
    quartz = Quartz(ledger_app.app, store=store)
    billing = JobKey("billing", "finance")
    quartz.schedule_job(
        Job(
            key=billing,
            task="ledger.noop",
            durable=True,
            require_success_within=timedelta(minutes=30),
        ),
        CronTrigger(key=TriggerKey("nightly", "finance"), expression="0 0 3 * * ?"),
    )
    # The job's run status as the worker's end of a firing leaves it: it last succeeded an hour
    # ago, and failed since.
    now = datetime.now(timezone.utc)
    insert_status(
        store,
        "billing",
        group="finance",
        since=now - timedelta(days=1),
        last_success=now - timedelta(hours=1),
        last_run=now - timedelta(minutes=10),
        last_result="failed",
        runs=5,
        failures=1,
        consecutive_failures=1,
    )
    otel = tmp_path / "otel"
    otel.mkdir()
    health_port = free_port()
    env = ledger_app.environment(
        pg_url,
        redis_url,
        IDLE_WAIT="0.5",
        CHECKIN_INTERVAL="1",
        CHECKIN_THRESHOLD="1",
        OTEL_DIR=str(otel),
        HEALTH_PORT=str(health_port),
    )
    with processes(tmp_path, env) as procs:
        procs.beat("beat1")
        procs.beat("beat2")
        healthz = f"http://127.0.0.1:{health_port}/healthz"
        wait_for(
            lambda: _http_json(healthz)[1].get("status") == "degraded",
            timeout=60,
            message="beat's /healthz degraded by the job past its deadline",
        )
        code, report = _http_json(healthz)
        assert code == 200 and report["data"]["overdue_jobs"] == ["finance.billing"], report
        assert "finance.billing" in report["description"]
        # Beat's own gauges (one node of the cluster reads them).
        wait_for(
            lambda: _job_points(otel, "quartz.job.overdue"), timeout=30, message="the job gauge"
        )
        [since] = _job_points(otel, "quartz.job.since_success")[-1:]
        assert since["value"] >= 3600
        # Every scheduler stops: their gauges and health endpoints go with them.
        procs.stop("beat1")
        procs.stop("beat2")
        assert _http_json(healthz) == (0, {}), "beat's health endpoint still answers"
    assert not [n for n in store.list_nodes() if n.kind == "scheduler" and n.alive]
    # The dashboard reads the store itself: the alert's series is still there.
    with serve(pg_url) as base:
        text = _scrape(base)
        labels = (
            'quartz_scheduler_name="ledger_app",quartz_job_group="finance",'
            'quartz_job_name="billing"'
        )
        assert f"quartz_job_overdue{{{labels}}} 1" in text, text
        found = re.search(rf"quartz_job_since_success_seconds{{{re.escape(labels)}}} (\S+)", text)
        assert found and float(found.group(1)) >= 3600
        assert 'quartz_store_up{quartz_scheduler_name="ledger_app"} 1' in text
        # Listed under what is owed and not happening.
        owed = client(pg_url).get(f"{API}/owed").json()
        assert [j["key"] for j in owed["overdue_jobs"]] == [{"group": "finance", "name": "billing"}]
        # A success clears it.
        rs = store.tables.run_status
        with store.transaction() as conn:
            conn.execute(
                update(rs).values(
                    last_success_time=int(datetime.now(timezone.utc).timestamp() * 1000)
                )
            )
        assert "quartz_job_overdue{" not in _scrape(base)
    store.dispose()
