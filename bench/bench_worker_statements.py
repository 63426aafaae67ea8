"""The worker's store calls alone, in one process: client CPU per execution.

    .venv/bin/python bench/bench_worker_statements.py [--firings 5000] [--repeats 3]

N due triggers are fired and published once (as ``bench_pipeline.py`` does); each run restores
the same N fired rows and, in this process, makes for each the calls a hooked worker makes: the
start (``start_execution``) and, 200 at a time, the batched completion (``complete_executions``).
Two variants alternate in every repeat, on the same store and code:

- **direct**: nothing listens to the engine's statements, so the one-statement start and
  completions run on the pooled driver connection (``SqlContext.run_alone``);
- **through a Connection**: a ``before_cursor_execute`` listener that does nothing is attached,
  which makes the same statements go through a SQLAlchemy ``Connection`` and its result, as every
  statement did before.

Reported: this process's CPU (user + system) per execution for each, and their ratio, with
PostgreSQL's CPU per execution. Correctness is checked in every run: every start recorded once,
and no fired row left.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from _harness import (  # type: ignore[import-not-found]
    machine_summary,
    median,
    process_cpu_s,
    services,
    table,
)
from bench_pipeline import FIRED, _fired_left, _fresh_store, publish_once, query, restore

#: As many ends as a worker process's batch holds at most.
BATCH = 200
WORKER = "bench@statements"


def run(store: Any, ids: list[str], pg_pid: int | None) -> dict[str, float]:
    """Start every firing of ``ids``, complete them in batches; CPU per execution."""
    from celery_quartz.clock import to_millis
    from celery_quartz.store.records import FinishedExecution

    cpu0, pg0 = time.process_time(), process_cpu_s(pg_pid)
    started = 0
    ends: list[Any] = []
    for fire_id in ids:
        started += store.start_execution(fire_id, WORKER) is not None
        ends.append(FinishedExecution(fire_id, to_millis(store.clock.now())))
        if len(ends) == BATCH:
            store.complete_executions(ends)
            ends = []
    if ends:
        store.complete_executions(ends)
    cpu, pg = time.process_time() - cpu0, process_cpu_s(pg_pid) - pg0
    return {
        "client_us": cpu / len(ids) * 1e6,
        "pg_us": pg / len(ids) * 1e6,
        "started": started,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--firings", type=int, default=5_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    from sqlalchemy import event

    from celery_quartz.store import SqlStore

    print(f"# worker statements; {machine_summary()}; store driver psycopg2", flush=True)
    n = args.firings
    failed = 0
    results: dict[str, list[dict[str, float]]] = {"direct": [], "through a Connection": []}
    with services() as (pg, rd):
        url, dsn = _fresh_store(pg, "psycopg2")
        dump = publish_once(url, dsn, rd.url(0), rd.client(0), n)
        ids = [row[0] for row in query(dsn, f"SELECT fire_instance_id FROM {FIRED}")]
        # As the worker opens its store: no pre-ping (celery_quartz.worker).
        store = SqlStore(url, scheduler_name="bench", pre_ping=False, pool_size=4)

        def listener(*_: Any) -> None:
            """Does nothing; its presence sends the statements through a Connection."""

        try:
            for repeat in range(args.repeats):
                variants = list(results)
                for variant in variants if repeat % 2 == 0 else variants[::-1]:
                    restore(dsn, rd.client(0), dump)
                    watched = variant != "direct"
                    autocommit = store.context.autocommit
                    if watched:
                        event.listen(autocommit, "before_cursor_execute", listener)
                    try:
                        result = run(store, ids, pg.pid)
                    finally:
                        if watched:
                            event.remove(autocommit, "before_cursor_execute", listener)
                    left = _fired_left(dsn)
                    print(
                        f"  {variant}: client {result['client_us']:.0f} µs, PostgreSQL "
                        f"{result['pg_us']:.0f} µs per execution; {result['started']:.0f} "
                        f"started, {left} fired rows left",
                        flush=True,
                    )
                    if result["started"] != n or left:
                        failed += 1
                        print("  CHECK FAILED")
                    results[variant].append(result)
        finally:
            store.dispose()

    def med(variant: str, key: str) -> float:
        return median([r[key] for r in results[variant]])

    base = med("through a Connection", "client_us")
    rows = [
        (v, f"{cpu:.0f}", f"{cpu / base:.2f}", f"{med(v, 'pg_us'):.0f}")
        for v in results
        for cpu in [med(v, "client_us")]
    ]
    headers = ("statements run", "client CPU µs/execution", "ratio", "PostgreSQL CPU µs/execution")
    print()
    print(table(headers, rows))
    print(f"medians of {args.repeats} runs each; ratio against 'through a Connection'")
    print("correctness: " + ("every run OK" if not failed else f"{failed} run(s) FAILED"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
