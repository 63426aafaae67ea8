"""The dashboard's run-history pages rendered with rows (docs/history.md#pages), on a SQLite
store read at a fake clock: the History page's chart, filters and paged rows; the recent runs on
a trigger's and a job's page; the Audit page; Run again with the recorded arguments or the job's
current ones; jobs past their success deadline in the owed listing and on /metrics. Rows are
written straight into the tables (tests/history_rows.py)."""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from celery_quartz import Job, JobKey, Quartz, TriggerKey
from celery_quartz.clock import FakeClock, to_millis
from celery_quartz.config import Settings
from celery_quartz.dashboard import create_app
from celery_quartz.store import SqlStore
from celery_quartz.triggers import CronTrigger
from tests.history_rows import history_row, insert_audit, insert_history, insert_status
from tests.stores import store_at
from tests.unit.conftest import at

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

TOKEN = "token-admin"
BASE = "/s/unit"
REPORT = JobKey("report", "ops")


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'quartz.db'}"


@pytest.fixture
def stored(url: str, app: Celery, clock: FakeClock) -> Iterator[SqlStore]:
    """The store with job ops.report (trigger ops.hourly, args [1] kwargs {"period": "day"})
    and the clock two hours past T0."""
    store = store_at(url, "unit", clock=clock)
    store.create_tables()
    quartz = Quartz(app, store=store, clock=clock, settings=Settings(scheduler_name="unit"))
    quartz.schedule_job(
        Job(key=REPORT, task="tasks.report", durable=True, args=(1,), kwargs={"period": "day"}),
        CronTrigger(key=TriggerKey("hourly", "ops"), expression="0 0 * * * ?"),
    )
    clock.set(at(7200))
    yield store
    store.dispose()


def _client(url: str, app: Celery, clock: FakeClock, **changes: Any) -> TestClient:
    settings = Settings(
        store_url=url,
        scheduler_name="unit",
        dashboard_tokens={TOKEN: "admin", "token-reader": {"principal": "r", "write": False}},
        **changes,
    )
    return TestClient(
        create_app(app, settings=settings, clock=clock),
        headers={"Authorization": f"Bearer {TOKEN}"},
    )


def _runs(store: SqlStore) -> None:
    """Five runs of ops.report over the two hours, one failed, one misfire."""
    insert_history(
        store,
        history_row(
            at(600),
            trigger="hourly",
            trigger_group="ops",
            job="report",
            job_group="ops",
            duration_ms=1200,
            args="[1]",
            kwargs='{"period": "day"}',
        ),
        history_row(
            at(1800),
            "failed",
            trigger="hourly",
            trigger_group="ops",
            job="report",
            job_group="ops",
            duration_ms=300,
            error_type="ValueError",
            error_message="bad <row>",
        ),
        history_row(
            at(3000),
            trigger="hourly",
            trigger_group="ops",
            job="report",
            job_group="ops",
            duration_ms=2500,
        ),
        history_row(
            at(4200),
            "misfired",
            trigger="hourly",
            trigger_group="ops",
            job="report",
            job_group="ops",
        ),
        history_row(
            at(6000),
            trigger="hourly",
            trigger_group="ops",
            job="report",
            job_group="ops",
            duration_ms=900,
            args="[42]",
            kwargs='{"period": "week", "password": "x"}',
        ),
    )


def test_the_history_page_draws_the_chart_and_lists_the_rows(
    stored: SqlStore, url: str, app: Celery, clock: FakeClock
) -> None:
    _runs(stored)
    page = _client(url, app, clock).get(f"{BASE}/history", params={"window": "6h", "bucket": "1h"})
    assert page.status_code == 200, page.text
    html = page.text
    chart = re.search(r'<div class="scroll chart-box" id="history-chart">(.*?)</div>', html, re.S)
    assert chart and chart.group(1).startswith("<svg")
    bars = re.findall(r'<rect class="bar" data-result="(\w+)"', chart.group(1))
    assert set(bars) == {"succeeded", "failed", "misfired"}
    assert 'data-series="p95 duration"' in chart.group(1)
    assert html.count('class="run-row"') == 5
    assert "ValueError: bad &lt;row&gt;" in html  # escaped
    assert "&#34;password&#34;: &#34;***&#34;" in html  # recorded kwargs redacted
    assert "&#34;x&#34;" not in html
    # The nav links to it and to the audit.
    assert f'href="{BASE}/history"' in html and f'href="{BASE}/audit"' in html


def test_the_history_page_filters_by_result_and_pages_its_rows(
    stored: SqlStore, url: str, app: Celery, clock: FakeClock
) -> None:
    _runs(stored)
    api = _client(url, app, clock)
    failed = api.get(f"{BASE}/history", params={"result": "failed"}).text
    assert re.findall(r'class="run-row" data-result="(\w+)"', failed) == ["failed"]
    first = api.get(f"{BASE}/history", params={"limit": "2"}).text
    assert first.count('class="run-row"') == 2
    after = re.search(r'id="next-page" href="\?([^"]+)"', first)
    assert after is not None
    second = api.get(f"{BASE}/history?{after.group(1).replace('&amp;', '&')}").text
    assert second.count('class="run-row"') == 2
    ids = lambda html: re.findall(r'data-id="(\d+)"', html)  # noqa: E731
    assert not set(ids(first)) & set(ids(second))


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"window": "forever"}, "window"),
        ({"bucket": "2h"}, "bucket"),
        ({"result": "exploded"}, "result"),
        ({"since": "yesterday"}, "since"),
        ({"after": "x"}, "after"),
        ({"window": "30d", "bucket": "5m"}, "window"),
        ({"job": "j" * 300}, "job"),
        ({"since": "2026-12-02T00:00", "until": "2026-12-01T00:00"}, "until"),
        ({"limit": "0"}, "limit"),
    ],
)
def test_a_bad_filter_is_refused_naming_it(
    stored: SqlStore, url: str, app: Celery, clock: FakeClock, params: dict[str, str], field: str
) -> None:
    page = _client(url, app, clock).get(f"{BASE}/history", params=params)
    assert page.status_code == 422 and field in page.text


def test_the_trigger_and_job_pages_show_recent_runs_and_a_small_chart(
    stored: SqlStore, url: str, app: Celery, clock: FakeClock
) -> None:
    _runs(stored)
    api = _client(url, app, clock)
    for path in (f"{BASE}/triggers/ops/hourly", f"{BASE}/jobs/ops/report"):
        html = api.get(path).text
        assert '<svg xmlns="http://www.w3.org/2000/svg" class="chart spark"' in html, path
        assert html.count('class="run-row"') == 5, path
        assert html.count('class="run-again"') == 5, path


def test_the_audit_page_lists_changes_by_principal(
    stored: SqlStore, url: str, app: Celery, clock: FakeClock
) -> None:
    scheduled = len(stored.audit().items)  # the fixture's own writes, audited as they are made
    insert_audit(stored, at(100), principal="alice", changes={"state": ["WAITING", "PAUSED"]})
    insert_audit(stored, at(200), principal="bob", via="dashboard", action="resume_trigger")
    api = _client(url, app, clock)
    html = api.get(f"{BASE}/audit").text
    assert html.count('class="audit-row"') == scheduled + 2 and "PAUSED" in html
    only_bob = api.get(f"{BASE}/audit", params={"principal": "bob"}).text
    assert only_bob.count('class="audit-row"') == 1 and "resume_trigger" in only_bob


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([0-9a-f]+)"', html)
    assert found
    return found.group(1)


def _run_again(api: TestClient, row: dict[str, Any]) -> Any:
    html = api.get(f"{BASE}/history").text
    return api.post(
        f"{BASE}/jobs/ops/report/run-again",
        data={"csrf_token": _csrf(html), "back": f"{BASE}/history", **row},
        follow_redirects=False,
    )


def _row(store: SqlStore, at_seconds: int) -> dict[str, str]:
    page = store.history()
    [entry] = [e for e in page.items if e.event_time == at(at_seconds)]
    return {"history_id": str(entry.history_id), "event_time": str(to_millis(entry.event_time))}


def _manual_trigger_data(store: SqlStore) -> list[dict[str, Any]]:
    return [
        t.data
        for t in Quartz(
            Celery(set_as_current=False), store=store, settings=Settings(scheduler_name="unit")
        ).get_triggers_of_job(REPORT)
        if t.key.group == "MANUAL_TRIGGER"
    ]


def test_run_again_fires_the_job_with_the_recorded_arguments(
    stored: SqlStore, url: str, app: Celery, clock: FakeClock
) -> None:
    _runs(stored)
    answer = _run_again(_client(url, app, clock), _row(stored, 6000))
    assert answer.status_code == 303
    assert "the+arguments+recorded" in answer.headers["location"]
    assert _manual_trigger_data(stored) == [
        {"quartz.run_arguments": {"args": [42], "kwargs": {"period": "week", "password": "x"}}}
    ]


def test_run_again_of_a_run_with_no_recorded_arguments_uses_the_jobs_current_ones(
    stored: SqlStore, url: str, app: Celery, clock: FakeClock
) -> None:
    _runs(stored)
    answer = _run_again(_client(url, app, clock), _row(stored, 3000))
    assert answer.status_code == 303 and "its+current+arguments" in answer.headers["location"]
    assert _manual_trigger_data(stored) == [{}]


def test_run_again_is_refused_in_read_only_mode_to_a_reader_and_without_csrf(
    stored: SqlStore, url: str, app: Celery, clock: FakeClock
) -> None:
    _runs(stored)
    row = _row(stored, 6000)
    read_only = _client(url, app, clock, dashboard_read_only=True)
    assert 'class="run-again"' not in read_only.get(f"{BASE}/history").text
    assert _run_again(read_only, row).status_code == 403
    reader = _client(url, app, clock)
    reader.headers["Authorization"] = "Bearer token-reader"
    assert _run_again(reader, row).status_code == 403
    no_csrf = _client(url, app, clock).post(
        f"{BASE}/jobs/ops/report/run-again", data=row, follow_redirects=False
    )
    assert no_csrf.status_code == 403
    assert _manual_trigger_data(stored) == []


def test_run_again_of_a_row_not_stored_is_404_and_writes_nothing(
    stored: SqlStore, url: str, app: Celery, clock: FakeClock
) -> None:
    _runs(stored)
    row = _row(stored, 6000)
    answer = _run_again(_client(url, app, clock), {**row, "history_id": "999"})
    assert answer.status_code == 404
    assert _manual_trigger_data(stored) == []


def test_the_api_runs_again_with_a_json_body(
    stored: SqlStore, url: str, app: Celery, clock: FakeClock
) -> None:
    _runs(stored)
    row = _row(stored, 600)
    answer = _client(url, app, clock).post(
        "/api/v1/schedulers/unit/jobs/ops/report/run-again",
        json={"history_id": int(row["history_id"]), "event_time": int(row["event_time"])},
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["arguments"] == "recorded"
    assert _manual_trigger_data(stored) == [
        {"quartz.run_arguments": {"args": [1], "kwargs": {"period": "day"}}}
    ]


def _past_deadline(store: SqlStore) -> None:
    """ops.report must succeed hourly; its last success was at T0 + 10 min (now: T0 + 2 h)."""
    from sqlalchemy import update

    j = store.tables.jobs
    with store.transaction() as conn:
        conn.execute(update(j).values(require_success_within=3600 * 1000))
    insert_status(
        store,
        "report",
        group="ops",
        since=at(0),
        last_success=at(600),
        last_run=at(1800),
        last_result="failed",
        runs=2,
        failures=1,
        consecutive_failures=1,
    )


def test_a_job_past_its_deadline_is_owed_on_the_overview_job_page_and_metrics(
    stored: SqlStore, url: str, app: Celery, clock: FakeClock
) -> None:
    _past_deadline(stored)
    api = _client(url, app, clock)
    overview = api.get(f"{BASE}/").text
    assert 'class="overdue-job"' in overview and "ops.report" in overview
    assert 'id="all-well"' not in overview
    owed = api.get("/api/v1/schedulers/unit/owed").json()
    assert [j["key"] for j in owed["overdue_jobs"]] == [{"group": "ops", "name": "report"}]
    assert owed["overdue_jobs"][0]["due_time"] == at(4200).isoformat()
    assert 'id="job-overdue"' in api.get(f"{BASE}/jobs/ops/report").text
    metrics = api.get("/metrics")
    assert metrics.headers["content-type"].startswith("text/plain; version=0.0.4")
    labels = 'quartz_scheduler_name="unit",quartz_job_group="ops",quartz_job_name="report"'
    assert f"quartz_job_overdue{{{labels}}} 1" in metrics.text
    assert f"quartz_job_since_success_seconds{{{labels}}} 6600" in metrics.text
    assert 'quartz_store_up{quartz_scheduler_name="unit"} 1' in metrics.text


def test_the_settings_deadline_counts_for_a_job_without_one(
    stored: SqlStore, url: str, app: Celery, clock: FakeClock
) -> None:
    insert_status(stored, "report", group="ops", since=at(0), last_success=at(600))
    assert "quartz_job_overdue{" not in _client(url, app, clock).get("/metrics").text
    late = _client(url, app, clock, require_success_within={"ops.report": 1800})
    assert "quartz_job_overdue{" in late.get("/metrics").text
    assert "must succeed every 30m" in late.get(f"{BASE}/jobs/ops/report").text


def test_metrics_need_a_token_unless_anonymous_read(
    stored: SqlStore, url: str, app: Celery, clock: FakeClock
) -> None:
    api = _client(url, app, clock)
    del api.headers["Authorization"]
    assert api.get("/metrics").status_code == 401
    anonymous = _client(url, app, clock, dashboard_anonymous_read=True)
    del anonymous.headers["Authorization"]
    assert anonymous.get("/metrics").status_code == 200
