"""The pipeline past the scheduler: what the worker hooks cost, on the same messages.

    .venv/bin/python bench/bench_pipeline.py [--firings 20000] [--repeats 2]
        [--pools threads:8,prefork:2]

N due triggers are fired and published once (one scheduler node, as ``bench_throughput.py``
does); the Redis queue and the fired rows are then saved. Each run restores both and drains the
same N messages of ``bench.noop`` with one Celery worker: a stock worker (no hooks), and the same
worker after ``celery_quartz.install(app)`` (a guarded start and a completion per execution).
Runs alternate stock and hooked, per pool, in each repeat; the hooked/stock ratio of the drain
rates is the result, with the CPU the worker, PostgreSQL and Redis spend per execution (from
``/proc``). Correctness is checked in every run: each message ran once (the task counts its runs
and records its id in Redis), and after a hooked run no fired row is left.

The rate is measured from the worker's first message taken (the queue shrinks) to the last
execution recorded, so the worker's start-up is not counted.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _harness import (  # type: ignore[import-not-found]
    QUEUE,
    REPO,
    NodeConfig,
    TriggerSet,
    fresh_store,
    machine_summary,
    median,
    nodes,
    now_ms,
    process_cpu_s,
    query,
    seed,
    services,
    stop_process,
    table,
)

FIRED = "quartz_fired_triggers"
BACKUP = "bench_fired_backup"


def execute(dsn: str, *statements: str) -> None:
    """Run statements that return no rows, each committed (VACUUM cannot run in a transaction)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def publish_once(url: str, dsn: str, broker: str, redis: Any, n: int) -> bytes:
    """Fire and publish ``n`` due triggers; save the fired rows; the queue's dump."""
    seed(url, dsn, [TriggerSet("due", n, now_ms() - 1000, interval_s=3600)])
    with nodes([NodeConfig(name="node0", store_url=url, broker_url=broker)]) as group:
        group.release()
        deadline = time.monotonic() + 600
        while group.fired() < n and time.monotonic() < deadline:
            time.sleep(0.05)
        group.stop()
    if redis.llen(QUEUE) != n:
        raise RuntimeError(f"published {redis.llen(QUEUE)} messages, expected {n}")
    execute(
        dsn, f"DROP TABLE IF EXISTS {BACKUP}", f"CREATE TABLE {BACKUP} AS SELECT * FROM {FIRED}"
    )
    dump = redis.dump(QUEUE)
    assert isinstance(dump, bytes)
    return dump


def restore(dsn: str, redis: Any, dump: bytes) -> None:
    redis.delete(QUEUE)
    redis.restore(QUEUE, 0, dump)
    execute(
        dsn,
        f"DELETE FROM {FIRED}",
        f"INSERT INTO {FIRED} SELECT * FROM {BACKUP}",
        f"VACUUM ANALYZE {FIRED}",
    )


def drain(
    *,
    pool: str,
    concurrency: int,
    hooked: bool,
    n: int,
    url: str,
    dsn: str,
    broker: str,
    record: Any,
    record_url: str,
    pg_pid: int | None,
    redis_pid: int | None,
    timeout: float,
) -> dict[str, float]:
    """One worker draining the queue; rate and CPU per execution."""
    record.delete("bench:ran", "bench:runs")
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "BENCH_BROKER_URL": broker,
        "BENCH_STORE_URL": url,
        "BENCH_RECORD_URL": record_url,
        "BENCH_HOOKS": "1" if hooked else "",
    }
    client = record  # same server, db 1; the queue is db 0 (read through `queue_len`)
    with tempfile.TemporaryDirectory(prefix="cq-bench-pipeline-") as tmp:
        log_path = Path(tmp) / "worker.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "bench.app", "worker", "-P", pool,
                 "-c", str(concurrency), "-l", "warning", "-n", "pipeline@%h",
                 "--without-mingle", "--without-gossip", "--without-heartbeat", "-Q", QUEUE],
                cwd=tmp, env=env, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
            try:
                queue = _queue_client(broker)
                deadline = time.monotonic() + timeout
                while queue.llen(QUEUE) >= n:
                    _alive(proc, log_path, deadline)
                    time.sleep(0.002)
                t0 = time.perf_counter()
                cpu0 = (process_cpu_s(proc.pid), process_cpu_s(pg_pid), process_cpu_s(redis_pid))
                while client.scard("bench:ran") < n:
                    _alive(proc, log_path, deadline)
                    time.sleep(0.002)
                # The last completion is recorded after the task returns.
                while hooked and _fired_left(dsn):
                    _alive(proc, log_path, deadline)
                    time.sleep(0.01)
                elapsed = time.perf_counter() - t0
                cpu1 = (process_cpu_s(proc.pid), process_cpu_s(pg_pid), process_cpu_s(redis_pid))
            finally:
                stop_process(proc)
    runs = int(client.get("bench:runs") or 0)
    return {
        "rate": n / elapsed,
        "worker_us": (cpu1[0] - cpu0[0]) / n * 1e6,
        "pg_us": (cpu1[1] - cpu0[1]) / n * 1e6,
        "redis_us": (cpu1[2] - cpu0[2]) / n * 1e6,
        "duplicates": runs - client.scard("bench:ran"),
        "left": _fired_left(dsn) if hooked else 0,
    }


def _queue_client(broker: str) -> Any:
    import redis

    return redis.Redis.from_url(broker)


def _fired_left(dsn: str) -> int:
    return int(query(dsn, f"SELECT count(*) FROM {FIRED}")[0][0])


def _alive(proc: subprocess.Popen[Any], log_path: Path, deadline: float) -> None:
    if proc.poll() is not None:
        raise RuntimeError(f"worker exited:\n{log_path.read_text()[-3000:]}")
    if time.monotonic() > deadline:
        raise RuntimeError(f"worker did not drain in time:\n{log_path.read_text()[-3000:]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--firings", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--pools", default="threads:8,prefork:2", help="pool:concurrency,...")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per drain")
    args = parser.parse_args(argv)
    pools = [(p.split(":")[0], int(p.split(":")[1])) for p in args.pools.split(",")]
    n = args.firings
    print(f"# pipeline: {n:,} firings of bench.noop drained per run; {machine_summary()}")
    checks_failed = 0
    with services() as (pg, rd):
        url, dsn = fresh_store(pg)
        broker = rd.url(0)
        dump = publish_once(url, dsn, broker, rd.client(0), n)
        record = rd.client(1)
        results: dict[tuple[str, bool], list[dict[str, float]]] = {}
        for repeat in range(args.repeats):
            for pool, concurrency in pools:
                # Alternate which goes first, so a drift in the machine's speed spreads evenly.
                order = (False, True) if repeat % 2 == 0 else (True, False)
                for hooked in order:
                    restore(dsn, rd.client(0), dump)
                    result = drain(
                        pool=pool, concurrency=concurrency, hooked=hooked, n=n, url=url,
                        dsn=dsn, broker=broker, record=record, record_url=rd.url(1),
                        pg_pid=pg.pid, redis_pid=rd.pid, timeout=args.timeout,
                    )  # fmt: skip
                    kind = "hooked" if hooked else "stock"
                    print(
                        f"  {pool} -c {concurrency} {kind}: {result['rate']:.0f} tasks/s, "
                        f"worker {result['worker_us']:.0f} µs, PostgreSQL {result['pg_us']:.0f} "
                        f"µs, Redis {result['redis_us']:.0f} µs per task",
                        flush=True,
                    )
                    if result["duplicates"] or result["left"]:
                        checks_failed += 1
                        print(
                            f"  CHECK FAILED: {result['duplicates']:.0f} ran twice, "
                            f"{result['left']:.0f} fired rows left"
                        )
                    results.setdefault((pool, hooked), []).append(result)
    rows = []
    for pool, concurrency in pools:
        stock, hooked = results[(pool, False)], results[(pool, True)]

        def med(runs: list[dict[str, float]], key: str) -> float:
            return median([r[key] for r in runs])

        rows.append(
            (
                f"{pool} -c {concurrency}",
                f"{med(stock, 'rate'):.0f}",
                f"{med(hooked, 'rate'):.0f}",
                f"{med(hooked, 'rate') / med(stock, 'rate'):.2f}",
                f"{med(stock, 'worker_us'):.0f} → {med(hooked, 'worker_us'):.0f}",
                f"{med(stock, 'pg_us'):.0f} → {med(hooked, 'pg_us'):.0f}",
                f"{med(stock, 'redis_us'):.0f} → {med(hooked, 'redis_us'):.0f}",
            )
        )
    print()
    print(
        table(
            (
                "pool",
                "stock tasks/s",
                "hooked tasks/s",
                "hooked / stock",
                "worker CPU µs/task",
                "PostgreSQL CPU µs/task",
                "Redis CPU µs/task",
            ),
            rows,
        )
    )
    print(
        f"\nmedians of {args.repeats} runs each; correctness: "
        + ("every run OK" if not checks_failed else f"CHECK FAILED in {checks_failed} run(s)")
    )
    return 1 if checks_failed else 0


if __name__ == "__main__":
    sys.exit(main())
