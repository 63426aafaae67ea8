"""The HTTP API's reads of the run history over real PostgreSQL: history and what did not run,
statistics, each job's status and the audit, in the CLI's JSON, keyset-paged, and a bad query
parameter a 400 naming it."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import update

from celery_quartz import presentation
from celery_quartz.store import SqlStore
from tests.history_rows import history_row, insert_audit, insert_history, insert_status
from tests.integration.dashboard_helpers import API, G, client
from tests.integration.dashboard_helpers import with_jobs as _setup

NOW = datetime.now(timezone.utc).replace(microsecond=0)


def _recorded(url: str) -> SqlStore:
    store, _ = _setup(url)
    insert_history(
        store,
        *(
            history_row(
                NOW - timedelta(minutes=50 - i),
                result,
                trigger="hourly",
                trigger_group=G,
                job="report",
                job_group=G,
                args='[1, {"password": "hunter2"}]',
            )
            for i, result in enumerate(["succeeded", "failed", "misfired", "succeeded", "held"])
        ),
        history_row(
            NOW - timedelta(minutes=5),
            trigger="nightly",
            trigger_group=G,
            job="cleanup",
            job_group=G,
        ),
    )
    insert_audit(store, NOW - timedelta(hours=3), principal="alice", via="dashboard")
    insert_audit(store, NOW - timedelta(hours=2), principal="bob", via="api")
    insert_status(
        store,
        "report",
        group=G,
        since=NOW - timedelta(days=3),
        last_success=NOW - timedelta(days=2),
        runs=9,
    )
    insert_status(
        store, "cleanup", group=G, since=NOW - timedelta(days=3), last_success=NOW, runs=1
    )
    j = store.tables.jobs
    with store.transaction() as conn:
        conn.execute(
            update(j)
            .where(j.c.sched_name == store.scheduler_name, j.c.job_name == "report")
            .values(require_success_within=26 * 3600 * 1000)
        )
    return store


def test_history_answers_the_clis_json_newest_first_and_paged(pg_url: str) -> None:
    store = _recorded(pg_url)
    api = client(pg_url)
    page = api.get(f"{API}/history", params={"limit": 4}).json()
    expected = [
        presentation.history_entry(e, presentation.Redactor("password"))
        for e in store.history(limit=4).items
    ]
    assert page["items"] == expected
    assert page["items"][0]["trigger"] == {"group": G, "name": "nightly"}
    assert page["items"][1]["args"] == [1, {"password": "***"}]  # redacted, as job data is
    rest = api.get(f"{API}/history", params={"limit": 4, "after": page["next_after"]}).json()
    assert len(rest["items"]) == 2 and rest["next_after"] is None
    failed = api.get(
        f"{API}/history", params={"job_group": G, "job_name": "report", "result": "failed,held"}
    ).json()
    assert [i["result"] for i in failed["items"]] == ["held", "failed"]


def test_misfires_are_the_occurrences_not_run(pg_url: str) -> None:
    _recorded(pg_url)
    api = client(pg_url)
    items = api.get(f"{API}/history/misfires").json()["items"]
    assert [i["result"] for i in items] == ["held", "misfired"]
    assert all(i["reason"] for i in items)
    refused = api.get(f"{API}/history/misfires", params={"result": "succeeded"})
    assert refused.status_code == 400 and refused.json()["error"]["field"] == "result"


def test_stats_job_status_and_audit(pg_url: str) -> None:
    _recorded(pg_url)
    api = client(pg_url)
    stats = api.get(f"{API}/stats", params={"window": "2h", "bucket": "5m"}).json()
    assert stats["bucket"] == 300.0 and len(stats["buckets"]) == 24
    assert stats["total"]["counts"] == {"failed": 1, "held": 1, "misfired": 1, "succeeded": 3}
    one = api.get(f"{API}/stats", params={"job_group": G, "job_name": "cleanup"}).json()
    assert one["total"]["counts"] == {"succeeded": 1}
    statuses = api.get(f"{API}/job-status").json()["items"]
    assert [(s["key"]["name"], s["overdue"]) for s in statuses] == [
        ("cleanup", False),
        ("report", True),
    ]
    assert statuses[1]["require_success_within"] == 26 * 3600.0
    overdue = api.get(f"{API}/job-status", params={"overdue": "true"}).json()["items"]
    assert [s["key"]["name"] for s in overdue] == ["report"]
    paged = api.get(f"{API}/job-status", params={"limit": 1}).json()
    after = api.get(f"{API}/job-status", params={"limit": 1, "after": paged["next_after"]})
    assert after.json()["items"][0]["key"]["name"] == "report"
    audit = api.get(f"{API}/audit", params={"principal": "bob"}).json()["items"]
    assert [(a["principal"], a["via"]) for a in audit] == [("bob", "api")]


@pytest.mark.parametrize(
    ("path", "params", "field"),
    [
        ("history", {"result": "done"}, "result"),
        ("history", {"since": "yesterday"}, "since"),
        ("history", {"until": "0001-01-01T00:00:00+14:00"}, "until"),
        ("history", {"limit": "0"}, "limit"),
        ("history", {"after": "x"}, "after"),
        ("history", {"job_name": "report"}, "job_group"),
        ("stats", {"bucket": "10m"}, "bucket"),
        ("stats", {"window": "400d", "bucket": "5m"}, "window"),
        ("stats", {"window": "soon"}, "window"),
        ("job-status", {"overdue": "maybe"}, "overdue"),
        ("job-status", {"after": "!"}, "after"),
        ("audit", {"since": "2026-13-01"}, "since"),
    ],
)
def test_a_bad_query_parameter_is_a_400_naming_it(
    pg_url: str, path: str, params: dict[str, str], field: str
) -> None:
    _setup(pg_url)
    answer = client(pg_url).get(f"{API}/{path}", params=params)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["field"] == field


def test_the_openapi_document_lists_the_history_endpoints(pg_url: str) -> None:
    _setup(pg_url)
    paths = client(pg_url, token=None).get("/api/v1/openapi.json").json()["paths"]
    for name in ("history", "history/misfires", "stats", "job-status", "audit"):
        assert f"/api/v1/schedulers/{{scheduler}}/{name}" in paths
        assert "400" in paths[f"/api/v1/schedulers/{{scheduler}}/{name}"]["get"]["responses"]
