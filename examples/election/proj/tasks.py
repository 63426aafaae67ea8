"""The example's one task: it notes which occurrence ran, so the demo can count them."""

import sqlite3
import time

from celery_quartz import current_context
from proj.celery import app, here

LEDGER = here / "var" / "ledger.db"


@app.task(name="proj.tasks.tick")
def tick() -> None:
    ctx = current_context()
    if ctx is None:
        return
    with sqlite3.connect(LEDGER, timeout=30) as db:
        db.execute(
            "CREATE TABLE IF NOT EXISTS ledger"
            " (scheduled REAL, started REAL, fire_instance_id TEXT)"
        )
        db.execute(
            "INSERT INTO ledger VALUES (?, ?, ?)",
            (ctx.scheduled_fire_time.timestamp(), time.time(), ctx.fire_instance_id),
        )
