"""Run history: p50/p99 of the reads the pages and the CLI make with many history rows stored,
each beside a plain SELECT of the same rows (the baseline, in the same run), and whether the
sweep keeps up with 1,000 finished executions per second.

Fills a throwaway PostgreSQL with ``--rows`` history rows (default 10,000,000) in one
``INSERT … SELECT FROM generate_series`` (1,000 jobs, 2,000 triggers, results 90 % succeeded,
5 % failed, 3 % misfired, 2 % held, spread over the last 30 days), folds them into the rollups
with SQL (the sweep's fold, as GROUP BY: per job and scheduler-wide, at 5 min, 1 h and 1 day),
writes each trigger's and the scheduler's count of rows as the sweep keeps them, adds
``--rows / 10`` audit rows over a year and ``--tail`` rows the sweep has not folded yet (the last
ten minutes). Then, ``--requests`` times each, through the store's read side (what the CLI, the
API and the pages call):

* a page of history, filtered by job, by one result and by the results not run;
* 24 h by hour, 30 days by day, one job over 7 days by 6 h (statistics);
* the audit page.

Baselines: a plain SELECT of the rows each read returns (the page's rows, or the rollup rows a
statistics read merges), over psycopg. Goal (issue 28): p99 <= 50 ms for each read at 10M rows.

The sweep: a thread inserts ``--rate`` finished executions per second (batches of 100, as the
workers' completions do) for ``--sweep-seconds``, while the sweep runs every second with the
per-scheduler cap set to the rows stored (so it deletes as many as it folds). It keeps up when the
rows not yet folded stay bounded (reported: the backlog at the end, and rows folded per second).

    .venv/bin/python bench/bench_history.py [--rows 10000000] [--requests 200] [--explain]
    .venv/bin/python bench/bench_history.py --rows 200000 --requests 50 --sweep-seconds 10

``--explain`` prints the plan of every statement each read and one sweep pass run (EXPLAIN of
the statement as the store sent it): each should be an index range scan.
Services: a throwaway PostgreSQL (tests/services.py). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from _harness import (
    SCHEDULER_NAME,
    fresh_store,
    machine_summary,
    now_ms,
    services,
    table,
    vacuum,
)

DAY_MS = 86_400_000
JOBS = 1000
TRIGGERS = 2000

_BIN = "CASE WHEN {v} <= 0 THEN 0 ELSE LEAST(127, floor(ln({v} + 1) / ln(2) * 4))::int END"

_FILL = """
INSERT INTO quartz_history (sched_name, event_time, result, trigger_name, trigger_group,
    job_name, job_group, scheduled_time, fire_instance_id, task_name, task_id, started_time,
    finished_time, duration_ms, lateness_ms, worker_name, instance_name, reason, unfolded)
SELECT 'bench', e, r, 't-' || lpad((g %% 2000)::text, 5, '0'), 'triggers',
    'job-' || lpad((g %% 1000)::text, 5, '0'), 'jobs',
    CASE WHEN ran THEN e - d - l ELSE e END,
    CASE WHEN ran THEN 'fi-' || g END, CASE WHEN ran THEN 'bench.task' END,
    CASE WHEN ran THEN 'task-' || g END, CASE WHEN ran THEN e - d END, CASE WHEN ran THEN e END,
    CASE WHEN ran THEN d END, CASE WHEN ran THEN l END,
    CASE WHEN ran THEN 'celery@w' || (g %% 8) END, 'node-' || (g %% 3),
    CASE WHEN ran THEN NULL ELSE r || ': MISFIRE_INSTRUCTION_FIRE_NOW' END, %(unfolded)s
FROM (
    SELECT g, %(start)s + (g::bigint * %(span)s / %(n)s) AS e,
        CASE WHEN g %% 100 < 90 THEN 'succeeded' WHEN g %% 100 < 95 THEN 'failed'
             WHEN g %% 100 < 98 THEN 'misfired' ELSE 'held' END AS r,
        g %% 100 < 95 AS ran,
        (50 + (g::bigint * 7919) %% 5000) AS d, ((g::bigint * 104729) %% 2000) AS l
    FROM generate_series(1, %(n)s) g
) s
"""

_FOLD = f"""
INSERT INTO quartz_history_rollups (sched_name, job_group, job_name, bucket_seconds,
    bucket_start, result, runs, duration_max, duration_hist, lateness_max, lateness_hist)
WITH src AS (
    SELECT o.jg, o.jn, (h.event_time / %(w)s) * %(w)s AS bs, h.result,
        h.duration_ms AS d, h.lateness_ms AS l
    FROM quartz_history h
    CROSS JOIN LATERAL (VALUES (h.job_group, h.job_name), ('', '')) AS o(jg, jn)
    WHERE h.sched_name = 'bench' AND NOT h.unfolded AND h.event_time >= %(since)s
),
counts AS (
    SELECT jg, jn, bs, result, count(*) AS runs, max(d) AS dmax, max(l) AS lmax
    FROM src GROUP BY jg, jn, bs, result
),
dh AS (
    SELECT jg, jn, bs, result, json_object_agg(bin, n)::text AS hist FROM (
        SELECT jg, jn, bs, result, {_BIN.format(v="d")} AS bin, count(*) AS n
        FROM src WHERE d IS NOT NULL GROUP BY 1, 2, 3, 4, 5) x
    GROUP BY jg, jn, bs, result
),
lh AS (
    SELECT jg, jn, bs, result, json_object_agg(bin, n)::text AS hist FROM (
        SELECT jg, jn, bs, result, {_BIN.format(v="l")} AS bin, count(*) AS n
        FROM src WHERE l IS NOT NULL GROUP BY 1, 2, 3, 4, 5) x
    GROUP BY jg, jn, bs, result
)
SELECT 'bench', c.jg, c.jn, %(width)s, c.bs, c.result, c.runs, c.dmax, dh.hist, c.lmax, lh.hist
FROM counts c LEFT JOIN dh USING (jg, jn, bs, result) LEFT JOIN lh USING (jg, jn, bs, result)
"""

_COUNTS = """
INSERT INTO quartz_run_status (sched_name, kind, key_group, key_name, since_time, history_rows)
SELECT 'bench', 'trigger', trigger_group, trigger_name, %(now)s, count(*)
FROM quartz_history WHERE sched_name = 'bench' AND NOT unfolded
GROUP BY trigger_group, trigger_name
UNION ALL
SELECT 'bench', 'history', '', '', %(now)s, count(*)
FROM quartz_history WHERE sched_name = 'bench' AND NOT unfolded
"""

_AUDIT = """
INSERT INTO quartz_audit (sched_name, event_time, principal, via, action, target_kind,
    target, changes)
SELECT 'bench', %(start)s + (g::bigint * %(span)s / %(n)s), 'user-' || (g %% 50),
    (ARRAY['cli', 'api', 'dashboard', 'client'])[1 + g %% 4], 'pause_trigger', 'trigger',
    'triggers.t-' || lpad((g %% 2000)::text, 5, '0'), '{"paused": [false, true]}'
FROM generate_series(1, %(n)s) g
"""


def load(dsn: str, rows: int, tail: int) -> dict[str, float]:
    """The rows described in the module docstring; the seconds each step took."""
    import psycopg

    now = now_ms()
    took: dict[str, float] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        step = time.perf_counter()
        conn.execute(
            _FILL,
            {
                "start": now - 30 * DAY_MS,
                "span": 30 * DAY_MS - 600_000,
                "n": rows,
                "unfolded": False,
            },
        )
        took["history rows"] = time.perf_counter() - step
        step = time.perf_counter()
        conn.execute("SET work_mem = '256MB'")
        for width, keep_days in ((300, 2), (3600, 35), (86400, 400)):
            conn.execute(
                _FOLD, {"w": width * 1000, "width": width, "since": now - keep_days * DAY_MS}
            )
        conn.execute(_COUNTS, {"now": now})
        took["fold into rollups"] = time.perf_counter() - step
        step = time.perf_counter()
        conn.execute(_AUDIT, {"start": now - 365 * DAY_MS, "span": 365 * DAY_MS, "n": rows // 10})
        took["audit rows"] = time.perf_counter() - step
        if tail:
            conn.execute(
                _FILL, {"start": now - 600_000, "span": 600_000, "n": tail, "unfolded": True}
            )
    step = time.perf_counter()
    vacuum(dsn)
    took["vacuum analyze"] = time.perf_counter() - step
    return took


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p99 = statistics.quantiles(ordered, n=100)[-1] if len(ordered) > 1 else ordered[0]
    return statistics.median(ordered), p99


@contextmanager
def captured(engine: Any) -> Iterator[list[tuple[str, Any]]]:
    """The statements ``engine`` runs meanwhile, with their parameters."""
    from sqlalchemy import event

    found: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, statement: str, params: Any, *_: Any) -> None:
        if not statement.lstrip().upper().startswith(("BEGIN", "SET", "SHOW", "EXPLAIN")):
            found.append((statement, params))

    event.listen(engine, "before_cursor_execute", capture)
    try:
        yield found
    finally:
        event.remove(engine, "before_cursor_execute", capture)


def explain(engine: Any, label: str, statements: list[tuple[str, Any]]) -> None:
    print(f"\n-- {label}")
    with engine.connect() as conn:
        for statement, params in statements:
            plan = conn.exec_driver_sql("EXPLAIN " + statement, params).all()
            print("\n".join(r[0] for r in plan))
            print()
        conn.rollback()


def reads(store: Any, now: int) -> list[tuple[str, Callable[[], Any], str, dict[str, Any]]]:
    """(label, the store's read, the baseline SELECT, its parameters)."""
    from celery_quartz.clock import from_millis
    from celery_quartz.keys import JobKey
    from celery_quartz.store.views import HistoryFilter

    job = JobKey("job-00042", "jobs")
    page = "ORDER BY event_time DESC, history_id DESC LIMIT 100"
    hour, day = 3_600_000, DAY_MS
    end_h = (now // hour + 1) * hour
    end_d = (now // day + 1) * day
    end_6h = (now // (6 * hour) + 1) * (6 * hour)
    rollups = (
        "SELECT * FROM quartz_history_rollups WHERE sched_name = 'bench' AND job_group = %(g)s "
        "AND job_name = %(n)s AND bucket_seconds = %(w)s AND bucket_start >= %(s)s "
        "AND bucket_start < %(e)s"
    )
    not_run = frozenset({"misfired", "expired", "held", "skipped"})
    return [
        (
            "history: one job",
            lambda: store.history(HistoryFilter(job=job), limit=100),
            "SELECT * FROM quartz_history WHERE sched_name = 'bench' AND job_group = 'jobs' "
            f"AND job_name = 'job-00042' {page}",
            {},
        ),
        (
            "history: failed",
            lambda: store.history(HistoryFilter(results=frozenset({"failed"})), limit=100),
            f"SELECT * FROM quartz_history WHERE sched_name = 'bench' AND result = 'failed' {page}",
            {},
        ),
        (
            "history: not run (4 results)",
            lambda: store.history(HistoryFilter(results=not_run), limit=100),
            "SELECT * FROM quartz_history WHERE sched_name = 'bench' AND result IN "
            f"('misfired', 'expired', 'held', 'skipped') {page}",
            {},
        ),
        (
            "history: one job, a day ago",
            lambda: store.history(HistoryFilter(job=job, until=from_millis(now - day)), limit=100),
            "SELECT * FROM quartz_history WHERE sched_name = 'bench' AND job_group = 'jobs' "
            f"AND job_name = 'job-00042' AND event_time < {now - day} {page}",
            {},
        ),
        (
            "stats: 24 h by hour",
            lambda: store.statistics(window=timedelta(hours=24), bucket=timedelta(hours=1)),
            rollups,
            {"g": "", "n": "", "w": 3600, "s": end_h - 24 * hour, "e": end_h},
        ),
        (
            "stats: 30 days by day",
            lambda: store.statistics(window=timedelta(days=30), bucket=timedelta(days=1)),
            rollups,
            {"g": "", "n": "", "w": 86400, "s": end_d - 30 * day, "e": end_d},
        ),
        (
            "stats: one job, 7 days by 6 h",
            lambda: store.statistics(job=job, window=timedelta(days=7), bucket=timedelta(hours=6)),
            rollups,
            {"g": "jobs", "n": "job-00042", "w": 3600, "s": end_6h - 7 * day, "e": end_6h},
        ),
        (
            "audit page",
            lambda: store.audit(limit=100),
            "SELECT * FROM quartz_audit WHERE sched_name = 'bench' "
            "ORDER BY event_time DESC, audit_id DESC LIMIT 100",
            {},
        ),
    ]


def measure_reads(url: str, dsn: str, requests: int, show_plans: bool) -> list[list[Any]]:
    import psycopg

    from celery_quartz.store.sql import SqlStore

    store = SqlStore(url, scheduler_name=SCHEDULER_NAME)
    rows: list[list[Any]] = []
    try:
        with psycopg.connect(dsn, autocommit=True) as db:
            for label, read, sql, params in reads(store, now_ms()):
                read()  # warm the pool and the plan cache
                store_ms, base_ms = [], []
                for _ in range(requests):
                    began = time.perf_counter()
                    read()
                    store_ms.append((time.perf_counter() - began) * 1000)
                    began = time.perf_counter()
                    db.execute(sql, params).fetchall()
                    base_ms.append((time.perf_counter() - began) * 1000)
                p50, p99 = _percentiles(store_ms)
                b50, b99 = _percentiles(base_ms)
                rows.append([label, p50, p99, b50, b99, p99 / b99 if b99 else float("nan")])
                if show_plans:
                    with captured(store.engine) as statements:
                        read()
                    explain(store.engine, label, statements)
    finally:
        store.dispose()
    return rows


def measure_sweep(url: str, dsn: str, rate: int, seconds: float, show_plans: bool) -> list[Any]:
    """Insert ``rate`` rows/s for ``seconds`` while sweeping once a second; returns the table
    row: (rate, folded/s, deleted/s, backlog at the end, slowest pass ms, median pass ms)."""
    import psycopg

    from celery_quartz.history import HistoryRetention
    from celery_quartz.store.sql import SqlStore

    stored = int(
        psycopg.connect(dsn)
        .execute(
            "SELECT history_rows FROM quartz_run_status WHERE sched_name = 'bench' "
            "AND kind = 'history'"
        )
        .fetchone()[0]  # type: ignore[index]
    )
    # Keep the table at its size: every row folded makes one of the oldest go.
    retention = HistoryRetention(max_age=timedelta(days=3650), max_rows=stored)
    store = SqlStore(url, scheduler_name=SCHEDULER_NAME)
    stop = threading.Event()
    inserted = [0]

    def insert() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            began = time.perf_counter()
            while not stop.is_set():
                due = int((time.perf_counter() - began) * rate) - inserted[0]
                if due >= 100:
                    now = now_ms()
                    conn.execute(
                        _FILL, {"start": now - 1000, "span": 1000, "n": 100, "unfolded": True}
                    )
                    inserted[0] += 100
                else:
                    time.sleep(0.01)

    writer = threading.Thread(target=insert, daemon=True)
    passes: list[float] = []
    folded = deleted = 0
    try:
        writer.start()
        began = time.perf_counter()
        while time.perf_counter() - began < seconds:
            tick = time.perf_counter()
            while True:
                start = time.perf_counter()
                report = store.sweep_history(retention)
                passes.append((time.perf_counter() - start) * 1000)
                folded += report.folded
                deleted += report.deleted_by_cap + report.deleted_by_age
                if not report.more:
                    break
            time.sleep(max(0.0, 1.0 - (time.perf_counter() - tick)))
        stop.set()
        writer.join()
        elapsed = time.perf_counter() - began
        backlog = (
            psycopg.connect(dsn)
            .execute("SELECT count(*) FROM quartz_history WHERE sched_name = 'bench' AND unfolded")
            .fetchone()[0]
        )  # type: ignore[index]
        if show_plans:
            with captured(store.engine) as statements:
                store.sweep_history(retention)
            explain(store.engine, "one sweep pass", statements)
    finally:
        stop.set()
        store.dispose()
    return [
        inserted[0] / elapsed,
        folded / elapsed,
        deleted / elapsed,
        backlog,
        max(passes),
        statistics.median(passes),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--tail", type=int, default=5000, help="rows not folded yet")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--rate", type=int, default=1000, help="finished executions per second")
    parser.add_argument("--sweep-seconds", type=float, default=30.0)
    parser.add_argument("--explain", action="store_true")
    args = parser.parse_args()
    print(machine_summary())
    with services() as (pg, _redis):
        url, dsn = fresh_store(pg)
        took = load(dsn, args.rows, args.tail)
        print(table(["step", "seconds"], [[k, v] for k, v in took.items()]))
        rows = measure_reads(url, dsn, args.requests, args.explain)
        print(
            f"\n{args.rows:,} history rows, {args.rows // 10:,} audit rows, {args.tail:,} "
            f"unfolded; {args.requests} requests each"
        )
        print(
            table(
                [
                    "read",
                    "store p50 ms",
                    "store p99 ms",
                    "SELECT p50 ms",
                    "SELECT p99 ms",
                    "p99 / SELECT p99",
                ],
                rows,
            )
        )
        sweep = measure_sweep(url, dsn, args.rate, args.sweep_seconds, args.explain)
        print(f"\nthe sweep, {args.sweep_seconds:.0f} s at {args.rate}/s, cap = rows stored")
        print(
            table(
                [
                    "inserted/s",
                    "folded/s",
                    "deleted/s",
                    "backlog at end",
                    "slowest pass ms",
                    "median pass ms",
                ],
                [sweep],
            )
        )
    print(
        "\ngoal: store p99 <= 50 ms for each read at 10M rows; the sweep folds as many rows "
        "per second as are inserted, with a bounded backlog"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
