"""The service demo: a three-node cluster (three schedulers, three workers) running a small
service's jobs, then a summary of what ran where and an OK/FAILED verdict.

    make service-demo     # from the repository root; or: python demo.py [--seconds 30]

Three "machines" are simulated on this one: app-1, app-2 and files-1, each with a scheduler
(`celery beat -S celery_quartz.Scheduler`) and a worker. files-1 holds the files the ingest job
reads. The jobs:

- reports: a sales report at 02:00 Europe/Helsinki every night, and a preview every 5 s
  (quartz_jobs.xml);
- re-index: two indexes every 4 s in the execution group "reindex", one at a time cluster-wide
  (quartz_jobs.xml; the limit in proj/celery.py);
- ingest: every 4 s, pinned to the worker ingest@files-1 (scheduled from code, below, once
  the schedulers run);
- partner sync: every 12 s, a flaky call retried with an exponential retry policy (from code).

On the embedded default (an SQLite store and Celery's filesystem broker under ./var, no servers);
BROKER_URL and QUARTZ_STORE_URL choose real ones. The tasks write a ledger (var/ledger.db) that
the summary reads. Exit code 1 when a check fails.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter, defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

HERE = Path(__file__).resolve().parent
VAR = HERE / "var"
# The machine that holds the ingest job's files, and the name of its worker.
FILES_NODE = "files-1"
INGEST_WORKER = os.environ.get("INGEST_NODE", f"ingest@{FILES_NODE}")
# Each simulated machine: its scheduler's instance id, its worker's node name and queues.
NODES = [
    ("app-1", "worker@app-1", "celery,reindex"),
    ("app-2", "worker@app-2", "celery,reindex"),
    (FILES_NODE, INGEST_WORKER, "celery"),
]
FLAKY_EVERY = 12.0
INGEST_EVERY = 4.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="how long the cluster runs")
    args = parser.parse_args()

    shutil.rmtree(VAR, ignore_errors=True)
    VAR.mkdir()
    # PYTHONFAULTHANDLER: a process that does not stop when told is asked for its stacks (stop()).
    env = {
        **os.environ,
        "PYTHONPATH": str(HERE),
        "SERVICE_DIR": str(HERE),
        "PYTHONFAULTHANDLER": "1",
    }
    os.environ.update(env)
    sys.path.insert(0, str(HERE))
    inbox = VAR / "nodes" / FILES_NODE / "inbox"
    inbox.mkdir(parents=True)

    celery = [sys.executable, "-m", "celery", "-A", "proj"]
    logs = []

    def start(name: str, argv: list[str], **extra: str) -> subprocess.Popen[bytes]:
        log = open(VAR / f"{name}.log", "wb")  # noqa: SIM115 - closed at the end
        logs.append(log)
        return subprocess.Popen(
            [*celery, *argv],
            cwd=HERE,
            env={**env, **extra},
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    workers = {
        f"worker-{machine}": start(
            f"worker-{machine}",
            ["worker", "-l", "info", "-c", "2", "-n", node, "-Q", queues],
            SERVICE_NODE_DIR=str(VAR / "nodes" / machine),
        )
        for machine, node, queues in NODES
    }
    beats: dict[str, subprocess.Popen[bytes]] = {}
    stuck: list[str] = []
    try:
        wait_for("worker", {node for _, node, _ in NODES}, timeout=90)
        loaded = datetime.now(timezone.utc)
        load_file()
        beats = {
            f"beat-{machine}": start(
                f"beat-{machine}",
                [
                    "beat",
                    "-S",
                    "celery_quartz.Scheduler",
                    "-l",
                    "info",
                    "--pidfile=",
                    "-s",
                    str(VAR / f"beat-{machine}-schedule"),
                ],
                QUARTZ_INSTANCE_ID=machine,
            )
            for machine, _, _ in NODES
        }
        wait_for("scheduler", {machine for machine, _, _ in NODES}, timeout=90)
        schedule_from_code()
        print(f"running {args.seconds:.0f}s")
        # An upstream system drops a file on files-1 every 3 s during the first half.
        dropped = 0
        deadline = time.monotonic() + args.seconds
        next_drop = time.monotonic()
        while time.monotonic() < deadline:
            if next_drop <= time.monotonic() and time.monotonic() < deadline - args.seconds / 2:
                dropped += 1
                rows = "\n".join(f"order-{dropped}-{n},{n * 10}" for n in range(dropped + 2))
                part = inbox / f"orders-{dropped:03}.part"
                part.write_text(rows + "\n")
                part.rename(part.with_suffix(".csv"))  # whole files only
                next_drop += 3.0
            time.sleep(0.2)
        ended = datetime.now(timezone.utc)
    finally:
        stuck += stop(beats, timeout=30)
        if beats:
            drain(timeout=20)
        stuck += stop(workers, timeout=30)
        for log in logs:
            log.close()
    verdict = summarize(loaded, ended, dropped)
    if stuck:
        for name in stuck:
            tail = (VAR / f"{name}.log").read_text(errors="replace").splitlines()[-60:]
            print(f"\n--- the end of {name}.log ---", *tail, sep="\n")
        print(f"\nFAILED: did not stop when told (SIGTERM): {', '.join(stuck)}")
        return 1
    return verdict


def stop(procs: dict[str, subprocess.Popen[bytes]], timeout: float) -> list[str]:
    """Send SIGTERM to every process and wait for all of them, ``timeout`` seconds in all. One
    still running then writes its threads' stacks to its log (SIGABRT, with faulthandler on) and
    ends; the names of those are returned."""
    for proc in procs.values():
        proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    stuck = []
    for name, proc in procs.items():
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            stuck.append(name)
            proc.send_signal(signal.SIGABRT)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return stuck


def wait_for(kind: str, names: set[str], timeout: float) -> None:
    """Until every one of ``names`` (workers or schedulers) has checked in. A pin naming a worker
    not yet checked in would send the ingest job's first firings to any worker; the jobs from
    code start once the schedulers run, so that their first occurrences are not late."""
    from proj.celery import app

    from celery_quartz import Quartz

    quartz = Quartz(app)
    give_up = time.monotonic() + timeout
    try:
        while True:
            nodes = quartz.store.list_nodes()
            live = {n.instance_name for n in nodes if n.kind == kind and n.alive}
            if names <= live:
                print(f"{kind}s checked in: {', '.join(sorted(names))}")
                return
            if time.monotonic() > give_up:
                raise SystemExit(f"{kind}s not checked in after {timeout:.0f}s: {names - live}")
            time.sleep(0.5)
    finally:
        quartz.store.dispose()


def drain(timeout: float) -> None:
    """Until the workers have run what the stopped schedulers published (no firing left
    published or executing), so that the ledger holds every occurrence fired."""
    from proj.celery import app

    from celery_quartz import Quartz

    quartz = Quartz(app)
    give_up = time.monotonic() + timeout
    try:
        while time.monotonic() < give_up:
            firings = quartz.store.list_firings(limit=100).items
            if not [f for f in firings if f.state in ("FIRED", "PUBLISHED", "EXECUTING")]:
                return
            time.sleep(0.5)
        print(f"firings still in flight after {timeout:.0f}s")
    finally:
        quartz.store.dispose()


def load_file() -> None:
    """The scheduling file, loaded before the schedulers start (``celery -A proj quartz load
    quartz_jobs.xml`` does the same): one transaction, and a second load changes nothing."""
    from proj.celery import app

    from celery_quartz import Quartz
    from celery_quartz.scheduling_files import load_scheduling_files

    quartz = Quartz(app)
    plan = load_scheduling_files(app, quartz.store, [HERE / "quartz_jobs.xml"])
    print(f"loaded quartz_jobs.xml: {plan.summary()}")
    quartz.store.dispose()


def schedule_from_code() -> None:
    """The jobs the application schedules itself, with the ``Quartz`` client: the ingest, pinned
    to the worker holding the files, and the partner sync with its retry policy."""
    from proj.celery import app

    from celery_quartz import (
        Job,
        JobKey,
        PreferredNode,
        Quartz,
        RetryPolicy,
        SimpleTrigger,
        TriggerKey,
    )

    quartz = Quartz(app)
    soon = datetime.now(timezone.utc) + timedelta(seconds=1)
    quartz.schedule_jobs(
        [
            (
                Job(key=JobKey("orders", "ingest"), task="proj.tasks.ingest"),
                [
                    SimpleTrigger(
                        key=TriggerKey("orders", "ingest"),
                        start_at=soon,
                        repeat_interval=timedelta(seconds=INGEST_EVERY),
                        repeat_count=-1,
                        # The files are on that machine: its worker runs every firing while it
                        # checks in (a pin fails over to any worker only when it stops).
                        preferred_node=PreferredNode.for_node(INGEST_WORKER),
                    )
                ],
            ),
            (
                Job(key=JobKey("partner-sync", "integrations"), task="proj.tasks.sync_partner"),
                [
                    SimpleTrigger(
                        key=TriggerKey("partner-sync", "integrations"),
                        start_at=soon,
                        repeat_interval=timedelta(seconds=FLAKY_EVERY),
                        repeat_count=-1,
                        # A failed run is run again after 1 s, 2 s, 4 s, 8 s (at most 4 retries).
                        retry_policy=RetryPolicy.exponential(
                            max_attempts=4,
                            initial_delay=timedelta(seconds=1),
                            factor=2,
                            max_delay=timedelta(seconds=8),
                        ),
                    )
                ],
            ),
        ],
        replace=True,
    )
    print("scheduled from code: ingest.orders (pinned), integrations.partner-sync (retried)")
    quartz.store.dispose()


def summarize(loaded: datetime, ended: datetime, dropped: int) -> int:
    from proj.celery import app
    from proj.tasks import FLAKY_FAILURES

    from celery_quartz import Quartz, TriggerKey

    db = sqlite3.connect(VAR / "ledger.db")
    rows = db.execute(
        "SELECT job, trigger, scheduled, attempt, started, ended, outcome, fired_by, worker, note"
        " FROM ledger ORDER BY started"
    ).fetchall()
    failures: list[str] = []

    def check(ok: bool, what: str) -> None:
        print(f"  [{'ok' if ok else 'FAILED'}] {what}")
        if not ok:
            failures.append(what)

    def hms(epoch: float) -> str:
        return datetime.fromtimestamp(epoch, timezone.utc).strftime("%H:%M:%S.%f")[:12]

    print(f"\n{'job':26} {'runs':>4}  {'ran on (worker: runs)':52} fired by (scheduler: runs)")
    by_job: dict[str, list[tuple]] = defaultdict(list)
    for r in rows:
        by_job[r[0]].append(r)
    for job, runs in sorted(by_job.items()):
        workers = ", ".join(f"{w}: {n}" for w, n in sorted(Counter(r[8] for r in runs).items()))
        fired = ", ".join(f"{s}: {n}" for s, n in sorted(Counter(r[7] for r in runs).items()))
        print(f"{job:26} {len(runs):4}  {workers:52} {fired}")

    quartz = Quartz(app)
    print("\nchecks")
    occurrences = Counter((r[1], round(r[2], 3), r[3]) for r in rows)
    duplicates = sum(n - 1 for n in occurrences.values() if n > 1)
    check(duplicates == 0, f"no occurrence ran twice across the 3 schedulers ({len(rows)} runs)")
    check(len({r[7] for r in rows}) > 1, "more than one scheduler fired: the three share the work")

    # Reports: the nightly trigger's next fire time, and every preview due ran.
    nightly = quartz.get_trigger(TriggerKey("nightly", "reports"))
    if nightly is not None and nightly.next_fire_time is not None:
        at = nightly.next_fire_time
        local = at.astimezone(ZoneInfo("Europe/Helsinki"))
        print(f"  reports.nightly next fires {local:%Y-%m-%d %H:%M %Z} = {at:%Y-%m-%d %H:%M} UTC")
    check(
        nightly is not None and nightly.next_fire_time is not None,
        "the nightly report is scheduled (0 0 2 * * ? in Europe/Helsinki)",
    )
    preview = quartz.get_trigger(TriggerKey("preview", "reports"))
    due = set()
    if preview is not None and preview.start_at is not None:
        t = preview.next_fire_time_after(max(preview.start_at, loaded))
        while t is not None and t <= ended - timedelta(seconds=3):
            due.add(round(t.timestamp(), 3))
            t = preview.next_fire_time_after(t)
    ran = {round(r[2], 3) for r in rows if r[1] == "reports.preview"}
    check(
        bool(due) and due <= ran,
        f"every report preview due ran: {len(due & ran)} of {len(due)} (every 5 s, Helsinki cron)",
    )

    # Re-index: never two at once, whatever worker ran them.
    reindex = sorted((r for r in rows if r[0].startswith("reindex.")), key=lambda r: r[4])
    overlaps, gaps, busy_until = [], [], None
    for r in reindex:  # by start: each must start after every earlier one ended
        if busy_until is not None:
            gaps.append(r[4] - busy_until[5])
            if r[4] < busy_until[5]:
                overlaps.append(r)
                print(
                    f"    overlap: {r[0]} started {hms(r[4])}, {busy_until[0]} ran until "
                    f"{hms(busy_until[5])}"
                )
        if busy_until is None or r[5] > busy_until[5]:
            busy_until = r
    waits = sorted(r[4] - r[2] for r in reindex)
    jobs = {r[0] for r in reindex}
    check(
        not overlaps and len(jobs) == 2,
        f"re-index never overlapped: {len(reindex)} runs of {len(jobs)} indexes on "
        f"{len({r[8] for r in reindex})} workers, one at a time"
        + (
            f" (smallest gap between two {min(gaps) * 1000:.0f} ms, latest start "
            f"{waits[-1]:.1f} s after its due time)"
            if gaps
            else ""
        ),
    )

    # Ingest: only on the pinned worker, and every file dropped was ingested.
    ingest = [r for r in rows if r[0] == "ingest.orders"]
    elsewhere = [r for r in ingest if r[8] != INGEST_WORKER]
    archived = len(list((VAR / "nodes" / FILES_NODE / "ingested").glob("*.csv")))
    check(
        bool(ingest) and not elsewhere,
        f"ingest ran only on {INGEST_WORKER}: {len(ingest) - len(elsewhere)} of {len(ingest)} runs",
    )
    check(
        dropped > 0 and archived == dropped,
        f"every file dropped on {FILES_NODE} was ingested there: {archived} of {dropped}",
    )

    # The flaky partner sync: each occurrence fails FLAKY_FAILURES times, then a retry succeeds.
    by_occurrence: dict[float, list[tuple]] = defaultdict(list)
    for r in rows:
        if r[0] == "integrations.partner-sync":
            by_occurrence[round(r[2], 3)].append(r)
    settled, unsettled = 0, []
    for scheduled, attempts in sorted(by_occurrence.items()):
        attempts.sort(key=lambda r: r[3])
        story = ", ".join(
            f"attempt {r[3]} {r[6]} +{r[4] - scheduled:.1f}s on {r[8]}" for r in attempts
        )
        print(f"    partner-sync {hms(scheduled)}: {story}")
        outcomes = [(r[3], r[6]) for r in attempts]
        if outcomes == [(n, "failed") for n in range(FLAKY_FAILURES)] + [(FLAKY_FAILURES, "ok")]:
            settled += 1
        elif loaded.timestamp() <= scheduled < (ended - timedelta(seconds=8)).timestamp():
            # It had the time to reach its success. (An earlier occurrence is a retry left in
            # the store by an earlier run on the same database, its first attempts not here.)
            unsettled.append(hms(scheduled))
    check(
        settled > 0 and not unsettled,
        f"the flaky partner sync succeeded at retry {FLAKY_FAILURES} after {FLAKY_FAILURES} "
        f"failures in {settled} of {len(by_occurrence)} occurrences (waits 1 s, 2 s, ...)"
        + (f"; not settled: {', '.join(unsettled)}" if unsettled else ""),
    )
    quartz.store.dispose()

    if failures:
        print("\nFAILED: " + "; ".join(failures))
        return 1
    print("\nOK: every check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
