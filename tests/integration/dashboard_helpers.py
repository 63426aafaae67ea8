"""The dashboard over a real store, for the integration tests: an app with known tokens, an
in-process client, and a snapshot of the store to tell "unchanged"."""

from __future__ import annotations

import re
import warnings
from dataclasses import replace
from typing import Any

with warnings.catch_warnings():
    # Starlette's test client asks for httpx2 in newer releases; httpx is what is installed.
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from celery_quartz.config import Settings
from celery_quartz.dashboard import create_app
from celery_quartz.store import SqlStore
from tests.integration import ledger_app

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


def settings(url: str, **changes: Any) -> Settings:
    base = Settings.from_app(ledger_app.app)
    changes.setdefault("dashboard_tokens", TOKENS)
    return replace(base, store_url=url, scheduler_name=SCHEDULER, **changes)


def client(url: str, token: str | None = ADMIN, **changes: Any) -> TestClient:
    app = create_app(ledger_app.app, settings=settings(url, **changes))
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return TestClient(app, headers=headers)


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
