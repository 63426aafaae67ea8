"""The database being migrated from: django-celery-beat's tables holding a shop's periodic tasks.

    python source.py [var/django.sqlite3]

It stands in for your Django project's database. The tables are the ones django-celery-beat's
migrations create (2.x; on SQLite, Django stores naive UTC times), built here with SQLAlchemy so
that neither Django nor django-celery-beat is needed; the rows are what its admin would have saved.
``celery quartz import django-celery-beat --url …`` reads these tables, and only these.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Boolean,
    Column,
    DateTime,
    ForeignKey,
    Integer,
    MetaData,
    Numeric,
    SmallInteger,
    String,
    Table,
    Text,
    create_engine,
    insert,
)

metadata = MetaData()

crontabschedule = Table(
    "django_celery_beat_crontabschedule",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("minute", String(240), nullable=False),
    Column("hour", String(96), nullable=False),
    Column("day_of_week", String(64), nullable=False),
    Column("day_of_month", String(124), nullable=False),
    Column("month_of_year", String(64), nullable=False),
    Column("timezone", String(63), nullable=False),
)
intervalschedule = Table(
    "django_celery_beat_intervalschedule",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("every", Integer, nullable=False),
    Column("period", String(24), nullable=False),
)
clockedschedule = Table(
    "django_celery_beat_clockedschedule",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("clocked_time", DateTime, nullable=False),
)
solarschedule = Table(
    "django_celery_beat_solarschedule",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("event", String(24), nullable=False),
    Column("latitude", Numeric(9, 6), nullable=False),
    Column("longitude", Numeric(9, 6), nullable=False),
)
periodictask = Table(
    "django_celery_beat_periodictask",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(200), nullable=False, unique=True),
    Column("task", String(200), nullable=False),
    Column("args", Text, nullable=False),
    Column("kwargs", Text, nullable=False),
    Column("queue", String(200)),
    Column("exchange", String(200)),
    Column("routing_key", String(200)),
    Column("expires", DateTime),
    Column("enabled", Boolean, nullable=False),
    Column("last_run_at", DateTime),
    Column("total_run_count", Integer, nullable=False),
    Column("date_changed", DateTime, nullable=False),
    Column("description", Text, nullable=False),
    Column("crontab_id", Integer, ForeignKey(crontabschedule.c.id)),
    Column("interval_id", Integer, ForeignKey(intervalschedule.c.id)),
    Column("solar_id", Integer, ForeignKey(solarschedule.c.id)),
    Column("one_off", Boolean, nullable=False),
    Column("start_time", DateTime),
    Column("priority", Integer),
    Column("headers", Text, nullable=False),
    Column("clocked_id", Integer, ForeignKey(clockedschedule.c.id)),
    Column("expire_seconds", Integer),
)
# Its scheduler's change marker (read by django-celery-beat, not by the importer).
periodictasks = Table(
    "django_celery_beat_periodictasks",
    metadata,
    Column("ident", SmallInteger, primary_key=True),
    Column("last_update", DateTime, nullable=False),
)


def _utc(moment: datetime) -> datetime:
    """As Django stores it with USE_TZ on SQLite: UTC, without an offset."""
    return moment.astimezone(timezone.utc).replace(tzinfo=None)


def _crontab(id: int, timezone: str = "UTC", **fields: str) -> dict[str, Any]:
    """A crontab schedule row; a field not given is ``*``, as django-celery-beat's default."""
    row: dict[str, Any] = dict.fromkeys(
        ("minute", "hour", "day_of_week", "day_of_month", "month_of_year"), "*"
    )
    row.update(fields, id=id, timezone=timezone)
    return row


def _task(name: str, task: str, *, now: datetime, **fields: Any) -> dict[str, Any]:
    """A periodic task row with django-celery-beat's defaults for the fields not given."""
    row: dict[str, Any] = {column.name: None for column in periodictask.c if column.nullable}
    row |= {
        "name": name,
        "task": task,
        "args": "[]",
        "kwargs": "{}",
        "headers": "{}",
        "enabled": True,
        "one_off": False,
        "total_run_count": 0,
        "date_changed": _utc(now - timedelta(days=30)),
        "description": "",
    }
    row.update(fields)
    return row


def create(path: Path, now: datetime) -> int:
    """Create the tables at ``path`` (replacing the file) and the shop's periodic tasks, as they
    stood when the old scheduler was stopped a few minutes before ``now``; returns how many."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    engine = create_engine(f"sqlite:///{path}")
    stopped = now - timedelta(minutes=5)  # the old scheduler's last run
    metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(
            insert(crontabschedule),
            [
                # Weekday mornings, Helsinki time (day of week 0 is Sunday, as in Celery).
                _crontab(1, "Europe/Helsinki", minute="30", hour="8", day_of_week="1-5"),
                # The first of the month at 06:00 UTC.
                _crontab(2, minute="0", hour="6", day_of_month="1"),
                # Nightly at 03:00 UTC.
                _crontab(3, minute="0", hour="3"),
            ],
        )
        conn.execute(insert(intervalschedule), [{"id": 1, "every": 10, "period": "seconds"}])
        launch = (now + timedelta(days=7)).replace(hour=9, minute=0, second=0, microsecond=0)
        conn.execute(insert(clockedschedule), [{"id": 1, "clocked_time": _utc(launch)}])
        conn.execute(
            insert(solarschedule),
            [{"id": 1, "event": "sunset", "latitude": "60.170000", "longitude": "24.940000"}],
        )
        rows = [
            _task(
                "daily digest",
                "shop.tasks.send_digest",
                now=now,
                crontab_id=1,
                kwargs=json.dumps({"edition": "morning"}),
                last_run_at=_utc(now - timedelta(days=1)),
                description="The morning e-mail to subscribers",
            ),
            _task(
                "sync inventory",
                "shop.tasks.sync_inventory",
                now=now,
                interval_id=1,
                args=json.dumps(["warehouse-1"]),
                last_run_at=_utc(stopped),
                total_run_count=8640,
            ),
            _task(
                "close month",
                "shop.tasks.close_month",
                now=now,
                crontab_id=2,
                expire_seconds=3600,
            ),
            _task(
                "rebuild search index",
                "shop.tasks.rebuild_search_index",
                now=now,
                crontab_id=3,
                enabled=False,
            ),
            _task(
                "launch announcement",
                "shop.tasks.announce_launch",
                now=now,
                clocked_id=1,
                one_off=True,
                args=json.dumps(["newsletter"]),
            ),
            _task(
                "garden lights at sunset",
                "shop.tasks.garden_lights",
                now=now,
                solar_id=1,
                args=json.dumps([True]),
            ),
            _task("export csv (legacy)", "legacy.tasks.export_csv", now=now, crontab_id=3),
        ]
        conn.execute(insert(periodictask), rows)
        conn.execute(insert(periodictasks), [{"ident": 1, "last_update": _utc(stopped)}])
    engine.dispose()
    return len(rows)


def main() -> None:
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "var/django.sqlite3")
    count = create(path, datetime.now(timezone.utc))
    print(f"{path}: django-celery-beat's tables with {count} periodic tasks")


if __name__ == "__main__":
    main()
