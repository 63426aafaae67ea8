"""The plan of a load, decided without a database: what a file changes against a snapshot of the
stored jobs and triggers."""

from __future__ import annotations

from datetime import timedelta

import pytest

from celery_quartz import JobKey, PreferredNode, TriggerKey
from celery_quartz.definitions import SchedulingData, Snapshot, owned_group, plan
from celery_quartz.errors import SchedulingFileError
from celery_quartz.job import Job
from celery_quartz.keys import BEAT_SCHEDULE_GROUP
from celery_quartz.scheduling_files import parse_scheduling_data
from celery_quartz.triggers import CronTrigger
from tests.unit.conftest import T0

FILE = """\
PreProcessingCommands:
  DeleteJobsInGroup: ['*']
Jobs:
  - {Name: report, JobType: tasks.report}
Triggers:
  - {Name: nightly, JobName: report, PreferredNode: '*', Cron: {Expression: 0 0 2 * * ?}}
"""


def stored_as_loaded(**changes: object) -> Snapshot:
    job = Job(key=JobKey("report"), task="tasks.report")
    trigger = CronTrigger(
        key=TriggerKey("nightly"), job_key=job.key, expression="0 0 2 * * ?",
        start_at=T0 - timedelta(days=3), preferred_node=PreferredNode.AUTO.claimed_by("w1"),
    )  # fmt: skip
    for name, value in changes.items():
        setattr(trigger, name, value)
    return Snapshot(jobs={job.key: job}, triggers={trigger.key: trigger})


def test_deleting_everything_and_defining_it_again_identically_is_no_change() -> None:
    result = plan(stored_as_loaded(), [parse_scheduling_data(FILE, "q.yaml")], T0)
    assert not result.changed
    assert result.jobs_unchanged == [JobKey("report")]
    assert result.triggers_unchanged == [TriggerKey("nightly")]


def test_a_stored_trigger_that_differs_is_replaced_with_a_start_from_now() -> None:
    result = plan(
        stored_as_loaded(execution_group="reindex"), [parse_scheduling_data(FILE, "q.yaml")], T0
    )
    assert result.triggers_replaced == [TriggerKey("nightly")]
    (written,) = result.triggers_to_write
    assert written.start_at == T0 and written.execution_group is None
    assert written.preferred_node is PreferredNode.AUTO


def test_a_stored_job_not_in_the_file_goes_with_the_star_delete() -> None:
    snapshot = stored_as_loaded()
    other = Job(key=JobKey("other", "elsewhere"), task="tasks.other", durable=True)
    snapshot.jobs[other.key] = other
    result = plan(snapshot, [parse_scheduling_data(FILE, "q.yaml")], T0)
    assert result.jobs_deleted == [JobKey("other", "elsewhere")]


def test_a_trigger_for_an_unknown_job_names_its_line() -> None:
    text = "Triggers:\n  - {Name: t, JobName: ghost, Cron: {Expression: 0 0 2 * * ?}}\n"
    with pytest.raises(SchedulingFileError, match=r"^q\.yaml:2: trigger DEFAULT\.t: job"):
        plan(Snapshot(), [parse_scheduling_data(text, "q.yaml")], T0)


def twice(directives: str) -> str:
    """A file defining trigger ``nightly`` twice, at 02:00 and then at 03:00."""
    return (
        f"ProcessingDirectives: {{{directives}}}\n"
        "Jobs:\n  - {Name: report, JobType: tasks.report, Durable: true}\n"
        "Triggers:\n"
        "  - {Name: nightly, JobName: report, Cron: {Expression: 0 0 2 * * ?}}\n"
        "  - {Name: nightly, JobName: report, Cron: {Expression: 0 0 3 * * ?}}\n"
    )


def test_a_trigger_defined_twice_with_overwrite_takes_the_last_definition() -> None:
    result = plan(
        Snapshot(), [parse_scheduling_data(twice("OverwriteExistingData: true"), "q.yaml")], T0
    )
    assert result.triggers_added == [TriggerKey("nightly")]
    (written,) = result.triggers_to_write
    assert isinstance(written, CronTrigger) and written.expression == "0 0 3 * * ?"


def test_a_trigger_defined_twice_with_ignore_duplicates_keeps_the_first_definition() -> None:
    text = twice("OverwriteExistingData: false, IgnoreDuplicates: true")
    (written,) = plan(Snapshot(), [parse_scheduling_data(text, "q.yaml")], T0).triggers_to_write
    assert isinstance(written, CronTrigger) and written.expression == "0 0 2 * * ?"


def test_a_trigger_defined_twice_neither_overwritten_nor_ignored_is_an_error_naming_both() -> None:
    text = twice("OverwriteExistingData: false")
    with pytest.raises(
        SchedulingFileError,
        match=r"^q\.yaml:6: trigger DEFAULT\.nightly is defined twice \(first at q\.yaml:5\)",
    ):
        plan(Snapshot(), [parse_scheduling_data(text, "q.yaml")], T0)


def test_a_job_defined_twice_with_overwrite_takes_the_last_definition() -> None:
    text = (
        "Jobs:\n  - {Name: report, JobType: tasks.report, Durable: true}\n"
        "  - {Name: report, JobType: tasks.other, Durable: true}\n"
    )
    (written,) = plan(Snapshot(), [parse_scheduling_data(text, "q.yaml")], T0).jobs_to_write
    assert written.task == "tasks.other"


def test_every_conflict_of_a_load_is_reported() -> None:
    text = (
        "Jobs:\n  - {Name: lonely, JobType: tasks.report}\n"
        "Triggers:\n"
        "  - {Name: t1, JobName: ghost, Cron: {Expression: 0 0 2 * * ?}}\n"
        "  - {Name: t2, JobName: phantom, Cron: {Expression: 0 0 2 * * ?}}\n"
    )
    with pytest.raises(SchedulingFileError) as caught:
        plan(Snapshot(), [parse_scheduling_data(text, "q.yaml")], T0)
    assert [error.line for error in caught.value.errors] == [4, 5, 2]
    assert "must be durable (Durable true)" in str(caught.value)


def test_a_job_defined_twice_without_a_trigger_is_refused_once_at_its_last_definition() -> None:
    text = (
        "Jobs:\n  - {Name: report, JobType: tasks.report}\n"
        "  - {Name: report, JobType: tasks.other}\n"
    )
    with pytest.raises(SchedulingFileError) as caught:
        plan(Snapshot(), [parse_scheduling_data(text, "q.yaml")], T0)
    assert [error.line for error in caught.value.errors] == [3]
    assert "job DEFAULT.report has no trigger, so it must be durable" in str(caught.value)


# -- a source that owns a job group (beat_schedule, an importer) ------------------------------


def owned(task: str = "tasks.report") -> list[SchedulingData]:
    """The group celery.beat_schedule as its source defines it: job report, trigger nightly."""
    job = Job(key=JobKey("report", BEAT_SCHEDULE_GROUP), task=task)
    trigger = CronTrigger(
        key=TriggerKey("nightly", BEAT_SCHEDULE_GROUP), job_key=job.key, expression="0 0 2 * * ?"
    )
    return [owned_group("beat_schedule", BEAT_SCHEDULE_GROUP, {"report": (job, trigger, False)})]


def stored_owned(task: str = "tasks.report") -> Snapshot:
    (data,) = owned(task)
    trigger = data.triggers[0].build(T0 - timedelta(days=3))
    return Snapshot(jobs={data.jobs[0].job.key: data.jobs[0].job}, triggers={trigger.key: trigger})


def test_an_owned_group_defined_as_stored_is_no_change_and_keeps_its_start() -> None:
    result = plan(stored_owned(), owned(), T0)
    assert not result.changed
    assert result.by_job().unchanged == [JobKey("report", BEAT_SCHEDULE_GROUP)]


def test_a_job_its_owner_no_longer_defines_is_deleted_though_its_group_is_protected() -> None:
    snapshot = stored_owned()
    gone = Job(key=JobKey("gone", BEAT_SCHEDULE_GROUP), task="tasks.gone", durable=True)
    snapshot.jobs[gone.key] = gone
    result = plan(snapshot, owned(), T0)
    assert result.by_job().removed == [gone.key]
    assert result.jobs_unchanged == [JobKey("report", BEAT_SCHEDULE_GROUP)]


def test_an_entrys_trigger_starts_again_with_its_changed_job() -> None:
    """An entry is one unit, where a file's replaced job keeps its trigger's fire times."""
    result = plan(stored_owned(), owned("tasks.other"), T0)
    assert result.jobs_replaced == [JobKey("report", BEAT_SCHEDULE_GROUP)]
    assert result.triggers_replaced == [TriggerKey("nightly", BEAT_SCHEDULE_GROUP)]
    assert result.triggers_to_write[0].start_at == T0
    assert result.by_job().updated == [JobKey("report", BEAT_SCHEDULE_GROUP)]
