"""The quickstart's tasks. Each one notes what ran, where, and for which occurrence."""

import os
import sqlite3
import time
from datetime import datetime, timezone

from celery_quartz import current_context
from proj.celery import app, here

LEDGER = os.environ.get("QUICKSTART_LEDGER", str(here / "var" / "ledger.db"))


def _record() -> None:
    ctx = current_context()
    if ctx is None:
        return
    with sqlite3.connect(LEDGER, timeout=30) as db:
        db.execute(
            "CREATE TABLE IF NOT EXISTS ledger (trigger_group TEXT, trigger_name TEXT,"
            " scheduled REAL, started REAL, fired_by TEXT, worker TEXT, fire_instance_id TEXT)"
        )
        db.execute(
            "INSERT INTO ledger VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                ctx.trigger_key.group,
                ctx.trigger_key.name,
                ctx.scheduled_fire_time.timestamp(),
                time.time(),
                ctx.fired_by,
                ctx.worker_name,
                ctx.fire_instance_id,
            ),
        )


@app.task(name="proj.tasks.refresh")
def refresh() -> str:
    _record()
    return f"cache refreshed at {datetime.now(timezone.utc).isoformat()}"


@app.task(name="proj.tasks.nightly")
def nightly() -> None:
    _record()


@app.task(name="proj.tasks.reindex")
def reindex() -> None:
    _record()


@app.task(name="proj.tasks.report")
def report(period: str = "day") -> str:
    _record()
    ctx = current_context()
    return f"{period} report for the occurrence at {ctx.scheduled_fire_time if ctx else '?'}"
