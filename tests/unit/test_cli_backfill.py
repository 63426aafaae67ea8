"""``celery -A proj quartz backfill``: the answer's JSON keys, a dry run, ``--store NAME``, and
bad input refused as a usage error naming it, storing nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest
from celery import Celery
from click.testing import CliRunner, Result

from celery_quartz import Quartz
from celery_quartz.cli import quartz
from celery_quartz.job import Job
from celery_quartz.keys import JobKey, TriggerKey
from celery_quartz.triggers import SimpleTrigger
from tests.stores import audit_rows, store_at

#: Whole minutes, an hour ago: the trigger's first fire time.
START = (datetime.now(timezone.utc) - timedelta(hours=1)).replace(second=0, microsecond=0)


def _iso(minutes: float) -> str:
    return (START + timedelta(minutes=minutes)).isoformat()


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Celery]:
    app = Celery("cli", set_as_current=False)
    app.conf.quartz_store_url = f"sqlite:///{tmp_path / 'quartz.db'}"
    app.conf.quartz_dashboard_stores = {"other": f"sqlite:///{tmp_path / 'other.db'}"}

    def task() -> None: ...

    app.task(name="tasks.report", shared=False)(task)
    client = Quartz(app)
    client.schedule_job(
        Job(key=JobKey("minutely", "reports"), task="tasks.report"),
        SimpleTrigger(
            key=TriggerKey("minutely", "reports"),
            start_at=START,
            repeat_interval=timedelta(minutes=1),
            repeat_count=-1,
        ),
        paused=True,
    )
    client.store.dispose()
    yield app
    app.close()


def run(app: Celery, *args: str) -> Result:
    return CliRunner().invoke(quartz, list(args), obj=SimpleNamespace(app=app))


def _backfills(app: Celery) -> list[dict[str, object]]:
    client = Quartz(app)
    try:
        return audit_rows(client.store, action="backfill")  # type: ignore[arg-type]
    finally:
        client.store.dispose()


def test_the_json_answer_counts_the_slots_and_lists_them(app: Celery) -> None:
    args = ("backfill", "minutely", "-g", "reports", "--from", _iso(0), "--to", _iso(3))
    result = run(app, *args, "--spacing", "5", "--json")
    assert result.exit_code == 0, result.output
    answer = json.loads(result.output)
    assert {k: answer[k] for k in ("slots_found", "scheduled", "already_scheduled")} == {
        "slots_found": 3,
        "scheduled": 3,
        "already_scheduled": 0,
    }
    assert answer["already_succeeded"] == 0
    assert answer["trigger"] == {"group": "reports", "name": "minutely"}
    assert [s["slot"] for s in answer["slots"]] == [
        (START + timedelta(minutes=m)).isoformat() for m in range(3)
    ]
    assert [s["outcome"] for s in answer["slots"]] == ["scheduled"] * 3
    first, second, _ = (datetime.fromisoformat(s["fire_at"]) for s in answer["slots"])
    assert second - first == timedelta(seconds=5)
    assert all(s["firing_trigger"]["group"] == "BACKFILL_JOBS" for s in answer["slots"])
    again = json.loads(run(app, *args, "--to", _iso(4), "--json").output)
    assert (again["slots_found"], again["scheduled"], again["already_scheduled"]) == (4, 1, 3)
    assert [(r["via"], r["action"]) for r in _backfills(app)] == [("cli", "backfill")] * 2


def test_a_dry_run_prints_what_would_be_done_and_stores_nothing(app: Celery) -> None:
    result = run(
        app,
        "backfill",
        "minutely",
        "-g",
        "reports",
        "--from",
        _iso(0),
        "--to",
        _iso(2),
        "--dry-run",
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == (
        "backfill of trigger reports.minutely: 2 slot(s) found, would schedule 2, "
        "0 already scheduled, 0 already succeeded"
    )
    assert lines[1].startswith(f"  {_iso(0)}  scheduled (fires ")
    assert _backfills(app) == []


def test_the_store_option_backfills_the_named_store(app: Celery) -> None:
    # The other store has its tables but not the trigger the default store has.
    store_at(app.conf.quartz_dashboard_stores["other"], "cli", upgrade_schema=True).dispose()
    result = run(
        app, "backfill", "minutely", "-g", "reports", "--from", _iso(0), "--to", _iso(2),
        "--store", "other",
    )  # fmt: skip
    assert result.exit_code == 1
    assert "trigger reports.minutely is not stored" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--from", "yesterday", "--to", "2026-01-01"), "is not an ISO 8601 time"),
        (("--from", _iso(5), "--to", _iso(1)), "must be before end"),
        (("--from", _iso(0), "--to", _iso(24 * 60)), "is in the future"),
        (("--from", _iso(0), "--to", _iso(30), "--max-slots", "10"), "holds 30 slots"),
        (("--from", _iso(0), "--to", _iso(3), "--max-slots", "0"), "--max-slots"),
        (("--from", _iso(0), "--to", _iso(3), "--spacing", "-1"), "--spacing"),
        (
            (
                "--to",
                _iso(3),
            ),
            "Missing option '--from'",
        ),
    ],
)
def test_bad_input_is_a_usage_error_naming_it_storing_nothing(
    app: Celery, args: tuple[str, ...], message: str
) -> None:
    result = run(app, "backfill", "minutely", "-g", "reports", *args)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert _backfills(app) == []
