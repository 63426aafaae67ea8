"""The client API (``Quartz(app)``): what it stores, and how it refuses bad input.

Every refusal raises an exception of :mod:`celery_quartz.errors` whose message names the object
at fault, and leaves the store exactly as it was (DESIGN, invariant 7).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pytest
from celery import Celery

from celery_quartz import Job, JobKey, Quartz, SimpleTrigger, TriggerKey
from celery_quartz.calendars import HolidayCalendar, WeeklyCalendar
from celery_quartz.clock import FakeClock
from celery_quartz.errors import (
    CalendarInUseError,
    InvalidTriggerError,
    JobDataError,
    JobNotFoundError,
    ObjectAlreadyExistsError,
    QuartzError,
    TriggerNotFoundError,
    UnknownTaskError,
    ValidationError,
)
from celery_quartz.store import NONE_STATE, MemoryStore, TriggerState
from celery_quartz.triggers import CronTrigger, SimpleMisfireInstruction
from tests.unit.conftest import T0, at


@pytest.fixture
def quartz(app: Celery, store: MemoryStore, clock: FakeClock) -> Quartz:
    return Quartz(app, store=store, clock=clock)


def report_job(name: str = "report", **fields: object) -> Job:
    return Job(key=JobKey(name), task="tasks.report", **fields)  # type: ignore[arg-type]


def every_minute(name: str = "every-minute", **fields: object) -> SimpleTrigger:
    fields.setdefault("start_at", at(60))
    return SimpleTrigger(
        key=TriggerKey(name),
        repeat_interval=timedelta(minutes=1),
        repeat_count=-1,
        **fields,  # type: ignore[arg-type]
    )


def refused(
    store: MemoryStore, error: type[QuartzError], message: str, call: Callable[[], object]
) -> None:
    """``call`` raises ``error`` with ``message`` in its text, and the store is as it was."""
    before = store.count_rows()
    with pytest.raises(error, match=re.escape(message)):
        call()
    assert store.count_rows() == before


# -- scheduling and reading back ---------------------------------------------------------------


def test_schedule_job_stores_the_job_as_given(quartz: Quartz) -> None:
    job = report_job(
        args=(1, "two"),
        kwargs={"k": [3]},
        data={"d": {"e": None}},
        options={"queue": "reports"},
        description="the report",
        requests_recovery=True,
        disallow_concurrent=True,
        persist_job_data=True,
    )
    quartz.schedule_job(job, every_minute())
    assert quartz.get_job(JobKey("report")) == job


def test_schedule_job_attaches_the_trigger_to_the_job(quartz: Quartz) -> None:
    quartz.schedule_job(report_job(), every_minute())
    trigger = quartz.get_trigger(TriggerKey("every-minute"))
    assert trigger is not None
    assert (trigger.job_key, trigger.start_at, trigger.next_fire_time) == (
        JobKey("report"),
        at(60),
        at(60),
    )
    assert quartz.get_trigger_state(TriggerKey("every-minute")) == TriggerState.WAITING


def test_a_trigger_without_a_start_starts_at_the_clock_s_now(
    quartz: Quartz, clock: FakeClock
) -> None:
    clock.set(at(42))
    quartz.schedule_job(report_job(), every_minute(start_at=None))
    trigger = quartz.get_trigger(TriggerKey("every-minute"))
    assert trigger is not None and trigger.next_fire_time == at(42)


def test_reading_what_is_not_stored(quartz: Quartz) -> None:
    assert quartz.get_job(JobKey("nothing")) is None
    assert quartz.get_trigger(TriggerKey("nothing")) is None
    assert quartz.get_trigger_state(TriggerKey("nothing")) == NONE_STATE
    assert quartz.get_triggers_of_job(JobKey("nothing")) == []


def test_get_triggers_of_job_lists_them_by_group_then_name(quartz: Quartz) -> None:
    quartz.schedule_jobs(
        [
            (
                report_job(),
                [every_minute("b"), every_minute("a"), SimpleTrigger(key=TriggerKey("c", "A"))],
            )
        ]
    )
    keys = [t.key for t in quartz.get_triggers_of_job(JobKey("report"))]
    assert keys == [TriggerKey("c", "A"), TriggerKey("a"), TriggerKey("b")]


def test_schedule_jobs_stores_every_job_with_its_triggers(quartz: Quartz) -> None:
    quartz.schedule_jobs(
        [
            (report_job(), [every_minute("r1"), every_minute("r2")]),
            (Job(key=JobKey("cleanup"), task="tasks.cleanup"), [every_minute("c1")]),
        ]
    )
    assert quartz.get_job_keys() == [JobKey("cleanup"), JobKey("report")]
    assert [t.key.name for t in quartz.get_triggers_of_job(JobKey("report"))] == ["r1", "r2"]


def test_schedule_jobs_stores_nothing_when_one_item_is_invalid(
    quartz: Quartz, store: MemoryStore
) -> None:
    refused(
        store,
        UnknownTaskError,
        "'tasks.missing'",
        lambda: quartz.schedule_jobs(
            [
                (report_job(), [every_minute("r1")]),
                (Job(key=JobKey("bad"), task="tasks.missing"), [every_minute("b1")]),
            ]
        ),
    )


def test_schedule_jobs_stores_nothing_when_the_store_refuses_a_later_item(
    quartz: Quartz, store: MemoryStore
) -> None:
    quartz.schedule_job(report_job("first"), every_minute("taken"))
    refused(
        store,
        ObjectAlreadyExistsError,
        "trigger DEFAULT.taken already exists",
        lambda: quartz.schedule_jobs(
            [
                (report_job("second"), [every_minute("fresh")]),
                (report_job("third"), [every_minute("taken")]),
            ]
        ),
    )
    assert quartz.get_job(JobKey("second")) is None


def test_schedule_job_with_replace_replaces_the_job_and_trigger(quartz: Quartz) -> None:
    quartz.schedule_job(report_job(), every_minute())
    quartz.schedule_job(report_job(args=(2,)), every_minute(start_at=at(120)), replace=True)
    job, trigger = quartz.get_job(JobKey("report")), quartz.get_trigger(TriggerKey("every-minute"))
    assert job is not None and tuple(job.args) == (2,)
    assert trigger is not None and trigger.next_fire_time == at(120)


def test_schedule_trigger_adds_a_trigger_to_a_stored_job(quartz: Quartz) -> None:
    quartz.schedule_job(report_job(), every_minute("first"))
    quartz.schedule_trigger(every_minute("second", job_key=JobKey("report")))
    assert [t.key.name for t in quartz.get_triggers_of_job(JobKey("report"))] == [
        "first",
        "second",
    ]


# -- removing and replacing --------------------------------------------------------------------


def test_unschedule_job_removes_a_non_durable_job_with_its_last_trigger(quartz: Quartz) -> None:
    quartz.schedule_job(report_job(), every_minute())
    assert quartz.unschedule_job(TriggerKey("every-minute")) is True
    assert quartz.get_trigger(TriggerKey("every-minute")) is None
    assert quartz.get_job(JobKey("report")) is None


def test_unschedule_job_keeps_a_job_that_still_has_a_trigger(quartz: Quartz) -> None:
    quartz.schedule_jobs([(report_job(), [every_minute("one"), every_minute("two")])])
    quartz.unschedule_job(TriggerKey("one"))
    assert [t.key.name for t in quartz.get_triggers_of_job(JobKey("report"))] == ["two"]


def test_unschedule_job_keeps_a_durable_job_without_triggers(quartz: Quartz) -> None:
    quartz.schedule_job(report_job(durable=True), every_minute())
    quartz.unschedule_job(TriggerKey("every-minute"))
    assert quartz.get_job(JobKey("report")) is not None


def test_unschedule_job_of_an_unknown_trigger_returns_false(quartz: Quartz) -> None:
    assert quartz.unschedule_job(TriggerKey("nothing")) is False


def test_reschedule_job_replaces_the_trigger_for_the_same_job(quartz: Quartz) -> None:
    quartz.schedule_job(report_job(), every_minute())
    replacement = CronTrigger(key=TriggerKey("nightly"), expression="0 0 2 * * ?", start_at=T0)
    assert quartz.reschedule_job(TriggerKey("every-minute"), replacement) is True
    assert quartz.get_trigger(TriggerKey("every-minute")) is None
    [trigger] = quartz.get_triggers_of_job(JobKey("report"))
    assert (trigger.key, trigger.next_fire_time) == (
        TriggerKey("nightly"),
        datetime(2026, 3, 3, 2, 0, tzinfo=timezone.utc),
    )


def test_reschedule_job_of_an_unknown_trigger_returns_false(
    quartz: Quartz, store: MemoryStore
) -> None:
    before = store.count_rows()
    assert quartz.reschedule_job(TriggerKey("nothing"), every_minute()) is False
    assert store.count_rows() == before


def test_delete_job_removes_the_job_and_all_its_triggers(
    quartz: Quartz, store: MemoryStore
) -> None:
    quartz.schedule_jobs([(report_job(durable=True), [every_minute("one"), every_minute("two")])])
    assert quartz.delete_job(JobKey("report")) is True
    assert store.count_rows()["jobs"] == 0 and store.count_rows()["triggers"] == 0
    assert quartz.delete_job(JobKey("report")) is False


def test_add_job_stores_a_durable_job_without_triggers(quartz: Quartz) -> None:
    quartz.add_job(report_job(durable=True))
    assert quartz.get_job_keys() == [JobKey("report")]
    assert quartz.get_triggers_of_job(JobKey("report")) == []


def test_add_job_refuses_a_job_that_is_not_durable(quartz: Quartz, store: MemoryStore) -> None:
    refused(
        store,
        ValidationError,
        "job DEFAULT.report: a job stored without a trigger must be durable",
        lambda: quartz.add_job(report_job()),
    )


# -- firing by hand ----------------------------------------------------------------------------


def test_trigger_job_fires_the_job_once_now(
    quartz: Quartz, store: MemoryStore, clock: FakeClock
) -> None:
    quartz.add_job(report_job(durable=True))
    clock.set(at(5))
    trigger = quartz.trigger_job(JobKey("report"), data={"reason": "by hand"})
    stored = quartz.get_trigger(trigger.key)
    assert stored is not None
    assert (stored.key.group, stored.job_key, stored.next_fire_time, stored.data) == (
        "MANUAL_TRIGGER",
        JobKey("report"),
        at(5),
        {"reason": "by hand"},
    )
    [claimed] = store.acquire_next_triggers(
        "sched-a", no_later_than=at(5), max_count=10, time_window=0
    )
    [firing] = store.fire("sched-a", [claimed])
    assert (firing.task, firing.trigger_data, firing.scheduled_millis) == (
        "tasks.report",
        {"reason": "by hand"},
        claimed.scheduled_millis,
    )
    assert quartz.get_trigger_state(trigger.key) == TriggerState.COMPLETE


def test_trigger_job_with_arguments_runs_the_task_with_them_once_and_leaves_the_job(
    quartz: Quartz, store: MemoryStore, clock: FakeClock
) -> None:
    quartz.add_job(report_job(durable=True, args=(1,), kwargs={"period": "day"}))
    clock.set(at(5))
    quartz.trigger_job(
        JobKey("report"), data={"reason": "again"}, args=[7, 8], kwargs={"period": "week"}
    )
    [claimed] = store.acquire_next_triggers(
        "sched-a", no_later_than=at(5), max_count=10, time_window=0
    )
    [firing] = store.fire("sched-a", [claimed])
    # The run's arguments are the ones given; the task sees the trigger's data without them.
    assert (firing.args, firing.kwargs, firing.trigger_data) == (
        [7, 8],
        {"period": "week"},
        {"reason": "again"},
    )
    job = quartz.get_job(JobKey("report"))
    assert job is not None and (list(job.args), dict(job.kwargs)) == ([1], {"period": "day"})


def test_trigger_job_with_only_kwargs_keeps_the_jobs_args(
    quartz: Quartz, store: MemoryStore, clock: FakeClock
) -> None:
    quartz.add_job(report_job(durable=True, args=(1,), kwargs={"period": "day"}))
    clock.set(at(5))
    quartz.trigger_job(JobKey("report"), kwargs={})
    [claimed] = store.acquire_next_triggers(
        "sched-a", no_later_than=at(5), max_count=10, time_window=0
    )
    [firing] = store.fire("sched-a", [claimed])
    assert (firing.args, firing.kwargs) == ([1], {})


def test_trigger_job_with_arguments_that_are_not_json_is_refused(
    quartz: Quartz, store: MemoryStore
) -> None:
    quartz.add_job(report_job(durable=True))
    with pytest.raises(ValidationError):
        quartz.trigger_job(JobKey("report"), args=[object()])
    with pytest.raises(ValidationError, match="args must be a list"):
        quartz.trigger_job(JobKey("report"), args="abc")  # type: ignore[arg-type]
    assert quartz.get_triggers_of_job(JobKey("report")) == []


def test_trigger_job_of_an_unknown_job_is_refused(quartz: Quartz, store: MemoryStore) -> None:
    refused(
        store,
        JobNotFoundError,
        "job DEFAULT.ghost is not stored",
        lambda: quartz.trigger_job(JobKey("ghost")),
    )


# -- pausing -----------------------------------------------------------------------------------


def test_pause_and_resume_through_the_client(quartz: Quartz) -> None:
    quartz.schedule_job(report_job(), every_minute())
    quartz.pause_job(JobKey("report"))
    assert quartz.get_trigger_state(TriggerKey("every-minute")) == TriggerState.PAUSED
    quartz.resume_trigger(TriggerKey("every-minute"))
    assert quartz.get_trigger_state(TriggerKey("every-minute")) == TriggerState.WAITING


def test_pausing_what_is_not_stored_is_refused(quartz: Quartz) -> None:
    with pytest.raises(TriggerNotFoundError, match=re.escape("trigger DEFAULT.nothing")):
        quartz.pause_trigger(TriggerKey("nothing"))
    with pytest.raises(JobNotFoundError, match=re.escape("job DEFAULT.nothing")):
        quartz.pause_job(JobKey("nothing"))


# -- bad input ---------------------------------------------------------------------------------


def test_an_unknown_task_is_refused_naming_the_task(quartz: Quartz, store: MemoryStore) -> None:
    refused(
        store,
        UnknownTaskError,
        "job DEFAULT.report: task 'tasks.nope' is not registered with Celery app 't'",
        lambda: quartz.schedule_job(Job(key=JobKey("report"), task="tasks.nope"), every_minute()),
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"tags": {"a", "b"}}, "job DEFAULT.report: data is not JSON"),
        ({"when": datetime(2026, 1, 1)}, "job DEFAULT.report: data is not JSON"),
        ({"ratio": math.nan}, "job DEFAULT.report: data is not JSON"),
        ({"ratio": [math.inf]}, "job DEFAULT.report: data is not JSON"),
        ({"pair": [1, (2, 3)]}, "job DEFAULT.report: data has a tuple value (2, 3)"),
        ({1: "one"}, "job DEFAULT.report: data key 1 is not a string"),
        ({"nested": {2: "two"}}, "job DEFAULT.report: data has a non-string key 2"),
        (["not", "a", "mapping"], "job DEFAULT.report: data must be a mapping"),
    ],
    ids=["set", "datetime", "nan", "inf", "tuple-inside", "int-key", "nested-int-key", "list"],
)
def test_job_data_that_is_not_a_json_object_is_refused_naming_the_field(
    quartz: Quartz, store: MemoryStore, data: object, message: str
) -> None:
    refused(
        store,
        JobDataError,
        message,
        lambda: quartz.schedule_job(report_job(data=data), every_minute()),
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"args": ({1, 2},)}, "job DEFAULT.report: args is not JSON"),
        ({"args": "abc"}, "job DEFAULT.report: args must be a list, got str"),
        ({"kwargs": {"k": b"bytes"}}, "job DEFAULT.report: kwargs is not JSON"),
        ({"options": {"expires": timedelta(1)}}, "job DEFAULT.report: options is not JSON"),
    ],
    ids=["args-set", "args-str", "kwargs-bytes", "options-timedelta"],
)
def test_args_kwargs_and_options_must_be_json_too(
    quartz: Quartz, store: MemoryStore, fields: dict, message: str
) -> None:
    refused(
        store,
        JobDataError,
        message,
        lambda: quartz.schedule_job(report_job(**fields), every_minute()),
    )


def test_trigger_data_that_is_not_json_is_refused_naming_the_trigger(
    quartz: Quartz, store: MemoryStore
) -> None:
    refused(
        store,
        JobDataError,
        "trigger DEFAULT.every-minute: data has a tuple value",
        lambda: quartz.schedule_job(report_job(), every_minute(data={"pair": (1, 2)})),
    )


@pytest.fixture
def bounded(app: Celery, store: MemoryStore, clock: FakeClock) -> Quartz:
    """A client of an app that bounds job data to 100 bytes."""
    app.conf.quartz_max_job_data_bytes = 100
    return Quartz(app, store=store, clock=clock)


def test_job_data_over_the_configured_bound_is_refused(bounded: Quartz, store: MemoryStore) -> None:
    refused(
        store,
        JobDataError,
        "job DEFAULT.report: data is 101 bytes encoded; the bound is 100 "
        "(quartz_max_job_data_bytes)",
        lambda: bounded.schedule_job(report_job(data={"blob": "x" * 90}), every_minute()),
    )


def test_job_data_of_exactly_the_configured_bound_is_accepted(bounded: Quartz) -> None:
    bounded.schedule_job(report_job(data={"blob": "x" * 89}), every_minute())
    job = bounded.get_job(JobKey("report"))
    assert job is not None and job.data == {"blob": "x" * 89}


def test_a_trigger_for_a_job_that_is_not_stored_is_refused(
    quartz: Quartz, store: MemoryStore
) -> None:
    refused(
        store,
        JobNotFoundError,
        "trigger DEFAULT.every-minute: job DEFAULT.ghost is not stored",
        lambda: quartz.schedule_trigger(every_minute(job_key=JobKey("ghost"))),
    )


def test_a_trigger_naming_no_job_is_refused(quartz: Quartz, store: MemoryStore) -> None:
    refused(
        store,
        InvalidTriggerError,
        "trigger DEFAULT.every-minute names no job",
        lambda: quartz.schedule_trigger(every_minute()),
    )


def test_a_trigger_naming_another_job_than_its_own_is_refused(
    quartz: Quartz, store: MemoryStore
) -> None:
    refused(
        store,
        InvalidTriggerError,
        "trigger DEFAULT.every-minute names job DEFAULT.other, but is scheduled with job "
        "DEFAULT.report",
        lambda: quartz.schedule_job(report_job(), every_minute(job_key=JobKey("other"))),
    )


def test_a_duplicate_job_key_is_refused(quartz: Quartz, store: MemoryStore) -> None:
    quartz.schedule_job(report_job(), every_minute("one"))
    refused(
        store,
        ObjectAlreadyExistsError,
        "job DEFAULT.report already exists",
        lambda: quartz.schedule_job(report_job(), every_minute("two")),
    )


def test_a_duplicate_trigger_key_is_refused(quartz: Quartz, store: MemoryStore) -> None:
    quartz.schedule_job(report_job(), every_minute())
    refused(
        store,
        ObjectAlreadyExistsError,
        "trigger DEFAULT.every-minute already exists",
        lambda: quartz.schedule_job(report_job("other"), every_minute()),
    )


def test_a_trigger_ending_before_it_starts_is_refused(quartz: Quartz, store: MemoryStore) -> None:
    refused(
        store,
        InvalidTriggerError,
        "trigger DEFAULT.every-minute: end_at 2026-03-02 09:00:30+00:00 is before start_at",
        lambda: quartz.schedule_job(report_job(), every_minute(end_at=at(30))),
    )


def test_a_trigger_that_will_never_fire_is_refused(quartz: Quartz, store: MemoryStore) -> None:
    past = CronTrigger(key=TriggerKey("in-2020"), expression="0 0 0 1 1 ? 2020", start_at=T0)
    refused(
        store,
        InvalidTriggerError,
        "trigger DEFAULT.in-2020: based on its schedule it will never fire",
        lambda: quartz.schedule_job(report_job(), past),
    )


def test_a_misfire_instruction_of_another_kind_is_refused(
    quartz: Quartz, store: MemoryStore
) -> None:
    refused(
        store,
        InvalidTriggerError,
        "trigger DEFAULT.every-minute: misfire instruction 7 is not one of a SIMPLE trigger's",
        lambda: quartz.schedule_job(report_job(), every_minute(misfire_instruction=7)),
    )


def test_a_simple_misfire_instruction_is_accepted(quartz: Quartz) -> None:
    instruction = SimpleMisfireInstruction.RESCHEDULE_NEXT_WITH_REMAINING_COUNT
    quartz.schedule_job(report_job(), every_minute(misfire_instruction=instruction))
    trigger = quartz.get_trigger(TriggerKey("every-minute"))
    assert trigger is not None and trigger.misfire_instruction == instruction


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: JobKey(""), "job key name must be a non-empty string, got ''"),
        (lambda: JobKey("report", "  "), "job key group must be a non-empty string, got '  '"),
        (lambda: TriggerKey(""), "trigger key name must be a non-empty string, got ''"),
        (lambda: TriggerKey("t", ""), "trigger key group must be a non-empty string, got ''"),
        (lambda: JobKey("x" * 201), "job key name 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'..."),
    ],
    ids=["job-name", "job-group", "trigger-name", "trigger-group", "too-long"],
)
def test_empty_or_overlong_key_parts_are_refused(make: Callable[[], object], message: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        make()


def test_something_that_is_not_a_job_is_refused(quartz: Quartz, store: MemoryStore) -> None:
    refused(
        store,
        ValidationError,
        "expected a Job, got dict",
        lambda: quartz.schedule_job({"task": "tasks.report"}, every_minute()),  # type: ignore[arg-type]
    )


# -- settings the client applies ---------------------------------------------------------------


def test_resume_applies_the_configured_misfire_threshold(
    app: Celery, clock: FakeClock, tmp_path: Path
) -> None:
    # The client builds its own store from quartz_store_url, as in an application.
    app.conf.quartz_store_url = f"sqlite:///{tmp_path}/quartz.db"
    app.conf.quartz_misfire_threshold = 5.0
    quartz = Quartz(app, clock=clock)
    try:
        quartz.schedule_job(report_job(), every_minute(start_at=at(10)))
        quartz.pause_trigger(TriggerKey("every-minute"))
        clock.set(at(20))  # 10 s late: beyond 5 s, well within the 60 s default
        quartz.resume_trigger(TriggerKey("every-minute"))
        trigger = quartz.get_trigger(TriggerKey("every-minute"))
        # A forever-repeating simple trigger's smart policy: the next fire time after now.
        assert trigger is not None and trigger.next_fire_time == at(70)
    finally:
        quartz.store.dispose()


def test_a_paused_trigger_group_pauses_its_triggers_and_later_ones_until_resumed(
    quartz: Quartz,
) -> None:
    quartz.schedule_job(
        Job(key=JobKey("grouped"), task="tasks.report"),
        SimpleTrigger(key=TriggerKey("a", "reports"), repeat_interval=60, repeat_count=-1),
    )
    quartz.pause_trigger_group("reports")
    quartz.schedule_trigger(
        SimpleTrigger(key=TriggerKey("b", "reports"), job_key=JobKey("grouped"), repeat_count=0)
    )
    assert quartz.get_paused_trigger_groups() == ["reports"]
    assert [quartz.get_trigger_state(TriggerKey(n, "reports")) for n in "ab"] == ["PAUSED"] * 2
    quartz.resume_trigger_group("reports")
    assert [quartz.get_trigger_state(TriggerKey(n, "reports")) for n in "ab"] == ["WAITING"] * 2
    assert quartz.get_paused_trigger_groups() == []


# -- calendars -----------------------------------------------------------------------------------


def test_a_calendar_is_stored_read_back_listed_and_deleted(quartz: Quartz) -> None:
    holidays = HolidayCalendar([date(2026, 12, 25)], time_zone="Europe/Helsinki")
    quartz.add_calendar("holidays", holidays)
    stored = quartz.get_calendar("holidays")
    assert stored is not None and stored.to_dict() == holidays.to_dict()
    assert quartz.get_calendar_names() == ["holidays"]
    assert quartz.delete_calendar("holidays")
    assert quartz.get_calendar("holidays") is None
    assert not quartz.delete_calendar("holidays")


def test_a_calendar_is_replaced_only_when_asked(quartz: Quartz, store: MemoryStore) -> None:
    quartz.add_calendar("days", WeeklyCalendar())
    refused(
        store,
        ObjectAlreadyExistsError,
        "calendar 'days' already exists",
        lambda: quartz.add_calendar("days", HolidayCalendar([date(2026, 1, 1)])),
    )
    quartz.add_calendar("days", HolidayCalendar([date(2026, 1, 1)]), replace=True)
    assert isinstance(quartz.get_calendar("days"), HolidayCalendar)


def test_a_calendar_a_trigger_uses_cannot_be_deleted(quartz: Quartz, store: MemoryStore) -> None:
    quartz.add_calendar("holidays", HolidayCalendar([date(2026, 12, 25)]))
    quartz.schedule_job(
        Job(key=JobKey("report"), task="tasks.report"),
        every_minute("t1", calendar_name="holidays"),
    )
    refused(
        store,
        CalendarInUseError,
        "calendar 'holidays' is used by trigger DEFAULT.t1",
        lambda: quartz.delete_calendar("holidays"),
    )


def test_something_that_is_not_a_calendar_is_refused(quartz: Quartz, store: MemoryStore) -> None:
    refused(
        store,
        ValidationError,
        "calendar 'x': expected a celery_quartz.calendars.Calendar, not dict",
        lambda: quartz.add_calendar("x", {"kind": "weekly"}),  # type: ignore[arg-type]
    )


def test_a_trigger_skips_the_days_its_calendar_excludes(quartz: Quartz) -> None:
    quartz.add_calendar("holidays", HolidayCalendar([T0.date()]))
    quartz.schedule_job(
        Job(key=JobKey("report"), task="tasks.report"),
        every_minute("t1", calendar_name="holidays", start_at=T0),
    )
    trigger = quartz.get_trigger(TriggerKey("t1"))
    assert trigger is not None and trigger.next_fire_time is not None
    assert trigger.next_fire_time.date() > T0.date()
