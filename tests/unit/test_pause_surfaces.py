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
from celery_quartz.audit import current_actor
from celery_quartz.cli import quartz
from celery_quartz.dashboard import create_app

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
    assert (a["reason"], a["requested_by"]) == ("disk full", current_actor().principal)
    assert (c["reason"], c["requested_by"]) == ("quarter close", current_actor().principal)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT.*", str(a["paused_at"]))
    table = run(app, "triggers").output
    assert f"PAUSED (disk full, by {current_actor().principal})" in table
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
    shown = r"Paused: disk full \(by ops, \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\)"
    page = api.get("/s/pauses/triggers/reports/a").text
    assert re.search(f'id="pause-record">{shown}</p>', page)
    listing = api.get("/s/pauses/triggers").text
    assert re.search(f'class="muted pause">{shown}</div>', listing)
    Quartz(app).pause_trigger(TriggerKey("b", "reports"), reason="", requested_by="ops")
    page = api.get("/s/pauses/triggers/reports/b").text
    assert re.search(r'id="pause-record">Paused: no reason given \(by ops, ', page)


def _form(api: TestClient, path: str, fields: dict[str, str], page: str = "/s/pauses/") -> int:
    """Post a page's form as the browser does (its CSRF token, from this origin); the status."""
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', api.get(page).text)
    assert csrf is not None
    posted = api.post(
        path,
        data={"csrf_token": csrf.group(1), "back": page, **fields},
        headers={"Origin": "http://testserver"},
        follow_redirects=False,
    )
    return posted.status_code


def test_the_overviews_pause_all_form_keeps_its_reason_and_resume_all_clears_it(
    app: Celery, api: TestClient
) -> None:
    overview = api.get("/s/pauses/").text
    assert re.search(r'id="pause-all-reason"[^>]* maxlength="250"', overview)
    assert _form(api, "/s/pauses/pause-all", {"reason": "incident 7"}) == 303
    assert {k: (p or {}).get("reason") for k, p in _pauses(app).items()} == {
        "reports.a": "incident 7",
        "reports.b": "incident 7",
        "other.c": "incident 7",
    }
    assert {(p or {}).get("requested_by") for p in _pauses(app).values()} == {"admin"}
    assert _form(api, "/s/pauses/resume-all", {}) == 303
    assert set(_pauses(app).values()) == {None}


def test_the_pause_all_form_is_refused_without_its_token_from_elsewhere_and_read_only(
    app: Celery, api: TestClient
) -> None:
    assert api.post("/s/pauses/pause-all", data={"reason": "x"}).status_code == 403
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', api.get("/s/pauses/").text)
    assert csrf is not None
    elsewhere = api.post(
        "/s/pauses/pause-all",
        data={"csrf_token": csrf.group(1), "reason": "x"},
        headers={"Origin": "https://evil.example"},
    )
    assert elsewhere.status_code == 403
    too_long = _form(api, "/s/pauses/pause-all", {"reason": "x" * 251})
    assert too_long == 422
    app.conf.quartz_dashboard_read_only = True
    with TestClient(create_app(app), headers={"Authorization": f"Bearer {TOKEN}"}) as read_only:
        assert 'id="global-actions"' not in read_only.get("/s/pauses/").text
        assert _form(read_only, "/s/pauses/pause-all", {"reason": "x"}) == 403
    assert set(_pauses(app).values()) == {None}


# -- editing in place: the CLI, the API and the form -------------------------------------------


def _cron_trigger(app: Celery) -> TriggerKey:
    from celery_quartz.triggers import CronTrigger

    key = TriggerKey("cron", "reports")
    client = Quartz(app)
    client.schedule_job(
        Job(key=JobKey("cron", "reports"), task="tasks.report"),
        CronTrigger(key=key, expression="0 0 2 * * ?"),
    )
    client.store.dispose()
    return key


def test_edit_trigger_on_the_cli_prints_what_changed(app: Celery) -> None:
    _cron_trigger(app)
    shown = run(
        app,
        "edit",
        "trigger",
        "cron",
        "-g",
        "reports",
        "--cron",
        "0 30 4 * * ?",
        "--dry-run",
        "--json",
    )
    assert shown.exit_code == 0, shown.output
    answer = json.loads(shown.output)
    assert answer["dry_run"] is True
    assert answer["changed"]["schedule"][1]["expression"] == "0 30 4 * * ?"
    assert "next_fire_time" in answer["changed"]
    stored = json.loads(run(app, "triggers", "--json", "--group", "reports").output)["items"]
    schedules = {t["key"]["name"]: t["schedule"] for t in stored}
    assert schedules["cron"]["expression"] == "0 0 2 * * ?"
    done = run(
        app,
        "edit",
        "trigger",
        "cron",
        "-g",
        "reports",
        "--priority",
        "8",
        "--description",
        "nightly",
    )
    assert done.exit_code == 0, done.output
    assert done.output.splitlines()[0] == "trigger reports.cron: changed 2 detail(s)"
    assert "  priority: 5 -> 8" in done.output


def test_edit_trigger_on_the_cli_refuses_a_bad_value_in_one_line(app: Celery) -> None:
    _cron_trigger(app)
    refused = run(app, "edit", "trigger", "cron", "-g", "reports", "--interval", "60")
    assert refused.exit_code == 1
    assert refused.output.strip() == (
        "error: trigger reports.cron: interval applies to a SIMPLE trigger, and this one is CRON"
    )
    assert "give at least one detail" in run(app, "edit", "trigger", "cron", "-g", "reports").output


def test_the_api_edits_a_trigger_and_names_a_bad_field(api: TestClient) -> None:
    edited = api.post(f"{API}/triggers/reports/a/edit", json={"interval": 120, "priority": 7})
    assert edited.status_code == 200, edited.text
    body = edited.json()
    assert body["dry_run"] is False
    assert body["changed"]["priority"] == [5, 7]
    assert body["trigger"]["schedule"]["repeat_interval_us"] == 120_000_000
    for bad, field in (
        ({"priority": "high"}, "priority"),
        ({"interval": 60, "cron": "0 0 2 * * ?"}, "cron"),
        ({"misfire_instruction": "NEVER"}, "misfire_instruction"),
        ({"colour": "red"}, "colour"),
        ({}, "body"),
    ):
        answer = api.post(f"{API}/triggers/reports/a/edit", json=bad)
        assert answer.status_code == 422, (bad, answer.text)
        assert answer.json()["error"]["field"] == field, bad
    assert api.get(f"{API}/triggers/reports/a").json()["priority"] == 7


def test_the_trigger_pages_edit_form_changes_the_trigger(app: Celery, api: TestClient) -> None:
    page = api.get("/s/pauses/triggers/reports/a")
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert csrf is not None and 'id="edit-form"' in page.text
    posted = api.post(
        "/s/pauses/triggers/reports/a/edit",
        data={
            "csrf_token": csrf.group(1),
            "back": "/s/pauses/triggers/reports/a",
            "priority": "3",
            "description": "",
        },
        headers={"Origin": "http://testserver"},
        follow_redirects=False,
    )
    assert posted.status_code == 303, posted.text
    trigger = api.get(f"{API}/triggers/reports/a").json()
    assert trigger["priority"] == 3


def test_the_edit_forms_clear_box_sets_a_detail_to_none_and_not_with_a_value(
    app: Celery, api: TestClient
) -> None:
    page = "/s/pauses/triggers/reports/a"
    edit = f"{page}/edit"
    assert _form(api, edit, {"execution_group": "batch", "description": "d"}, page) == 303
    assert _form(api, edit, {"execution_group": "other", "clear_execution_group": "1"}, page) == 422
    assert _form(api, edit, {"description": ""}, page) == 422  # nothing to change
    trigger = api.get(f"{API}/triggers/reports/a").json()
    assert (trigger["execution_group"], trigger["description"]) == ("batch", "d")
    assert _form(api, edit, {"clear_execution_group": "1", "clear_description": "1"}, page) == 303
    trigger = api.get(f"{API}/triggers/reports/a").json()
    assert (trigger["execution_group"], trigger["description"]) == (None, None)


# -- retries, continued: inherited policies and the pause when retries run out ---------------------


def _with_inherited_policy(app: Celery) -> TriggerKey:
    from celery_quartz import RetryPolicy

    key = TriggerKey("inherits", "reports")
    client = Quartz(app)
    client.schedule_job(
        Job(
            key=JobKey("inherits", "reports"),
            task="tasks.report",
            retry_policy=RetryPolicy.fixed(2, 10),
        ),
        SimpleTrigger(
            key=key,
            repeat_interval=timedelta(minutes=1),
            repeat_count=-1,
            pause_when_retries_exhausted=True,
        ),
    )
    client.store.dispose()
    return key


def test_triggers_json_and_the_api_show_an_inherited_policy_and_the_pause_flag(
    app: Celery, api: TestClient
) -> None:
    _with_inherited_policy(app)
    listed = run(app, "triggers", "--json")
    assert listed.exit_code == 0, listed.output
    [shown] = [t for t in json.loads(listed.output)["items"] if t["key"]["name"] == "inherits"]
    assert (shown["retry_policy"], shown["pause_when_retries_exhausted"]) == (None, True)
    trigger = api.get(f"{API}/triggers/reports/inherits").json()
    assert (trigger["retry_policy"], trigger["pause_when_retries_exhausted"]) == (None, True)
    job = api.get(f"{API}/jobs/reports/inherits").json()
    assert job["retry_policy"] == "f:2:10000"
    page = api.get("/s/pauses/triggers/reports/inherits").text
    assert "none of its own: the job's, or the scheduler's default" in page
    assert "paused when retries run out" in page
