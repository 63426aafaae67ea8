"""Celery's ``beat_schedule`` imported into the store: one job and one trigger per entry, in the
group ``celery.beat_schedule``, idempotently across restarts."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from celery import Celery
from celery.schedules import crontab, schedule

from celery_quartz import JobKey, PreferredNode, RetryPolicy, TriggerKey
from celery_quartz.beat_schedule import import_beat_schedule
from celery_quartz.clock import FakeClock
from celery_quartz.errors import JobDataError, UnknownTaskError, ValidationError
from celery_quartz.keys import BEAT_SCHEDULE_GROUP
from celery_quartz.store import MemoryStore, TriggerState
from celery_quartz.triggers import CronTrigger, SimpleTrigger
from tests.unit.conftest import T0, at

GROUP = BEAT_SCHEDULE_GROUP


def job_key(name: str) -> JobKey:
    return JobKey(name, GROUP)


def trigger_key(name: str) -> TriggerKey:
    return TriggerKey(name, GROUP)


ENTRIES: dict[str, dict[str, Any]] = {
    "ping-seconds": {"task": "tasks.ping", "schedule": 30},
    "ping-timedelta": {"task": "tasks.ping", "schedule": timedelta(minutes=5)},
    "ping-schedule": {"task": "tasks.ping", "schedule": schedule(timedelta(hours=1))},
    "nightly-report": {
        "task": "tasks.report",
        "schedule": crontab(minute=0, hour=2),
        "args": (2026, "march"),
        "kwargs": {"format": "pdf"},
        "options": {"queue": "reports"},
    },
}


def run_import(app: Celery, store: MemoryStore, clock: FakeClock, entries: dict) -> Any:
    return import_beat_schedule(app, store, clock, entries, max_data_bytes=64 * 1024)


def next_fire(store: MemoryStore, name: str) -> datetime | None:
    trigger = store.retrieve_trigger(trigger_key(name))
    assert trigger is not None
    return trigger.next_fire_time


# -- what an entry becomes ---------------------------------------------------------------------


def test_every_entry_becomes_one_job_and_one_trigger_in_the_beat_schedule_group(
    app: Celery, store: MemoryStore, clock: FakeClock
) -> None:
    result = run_import(app, store, clock, ENTRIES)
    assert sorted(result.added) == sorted(job_key(n) for n in ENTRIES)
    assert store.job_keys(GROUP) == sorted(job_key(n) for n in ENTRIES)
    assert store.count_rows()["triggers"] == 4
    for name in ENTRIES:
        assert [t.key for t in store.get_triggers_of_job(job_key(name))] == [trigger_key(name)]


def test_interval_entries_first_fire_one_interval_after_the_import(
    app: Celery, store: MemoryStore, clock: FakeClock
) -> None:
    run_import(app, store, clock, ENTRIES)
    assert [next_fire(store, n) for n in ("ping-seconds", "ping-timedelta", "ping-schedule")] == [
        at(30),
        at(300),
        at(3600),
    ]
    trigger = store.retrieve_trigger(trigger_key("ping-seconds"))
    assert isinstance(trigger, SimpleTrigger)
    assert (trigger.repeat_interval, trigger.repeat_count) == (timedelta(seconds=30), -1)


def test_a_crontab_entry_becomes_a_cron_trigger(
    app: Celery, store: MemoryStore, clock: FakeClock
) -> None:
    run_import(app, store, clock, ENTRIES)
    trigger = store.retrieve_trigger(trigger_key("nightly-report"))
    assert isinstance(trigger, CronTrigger)
    assert (trigger.expression, trigger.time_zone) == ("0 0 2 * * ?", "UTC")
    assert trigger.next_fire_time == datetime(2026, 3, 3, 2, 0, tzinfo=timezone.utc)


def test_args_kwargs_and_options_become_the_job_s(
    app: Celery, store: MemoryStore, clock: FakeClock
) -> None:
    run_import(app, store, clock, ENTRIES)
    job = store.retrieve_job(job_key("nightly-report"))
    assert job is not None
    assert (job.task, tuple(job.args), job.kwargs, job.options) == (
        "tasks.report",
        (2026, "march"),
        {"format": "pdf"},
        {"queue": "reports"},
    )


# -- idempotence -------------------------------------------------------------------------------


def test_importing_twice_leaves_everything_unchanged(
    app: Celery, store: MemoryStore, clock: FakeClock
) -> None:
    run_import(app, store, clock, ENTRIES)
    rows = store.count_rows()
    result = run_import(app, store, clock, ENTRIES)
    assert (result.added, result.updated, result.removed) == ([], [], [])
    assert sorted(result.unchanged) == sorted(job_key(n) for n in ENTRIES)
    assert store.count_rows() == rows


def test_a_restart_keeps_the_stored_start_and_next_fire_times(
    app: Celery, store: MemoryStore, clock: FakeClock
) -> None:
    run_import(app, store, clock, ENTRIES)
    clock.set(at(1000))
    run_import(app, store, clock, ENTRIES)
    trigger = store.retrieve_trigger(trigger_key("ping-seconds"))
    assert trigger is not None
    assert (trigger.start_at, trigger.next_fire_time) == (at(30), at(30))
    cron_trigger = store.retrieve_trigger(trigger_key("nightly-report"))
    assert cron_trigger is not None and cron_trigger.start_at == T0


def test_a_restart_keeps_a_trigger_s_progress(
    app: Celery, store: MemoryStore, clock: FakeClock
) -> None:
    run_import(app, store, clock, {"ping-seconds": ENTRIES["ping-seconds"]})
    clock.set(at(30))
    store.fire(
        "sched-a",
        store.acquire_next_triggers("sched-a", no_later_than=at(30), max_count=10, time_window=0),
    )
    run_import(app, store, clock, {"ping-seconds": ENTRIES["ping-seconds"]})
    trigger = store.retrieve_trigger(trigger_key("ping-seconds"))
    assert trigger is not None
    assert (trigger.next_fire_time, trigger.times_triggered) == (at(60), 1)


def test_a_changed_entry_is_replaced(app: Celery, store: MemoryStore, clock: FakeClock) -> None:
    run_import(app, store, clock, ENTRIES)
    clock.set(at(1000))
    changed = {**ENTRIES, "ping-seconds": {"task": "tasks.ping", "schedule": 30, "args": [1]}}
    result = run_import(app, store, clock, changed)
    assert result.updated == [job_key("ping-seconds")]
    job = store.retrieve_job(job_key("ping-seconds"))
    assert job is not None and tuple(job.args) == (1,)
    assert next_fire(store, "ping-seconds") == at(1030)


def test_a_changed_schedule_replaces_the_trigger(
    app: Celery, store: MemoryStore, clock: FakeClock
) -> None:
    run_import(app, store, clock, ENTRIES)
    changed = {
        **ENTRIES,
        "nightly-report": {**ENTRIES["nightly-report"], "schedule": crontab(0, 3)},
    }
    result = run_import(app, store, clock, changed)
    assert result.updated == [job_key("nightly-report")]
    assert next_fire(store, "nightly-report") == datetime(2026, 3, 3, 3, 0, tzinfo=timezone.utc)


def test_a_removed_entry_is_removed(app: Celery, store: MemoryStore, clock: FakeClock) -> None:
    run_import(app, store, clock, ENTRIES)
    fewer = {k: v for k, v in ENTRIES.items() if k != "ping-timedelta"}
    result = run_import(app, store, clock, fewer)
    assert result.removed == [job_key("ping-timedelta")]
    assert store.retrieve_job(job_key("ping-timedelta")) is None
    assert store.get_trigger_state(trigger_key("ping-timedelta")) == "NONE"
    assert store.count_rows()["triggers"] == 3


def test_jobs_outside_the_beat_schedule_group_are_left_alone(
    app: Celery, store: MemoryStore, clock: FakeClock
) -> None:
    from celery_quartz import Job

    own = Job(key=JobKey("mine"), task="tasks.ping", durable=True)
    store.store_jobs_and_triggers([(own, [])])
    run_import(app, store, clock, ENTRIES)
    run_import(app, store, clock, {})
    assert store.job_keys() == [JobKey("mine")]


def test_an_imported_trigger_is_waiting(app: Celery, store: MemoryStore, clock: FakeClock) -> None:
    run_import(app, store, clock, ENTRIES)
    assert store.get_trigger_state(trigger_key("ping-seconds")) == TriggerState.WAITING


# -- bad entries -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "error", "message"),
    [
        (
            {"task": "tasks.nope", "schedule": 30},
            UnknownTaskError,
            "beat entry 'bad': task 'tasks.nope' is not registered with Celery app 't'",
        ),
        (
            {"task": "tasks.ping", "schedule": 30, "expires": 10},
            ValidationError,
            "beat entry 'bad': unknown field(s) expires",
        ),
        (
            {"task": "tasks.ping", "schedule": 30, "args": [{1, 2}]},
            JobDataError,
            "job celery.beat_schedule.bad: args is not JSON",
        ),
        (
            {"task": "tasks.ping", "schedule": 30, "kwargs": {"when": datetime(2026, 1, 1)}},
            JobDataError,
            "job celery.beat_schedule.bad: kwargs is not JSON",
        ),
        ({"task": "tasks.ping"}, ValidationError, "beat entry 'bad': 'schedule' is required"),
        (
            {"task": "tasks.ping", "schedule": 30, "args": "abc"},
            ValidationError,
            "beat entry 'bad': args must be a list or tuple, got str",
        ),
        (
            {"task": "tasks.ping", "schedule": 30, "kwargs": "k=v"},
            ValidationError,
            "beat entry 'bad': kwargs must be a dict, got str",
        ),
        (
            {"task": "tasks.ping", "schedule": 30, "options": ["queue"]},
            ValidationError,
            "beat entry 'bad': options must be a dict, got list",
        ),
        ("every minute", ValidationError, "beat entry 'bad': expected a dict, got str"),
        (
            {"task": "tasks.ping", "schedule": 30, "quartz": {"group": "x"}},
            ValidationError,
            "beat entry 'bad': unknown quartz field(s) group",
        ),
        (
            {"task": "tasks.ping", "schedule": 30, "quartz": {"preferred_node": "_"}},
            ValidationError,
            "beat entry 'bad'",
        ),
        (
            {"task": "tasks.ping", "schedule": 30, "quartz": {"retry_policy": "f:3:1000"}},
            ValidationError,
            "beat entry 'bad': quartz retry_policy must be a RetryPolicy, got str",
        ),
        (
            {"task": "tasks.ping", "schedule": 30, "quartz": {"execution_group": ""}},
            ValidationError,
            "execution_group must be None or a non-empty string",
        ),
        (
            {"task": "tasks.ping", "schedule": 30, "quartz": {"overlap_policy": "queue"}},
            ValidationError,
            "beat entry 'bad': quartz: overlap_policy 'queue' is not one of allow, skip, "
            "buffer_one, cancel_previous",
        ),
    ],
    ids=[
        "unknown-task",
        "unknown-field",
        "args-set",
        "kwargs-datetime",
        "no-schedule",
        "args-str",
        "kwargs-str",
        "options-list",
        "str",
        "quartz-unknown",
        "quartz-reserved-pin",
        "quartz-policy-str",
        "quartz-empty-group",
        "quartz-overlap-policy",
    ],
)
def test_a_bad_entry_is_refused_naming_it_and_nothing_is_stored(
    app: Celery,
    store: MemoryStore,
    clock: FakeClock,
    entry: object,
    error: type[Exception],
    message: str,
) -> None:
    before = store.count_rows()
    with pytest.raises(error, match=re.escape(message)):
        run_import(app, store, clock, {**ENTRIES, "bad": entry})
    assert store.count_rows() == before


def test_a_bad_entry_leaves_an_earlier_import_as_it_was(
    app: Celery, store: MemoryStore, clock: FakeClock
) -> None:
    run_import(app, store, clock, ENTRIES)
    before = store.count_rows()
    with pytest.raises(UnknownTaskError):
        run_import(app, store, clock, {"bad": {"task": "tasks.nope", "schedule": 30}})
    assert store.count_rows() == before
    assert store.job_keys(GROUP) == sorted(job_key(n) for n in ENTRIES)


# -- the trigger's Quartz fields ---------------------------------------------------------------


def test_an_entrys_quartz_fields_set_its_triggers_group_pin_and_retry_policy(
    app: Celery, store: MemoryStore, clock: FakeClock
) -> None:
    policy = RetryPolicy.fixed(3, timedelta(seconds=30))
    entries = {
        "reindex": {
            "task": "tasks.ping",
            "schedule": 60,
            "quartz": {"execution_group": "reindex", "preferred_node": "*", "retry_policy": policy},
        },
        "report": {
            "task": "tasks.report",
            "schedule": 60,
            "quartz": {"preferred_node": "celery@reports-1"},
        },
    }
    run_import(app, store, clock, entries)
    reindex = store.retrieve_trigger(trigger_key("reindex"))
    report = store.retrieve_trigger(trigger_key("report"))
    assert reindex is not None and report is not None
    assert (reindex.execution_group, reindex.preferred_node, reindex.retry_policy) == (
        "reindex",
        PreferredNode.AUTO,
        policy,
    )
    assert report.preferred_node == PreferredNode.for_node("celery@reports-1")
    assert run_import(app, store, clock, entries).unchanged == [
        job_key("reindex"),
        job_key("report"),
    ]


def test_changing_an_entrys_quartz_fields_replaces_its_trigger(
    app: Celery, store: MemoryStore, clock: FakeClock
) -> None:
    entry = {"task": "tasks.ping", "schedule": 60}
    run_import(app, store, clock, {"e": entry})
    result = run_import(app, store, clock, {"e": {**entry, "quartz": {"execution_group": "g"}}})
    assert result.updated == [job_key("e")]
    trigger = store.retrieve_trigger(trigger_key("e"))
    assert trigger is not None and trigger.execution_group == "g"


def test_an_entrys_overlap_policy_is_its_triggers_and_a_change_replaces_it(
    app: Celery, store: MemoryStore, clock: FakeClock
) -> None:
    entry = {"task": "tasks.ping", "schedule": 60, "quartz": {"overlap_policy": "skip"}}
    run_import(app, store, clock, {"e": entry})
    trigger = store.retrieve_trigger(trigger_key("e"))
    assert trigger is not None and trigger.overlap_policy == "skip"
    assert run_import(app, store, clock, {"e": entry}).unchanged == [job_key("e")]
    changed = {**entry, "quartz": {"overlap_policy": "buffer_one"}}
    assert run_import(app, store, clock, {"e": changed}).updated == [job_key("e")]
    trigger = store.retrieve_trigger(trigger_key("e"))
    assert trigger is not None and trigger.overlap_policy == "buffer_one"
