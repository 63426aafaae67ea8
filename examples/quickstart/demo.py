"""The quick-start demo: three schedulers and one worker on the embedded default, one scheduler
killed midway, and a summary of what fired where.

    make demo            # from the repository root; or: python demo.py [--seconds 20]

Uses an SQLite store and Celery's filesystem broker under ./var (no servers). Prints every
execution (which scheduler fired it, which worker ran it, how late), then: occurrences due vs
executed, duplicates, missing, and lateness.
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
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
VAR = HERE / "var"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="how long the cluster runs")
    parser.add_argument("--schedulers", type=int, default=3, help="scheduler processes to start")
    args = parser.parse_args()

    shutil.rmtree(VAR, ignore_errors=True)
    VAR.mkdir()
    env = dict(os.environ)
    env.update(
        PYTHONPATH=str(HERE),
        QUICKSTART_DIR=str(HERE),
        QUARTZ_CHECKIN_INTERVAL="2",
        QUARTZ_CHECKIN_THRESHOLD="2",
    )
    os.environ.update(env)
    sys.path.insert(0, str(HERE))
    schedule_from_code()

    celery = [sys.executable, "-m", "celery", "-A", "proj"]
    logs = []

    def start(name: str, *argv: str) -> subprocess.Popen[bytes]:
        log = open(VAR / f"{name}.log", "wb")  # noqa: SIM115 - closed at the end
        logs.append(log)
        return subprocess.Popen(
            [*celery, *argv], cwd=HERE, env=env, stdout=log, stderr=subprocess.STDOUT
        )

    worker = start(
        "worker", "worker", "-c", "4", "-l", "info", "-n", "demo@%h", "-Q", "celery,reindex"
    )
    beats = [
        start(
            f"beat{i}",
            "beat",
            "-S",
            "celery_quartz.Scheduler",
            "-l",
            "info",
            "--pidfile=",
            "-s",
            str(VAR / f"beat{i}-schedule"),
        )
        for i in range(1, args.schedulers + 1)
    ]
    started = datetime.now(timezone.utc)
    print(f"started {len(beats)} schedulers and 1 worker; running {args.seconds:.0f}s")
    try:
        time.sleep(args.seconds / 2)
        victim = beats[0]
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        print(f"killed scheduler beat1 (pid {victim.pid}) with SIGKILL at +{args.seconds / 2:.0f}s")
        time.sleep(args.seconds / 2)
    finally:
        ended = datetime.now(timezone.utc)
        stop(beats[1:])
        time.sleep(3)  # let the worker finish what was published before the schedulers stopped
        stop([worker])
        for log in logs:
            log.close()
    return summarize(started, ended)


def stop(processes: list[subprocess.Popen[bytes]], timeout: float = 60) -> None:
    """Stop ``processes`` as a supervisor would: SIGTERM, then SIGKILL what has not exited
    within ``timeout`` seconds, so that the demo never leaves a process behind."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for process in processes:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            print(f"pid {process.pid} did not stop within {timeout:.0f}s of SIGTERM: killed")
            process.kill()
            process.wait()


def schedule_from_code() -> None:
    """Jobs scheduled from application code, beside the two beat_schedule entries."""
    from proj.celery import app

    from celery_quartz import CronTrigger, Job, JobKey, Quartz, SimpleTrigger, TriggerKey

    quartz = Quartz(app)
    quartz.schedule_jobs(
        [
            (
                Job(
                    key=JobKey("report", "demo"),
                    task="proj.tasks.report",
                    kwargs={"period": "second"},
                ),
                [CronTrigger(key=TriggerKey("every-second", "demo"), expression="* * * * * ?")]
                + [
                    SimpleTrigger(
                        key=TriggerKey(f"every-1.5s-{n}", "demo"),
                        repeat_interval=timedelta(seconds=1.5),
                        repeat_count=-1,
                    )
                    for n in range(4)
                ],
            )
        ],
        replace=True,
    )
    quartz.store.dispose()


def summarize(started: datetime, ended: datetime) -> int:
    from proj.celery import app

    from celery_quartz import Quartz
    from celery_quartz.keys import TriggerKey

    db = sqlite3.connect(VAR / "ledger.db")
    rows = db.execute(
        "SELECT trigger_group || '.' || trigger_name, scheduled, started, fired_by, worker,"
        " trigger_group, trigger_name FROM ledger ORDER BY scheduled"
    ).fetchall()
    print(f"\n{'trigger':40} {'scheduled (UTC)':15} {'late':>7}  fired by -> worker")
    for trigger, scheduled, begun, fired_by, worker, *_ in rows:
        when = datetime.fromtimestamp(scheduled, timezone.utc).strftime("%H:%M:%S.%f")[:12]
        print(f"{trigger:40} {when:15} {begun - scheduled:6.3f}s  {fired_by} -> {worker}")

    # Every occurrence due while the cluster ran, from the triggers themselves; the last two
    # seconds are left out (fired as the schedulers stopped, possibly not yet run).
    quartz = Quartz(app)
    horizon = ended - timedelta(seconds=2)
    due: set[tuple[str, float]] = set()
    for group, name in {(r[5], r[6]) for r in rows}:
        trigger = quartz.get_trigger(TriggerKey(name, group))
        if trigger is None or trigger.start_at is None:
            continue
        t = trigger.next_fire_time_after(max(trigger.start_at, started) - timedelta(microseconds=1))
        while t is not None and t <= horizon:
            due.add((f"{group}.{name}", round(t.timestamp(), 3)))
            t = trigger.next_fire_time_after(t)
    quartz.store.dispose()
    executed = Counter((trigger, round(scheduled, 3)) for trigger, scheduled, *_ in rows)
    duplicates = sum(n - 1 for n in executed.values() if n > 1)
    missing = sorted(due - set(executed))
    lateness = sorted(begun - scheduled for _, scheduled, begun, *_ in rows)
    by_scheduler = Counter(r[3] for r in rows)

    print("\nsummary")
    print(f"  occurrences due      {len(due)}")
    print(
        f"  occurrences executed {len(due & set(executed))} of those due "
        f"({len(rows)} executions in all)"
    )
    print(f"  duplicates           {duplicates}")
    print(f"  missing              {len(missing)}")
    if lateness:
        print(
            f"  lateness             p50 {lateness[len(lateness) // 2] * 1000:.0f} ms, "
            f"max {lateness[-1] * 1000:.0f} ms (start on the worker minus scheduled time)"
        )
    print(
        "  fired by scheduler   " + ", ".join(f"{k}: {v}" for k, v in sorted(by_scheduler.items()))
    )
    print(
        "  (the latest firings are the killed scheduler's claims: they wait until a survivor\n"
        "   declares it dead, check-in interval + threshold = 2 s + 2 s here, then fire)"
    )
    ok = duplicates == 0 and not missing and len(by_scheduler) > 1
    print("\nOK: every due occurrence ran exactly once" if ok else "\nNOT OK: see above")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
