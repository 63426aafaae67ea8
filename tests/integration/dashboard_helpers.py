"""The dashboard over a real store, for the integration tests: an app with known tokens, an
in-process client, and a snapshot of the store to tell "unchanged"."""

from __future__ import annotations

import contextlib
import re
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import uvicorn

with warnings.catch_warnings():
    # Starlette's test client asks for httpx2 in newer releases; httpx is what is installed.
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from celery_quartz import Job, JobKey, Quartz, TriggerKey
from celery_quartz.config import Settings
from celery_quartz.dashboard import create_app
from celery_quartz.store import SqlStore
from celery_quartz.triggers import CronTrigger
from tests.integration import ledger_app
from tests.services import free_port

SCHEDULER = "ledger_app"
ADMIN = "token-admin"
READER = "token-reader"
ELSEWHERE = "token-elsewhere"
TOKENS = {
    ADMIN: "admin",
    READER: {"principal": "reader", "write": False},
    ELSEWHERE: {"principal": "tenant", "schedulers": ["another_scheduler"]},
}
API = f"/api/v1/schedulers/{SCHEDULER}"
G = "ops"


def settings(url: str, **changes: Any) -> Settings:
    base = Settings.from_app(ledger_app.app)
    changes.setdefault("dashboard_tokens", TOKENS)
    return replace(base, store_url=url, scheduler_name=SCHEDULER, **changes)


def client(url: str, token: str | None = ADMIN, **changes: Any) -> TestClient:
    app = create_app(ledger_app.app, settings=settings(url, **changes))
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return TestClient(app, headers=headers)


@contextlib.contextmanager
def serve(url: str, **changes: Any) -> Iterator[str]:
    """The dashboard of ``url``'s store on a local port, in a thread; yields its base URL."""
    port = free_port()
    app = create_app(ledger_app.app, settings=settings(url, dashboard_poll_interval=1, **changes))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "the dashboard did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def with_jobs(url: str) -> tuple[SqlStore, Quartz]:
    """A prepared store holding jobs ``ops.report`` (triggers ``ops.hourly`` and ``ops.daily``)
    and ``ops.cleanup`` (trigger ``ops.nightly``), durable, of task ``ledger.noop``."""
    store = ledger_app.prepared_store(url)
    quartz = Quartz(ledger_app.app, store=store)
    for job_name, trigger_names in (("report", ("hourly", "daily")), ("cleanup", ("nightly",))):
        job = Job(key=JobKey(job_name, G), task="ledger.noop", durable=True)
        quartz.schedule_jobs(
            [
                (
                    job,
                    [
                        CronTrigger(key=TriggerKey(name, G), expression="0 0 * * * ?")
                        for name in trigger_names
                    ],
                )
            ]
        )
    return store, quartz


def snapshot(store: SqlStore) -> tuple[Any, ...]:
    """Everything a write could change: row counts, every trigger's state and pin, the paused
    groups."""
    t = store.tables.triggers
    with store.engine.connect() as conn:
        rows = conn.execute(
            t.select()
            .with_only_columns(
                t.c.trigger_group, t.c.trigger_name, t.c.trigger_state, t.c.preferred_node
            )
            .order_by(t.c.trigger_group, t.c.trigger_name)
        ).all()
    return store.count_rows(), [tuple(r) for r in rows], store.paused_trigger_groups()


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([0-9a-f]+)"', html)
    assert found, "no CSRF token in the page"
    return found.group(1)
