"""Settings read from Celery's ``app.conf`` (``quartz_*`` keys), with their documented defaults."""

from __future__ import annotations

import os
import re
import socket

import pytest
from celery import Celery

from celery_quartz.config import AUTO, Settings
from celery_quartz.errors import ConfigurationError


def test_the_defaults_are_the_documented_ones(app: Celery) -> None:
    settings = Settings.from_app(app)
    assert settings == Settings(
        store_url="sqlite:///quartz.db",
        scheduler_name="t",
        instance_id="AUTO",
        table_prefix="quartz_",
        clustered=True,
        idle_wait=1.0,
        batch_size=100,
        fire_ahead_window=0.0,
        misfire_threshold=60.0,
        max_misfires_per_round=20,
        checkin_interval=7.5,
        checkin_misfire_threshold=7.5,
        max_job_data_bytes=65536,
        schema_auto_upgrade=True,
        import_beat_schedule=True,
    )


def test_quartz_keys_are_read_from_app_conf(app: Celery) -> None:
    app.conf.update(
        quartz_store_url="postgresql+psycopg2://db/proj",
        quartz_scheduler_name="billing",
        quartz_instance_id="node-1",
        quartz_table_prefix="qz_",
        quartz_clustered=False,
        quartz_idle_wait=0.5,
        quartz_batch_size=10,
        quartz_fire_ahead_window=0.2,
        quartz_misfire_threshold=30,
        quartz_max_misfires_per_round=5,
        quartz_checkin_interval=2.0,
        quartz_checkin_misfire_threshold=0,
        quartz_max_job_data_bytes=1024,
        quartz_schema_auto_upgrade=False,
        quartz_import_beat_schedule=False,
    )
    assert Settings.from_app(app) == Settings(
        store_url="postgresql+psycopg2://db/proj",
        scheduler_name="billing",
        instance_id="node-1",
        table_prefix="qz_",
        clustered=False,
        idle_wait=0.5,
        batch_size=10,
        fire_ahead_window=0.2,
        misfire_threshold=30,
        max_misfires_per_round=5,
        checkin_interval=2.0,
        checkin_misfire_threshold=0,
        max_job_data_bytes=1024,
        schema_auto_upgrade=False,
        import_beat_schedule=False,
    )


def test_the_scheduler_name_defaults_to_the_app_s_main_name(app: Celery) -> None:
    assert Settings.from_app(app).scheduler_name == "t"


def test_an_app_without_a_main_name_is_the_celery_scheduler() -> None:
    app = Celery(set_as_current=False)
    assert Settings.from_app(app).scheduler_name == "celery"


def test_keys_of_other_settings_are_not_read(app: Celery) -> None:
    app.conf.beat_max_loop_interval = 1
    app.conf.quartz_unknown_key = 1
    assert Settings.from_app(app) == Settings(scheduler_name="t")


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("quartz_idle_wait", 0, "quartz_idle_wait must be positive, got 0"),
        ("quartz_idle_wait", -1.0, "quartz_idle_wait must be positive, got -1.0"),
        ("quartz_idle_wait", "1s", "quartz_idle_wait must be a number, got '1s'"),
        ("quartz_misfire_threshold", True, "quartz_misfire_threshold must be a number, got True"),
        ("quartz_batch_size", 0, "quartz_batch_size must be positive, got 0"),
        ("quartz_batch_size", 2.5, "quartz_batch_size must be a whole number, got 2.5"),
        ("quartz_max_misfires_per_round", -3, "quartz_max_misfires_per_round must be positive"),
        ("quartz_checkin_interval", 0, "quartz_checkin_interval must be positive, got 0"),
        ("quartz_max_job_data_bytes", 0, "quartz_max_job_data_bytes must be positive, got 0"),
        ("quartz_fire_ahead_window", -0.1, "quartz_fire_ahead_window must be positive"),
        ("quartz_checkin_misfire_threshold", -1, "quartz_checkin_misfire_threshold must be"),
        ("quartz_store_url", "quartz.db", "quartz_store_url must be a SQLAlchemy URL"),
        ("quartz_instance_id", "", "quartz_instance_id '': 1 to 200 characters"),
        ("quartz_instance_id", "n" * 201, "quartz_instance_id 'nnnn"),
        ("quartz_clustered", "false", "quartz_clustered must be True or False, got 'false'"),
        ("quartz_schema_auto_upgrade", 0, "quartz_schema_auto_upgrade must be True or False"),
        ("quartz_import_beat_schedule", "no", "quartz_import_beat_schedule must be True or False"),
    ],
)
def test_a_bad_value_is_refused_naming_the_key(
    app: Celery, key: str, value: object, message: str
) -> None:
    app.conf[key] = value
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        Settings.from_app(app)


def test_zero_is_allowed_where_it_means_none(app: Celery) -> None:
    app.conf.quartz_fire_ahead_window = 0
    app.conf.quartz_checkin_misfire_threshold = 0
    settings = Settings.from_app(app)
    assert (settings.fire_ahead_window, settings.checkin_misfire_threshold) == (0, 0)


def test_a_configured_instance_id_is_used_as_it_is() -> None:
    assert Settings(instance_id="node-1").resolve_instance_id() == "node-1"


def test_an_auto_instance_id_names_the_host_and_process() -> None:
    instance_id = Settings(instance_id=AUTO).resolve_instance_id()
    assert instance_id.startswith(f"{socket.gethostname()}-{os.getpid()}-")
    assert instance_id.rsplit("-", 1)[1].isdigit()


def test_auto_instance_ids_are_unique() -> None:
    settings = Settings(instance_id=AUTO)
    ids = [settings.resolve_instance_id() for _ in range(1000)]
    assert len(set(ids)) == 1000


def test_scheduling_files_are_a_path_or_a_list_of_paths(app: Celery) -> None:
    assert Settings.from_app(app).scheduling_file_paths == []
    app.conf.quartz_scheduling_files = "quartz_jobs.xml"
    assert Settings.from_app(app).scheduling_file_paths == ["quartz_jobs.xml"]
    app.conf.quartz_scheduling_files = ["a.xml", "b.yaml"]
    app.conf.quartz_scheduling_files_scan_interval = 30
    settings = Settings.from_app(app)
    assert settings.scheduling_file_paths == ["a.xml", "b.yaml"]
    assert settings.scheduling_files_scan_interval == 30


@pytest.mark.parametrize(
    ("key", "value"),
    [("scheduling_files", 5), ("scheduling_files", ["", "a.xml"]),
     ("scheduling_files_scan_interval", -1)],
)  # fmt: skip
def test_bad_scheduling_file_settings_are_refused(app: Celery, key: str, value: object) -> None:
    app.conf[f"quartz_{key}"] = value
    with pytest.raises(ConfigurationError, match=f"quartz_{key}"):
        Settings.from_app(app)


def test_the_history_retention_is_built_from_the_settings(app: Celery) -> None:
    from datetime import timedelta

    from celery_quartz.history import HistoryRetention, RunResult

    assert Settings.from_app(app).history_retention_policy() == HistoryRetention(
        max_age=timedelta(days=7),
        max_age_by_result={RunResult.FAILED: timedelta(days=30)},
        max_rows_per_trigger=10_000,
        max_rows=1_000_000,
        audit_max_age=timedelta(days=365),
    )
    app.conf.update(
        quartz_history_retention_by_result={"failed": timedelta(days=90), "misfired": 3600},
        quartz_history_max_rows_per_trigger=None,
        quartz_history_max_rows=500,
        quartz_audit_retention=timedelta(days=30),
    )
    policy = Settings.from_app(app).history_retention_policy()
    assert policy.age_of(RunResult.FAILED) == timedelta(days=90)
    assert policy.age_of(RunResult.MISFIRED) == timedelta(hours=1)
    assert policy.age_of(RunResult.SUCCEEDED) == timedelta(days=7)
    assert (policy.max_rows_per_trigger, policy.max_rows) == (None, 500)
    assert policy.audit_max_age == timedelta(days=30)


@pytest.mark.parametrize(
    ("key", "value", "named"),
    [
        ("history_retention_by_result", {"done": 60}, "unknown result 'done'"),
        ("history_retention_by_result", {"failed": "a month"}, r"by_result\['failed'\]"),
        ("history_retention_by_result", [("failed", 60)], "a mapping"),
        ("history_max_rows_per_trigger", 0, "quartz_history_max_rows_per_trigger"),
        ("history_max_rows", 2.5, "quartz_history_max_rows"),
        ("audit_retention", 0, "quartz_audit_retention must be positive"),
        ("history_sweep_interval", -1, "quartz_history_sweep_interval"),
    ],
)
def test_a_bad_history_setting_is_refused_naming_it(
    app: Celery, key: str, value: object, named: str
) -> None:
    app.conf[f"quartz_{key}"] = value
    with pytest.raises(ConfigurationError, match=named):
        Settings.from_app(app)
