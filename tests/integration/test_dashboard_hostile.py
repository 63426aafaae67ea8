"""The dashboard and API against hostile input and hostile clients, over real PostgreSQL: input
that no stored value can hold (a NUL, a number or a time out of range, JSON nested without end)
is a JSON refusal naming its field, never a 500; every answer carries the security headers; a
form posted from elsewhere is refused; a login starts a new session; and the trigger page shows
names and data as they are."""

from __future__ import annotations

import base64
import html
import json
import re
from typing import Any

import pytest

from celery_quartz import Job, JobKey, TriggerKey
from celery_quartz.dashboard.app import SESSION_COOKIE
from celery_quartz.triggers import CronTrigger
from tests.integration.dashboard_helpers import (
    ADMIN,
    API,
    G,
    client,
    csrf_of,
    snapshot,
    with_jobs,
)

NEW_JOB = {"name": "new", "task": "ledger.noop"}


def _refused(answer: Any, field: str) -> None:
    """A JSON 4xx naming ``field``."""
    assert 400 <= answer.status_code < 500, answer.text
    assert answer.headers["content-type"] == "application/json"
    error = answer.json()["error"]
    assert error["field"] == field, error
    assert field in error["message"]


def _cursor(group: str, name: str) -> str:
    raw = json.dumps([group, name]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.mark.parametrize(
    ("path", "field"),
    [
        (f"{API}/triggers?group=victims%00", "group"),
        (f"{API}/triggers?task=ledger.noop%00", "task"),
        (f"{API}/triggers?after={_cursor('ops', 'x' + chr(0))}", "after"),
        (f"{API}/firings?after=a%00", "after"),
        (f"{API}/jobs?group=ops%00", "group"),
        (f"{API}/triggers/{G}%00/hourly", "group"),
        (f"{API}/jobs/{G}/report%00", "name"),
    ],
)
def test_a_nul_in_a_filter_cursor_or_path_key_is_refused_naming_it(
    pg_url: str, path: str, field: str
) -> None:
    with_jobs(pg_url)
    _refused(client(pg_url).get(path), field)


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        (f"{API}/triggers/{G}/hourly%00/pause", None, "name"),
        (
            f"{API}/triggers/{G}/hourly/preferred-node",
            {"preferred_node": "w1\x00"},
            "preferred_node",
        ),
        (
            f"{API}/jobs",
            {"job": {"name": "j\x00", "task": "ledger.noop"}, "trigger": {"interval": 60}},
            "job.name",
        ),
        (
            f"{API}/jobs",
            {"job": NEW_JOB, "trigger": {"name": "t\x00", "interval": 60}},
            "trigger.name",
        ),
        (
            f"{API}/jobs",
            {"job": NEW_JOB, "trigger": {"interval": 60, "description": "\x00"}},
            "trigger.description",
        ),
    ],
)
def test_a_nul_in_a_write_is_refused_naming_it_and_changes_nothing(
    pg_url: str, path: str, body: dict[str, Any] | None, field: str
) -> None:
    store, _ = with_jobs(pg_url)
    before = snapshot(store)
    _refused(client(pg_url).post(path, json=body), field)
    assert snapshot(store) == before


def test_json_nested_fifty_thousand_deep_is_refused_as_json(pg_url: str) -> None:
    store, _ = with_jobs(pg_url)
    before = snapshot(store)
    answer = client(pg_url).post(
        f"{API}/jobs", content=b"[" * 50_000, headers={"Content-Type": "application/json"}
    )
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "bad_json"
    assert snapshot(store) == before


@pytest.mark.parametrize(
    ("trigger", "field"),
    [
        ('{"interval": NaN}', "trigger.interval"),
        ('{"interval": Infinity}', "trigger.interval"),
        ('{"interval": -Infinity}', "trigger.interval"),
        ('{"interval": 1e999}', "trigger.interval"),
        (f'{{"interval": {2**70}}}', "trigger.interval"),
        (f'{{"interval": 60, "repeat_count": {2**70}}}', "trigger.repeat_count"),
        (f'{{"cron": "0 0 * * * ?", "priority": {2**70}}}', "trigger.priority"),
        (f'{{"cron": "0 0 * * * ?", "priority": {2**31}}}', "trigger.priority"),
        (f'{{"cron": "0 0 * * * ?", "priority": {-(2**31) - 1}}}', "trigger.priority"),
        ('{"interval": 60, "data": {"x": NaN}}', "trigger.data"),
    ],
)
def test_a_number_out_of_range_is_refused_naming_its_field(
    pg_url: str, trigger: str, field: str
) -> None:
    store, _ = with_jobs(pg_url)
    before = snapshot(store)
    body = f'{{"job": {json.dumps(NEW_JOB)}, "trigger": {trigger}}}'
    answer = client(pg_url).post(
        f"{API}/jobs", content=body.encode(), headers={"Content-Type": "application/json"}
    )
    _refused(answer, field)
    assert snapshot(store) == before


def test_job_data_holding_nan_is_refused_naming_its_field(pg_url: str) -> None:
    store, _ = with_jobs(pg_url)
    before = snapshot(store)
    job = '{"name": "new", "task": "ledger.noop", "data": {"x": NaN}}'
    body = f'{{"job": {job}, "trigger": {{"interval": 60}}}}'
    answer = client(pg_url).post(
        f"{API}/jobs", content=body.encode(), headers={"Content-Type": "application/json"}
    )
    _refused(answer, "job.data")
    assert snapshot(store) == before


@pytest.mark.parametrize(
    ("trigger", "field"),
    [
        ({"at": "0001-01-01T00:00:00+14:00"}, "trigger.at"),
        ({"interval": 60, "start_at": "9999-12-31T23:59:59-14:00"}, "trigger.start_at"),
        ({"cron": "0 0 * * * ?", "end_at": "0001-01-01T00:00:00+00:01"}, "trigger.end_at"),
    ],
)
def test_a_time_outside_pythons_range_is_refused_naming_its_field(
    pg_url: str, trigger: dict[str, Any], field: str
) -> None:
    store, _ = with_jobs(pg_url)
    before = snapshot(store)
    _refused(client(pg_url).post(f"{API}/jobs", json={"job": NEW_JOB, "trigger": trigger}), field)
    assert snapshot(store) == before


@pytest.mark.parametrize(
    ("job", "trigger", "field"),
    [
        ({**NEW_JOB, "description": "d" * 251}, {"interval": 60}, "job.description"),
        (NEW_JOB, {"interval": 60, "description": "d" * 251}, "trigger.description"),
        (NEW_JOB, {"interval": 60, "execution_group": "g" * 201}, "trigger.execution_group"),
    ],
)
def test_a_text_longer_than_its_column_is_refused_naming_its_field(
    pg_url: str, job: dict[str, Any], trigger: dict[str, Any], field: str
) -> None:
    store, _ = with_jobs(pg_url)
    before = snapshot(store)
    _refused(client(pg_url).post(f"{API}/jobs", json={"job": job, "trigger": trigger}), field)
    assert snapshot(store) == before


def test_a_trigger_that_never_fires_is_refused_naming_its_cron(pg_url: str) -> None:
    store, _ = with_jobs(pg_url)
    before = snapshot(store)
    answer = client(pg_url).post(
        f"{API}/jobs", json={"job": NEW_JOB, "trigger": {"cron": "0 0 0 ? * * 2000"}}
    )
    _refused(answer, "trigger.cron")
    assert "never fire" in answer.json()["error"]["message"]
    assert snapshot(store) == before


def test_a_body_over_the_limit_is_refused_as_json(pg_url: str) -> None:
    store, _ = with_jobs(pg_url)
    before = snapshot(store)
    answer = client(pg_url).post(
        f"{API}/jobs",
        content=b" " * (1024 * 1024 + 1),
        headers={"Content-Type": "application/json"},
    )
    assert answer.status_code == 413
    assert answer.json()["error"]["code"] == "too_large"
    assert snapshot(store) == before


# -- headers ----------------------------------------------------------------------------------


def test_the_json_api_sends_security_headers(pg_url: str) -> None:
    with_jobs(pg_url)
    api = client(pg_url)
    for answer in (api.get(f"{API}/triggers"), api.get(f"{API}/no-such-thing")):
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["x-frame-options"] == "DENY"
        assert answer.headers["cache-control"] == "no-store"
        assert "default-src 'none'" in answer.headers["content-security-policy"]


def test_every_page_and_redirect_says_nosniff(pg_url: str) -> None:
    with_jobs(pg_url)
    pages = client(pg_url, token=None)
    for answer in (
        pages.get("/login"),
        pages.get("/s/ledger_app/", follow_redirects=False),
        pages.get("/s/ledger_app/nothing-here"),
    ):
        assert answer.headers["x-content-type-options"] == "nosniff", answer.url


def test_a_pages_scripts_run_by_nonce_not_unsafe_inline(pg_url: str) -> None:
    with_jobs(pg_url)
    page = client(pg_url).get(f"/s/ledger_app/triggers/{G}/hourly")
    policy = page.headers["content-security-policy"]
    [script_src] = [p.strip() for p in policy.split(";") if p.strip().startswith("script-src")]
    assert "'unsafe-inline'" not in script_src
    nonce = re.fullmatch(r"script-src 'nonce-([A-Za-z0-9_-]+)'", script_src)
    assert nonce, script_src
    scripts = re.findall(r"<script([^>]*)>", page.text)
    assert scripts and all(f'nonce="{nonce.group(1)}"' in s for s in scripts)
    assert not re.search(r"\son[a-z]+=", page.text), "an inline event handler"
    again = client(pg_url).get(f"/s/ledger_app/triggers/{G}/hourly")
    assert again.headers["content-security-policy"] != policy, "the nonce is not per response"


# -- sessions, origins, the prefix ------------------------------------------------------------


def test_a_request_outside_the_url_prefix_sets_no_session_cookie(pg_url: str) -> None:
    with_jobs(pg_url)
    pages = client(pg_url, token=None, dashboard_url_prefix="/quartz")
    answer = pages.get("/favicon.ico")
    assert answer.status_code == 404
    assert "set-cookie" not in answer.headers


def test_a_form_posted_from_another_origin_is_refused(pg_url: str) -> None:
    store, _ = with_jobs(pg_url)
    pages = _logged_in(pg_url)
    path = f"/s/ledger_app/triggers/{G}/hourly"
    token = csrf_of(pages.get(path).text)
    before = snapshot(store)
    for headers in ({"Origin": "https://evil.example"}, {"Referer": "https://evil.example/x"}):
        forged = pages.post(
            f"{path}/pause", data={"csrf_token": token}, headers=headers, follow_redirects=False
        )
        assert forged.status_code == 403, headers
        assert "evil.example" in forged.text
    assert snapshot(store) == before
    own = pages.post(
        f"{path}/pause",
        data={"csrf_token": token},
        headers={"Origin": "http://testserver"},
        follow_redirects=False,
    )
    assert own.status_code == 303


def test_a_login_issues_a_new_session_id(pg_url: str) -> None:
    with_jobs(pg_url)
    pages = client(pg_url, token=None)
    chosen = "a" * 43  # an id the attacker chose and planted in the victim's browser
    pages.cookies.set(SESSION_COOKIE, chosen)
    login = pages.get("/login")
    answer = pages.post(
        "/login",
        data={"token": ADMIN, "csrf_token": csrf_of(login.text), "next": "/"},
        follow_redirects=False,
    )
    assert answer.status_code == 303
    issued = re.search(rf"{SESSION_COOKIE}=([^;]+)", answer.headers.get("set-cookie", ""))
    assert issued and issued.group(1) != chosen


def _logged_in(url: str) -> Any:
    pages = client(url, token=None)
    login = pages.get("/login")
    pages.post(
        "/login",
        data={"token": ADMIN, "csrf_token": csrf_of(login.text), "next": "/"},
        follow_redirects=False,
    )
    return pages


# -- what the trigger page shows --------------------------------------------------------------


def test_the_trigger_page_shows_job_data_without_json_escapes(pg_url: str) -> None:
    _, quartz = with_jobs(pg_url)
    job = Job(key=JobKey("quoted", G), task="ledger.noop", durable=True)
    trigger = CronTrigger(
        key=TriggerKey("quoted", G),
        expression="0 0 * * * ?",
        data={"note": "it's <b>bold</b> & done"},
    )
    quartz.schedule_job(job, trigger)
    page = client(pg_url).get(f"/s/ledger_app/triggers/{G}/quoted")
    assert "<b>bold" not in page.text  # escaped as HTML, as any text
    assert '''"note": "it's <b>bold</b> & done"''' in html.unescape(page.text)


def test_a_bidi_override_in_a_name_is_shown_as_what_it_is(pg_url: str) -> None:
    _, quartz = with_jobs(pg_url)
    name = "invoice\u202egpj.exe"
    quartz.schedule_job(
        Job(key=JobKey(name, G), task="ledger.noop", durable=True),
        CronTrigger(key=TriggerKey(name, G), expression="0 0 * * * ?"),
    )
    pages = client(pg_url)
    for page in (
        pages.get("/s/ledger_app/triggers"),
        pages.get(f"/s/ledger_app/triggers/{G}/invoice%E2%80%AEgpj.exe"),
    ):
        assert page.status_code == 200
        assert "\u202e" not in page.text
        assert "invoice[U+202E]gpj.exe" in page.text
