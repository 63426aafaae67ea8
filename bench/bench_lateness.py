"""Lateness: a sustained load of firings spread evenly over time, across several schedulers.

``--triggers`` triggers each fire every ``--interval`` seconds, their start times spread evenly
over one interval (1,000 triggers every second: one firing due every millisecond). ``--nodes``
scheduler processes (real SchedulingLoops that sleep what ``run_once`` returns, as ``celery beat``
does) run for ``--duration`` seconds after a warm-up.

Lateness of a firing = ``published_time - sched_time`` of its fired row: the instant the
scheduler recorded that the broker had accepted the message, minus the scheduled fire time
(milliseconds, both from the same machine clock). Only occurrences scheduled inside the measured
window count; one that was never published in it counts as missed.

    .venv/bin/python bench/bench_lateness.py [--triggers 1000] [--interval 1] [--nodes 3]
        [--duration 20] [--warmup 5] [--repeats 3]

``--duration 60`` is the issue's one minute of sustained load (default 20 s keeps a full run of all
scenarios near ten minutes; the percentiles are over 20,000 firings per run either way).
"""

from __future__ import annotations

import argparse
import sys
import time

from _harness import (
    NodeConfig,
    TriggerSet,
    check_messages,
    fresh_store,
    machine_summary,
    median,
    nodes,
    now_ms,
    query,
    seed,
    services,
    table,
)


def percentile(sorted_values: list[int], p: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(p / 100 * len(sorted_values) + 0.5) - 1))
    return float(sorted_values[index])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--triggers", type=int, default=1000)
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between firings")
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--duration", type=float, default=20.0, help="measured seconds")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds not measured")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=100, help="quartz_batch_size")
    parser.add_argument(
        "--fire-ahead-window", type=float, default=0.0, help="quartz_fire_ahead_window"
    )
    args = parser.parse_args(argv)
    rate = args.triggers / args.interval
    print(
        f"# lateness: {args.triggers:,} triggers every {args.interval:g}s ({rate:,.0f} firings/s),"
        f" {args.nodes} schedulers, {args.duration:g}s measured; {machine_summary()}",
        flush=True,
    )
    rows = []
    with services() as (pg, rd):
        broker = rd.url(0)
        redis = rd.client(0)
        for attempt in range(args.repeats):
            url, dsn = fresh_store(pg)
            redis.flushdb()
            lead = 5.0  # seconds for the processes to start before the first fire time
            first = now_ms() + int(lead * 1000)
            step = args.interval * 1000 / args.triggers
            seed(url, dsn, [TriggerSet("load", args.triggers, first, args.interval, step)])
            configs = [
                NodeConfig(
                    name=f"node{i}",
                    store_url=url,
                    broker_url=broker,
                    mode="beat",
                    batch_size=args.batch_size,
                    fire_ahead_window=args.fire_ahead_window,
                )
                for i in range(args.nodes)
            ]
            with nodes(configs) as group:
                group.release()
                window_start = first + int(args.warmup * 1000)
                window_end = window_start + int(args.duration * 1000)
                # Run a second past the window so that its last firings can be published.
                time.sleep(max(0.0, (window_end - now_ms()) / 1000 + 1.0))
                results = group.stop()
            lateness = sorted(
                r[0]
                for r in query(
                    dsn,
                    "SELECT published_time - sched_time FROM quartz_fired_triggers "
                    "WHERE state = 'PUBLISHED' AND sched_time >= %s AND sched_time < %s",
                    [window_start, window_end],
                )
            )
            expected = sum(
                len(range_in_window(first + int(i * step), args.interval, window_start, window_end))
                for i in range(args.triggers)
            )
            msgs = check_messages(redis)
            missed = expected - len(lateness)
            cpu = sum(r.cpu_s for r in results) / (args.duration + args.warmup) * 100
            row = (
                attempt + 1,
                len(lateness),
                missed,
                percentile(lateness, 50),
                percentile(lateness, 99),
                float(lateness[-1]) if lateness else float("nan"),
                msgs.duplicates,
                cpu,
            )
            rows.append(row)
            print(
                f"  run {attempt + 1}: {len(lateness):,} firings, missed {missed}, p50 {row[3]:.0f}"
                f" ms, p99 {row[4]:.0f} ms, max {row[5]:.0f} ms, duplicates {msgs.duplicates}",
                flush=True,
            )
        redis.close()
    headers = ["run", "firings", "missed", "p50 ms", "p99 ms", "max ms", "duplicates",
               "scheduler CPU % (sum)"]  # fmt: skip
    med = ("median", *(median([r[i] for r in rows]) for i in range(1, len(headers))))
    print(f"\n## lateness, {rate:,.0f} firings/s over {args.nodes} schedulers\n")
    print(table(headers, [*rows, med]))
    return 0


def range_in_window(start_ms: int, interval_s: float, lo: int, hi: int) -> range:
    """The indexes k with lo <= start + k * interval < hi."""
    step = int(interval_s * 1000)
    first = max(0, -(-(lo - start_ms) // step))
    last = (hi - 1 - start_ms) // step
    return range(first, last + 1)


if __name__ == "__main__":
    sys.exit(main())
