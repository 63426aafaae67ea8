"""Throughput: N triggers all due, 1/2/3 scheduler processes, no workers, until drained.

Each scheduler process is a real :class:`celery_quartz.loop.SchedulingLoop` publishing through a
real Celery app to Redis, called in a tight loop. The rate is N divided by the time from the
moment all processes were released to the last fired row's ``published_time`` (the broker had
accepted every message by then). After each run the store and the broker are checked: every
trigger advanced past now, every fired row PUBLISHED, one message per occurrence (counted from
the Redis list), and at the end a sample of the messages is consumed by a stock Celery worker.

    .venv/bin/python bench/bench_throughput.py [--triggers 10000] [--nodes 1,2,3] [--repeats 3]
        [--batch-size 100] [--profile]

``--profile`` runs cProfile inside every scheduler process of the last run and prints the
merged top functions by cumulative time.

``--execution-group NAME`` puts every trigger in that execution group (no limit set: its firings
go to the queue NAME). ``--without-index NAME`` drops that index after seeding: run alternately
with and without it to measure what an index costs per firing, e.g. the execution-group page
index (schema 0005)::

    .venv/bin/python bench/bench_throughput.py --nodes 2 --execution-group reports
    .venv/bin/python bench/bench_throughput.py --nodes 2 --execution-group reports \
        --without-index ix_quartz_triggers_exec_group_page
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from _harness import (
    PG_STAT_STATEMENTS,
    QUEUE,
    NodeConfig,
    TriggerSet,
    check_messages,
    drop_index,
    fresh_store,
    machine_summary,
    median,
    nodes,
    now_ms,
    print_profile,
    process_cpu_s,
    query,
    reset,
    reset_statement_stats,
    seed,
    services,
    statement_stats,
    table,
    verify_with_worker,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--triggers", type=int, default=10_000)
    parser.add_argument("--nodes", default="1,2,3", help="comma-separated process counts")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=100, help="quartz_batch_size")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per run")
    parser.add_argument("--sample", type=int, default=200, help="messages run by a real worker")
    parser.add_argument("--profile", action="store_true", help="cProfile the last run's nodes")
    parser.add_argument(
        "--pg-stats", action="store_true", help="pg_stat_statements of the last run"
    )
    parser.add_argument(
        "--execution-group",
        help="put every trigger in this execution group (no limit; its queue has its name)",
    )
    parser.add_argument(
        "--without-index",
        metavar="NAME",
        help="drop this index after seeding (run with and without it, alternately, to measure "
        "what the index costs per firing)",
    )
    args = parser.parse_args(argv)
    node_counts = [int(n) for n in args.nodes.split(",")]
    n = args.triggers
    print(f"# throughput: {n:,} triggers all due; {machine_summary()}", flush=True)

    # Each statement's planning too, beside its execution.
    pg_settings = {**PG_STAT_STATEMENTS, "pg_stat_statements.track_planning": "on"}
    with services(pg_settings if args.pg_stats else None) as (pg, rd):
        url, dsn = fresh_store(pg)
        broker = rd.url(0)
        redis = rd.client(0)
        group = args.execution_group
        queue = group or QUEUE
        seconds = seed(
            url,
            dsn,
            [TriggerSet("due", n, now_ms() - 1000, interval_s=3600, execution_group=group)],
        )
        print(f"seeded {n:,} jobs and triggers in {seconds:.1f}s", flush=True)
        if args.without_index:
            drop_index(dsn, args.without_index)
            print(f"index {args.without_index} dropped", flush=True)
        rows = []
        profile_dir = tempfile.mkdtemp(prefix="cq-bench-prof-")
        profile_paths: list[str] = []
        for count in node_counts:
            rates, cpu_per_firing, stmts_per_firing = [], [], []
            pg_per_firing, redis_per_firing = [], []
            for attempt in range(args.repeats):
                reset(dsn)
                redis.flushdb()
                final = count == node_counts[-1] and attempt == args.repeats - 1
                last = args.profile and final
                if args.pg_stats and final:
                    reset_statement_stats(dsn)
                configs = [
                    NodeConfig(
                        name=f"node{i}",
                        store_url=url,
                        broker_url=broker,
                        batch_size=args.batch_size,
                        profile_path=os.path.join(profile_dir, f"node{i}.prof") if last else None,
                    )
                    for i in range(count)
                ]
                if last:
                    profile_paths = [c.profile_path for c in configs if c.profile_path]
                with nodes(configs) as group:
                    pg_cpu0, redis_cpu0 = process_cpu_s(pg.pid), process_cpu_s(rd.pid)
                    go = now_ms()
                    group.release()
                    deadline = time.monotonic() + args.timeout
                    while group.fired() < n and time.monotonic() < deadline:
                        time.sleep(0.02)
                    results = group.stop()
                time.sleep(0.3)  # the nodes' backends have exited: let the postmaster reap them
                pg_per_firing.append((process_cpu_s(pg.pid) - pg_cpu0) / n * 1e6)
                redis_per_firing.append((process_cpu_s(rd.pid) - redis_cpu0) / n * 1e6)
                published, last_published = query(
                    dsn,
                    "SELECT count(*), max(published_time) FROM quartz_fired_triggers "
                    "WHERE state = 'PUBLISHED'",
                )[0]
                not_advanced = query(
                    dsn,
                    "SELECT count(*) FROM quartz_triggers "
                    "WHERE next_fire_time <= %s OR trigger_state <> 'WAITING'",
                    [now_ms()],
                )[0][0]
                if args.pg_stats and final:
                    stats = statement_stats(dsn, n)
                msgs = check_messages(redis, queue)
                ok = (
                    published == n
                    and not_advanced == 0
                    and msgs.messages == n
                    and msgs.occurrences == n
                    and msgs.duplicates == 0
                )
                if not ok:
                    print(
                        f"CHECK FAILED: published {published}, not advanced {not_advanced}, "
                        f"messages {msgs}",
                        flush=True,
                    )
                rate = n / max(0.001, (last_published - go) / 1000)
                rates.append(rate)
                cpu_per_firing.append(sum(r.cpu_s for r in results) / n * 1e6)
                stmts_per_firing.append(sum(r.statements for r in results) / n)
                print(
                    f"  {count} node(s), run {attempt + 1}: {rate:,.0f} firings/s "
                    f"(per node {[r.fired for r in results]}, duplicates {msgs.duplicates}, "
                    f"checks {'ok' if ok else 'FAILED'})",
                    flush=True,
                )
            rows.append(
                (
                    count,
                    median(rates),
                    min(rates),
                    max(rates),
                    median(cpu_per_firing),
                    median(stmts_per_firing),
                    median(pg_per_firing),
                    median(redis_per_firing),
                )
            )
        sampled, ran = verify_with_worker(rd, broker, args.sample, queue)
        print(f"\nstock Celery worker ran {ran} of {sampled} sampled messages", flush=True)
        base = rows[0][1]
        print(f"\n## throughput, {n:,} triggers due (median of {args.repeats})\n")
        print(
            table(
                [
                    "nodes",
                    "firings/s",
                    "vs 1 node",
                    "min",
                    "max",
                    "CPU µs/firing: schedulers",
                    "PostgreSQL",
                    "Redis",
                    "SQL executes/firing",
                ],
                [
                    (c, r, f"{r / base:.2f}x", lo, hi, cpu, pg_cpu, rd_cpu, st)
                    for c, r, lo, hi, cpu, st, pg_cpu, rd_cpu in rows
                ],
            )
        )
        if args.pg_stats:
            print(f"\n## database time by statement, {node_counts[-1]}-node run\n")
            print(stats)
        if profile_paths:
            print(f"\n## cProfile of the {node_counts[-1]}-node run (all nodes merged)\n")
            print_profile(profile_paths)
        redis.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
