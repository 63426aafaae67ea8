"""Migrating a django-celery-beat project to celery-quartz, on the embedded default (an SQLite
store, Celery's filesystem broker; no servers), with the commands a migration runs:

    python demo.py        # from this folder; about 15 s

1. ``python source.py var/django.sqlite3``: django-celery-beat's tables and a shop's periodic
   tasks, standing in for the Django project's database;
2. ``celery -A proj quartz schema upgrade``: celery-quartz's tables;
3. ``celery -A proj quartz import django-celery-beat --url … --dry-run``, then without
   ``--dry-run``, then once more (nothing changes);
4. ``celery -A proj quartz triggers`` and ``… fire-times``: the imported triggers;
5. the old scheduler is stopped (here it never ran); a worker and ``celery -A proj beat`` (the
   project's ``beat_scheduler`` is ``celery_quartz.Scheduler``) start, and the interval task due
   since the old scheduler's last run fires.

Each step's command and output are printed; the checks at the end print OK, or FAILED and exit 1.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
VAR = HERE / "var"
SOURCE_URL = "sqlite:///var/django.sqlite3"  # relative to this folder, where every command runs
GROUP = "django_celery_beat"
IMPORTED = [
    "close month",
    "daily digest",
    "launch announcement",
    "rebuild search index",
    "sync inventory",
]
SKIPPED = ["export csv (legacy)", "garden lights at sunset"]
FIRED = "sync inventory"  # every 10 s, last run by the old scheduler 5 minutes ago
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(p for p in [str(HERE), os.environ.get("PYTHONPATH")] if p),
    "MIGRATION_DIR": str(HERE),
}


def shown(argv: Sequence[str]) -> str:
    """The command as a user types it."""
    return " ".join(f'"{a}"' if " " in a else a for a in argv)


def run(*argv: str) -> str:
    """Run ``celery …`` or ``python …`` here, print it and its output; exit on failure."""
    program = [sys.executable, "-m", "celery"] if argv[0] == "celery" else [sys.executable]
    print(f"\n$ {shown(argv)}", flush=True)
    result = subprocess.run(
        [*program, *argv[1:]], cwd=HERE, env=ENV, capture_output=True, text=True, timeout=120
    )
    print(result.stdout.rstrip(), flush=True)
    if result.returncode != 0:
        print(result.stderr.rstrip())
        raise SystemExit(f"FAILED: `{shown(argv)}` exited with {result.returncode}")
    return result.stdout


def summary(output: str) -> dict[str, int]:
    """The counts of an import's last line: added, updated, removed, unchanged, skipped."""
    return {kind: int(n) for n, kind in re.findall(r"(\d+) (\w+)", output.splitlines()[-1])}


def main() -> int:
    shutil.rmtree(VAR, ignore_errors=True)
    os.environ.update(ENV)
    sys.path.insert(0, str(HERE))
    failures: list[str] = []

    def check(ok: bool, what: str) -> None:
        print(f"  [{'ok' if ok else 'FAILED'}] {what}")
        if not ok:
            failures.append(what)

    run("python", "source.py", "var/django.sqlite3")
    run("celery", "-A", "proj", "quartz", "schema", "upgrade")
    importing = ["celery", "-A", "proj", "quartz", "import", "django-celery-beat"]
    dry = run(*importing, "--url", SOURCE_URL, "--dry-run")
    stored_after_dry_run = jobs()
    first = run(*importing, "--url", SOURCE_URL)
    stored = jobs()
    paused = trigger_state("rebuild search index", f"{GROUP}.disabled")
    again = run(*importing, "--url", SOURCE_URL)
    run("celery", "-A", "proj", "quartz", "triggers")
    preview = ["fire-times", "daily digest", "-g", GROUP, "-n", "3", "--tz", "Europe/Helsinki"]
    run("celery", "-A", "proj", "quartz", *preview)
    fired = fire_one()

    print("\nchecks")
    added = sorted(line[2:] for line in dry.splitlines() if line.startswith("+ "))
    check(
        added == IMPORTED and stored_after_dry_run == [],
        f"the dry run listed {len(added)} tasks to add and wrote nothing",
    )
    skipped = sorted(re.findall(r"^! skipped (.+?): ", first, re.M))
    check(
        summary(first)["added"] == len(IMPORTED) and stored == IMPORTED,
        f"the import added {len(stored)} jobs and triggers in the group {GROUP}",
    )
    check(skipped == SKIPPED, f"it skipped, each with its reason: {', '.join(skipped)}")
    check(paused == "PAUSED", f"the disabled task's trigger is stored {paused} in {GROUP}.disabled")
    counts = summary(again)
    check(
        counts["unchanged"] == len(IMPORTED) and counts["added"] + counts["updated"] == 0,
        "importing again changed nothing",
    )
    check(
        fired is not None and json.loads(fired[3]) == ["warehouse-1"],
        f"beat fired '{FIRED}' and the worker ran it with its args",
    )
    if failures:
        print("\nFAILED: " + "; ".join(failures))
        return 1
    print("\nOK: django-celery-beat's schedule runs on celery-quartz")
    return 0


def jobs() -> list[str]:
    """The names of the jobs stored in the import's group."""
    from proj.celery import app

    from celery_quartz import Quartz

    quartz = Quartz(app)
    try:
        return sorted(key.name for key in quartz.get_job_keys(GROUP))
    finally:
        quartz.store.dispose()


def trigger_state(name: str, group: str) -> str:
    from proj.celery import app

    from celery_quartz import Quartz, TriggerKey

    quartz = Quartz(app)
    try:
        return quartz.get_trigger_state(TriggerKey(name, group))
    finally:
        quartz.store.dispose()


def fire_one(timeout: float = 30.0) -> tuple[float, str, str, str] | None:
    """A worker and one scheduler, until the first run of ``FIRED``: (scheduled, fired by,
    worker, args), or None if it did not run within ``timeout`` seconds."""
    celery = [sys.executable, "-m", "celery", "-A", "proj"]
    worker_argv = ["worker", "-l", "info", "-c", "1", "-n", "worker@%h", "--without-mingle"]
    beat_argv = ["beat", "-l", "info", "--pidfile=", "-s", "var/beat-schedule"]
    print(f"\n$ celery -A proj {' '.join(worker_argv)}     # logs in var/worker.log")
    print(f"$ celery -A proj {' '.join(beat_argv)}     # logs in var/beat.log")
    procs = []
    for name, argv in (("worker", worker_argv), ("beat", beat_argv)):
        with open(VAR / f"{name}.log", "wb") as log:
            procs.append(
                subprocess.Popen(
                    [*celery, *argv], cwd=HERE, env=ENV, stdout=log, stderr=subprocess.STDOUT
                )
            )
    started = time.monotonic()
    row = None
    try:
        while row is None and time.monotonic() - started < timeout:
            time.sleep(0.5)
            row = first_run(FIRED)
    finally:
        for proc in reversed(procs):  # the scheduler first, then the worker
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
    if row is None:
        print(f"'{FIRED}' did not run within {timeout:.0f}s (see var/beat.log, var/worker.log)")
        return None
    scheduled, fired_by, worker, args = row
    at = datetime.fromtimestamp(scheduled, timezone.utc)
    print(
        f"'{FIRED}' ran {time.monotonic() - started:.1f}s after the start: occurrence "
        f"{at:%H:%M:%S} UTC, fired by scheduler {fired_by}, run by {worker} with args {args}"
    )
    return row


def first_run(name: str) -> tuple[float, str, str, str] | None:
    """The first run the tasks recorded of the trigger ``name``, if any yet."""
    ledger = VAR / "ledger.db"
    if not ledger.exists():
        return None
    with sqlite3.connect(ledger, timeout=30) as db:
        try:
            found = db.execute(
                "SELECT scheduled, fired_by, worker, args FROM ledger"
                " WHERE trigger_group = ? AND trigger_name = ? ORDER BY scheduled LIMIT 1",
                (GROUP, name),
            ).fetchone()
        except sqlite3.OperationalError:  # the table is not created yet
            return None
    return None if found is None else (found[0], found[1], found[2], found[3])


if __name__ == "__main__":
    sys.exit(main())
