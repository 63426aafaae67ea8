"""django-celery-beat's periodic tasks, read from its tables over a database URL (no Django).

Facts about its storage (django_celery_beat's models and migrations, 2.x):

* ``django_celery_beat_periodictask``: ``name`` (unique), ``task``, ``args`` and ``kwargs`` (JSON
  text), ``queue``, ``exchange``, ``routing_key``, ``headers`` (JSON text), ``priority``,
  ``expires`` (a time), ``expire_seconds``, ``one_off``, ``start_time``, ``enabled``,
  ``last_run_at``, ``total_run_count``, ``date_changed``, ``description``, and one of
  ``interval_id``, ``crontab_id``, ``solar_id``, ``clocked_id``.
* ``…_crontabschedule``: ``minute``, ``hour``, ``day_of_week``, ``day_of_month``,
  ``month_of_year`` (crontab fields, 0 = Sunday) and ``timezone`` (an IANA name; the crontab runs
  in it).
* ``…_intervalschedule``: ``every`` and ``period`` (``days``, ``hours``, ``minutes``,
  ``seconds``, ``microseconds``).
* ``…_clockedschedule``: ``clocked_time``, a one-off (its task has ``one_off`` set).
* ``…_solarschedule``: ``event``, ``latitude``, ``longitude``.

Its scheduler runs an interval from the task's last run (``last_run_at``, else ``date_changed``)
and, with a ``start_time``, not before it; a task past ``expires`` is disabled; a one-off task is
disabled after its first run. Times are stored in UTC (Django's ``USE_TZ``).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

from celery import schedules
from sqlalchemy import MetaData, Table, create_engine, inspect, select
from sqlalchemy.engine import Engine, make_url

from celery_quartz.errors import ConfigurationError
from celery_quartz.importers import SourceEntry, read_crontab

#: The group the imported jobs are stored in.
GROUP = "django_celery_beat"
PREFIX = "django_celery_beat_"
_PERIODS = ("days", "hours", "minutes", "seconds", "microseconds")


def open_source(url: str) -> Engine:
    """An engine on django-celery-beat's database; raises ConfigurationError for a bad URL."""
    try:
        parsed = make_url(url)
    except Exception as exc:
        from celery_quartz.store.engine import redact_url

        raise ConfigurationError(
            f"--url {redact_url(url)!r} is not a SQLAlchemy URL: {exc}"
        ) from None
    try:
        return create_engine(parsed)
    except Exception as exc:
        raise ConfigurationError(
            f"--url {parsed.render_as_string(hide_password=True)!r}: {exc}"
        ) from None


def read_entries(engine: Engine, now: datetime) -> list[SourceEntry]:
    """Every periodic task in the database, as :class:`SourceEntry` values."""
    names = set(inspect(engine).get_table_names())
    if f"{PREFIX}periodictask" not in names:
        raise ConfigurationError(
            f"no table {PREFIX}periodictask at "
            f"{engine.url.render_as_string(hide_password=True)!r}: is this django-celery-beat's "
            f"database, and are its migrations applied?"
        )
    metadata = MetaData()
    tables = {
        kind: Table(f"{PREFIX}{kind}", metadata, autoload_with=engine)
        for kind in (
            "periodictask",
            "crontabschedule",
            "intervalschedule",
            "clockedschedule",
            "solarschedule",
        )
        if f"{PREFIX}{kind}" in names
    }
    with engine.connect() as conn:
        rows = {
            kind: {r.id: r._mapping for r in conn.execute(select(table))}
            for kind, table in tables.items()
        }
    tasks = sorted(rows["periodictask"].values(), key=lambda r: r["name"])
    return [_entry(task, rows, now) for task in tasks]


def _entry(task: Any, rows: dict[str, dict[int, Any]], now: datetime) -> SourceEntry:
    name = task["name"]
    one_off = bool(task.get("one_off"))
    enabled = bool(task["enabled"]) and not (one_off and (task.get("total_run_count") or 0) > 0)
    expires = _aware(task.get("expires"))
    start_time = _aware(task.get("start_time"))
    options: dict[str, Any] = {}
    for option in ("queue", "exchange", "routing_key"):
        if task.get(option):
            options[option] = task[option]
    if task.get("priority") is not None:
        options["priority"] = task["priority"]
    if expires is not None:
        options["expires"] = expires.isoformat()
    elif task.get("expire_seconds"):
        options["expires"] = task["expire_seconds"]
    skip: str | None = None
    args, kwargs, headers = [], {}, {}
    try:
        args = json.loads(task.get("args") or "[]")
        kwargs = json.loads(task.get("kwargs") or "{}")
        headers = json.loads(task.get("headers") or "{}")
    except ValueError as exc:
        skip = f"args, kwargs or headers are not JSON: {exc}"
    if not skip and (not isinstance(args, list) or not isinstance(kwargs, dict)):
        skip = "args must be a JSON list and kwargs a JSON object"
    if not skip and isinstance(headers, dict) and headers:
        skip = (
            f"custom message headers {sorted(headers)} cannot be carried: celery-quartz "
            f"sets a firing's headers itself"
        )
    schedule, zone, first_fire, reason = _schedule(task, rows, now)
    if first_fire is not None and start_time is not None and task.get("last_run_at") is None:
        # With a start time and no run yet, its scheduler runs the task at the start time (it
        # dates the last run 30 years back); after a run, the start time only holds runs back.
        first_fire = start_time
    return SourceEntry(
        name=name,
        task=task["task"],
        schedule=schedule,
        time_zone=zone,
        args=args if isinstance(args, list) else [],
        kwargs=kwargs if isinstance(kwargs, dict) else {},
        options=options,
        enabled=enabled,
        one_off=one_off and not isinstance(schedule, datetime),
        first_fire=first_fire,
        not_before=start_time,
        end_at=expires,
        description=task.get("description") or f"django-celery-beat task {name}",
        skip_reason=skip or reason,
    )


def _schedule(
    task: Any, rows: dict[str, dict[int, Any]], now: datetime
) -> tuple[Any, str, datetime | None, str | None]:
    """(schedule, its zone, an interval's next run, why it is skipped)."""
    if task.get("crontab_id") is not None:
        c = rows["crontabschedule"][task["crontab_id"]]
        fields = {
            k: c[k] for k in ("minute", "hour", "day_of_week", "day_of_month", "month_of_year")
        }
        zone = str(c.get("timezone") or "UTC")
        crontab, unreadable = read_crontab(fields)
        return crontab, zone, None, unreadable
    if task.get("interval_id") is not None:
        i = rows["intervalschedule"][task["interval_id"]]
        if i["period"] not in _PERIODS:
            return None, "UTC", None, f"unknown interval period {i['period']!r}"
        every = timedelta(**{i["period"]: i["every"]})
        # django-celery-beat counts from the last run, else from when the task last changed.
        last = _aware(task.get("last_run_at")) or _aware(task.get("date_changed")) or now
        return schedules.schedule(every), "UTC", last + every, None
    if task.get("clocked_id") is not None and "clockedschedule" in rows:
        clocked = _aware(rows["clockedschedule"][task["clocked_id"]]["clocked_time"])
        return clocked, "UTC", None, None
    if task.get("solar_id") is not None and "solarschedule" in rows:
        s = rows["solarschedule"][task["solar_id"]]
        return (
            None,
            "UTC",
            None,
            f"solar schedule ({s['event']}) cannot be represented: the event moves every day and "
            f"no Quartz trigger kind follows the sun",
        )
    return None, "UTC", None, "has no schedule"


def _aware(value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)  # Django stores UTC (USE_TZ)
    return value.astimezone(timezone.utc)
