"""``celery -A proj quartz history | stats | audit``: the run history's verbs, their filters,
paging, ``--json`` in the API's shape, and usage errors naming the option."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from celery import Celery

from celery_quartz import Quartz
from celery_quartz.store import SqlStore
from tests.history_rows import history_row, insert_audit, insert_history
from tests.unit.test_cli_operators import app, run

__all__ = ["app"]

NOW = datetime.now(timezone.utc).replace(microsecond=0)


@pytest.fixture
def recorded(app: Celery) -> Celery:
    client = Quartz(app)  # creates the tables
    store = client.store
    assert isinstance(store, SqlStore)
    insert_history(
        store,
        history_row(NOW - timedelta(minutes=30), trigger="a", job="billing", duration_ms=2000),
        history_row(
            NOW - timedelta(minutes=20),
            "failed",
            trigger="a",
            job="billing",
            error_type="KeyError",
            error_message="'customer'",
            worker_name="celery@w1",
            instance_name="node-1",
        ),
        history_row(NOW - timedelta(minutes=10), "misfired", trigger="b", job="report"),
    )
    insert_audit(store, NOW - timedelta(hours=2), principal="alice", changes={"paused": [0, 1]})
    insert_audit(store, NOW - timedelta(hours=1), principal="bob", via="api")
    store.dispose()
    return app


def test_history_lists_newest_first_with_the_issues_field_names(recorded: Celery) -> None:
    result = run(recorded, "history", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert [i["result"] for i in document["items"]] == ["misfired", "failed", "succeeded"]
    failed = document["items"][1]
    assert failed["job"] == {"group": "DEFAULT", "name": "billing"}
    assert failed["trigger"] == {"group": "DEFAULT", "name": "a"}
    assert (failed["error_type"], failed["worker"], failed["scheduler_instance"]) == (
        "KeyError",
        "celery@w1",
        "node-1",
    )
    assert failed["duration"] == 1.0 and failed["start_lateness"] == 0.05
    for name in (
        "fire_instance_id", "task_name", "task_id", "scheduled_fire_time", "published_time",
        "started_time", "finished_time", "error_message", "retry_attempt", "recovering",
        "summary", "metrics", "reason",
    ):  # fmt: skip
        assert name in failed
    assert document["items"][0]["reason"].startswith("misfired")
    assert document["next_after"] is None


def test_history_filters_and_pages(recorded: Celery) -> None:
    result = run(recorded, "history", "--job", "billing", "--result", "FAILED")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split()[:3] == ["TIME", "RESULT", "TRIGGER"]
    assert len(lines) == 2 and "KeyError: 'customer'" in lines[1]
    first = run(recorded, "history", "--limit", "2")
    assert first.output.splitlines()[-1].startswith("more: --after ")
    cursor = first.output.splitlines()[-1].split()[-1]
    second = json.loads(
        run(recorded, "history", "--limit", "2", "--after", cursor, "--json").output
    )
    assert [i["result"] for i in second["items"]] == ["succeeded"]
    since = (NOW - timedelta(minutes=15)).isoformat()
    window = json.loads(run(recorded, "history", "--since", since, "--json").output)
    assert [i["result"] for i in window["items"]] == ["misfired"]
    by_trigger = json.loads(run(recorded, "history", "--trigger", "b", "--json").output)
    assert [i["trigger"]["name"] for i in by_trigger["items"]] == ["b"]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--result", "done"], "unknown result 'done'"),
        (["--since", "yesterday"], "not an ISO 8601 time"),
        (["--after", "page-2"], "not a cursor"),
        (["--job", "a", "--trigger", "b"], "--job or --trigger"),
    ],
)
def test_bad_history_options_are_usage_errors(
    recorded: Celery, args: list[str], named: str
) -> None:
    result = run(recorded, "history", *args)
    assert result.exit_code == 2
    assert named in result.output


def test_stats_count_by_result_in_buckets(recorded: Celery) -> None:
    result = run(recorded, "stats", "--window", "2h", "--bucket", "1h", "--json")
    assert result.exit_code == 0, result.output
    stats = json.loads(result.output)
    assert stats["bucket"] == 3600.0 and stats["job"] is None
    assert stats["total"]["counts"] == {"failed": 1, "misfired": 1, "succeeded": 1}
    assert sum(sum(b["counts"].values()) for b in stats["buckets"]) == 3
    assert stats["total"]["duration_max"] == 2.0
    one = json.loads(run(recorded, "stats", "--job", "report", "--json").output)
    assert one["job"] == {"group": "DEFAULT", "name": "report"}
    assert one["total"]["counts"] == {"misfired": 1}
    table = run(recorded, "stats", "--window", "2h")
    assert table.output.splitlines()[0].split()[:3] == ["BUCKET", "TOTAL", "SUCCEEDED"]
    assert table.output.splitlines()[-1].split()[:5] == ["total", "3", "1", "1", "1"]
    bad = run(recorded, "stats", "--bucket", "10m")
    assert bad.exit_code == 2 and "5m, 1h, 6h or 1d" in bad.output
    assert run(recorded, "stats", "--window", "soon").exit_code == 2


def test_audit_lists_who_changed_what(recorded: Celery) -> None:
    result = run(recorded, "audit", "--json")
    assert result.exit_code == 0, result.output
    items = json.loads(result.output)["items"]
    assert [i["principal"] for i in items] == ["bob", "alice"]
    assert items[1]["changes"] == {"paused": [0, 1]} and items[1]["via"] == "cli"
    alice = run(recorded, "audit", "--principal", "alice")
    assert alice.output.splitlines()[0].split()[:3] == ["TIME", "PRINCIPAL", "VIA"]
    assert len(alice.output.splitlines()) == 2
    since = (NOW - timedelta(minutes=90)).isoformat()
    later = json.loads(run(recorded, "audit", "--since", since, "--json").output)["items"]
    assert [i["principal"] for i in later] == ["bob"]


def test_the_history_verbs_say_the_tables_are_missing(app: Celery) -> None:
    for verb in ("history", "stats", "audit"):
        result = run(app, verb)
        assert result.exit_code == 1, verb
        assert "quartz schema upgrade" in result.output, verb
