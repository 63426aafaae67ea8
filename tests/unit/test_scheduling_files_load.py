"""Loading scheduling files into the store: one transaction, idempotent, Quartz's pre-processing
commands and processing directives, seed 002's pin rules, dry runs, and export round trips."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from celery_quartz import JobKey, PreferredNode, Quartz, TriggerKey
from celery_quartz.calendars import HolidayCalendar
from celery_quartz.clock import FakeClock
from celery_quartz.errors import SchedulingFileError, UnknownTaskError
from celery_quartz.job import Job
from celery_quartz.keys import BEAT_SCHEDULE_GROUP
from celery_quartz.scheduling_files import (
    SchedulingFilesWatcher,
    export_scheduling_data,
    load_scheduling_files,
)
from celery_quartz.store import MemoryStore, SqlStore
from celery_quartz.triggers import (
    CalendarIntervalTrigger,
    CronTrigger,
    DailyTimeIntervalTrigger,
    IntervalUnit,
    SimpleTrigger,
)
from celery_quartz.triggers.base import TriggerDetailsUpdate
from tests.unit.builders import fire_one
from tests.unit.conftest import T0
from tests.unit.quartznet_schema import assert_valid_for_quartznet
from tests.unit.scheduling_file_samples import FULL, QUARTZNET_XML


@pytest.fixture
def app() -> Iterator[Celery]:
    app = Celery("t", set_as_current=False)
    for name in ("tasks.report", "tasks.ping", "tasks.other"):

        def task() -> None: ...

        app.task(name=name, shared=False)(task)
    yield app
    app.close()


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def rows(store: SqlStore) -> dict[str, Any]:
    """Everything stored, as comparable values (fire times and states included)."""
    t, j = store.tables.triggers, store.tables.jobs
    with store.transaction() as conn:
        triggers = sorted(tuple(r) for r in conn.execute(t.select()))
        jobs = sorted(tuple(r) for r in conn.execute(j.select()))
    return {"jobs": jobs, "triggers": triggers}


CRON = """\
<job-scheduling-data>
  <schedule>
    <job><name>report</name><job-type>tasks.report</job-type></job>
    <trigger>
      <cron>
        <name>nightly</name>
        <job-name>report</job-name>
        {extra}
        <cron-expression>{expression}</cron-expression>
      </cron>
    </trigger>
  </schedule>
</job-scheduling-data>
"""


def cron_file(tmp_path: Path, expression: str = "0 0 2 * * ?", extra: str = "") -> Path:
    return write(tmp_path, "quartz_jobs.xml", CRON.format(expression=expression, extra=extra))


# -- loading -------------------------------------------------------------------------------------


def test_a_load_stores_jobs_and_triggers(app: Celery, db: SqlStore, tmp_path: Path) -> None:
    plan = load_scheduling_files(app, db, [write(tmp_path, "q.xml", FULL["xml"])])
    assert sorted(map(str, plan.jobs_added)) == ["DEFAULT.ping", "nightly.report"]
    assert len(plan.triggers_added) == 4
    trigger = db.retrieve_trigger(TriggerKey("nightly"))
    assert isinstance(trigger, CronTrigger)
    assert trigger.start_at == T0 + timedelta(seconds=60)
    assert trigger.preferred_node == PreferredNode.for_node("celery@reports-1")
    assert db.retrieve_job(JobKey("report", "nightly")).kwargs == {"full": True}  # type: ignore[union-attr]


def test_the_same_load_twice_changes_nothing_the_second_time(
    app: Celery, db: SqlStore, clock: FakeClock, tmp_path: Path
) -> None:
    path = write(tmp_path, "q.xml", FULL["xml"])
    load_scheduling_files(app, db, [path])
    before = rows(db)
    clock.advance(3600)  # start times relative to the load do not count as changes
    plan = load_scheduling_files(app, db, [path])
    assert not plan.changed
    assert len(plan.jobs_unchanged) == 2 and len(plan.triggers_unchanged) == 4
    assert rows(db) == before


@pytest.mark.parametrize("fmt", ["xml", "json", "yaml"])
def test_the_same_schedule_in_another_format_is_unchanged(
    app: Celery, store: MemoryStore, tmp_path: Path, fmt: str
) -> None:
    load_scheduling_files(app, store, [write(tmp_path, "q.xml", FULL["xml"])])
    plan = load_scheduling_files(app, store, [write(tmp_path, f"q.{fmt}", FULL[fmt])])
    assert not plan.changed


def test_a_changed_trigger_is_replaced_and_the_others_keep_their_fire_times(
    app: Celery, store: MemoryStore, clock: FakeClock, tmp_path: Path
) -> None:
    path = write(tmp_path, "q.xml", FULL["xml"])
    load_scheduling_files(app, store, [path])
    kept = store.retrieve_trigger(TriggerKey("hourly"))
    clock.advance(10)
    path.write_text(FULL["xml"].replace("0 0 2 * * ?", "0 30 2 * * ?"))
    plan = load_scheduling_files(app, store, [path])
    assert plan.triggers_replaced == [TriggerKey("nightly")]
    assert plan.jobs_replaced == [] and plan.jobs_added == []
    assert store.retrieve_trigger(TriggerKey("nightly")).expression == "0 30 2 * * ?"  # type: ignore[union-attr]
    assert store.retrieve_trigger(TriggerKey("hourly")).next_fire_time == kept.next_fire_time  # type: ignore[union-attr]


def test_a_changed_job_is_replaced_and_its_triggers_stay(
    app: Celery, store: MemoryStore, tmp_path: Path
) -> None:
    path = write(tmp_path, "q.xml", FULL["xml"])
    load_scheduling_files(app, store, [path])
    path.write_text(FULL["xml"].replace("The nightly report", "The report"))
    plan = load_scheduling_files(app, store, [path])
    assert plan.jobs_replaced == [JobKey("report", "nightly")]
    assert plan.triggers_replaced == []
    assert len(store.get_triggers_of_job(JobKey("report", "nightly"))) == 2


def test_several_files_load_in_one_transaction(
    app: Celery, store: MemoryStore, tmp_path: Path
) -> None:
    first = cron_file(tmp_path)
    second = write(
        tmp_path,
        "more.json",
        '{"Triggers": [{"Name": "again", "JobName": "report",'
        ' "Cron": {"Expression": "0 0 3 * * ?"}}]}',
    )
    plan = load_scheduling_files(app, store, [first, second])
    assert plan.triggers_added == [TriggerKey("again"), TriggerKey("nightly")]


def test_an_error_in_a_later_file_writes_nothing_of_the_earlier_ones(
    app: Celery, store: MemoryStore, tmp_path: Path
) -> None:
    first = cron_file(tmp_path)
    bad = write(
        tmp_path,
        "bad.json",
        '{"Triggers": [{"Name": "x", "JobName": "nobody", "Cron": {"Expression": "0 0 3 * * ?"}}]}',
    )
    with pytest.raises(SchedulingFileError) as caught:
        load_scheduling_files(app, store, [first, bad])
    assert str(caught.value).startswith(f"{bad} at $.Triggers[0]: trigger DEFAULT.x: job")
    assert store.count_rows()["jobs"] == 0 and store.count_rows()["triggers"] == 0


def test_only_registered_tasks_are_accepted(
    app: Celery, store: MemoryStore, tmp_path: Path
) -> None:
    path = write(tmp_path, "q.xml", FULL["xml"].replace("tasks.ping", "tasks.missing"))
    with pytest.raises(UnknownTaskError) as caught:
        load_scheduling_files(app, store, [path])
    message = str(caught.value)
    assert f"{path}:36: job DEFAULT.ping: task 'tasks.missing' is not registered" in message
    assert store.count_rows()["jobs"] == 0


@pytest.mark.parametrize(
    ("extra", "fragment", "line"),
    [
        (
            "<start-time>2026-03-02T03:00:00Z</start-time><end-time>2026-03-02T04:00:00Z"
            "</end-time>",
            "will never fire",
            5,
        ),
        ("<end-time>2020-01-01T00:00:00Z</end-time>", "is before start_at", 5),
        ("<calendar-name>holidays</calendar-name>", "calendar 'holidays' is not stored", 5),
    ],
)
def test_a_trigger_refused_by_the_store_names_file_line_and_trigger(
    app: Celery, store: MemoryStore, tmp_path: Path, extra: str, fragment: str, line: int
) -> None:
    path = cron_file(tmp_path, extra=extra)
    with pytest.raises(SchedulingFileError) as caught:
        load_scheduling_files(app, store, [path])
    message = str(caught.value)
    assert message.startswith(f"{path}:{line}: trigger DEFAULT.nightly"), message
    assert fragment in message
    assert store.count_rows()["jobs"] == 0


def test_a_stored_calendar_is_used(app: Celery, store: MemoryStore, tmp_path: Path) -> None:
    store.store_calendar("holidays", HolidayCalendar([T0.date() + timedelta(days=1)]))
    path = cron_file(tmp_path, extra="<calendar-name>holidays</calendar-name>")
    load_scheduling_files(app, store, [path])
    assert store.retrieve_trigger(TriggerKey("nightly")).calendar_name == "holidays"  # type: ignore[union-attr]


def test_a_new_job_without_triggers_must_be_durable(
    app: Celery, store: MemoryStore, tmp_path: Path
) -> None:
    path = write(tmp_path, "q.yaml", "Jobs:\n- Name: lonely\n  JobType: tasks.ping\n")
    with pytest.raises(SchedulingFileError, match=r"q\.yaml:2: job DEFAULT\.lonely has no trig"):
        load_scheduling_files(app, store, [path])
    write(tmp_path, "q.yaml", "Jobs:\n- {Name: lonely, JobType: tasks.ping, Durable: true}\n")
    assert load_scheduling_files(app, store, [path]).jobs_added == [JobKey("lonely")]


def test_a_dry_run_reports_and_writes_nothing(
    app: Celery, store: MemoryStore, tmp_path: Path
) -> None:
    plan = load_scheduling_files(app, store, [cron_file(tmp_path)], dry_run=True)
    assert plan.jobs_added == [JobKey("report")] and plan.triggers_added == [TriggerKey("nightly")]
    assert plan.lines() == ["+ job DEFAULT.report", "+ trigger DEFAULT.nightly"]
    assert store.count_rows()["jobs"] == 0


def test_a_dry_run_of_a_changed_file_shows_replaced_deleted_unchanged(
    app: Celery, store: MemoryStore, tmp_path: Path
) -> None:
    load_scheduling_files(app, store, [write(tmp_path, "q.xml", FULL["xml"])])
    text = (
        FULL["xml"]
        .replace("0 0 2 * * ?", "0 0 4 * * ?")
        .replace(
            "<delete-job>",
            "<delete-triggers-in-group>reports</delete-triggers-in-group><delete-job>",
        )
    )
    before = rows(store)
    plan = load_scheduling_files(app, store, [write(tmp_path, "q2.xml", text)], dry_run=True)
    # The file defines reports.monthly again, so deleting its group then re-adding it is no change.
    assert plan.triggers_replaced == [TriggerKey("nightly")]
    assert TriggerKey("monthly", "reports") in plan.triggers_unchanged
    assert json.loads(json.dumps(plan.as_dict()))["triggers"]["replaced"] == ["DEFAULT.nightly"]
    assert rows(store) == before


# -- pre-processing commands and processing directives -------------------------------------------


def quartz(app: Celery, store: SqlStore) -> Quartz:
    return Quartz(app, store=store, clock=store.clock)


def schedule(app: Celery, store: SqlStore, job: str, group: str, *, durable: bool = False) -> None:
    quartz(app, store).schedule_job(
        Job(key=JobKey(job, group), task="tasks.other", durable=durable),
        SimpleTrigger(key=TriggerKey(job, group), repeat_count=-1, repeat_interval=60),
    )


def test_delete_jobs_in_every_group_keeps_only_the_file_and_changes_nothing_on_reload(
    app: Celery, store: MemoryStore, tmp_path: Path
) -> None:
    schedule(app, store, "stale", "elsewhere")
    schedule(app, store, "from-beat", BEAT_SCHEDULE_GROUP)
    text = FULL["xml"].replace(
        "<delete-jobs-in-group>old-jobs</delete-jobs-in-group>",
        "<delete-jobs-in-group>*</delete-jobs-in-group>",
    )
    path = write(tmp_path, "q.xml", text)
    plan = load_scheduling_files(app, store, [path])
    assert plan.jobs_deleted == [JobKey("stale", "elsewhere")]
    assert store.retrieve_job(JobKey("from-beat", BEAT_SCHEDULE_GROUP)) is not None
    before = rows(store)
    again = load_scheduling_files(app, store, [path])
    assert not again.changed and rows(store) == before


def test_delete_triggers_in_group_takes_a_non_durable_job_with_its_last_trigger(
    app: Celery, store: MemoryStore, tmp_path: Path
) -> None:
    schedule(app, store, "a", "old-triggers")
    schedule(app, store, "b", "old-triggers", durable=True)
    path = write(
        tmp_path, "q.json", '{"PreProcessingCommands": {"DeleteTriggersInGroup": ["old-triggers"]}}'
    )
    plan = load_scheduling_files(app, store, [path])
    assert plan.triggers_deleted == [
        TriggerKey("a", "old-triggers"),
        TriggerKey("b", "old-triggers"),
    ]
    assert plan.jobs_deleted == [JobKey("a", "old-triggers")]
    assert store.retrieve_job(JobKey("b", "old-triggers")) is not None


def test_every_pre_processing_commands_element_is_applied(
    app: Celery, store: MemoryStore, tmp_path: Path
) -> None:
    schedule(app, store, "a", "first")
    schedule(app, store, "b", "second")
    schedule(app, store, "c", "kept")
    text = (
        "<job-scheduling-data>"
        "<pre-processing-commands><delete-jobs-in-group>first</delete-jobs-in-group>"
        "</pre-processing-commands>"
        "<pre-processing-commands><delete-trigger><name>b</name><group>second</group>"
        "</delete-trigger></pre-processing-commands>"
        "</job-scheduling-data>"
    )
    plan = load_scheduling_files(app, store, [write(tmp_path, "q.xml", text)])
    assert plan.jobs_deleted == [JobKey("a", "first"), JobKey("b", "second")]
    assert store.job_keys() == [JobKey("c", "kept")]


def test_an_empty_job_data_value_is_stored_as_null(
    app: Celery, store: MemoryStore, tmp_path: Path
) -> None:
    load_scheduling_files(app, store, [write(tmp_path, "q.xml", QUARTZNET_XML)])
    job = store.retrieve_job(JobKey("report", "nightly"))
    assert job is not None and job.data == {"recipients": "ops@example.com", "cc": None}


def test_delete_job_and_delete_trigger(app: Celery, store: MemoryStore, tmp_path: Path) -> None:
    schedule(app, store, "gone", "legacy")
    schedule(app, store, "gone-trigger", "DEFAULT")
    plan = load_scheduling_files(app, store, [write(tmp_path, "q.xml", FULL["xml"])])
    assert JobKey("gone", "legacy") in plan.jobs_deleted
    assert JobKey("gone-trigger") in plan.jobs_deleted
    assert TriggerKey("gone-trigger") in plan.triggers_deleted
    assert store.retrieve_job(JobKey("gone", "legacy")) is None


def test_delete_commands_never_touch_the_recovery_retry_and_beat_groups(
    app: Celery, store: MemoryStore, tmp_path: Path
) -> None:
    schedule(app, store, "entry", BEAT_SCHEDULE_GROUP)
    text = (
        "PreProcessingCommands:\n"
        f"  DeleteJobsInGroup: ['{BEAT_SCHEDULE_GROUP}', '*']\n"
        f"  DeleteJob: [{{Name: entry, Group: {BEAT_SCHEDULE_GROUP}}}]\n"
        "  DeleteTriggersInGroup: ['*']\n"
    )
    plan = load_scheduling_files(app, store, [write(tmp_path, "q.yaml", text)])
    assert not plan.changed


def test_without_overwrite_a_different_stored_trigger_is_an_error(
    app: Celery, store: MemoryStore, tmp_path: Path
) -> None:
    load_scheduling_files(app, store, [cron_file(tmp_path)])
    before = rows(store)
    text = CRON.format(expression="0 0 5 * * ?", extra="").replace(
        "<schedule>",
        "<processing-directives><overwrite-existing-data>false</overwrite-existing-data>"
        "</processing-directives><schedule>",
    )
    path = write(tmp_path, "again.xml", text)
    with pytest.raises(SchedulingFileError, match=r"trigger DEFAULT\.nightly is already stored"):
        load_scheduling_files(app, store, [path])
    assert rows(store) == before


def test_without_overwrite_the_same_file_again_is_no_error(
    app: Celery, store: MemoryStore, tmp_path: Path
) -> None:
    text = CRON.format(expression="0 0 2 * * ?", extra="").replace(
        "<schedule>",
        "<processing-directives><overwrite-existing-data>false</overwrite-existing-data>"
        "</processing-directives><schedule>",
    )
    path = write(tmp_path, "q.xml", text)
    load_scheduling_files(app, store, [path])
    assert not load_scheduling_files(app, store, [path]).changed


def test_ignore_duplicates_leaves_stored_ones_and_adds_the_rest(
    app: Celery, store: MemoryStore, tmp_path: Path
) -> None:
    load_scheduling_files(app, store, [cron_file(tmp_path)])
    text = (
        '{"ProcessingDirectives": {"OverwriteExistingData": false, "IgnoreDuplicates": true},'
        ' "Triggers": ['
        '{"Name": "nightly", "JobName": "report", "Cron": {"Expression": "0 0 5 * * ?"}},'
        '{"Name": "extra", "JobName": "report", "Cron": {"Expression": "0 0 6 * * ?"}}]}'
    )
    plan = load_scheduling_files(app, store, [write(tmp_path, "q.json", text)])
    assert plan.triggers_added == [TriggerKey("extra")]
    assert plan.triggers_unchanged == [TriggerKey("nightly")]
    assert store.retrieve_trigger(TriggerKey("nightly")).expression == "0 0 2 * * ?"  # type: ignore[union-attr]


# -- seed 002: pins and execution groups ---------------------------------------------------------


def test_star_is_an_automatic_pin_and_a_claimed_one_is_unchanged_on_reload(
    app: Celery, store: MemoryStore, tmp_path: Path
) -> None:
    path = cron_file(tmp_path, extra="<preferred-node>*</preferred-node>")
    load_scheduling_files(app, store, [path])
    assert store.retrieve_trigger(TriggerKey("nightly")).preferred_node is PreferredNode.AUTO  # type: ignore[union-attr]
    claimed = PreferredNode.AUTO.claimed_by("celery@w1")
    store.update_trigger_details(
        TriggerKey("nightly"), TriggerDetailsUpdate(preferred_node=claimed)
    )
    assert not load_scheduling_files(app, store, [path]).changed
    assert store.retrieve_trigger(TriggerKey("nightly")).preferred_node == claimed  # type: ignore[union-attr]


def test_an_absent_pin_clears_one_set_some_other_way(
    app: Celery, store: MemoryStore, tmp_path: Path
) -> None:
    path = cron_file(tmp_path)
    load_scheduling_files(app, store, [path])
    pin = TriggerDetailsUpdate(preferred_node=PreferredNode.for_node("celery@w2"))
    store.update_trigger_details(TriggerKey("nightly"), pin)
    plan = load_scheduling_files(app, store, [path])
    assert plan.triggers_replaced == [TriggerKey("nightly")]
    assert store.retrieve_trigger(TriggerKey("nightly")).preferred_node is PreferredNode.NONE  # type: ignore[union-attr]


def test_an_absent_execution_group_clears_one_set_some_other_way(
    app: Celery, store: MemoryStore, tmp_path: Path
) -> None:
    path = cron_file(tmp_path)
    load_scheduling_files(app, store, [path])
    grouped = store.retrieve_trigger(TriggerKey("nightly"))
    assert grouped is not None
    grouped.execution_group = "reindex"
    quartz(app, store).reschedule_job(TriggerKey("nightly"), grouped)
    assert load_scheduling_files(app, store, [path]).triggers_replaced == [TriggerKey("nightly")]
    assert store.retrieve_trigger(TriggerKey("nightly")).execution_group is None  # type: ignore[union-attr]


# -- schedule-trigger-relative-to-replaced-trigger ----------------------------------------------

RELATIVE = """\
<job-scheduling-data>
  <processing-directives>
    <schedule-trigger-relative-to-replaced-trigger>{relative}</schedule-trigger-relative-to-replaced-trigger>
  </processing-directives>
  <schedule>
    <job><name>report</name><job-type>tasks.report</job-type></job>
    <trigger><cron><name>nightly</name><job-name>report</job-name>{start}
      <cron-expression>{expression}</cron-expression></cron></trigger>
  </schedule>
</job-scheduling-data>
"""


def relative_file(
    tmp_path: Path, expression: str, *, relative: bool = True, start: str = ""
) -> Path:
    text = RELATIVE.format(
        relative="true" if relative else "false", expression=expression, start=start
    )
    return write(tmp_path, "quartz_jobs.xml", text)


def test_a_replacing_trigger_is_scheduled_after_the_replaced_ones_last_fire_time(
    app: Celery, db: SqlStore, clock: FakeClock, tmp_path: Path
) -> None:
    load_scheduling_files(app, db, [relative_file(tmp_path, "0 30 9 * * ?")])  # at T0, 09:00
    clock.set(T0 + timedelta(minutes=30))
    fire_one(db, "nightly")
    clock.set(T0 + timedelta(hours=4))
    plan = load_scheduling_files(app, db, [relative_file(tmp_path, "0 0 */6 * * ?")])
    assert plan.triggers_replaced == [TriggerKey("nightly")]
    trigger = db.retrieve_trigger(TriggerKey("nightly"))
    assert isinstance(trigger, CronTrigger) and trigger.expression == "0 0 */6 * * ?"
    assert trigger.start_at == T0
    assert trigger.previous_fire_time == T0 + timedelta(minutes=30)
    # the new schedule's first time after the last firing (12:00): past, so its misfire
    # instruction decides it, as in Quartz.NET
    assert trigger.next_fire_time == T0 + timedelta(hours=3)


def test_a_replacing_trigger_never_fired_is_scheduled_after_the_replaced_ones_start(
    app: Celery, store: MemoryStore, clock: FakeClock, tmp_path: Path
) -> None:
    load_scheduling_files(app, store, [relative_file(tmp_path, "0 0 2 * * ?")])  # at T0, 09:00
    clock.advance(3600)
    load_scheduling_files(app, store, [relative_file(tmp_path, "0 30 * * * ?")])
    trigger = store.retrieve_trigger(TriggerKey("nightly"))
    assert trigger is not None and trigger.start_at == T0
    assert trigger.previous_fire_time is None
    assert trigger.next_fire_time == T0 + timedelta(minutes=30)


def test_without_the_directive_a_replacing_trigger_starts_at_the_load(
    app: Celery, store: MemoryStore, clock: FakeClock, tmp_path: Path
) -> None:
    load_scheduling_files(app, store, [relative_file(tmp_path, "0 0 2 * * ?", relative=False)])
    clock.advance(3600)
    load_scheduling_files(app, store, [relative_file(tmp_path, "0 30 * * * ?", relative=False)])
    trigger = store.retrieve_trigger(TriggerKey("nightly"))
    assert trigger is not None and trigger.start_at == T0 + timedelta(hours=1)
    assert trigger.next_fire_time == T0 + timedelta(hours=1, minutes=30)


def test_a_replacing_trigger_starting_later_than_the_load_keeps_its_own_start(
    app: Celery, store: MemoryStore, clock: FakeClock, tmp_path: Path
) -> None:
    load_scheduling_files(app, store, [relative_file(tmp_path, "0 0 2 * * ?")])
    clock.advance(3600)
    later = "<start-time-seconds-in-future>5</start-time-seconds-in-future>"
    load_scheduling_files(app, store, [relative_file(tmp_path, "0 30 * * * ?", start=later)])
    trigger = store.retrieve_trigger(TriggerKey("nightly"))
    assert trigger is not None and trigger.start_at == T0 + timedelta(hours=1, seconds=5)
    assert trigger.next_fire_time == T0 + timedelta(hours=1, minutes=30)


# -- export and the round trip -------------------------------------------------------------------


def export(store: SqlStore, fmt: str) -> str:
    """The export in ``fmt``; an XML export is checked against Quartz.NET's schema."""
    text = export_scheduling_data(store, fmt)
    if fmt == "xml":
        assert_valid_for_quartznet(text)
    return text


def fill(app: Celery, store: SqlStore, tmp_path: Path, fmt: str) -> None:
    # XML holds what Quartz.NET's schema holds: no celery-quartz field, job data strings only.
    sample = QUARTZNET_XML if fmt == "xml" else FULL[fmt]
    load_scheduling_files(app, store, [write(tmp_path, f"full.{fmt}", sample)])
    if fmt != "xml":
        quartz(app, store).schedule_job(
            Job(key=JobKey("typed"), task="tasks.other", data={"n": 3, "nested": {"a": [1]}}),
            SimpleTrigger(
                key=TriggerKey("typed"), repeat_count=-1, repeat_interval=0.5, data={"flag": True}
            ),
        )


@pytest.mark.parametrize("fmt", ["xml", "json", "yaml"])
def test_export_load_export_gives_the_same_file(
    app: Celery, db: SqlStore, clock: FakeClock, tmp_path: Path, fmt: str
) -> None:
    fill(app, db, tmp_path, fmt)
    first = export(db, fmt)
    empty = MemoryStore(scheduler_name="other", clock=clock)
    try:
        clock.advance(120)
        load_scheduling_files(app, empty, [write(tmp_path, f"export.{fmt}", first)])
        assert export(empty, fmt) == first
        # and a reload of the export into the store it came from changes nothing
        assert not load_scheduling_files(app, db, [tmp_path / f"export.{fmt}"]).changed
    finally:
        empty.dispose()


def test_export_leaves_out_the_groups_celery_quartz_keeps(app: Celery, store: MemoryStore) -> None:
    schedule(app, store, "entry", BEAT_SCHEDULE_GROUP)
    assert json.loads(export(store, "json")) == {"Jobs": [], "Triggers": []}
    assert "<schedule>" not in export(store, "xml")


def test_export_refuses_a_trigger_kind_no_file_holds(app: Celery, store: MemoryStore) -> None:
    quartz(app, store).schedule_job(
        Job(key=JobKey("daily"), task="tasks.other"),
        DailyTimeIntervalTrigger(key=TriggerKey("daily"), repeat_interval=1),
    )
    with pytest.raises(SchedulingFileError, match=r"trigger DEFAULT\.daily: a DAILY_I trigger"):
        export(store, "yaml")


def test_xml_export_refuses_job_data_that_is_not_a_string(app: Celery, store: MemoryStore) -> None:
    quartz(app, store).add_job(
        Job(key=JobKey("typed"), task="tasks.other", durable=True, data={"n": 3})
    )
    with pytest.raises(SchedulingFileError, match=r"job DEFAULT\.typed: job data 'n' is a int"):
        export(store, "xml")


def test_an_xml_export_of_a_calendar_interval_trigger_is_valid_for_quartznet(
    app: Celery, store: MemoryStore
) -> None:
    quartz(app, store).schedule_job(
        Job(key=JobKey("weekly"), task="tasks.other"),
        CalendarIntervalTrigger(
            key=TriggerKey("weekly"), repeat_interval=1, repeat_interval_unit=IntervalUnit.WEEK
        ),
    )
    text = export(store, "xml")  # checked against the schema
    assert "<time-zone>" not in text


@pytest.mark.parametrize(
    ("trigger", "element"),
    [
        (
            CalendarIntervalTrigger(
                key=TriggerKey("t"), repeat_interval=1, time_zone="Europe/Helsinki"
            ),
            "<time-zone> in <calendar-interval>",
        ),
        (
            CronTrigger(key=TriggerKey("t"), expression="0 0 2 * * ?", execution_group="reports"),
            "<execution-group> in <cron>",
        ),
        (
            SimpleTrigger(
                key=TriggerKey("t"),
                repeat_count=-1,
                repeat_interval=60,
                preferred_node=PreferredNode.AUTO,
            ),
            "<preferred-node> in <simple>",
        ),
    ],
)
def test_xml_export_refuses_what_quartznet_schema_has_no_element_for(
    app: Celery, store: MemoryStore, trigger: Any, element: str
) -> None:
    quartz(app, store).schedule_job(Job(key=JobKey("j"), task="tasks.other"), trigger)
    with pytest.raises(SchedulingFileError) as caught:
        export_scheduling_data(store, "xml")
    message = str(caught.value)
    assert message.startswith("trigger DEFAULT.t: ") and element in message, message
    assert "export as json or yaml" in message


def test_xml_export_refuses_a_job_field_quartznet_schema_has_no_element_for(
    app: Celery, store: MemoryStore
) -> None:
    quartz(app, store).add_job(
        Job(key=JobKey("j"), task="tasks.other", durable=True, kwargs={"full": True})
    )
    with pytest.raises(SchedulingFileError, match=r"^job DEFAULT\.j: .* no <kwargs> in <job>"):
        export_scheduling_data(store, "xml")


def test_xml_export_writes_null_job_data_as_an_empty_value(
    app: Celery, store: MemoryStore, tmp_path: Path
) -> None:
    quartz(app, store).add_job(
        Job(key=JobKey("j"), task="tasks.other", durable=True, data={"cc": None})
    )
    text = export(store, "xml")
    assert "<entry><key>cc</key><value></value></entry>" in text
    other = MemoryStore(scheduler_name="other", clock=store.clock)
    try:
        load_scheduling_files(app, other, [write(tmp_path, "export.xml", text)])
        assert other.retrieve_job(JobKey("j")).data == {"cc": None}  # type: ignore[union-attr]
    finally:
        other.dispose()


@pytest.mark.parametrize("value", ["", " padded "])
def test_xml_export_refuses_a_job_data_value_the_reader_would_change(
    app: Celery, store: MemoryStore, value: str
) -> None:
    quartz(app, store).add_job(
        Job(key=JobKey("j"), task="tasks.other", durable=True, data={"note": value})
    )
    with pytest.raises(SchedulingFileError, match=r"job DEFAULT\.j: job data 'note' is"):
        export_scheduling_data(store, "xml")


# -- loading when a scheduler starts ------------------------------------------------------------


def test_the_watcher_loads_at_start_and_again_when_a_file_changes(
    app: Celery, store: MemoryStore, clock: FakeClock, tmp_path: Path
) -> None:
    path = cron_file(tmp_path)
    watcher = SchedulingFilesWatcher(app, store, [str(path)], scan_interval=30, clock=clock)
    assert watcher.load_at_start().triggers_added == [TriggerKey("nightly")]  # type: ignore[union-attr]
    clock.advance(31)
    assert watcher.maybe_reload() is None  # unchanged file: not even read into the store
    path.write_text(CRON.format(expression="0 0 3 * * ?", extra=""))
    assert watcher.maybe_reload() is None  # not due yet
    clock.advance(31)
    assert watcher.maybe_reload().triggers_replaced == [TriggerKey("nightly")]  # type: ignore[union-attr]


def test_the_watcher_logs_a_bad_file_on_rescan_and_leaves_the_store(
    app: Celery,
    store: MemoryStore,
    clock: FakeClock,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    path = cron_file(tmp_path)
    watcher = SchedulingFilesWatcher(app, store, [str(path)], scan_interval=5, clock=clock)
    watcher.load_at_start()
    before = rows(store)
    path.write_text("<job-scheduling-data>")
    clock.advance(6)
    assert watcher.maybe_reload() is None
    assert rows(store) == before
    assert "not well-formed XML" in caplog.text


def test_a_bad_file_at_start_raises(app: Celery, store: MemoryStore, tmp_path: Path) -> None:
    path = write(tmp_path, "q.xml", "<nope/>")
    with pytest.raises(SchedulingFileError, match="expected <job-scheduling-data>"):
        SchedulingFilesWatcher(app, store, [str(path)]).load_at_start()


def test_a_missing_file_names_it(app: Celery, store: MemoryStore, tmp_path: Path) -> None:
    with pytest.raises(SchedulingFileError, match=r"missing\.xml: cannot be read"):
        load_scheduling_files(app, store, [tmp_path / "missing.xml"])


# -- several schedulers loading at once ----------------------------------------------------------


@pytest.mark.parametrize(
    "database", ["sqlite", pytest.param("pg_url", marks=pytest.mark.integration)]
)
def test_schedulers_starting_together_apply_the_files_once(
    app: Celery, clock: FakeClock, tmp_path: Path, request: pytest.FixtureRequest, database: str
) -> None:
    url = (
        f"sqlite:///{tmp_path / 'shared.db'}"
        if database == "sqlite"
        else request.getfixturevalue(database)
    )
    stores = [SqlStore(url, scheduler_name="unit", clock=clock) for _ in range(4)]
    stores[0].create_tables()
    path = write(tmp_path, "q.xml", FULL["xml"])
    barrier = threading.Barrier(len(stores))
    plans: list[Any] = []

    def start(store: SqlStore) -> None:
        barrier.wait()
        plans.append(load_scheduling_files(app, store, [path]))

    threads = [threading.Thread(target=start, args=(store,)) for store in stores]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert len(plans) == len(stores)
        assert sum(plan.changed for plan in plans) == 1
        assert stores[0].count_rows()["triggers"] == 4
    finally:
        for store in stores:
            store.dispose()


def test_the_watcher_tries_a_change_again_after_a_database_error(
    app: Celery,
    store: MemoryStore,
    clock: FakeClock,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sqlalchemy.exc import OperationalError

    path = cron_file(tmp_path)
    watcher = SchedulingFilesWatcher(app, store, [str(path)], scan_interval=5, clock=clock)
    watcher.load_at_start()
    path.write_text(CRON.format(expression="0 0 3 * * ?", extra=""))

    def down(*args: Any, **kwargs: Any) -> Any:
        raise OperationalError("select", {}, Exception("the database restarts"))

    monkeypatch.setattr(store, "apply_scheduling_data", down)
    clock.advance(6)
    with pytest.raises(OperationalError):
        watcher.maybe_reload()
    monkeypatch.undo()
    clock.advance(6)
    assert watcher.maybe_reload().triggers_replaced == [TriggerKey("nightly")]  # type: ignore[union-attr]
