"""The shop's periodic tasks, under the names django-celery-beat's rows give them. Each run is
noted in var/ledger.db with the occurrence celery-quartz fired, so the demo can show it."""

import json
import sqlite3
import time
from typing import Any

from celery_quartz import current_context
from proj.celery import app, var

LEDGER = var / "ledger.db"


def _record(task: str, args: Any) -> None:
    ctx = current_context()
    if ctx is None:  # called directly, not fired by celery-quartz
        return
    with sqlite3.connect(LEDGER, timeout=30) as db:
        db.execute(
            "CREATE TABLE IF NOT EXISTS ledger (task TEXT, trigger_group TEXT, trigger_name TEXT,"
            " scheduled REAL, started REAL, fired_by TEXT, worker TEXT, args TEXT)"
        )
        db.execute(
            "INSERT INTO ledger VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                task,
                ctx.trigger_key.group,
                ctx.trigger_key.name,
                ctx.scheduled_fire_time.timestamp(),
                time.time(),
                ctx.fired_by,
                ctx.worker_name,
                json.dumps(args),
            ),
        )


@app.task(name="shop.tasks.send_digest")
def send_digest(edition: str = "morning") -> None:
    _record("shop.tasks.send_digest", {"edition": edition})


@app.task(name="shop.tasks.sync_inventory")
def sync_inventory(warehouse: str) -> None:
    _record("shop.tasks.sync_inventory", [warehouse])


@app.task(name="shop.tasks.close_month")
def close_month() -> None:
    _record("shop.tasks.close_month", [])


@app.task(name="shop.tasks.rebuild_search_index")
def rebuild_search_index() -> None:
    _record("shop.tasks.rebuild_search_index", [])


@app.task(name="shop.tasks.announce_launch")
def announce_launch(channel: str) -> None:
    _record("shop.tasks.announce_launch", [channel])


@app.task(name="shop.tasks.garden_lights")
def garden_lights(on: bool) -> None:
    _record("shop.tasks.garden_lights", [on])
