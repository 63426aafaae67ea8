"""The API while a real ``celery beat`` fires and a real worker runs the firings: pages keyed by
trigger neither skip nor repeat a row while every trigger's next fire time moves, the nodes
show alive, and each trigger's last outcome is what its worker reported."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from celery_quartz import Job, JobKey, Quartz, SimpleTrigger, TriggerKey
from celery_quartz.keys import BEAT_SCHEDULE_GROUP
from celery_quartz.store import SqlStore
from tests.integration import ledger_app
from tests.integration.dashboard_helpers import API, client
from tests.integration.processes import processes, wait_for


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
