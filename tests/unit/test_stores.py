"""Several stores in one dashboard, API and CLI (``quartz_dashboard_stores``, ``--store NAME``),
unit-tested on SQLite files."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import quote

import pytest
from celery import Celery
from click.testing import CliRunner, Result

from celery_quartz import Quartz
from celery_quartz.cli import quartz
from celery_quartz.config import Settings
from celery_quartz.dashboard import create_app
from celery_quartz.errors import ConfigurationError
from celery_quartz.job import Job
from celery_quartz.keys import JobKey, TriggerKey
from celery_quartz.store import open_store
from celery_quartz.triggers import CronTrigger

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

TOKEN = "token-admin"


def _schedule(app: Celery, url: str, scheduler: str, job: str) -> None:
    settings = replace(Settings.from_app(app), store_url=url, scheduler_name=scheduler)
    store = open_store(settings, upgrade_schema=True)
    try:
        Quartz(app, store=store, settings=settings).schedule_job(
            Job(key=JobKey(job, "reports"), task="tasks.report"),
            CronTrigger(key=TriggerKey(job, "reports"), expression="0 0 2 * * ?"),
        )
    finally:
        store.dispose()


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Celery]:
    """An app on its own store, with two more stores named ``eu`` and ``us``: ``eu`` holds
    schedulers ``billing`` and ``cli``; ``us`` holds a ``billing`` of its own."""
    app = Celery("cli", set_as_current=False)
    app.conf.quartz_store_url = f"sqlite:///{tmp_path / 'own.db'}"
    eu, us = f"sqlite:///{tmp_path / 'eu.db'}", f"sqlite:///{tmp_path / 'us.db'}"
    app.conf.quartz_dashboard_stores = {"eu": eu, "us": {"url": us}}
    app.conf.quartz_dashboard_tokens = {TOKEN: "admin"}

    def task() -> None: ...

    app.task(name="tasks.report", shared=False)(task)
    _schedule(app, eu, "billing", "eu-invoices")
    _schedule(app, eu, "cli", "eu-cli-job")
    _schedule(app, us, "billing", "us-invoices")
    yield app
    app.close()


def run(app: Celery, *args: str) -> Result:
    return CliRunner().invoke(quartz, list(args), obj=SimpleNamespace(app=app))


# -- the setting ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("sqlite:///x.db", "must be a mapping"),
        ({}, "must be a mapping"),
        ({"a:b": "sqlite:///x.db"}, "store name 'a:b'"),
        ({"": "sqlite:///x.db"}, "store name ''"),
        ({"eu": 5}, "must be a URL or a mapping"),
        ({"eu": "not a url"}, "'url' must be a SQLAlchemy URL"),
        ({"eu": {"url": "sqlite:///x.db", "prefix": "q_"}}, "unknown key(s) prefix"),
        ({"eu": {"url": "sqlite:///x.db", "table_prefix": 3}}, "'table_prefix' must be"),
    ],
)
def test_a_bad_stores_setting_is_refused_naming_what_is_wrong(value: object, message: str) -> None:
    with pytest.raises(ConfigurationError, match="quartz_dashboard_stores") as refused:
        Settings(dashboard_stores=value).validate()
    assert message in str(refused.value)


def test_each_store_gets_the_settings_on_its_url_and_table_prefix() -> None:
    settings = Settings(
        table_prefix="app_",
        dashboard_stores={
            "eu": "sqlite:///eu.db",
            "us": {"url": "sqlite:///us.db", "table_prefix": "q_"},
        },
    )
    stores = settings.stores()
    assert (stores["eu"].store_url, stores["eu"].table_prefix) == ("sqlite:///eu.db", "app_")
    assert (stores["us"].store_url, stores["us"].table_prefix) == ("sqlite:///us.db", "q_")
    with pytest.raises(ConfigurationError, match=r"no store named 'asia' \(configured: eu, us\)"):
        settings.for_store("asia")


# -- the CLI's --store ------------------------------------------------------------------------


def test_store_before_or_after_the_verbs_options_reaches_that_store(app: Celery) -> None:
    app.conf.quartz_scheduler_name = "billing"
    eu = run(app, "jobs", "--store", "eu", "--json")
    assert eu.exit_code == 0, eu.output
    assert [j["key"]["name"] for j in json.loads(eu.output)["items"]] == ["eu-invoices"]
    us = run(app, "triggers", "--json", "--store", "us")
    assert us.exit_code == 0, us.output
    assert [t["key"]["name"] for t in json.loads(us.output)["items"]] == ["us-invoices"]


def test_without_store_the_verbs_use_the_apps_own_store(app: Celery) -> None:
    app.conf.quartz_scheduler_name = "billing"
    own = run(app, "schema", "upgrade")
    assert own.exit_code == 0, own.output
    assert json.loads(run(app, "jobs", "--json").output)["items"] == []


def test_a_write_with_store_changes_that_store_only(app: Celery) -> None:
    app.conf.quartz_scheduler_name = "billing"
    paused = run(app, "pause", "trigger", "eu-invoices", "-g", "reports", "--store", "eu")
    assert paused.exit_code == 0, paused.output
    eu = json.loads(run(app, "triggers", "--store", "eu", "--json").output)["items"]
    us = json.loads(run(app, "triggers", "--store", "us", "--json").output)["items"]
    assert [t["state"] for t in eu] == ["PAUSED"]
    assert [t["state"] for t in us] == ["WAITING"]


def test_an_unknown_store_is_one_line_naming_the_configured_ones(app: Celery) -> None:
    result = run(app, "jobs", "--store", "asia")
    assert result.exit_code == 1
    assert result.output.strip() == "error: no store named 'asia' (configured: eu, us)"


def test_the_schema_verbs_take_store_too(app: Celery) -> None:
    result = run(app, "schema", "check", "--store", "eu", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["current"] == json.loads(result.output)["head"]


def test_the_verbs_without_a_store_have_no_store_option(app: Celery) -> None:
    result = run(app, "cron", "0 0 2 * * ?", "--store", "eu")
    assert result.exit_code == 2
    assert "No such option '--store'" in result.output


# -- the dashboard and the API ----------------------------------------------------------------


def _client(app: Celery) -> TestClient:
    return TestClient(create_app(app), headers={"Authorization": f"Bearer {TOKEN}"})


def test_the_api_lists_every_scheduler_of_every_store_as_one_row(app: Celery) -> None:
    with _client(app) as api:
        body = api.get("/api/v1/schedulers").json()
    rows = [(i["name"], i["store"], i["scheduler"], i["nodes"]) for i in body["items"]]
    assert rows == [
        ("eu:billing", "eu", "billing", []),
        ("eu:cli", "eu", "cli", []),
        ("us:billing", "us", "billing", []),
    ]
    assert body["unreachable"] == {}


def test_two_stores_schedulers_of_one_name_are_told_apart(app: Celery) -> None:
    with _client(app) as api:
        eu = api.get("/api/v1/schedulers/eu:billing/triggers").json()["items"]
        us = api.get("/api/v1/schedulers/us:billing/triggers").json()["items"]
        bare = api.get("/api/v1/schedulers/billing/triggers")
        unknown_store = api.get("/api/v1/schedulers/asia:billing/triggers")
    assert [t["key"]["name"] for t in eu] == ["eu-invoices"]
    assert [t["key"]["name"] for t in us] == ["us-invoices"]
    assert bare.status_code == 404
    assert unknown_store.status_code == 404


def test_a_store_that_does_not_answer_is_named_and_the_others_are_served(
    app: Celery, tmp_path: Path
) -> None:
    app.conf.quartz_dashboard_stores = {
        **app.conf.quartz_dashboard_stores,
        "down": f"sqlite:///{tmp_path / 'missing' / 'no.db'}",
    }
    with _client(app) as api:
        body = api.get("/api/v1/schedulers").json()
        page = api.get("/")
    assert [i["name"] for i in body["items"]] == ["eu:billing", "eu:cli", "us:billing"]
    assert list(body["unreachable"]) == ["down"]
    assert "OperationalError" in body["unreachable"]["down"]
    assert 'id="unreachable-down"' in page.text
    for name in ("eu:billing", "eu:cli", "us:billing"):
        assert f"/s/{quote(name, safe='')}/" in page.text


def test_the_home_page_shows_each_store_and_scheduler_with_its_nodes(app: Celery) -> None:
    settings = replace(
        Settings.from_app(app),
        store_url=app.conf.quartz_dashboard_stores["eu"],
        scheduler_name="billing",
    )
    store = open_store(settings)
    store.check_in("beat-eu-1", interval=7.5)
    store.dispose()
    with _client(app) as api:
        page = api.get("/")
        overview = api.get("/s/eu:billing/")
    assert page.status_code == 200
    assert 'id="clusters"' in page.text
    assert "scheduler beat-eu-1" in page.text
    assert "1 / 1" in page.text
    assert overview.status_code == 200
    assert "beat-eu-1" in overview.text
