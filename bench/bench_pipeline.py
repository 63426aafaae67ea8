"""The pipeline past the scheduler: what the worker hooks cost, and firings run end to end.

    .venv/bin/python bench/bench_pipeline.py [--firings 20000] [--repeats 2]
        [--pools threads:8,prefork:2] [--scenarios overhead,e2e,sustained]
        [--e2e-firings 10000] [--rates 50,100,200,300,400] [--warmup 5] [--duration 20]
        [--driver psycopg2|psycopg] [--completion-delays 0.1] [--compare-with DIR]
        [--history on,off]

**overhead.**
N due triggers are fired and published once (one scheduler node, as ``bench_throughput.py``
does); the Redis queue and the fired rows are then saved. Each run restores both and drains the
same N messages of ``bench.noop`` with one Celery worker: a stock worker (no hooks), and the same
worker after ``celery_quartz.install(app)`` (a guarded start and a completion per execution).
Runs alternate stock and hooked, per pool, in each repeat (the order rotated each round); the
hooked/stock ratio of the drain rates is the result, with the CPU the worker, PostgreSQL and
Redis spend per execution (from ``/proc``). Correctness is checked in every run: each message
ran once (the task counts its runs and records its id in Redis), and after a hooked run no fired
row is left.
``--completion-delays 0,0.1`` runs the hooked worker once per ``quartz_worker_completion_delay``
(0: every end a statement of its own; otherwise successes recorded in batches), each against the
same stock runs. ``--compare-with DIR`` adds a hooked worker running the celery-quartz of another
checkout (``git worktree add DIR <commit>``), at each delay, in the same alternation: a change's
effect measured against the code before it in one run. ``--history on,off`` runs the hooked
worker with the run history recorded (the default) and with ``quartz_history_retention = 0``,
in the same alternation, and adds a table of the history's cost: hooked with history / hooked
without, per pool and delay (issue 28 asks ≥ 0.95), as the median of each round's own ratio (the
two ran in the same round, on its database), with the range. Each round has a fresh database
(published anew, dropped after it) and each run starts from an empty history. The machine's speed
drifts more between rounds than the history costs: give ``--repeats 7`` or more when judging a
change.

The rate is measured from the worker's first message taken (the queue shrinks) to the last
execution recorded, so the worker's start-up is not counted.

**e2e.** Two scheduler processes (real loops, as ``bench_throughput.py`` runs them) and two
hooked workers (prefork, 2 processes each) on this machine; N triggers all due at one instant.
Measured until every firing has run and its fired row is gone: executions completed per second,
start lateness (worker start minus scheduled time, p50/p99; on a backlog this is mostly queueing),
and the time from a firing to its completion record (p50/p99). In the same run, the same two
schedulers publish the same N with no worker: the end-to-end rate is given as a ratio to that.
The baseline, also in each repeat: stock ``celery beat`` (PersistentScheduler) with N entries
all due at one instant and two stock workers (no hooks), executions/s from that instant to the
last execution; the end-to-end rate is also given as a ratio to it.

**sustained.** The same processes at a fixed rate: ``rate`` triggers each fire once a second,
their start times spread evenly (as ``bench_lateness.py`` spreads them), schedulers sleeping what
the loop returns (as ``celery beat`` does). Rates rise until the p99 start lateness of the
occurrences scheduled in the measured window passes 100 ms (or one never starts): the last rate
that held is the pipeline's sustained rate. The baseline, with ``--stock-rates``: stock
``celery beat`` with ``rate`` entries of ``bench.noop``, each due once a second at its own phase
(the same spread), and two stock workers; the task measures its start against its entry's last
instant. The sustained rate is given as a ratio to the rate stock beat holds by the same rule.
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
from sqlalchemy.engine import make_url

FIRED = "quartz_fired_triggers"
BACKUP = "bench_fired_backup"
#: The run history's tables, emptied before each run (each run writes N rows).
HISTORY = ("quartz_history", "quartz_run_status")


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
    # The publishing left dead rows in the triggers' tables: vacuum them now, so that no
    # autovacuum runs under the first drain of the round.
    execute(dsn, "VACUUM ANALYZE")
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
        *[f"TRUNCATE {table}" for table in HISTORY],
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
    completion_delay: str = "",
    code: Path = REPO,
    history: bool = True,
) -> dict[str, float]:
    """One worker draining the queue (celery-quartz and bench.app from the checkout ``code``);
    rate and CPU per execution."""
    record.delete("bench:ran", "bench:runs")
    env = {
        **os.environ,
        "PYTHONPATH": str(code),
        "BENCH_BROKER_URL": broker,
        "BENCH_STORE_URL": url,
        "BENCH_RECORD_URL": record_url,
        "BENCH_HOOKS": "1" if hooked else "",
        "BENCH_COMPLETION_DELAY": completion_delay,
        "BENCH_HISTORY_RETENTION": "" if history else "0",
    }
    client = record  # same server, db 1; the queue is db 0
    with tempfile.TemporaryDirectory(prefix="cq-bench-pipeline-") as tmp:
        proc, log_path = _start_worker(
            Path(tmp), "pipeline", env, pool=pool, concurrency=concurrency
        )
        try:
            queue = _queue_client(broker)
            deadline = time.monotonic() + timeout
            while queue.llen(QUEUE) >= n:
                _alive(proc, log_path, deadline)
                time.sleep(0.002)
            t0 = time.perf_counter()
            cpu0 = (process_cpu_s(proc.pid), process_cpu_s(pg_pid), process_cpu_s(redis_pid))
            ran, progress = 0, time.monotonic()
            while ran < n:
                _alive(proc, log_path, deadline)
                time.sleep(0.002)
                if (latest := client.scard("bench:ran")) != ran:
                    ran, progress = latest, time.monotonic()
                elif time.monotonic() - progress > _STALLED and not queue.llen(QUEUE):
                    raise RuntimeError(
                        f"the worker ran {ran} of {n} and has taken every message, with none "
                        f"recorded in {_STALLED:.0f} s (a task failed?):\n"
                        + log_path.read_text()[-3000:]
                    )
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


#: Seconds without a recorded run, the queue empty, after which a drain is reported stalled.
_STALLED = 20.0


def _start_worker(
    folder: Path, name: str, env: dict[str, str], *, pool: str, concurrency: int
) -> tuple[subprocess.Popen[bytes], Path]:
    """``celery -A bench.app worker`` consuming the benchmark queue; its log in ``folder``."""
    log_path = folder / f"{name}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "bench.app", "worker", "-P", pool,
             "-c", str(concurrency), "-l", "warning", "-n", f"{name}@%h",
             "--without-mingle", "--without-gossip", "--without-heartbeat", "-Q", QUEUE],
            cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    return proc, log_path


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


def end_to_end(*, n: int, url: str, dsn: str, rd: Any, pg: Any, timeout: float) -> dict[str, float]:
    """Two schedulers and two hooked workers drain ``n`` triggers due at one instant."""
    record = rd.client(1)
    record.delete("bench:ran", "bench:runs", "bench:late", "bench:fired", "bench:completed")
    env = _timed_worker_env(rd, url)
    with tempfile.TemporaryDirectory(prefix="cq-bench-e2e-") as tmp:
        workers = [
            _start_worker(Path(tmp), f"e2e{i}", env, pool="prefork", concurrency=2)
            for i in range(2)
        ]
        try:
            configs = [
                NodeConfig(name=f"node{i}", store_url=url, broker_url=rd.url(0)) for i in range(2)
            ]
            time.sleep(3)  # the workers connect
            with nodes(configs) as group:  # started and ready
                due = _due_soon(dsn, n)
                group.release()
                deadline = time.monotonic() + timeout
                while record.scard("bench:ran") < n or _fired_left(dsn):
                    for proc, path in workers:
                        _alive(proc, path, deadline)
                    time.sleep(0.01)
                done_ms = now_ms()
                group.stop()
        finally:
            for proc, _ in workers:
                stop_process(proc)
    late = sorted(_lateness(record))
    fired = {k: int(v) for k, v in record.hgetall("bench:fired").items()}
    completed = {k: int(v) for k, v in record.hgetall("bench:completed").items()}
    to_completion = sorted(completed[k] - fired[k] for k in completed.keys() & fired.keys())
    return {
        "rate": n / ((done_ms - due) / 1000),
        "late_p50": _percentile(late, 0.50),
        "late_p99": _percentile(late, 0.99),
        "complete_p50": _percentile(to_completion, 0.50),
        "complete_p99": _percentile(to_completion, 0.99),
        "duplicates": int(record.get("bench:runs") or 0) - record.scard("bench:ran"),
        "left": _fired_left(dsn),
    }


#: How long before the instant its entries are due stock beat is started (it loads them first).
_STOCK_BEAT_LEAD_MS = 15_000


def stock_end_to_end(*, n: int, rd: Any, timeout: float) -> dict[str, float]:
    """The baseline: stock ``celery beat`` (one process, the default PersistentScheduler) with
    ``n`` entries of ``bench.noop`` all due at one instant, and two stock workers (prefork, 2
    processes each, no hooks): executions/s from that instant to the last execution."""
    record = rd.client(1)
    record.delete("bench:ran", "bench:runs")
    rd.client(0).delete(QUEUE)
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "BENCH_BROKER_URL": rd.url(0),
        "BENCH_RECORD_URL": rd.url(1),
    }
    with tempfile.TemporaryDirectory(prefix="cq-bench-stock-") as tmp:
        folder = Path(tmp)
        workers = [
            _start_worker(folder, f"stock{i}", env, pool="prefork", concurrency=2) for i in range(2)
        ]
        due = now_ms() + _STOCK_BEAT_LEAD_MS
        beat_log = folder / "beat.log"
        with open(beat_log, "wb") as log:
            beat = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "bench.app", "beat", "-l", "warning",
                 "-s", str(folder / "schedule")],
                cwd=folder, env={**env, "BENCH_BEAT_ENTRIES": str(n), "BENCH_BEAT_AT": str(due)},
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        try:
            deadline = time.monotonic() + timeout
            first_ms = None
            while record.scard("bench:ran") < n:
                for proc, path in [*workers, (beat, beat_log)]:
                    _alive(proc, path, deadline)
                if first_ms is None and record.scard("bench:ran"):
                    first_ms = now_ms()
                time.sleep(0.01)
            done_ms = now_ms()
        finally:
            stop_process(beat)
            for proc, _ in workers:
                stop_process(proc)
    return {
        "rate": n / ((done_ms - due) / 1000),
        # Near 0 unless beat was still loading its entries at the instant (then it is unfair
        # to stock beat, and the lead must grow).
        "first_ms": float("nan") if first_ms is None else float(first_ms - due),
        "duplicates": int(record.get("bench:runs") or 0) - record.scard("bench:ran"),
    }


def _timed_worker_env(rd: Any, url: str) -> dict[str, str]:
    """A hooked worker's environment that records each execution's start lateness and
    completion time in Redis db 1."""
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "BENCH_BROKER_URL": rd.url(0),
        "BENCH_STORE_URL": url,
        "BENCH_RECORD_URL": rd.url(1),
        "BENCH_HOOKS": "1",
        "BENCH_TIMES": "1",
    }


def _lateness(record: Any, since_ms: int = 0, until_ms: int | None = None) -> list[int]:
    """Start lateness (ms) of the executions whose occurrence is scheduled in the window."""
    values = []
    for raw in record.lrange("bench:late", 0, -1):
        scheduled, late = (int(v) for v in raw.split(b":"))
        if scheduled >= since_ms and (until_ms is None or scheduled < until_ms):
            values.append(late)
    return values


def sustained(
    *, rate: int, url: str, dsn: str, rd: Any, warmup: float, duration: float, timeout: float
) -> dict[str, float]:
    """``rate`` firings/s spread evenly (every trigger once a second, start times one ``1/rate``
    apart), 2 schedulers ("beat" mode, as ``celery beat`` sleeps) and 2 hooked workers; start
    lateness of the occurrences scheduled in the measured window, and how many never started."""
    record = rd.client(1)
    record.delete("bench:ran", "bench:runs", "bench:late", "bench:fired", "bench:completed")
    rd.client(0).delete(QUEUE)
    env = _timed_worker_env(rd, url)
    with tempfile.TemporaryDirectory(prefix="cq-bench-sustained-") as tmp:
        workers = [
            _start_worker(Path(tmp), f"load{i}", env, pool="prefork", concurrency=2)
            for i in range(2)
        ]
        try:
            time.sleep(3)
            configs = [
                NodeConfig(name=f"node{i}", store_url=url, broker_url=rd.url(0), mode="beat")
                for i in range(2)
            ]
            with nodes(configs) as group:
                first = now_ms() + 500
                execute(
                    dsn,
                    f"DELETE FROM {FIRED}",
                    "UPDATE quartz_triggers SET trigger_state = 'WAITING', times_triggered = 0, "
                    "prev_fire_time = NULL, start_time = next_fire_time",
                )
                _spread(dsn, first, rate)
                group.release()
                since = first + int(warmup * 1000)
                until = since + int(duration * 1000)
                deadline = time.monotonic() + timeout
                while now_ms() < until + 3000:
                    for proc, path in workers:
                        _alive(proc, path, deadline)
                    time.sleep(0.1)
                group.stop()
        finally:
            for proc, _ in workers:
                stop_process(proc)
    late = sorted(_lateness(record, since, until))
    expected = rate * int(duration)
    return {
        "p50": _percentile(late, 0.50),
        "p99": _percentile(late, 0.99),
        "max": float(late[-1]) if late else float("nan"),
        "missed": expected - len(late),
        "duplicates": int(record.get("bench:runs") or 0) - record.scard("bench:ran"),
    }


def _spread(dsn: str, first_ms: int, rate: int) -> None:
    """The first ``rate`` triggers (by name) each fire once a second from ``first_ms``, start
    times ``1000 / rate`` ms apart; the others are paused out of the way."""
    execute(
        dsn,
        "WITH ranked AS (SELECT trigger_name, row_number() OVER (ORDER BY trigger_name) - 1 AS i "
        "FROM quartz_triggers) "
        f"UPDATE quartz_triggers t SET next_fire_time = {first_ms} + (r.i * 1000) / {rate}, "
        f"start_time = {first_ms} + (r.i * 1000) / {rate}, "
        f"trigger_state = CASE WHEN r.i < {rate} THEN 'WAITING' ELSE 'PAUSED' END "
        "FROM ranked r WHERE t.trigger_name = r.trigger_name",
        f"VACUUM ANALYZE {FIRED}",
        "VACUUM ANALYZE quartz_triggers",
    )


def publish_only(*, n: int, url: str, dsn: str, rd: Any, timeout: float) -> float:
    """The same two schedulers publishing the same ``n`` due triggers, no worker: firings/s."""
    rd.client(0).delete(QUEUE)
    configs = [NodeConfig(name=f"node{i}", store_url=url, broker_url=rd.url(0)) for i in range(2)]
    with nodes(configs) as group:  # started and ready
        due = _due_soon(dsn, n)
        group.release()
        deadline = time.monotonic() + timeout
        while group.fired() < n and time.monotonic() < deadline:
            time.sleep(0.01)
        group.stop()
    last = int(query(dsn, f"SELECT max(published_time) FROM {FIRED}")[0][0])
    rd.client(0).delete(QUEUE)
    return n / ((last - due) / 1000)


def _due_soon(dsn: str, n: int) -> int:
    """Every trigger due at one instant, half a second from now; no firing in flight. The
    instant, in ms."""
    due = now_ms() + 500
    execute(
        dsn,
        f"DELETE FROM {FIRED}",
        f"UPDATE quartz_triggers SET next_fire_time = {due}, start_time = {due}, "
        "prev_fire_time = NULL, times_triggered = 0, trigger_state = 'WAITING'",
        f"VACUUM ANALYZE {FIRED}",
        "VACUUM ANALYZE quartz_triggers",
    )
    count = int(query(dsn, "SELECT count(*) FROM quartz_triggers")[0][0])
    if count != n:
        raise RuntimeError(f"{count} triggers stored, expected {n}")
    return due


def _percentile(values: list[int], q: float) -> float:
    if not values:
        return float("nan")
    return float(values[min(len(values) - 1, int(q * len(values)))])


def _fresh_store(pg: Any, driver: str) -> tuple[str, str]:
    """A new store database; its SQLAlchemy URL uses ``driver`` (schedulers' and workers')."""
    url, dsn = fresh_store(pg)
    return make_url(url).set(drivername=f"postgresql+{driver}").render_as_string(False), dsn


def overhead(args: argparse.Namespace, pg: Any, rd: Any) -> int:
    """The overhead scenario; the number of runs whose checks failed."""
    pools = [(p.split(":")[0], int(p.split(":")[1])) for p in args.pools.split(",")]
    n = args.firings
    print(f"## overhead: {n:,} firings of bench.noop drained per run", flush=True)
    checks_failed = 0
    broker = rd.url(0)
    record = rd.client(1)
    # A run is stock (delay None) or hooked with one completion delay, with this checkout's
    # celery-quartz or (--compare-with) another's.
    codes = [REPO] + ([Path(args.compare_with).resolve()] if args.compare_with else [])
    histories = [h == "on" for h in args.history.split(",")]
    hooked_variants = [
        (delay, code, history)
        for code in codes
        for delay in args.completion_delays.split(",")
        for history in histories
    ]
    variants: list[tuple[str | None, Path, bool]] = [(None, REPO, False), *hooked_variants]
    results: dict[tuple[str, str | None, Path, bool], list[dict[str, float]]] = {}
    for repeat in range(args.repeats):
        # Each round on a database of its own: no round inherits another's dead rows, bloated
        # indexes or statistics. Its runs drain the same published messages.
        url, dsn = _fresh_store(pg, args.driver)
        dump = publish_once(url, dsn, broker, rd.client(0), n)
        for pool, concurrency in pools:
            # Rotate the order, so that each variant runs first, in the middle and last in turn: a
            # drift in the machine's speed, or a position's own cost, spreads evenly (reversing
            # the order would keep the middle one in the middle in every round).
            turn = repeat % len(variants)
            order = variants[turn:] + variants[:turn]
            for delay, code, history in order:
                hooked = delay is not None
                restore(dsn, rd.client(0), dump)
                result = drain(
                    pool=pool, concurrency=concurrency, hooked=hooked, n=n, url=url,
                    dsn=dsn, broker=broker, record=record, record_url=rd.url(1),
                    pg_pid=pg.pid, redis_pid=rd.pid, timeout=args.timeout,
                    completion_delay=delay or "", code=code, history=history,
                )  # fmt: skip
                kind = (
                    f"hooked (completion delay {delay} s{_from(code)}{_history(history)})"
                    if hooked
                    else "stock"
                )
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
                results.setdefault((pool, delay, code, history), []).append(result)
        pg.drop_database(make_url(url).database)

    def med(runs: list[dict[str, float]], key: str) -> float:
        return median([r[key] for r in runs])

    rows = []
    for pool, concurrency in pools:
        stock = results[(pool, None, REPO, False)]
        for delay, code, history in hooked_variants:
            hooked_runs = results[(pool, delay, code, history)]
            rows.append(
                (
                    f"{pool} -c {concurrency}",
                    f"{delay} s{_from(code)}{_history(history)}",
                    f"{med(stock, 'rate'):.0f}",
                    f"{med(hooked_runs, 'rate'):.0f}",
                    f"{med(hooked_runs, 'rate') / med(stock, 'rate'):.2f}",
                    f"{med(stock, 'worker_us'):.0f} → {med(hooked_runs, 'worker_us'):.0f}",
                    f"{med(stock, 'pg_us'):.0f} → {med(hooked_runs, 'pg_us'):.0f}",
                    f"{med(stock, 'redis_us'):.0f} → {med(hooked_runs, 'redis_us'):.0f}",
                )
            )
    print()
    print(
        table(
            (
                "pool",
                "completion delay",
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
    print(f"medians of {args.repeats} runs each\n", flush=True)
    if len(histories) == 2:
        _history_cost(results, pools, args, codes)
    return checks_failed


def _history(history: bool) -> str:
    return ", history on" if history else ", history off"


def _history_cost(
    results: dict[tuple[str, str | None, Path, bool], list[dict[str, float]]],
    pools: list[tuple[str, int]],
    args: argparse.Namespace,
    codes: list[Path],
) -> None:
    """The run history's cost: the hooked worker with history over the same without."""
    rows = []
    for pool, concurrency in pools:
        for delay in args.completion_delays.split(","):
            for code in codes:
                on_runs = results[(pool, delay, code, True)]
                off_runs = results[(pool, delay, code, False)]
                on = median([r["rate"] for r in on_runs])
                off = median([r["rate"] for r in off_runs])
                pg_on = median([r["pg_us"] for r in on_runs])
                pg_off = median([r["pg_us"] for r in off_runs])
                # Each round's on and off ran in that round, on its own database: their ratio is
                # free of the drift between rounds.
                paired = [a["rate"] / b["rate"] for a, b in zip(on_runs, off_runs, strict=True)]
                rows.append(
                    (
                        f"{pool} -c {concurrency}",
                        f"{delay} s{_from(code)}",
                        f"{off:.0f}",
                        f"{on:.0f}",
                        f"{median(paired):.2f}",
                        f"{min(paired):.2f} to {max(paired):.2f}",
                        ", ".join(f"{r:.2f}" for r in paired),
                        f"{pg_off:.0f} → {pg_on:.0f}",
                    )
                )
    print(
        table(
            (
                "pool",
                "completion delay",
                "history off tasks/s",
                "history on tasks/s",
                "on / off, median of rounds (goal ≥ 0.95)",
                "range",
                "rounds",
                "PostgreSQL CPU µs/task",
            ),
            rows,
        )
    )
    print(
        f"rates: medians of {args.repeats} runs each; on / off: the median of the {args.repeats} "
        "rounds' own ratios\n",
        flush=True,
    )


def _from(code: Path) -> str:
    """How a run names the checkout its hooks came from: nothing for this one."""
    return "" if code == REPO else f", hooks from {code}"


def e2e(args: argparse.Namespace, pg: Any, rd: Any) -> int:
    """The end-to-end scenario; the number of runs whose checks failed."""
    n = args.e2e_firings
    print(f"## end to end: {n:,} triggers due at once, 2 schedulers, 2 hooked workers", flush=True)
    url, dsn = _fresh_store(pg, args.driver)
    seed(url, dsn, [TriggerSet("e2e", n, now_ms(), interval_s=3600)])
    checks_failed = 0
    publish, runs, stock = [], [], []
    for _ in range(args.repeats):
        publish.append(publish_only(n=n, url=url, dsn=dsn, rd=rd, timeout=args.timeout))
        result = end_to_end(n=n, url=url, dsn=dsn, rd=rd, pg=pg, timeout=args.timeout)
        print(
            f"  publish only {publish[-1]:.0f} firings/s; end to end {result['rate']:.0f} "
            f"executions/s, start lateness p50 {result['late_p50']:.0f} ms p99 "
            f"{result['late_p99']:.0f} ms, fire to completion p50 {result['complete_p50']:.0f} "
            f"ms p99 {result['complete_p99']:.0f} ms",
            flush=True,
        )
        baseline = stock_end_to_end(n=n, rd=rd, timeout=args.timeout)
        stock.append(baseline["rate"])
        print(
            f"  stock beat + 2 stock workers: {baseline['rate']:.0f} executions/s (first "
            f"execution {baseline['first_ms']:.0f} ms after the instant)",
            flush=True,
        )
        if baseline["duplicates"]:
            checks_failed += 1
            print(f"  CHECK FAILED: stock run: {baseline['duplicates']:.0f} ran twice")
        if result["duplicates"] or result["left"]:
            checks_failed += 1
            print(
                f"  CHECK FAILED: {result['duplicates']:.0f} ran twice, "
                f"{result['left']:.0f} fired rows left"
            )
        runs.append(result)
    rate = median([r["rate"] for r in runs])
    print()
    print(
        table(
            (
                "executions/s",
                "publish-only firings/s",
                "end to end / publish only",
                "stock beat + workers executions/s",
                "end to end / stock",
                "start lateness p50 / p99 ms",
                "fire to completion p50 / p99 ms",
            ),
            [
                (
                    f"{rate:.0f}",
                    f"{median(publish):.0f}",
                    f"{rate / median(publish):.2f}",
                    f"{median(stock):.0f}",
                    f"{rate / median(stock):.2f}",
                    f"{median([r['late_p50'] for r in runs]):.0f} / "
                    f"{median([r['late_p99'] for r in runs]):.0f}",
                    f"{median([r['complete_p50'] for r in runs]):.0f} / "
                    f"{median([r['complete_p99'] for r in runs]):.0f}",
                )
            ],
        )
    )
    print(f"medians of {args.repeats} runs each\n", flush=True)
    return checks_failed


def sustained_scenario(args: argparse.Namespace, pg: Any, rd: Any) -> int:
    """Rising rates until the p99 start lateness passes 100 ms; runs whose checks failed."""
    rates = [int(r) for r in args.rates.split(",")]
    print(
        f"## sustained: rates {args.rates}/s, {args.duration:.0f} s measured after "
        f"{args.warmup:.0f} s, 2 schedulers, 2 hooked workers",
        flush=True,
    )
    url, dsn = _fresh_store(pg, args.driver)
    seed(url, dsn, [TriggerSet("load", max(rates), now_ms() + 3_600_000, interval_s=1.0)])
    failed, held = _rising(
        rates,
        lambda rate: sustained(
            rate=rate,
            url=url,
            dsn=dsn,
            rd=rd,
            warmup=args.warmup,
            duration=args.duration,
            timeout=args.timeout,
        ),
        "firings/s",
    )
    print(f"highest rate held with p99 <= 100 ms: {held or 'none'}/s\n", flush=True)
    if args.stock_rates:
        print(
            f"## sustained, stock: rates {args.stock_rates}/s, stock celery beat and 2 stock "
            "workers",
            flush=True,
        )
        stock_failed, stock_held = _rising(
            [int(r) for r in args.stock_rates.split(",")],
            lambda rate: stock_sustained(
                rate=rate,
                rd=rd,
                warmup=args.warmup,
                duration=args.duration,
                timeout=args.timeout,
            ),
            "entries/s",
        )
        failed += stock_failed
        print(f"stock: highest rate held with p99 <= 100 ms: {stock_held or 'none'}/s")
        if held and stock_held:
            print(f"sustained rate, ours / stock: {held / stock_held:.2f}")
        print(flush=True)
    return failed


def _rising(rates: list[int], run: Any, unit: str) -> tuple[int, int | None]:
    """Run ``run(rate)`` at rising rates until one does not hold (p99 start lateness over
    100 ms, or a start missed); print each and the table. (Runs whose checks failed, the
    highest rate held.)"""
    rows, held, failed = [], None, 0
    for rate in rates:
        result = run(rate)
        ok = result["p99"] <= 100 and result["missed"] == 0
        held = rate if ok else held
        if result["duplicates"]:
            failed += 1
        rows.append(
            (
                rate,
                f"{result['p50']:.0f}",
                f"{result['p99']:.0f}",
                f"{result['max']:.0f}",
                f"{result['missed']:.0f}",
                "yes" if ok else "no",
            )
        )
        print(f"  {rate}/s: p50 {rows[-1][1]} ms, p99 {rows[-1][2]} ms, missed {rows[-1][4]}")
        if not ok:
            break
    print()
    print(table((unit, "start lateness p50 ms", "p99 ms", "max ms", "missed", "held"), rows))
    return failed, held


def stock_sustained(
    *, rate: int, rd: Any, warmup: float, duration: float, timeout: float
) -> dict[str, float]:
    """The sustained baseline: stock ``celery beat`` with ``rate`` entries each due once a
    second, their instants ``1/rate`` apart (as :func:`_spread` spreads the triggers), and two
    stock workers (prefork, 2 processes each); start lateness of the instants in the measured
    window, and how many of them never started."""
    record = rd.client(1)
    record.delete("bench:ran", "bench:runs", "bench:late")
    rd.client(0).delete(QUEUE)
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "BENCH_BROKER_URL": rd.url(0),
        "BENCH_RECORD_URL": rd.url(1),
        "BENCH_TIMES": "1",
    }
    with tempfile.TemporaryDirectory(prefix="cq-bench-stock-sustained-") as tmp:
        folder = Path(tmp)
        workers = [
            _start_worker(folder, f"stock{i}", env, pool="prefork", concurrency=2) for i in range(2)
        ]
        first = now_ms() + 8000  # beat loads its entries first
        beat_log = folder / "beat.log"
        with open(beat_log, "wb") as log:
            beat = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "bench.app", "beat", "-l", "warning",
                 "-s", str(folder / "schedule")],
                cwd=folder,
                env={**env, "BENCH_BEAT_RATE": str(rate), "BENCH_BEAT_FIRST": str(first)},
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        since = first + int(warmup * 1000)
        until = since + int(duration * 1000)
        try:
            deadline = time.monotonic() + timeout
            while now_ms() < until + 3000:
                for proc, path in [*workers, (beat, beat_log)]:
                    _alive(proc, path, deadline)
                time.sleep(0.1)
        finally:
            stop_process(beat)
            for proc, _ in workers:
                stop_process(proc)
    late = sorted(_lateness(record, since, until))
    return {
        "p50": _percentile(late, 0.50),
        "p99": _percentile(late, 0.99),
        "max": float(late[-1]) if late else float("nan"),
        "missed": rate * int(duration) - len(late),
        "duplicates": int(record.get("bench:runs") or 0) - record.scard("bench:ran"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--firings", type=int, default=20_000, help="overhead: messages")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--pools", default="threads:8,prefork:2", help="pool:concurrency,...")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per run")
    parser.add_argument("--scenarios", default="overhead,e2e,sustained")
    parser.add_argument("--e2e-firings", type=int, default=10_000, help="e2e: triggers")
    parser.add_argument("--rates", default="50,100,200,300,400", help="sustained: firings/s")
    parser.add_argument("--warmup", type=float, default=5.0, help="sustained: seconds")
    parser.add_argument("--duration", type=float, default=20.0, help="sustained: seconds")
    parser.add_argument(
        "--stock-rates",
        default="25,50,100,200,300,400",
        help="sustained: entries/s for stock beat with stock workers (empty: skip the baseline)",
    )
    parser.add_argument(
        "--driver",
        choices=("psycopg2", "psycopg"),
        default="psycopg2",
        help="the store URL's driver (psycopg: psycopg 3, which prepares repeated statements)",
    )
    parser.add_argument(
        "--completion-delays",
        default="0.1",
        help="overhead: the hooked worker's quartz_worker_completion_delay values, comma-separated",
    )
    parser.add_argument(
        "--history",
        default="on",
        help="overhead: the hooked worker with the run history recorded (on), without "
        "(off: quartz_history_retention = 0), or both (on,off: adds the history's cost)",
    )
    parser.add_argument(
        "--compare-with",
        default="",
        metavar="DIR",
        help="overhead: also drain with the hooks of the checkout in DIR (e.g. a git worktree of "
        "an earlier commit), in the same alternation",
    )
    args = parser.parse_args(argv)
    scenarios = args.scenarios.split(",")
    print(f"# pipeline; {machine_summary()}; store driver {args.driver}", flush=True)
    failed = 0
    with services() as (pg, rd):
        if "overhead" in scenarios:
            failed += overhead(args, pg, rd)
        if "e2e" in scenarios:
            failed += e2e(args, pg, rd)
        if "sustained" in scenarios:
            failed += sustained_scenario(args, pg, rd)
    print("correctness: " + ("every run OK" if not failed else f"CHECK FAILED in {failed} run(s)"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
