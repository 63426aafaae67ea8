"""``celery -A proj quartz`` operators' verbs: listings, control, fire-time previews, and store
errors as one line naming the problem (never a traceback)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from celery import Celery
from click.testing import CliRunner, Result

from celery_quartz import Quartz
from celery_quartz.cli import quartz
from celery_quartz.job import Job
from celery_quartz.keys import JobKey, TriggerKey
from celery_quartz.store.migrate import head_revision
from celery_quartz.triggers import CronTrigger, SimpleTrigger

#: The schema version this checkout migrates to.
HEAD = head_revision()


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Celery]:
    app = Celery("cli", set_as_current=False)
    app.conf.quartz_store_url = f"sqlite:///{tmp_path / 'quartz.db'}"

    def task() -> None: ...

    app.task(name="tasks.report", shared=False)(task)
    yield app
    app.close()


@pytest.fixture
def scheduled(app: Celery) -> Celery:
    client = Quartz(app)
    for i in range(3):
        client.schedule_job(
            Job(key=JobKey(f"report-{i}", "nightly"), task="tasks.report"),
            CronTrigger(
                key=TriggerKey(f"report-{i}", "nightly"),
                expression="0 0 2 ? * MON-FRI",
                time_zone="Europe/Helsinki",
            ),
        )
    client.store.dispose()
    return app


def run(app: Celery, *args: str) -> Result:
    return CliRunner().invoke(quartz, list(args), obj=SimpleNamespace(app=app))


def test_status_on_a_store_without_tables_names_the_upgrade_command(app: Celery) -> None:
    result = run(app, "status")
    assert result.exit_code == 1
    assert "tables are missing" in result.output
    assert "quartz schema upgrade" in result.output
    assert "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_store_without_tables_named_by_store_is_the_one_the_error_shows(
    app: Celery, tmp_path: Path
) -> None:
    other = tmp_path / "other.db"
    app.conf.quartz_dashboard_stores = {"other": f"sqlite:///{other}"}
    result = run(app, "triggers", "--store", "other")
    assert result.exit_code == 1
    assert "tables are missing" in result.output
    assert str(other) in result.output
    assert "quartz.db" not in result.output


def test_every_reading_verb_says_the_tables_are_missing(app: Celery) -> None:
    for verb in ("jobs", "triggers", "firings", "nodes"):
        result = run(app, verb)
        assert result.exit_code == 1, verb
        assert "quartz schema upgrade" in result.output, verb


def test_an_unreachable_database_is_one_line(app: Celery) -> None:
    app.conf.quartz_store_url = "postgresql://user:secret@127.0.0.1:1/none"
    result = run(app, "triggers")
    assert result.exit_code == 1
    assert result.output.startswith("error: cannot use the store at 'postgresql://user:***@")
    assert "secret" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_wrong_url_is_one_line(app: Celery) -> None:
    app.conf.quartz_store_url = "mysql://x/y"
    result = run(app, "jobs")
    assert result.exit_code == 1
    assert "backend 'mysql' is not supported" in result.output


def test_triggers_pages_with_the_printed_cursor(scheduled: Celery) -> None:
    first = json.loads(run(scheduled, "triggers", "--limit", "2", "--json").output)
    assert [t["key"]["name"] for t in first["items"]] == ["report-0", "report-1"]
    assert first["items"][0]["state"] == "WAITING"
    second = json.loads(
        run(scheduled, "triggers", "--limit", "2", "--after", first["next_after"], "--json").output
    )
    assert [t["key"]["name"] for t in second["items"]] == ["report-2"]
    assert second["next_after"] is None
    table = run(scheduled, "triggers", "--limit", "2")
    assert "more: --after " + first["next_after"] in table.output


def test_jobs_lists_as_a_table_and_as_json(scheduled: Celery) -> None:
    table = run(scheduled, "jobs", "--group", "nightly")
    assert table.exit_code == 0
    assert table.output.splitlines()[0].split()[:3] == ["GROUP", "NAME", "TASK"]
    as_json = json.loads(run(scheduled, "jobs", "--json").output)
    assert as_json["items"][0]["task"] == "tasks.report"


def test_pause_and_resume_a_trigger_job_and_group(scheduled: Celery) -> None:
    assert run(scheduled, "pause", "trigger", "report-0", "-g", "nightly").exit_code == 0
    paused = json.loads(run(scheduled, "triggers", "--state", "paused", "--json").output)
    assert [t["key"]["name"] for t in paused["items"]] == ["report-0"]
    assert run(scheduled, "pause", "group", "nightly").exit_code == 0
    assert (
        len(json.loads(run(scheduled, "triggers", "--state", "PAUSED", "--json").output)["items"])
        == 3
    )
    assert run(scheduled, "resume", "group", "nightly").exit_code == 0
    assert run(scheduled, "resume", "trigger", "report-0", "-g", "nightly").exit_code == 0
    assert run(scheduled, "pause", "job", "report-1", "-g", "nightly").exit_code == 0
    assert run(scheduled, "resume", "job", "report-1", "-g", "nightly").exit_code == 0
    assert (
        json.loads(run(scheduled, "triggers", "--state", "PAUSED", "--json").output)["items"] == []
    )


def test_a_missing_trigger_is_one_line_and_exit_1(scheduled: Celery) -> None:
    result = run(scheduled, "pause", "trigger", "nope")
    assert result.exit_code == 1
    assert result.output == "error: trigger DEFAULT.nope is not stored\n"


def test_trigger_job_unschedule_delete_and_pin(scheduled: Celery) -> None:
    fired = json.loads(run(scheduled, "trigger-job", "report-0", "-g", "nightly", "--json").output)
    assert fired["done"] == "triggered"
    assert run(scheduled, "pin", "report-1", "worker@a", "-g", "nightly").exit_code == 0
    pinned = json.loads(run(scheduled, "triggers", "--node", "worker@a", "--json").output)
    assert [t["key"]["name"] for t in pinned["items"]] == ["report-1"]
    assert run(scheduled, "pin", "report-1", "", "-g", "nightly").exit_code == 0
    assert (
        json.loads(run(scheduled, "triggers", "--node", "worker@a", "--json").output)["items"] == []
    )
    assert run(scheduled, "unschedule", "report-2", "-g", "nightly").exit_code == 0
    assert run(scheduled, "unschedule", "report-2", "-g", "nightly").exit_code == 1
    assert run(scheduled, "delete-job", "report-1", "-g", "nightly").exit_code == 0
    assert run(scheduled, "reset-trigger", "report-0", "-g", "nightly").exit_code == 1


def test_cron_previews_in_a_time_zone() -> None:
    result = CliRunner().invoke(
        quartz,
        [
            "cron",
            "0 0 2 ? * MON-FRI",
            "-n",
            "3",
            "--tz",
            "Europe/Helsinki",
            "--after",
            "2026-03-26T23:00:00+00:00",
            "--json",
        ],
        obj=SimpleNamespace(app=None),
    )
    assert result.exit_code == 0, result.output
    # Friday, then Monday and Tuesday after the spring-forward weekend (EET -> EEST).
    assert json.loads(result.output)["fire_times"] == [
        "2026-03-27T02:00:00+02:00",
        "2026-03-30T02:00:00+03:00",
        "2026-03-31T02:00:00+03:00",
    ]


def test_cron_reads_a_unix_line_and_refuses_a_bad_one_as_usage() -> None:
    ok = CliRunner().invoke(
        quartz,
        ["cron", "30 2 * * 0", "--unix", "-n", "1", "--after", "2026-11-30T00:00:00+00:00"],
        obj=SimpleNamespace(app=None),
    )
    assert ok.exit_code == 0, ok.output
    assert ok.output.startswith("Sun 2026-12-06T02:30:00+00:00")
    bad = CliRunner().invoke(quartz, ["cron", "0 0 2 ? * ?"], obj=SimpleNamespace(app=None))
    assert bad.exit_code == 2
    assert "both day fields are '?'" in bad.output


def test_fire_times_of_a_stored_trigger(app: Celery) -> None:
    client = Quartz(app)
    client.schedule_job(
        Job(key=JobKey("tick"), task="tasks.report"),
        SimpleTrigger(
            key=TriggerKey("tick"), repeat_interval=timedelta(minutes=10), repeat_count=2
        ),
    )
    client.store.dispose()
    result = run(app, "fire-times", "tick", "-n", "5", "--json")
    assert result.exit_code == 0, result.output
    times = json.loads(result.output)["fire_times_utc"]
    assert len(times) == 3  # the first and two repeats


def test_firings_lists_what_is_in_flight(app: Celery) -> None:
    from datetime import datetime, timezone

    client = Quartz(app)
    now = datetime.now(timezone.utc)
    client.schedule_job(
        Job(key=JobKey("once"), task="tasks.report"),
        SimpleTrigger(
            key=TriggerKey("once"), start_at=now, repeat_count=0, repeat_interval=timedelta(0)
        ),
    )
    store = client.store
    acquired = store.acquire_next_triggers(
        "node-a", no_later_than=now + timedelta(seconds=1), max_count=10, time_window=0
    )
    fired = store.fire("node-a", acquired)
    store.dispose()
    result = run(app, "firings", "--scheduler", "node-a", "--json")
    assert result.exit_code == 0, result.output
    items = json.loads(result.output)["items"]
    assert [(f["fire_instance_id"], f["trigger"]["name"]) for f in items] == [
        (fired[0].fire_instance_id, "once")
    ]
    assert run(app, "firings", "--scheduler", "node-b", "--json").output.count("fire_instance") == 0


def test_nodes_shows_liveness_and_check_fails_on_a_dead_one(app: Celery) -> None:
    from celery_quartz.clock import FakeClock
    from celery_quartz.config import Settings
    from celery_quartz.store import open_store

    long_ago = open_store(Settings.from_app(app), clock=FakeClock(), upgrade_schema=True)
    long_ago.check_in("celery@gone", interval=1, kind="worker", queues=["celery"])
    long_ago.dispose()
    store = open_store(Settings.from_app(app))
    store.check_in("node-a", interval=60, hostname="h1", pid=42)
    store.dispose()
    nodes = {n["instance_name"]: n for n in json.loads(run(app, "nodes", "--json").output)["items"]}
    assert nodes["node-a"]["alive"] is True
    assert nodes["celery@gone"]["alive"] is False
    assert run(app, "nodes", "--kind", "scheduler", "--check").exit_code == 0
    result = run(app, "nodes", "--check")
    assert result.exit_code == 1
    assert "NO" in result.output


def test_an_unreachable_import_source_is_named_as_the_source(app: Celery) -> None:
    result = run(
        app, "import", "django-celery-beat", "--url", "postgresql://u:pw@127.0.0.1:1/django"
    )
    assert result.exit_code == 1
    assert result.output.startswith("error: cannot read django-celery-beat at 'postgresql://u:***@")
    redbeat = run(app, "import", "redbeat", "--redis-url", "redis://:pw@127.0.0.1:1/0")
    assert redbeat.exit_code == 1
    assert redbeat.output.startswith("error: cannot read redbeat's entries at 'redis://:***@")


def test_an_unknown_trigger_state_is_a_usage_error_naming_the_valid_states(
    scheduled: Celery,
) -> None:
    result = run(scheduled, "triggers", "--state", "SLEEPING")
    assert result.exit_code == 2  # as click's other usage errors
    assert (
        "Invalid value for '--state': 'SLEEPING' is not a trigger state; use one of WAITING, "
        "ACQUIRED, BLOCKED, PAUSED, PAUSED_BLOCKED, COMPLETE, ERROR"
    ) in result.output
    # A state in lower case still reads (it did before).
    waiting = json.loads(run(scheduled, "triggers", "--state", "waiting", "--json").output)
    assert len(waiting["items"]) == 3


def _fire_once(app: Celery, job: Job) -> str:
    """Store ``job`` with a trigger due now, claim and fire it: the fire instance id."""
    from datetime import datetime, timezone

    client = Quartz(app)
    now = datetime.now(timezone.utc)
    client.schedule_job(
        job,
        SimpleTrigger(
            key=TriggerKey(job.key.name), start_at=now, repeat_count=0, repeat_interval=timedelta(0)
        ),
    )
    store = client.store
    acquired = store.acquire_next_triggers(
        "node-a", no_later_than=now + timedelta(seconds=1), max_count=10, time_window=0
    )
    [fired] = store.fire("node-a", acquired)
    store.dispose()
    return fired.fire_instance_id


def test_firings_show_the_queue_a_jobs_queue_option_routes_to(app: Celery) -> None:
    fire_instance_id = _fire_once(
        app, Job(key=JobKey("routed"), task="tasks.report", options={"queue": "reports"})
    )
    [item] = json.loads(run(app, "firings", "--json").output)["items"]
    assert (item["fire_instance_id"], item["queue"]) == (fire_instance_id, "reports")
    table = run(app, "firings").output.splitlines()
    assert table[1].split()[-1] == "reports"


def test_firings_show_celerys_default_queue_for_a_job_without_a_route(app: Celery) -> None:
    _fire_once(app, Job(key=JobKey("plain"), task="tasks.report"))
    [item] = json.loads(run(app, "firings", "--json").output)["items"]
    assert item["queue"] == "celery"


def _put_in_error(app: Celery, name: str) -> None:
    from datetime import datetime, timezone

    client = Quartz(app)
    store = client.store
    now = datetime.now(timezone.utc) + timedelta(days=400)  # past every next fire time
    acquired = store.acquire_next_triggers("node-a", no_later_than=now, max_count=10, time_window=0)
    [claimed] = [a for a in acquired if a.trigger.key.name == name]
    store.set_trigger_error(claimed, "task missing")
    store.release_acquired("node-a", [a for a in acquired if a is not claimed])
    store.dispose()


def test_pausing_a_trigger_in_error_says_it_stays_in_error(scheduled: Celery) -> None:
    _put_in_error(scheduled, "report-0")
    result = run(scheduled, "pause", "trigger", "report-0", "-g", "nightly")
    assert result.exit_code == 1
    assert result.output == (
        "error: trigger nightly.report-0 is ERROR, not paused: pause leaves a trigger in ERROR "
        "as it is, as Quartz does (`reset-trigger` returns it to its schedule)\n"
    )
    errors = json.loads(run(scheduled, "triggers", "--state", "ERROR", "--json").output)
    assert [t["key"]["name"] for t in errors["items"]] == ["report-0"]


def test_pausing_a_waiting_trigger_prints_its_paused_state(scheduled: Celery) -> None:
    result = run(scheduled, "pause", "trigger", "report-1", "-g", "nightly", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {
        "done": "paused",
        "target": "trigger nightly.report-1",
        "state": "PAUSED",
    }


# -- the schema and status: --json, and what an empty database lacks --------------------------


def test_schema_check_on_an_empty_database_names_each_missing_table_on_a_line(
    app: Celery,
) -> None:
    result = run(app, "schema", "check")
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        f"schema quartz_*: at nothing, expected {HEAD}",
        "  missing table quartz_audit",
        "  missing table quartz_backfill_slots",
        "  missing table quartz_calendars",
        "  missing table quartz_fired_triggers",
        "  missing table quartz_history",
        "  missing table quartz_history_rollups",
        "  missing table quartz_jobs",
        "  missing table quartz_locks",
        "  missing table quartz_paused_trigger_grps",
        "  missing table quartz_run_status",
        "  missing table quartz_scheduler_state",
        "  missing table quartz_triggers",
        "create the tables with `celery -A <app> quartz schema upgrade`",
    ]


def test_schema_check_names_a_missing_index_and_an_unexpected_column(app: Celery) -> None:
    from sqlalchemy import text

    from celery_quartz.store import migrate
    from celery_quartz.store.engine import create_store_engine

    engine = create_store_engine(app.conf.quartz_store_url)
    migrate.upgrade(engine)
    with engine.begin() as conn:
        conn.execute(text("DROP INDEX ix_quartz_triggers_group"))
        conn.execute(text("ALTER TABLE quartz_jobs ADD COLUMN extra TEXT"))
    engine.dispose()
    result = run(app, "schema", "check")
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        f"schema quartz_*: at {HEAD}, expected {HEAD}",
        "  unexpected column quartz_jobs.extra",
        "  missing index ix_quartz_triggers_group on quartz_triggers",
    ]


def test_schema_check_json_before_and_after_the_upgrade(app: Celery) -> None:
    before = run(app, "schema", "check", "--json")
    assert before.exit_code == 1
    found = json.loads(before.output)
    assert {k: v for k, v in found.items() if k != "differences"} == {
        "table_prefix": "quartz_",
        "ok": False,
        "current": None,
        "head": HEAD,
    }
    assert "missing table quartz_jobs" in found["differences"]
    upgraded = run(app, "schema", "upgrade", "--json")
    assert upgraded.exit_code == 0, upgraded.output
    assert json.loads(upgraded.output) == {
        "table_prefix": "quartz_",
        "before": None,
        "after": HEAD,
    }
    matches = run(app, "schema", "check", "--json")
    assert matches.exit_code == 0
    assert json.loads(matches.output) == {
        "table_prefix": "quartz_",
        "ok": True,
        "current": HEAD,
        "head": HEAD,
        "differences": [],
    }


def test_status_json_lists_the_nodes_counts_and_firings_in_flight(app: Celery) -> None:
    from celery_quartz.config import Settings
    from celery_quartz.store import open_store

    _fire_once(app, Job(key=JobKey("once"), task="tasks.report"))
    store = open_store(Settings.from_app(app))
    store.check_in("node-a", interval=60, hostname="h1", pid=42)
    store.dispose()
    result = run(app, "status", "--json")
    assert result.exit_code == 0, result.output
    found = json.loads(result.output)
    assert sorted(found) == ["firings_in_flight", "jobs", "nodes", "scheduler", "triggers"]
    assert found["scheduler"] == "cli"  # the app's name
    assert (found["jobs"], found["triggers"]) == (1, 1)
    assert found["firings_in_flight"] == {"FIRED": 1}
    [node] = found["nodes"]
    assert (node["instance_name"], node["kind"], node["alive"]) == ("node-a", "scheduler", True)


# -- a malformed store URL: its password is never printed nor logged ---------------------------

_VERBS = (
    ["status"],
    ["status", "--json"],
    ["schema", "check"],
    ["schema", "check", "--json"],
    ["schema", "upgrade"],
    ["schema", "upgrade", "--json"],
    ["jobs"],
    ["triggers"],
    ["firings"],
    ["nodes"],
    ["pause", "trigger", "report"],
    ["fire-times", "report"],
    ["load", "quartz_jobs.json"],
    ["export", "--format", "json"],
)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (  # a port that is not a number
            "postgresql://ops:s3cret-pw@db:54x2/quartz",
            "'postgresql://ops:***@db:54x2/quartz'",
        ),
        (  # a URL SQLAlchemy cannot parse at all
            "postgres ql://ops:s3cret-pw@db/quartz",
            "'postgres ql://ops:***@db/quartz'",
        ),
        (  # libpq's password parameter
            "postgresql://ops@db:54x2/quartz?password=s3cret-pw",
            "'postgresql://ops@db:54x2/quartz?password=***'",
        ),
    ],
)
def test_a_malformed_store_url_is_named_without_its_password(
    app: Celery, url: str, shown: str, caplog: pytest.LogCaptureFixture
) -> None:
    app.conf.quartz_store_url = url
    caplog.set_level("DEBUG")
    for verb in _VERBS:
        result = run(app, *verb)
        assert result.exit_code == 1, (verb, result.output)
        assert result.output.startswith(f"error: quartz_store_url {shown} is not a SQLAlchemy URL")
        assert "s3cret-pw" not in result.output, verb
    assert "quartz command failed" in caplog.text  # the traceback, at debug level
    assert "s3cret-pw" not in caplog.text


def test_beats_banner_names_a_malformed_store_url_without_its_password(app: Celery) -> None:
    from celery_quartz.beat import Scheduler

    app.conf.quartz_store_url = "postgresql://ops@db:54x2/quartz?password=s3cret-pw"
    banner = Scheduler(app, lazy=True).info
    assert "store -> postgresql://ops@db:54x2/quartz?password=***" in banner
    assert "s3cret-pw" not in banner


def test_a_malformed_import_source_url_is_named_without_its_password(app: Celery) -> None:
    result = run(
        app, "import", "django-celery-beat", "--url", "postgresql://u:s3cret-pw@h:54x2/django"
    )
    assert result.exit_code == 1
    assert result.output.startswith(
        "error: --url 'postgresql://u:***@h:54x2/django' is not a SQLAlchemy URL"
    )
    assert "s3cret-pw" not in result.output
