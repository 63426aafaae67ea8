"""The service's tasks. Each one writes what ran, where, when and how it ended to a ledger (an
SQLite table), which demo.py reads to check the cluster's promises."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

from celery_quartz import current_context
from proj.celery import app, here

LEDGER = os.environ.get("SERVICE_LEDGER", str(here / "var" / "ledger.db"))
# This machine's own disk: the ingest job's files are on one node only.
NODE_DIR = Path(os.environ.get("SERVICE_NODE_DIR", here / "var" / "nodes" / socket.gethostname()))
# The upstream fails the first attempts of every occurrence (its retries 0 and 1, say).
FLAKY_FAILURES = int(os.environ.get("SERVICE_FLAKY_FAILURES", "2"))


class UpstreamUnavailable(ConnectionError):
    """The partner API answered 503."""


@contextlib.contextmanager
def ledger(note: str = "") -> Iterator[dict[str, str]]:
    """Record one run: its job, trigger, occurrence, attempt, worker, start, end and outcome.
    The body may set ``entry["note"]``."""
    ctx = current_context()
    entry = {"note": note}
    started = time.time()
    outcome = "failed"
    try:
        yield entry
        outcome = "ok"
    finally:
        if ctx is not None:
            origin = ctx.recovering_trigger_key or ctx.trigger_key
            with sqlite3.connect(LEDGER, timeout=30) as db:
                db.execute(
                    "CREATE TABLE IF NOT EXISTS ledger (job TEXT, trigger TEXT, scheduled REAL,"
                    " attempt INTEGER, started REAL, ended REAL, outcome TEXT, fired_by TEXT,"
                    " worker TEXT, fire_instance_id TEXT, note TEXT)"
                )
                db.execute(
                    "INSERT INTO ledger VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        str(ctx.job_key),
                        str(origin),
                        ctx.scheduled_fire_time.timestamp(),
                        ctx.retry_attempt,
                        started,
                        time.time(),
                        outcome,
                        ctx.fired_by,
                        ctx.worker_name,
                        ctx.fire_instance_id,
                        entry["note"],
                    ),
                )


@app.task(name="proj.tasks.report")
def report() -> str:
    """Build a report (here: pretend to); the trigger's data says which edition."""
    ctx = current_context()
    kind = ctx.merged_job_data.get("edition", "daily") if ctx is not None else "daily"
    with ledger(kind):
        time.sleep(0.2)
    return f"{kind} report done"


@app.task(name="proj.tasks.reindex")
def reindex(index: str) -> str:
    """Rebuild a search index: heavy on the search cluster, so never two at once."""
    with ledger(index):
        time.sleep(float(os.environ.get("SERVICE_REINDEX_SECONDS", "1.0")))
    return f"{index} re-indexed"


@app.task(name="proj.tasks.ingest")
def ingest() -> int:
    """Move the files dropped in this node's inbox to its archive, counting their lines."""
    with ledger() as entry:
        inbox, archive = NODE_DIR / "inbox", NODE_DIR / "ingested"
        if not inbox.is_dir():
            entry["note"] = f"no inbox on this node ({NODE_DIR.name})"
            return 0
        archive.mkdir(parents=True, exist_ok=True)
        files = sorted(p for p in inbox.iterdir() if p.suffix == ".csv")
        lines = 0
        for path in files:
            lines += len(path.read_text().splitlines())
            shutil.move(str(path), archive / path.name)
        entry["note"] = f"{len(files)} files, {lines} lines"
        return len(files)


@app.task(name="proj.tasks.sync_partner")
def sync_partner() -> str:
    """Push the day's orders to a partner API that is often down: fails the first attempts of
    each occurrence; the trigger's retry policy runs it again with growing waits."""
    ctx = current_context()
    attempt = ctx.retry_attempt if ctx is not None else 0
    with ledger(f"attempt {attempt}"):
        if attempt < FLAKY_FAILURES:
            raise UpstreamUnavailable(f"partner API: 503 Service Unavailable (attempt {attempt})")
    return "orders pushed"
