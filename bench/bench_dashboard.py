"""Dashboard: p50/p99 of the HTTP API's filtered trigger pages and overview with many triggers
stored, beside a plain SELECT of the same rows (the baseline, in the same run).

Seeds ``--triggers`` triggers (default 1,000,000) over 1,000 jobs of 5 tasks, 100 trigger
groups, two execution groups (10 %), 1 % pinned to a worker, about 3 % PAUSED, 0.5 % BLOCKED,
0.1 % ERROR and a few hundred overdue; rows are copies of one the client stored, loaded with
COPY. Then the dashboard (uvicorn on loopback, in this process's thread) answers each request
``--requests`` times over HTTP, and the baseline runs the same page's SELECT
(``ORDER BY trigger_group, trigger_name LIMIT 100``) over psycopg. Goal (issue 15): p99 <= 50 ms
for a filtered page of 100 and for the overview at 1M triggers.

    .venv/bin/python bench/bench_dashboard.py [--triggers 1000000] [--requests 200] [--explain]

``--explain`` prints each page's query plan (EXPLAIN ANALYZE of the baseline SELECT).
Services: a throwaway PostgreSQL (tests/services.py). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from typing import Any

from _harness import (
    SCHEDULER_NAME,
    TriggerSet,
    fresh_store,
    machine_summary,
    now_ms,
    query,
    seed,
    services,
    table,
    vacuum,
)

TOKEN = "bench-token"
TASKS = [f"bench.task{i}" for i in range(5)]
JOBS = 1000
GROUPS = 100


def load(url: str, dsn: str, count: int) -> float:
    """The triggers described in the module docstring; returns the seconds it took."""
    import psycopg
    from sqlalchemy import select

    from celery_quartz.store.sql import SqlStore

    started = time.perf_counter()
    now = now_ms()
    seed(url, dsn, [TriggerSet("template", 1, now + 3_600_000, 3600.0)])
    store = SqlStore(url, scheduler_name=SCHEDULER_NAME)
    jobs, triggers = store.tables.jobs, store.tables.triggers
    with store.transaction() as conn:
        job_row = conn.execute(select(jobs)).one()._asdict()
        trig_row = conn.execute(select(triggers)).one()._asdict()
        conn.execute(triggers.delete())
        conn.execute(jobs.delete())
    store.dispose()
    job_cols = [c.name for c in jobs.columns]
    trig_cols = [c.name for c in triggers.columns]
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        with cur.copy(f"COPY {jobs.name} ({', '.join(job_cols)}) FROM STDIN") as copy:
            for j in range(JOBS):
                row = dict(
                    job_row, job_name=f"job-{j:05d}", job_group="jobs", task_name=TASKS[j % 5]
                )
                copy.write_row([row[c] for c in job_cols])
        with cur.copy(f"COPY {triggers.name} ({', '.join(trig_cols)}) FROM STDIN") as copy:
            for i in range(count):
                state = "WAITING"
                next_fire = now + 60_000 + (i * 7919) % 86_400_000
                if i % 1000 == 1:
                    state = "ERROR"
                elif i % 200 == 3:
                    state, next_fire = "BLOCKED", now - 3_600_000
                elif i % 33 == 5:
                    state = "PAUSED"
                elif i % 5000 == 7:
                    next_fire = now - 3_600_000  # overdue: due an hour ago, unclaimed
                row = dict(
                    trig_row,
                    trigger_name=f"t-{i:07d}",
                    trigger_group=f"g{i % GROUPS:03d}",
                    job_name=f"job-{i % JOBS:05d}",
                    job_group="jobs",
                    trigger_state=state,
                    next_fire_time=next_fire,
                    execution_group=("reindex", "billing")[i // 10 % 2] if i % 10 == 9 else None,
                    preferred_node="w1@bench" if i % 100 == 11 else None,
                    error_reason="task gone" if state == "ERROR" else None,
                )
                copy.write_row([row[c] for c in trig_cols])
        conn.commit()
    vacuum(dsn)
    return time.perf_counter() - started


#: (label, API query parameters, the baseline's WHERE beyond the scheduler name)
PAGES: list[tuple[str, dict[str, str], str]] = [
    ("first page", {}, "TRUE"),
    ("page 5,000 (cursor)", {"after": "MIDDLE"}, "(trigger_group, trigger_name) > (%(g)s, %(n)s)"),
    ("group", {"group": "g042"}, "trigger_group = 'g042'"),
    ("state PAUSED", {"state": "PAUSED"}, "trigger_state = 'PAUSED'"),
    ("state ERROR", {"state": "ERROR"}, "trigger_state = 'ERROR'"),
    ("paused=false", {"paused": "false"}, "trigger_state NOT IN ('PAUSED', 'PAUSED_BLOCKED')"),
    ("execution group", {"execution_group": "billing"}, "execution_group = 'billing'"),
    ("pinned node", {"preferred_node": "w1@bench"}, "preferred_node = 'w1@bench'"),
    (
        "task",
        {"task": "bench.task3"},
        "(t.job_name, t.job_group) IN (SELECT job_name, job_group FROM quartz_jobs "
        "WHERE sched_name = 'bench' AND task_name = 'bench.task3')",
    ),
]


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p99 = statistics.quantiles(ordered, n=100)[-1] if len(ordered) > 1 else ordered[0]
    return statistics.median(ordered), p99


def _explain_overview(http: Any, api: str, db: Any) -> None:
    """EXPLAIN ANALYZE of every statement one overview request runs."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    captured: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, statement: str, params: Any, *_: Any) -> None:
        captured.append((statement, params))

    event.listen(Engine, "before_cursor_execute", capture)
    try:
        http.get(api).raise_for_status()
    finally:
        event.remove(Engine, "before_cursor_execute", capture)
    for statement, params in captured:
        if statement.strip().upper() in ("SELECT 1", "SELECT 1;"):
            continue  # the pool's pre-ping
        plan = db.execute("EXPLAIN (ANALYZE, BUFFERS) " + statement, params).fetchall()
        print(f"\n-- overview: {' '.join(statement.split())[:160]}…")
        print("\n".join(r[0] for r in plan))


def _serve(url: str) -> tuple[Any, int]:
    import uvicorn

    from bench.app import app
    from celery_quartz.config import Settings
    from celery_quartz.dashboard import create_app
    from tests.services import free_port

    settings = Settings(
        store_url=url,
        scheduler_name=SCHEDULER_NAME,
        dashboard_tokens={TOKEN: "bench"},
        schema_auto_upgrade=False,
    )
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(app, settings=settings), port=port, log_level="warning")
    )
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return server, port


def main() -> int:
    import httpx
    import psycopg

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--triggers", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--explain", action="store_true")
    args = parser.parse_args()
    print(machine_summary())
    with services() as (pg, _):
        url, dsn = fresh_store(pg)
        print(f"loaded {args.triggers:,} triggers in {load(url, dsn, args.triggers):.1f} s")
        middle = query(
            dsn,
            "SELECT trigger_group, trigger_name FROM quartz_triggers "
            "ORDER BY trigger_group, trigger_name OFFSET %s LIMIT 1",
            (min(500_000, args.triggers // 2),),
        )[0]
        server, port = _serve(url)
        api = f"http://127.0.0.1:{port}/api/v1/schedulers/{SCHEDULER_NAME}"
        rows = []
        with (
            httpx.Client(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as http,
            psycopg.connect(dsn) as db,
        ):
            from celery_quartz.dashboard.api import encode_cursor
            from celery_quartz.keys import TriggerKey

            cursor = encode_cursor(TriggerKey.stored(middle[1], middle[0]))
            for label, params, where in PAGES:
                params = {**params, "limit": "100"}
                if params.get("after") == "MIDDLE":
                    params["after"] = cursor or ""
                sql = (
                    "SELECT t.*, j.task_name FROM quartz_triggers t JOIN quartz_jobs j "
                    "ON j.sched_name = t.sched_name AND j.job_name = t.job_name "
                    "AND j.job_group = t.job_group WHERE t.sched_name = 'bench' AND "
                    f"{where} ORDER BY t.trigger_group, t.trigger_name LIMIT 100"
                )
                sql = sql.replace(
                    "(trigger_group, trigger_name)", "(t.trigger_group, t.trigger_name)"
                )
                bind = {"g": middle[0], "n": middle[1]}
                api_ms, base_ms = [], []
                for _ in range(args.requests):
                    began = time.perf_counter()
                    answer = http.get(f"{api}/triggers", params=params)
                    api_ms.append((time.perf_counter() - began) * 1000)
                    assert answer.status_code == 200, answer.text
                    began = time.perf_counter()
                    db.execute(sql, bind).fetchall()
                    base_ms.append((time.perf_counter() - began) * 1000)
                rows.append(
                    [
                        label,
                        *_percentiles(api_ms),
                        *_percentiles(base_ms),
                        len(answer.json()["items"]),
                    ]
                )
                if args.explain:
                    plan = db.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, bind).fetchall()
                    print(f"\n-- {label}\n" + "\n".join(r[0] for r in plan))
            overview_ms = []
            for _ in range(args.requests):
                began = time.perf_counter()
                answer = http.get(api)
                overview_ms.append((time.perf_counter() - began) * 1000)
                assert answer.status_code == 200, answer.text
            rows.append(["overview", *_percentiles(overview_ms), float("nan"), float("nan"), 0])
            if args.explain:
                _explain_overview(http, api, db)
        server.should_exit = True
    print()
    print(
        table(
            ["request", "API p50 ms", "API p99 ms", "SELECT p50 ms", "SELECT p99 ms", "rows"],
            rows,
        )
    )
    print("\ngoal: API p99 <= 50 ms for each filtered page and for the overview")
    return 0


if __name__ == "__main__":
    sys.exit(main())
