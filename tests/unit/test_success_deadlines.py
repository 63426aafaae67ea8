"""A job's success deadline (docs/history.md#success-deadlines): ``Job(require_success_within=)``
stored and read back, refused when not positive (naming the job, the store left as it was),
accepted from a ``beat_schedule`` entry's ``quartz`` options and from scheduling files (exported
as JSON and YAML, refused by the XML export), and the settings' mapping for jobs defined
elsewhere."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from celery import Celery

from celery_quartz import Job, JobKey, Quartz
from celery_quartz.beat_schedule import import_beat_schedule
from celery_quartz.clock import FakeClock
from celery_quartz.config import Settings
from celery_quartz.errors import ConfigurationError, SchedulingFileError, ValidationError
from celery_quartz.keys import BEAT_SCHEDULE_GROUP
from celery_quartz.presentation import job as job_json
from celery_quartz.scheduling_files import export_scheduling_data, load_scheduling_files
from celery_quartz.store import MemoryStore, SqlStore

KEY = JobKey("billing", "finance")


def _client(app: Celery, store: SqlStore) -> Quartz:
    return Quartz(app, store=store, settings=Settings(scheduler_name="unit"))


def test_a_jobs_success_deadline_round_trips_through_the_store(app: Celery, db: SqlStore) -> None:
    job = Job(
        key=KEY, task="tasks.report", durable=True, require_success_within=timedelta(hours=26)
    )
    _client(app, db).add_job(job)
    stored = db.retrieve_job(KEY)
    assert stored is not None and stored.require_success_within == timedelta(hours=26)
    assert job_json(stored)["require_success_within"] == 26 * 3600


def test_a_job_without_a_deadline_reads_back_none(app: Celery, store: MemoryStore) -> None:
    _client(app, store).add_job(Job(key=KEY, task="tasks.report", durable=True))
    stored = store.retrieve_job(KEY)
    assert stored is not None and stored.require_success_within is None
    assert job_json(stored)["require_success_within"] is None


def test_replacing_a_job_changes_its_deadline(app: Celery, store: MemoryStore) -> None:
    client = _client(app, store)
    client.add_job(
        Job(key=KEY, task="tasks.report", durable=True, require_success_within=timedelta(hours=1))
    )
    client.add_job(
        Job(key=KEY, task="tasks.report", durable=True, require_success_within=timedelta(days=2)),
        replace=True,
    )
    stored = store.retrieve_job(KEY)
    assert stored is not None and stored.require_success_within == timedelta(days=2)


@pytest.mark.parametrize("bad", [timedelta(0), timedelta(seconds=-5), 3600, "26h"])
def test_a_deadline_that_is_not_a_positive_timedelta_is_refused_naming_the_job(
    app: Celery, store: MemoryStore, bad: object
) -> None:
    job = Job(key=KEY, task="tasks.report", durable=True, require_success_within=bad)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match=r"job finance\.billing: require_success_within"):
        _client(app, store).add_job(job)
    assert store.retrieve_job(KEY) is None


def test_the_store_refuses_a_bad_deadline_written_past_the_client(store: MemoryStore) -> None:
    job = Job(key=KEY, task="tasks.report", durable=True, require_success_within=timedelta(0))
    with pytest.raises(ValidationError, match="must be positive"):
        store.store_jobs_and_triggers([(job, [])])
    assert store.retrieve_job(KEY) is None


def test_a_beat_schedule_entry_sets_its_jobs_deadline_in_seconds_or_as_a_timedelta(
    app: Celery, store: MemoryStore, clock: FakeClock
) -> None:
    entries = {
        "seconds": {"task": "tasks.ping", "schedule": 30, "quartz": {"require_success_within": 90}},
        "delta": {
            "task": "tasks.ping",
            "schedule": 30,
            "quartz": {"require_success_within": timedelta(hours=26)},
        },
        "none": {"task": "tasks.ping", "schedule": 30},
    }
    import_beat_schedule(app, store, clock, entries, max_data_bytes=64 * 1024)
    found = {
        name: store.retrieve_job(JobKey(name, BEAT_SCHEDULE_GROUP))
        for name in ("seconds", "delta", "none")
    }
    assert {n: j.require_success_within for n, j in found.items() if j} == {
        "seconds": timedelta(seconds=90),
        "delta": timedelta(hours=26),
        "none": None,
    }
    # A changed deadline is a changed job: the import updates it.
    entries["none"]["quartz"] = {"require_success_within": 60}
    changes = import_beat_schedule(app, store, clock, entries, max_data_bytes=64 * 1024)
    assert changes.updated == [JobKey("none", BEAT_SCHEDULE_GROUP)]


@pytest.mark.parametrize("bad", [0, -1, "1h", True])
def test_a_beat_schedule_entrys_bad_deadline_is_refused_naming_the_entry(
    app: Celery, store: MemoryStore, clock: FakeClock, bad: object
) -> None:
    entries = {
        "e": {"task": "tasks.ping", "schedule": 30, "quartz": {"require_success_within": bad}}
    }
    with pytest.raises(ValidationError, match="beat entry 'e'"):
        import_beat_schedule(app, store, clock, entries, max_data_bytes=64 * 1024)
    assert store.retrieve_job(JobKey("e", BEAT_SCHEDULE_GROUP)) is None


def test_the_settings_mapping_names_jobs_as_group_dot_name_name_or_a_pair() -> None:
    settings = Settings(
        require_success_within={
            "celery.beat_schedule.nightly": 3600,
            "heartbeat": timedelta(minutes=5),
            ("a.b", "c.d"): 60.5,
        }
    )
    settings.validate()
    assert settings.success_deadlines == {
        JobKey("nightly", "celery.beat_schedule"): timedelta(hours=1),
        JobKey("heartbeat", "DEFAULT"): timedelta(minutes=5),
        JobKey("c.d", "a.b"): timedelta(seconds=60.5),
    }
    assert Settings().success_deadlines == {}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"x": 0}, r"quartz_require_success_within\['x'\]: must be positive"),
        ({"x": "1h"}, r"\['x'\]: seconds or a timedelta"),
        ({"": 5}, r"\[''\]: a job as"),
        ([("x", 5)], "must be a mapping"),
    ],
)
def test_a_bad_settings_deadline_is_refused_naming_the_entry(value: object, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Settings(require_success_within=value).validate()


def test_health_overdue_jobs_is_degraded_or_unhealthy() -> None:
    assert Settings().health_overdue_jobs == "degraded"
    Settings(health_overdue_jobs="unhealthy").validate()
    with pytest.raises(ConfigurationError, match="quartz_health_overdue_jobs"):
        Settings(health_overdue_jobs="fatal").validate()


# -- scheduling files (docs/scheduling-files.md) -------------------------------------------------

_XML = """<?xml version="1.0" encoding="UTF-8"?>
<job-scheduling-data xmlns="http://quartznet.sourceforge.net/JobSchedulingData" version="2.0">
  <schedule>
    <job>
      <name>billing</name><group>finance</group><job-type>tasks.report</job-type>
      <durable>true</durable><recover>false</recover>
      <require-success-within>{value}</require-success-within>
    </job>
  </schedule>
</job-scheduling-data>
"""
_JSON = (
    '{{"Jobs": [{{"Name": "billing", "Group": "finance", "JobType": "tasks.report", '
    '"Durable": true, "RequireSuccessWithin": {value}}}]}}'
)
_YAML = (
    "Jobs:\n  - {{Name: billing, Group: finance, JobType: tasks.report, Durable: true,\n"
    "      RequireSuccessWithin: {value}}}\n"
)


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("jobs.xml", _XML.format(value="1.02:00:00"), timedelta(hours=26)),
        ("jobs.xml", _XML.format(value="3600000"), timedelta(hours=1)),
        ("jobs.json", _JSON.format(value='"00:30:00"'), timedelta(minutes=30)),
        ("jobs.json", _JSON.format(value=90000), timedelta(seconds=90)),
        ("jobs.yaml", _YAML.format(value="'1.02:00:00'"), timedelta(hours=26)),
    ],
)
def test_a_scheduling_file_sets_a_jobs_deadline_as_a_time_span_or_milliseconds(
    app: Celery, store: MemoryStore, tmp_path: Path, name: str, text: str, expected: timedelta
) -> None:
    path = tmp_path / name
    path.write_text(text)
    load_scheduling_files(app, store, [path])
    job = store.retrieve_job(KEY)
    assert job is not None and job.require_success_within == expected


def test_a_scheduling_files_zero_deadline_is_refused_naming_the_file_and_the_job(
    app: Celery, store: MemoryStore, tmp_path: Path
) -> None:
    path = tmp_path / "jobs.xml"
    path.write_text(_XML.format(value="00:00:00"))
    with pytest.raises(SchedulingFileError, match=r"jobs\.xml.*job finance\.billing.*positive"):
        load_scheduling_files(app, store, [path])
    assert store.retrieve_job(KEY) is None


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_the_export_writes_the_deadline_and_reads_it_back(
    app: Celery, store: MemoryStore, tmp_path: Path, fmt: str
) -> None:
    _client(app, store).add_job(
        Job(key=KEY, task="tasks.report", durable=True, require_success_within=timedelta(hours=26))
    )
    path = tmp_path / f"export.{fmt}"
    path.write_text(export_scheduling_data(store, fmt))
    assert "RequireSuccessWithin" in path.read_text()
    other = MemoryStore(scheduler_name="other", clock=store.clock)
    try:
        load_scheduling_files(app, other, [path])
        job = other.retrieve_job(KEY)
        assert job is not None and job.require_success_within == timedelta(hours=26)
    finally:
        other.dispose()


def test_the_xml_export_refuses_a_deadline_quartznet_has_no_element_for(
    app: Celery, store: MemoryStore
) -> None:
    _client(app, store).add_job(
        Job(key=KEY, task="tasks.report", durable=True, require_success_within=timedelta(hours=1))
    )
    with pytest.raises(SchedulingFileError, match=r"no <require-success-within> in <job>"):
        export_scheduling_data(store, "xml")
