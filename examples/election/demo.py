"""The election demo: two non-clustered schedulers under the PostgreSQL election, one leading and
one in standby; the leader is killed and the standby takes over. Then a summary of what ran.

    make election-demo    # from the repository root; or: python demo.py [--seconds 16]

With no --store-url it starts a throwaway PostgreSQL from the machine's server binaries (Debian's
`postgresql` package), as the test suite does. The broker is Celery's filesystem transport under
./var (no server).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
VAR = HERE / "var"


@contextlib.contextmanager
def store_url(given: str | None) -> Iterator[str]:
    if given:
        yield given
        return
    sys.path.insert(0, str(REPO))
    from tests.services import postgres_server

    print("starting a throwaway PostgreSQL from the machine's binaries")
    with postgres_server(dbname="election") as server:
        yield server.url()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=16.0, help="how long the demo runs")
    parser.add_argument("--store-url", help="a PostgreSQL database to use (default: a new one)")
    args = parser.parse_args()
    with store_url(args.store_url) as url:
        return run(url, args.seconds)


def run(url: str, seconds: float) -> int:
    shutil.rmtree(VAR, ignore_errors=True)
    VAR.mkdir()
    env = {**os.environ, "PYTHONPATH": str(HERE), "ELECTION_DIR": str(HERE)}
    env["QUARTZ_STORE_URL"] = url
    os.environ.update(env)
    sys.path.insert(0, str(HERE))
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    celery = [sys.executable, "-m", "celery", "-A", "proj"]
    procs: dict[str, subprocess.Popen[bytes]] = {}
    logs = []

    def start(name: str, *argv: str) -> None:
        log = open(VAR / f"{name}.log", "wb")  # noqa: SIM115 - closed at the end
        logs.append(log)
        procs[name] = subprocess.Popen(
            [*celery, *argv], cwd=HERE, env=env, stdout=log, stderr=subprocess.STDOUT
        )

    def leader() -> str | None:
        """The replica whose process holds the RUNNING check-in row, if any."""
        with contextlib.suppress(Exception), engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT pid FROM quartz_scheduler_state WHERE sched_name = 'election'"
                    " AND kind = 'scheduler' AND status = 'RUNNING'"
                )
            ).all()
            pids = {row.pid for row in rows}
            for name, proc in procs.items():
                if name.startswith("replica") and proc.poll() is None and proc.pid in pids:
                    return name
        return None

    def wait_for_leader(other_than: str | None, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            name = leader()
            if name is not None and name != other_than:
                return name
            time.sleep(0.05)
        raise SystemExit(f"no leader after {timeout:.0f}s: see {VAR}/*.log")

    start("worker", "worker", "-c", "2", "-l", "info", "-n", "election@%h")
    for name in ("replica-a", "replica-b"):
        start(name, "beat", "-S", "celery_quartz.Scheduler", "-l", "info", "--pidfile=")
    try:
        first = wait_for_leader(None, 60)
        standby = "replica-b" if first == "replica-a" else "replica-a"
        print(
            f"{first} (pid {procs[first].pid}) leads; {standby} (pid {procs[standby].pid}) "
            "waits: built, not started (CREATED), no check-in"
        )
        time.sleep(seconds / 2)
        procs[first].send_signal(signal.SIGKILL)
        procs[first].wait()
        killed = time.monotonic()
        killed_at = datetime.now(timezone.utc)
        print(f"killed {first} with SIGKILL; the server frees its advisory lock")
        second = wait_for_leader(first, 30)
        print(f"{second} took over {time.monotonic() - killed:.1f}s later")
        time.sleep(seconds / 2)
    finally:
        for name, proc in procs.items():
            if name.startswith("replica") and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for name, proc in procs.items():
            if name.startswith("replica"):
                proc.wait(timeout=60)
        ended = datetime.now(timezone.utc)
        time.sleep(3)  # let the worker finish what was published before the leader stopped
        procs["worker"].send_signal(signal.SIGTERM)
        procs["worker"].wait(timeout=30)
        for log in logs:
            log.close()
        engine.dispose()
    return summarize(killed_at, ended)


def summarize(killed_at: datetime, ended: datetime) -> int:
    from proj.celery import app

    from celery_quartz import Quartz, TriggerKey

    db = sqlite3.connect(VAR / "ledger.db")
    scheduled = [round(row[0], 3) for row in db.execute("SELECT scheduled FROM ledger")]
    lateness = sorted(s - d for d, s in db.execute("SELECT scheduled, started FROM ledger"))
    db.close()
    if not scheduled:
        print("NOT OK: nothing ran")
        return 1

    # Every occurrence of the trigger from the first that ran to two seconds before the end.
    quartz = Quartz(app)
    trigger = quartz.get_trigger(TriggerKey("tick", "celery.beat_schedule"))
    quartz.store.dispose()
    assert trigger is not None
    first = datetime.fromtimestamp(min(scheduled), timezone.utc)
    horizon = ended - timedelta(seconds=2)
    due, t = set(), first
    while t is not None and t <= horizon:
        due.add(round(t.timestamp(), 3))
        t = trigger.next_fire_time_after(t)
    counts = Counter(scheduled)
    duplicates = sum(n - 1 for n in counts.values() if n > 1)
    missing = due - set(counts)
    before = sum(1 for s in counts if s < killed_at.timestamp())

    print("\nsummary")
    print(f"  occurrences due      {len(due)} (one a second)")
    print(
        f"  executed             {len(due & set(counts))} of those due "
        f"({len(counts)} in all: {before} due before the kill, {len(counts) - before} after)"
    )
    print(f"  duplicates           {duplicates}")
    print(f"  missing              {len(missing)}")
    print(
        f"  lateness             max {lateness[-1] * 1000:.0f} ms (the occurrences due while "
        "the leader was dead ran when the standby took over)"
    )
    ok = duplicates == 0 and not missing
    print(
        "\nOK: every due occurrence ran exactly once across the failover"
        if ok
        else "\nNOT OK: see above"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
