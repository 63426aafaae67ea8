"""The importers' common part (celery_quartz.importers.run_import) and their readers' pure
translations, without the source schedulers' servers (the integration tests use the real ones)."""

from __future__ import annotations

import json
from datetime import timedelta

from celery import Celery
from celery.schedules import crontab, schedule

from celery_quartz.clock import FakeClock
from celery_quartz.importers import ImportReport, SourceEntry, run_import
from celery_quartz.importers.redbeat import _entry as redbeat_entry
from celery_quartz.keys import JobKey, TriggerKey
from celery_quartz.store import MemoryStore
from tests.unit.conftest import T0

GROUP = "source"


def _entry(name: str, **fields: object) -> SourceEntry:
    values: dict = {
        "task": "tasks.report",
        "schedule": crontab(minute="0", hour="3"),
        "time_zone": "Europe/Helsinki",
    }
    values.update(fields)
    return SourceEntry(name=name, **values)


def _import(
    app: Celery, store: MemoryStore, entries: list[SourceEntry], dry_run: bool = False
) -> ImportReport:
    return run_import(
        app, store, source="test", group=GROUP, entries=entries, now=T0, dry_run=dry_run
    )


def test_a_dry_run_reports_and_writes_nothing(app: Celery, store: MemoryStore) -> None:
    report = _import(app, store, [_entry("nightly")], dry_run=True)
    assert report.added == ["nightly"]
    assert store.job_keys(GROUP) == []


def test_an_import_twice_changes_nothing_the_second_time(
    app: Celery, store: MemoryStore, clock: FakeClock
) -> None:
    entries = [_entry("nightly"), _entry("hourly", schedule=schedule(timedelta(hours=1)))]
    assert sorted(_import(app, store, entries).added) == ["hourly", "nightly"]
    before = store.retrieve_trigger(TriggerKey("hourly", GROUP))
    clock.advance(600)
    again = _import(app, store, entries)
    assert sorted(again.unchanged) == ["hourly", "nightly"] and not again.changed
    after = store.retrieve_trigger(TriggerKey("hourly", GROUP))
    assert before is not None and after is not None
    assert after.next_fire_time == before.next_fire_time  # kept, not recomputed
    assert _import(app, store, entries[:1], dry_run=True).removed == ["hourly"]


def test_a_disabled_entry_is_stored_paused(app: Celery, store: MemoryStore) -> None:
    _import(app, store, [_entry("off", enabled=False)])
    assert store.get_trigger_state(TriggerKey("off", f"{GROUP}.disabled")) == "PAUSED"
    assert store.retrieve_job(JobKey("off", GROUP)) is not None


def test_an_interval_runs_from_the_source_s_last_run(app: Celery, store: MemoryStore) -> None:
    entry = _entry(
        "every-hour", schedule=schedule(timedelta(hours=1)), first_fire=T0 + timedelta(minutes=7)
    )
    _import(app, store, [entry])
    trigger = store.retrieve_trigger(TriggerKey("every-hour", GROUP))
    assert trigger is not None and trigger.next_fire_time == T0 + timedelta(minutes=7)


def test_an_overdue_relative_interval_keeps_its_rounded_times(
    app: Celery, store: MemoryStore
) -> None:
    """The source would run it at once and then on the hour; imported, it fires on the hour."""
    hourly = schedule(timedelta(hours=1), relative=True)
    entry = _entry("hourly", schedule=hourly, first_fire=T0 - timedelta(hours=2))
    now = T0 + timedelta(minutes=17)
    run_import(app, store, source="test", group=GROUP, entries=[entry], now=now)
    trigger = store.retrieve_trigger(TriggerKey("hourly", GROUP))
    assert trigger is not None
    assert trigger.upcoming_fire_times(2) == [T0 + timedelta(hours=1), T0 + timedelta(hours=2)]


def test_what_cannot_be_represented_is_skipped_by_name(app: Celery, store: MemoryStore) -> None:
    report = _import(
        app,
        store,
        [
            _entry("unknown task", task="tasks.nope"),
            _entry("both days", schedule=crontab(day_of_month="1", day_of_week="1")),
            _entry("expired", end_at=T0 - timedelta(seconds=1)),
            _entry("fine"),
        ],
    )
    assert report.added == ["fine"]
    assert "not registered" in report.skipped["unknown task"]
    assert "day_of_week" in report.skipped["both days"]
    assert report.skipped["expired"].startswith("expired at")


def test_a_one_off_fires_once_at_its_schedule_s_next_time(app: Celery, store: MemoryStore) -> None:
    _import(app, store, [_entry("once", one_off=True, time_zone="UTC")])
    trigger = store.retrieve_trigger(TriggerKey("once", GROUP))
    assert trigger is not None
    assert trigger.next_fire_time == T0.replace(hour=3) + timedelta(days=1)
    trigger.triggered()
    assert trigger.next_fire_time is None


def test_redbeat_definitions_decode_intervals_and_skip_rrules() -> None:
    interval = json.dumps(
        {
            "name": "tick",
            "task": "tasks.report",
            "schedule": {"__type__": "interval", "every": 90.0, "relative": False},
            "args": [1],
            "kwargs": {},
            "options": {"queue": "q"},
            "enabled": True,
        }
    )
    meta = json.dumps(
        {
            "last_run_at": {
                "__type__": "datetime",
                "year": 2026,
                "month": 3,
                "day": 2,
                "hour": 11,
                "minute": 0,
                "second": 0,
                "microsecond": 0,
                "timezone": 7200.0,  # an offset in seconds: 11:00 +02:00 is 09:00 UTC
            }
        }
    )
    entry = redbeat_entry("redbeat:tick", "redbeat:", interval, meta, "UTC")
    assert entry.name == "tick" and entry.skip_reason is None
    assert entry.first_fire == T0 + timedelta(seconds=90)
    rrule = json.dumps({"name": "r", "task": "t", "schedule": {"__type__": "rrule", "freq": 5}})
    assert "rrule" in (redbeat_entry("redbeat:r", "redbeat:", rrule, None, "UTC").skip_reason or "")


def test_a_redbeat_crontab_celery_cannot_read_is_skipped_naming_the_field() -> None:
    sunday = json.dumps(
        {
            "name": "sunday",
            "task": "tasks.report",
            "schedule": {"__type__": "crontab", "minute": "0", "hour": "4", "day_of_week": "7"},
        }
    )
    entry = redbeat_entry("redbeat:sunday", "redbeat:", sunday, None, "UTC")
    assert "day_of_week '7'" in (entry.skip_reason or "")
