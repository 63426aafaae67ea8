"""Pause with a reason through the CLI, the HTTP API and the dashboard's pages (unit-tested on a
SQLite file): ``--reason`` on each pause verb, ``pause all``, the ``"pause"`` object of
``triggers --json`` and of the API, and "Paused: reason (by who, when)" on the trigger page."""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from celery import Celery
from click.testing import CliRunner, Result

from celery_quartz import Job, JobKey, Quartz, SimpleTrigger, TriggerKey
from celery_quartz.cli import quartz
from celery_quartz.dashboard import create_app
from celery_quartz.pausing import caller_principal

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

TOKEN = "token-admin"
API = "/api/v1/schedulers/pauses"


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Celery]:
    app = Celery("pauses", set_as_current=False)
    app.conf.quartz_store_url = f"sqlite:///{tmp_path / 'quartz.db'}"
    app.conf.quartz_dashboard_tokens = {TOKEN: "admin"}

    def task() -> None: ...

    app.task(name="tasks.report", shared=False)(task)
    client = Quartz(app)
    for name, group in (("a", "reports"), ("b", "reports"), ("c", "other")):
        client.schedule_job(
            Job(key=JobKey(name, group), task="tasks.report"),
            SimpleTrigger(
                key=TriggerKey(name, group),
                repeat_interval=timedelta(minutes=1),
                repeat_count=-1,
            ),
        )
    client.store.dispose()
    yield app
    app.close()


def run(app: Celery, *args: str) -> Result:
    return CliRunner().invoke(quartz, list(args), obj=SimpleNamespace(app=app))


def _pauses(app: Celery) -> dict[str, dict[str, object] | None]:
    listed = run(app, "triggers", "--json")
    assert listed.exit_code == 0, listed.output
    return {
        f"{t['key']['group']}.{t['key']['name']}": t["pause"]
        for t in json.loads(listed.output)["items"]
    }


# -- the CLI ----------------------------------------------------------------------------------


def test_each_pause_verb_takes_a_reason_shown_by_triggers_json(app: Celery) -> None:
    assert (
        run(app, "pause", "trigger", "a", "-g", "reports", "--reason", "disk full").exit_code == 0
    )
    assert run(app, "pause", "group", "other", "--reason", "quarter close").exit_code == 0
    pauses = _pauses(app)
    assert pauses["reports.b"] is None
    a, c = pauses["reports.a"], pauses["other.c"]
    assert a is not None and c is not None
    assert (a["reason"], a["requested_by"]) == ("disk full", caller_principal())
    assert (c["reason"], c["requested_by"]) == ("quarter close", caller_principal())
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT.*", str(a["paused_at"]))
    table = run(app, "triggers").output
    assert f"PAUSED (disk full, by {caller_principal()})" in table
    assert run(app, "resume", "trigger", "a", "-g", "reports").exit_code == 0
    assert _pauses(app)["reports.a"] is None


def test_pause_job_with_a_reason_says_so_in_json(app: Celery) -> None:
    result = run(app, "pause", "job", "b", "-g", "reports", "--reason", "vendor down", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {
        "done": "paused",
        "target": "job reports.b",
        "reason": "vendor down",
    }
    assert _pauses(app)["reports.b"]["reason"] == "vendor down"  # type: ignore[index]


def test_pause_all_and_resume_all(app: Celery) -> None:
    paused = run(app, "pause", "all", "--reason", "incident 7")
    assert paused.exit_code == 0, paused.output
    assert paused.output.strip() == "paused: all, reason incident 7"
    assert {p["reason"] for p in _pauses(app).values() if p} == {"incident 7"}
    assert len([p for p in _pauses(app).values() if p]) == 3
    assert run(app, "resume", "all").exit_code == 0
    assert set(_pauses(app).values()) == {None}


def test_pause_all_takes_no_name_and_the_others_need_one(app: Celery) -> None:
    assert "pause all takes no NAME" in run(app, "pause", "all", "x").output
    assert "pause trigger needs a NAME" in run(app, "pause", "trigger").output


def test_a_reason_too_long_is_one_line_and_pauses_nothing(app: Celery) -> None:
    result = run(app, "pause", "trigger", "a", "-g", "reports", "--reason", "x" * 251)
    assert result.exit_code == 1
    assert result.output.strip() == "error: pause reason is 251 characters; at most 250"
    assert set(_pauses(app).values()) == {None}


def test_resume_takes_no_reason(app: Celery) -> None:
    result = run(app, "resume", "trigger", "a", "-g", "reports", "--reason", "x")
    assert result.exit_code == 2
    assert "No such option '--reason'" in result.output


# -- the HTTP API and the pages -----------------------------------------------------------------


@pytest.fixture
def api(app: Celery) -> Iterator[TestClient]:
    app.conf.quartz_scheduler_name = "pauses"
    with TestClient(create_app(app), headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        yield client


def test_the_api_pauses_with_a_reason_and_shows_the_record(api: TestClient) -> None:
    done = api.post(f"{API}/triggers/reports/a/pause", json={"reason": "disk full"})
    assert done.status_code == 200, done.text
    pause = api.get(f"{API}/triggers/reports/a").json()["pause"]
    assert pause["reason"] == "disk full"
    assert pause["requested_by"]
    listed = api.get(f"{API}/triggers", params={"paused": "true"}).json()["items"]
    assert [(t["key"]["name"], t["pause"]["reason"]) for t in listed] == [("a", "disk full")]
    assert api.post(f"{API}/triggers/reports/a/resume").status_code == 200
    assert api.get(f"{API}/triggers/reports/a").json()["pause"] is None


def test_the_api_pauses_a_job_a_group_and_everything(api: TestClient) -> None:
    assert api.post(f"{API}/jobs/reports/b/pause", json={"reason": "job"}).status_code == 200
    assert api.post(f"{API}/trigger-groups/other/pause", json={"reason": "grp"}).status_code == 200
    reasons = {
        t["key"]["name"]: (t["pause"] or {}).get("reason")
        for t in api.get(f"{API}/triggers").json()["items"]
    }
    assert reasons == {"a": None, "b": "job", "c": "grp"}
    assert api.post(f"{API}/pause-all", json={"reason": "all"}).status_code == 200
    items = api.get(f"{API}/triggers").json()["items"]
    assert {t["pause"]["reason"] for t in items} == {"all"}
    assert api.post(f"{API}/resume-all").status_code == 200
    assert {t["pause"] is None for t in api.get(f"{API}/triggers").json()["items"]} == {True}


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"reason": "x" * 251}, "reason", "251 characters; at most 250"),
        ({"reason": 5}, "reason", "text, up to 250 characters"),
        ({"reason": "a\x00b"}, "reason", "NUL"),
        ({"why": "x"}, "why", "unknown field"),
    ],
)
def test_a_bad_pause_body_is_a_422_naming_the_field_and_pauses_nothing(
    api: TestClient, body: dict[str, object], field: str, message: str
) -> None:
    answer = api.post(f"{API}/triggers/reports/a/pause", json=body)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] == field
    assert message in answer.json()["error"]["message"]
    assert api.get(f"{API}/triggers/reports/a").json()["state"] == "WAITING"


def test_the_resume_takes_no_body_fields(api: TestClient) -> None:
    answer = api.post(f"{API}/triggers/reports/a/resume", json={"reason": "x"})
    assert answer.status_code == 422
    assert answer.json()["error"]["field"] == "reason"


def test_the_trigger_page_shows_why_who_and_when(app: Celery, api: TestClient) -> None:
    Quartz(app).pause_trigger(TriggerKey("a", "reports"), reason="disk full", requested_by="ops")
    page = api.get("/s/pauses/triggers/reports/a").text
    assert re.search(r'id="pause-record">disk full \(by ops, [^)]+\)', page)
    listing = api.get("/s/pauses/triggers").text
    assert "disk full" in listing
