"""Backfill through the HTTP API and the dashboard over real PostgreSQL: a dry run counts and
stores nothing, a backfill schedules and is audited as the API's principal, bad input is a 422
naming its field, read-only mode and a read-only token refuse it, the OpenAPI document lists it;
the trigger page's dialog counts the slots as its range changes, in a real browser, then
backfills."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from celery_quartz import Job, JobKey, Quartz, SimpleTrigger, TriggerKey
from celery_quartz.keys import BACKFILL_JOBS_GROUP
from celery_quartz.store import SqlStore
from tests.integration import ledger_app
from tests.integration.dashboard_helpers import API, READER, client, csrf_of, serve, snapshot
from tests.integration.test_dashboard_browser import _log_in, browser  # noqa: F401
from tests.stores import audit_rows

KEY = TriggerKey("minutely", "ops")
PATH = f"{API}/triggers/ops/minutely/backfill"
#: Whole minutes, an hour ago: the trigger's first fire time.
START = (datetime.now(timezone.utc) - timedelta(hours=1)).replace(second=0, microsecond=0)


def _iso(minutes: float) -> str:
    return (START + timedelta(minutes=minutes)).isoformat()


def _setup(url: str) -> tuple[SqlStore, Quartz]:
    store = ledger_app.prepared_store(url)
    quartz = Quartz(ledger_app.app, store=store)
    quartz.schedule_job(
        Job(key=JobKey("minutely", "ops"), task="ledger.noop"),
        SimpleTrigger(
            key=KEY, start_at=START, repeat_interval=timedelta(minutes=1), repeat_count=-1
        ),
        paused=True,
    )
    return store, quartz


def _firings(quartz: Quartz) -> list[Any]:
    return [
        t
        for t in quartz.get_triggers_of_job(JobKey("minutely", "ops"))
        if t.key.group == BACKFILL_JOBS_GROUP
    ]


def test_a_dry_run_counts_then_a_backfill_schedules_audited_as_the_principal(
    pg_url: str,
) -> None:
    store, quartz = _setup(pg_url)
    before = snapshot(store)
    api = client(pg_url)
    dry = api.post(PATH, json={"from": _iso(0), "to": _iso(5), "dry_run": True})
    assert dry.status_code == 200, dry.text
    answer = dry.json()
    assert {k: answer[k] for k in ("slots_found", "scheduled", "already_scheduled")} == {
        "slots_found": 5,
        "scheduled": 5,
        "already_scheduled": 0,
    }
    assert answer["already_succeeded"] == 0 and answer["dry_run"] is True
    assert [s["firing_trigger"] for s in answer["slots"]] == [None] * 5
    assert snapshot(store) == before
    done = api.post(PATH, json={"from": _iso(0), "to": _iso(3), "spacing": 2}).json()
    assert (done["slots_found"], done["scheduled"]) == (3, 3)
    assert [s["outcome"] for s in done["slots"]] == ["scheduled"] * 3
    again = api.post(PATH, json={"from": _iso(0), "to": _iso(5)}).json()
    assert (again["scheduled"], again["already_scheduled"]) == (2, 3)
    assert len(_firings(quartz)) == 5
    rows = audit_rows(store, action="backfill")
    assert [(r["principal"], r["via"], r["target"]) for r in rows] == [
        ("admin", "api", "ops.minutely")
    ] * 2
    assert rows[0]["changes"]["scheduled"] == [None, 3]
    assert rows[0]["changes"]["spacing"] == [None, 2.0]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"from": _iso(0), "to": _iso(24 * 60)}, "to"),
        ({"from": _iso(5), "to": _iso(1)}, "to"),
        ({"from": "yesterday", "to": _iso(1)}, "from"),
        ({"to": _iso(1)}, "from"),
        ({"from": _iso(0), "to": _iso(30), "max_slots": 10}, "max_slots"),
        ({"from": _iso(0), "to": _iso(3), "max_slots": 0}, "max_slots"),
        ({"from": _iso(0), "to": _iso(3), "spacing": -1}, "spacing"),
        ({"from": _iso(0), "to": _iso(3), "dry_run": "yes"}, "dry_run"),
        ({"from": _iso(0), "to": _iso(3), "slots": 3}, "slots"),
    ],
)
def test_bad_input_is_refused_naming_the_field_and_stores_nothing(
    pg_url: str, body: dict[str, Any], field: str
) -> None:
    store, _ = _setup(pg_url)
    before = snapshot(store)
    refused = client(pg_url).post(PATH, json=body)
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["field"] == field
    assert snapshot(store) == before


def test_read_only_mode_and_a_read_only_token_refuse_a_backfill(pg_url: str) -> None:
    store, _ = _setup(pg_url)
    before = snapshot(store)
    body = {"from": _iso(0), "to": _iso(3)}
    read_only = client(pg_url, dashboard_read_only=True).post(PATH, json=body)
    assert (read_only.status_code, read_only.json()["error"]["code"]) == (403, "read_only")
    assert client(pg_url, token=READER).post(PATH, json=body).status_code == 403
    assert client(pg_url).post(f"{API}/triggers/ops/none/backfill", json=body).status_code == 404
    assert snapshot(store) == before


def test_the_openapi_document_describes_the_backfill(pg_url: str) -> None:
    document = client(pg_url).get("/api/v1/openapi.json").json()
    post = document["paths"]["/api/v1/schedulers/{scheduler}/triggers/{group}/{name}/backfill"]
    operation = post["post"]
    assert "policy action: backfill" in operation["summary"]
    body = operation["requestBody"]["content"]["application/json"]["schema"]
    assert body["required"] == ["from", "to"]
    answer = document["components"]["schemas"]["Backfill"]
    for name in ("slots_found", "scheduled", "already_scheduled", "already_succeeded", "slots"):
        assert name in answer["required"]


# -- the page's dialog --------------------------------------------------------------------------


def _logged_in(url: str, **changes: Any) -> Any:
    pages = client(url, token=None, **changes)
    login = pages.get("/login")
    answer = pages.post(
        "/login",
        data={"token": "token-admin", "csrf_token": csrf_of(login.text), "next": "/"},
        follow_redirects=False,
    )
    assert answer.status_code == 303
    return pages


def test_the_dialogs_form_counts_in_a_dry_run_then_backfills_and_needs_its_csrf_token(
    pg_url: str,
) -> None:
    store, quartz = _setup(pg_url)
    pages = _logged_in(pg_url)
    page = pages.get("/s/ledger_app/triggers/ops/minutely")
    assert 'id="backfill-form"' in page.text
    form = {"from": _iso(0)[:19], "to": _iso(4)[:19], "max_slots": "1000", "spacing": "0"}
    path = "/s/ledger_app/triggers/ops/minutely/backfill"
    before = snapshot(store)
    forged = pages.post(path, data={**form, "dry_run": "1"}, follow_redirects=False)
    assert forged.status_code == 403
    token = csrf_of(page.text)
    counted = pages.post(path, data={**form, "dry_run": "1", "csrf_token": token})
    assert counted.status_code == 200
    assert (counted.json()["slots_found"], counted.json()["scheduled"]) == (4, 4)
    refused = pages.post(
        path, data={**form, "to": _iso(24 * 60)[:19], "dry_run": "1", "csrf_token": token}
    )
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "to"
    assert snapshot(store) == before
    done = pages.post(
        path, data={**form, "csrf_token": token, "back": "/s/ledger_app/"}, follow_redirects=False
    )
    assert done.status_code == 303
    assert "4+of+4+slot" in done.headers["location"]
    assert len(_firings(quartz)) == 4
    assert [r["via"] for r in audit_rows(store, action="backfill")] == ["dashboard"]


def test_read_only_mode_shows_no_backfill_dialog(pg_url: str) -> None:
    _setup(pg_url)
    page = _logged_in(pg_url, dashboard_read_only=True).get("/s/ledger_app/triggers/ops/minutely")
    assert page.status_code == 200
    assert "backfill-form" not in page.text


def _counted(page: Any, text: str) -> None:
    """Wait for the dialog's count to show ``text``."""
    page.wait_for_selector(f"#backfill-count:has-text('{text}')", timeout=10_000)


def test_the_dialog_counts_the_slots_as_the_range_changes_in_a_browser(
    pg_url: str,
    tmp_path: Path,
    browser: Any,  # noqa: F811
) -> None:
    _, quartz = _setup(pg_url)
    with serve(pg_url) as base:
        page = browser.new_page()
        _log_in(page, base)
        page.goto(f"{base}/s/ledger_app/triggers/ops/minutely")
        page.click("#backfill summary")
        page.fill("#backfill-from", _iso(0)[:19])
        page.fill("#backfill-to", _iso(3)[:19])
        _counted(page, "3 slot")
        page.fill("#backfill-to", _iso(10)[:19])
        _counted(page, "10 slot")
        assert _firings(quartz) == []  # counting stores nothing
        page.fill("#backfill-to", _iso(24 * 60)[:19])
        _counted(page, "in the future")
        page.fill("#backfill-to", _iso(5)[:19])
        _counted(page, "5 slot")
        page.screenshot(path=str(tmp_path / "backfill.png"), full_page=True)
        page.click("#action-backfill")
        page.wait_for_selector("#flash")
        assert "5 of 5 slot(s) scheduled" in page.inner_text("#flash")
    assert len(_firings(quartz)) == 5
