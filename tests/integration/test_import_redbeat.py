"""``celery quartz import redbeat``: entries saved into Redis through celery-redbeat's own API
are imported with the fire times redbeat computes for them (``due_at``), idempotently; an rrule
entry is reported and skipped."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from celery import Celery
from celery.schedules import crontab, schedule
from click.testing import CliRunner, Result

from celery_quartz.cli import quartz
from celery_quartz.config import Settings
from celery_quartz.keys import TriggerKey
from celery_quartz.store import open_store
from tests.stores import audit_rows

UTC = timezone.utc
PREFIX = "legacy:"


@pytest.fixture
def app(tmp_path: Path, redis_url: str) -> Iterator[Celery]:
    # redbeat reads a crontab back in the current app's zone: this app is made current.
    app = Celery("redbeat_import")
    app.conf.timezone = "Europe/Helsinki"
    app.conf.redbeat_redis_url = redis_url
    app.conf.redbeat_key_prefix = PREFIX
    app.conf.quartz_store_url = f"sqlite:///{tmp_path / 'quartz.db'}"
    for name in ("tasks.report", "tasks.cleanup"):

        def task() -> None: ...

        app.task(name=name, shared=False)(task)
    yield app
    app.close()


def run(app: Celery, *args: str) -> Result:
    return CliRunner().invoke(quartz, list(args), obj=SimpleNamespace(app=app))


def _save_entries(app: Celery, now: datetime) -> None:
    from redbeat import RedBeatSchedulerEntry
    from redbeat.schedules import rrule

    def save(name: str, task: str, sched: object, **fields: object) -> None:
        RedBeatSchedulerEntry(name, task, sched, app=app, **fields).save()

    save(
        "every 45 minutes",
        "tasks.cleanup",
        schedule(timedelta(minutes=45)),
        args=[3],
        options={"queue": "maintenance"},
        last_run_at=now - timedelta(minutes=10),
    )
    save(
        "three-hourly",
        "tasks.report",
        crontab(minute="0", hour="*/3", app=app),
        kwargs={"kind": "summary"},
        last_run_at=now,
    )
    save(
        "switched off",
        "tasks.report",
        crontab(minute="5", hour="4", app=app),
        enabled=False,
        last_run_at=now,
    )
    save("recurring", "tasks.report", rrule("MINUTELY", dtstart=now), last_run_at=now)


def _redbeat_times(app: Celery, name: str, count: int) -> list[datetime]:
    """The next runs as redbeat computes them: ``due_at`` from the last run, which becomes
    that run once it happens."""
    from redbeat import RedBeatSchedulerEntry

    entry = RedBeatSchedulerEntry.from_key(PREFIX + name, app=app)
    last = entry.last_run_at
    times = []
    for _ in range(count):
        entry.last_run_at = last
        entry.schedule.nowfun = lambda at=last: at
        last = entry.due_at
        times.append(last.astimezone(UTC))
    return times


def _quartz_times(app: Celery, name: str, group: str, count: int) -> list[datetime]:
    store = open_store(Settings.from_app(app))
    try:
        trigger = store.retrieve_trigger(TriggerKey(name, group))
    finally:
        store.dispose()
    assert trigger is not None, name
    times: list[datetime] = []
    while trigger.next_fire_time is not None and len(times) < count:
        times.append(trigger.next_fire_time)
        trigger.triggered()
    return times


def test_entries_import_with_redbeat_fire_times(app: Celery, redis_url: str) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    _save_entries(app, now)
    args = ["import", "redbeat", "--redis-url", redis_url, "--key-prefix", PREFIX]

    dry = json.loads(run(app, *args, "--dry-run", "--json").output)
    assert sorted(dry["added"]) == ["every 45 minutes", "switched off", "three-hourly"]
    assert list(dry["skipped"]) == ["recurring"]
    assert "rrule" in dry["skipped"]["recurring"]

    applied = run(app, *args)
    assert applied.exit_code == 0, applied.output
    assert "3 added" in applied.output.splitlines()[-1]
    for name, count in (("every 45 minutes", 4), ("three-hourly", 6)):
        assert _quartz_times(app, name, "redbeat", count) == _redbeat_times(app, name, count)

    triggers = json.loads(run(app, "triggers", "--json").output)["items"]
    states = {t["key"]["name"]: (t["key"]["group"], t["state"]) for t in triggers}
    assert states["switched off"] == ("redbeat.disabled", "PAUSED")
    jobs = {j["key"]["name"]: j for j in json.loads(run(app, "jobs", "--json").output)["items"]}
    assert jobs["every 45 minutes"]["options"] == {"queue": "maintenance"}
    assert jobs["every 45 minutes"]["args"] == [3]
    assert jobs["three-hourly"]["kwargs"] == {"kind": "summary"}

    again = json.loads(run(app, *args, "--json").output)
    assert again["added"] == again["updated"] == again["removed"] == []
    assert len(again["unchanged"]) == 3


def test_an_import_is_audited_as_import_redbeat_and_an_unchanged_one_not(
    app: Celery, redis_url: str
) -> None:
    _save_entries(app, datetime.now(UTC).replace(microsecond=0))
    args = ["import", "redbeat", "--redis-url", redis_url, "--key-prefix", PREFIX]
    assert run(app, *args).exit_code == 0
    store = open_store(Settings.from_app(app))
    try:
        rows = audit_rows(store)
        assert {(r["principal"], r["via"]) for r in rows} == {("import:redbeat", "import")}
        assert sorted((r["action"], r["target"]) for r in rows) == [
            ("pause_group", "redbeat.disabled"),
            ("schedule_job", "redbeat.every 45 minutes"),
            ("schedule_job", "redbeat.switched off"),
            ("schedule_job", "redbeat.three-hourly"),
            ("schedule_trigger", "redbeat.disabled.switched off"),
            ("schedule_trigger", "redbeat.every 45 minutes"),
            ("schedule_trigger", "redbeat.three-hourly"),
        ]
        assert run(app, *args).exit_code == 0
        assert audit_rows(store) == rows
    finally:
        store.dispose()


def _last_run_off_the_hour(now: datetime) -> datetime:
    """A last run within the current hour, off the hour (unless the hour has just begun)."""
    hour = now.replace(minute=0, second=0)
    return (hour + (now - hour) / 2).replace(microsecond=0)


def _last_run_yesterday_afternoon(now: datetime) -> datetime:
    return now.replace(hour=15, minute=0, second=0) - timedelta(days=1)


@pytest.mark.parametrize(
    ("every", "last_run"),
    [
        (timedelta(hours=1), _last_run_off_the_hour),
        (timedelta(days=2), _last_run_yesterday_afternoon),
    ],
    ids=["hourly, on the hour", "every two days, at midnight"],
)
def test_a_relative_interval_keeps_celery_s_rounding(
    app: Celery, redis_url: str, every: timedelta, last_run: Any
) -> None:
    """``schedule(..., relative=True)`` runs at its last run plus the interval rounded down to
    the interval's resolution, in the last run's zone (redbeat stores the app's)."""
    from redbeat import RedBeatSchedulerEntry

    now = datetime.now(ZoneInfo(app.conf.timezone)).replace(microsecond=0)
    relative = schedule(every, relative=True)
    RedBeatSchedulerEntry(
        "relative", "tasks.report", relative, app=app, last_run_at=last_run(now)
    ).save()

    applied = run(app, "import", "redbeat", "--redis-url", redis_url, "--key-prefix", PREFIX)

    assert applied.exit_code == 0, applied.output
    assert _quartz_times(app, "relative", "redbeat", 4) == _redbeat_times(app, "relative", 4)


def test_no_redis_url_is_a_usage_error(app: Celery) -> None:
    app.conf.redbeat_redis_url = None
    app.conf.broker_url = "memory://"
    result = run(app, "import", "redbeat")
    assert result.exit_code == 2
    assert "--redis-url" in result.output
