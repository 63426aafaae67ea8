"""``celery quartz import django-celery-beat``: tasks created through django-celery-beat's own
ORM (Django configured in this process, its migrations run on SQLite and on PostgreSQL) are
imported with the fire times django-celery-beat's schedules compute, idempotently; what cannot
be represented is reported by name and skipped. Where timing is subtle (a start time, daylight
saving), the expected times are the runs of django-celery-beat's own scheduler entry on a
simulated clock."""

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
from click.testing import CliRunner, Result
from sqlalchemy.engine import make_url

from celery_quartz.cli import quartz
from celery_quartz.clock import FakeClock
from celery_quartz.config import Settings
from celery_quartz.keys import TriggerKey
from celery_quartz.store import open_store
from celery_quartz.triggers.base import Trigger
from tests.services import PostgresServer
from tests.stores import audit_rows

UTC = timezone.utc
HOUR = timedelta(hours=1)
TASKS = ("tasks.report", "tasks.cleanup", "tasks.once")


# Session-scoped: Django is configured once per process, and worksteal may run this module's tests
# in one process between other modules' (a module-scoped fixture would then be set up twice).
@pytest.fixture(scope="session")
def django_databases(
    postgres: PostgresServer, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, str]:
    """Django configured once for this process, with django_celery_beat's tables migrated on a
    SQLite file ("default") and on a PostgreSQL database ("pg"); alias -> SQLAlchemy URL."""
    import django
    from django.conf import settings
    from django.core.management import call_command

    sqlite_path = tmp_path_factory.mktemp("django") / "beat.sqlite3"
    pg_url = postgres.create_database("django_celery_beat_source")
    pg = make_url(pg_url)
    if not settings.configured:
        settings.configure(
            INSTALLED_APPS=["django_celery_beat"],
            DATABASES={
                "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(sqlite_path)},
                "pg": {
                    "ENGINE": "django.db.backends.postgresql",
                    "NAME": pg.database,
                    "USER": pg.username,
                    "HOST": pg.host,
                    "PORT": pg.port,
                },
            },
            USE_TZ=True,
            TIME_ZONE="UTC",
        )
        django.setup()
    for alias in ("default", "pg"):
        call_command("migrate", database=alias, verbosity=0)
    return {"default": f"sqlite:///{sqlite_path}", "pg": pg_url}


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Celery]:
    app = Celery("import", set_as_current=False)
    app.conf.quartz_store_url = f"sqlite:///{tmp_path / 'quartz.db'}"
    for name in TASKS:

        def task() -> None: ...

        app.task(name=name, shared=False)(task)
    yield app
    app.close()


def run(app: Celery, *args: str) -> Result:
    return CliRunner().invoke(quartz, list(args), obj=SimpleNamespace(app=app))


def _delete_all() -> None:
    """Every database emptied: the model's save() checks a task name's uniqueness on "default"."""
    from django_celery_beat.models import (
        ClockedSchedule,
        CrontabSchedule,
        IntervalSchedule,
        PeriodicTask,
        SolarSchedule,
    )

    for each in ("default", "pg"):
        for model in (
            PeriodicTask,
            CrontabSchedule,
            IntervalSchedule,
            ClockedSchedule,
            SolarSchedule,
        ):
            model.objects.using(each).all().delete()


def _create_tasks(alias: str, now: datetime) -> None:
    """The source scheduler's tasks, through django-celery-beat's own models."""
    from django_celery_beat.models import (
        ClockedSchedule,
        CrontabSchedule,
        IntervalSchedule,
        PeriodicTask,
        SolarSchedule,
    )

    db = alias
    _delete_all()
    weekdays = CrontabSchedule.objects.using(db).create(
        minute="30", hour="2", day_of_week="1-5", timezone=ZoneInfo("Europe/Helsinki")
    )
    quarterly = CrontabSchedule.objects.using(db).create(
        minute="*/15", hour="*", timezone=ZoneInfo("America/New_York")
    )
    both_days = CrontabSchedule.objects.using(db).create(
        minute="0", hour="3", day_of_month="1", day_of_week="1", timezone=ZoneInfo("UTC")
    )
    every_90 = IntervalSchedule.objects.using(db).create(every=90, period="minutes")
    tomorrow = ClockedSchedule.objects.using(db).create(clocked_time=now + timedelta(days=1))
    sunrise = SolarSchedule.objects.using(db).create(
        event="sunrise", latitude="60.17", longitude="24.94"
    )
    create = PeriodicTask.objects.using(db).create
    create(
        name="weekday report",
        task="tasks.report",
        crontab=weekdays,
        kwargs=json.dumps({"kind": "daily"}),
        queue="reports",
        priority=5,
        expires=now + timedelta(days=400),
    )
    create(name="quarter hour", task="tasks.cleanup", crontab=quarterly, expire_seconds=300)
    create(
        name="every 90 minutes",
        task="tasks.cleanup",
        interval=every_90,
        args=json.dumps([1, "two"]),
        last_run_at=now - timedelta(minutes=30),
    )
    create(name="paused report", task="tasks.report", crontab=weekdays, enabled=False)
    create(name="tomorrow once", task="tasks.once", clocked=tomorrow, one_off=True)
    create(name="at sunrise", task="tasks.report", solar=sunrise)
    create(name="both days", task="tasks.report", crontab=both_days)
    create(name="expired", task="tasks.report", crontab=weekdays, expires=now - timedelta(days=1))
    create(name="next quarter once", task="tasks.once", crontab=quarterly, one_off=True)
    create(
        name="with headers",
        task="tasks.report",
        crontab=weekdays,
        headers=json.dumps({"tenant": "a"}),
    )


def _celery_times(schedule: Any, last_run: datetime, count: int) -> list[datetime]:
    """The next runs as Celery computes them: beat runs an entry when ``remaining_estimate``
    reaches zero, then counts from that run."""
    times = []
    for _ in range(count):
        schedule.nowfun = lambda last=last_run: last
        last_run = last_run + schedule.remaining_estimate(last_run)
        times.append(last_run.astimezone(UTC))
    return times


def _django_beat_runs(app: Celery, task: Any, start: datetime, count: int) -> list[datetime]:
    """The first ``count`` runs of ``task`` under django-celery-beat's own scheduler entry
    (``ModelEntry``) on a simulated clock from ``start``, ticked as its ``DatabaseScheduler``
    ticks: at most ``DEFAULT_MAX_INTERVAL`` seconds apart, a due entry run at that tick and
    ``next(entry)`` taking the tick as its last run."""
    from django_celery_beat.schedulers import DEFAULT_MAX_INTERVAL, ModelEntry

    clock = FakeClock(start)

    class SimulatedEntry(ModelEntry):
        def _default_now(self) -> datetime:
            return clock.now()

    entry = SimulatedEntry(task, app=app)
    runs: list[datetime] = []
    while len(runs) < count:
        zone = getattr(entry.schedule, "tz", UTC)
        entry.schedule.nowfun = lambda zone=zone: clock.now().astimezone(zone)
        due, wait = entry.is_due()
        if due:
            runs.append(clock.now())
            entry = next(entry)
            entry.app = app
        else:
            clock.advance(min(wait, DEFAULT_MAX_INTERVAL))
    return runs


def _stored(app: Celery, name: str, group: str) -> Trigger:
    store = open_store(Settings.from_app(app))
    try:
        trigger = store.retrieve_trigger(TriggerKey(name, group))
    finally:
        store.dispose()
    assert trigger is not None, name
    return trigger


def _quartz_times(app: Celery, name: str, group: str, count: int) -> list[datetime]:
    trigger = _stored(app, name, group)
    times: list[datetime] = []
    while trigger.next_fire_time is not None and len(times) < count:
        times.append(trigger.next_fire_time)
        trigger.triggered()
    return times


@pytest.mark.parametrize("alias", ["default", "pg"])
def test_tasks_import_with_django_celery_beat_fire_times(
    app: Celery, django_databases: dict[str, str], alias: str
) -> None:
    from django_celery_beat.models import PeriodicTask

    now = datetime.now(UTC).replace(microsecond=0)
    _create_tasks(alias, now)
    url = django_databases[alias]

    dry = run(app, "import", "django-celery-beat", "--url", url, "--dry-run", "--json")
    assert dry.exit_code == 0, dry.output
    report = json.loads(dry.output)
    assert sorted(report["added"]) == [
        "every 90 minutes",
        "next quarter once",
        "paused report",
        "quarter hour",
        "tomorrow once",
        "weekday report",
    ]
    assert sorted(report["skipped"]) == ["at sunrise", "both days", "expired", "with headers"]
    assert report["skipped"]["expired"].startswith("expired at")
    assert "solar" in report["skipped"]["at sunrise"]
    assert "day_of_week" in report["skipped"]["both days"]
    assert "headers" in report["skipped"]["with headers"]
    empty = run(app, "jobs", "--group", "django_celery_beat", "--json")
    assert json.loads(empty.output)["items"] == []  # the dry run wrote nothing

    applied = run(app, "import", "django-celery-beat", "--url", url)
    imported = datetime.now(UTC)
    assert applied.exit_code == 0, applied.output
    assert "6 added" in applied.output.splitlines()[-1]

    tasks = {t.name: t for t in PeriodicTask.objects.using(alias).all()}
    for name in ("weekday report", "quarter hour"):
        # From when the import stored the trigger, as django-celery-beat would count from then.
        imported_at = _stored(app, name, "django_celery_beat").start_at
        assert imported_at is not None and imported_at >= now
        expected = _celery_times(tasks[name].schedule, imported_at, 6)
        assert _quartz_times(app, name, "django_celery_beat", 6) == expected, name
    interval = tasks["every 90 minutes"]
    expected = _celery_times(interval.schedule, interval.last_run_at, 4)
    assert _quartz_times(app, "every 90 minutes", "django_celery_beat", 4) == expected
    # Once, at the next quarter hour after the import (which ran between now and imported).
    once = tasks["next quarter once"].schedule
    possible = [_celery_times(once, now, 1), _celery_times(once, imported, 1)]
    assert _quartz_times(app, "next quarter once", "django_celery_beat", 3) in possible
    assert _quartz_times(app, "tomorrow once", "django_celery_beat", 3) == [now + timedelta(days=1)]

    triggers = json.loads(run(app, "triggers", "--json").output)["items"]
    states = {t["key"]["name"]: (t["key"]["group"], t["state"]) for t in triggers}
    assert states["paused report"] == ("django_celery_beat.disabled", "PAUSED")
    assert states["weekday report"] == ("django_celery_beat", "WAITING")
    jobs = {j["key"]["name"]: j for j in json.loads(run(app, "jobs", "--json").output)["items"]}
    assert jobs["weekday report"]["kwargs"] == {"kind": "daily"}
    assert jobs["weekday report"]["options"]["queue"] == "reports"
    assert jobs["weekday report"]["options"]["priority"] == 5
    assert jobs["quarter hour"]["options"]["expires"] == 300
    assert jobs["every 90 minutes"]["args"] == [1, "two"]

    again = run(app, "import", "django-celery-beat", "--url", url, "--json")
    assert json.loads(again.output)["unchanged"] and not json.loads(again.output)["added"]
    assert json.loads(again.output)["updated"] == []

    PeriodicTask.objects.using(alias).filter(name="paused report").update(enabled=True)
    PeriodicTask.objects.using(alias).filter(name="quarter hour").delete()
    changed = json.loads(run(app, "import", "django-celery-beat", "--url", url, "--json").output)
    assert changed["updated"] == ["paused report"]
    assert changed["removed"] == ["quarter hour"]
    triggers = json.loads(run(app, "triggers", "--group", "django_celery_beat", "--json").output)
    assert "paused report" in [t["key"]["name"] for t in triggers["items"]]


def test_an_import_is_audited_as_import_django_celery_beat_with_what_changed(
    app: Celery, django_databases: dict[str, str]
) -> None:
    from django_celery_beat.models import PeriodicTask

    _create_tasks("pg", datetime.now(UTC).replace(microsecond=0))
    url = django_databases["pg"]
    assert run(app, "import", "django-celery-beat", "--url", url).exit_code == 0
    store = open_store(Settings.from_app(app))
    try:
        added = audit_rows(store)
        assert {(r["principal"], r["via"]) for r in added} == {
            ("import:django-celery-beat", "import")
        }
        assert len([r for r in added if r["action"] == "schedule_job"]) == 6
        assert run(app, "import", "django-celery-beat", "--url", url).exit_code == 0
        assert audit_rows(store) == added  # unchanged: nothing recorded
        PeriodicTask.objects.using("pg").filter(name="weekday report").update(
            kwargs='{"kind": "weekly"}'
        )
        PeriodicTask.objects.using("pg").filter(name="quarter hour").delete()
        assert run(app, "import", "django-celery-beat", "--url", url).exit_code == 0
        changed = audit_rows(store)[len(added) :]
    finally:
        store.dispose()
    assert {(r["principal"], r["via"]) for r in changed} == {
        ("import:django-celery-beat", "import")
    }
    by_action = {(r["action"], r["target"]): r["changes"] for r in changed}
    assert by_action[("replace_job", "django_celery_beat.weekday report")] == {
        "kwargs.kind": ["daily", "weekly"]
    }
    assert ("remove_job", "django_celery_beat.quarter hour") in by_action
    assert ("remove_trigger", "django_celery_beat.quarter hour") in by_action


def test_a_database_without_django_celery_beat_says_so(app: Celery, tmp_path: Path) -> None:
    result = run(app, "import", "django-celery-beat", "--url", f"sqlite:///{tmp_path / 'x.db'}")
    assert result.exit_code == 1
    assert "no table django_celery_beat_periodictask" in result.output


@pytest.mark.parametrize(
    ("last_run", "start"),
    [
        (timedelta(minutes=-30), timedelta(minutes=20)),
        (timedelta(hours=-5), timedelta(minutes=20)),
        (None, timedelta(minutes=20)),
    ],
    ids=["ran, next run after the start time", "ran long ago", "never ran"],
)
def test_an_interval_task_s_start_time_only_gates_its_runs(
    app: Celery,
    django_databases: dict[str, str],
    last_run: timedelta | None,
    start: timedelta,
) -> None:
    """As django-celery-beat runs it: from its last run, not before its start time (a task that
    never ran, at its start time)."""
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    now = datetime.now(UTC).replace(microsecond=0)
    _delete_all()
    task = PeriodicTask.objects.create(
        name="gated",
        task="tasks.cleanup",
        interval=IntervalSchedule.objects.create(every=90, period="minutes"),
        start_time=now + start,
        last_run_at=None if last_run is None else now + last_run,
    )

    applied = run(app, "import", "django-celery-beat", "--url", django_databases["default"])

    assert applied.exit_code == 0, applied.output
    expected = _django_beat_runs(app, task, now, 3)
    assert _quartz_times(app, "gated", "django_celery_beat", 3) == expected


def test_a_crontab_celery_cannot_read_is_skipped_by_name(
    app: Celery, django_databases: dict[str, str]
) -> None:
    """django-celery-beat's validator accepts day_of_week '7'; Celery's crontab refuses it."""
    from django_celery_beat.models import CrontabSchedule, PeriodicTask

    _delete_all()
    sundays = CrontabSchedule(minute="0", hour="4", day_of_week="7")
    sundays.full_clean()
    sundays.save()
    nightly = CrontabSchedule.objects.create(minute="0", hour="3")
    PeriodicTask.objects.create(name="on day seven", task="tasks.report", crontab=sundays)
    PeriodicTask.objects.create(name="nightly", task="tasks.report", crontab=nightly)
    url = django_databases["default"]

    for dry_run in (["--dry-run"], []):
        result = run(app, "import", "django-celery-beat", "--url", url, "--json", *dry_run)

        assert result.exit_code == 0, result.output
        report = json.loads(result.output)
        assert report["added"] == ["nightly"]
        assert list(report["skipped"]) == ["on day seven"]
        assert "day_of_week '7'" in report["skipped"]["on day seven"]


@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_a_description_longer_than_the_store_holds_is_skipped_by_name(
    app: Celery, django_databases: dict[str, str], request: pytest.FixtureRequest, store: str
) -> None:
    """django-celery-beat's description is unbounded text; a job's holds 250 characters on every
    store, so the dry run already reports the task, and the import skips it."""
    from django_celery_beat.models import CrontabSchedule, PeriodicTask

    if store == "postgresql":
        app.conf.quartz_store_url = request.getfixturevalue("pg_url")
    _delete_all()
    nightly = CrontabSchedule.objects.create(minute="0", hour="3")
    PeriodicTask.objects.create(
        name="wordy", task="tasks.report", crontab=nightly, description="w" * 251
    )
    PeriodicTask.objects.create(name="terse", task="tasks.report", crontab=nightly)
    url = django_databases["default"]

    for dry_run in (["--dry-run"], []):
        result = run(app, "import", "django-celery-beat", "--url", url, "--json", *dry_run)

        assert result.exit_code == 0, result.output
        report = json.loads(result.output)
        assert report["added"] == ["terse"]
        assert report["skipped"] == {
            "wordy": "job django_celery_beat.wordy: description is 251 characters; at most 250"
        }


BERLIN = ZoneInfo("Europe/Berlin")


def _next_offset_change(after: datetime, *, forward: bool) -> datetime:
    """The first whole hour after ``after`` at which Berlin's UTC offset grows (``forward``,
    spring) or shrinks (autumn)."""
    hour = after.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    for _ in range(24 * 400):
        before = (hour - timedelta(hours=1)).astimezone(BERLIN).utcoffset()
        at = hour.astimezone(BERLIN).utcoffset()
        assert before is not None and at is not None
        if (at > before) if forward else (at < before):
            return hour
        hour += timedelta(hours=1)
    raise AssertionError("Berlin changes its offset at least once a year")


def _berlin_crontab_times(
    app: Celery, url: str, fields: dict[str, str], start: datetime, count: int
) -> tuple[list[datetime], list[datetime]]:
    """A crontab task in Berlin, imported: (its trigger's fire times after ``start``, the runs
    django-celery-beat's own scheduler entry makes from ``start`` on a simulated clock)."""
    from django_celery_beat.models import CrontabSchedule, PeriodicTask

    _delete_all()
    task = PeriodicTask.objects.create(
        name="in Berlin",
        task="tasks.report",
        crontab=CrontabSchedule.objects.create(timezone=BERLIN, **fields),
        last_run_at=start,
    )
    applied = run(app, "import", "django-celery-beat", "--url", url)
    assert applied.exit_code == 0, applied.output
    trigger = _stored(app, "in Berlin", "django_celery_beat")
    ours: list[datetime] = []
    after = start
    for _ in range(count):
        fire = trigger.next_fire_time_after(after)
        assert fire is not None
        ours.append(fire)
        after = fire
    return ours, _django_beat_runs(app, task, start, count)


def test_a_time_skipped_by_spring_forward_fires_at_the_gap_end_not_an_hour_later(
    app: Celery, django_databases: dict[str, str]
) -> None:
    """docs/migrating.md: a daily 02:30 fires at 03:00 CEST on the night 02:00 becomes 03:00;
    django-celery-beat (Celery's crontab) runs it at 03:30."""
    change = _next_offset_change(datetime.now(UTC), forward=True)  # 02:00 CET = 03:00 CEST
    ours, theirs = _berlin_crontab_times(
        app, django_databases["default"], {"minute": "30", "hour": "2"}, change - HOUR, 2
    )
    assert ours == [change, change + timedelta(days=1) - HOUR / 2]
    assert theirs == [change + HOUR / 2, change + timedelta(days=1) - HOUR / 2]


def test_an_hourly_schedule_fires_through_both_passes_of_the_repeated_hour(
    app: Celery, django_databases: dict[str, str]
) -> None:
    """docs/migrating.md: hourly fires at 02:00 CEST and again at 02:00 CET on the night 03:00
    becomes 02:00; django-celery-beat runs the first 02:00 only."""
    change = _next_offset_change(datetime.now(UTC), forward=False)  # 03:00 CEST = 02:00 CET
    ours, theirs = _berlin_crontab_times(
        app, django_databases["default"], {"minute": "0"}, change - 2.5 * HOUR, 4
    )
    # 01:00 CEST, 02:00 CEST, 02:00 CET, 03:00 CET
    assert ours == [change - 2 * HOUR, change - HOUR, change, change + HOUR]
    # 01:00 CEST, 02:00 CEST, 03:00 CET, 04:00 CET
    assert theirs == [change - 2 * HOUR, change - HOUR, change + HOUR, change + 2 * HOUR]


def test_a_time_repeated_by_fall_back_fires_once_at_its_first_pass(
    app: Celery, django_databases: dict[str, str]
) -> None:
    """docs/migrating.md: a daily 02:30 fires at 02:30 CEST only, as django-celery-beat runs it."""
    change = _next_offset_change(datetime.now(UTC), forward=False)
    ours, theirs = _berlin_crontab_times(
        app, django_databases["default"], {"minute": "30", "hour": "2"}, change - 2 * HOUR, 2
    )
    expected = [change - HOUR / 2, change + timedelta(days=1) + HOUR / 2]
    assert ours == theirs == expected
