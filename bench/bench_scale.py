"""Scale: cost per firing and idle cost with few vs many triggers stored.

For each size, the store holds ``size`` triggers: ``--due`` of them due now, the rest not due for
a day. Two measurements per size, each repeated and the median reported:

* cost per firing: one scheduler process (tight loop) fires the due triggers until drained;
  wall-clock µs per firing (from release to the last ``published_time``), the scheduler's CPU
  µs per firing, SQL executes per firing (cursor executions: an executemany counts once);
* idle: after the due ones advanced an hour, one scheduler process that sleeps what
  ``run_once`` returns (as ``celery beat`` does) runs ``--idle-seconds``; SQL executes and
  transactions per second (counted by SQLAlchemy events on the store's engine inside that
  process, so nothing else on the database is counted), the statements the server executed for
  that database meanwhile (``pg_stat_statements``: the same plus BEGIN/COMMIT and the connection
  pool's pre-ping ``SELECT 1``), and its CPU time per second (``getrusage``).

    .venv/bin/python bench/bench_scale.py [--sizes 10000,200000] [--due 5000]
        [--idle-seconds 15] [--repeats 3] [--metrics-interval 60]

``--metrics-interval S`` configures an OpenTelemetry SDK in each scheduler process (a reader
collecting every S seconds, an exporter that discards), with the store instrumented and the store
gauges registered as ``celery beat`` wires them: the idle figures then include what metrics cost
(the gauges' three statements per collection, on the one node that collects). Compare a run with
``--metrics-interval 60`` against one without; the idle executes/s may rise by at most 0.1.

``--sizes 10000,1000000`` is the issue's 1M case (seeding 1M rows by COPY takes about a minute).
"""

from __future__ import annotations

import argparse
import sys
import time

from _harness import (
    PG_STAT_STATEMENTS,
    NodeConfig,
    TriggerSet,
    fresh_store,
    machine_summary,
    median,
    nodes,
    now_ms,
    query,
    reset,
    reset_statement_stats,
    seed,
    services,
    table,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,200000", help="comma-separated stored counts")
    parser.add_argument("--due", type=int, default=5000, help="due triggers fired per run")
    parser.add_argument("--idle-seconds", type=float, default=15.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--metrics-interval",
        type=float,
        default=None,
        help="seconds between metric collections of an in-process SDK (default: no SDK)",
    )
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    metrics = f", metrics every {args.metrics_interval:g}s" if args.metrics_interval else ""
    print(f"# scale: sizes {sizes}, {args.due:,} due{metrics}; {machine_summary()}", flush=True)
    rows = []
    with services(PG_STAT_STATEMENTS) as (pg, rd):
        broker = rd.url(0)
        redis = rd.client(0)
        for size in sizes:
            url, dsn = fresh_store(pg)
            now = now_ms()
            seconds = seed(
                url,
                dsn,
                [
                    TriggerSet("due", args.due, now - 1000, interval_s=3600),
                    TriggerSet("later", size - args.due, now + 86_400_000, interval_s=86_400),
                ],
            )
            print(f"seeded {size:,} triggers in {seconds:.1f}s", flush=True)
            wall_us, cpu_us, stmts = [], [], []
            idle_q, idle_tx, idle_cpu, idle_server = [], [], [], []
            for attempt in range(args.repeats):
                reset(dsn, "due")
                redis.flushdb()
                config = NodeConfig(
                    name="node0",
                    store_url=url,
                    broker_url=broker,
                    metrics_interval=args.metrics_interval,
                )
                with nodes([config]) as group:
                    go = now_ms()
                    group.release()
                    while group.fired() < args.due:
                        time.sleep(0.02)
                    (result,) = group.stop()
                published, last = query(
                    dsn,
                    "SELECT count(*), max(published_time) FROM quartz_fired_triggers "
                    "WHERE state = 'PUBLISHED'",
                )[0]
                assert published == args.due, published
                wall_us.append((last - go) * 1000 / args.due)
                cpu_us.append(result.cpu_s * 1e6 / args.due)
                stmts.append(result.statements / args.due)
                idle = NodeConfig(
                    name="idle0",
                    store_url=url,
                    broker_url=broker,
                    mode="beat",
                    metrics_interval=args.metrics_interval,
                )
                with nodes([idle]) as group:
                    reset_statement_stats(dsn)
                    since = time.perf_counter()
                    group.release()
                    time.sleep(args.idle_seconds)
                    # What the server executed for this database meanwhile (only the idle node
                    # is connected): its statements plus BEGIN/COMMIT and the pool's pre-ping.
                    server = query(
                        dsn,
                        "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE dbid = "
                        "(SELECT oid FROM pg_database WHERE datname = current_database()) "
                        "AND query NOT LIKE %s",
                        ["%pg_stat_statements%"],
                    )[0][0]
                    idle_server.append(float(server) / (time.perf_counter() - since))
                    (result,) = group.stop()
                assert result.fired == 0, result
                idle_q.append(result.statements / result.wall_s)
                idle_tx.append(result.transactions / result.wall_s)
                idle_cpu.append(result.cpu_s / result.wall_s * 1000)
                print(
                    f"  {size:,} stored, run {attempt + 1}: {wall_us[-1]:.0f} µs/firing, "
                    f"idle {idle_q[-1]:.2f} executes/s ({idle_server[-1]:.2f} server statements/s),"
                    " "
                    f"{idle_cpu[-1]:.1f} CPU ms/s",
                    flush=True,
                )
            rows.append(
                (
                    size,
                    median(wall_us),
                    median(cpu_us),
                    median(stmts),
                    median(idle_q),
                    median(idle_tx),
                    median(idle_server),
                    median(idle_cpu),
                )
            )
        redis.close()
    base = rows[0]
    print(f"\n## scale (median of {args.repeats}); ratios against {base[0]:,} stored\n")
    print(
        table(
            ["stored", "µs/firing vs smallest", "idle server statements/s vs smallest"],
            [(r[0], f"{r[1] / base[1]:.2f}x", f"{r[6] / base[6]:.2f}x") for r in rows],
        )
    )
    print()
    print(
        table(
            [
                "stored",
                "wall µs/firing",
                "scheduler CPU µs/firing",
                "SQL executes/firing",
                "idle SQL executes/s",
                "idle transactions/s",
                "idle server statements/s",
                "idle CPU ms/s",
            ],
            rows,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
