"""Peers: stock celery beat and celery-redbeat beside celery-quartz, same entries, same run.

The three schedulers get the same Celery app (``bench/app.py``) and the same ``beat_schedule`` of
``--entries`` entries of task ``bench.noop`` (celery-quartz imports it into its store at start,
as ``celery beat -S celery_quartz.Scheduler`` does):

* dispatch rate: a real ``celery -A bench.app beat -S <scheduler>`` process, every entry due every
  second (far more demand than any of them can serve); after the first message and a warm-up,
  messages pushed into the Redis queue per second over ``--window`` seconds (``LLEN`` deltas);
* idle tick: the scheduler class built in a fresh process with every entry due in an hour, then
  ``tick()`` called ``--ticks`` times: median wall and CPU milliseconds per tick. This is the
  work a beat process does each time it wakes up with nothing due. (celery-quartz's store gets
  its triggers by COPY of client-stored rows here rather than a second beat_schedule import.)

Ratios are against celery-quartz measured in the same run. celery-redbeat is not a dependency of
celery-quartz: ``.venv/bin/pip install celery-redbeat`` for this benchmark (skipped if missing).

    .venv/bin/python bench/bench_peers.py [--entries 10000] [--window 5] [--repeats 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _harness import (
    QUEUE,
    REPO,
    TriggerSet,
    fresh_store,
    machine_summary,
    median,
    now_ms,
    seed,
    services,
    stop_process,
    table,
)

SCHEDULERS = {
    "celery-quartz": "celery_quartz.Scheduler",
    "stock beat": "celery.beat:PersistentScheduler",
    "celery-redbeat": "redbeat.RedBeatScheduler",
}


def dispatch_rate(env: dict[str, str], scheduler: str, redis: object, window: float,
                  warmup: float, start_timeout: float) -> tuple[float, float]:  # fmt: skip
    """(messages/s over the window, seconds from start to the first message)."""
    redis.flushdb()  # type: ignore[attr-defined]
    with tempfile.TemporaryDirectory(prefix="cq-bench-beat-") as tmp:
        log_path = Path(tmp) / "beat.log"
        with open(log_path, "wb") as log:
            started = time.monotonic()
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "celery",
                    "-A",
                    "bench.app",
                    "beat",
                    "-S",
                    scheduler,
                    "-s",
                    str(Path(tmp) / "schedule"),
                    "--pidfile=",
                    "-l",
                    "warning",
                ],
                cwd=tmp,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            try:
                while redis.llen(QUEUE) == 0:  # type: ignore[attr-defined]
                    if proc.poll() is not None or time.monotonic() - started > start_timeout:
                        raise RuntimeError(
                            f"{scheduler}: no message (log:\n{log_path.read_text()[-3000:]})"
                        )
                    time.sleep(0.05)
                first = time.monotonic() - started
                time.sleep(warmup)
                t1, n1 = time.monotonic(), redis.llen(QUEUE)  # type: ignore[attr-defined]
                time.sleep(window)
                t2, n2 = time.monotonic(), redis.llen(QUEUE)  # type: ignore[attr-defined]
            finally:
                stop_process(proc)
    return (n2 - n1) / (t2 - t1), first


def idle_tick(env: dict[str, str], kind: str, ticks: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--tick-child", kind, "--ticks", str(ticks)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        cwd=str(REPO),
    )
    if out.returncode != 0:
        raise RuntimeError(f"{kind} idle tick failed:\n{out.stdout}\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def tick_child(kind: str, ticks: int) -> int:
    """Build one scheduler with every entry an hour away; time ``tick()`` (prints JSON)."""
    sys.path.insert(0, str(REPO))
    from bench.app import app

    with tempfile.TemporaryDirectory(prefix="cq-bench-tick-") as tmp:
        if kind == "stock beat":
            from celery.beat import PersistentScheduler

            scheduler = PersistentScheduler(app=app, schedule_filename=f"{tmp}/schedule")
        elif kind == "celery-redbeat":
            from types import SimpleNamespace

            from redbeat import RedBeatScheduler
            from redbeat.schedulers import acquire_distributed_beat_lock

            scheduler = RedBeatScheduler(app=app)
            # What celery beat's beat_init signal does: take redbeat's lock (active-passive).
            acquire_distributed_beat_lock(sender=SimpleNamespace(scheduler=scheduler))
        else:
            from celery_quartz import Scheduler

            scheduler = Scheduler(app=app)
        for _ in range(3):  # first ticks take locks, build heaps
            scheduler.tick()
        wall, cpu = [], []
        for _ in range(ticks):
            w0, c0 = time.perf_counter(), time.process_time()
            scheduler.tick()
            wall.append((time.perf_counter() - w0) * 1000)
            cpu.append((time.process_time() - c0) * 1000)
        scheduler.close()
    print(json.dumps({"wall_ms": statistics.median(wall), "cpu_ms": statistics.median(cpu)}))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--window", type=float, default=5.0, help="measured seconds")
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ticks", type=int, default=30)
    parser.add_argument("--start-timeout", type=float, default=300.0)
    parser.add_argument("--tick-child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.tick_child:
        return tick_child(args.tick_child, args.ticks)
    kinds = list(SCHEDULERS)
    if importlib.util.find_spec("redbeat") is None:
        print("celery-redbeat not installed: skipped (.venv/bin/pip install celery-redbeat)")
        kinds.remove("celery-redbeat")
    print(f"# peers: {args.entries:,} beat_schedule entries; {machine_summary()}", flush=True)
    results: dict[str, dict[str, list[float]]] = {
        k: {"rate": [], "first": [], "wall": [], "cpu": []} for k in kinds
    }
    with services() as (pg, rd):
        redis = rd.client(0)
        for attempt in range(args.repeats):
            for kind in kinds:
                url, _dsn = fresh_store(pg)
                rd.client(2).flushdb()
                env = {
                    **os.environ,
                    "PYTHONPATH": str(REPO),
                    "BENCH_BROKER_URL": rd.url(0),
                    "BENCH_STORE_URL": url,
                    "BENCH_REDBEAT_URL": rd.url(2),
                    "BENCH_BEAT_ENTRIES": str(args.entries),
                    "BENCH_BEAT_INTERVAL": "1",
                }
                rate, first = dispatch_rate(
                    env, SCHEDULERS[kind], redis, args.window, args.warmup, args.start_timeout
                )
                url, dsn = fresh_store(pg)
                rd.client(2).flushdb()
                tick_env = {**env, "BENCH_STORE_URL": url, "BENCH_BEAT_INTERVAL": "3600"}
                if kind == "celery-quartz":
                    # The same number of triggers an hour away, stored as the client stores them
                    # (COPY), instead of a second 10k-entry beat_schedule import (~35 s).
                    seed(url, dsn, [TriggerSet("idle", args.entries, now_ms() + 3_600_000, 3600)])
                    tick_env["BENCH_BEAT_ENTRIES"] = "0"
                tick = idle_tick(tick_env, kind, args.ticks)
                for key, value in (
                    ("rate", rate),
                    ("first", first),
                    ("wall", tick["wall_ms"]),
                    ("cpu", tick["cpu_ms"]),
                ):
                    results[kind][key].append(value)
                print(
                    f"  run {attempt + 1}, {kind}: {rate:,.0f} dispatched/s (first message after"
                    f" {first:.1f}s), idle tick {tick['wall_ms']:.2f} ms wall,"
                    f" {tick['cpu_ms']:.2f} ms CPU",
                    flush=True,
                )
        redis.close()
    med = {k: {m: median(v) for m, v in r.items()} for k, r in results.items()}
    ours = med["celery-quartz"]
    print(
        f"\n## peers, {args.entries:,} entries (median of {args.repeats}); ratios against"
        " celery-quartz\n"
    )
    print(
        table(
            ["scheduler", "dispatch rate, ours / theirs", "idle tick wall, theirs / ours"],
            [
                (k, f"{ours['rate'] / m['rate']:.1f}x", f"{m['wall'] / ours['wall']:.1f}x")
                for k, m in med.items()
                if k != "celery-quartz"
            ],
        )
    )
    print()
    print(
        table(
            [
                "scheduler",
                "dispatched/s",
                "first message after s",
                "idle tick ms (wall)",
                "idle tick ms (CPU)",
            ],
            [(k, m["rate"], m["first"], m["wall"], m["cpu"]) for k, m in med.items()],
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
