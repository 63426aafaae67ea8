"""A trigger's overlap policy through each surface (docs/steering.md#overlap-policy): the client's
``update_trigger`` (audited as a diff), ``edit trigger --overlap-policy`` and ``triggers --json``
on the CLI, the HTTP API's edit and trigger view, and the dashboard's trigger page and Edit form.
Unit-tested on a SQLite file (the client's edit also on PostgreSQL, the ``db`` fixture)."""

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
from celery_quartz.clock import FakeClock
from celery_quartz.dashboard import create_app
from celery_quartz.errors import InvalidTriggerError
from celery_quartz.overlap import OverlapPolicy
from celery_quartz.store import SqlStore
from tests.stores import audit_rows
from tests.unit.conftest import T0

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

TOKEN = "token-admin"
API = "/api/v1/schedulers/overlaps"
KEY = TriggerKey("a", "reports")


def _every_minute(key: TriggerKey, policy: str = "allow") -> SimpleTrigger:
    return SimpleTrigger(
        key=key,
        start_at=T0,
        repeat_interval=timedelta(minutes=1),
        repeat_count=-1,
        overlap_policy=policy,
    )


# -- the client ------------------------------------------------------------------------------


def test_update_trigger_changes_the_overlap_policy_audited_as_a_diff(
    app: Celery, db: SqlStore, clock: FakeClock
) -> None:
    client = Quartz(app, store=db, clock=clock)
    client.schedule_job(Job(key=JobKey("a", "reports"), task="tasks.report"), _every_minute(KEY))
    before = client.get_trigger(KEY)
    edited = client.update_trigger(KEY, overlap_policy="skip")
    stored = client.get_trigger(KEY)
    assert stored is not None and before is not None
    assert edited.overlap_policy is stored.overlap_policy is OverlapPolicy.SKIP
    assert stored.next_fire_time == before.next_fire_time
    [row] = audit_rows(db, action="update_trigger")
    assert row["changes"]["overlap_policy"] == ["allow", "skip"]


def test_update_trigger_refuses_an_unknown_policy_naming_it_and_writes_nothing(
    app: Celery, db: SqlStore, clock: FakeClock
) -> None:
    client = Quartz(app, store=db, clock=clock)
    client.schedule_job(
        Job(key=JobKey("a", "reports"), task="tasks.report"), _every_minute(KEY, "skip")
    )
    with pytest.raises(InvalidTriggerError, match=r"reports\.a: overlap_policy 'twice'"):
        client.update_trigger(KEY, overlap_policy="twice")
    assert client.get_trigger(KEY).overlap_policy is OverlapPolicy.SKIP  # type: ignore[union-attr]
    assert audit_rows(db, action="update_trigger") == []


# -- the CLI, the API and the dashboard --------------------------------------------------------


@pytest.fixture
def file_app(tmp_path: Path) -> Iterator[Celery]:
    app = Celery("overlaps", set_as_current=False)
    app.conf.quartz_store_url = f"sqlite:///{tmp_path / 'quartz.db'}"
    app.conf.quartz_dashboard_tokens = {TOKEN: "admin"}

    def task() -> None: ...

    app.task(name="tasks.report", shared=False)(task)
    client = Quartz(app)
    client.schedule_job(Job(key=JobKey("a", "reports"), task="tasks.report"), _every_minute(KEY))
    client.store.dispose()
    yield app
    app.close()


@pytest.fixture
def api(file_app: Celery) -> Iterator[TestClient]:
    file_app.conf.quartz_scheduler_name = "overlaps"
    with TestClient(create_app(file_app), headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        yield client


def run(app: Celery, *args: str) -> Result:
    return CliRunner().invoke(quartz, list(args), obj=SimpleNamespace(app=app))


def _listed_policy(app: Celery) -> str:
    listed = run(app, "triggers", "--json")
    assert listed.exit_code == 0, listed.output
    [item] = json.loads(listed.output)["items"]
    return str(item["overlap_policy"])


def test_edit_trigger_overlap_policy_on_the_cli_shown_by_triggers_json(file_app: Celery) -> None:
    assert _listed_policy(file_app) == "allow"
    done = run(file_app, "edit", "trigger", "a", "-g", "reports", "--overlap-policy", "buffer_one")
    assert done.exit_code == 0, done.output
    assert '  overlap_policy: "allow" -> "buffer_one"' in done.output
    assert _listed_policy(file_app) == "buffer_one"


def test_edit_trigger_on_the_cli_refuses_an_unknown_policy_in_one_line(file_app: Celery) -> None:
    refused = run(file_app, "edit", "trigger", "a", "-g", "reports", "--overlap-policy", "twice")
    assert refused.exit_code == 1
    assert refused.output.strip() == (
        "error: trigger reports.a: overlap_policy 'twice' is not one of allow, skip, "
        "buffer_one, cancel_previous"
    )
    assert _listed_policy(file_app) == "allow"


def test_the_api_edits_the_overlap_policy_and_names_a_bad_one(api: TestClient) -> None:
    assert api.get(f"{API}/triggers/reports/a").json()["overlap_policy"] == "allow"
    edited = api.post(f"{API}/triggers/reports/a/edit", json={"overlap_policy": "skip"})
    assert edited.status_code == 200, edited.text
    assert edited.json()["changed"]["overlap_policy"] == ["allow", "skip"]
    assert api.get(f"{API}/triggers/reports/a").json()["overlap_policy"] == "skip"
    for bad in ("twice", 3):
        answer = api.post(f"{API}/triggers/reports/a/edit", json={"overlap_policy": bad})
        assert answer.status_code == 422, answer.text
        assert answer.json()["error"]["field"] == "overlap_policy"
    assert api.get(f"{API}/triggers/reports/a").json()["overlap_policy"] == "skip"


def test_the_trigger_page_shows_the_policy_and_its_edit_form_changes_it(api: TestClient) -> None:
    page = api.get("/s/overlaps/triggers/reports/a")
    assert re.search(r'id="overlap-policy">allow<', page.text)
    assert 'name="overlap_policy"' in page.text
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert csrf is not None
    posted = api.post(
        "/s/overlaps/triggers/reports/a/edit",
        data={
            "csrf_token": csrf.group(1),
            "back": "/s/overlaps/triggers/reports/a",
            "overlap_policy": "cancel_previous",
        },
        headers={"Origin": "http://testserver"},
        follow_redirects=False,
    )
    assert posted.status_code == 303, posted.text
    assert api.get(f"{API}/triggers/reports/a").json()["overlap_policy"] == "cancel_previous"
    assert re.search(
        r'id="overlap-policy">cancel_previous<', api.get(posted.headers["location"]).text
    )


def test_the_api_schedules_a_trigger_with_an_overlap_policy_and_refuses_an_unknown_one(
    api: TestClient,
) -> None:
    job = {"name": "b", "group": "reports", "task": "tasks.report"}
    trigger = {"name": "b", "group": "reports", "interval": 60, "overlap_policy": "buffer_one"}
    done = api.post(f"{API}/jobs", json={"job": job, "trigger": trigger})
    assert done.status_code == 200, done.text
    assert api.get(f"{API}/triggers/reports/b").json()["overlap_policy"] == "buffer_one"
    for bad in ("sometimes", None, 1):
        refused = api.post(
            f"{API}/jobs",
            json={"job": {**job, "name": "c"}, "trigger": {**trigger, "overlap_policy": bad}},
        )
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["field"] == "trigger.overlap_policy"
    assert api.get(f"{API}/triggers/reports/c").status_code == 404
