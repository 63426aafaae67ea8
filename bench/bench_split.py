"""Past one database: the same work as one cluster on one database, or split across clusters.

``--triggers`` N triggers all due, fired until drained by real scheduling loops (as in
``bench_throughput.py``), in three layouts measured alternately in one run:

* ``1 cluster x 1 node``: one scheduler process on one database (the baseline);
* ``1 cluster x 2 nodes``: two scheduler processes of one scheduler name on one database;
* ``2 clusters x 1 node``: the triggers split in halves, each half its own scheduler name's
  cluster on its own database (the documented way past one database), one process each.

The rate is N over the time from release to the last fired row's ``published_time`` (of either
database). Every layout is checked: every trigger advanced, one message per occurrence. All
databases live on one PostgreSQL server on this machine, so the split measures what separate
clusters save in contention (their claims and locks never meet), not what separate database
servers add in capacity; the docs say so.

    .venv/bin/python bench/bench_split.py [--triggers 10000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

from _harness import (
    QUEUE,
    NodeConfig,
    TriggerSet,
    check_messages,
    fresh_store,
    machine_summary,
    median,
    nodes,
    now_ms,
    query,
    reset,
    seed,
    services,
    table,
)

LAYOUTS = ("1 cluster x 1 node", "1 cluster x 2 nodes", "2 clusters x 1 node")


def _drain(configs: Sequence[NodeConfig], dsns: Sequence[str], total: int, timeout: float) -> float:
    """Release ``configs``' nodes, wait until ``total`` firings are out; firings per second."""
    with nodes(configs) as group:
        go = now_ms()
        group.release()
        deadline = time.monotonic() + timeout
        while group.fired() < total and time.monotonic() < deadline:
            time.sleep(0.02)
        group.stop()
    last = max(
        query(dsn, "SELECT max(published_time) FROM quartz_fired_triggers")[0][0] or go
        for dsn in dsns
    )
    return total / max(0.001, (last - go) / 1000)


def _checked(dsns: Sequence[str], redis: object, total: int) -> bool:
    published = sum(
        query(dsn, "SELECT count(*) FROM quartz_fired_triggers WHERE state = 'PUBLISHED'")[0][0]
        for dsn in dsns
    )
    not_advanced = sum(
        query(
            dsn,
            "SELECT count(*) FROM quartz_triggers WHERE next_fire_time <= %s "
            "OR trigger_state <> 'WAITING'",
            [now_ms()],
        )[0][0]
        for dsn in dsns
    )
    msgs = check_messages(redis, QUEUE)
    return (
        published == total and not_advanced == 0 and msgs.messages == total and msgs.duplicates == 0
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--triggers", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=900, help="seconds per run")
    args = parser.parse_args(argv)
    n = args.triggers
    print(f"# split: {n:,} triggers all due; {machine_summary()}", flush=True)
    with services() as (pg, rd):
        broker = rd.url(0)
        redis = rd.client(0)
        whole_url, whole_dsn = fresh_store(pg)
        halves = [fresh_store(pg), fresh_store(pg)]
        due = now_ms() - 1000
        seed(whole_url, whole_dsn, [TriggerSet("due", n, due, interval_s=3600)])
        for (url, dsn), group in zip(halves, ("east", "west"), strict=True):
            # Groups of their own: an occurrence is told apart in the one queue they share.
            seed(url, dsn, [TriggerSet(group, n // 2, due, interval_s=3600)])
        total_split = 2 * (n // 2)
        rates: dict[str, list[float]] = {layout: [] for layout in LAYOUTS}
        failed = 0
        for attempt in range(args.repeats):
            for layout in LAYOUTS:
                redis.flushdb()
                if layout == "2 clusters x 1 node":
                    dsns = [dsn for _, dsn in halves]
                    configs = [
                        NodeConfig(name=f"split{i}", store_url=url, broker_url=broker)
                        for i, (url, _) in enumerate(halves)
                    ]
                    total = total_split
                else:
                    dsns = [whole_dsn]
                    count = 2 if layout.endswith("2 nodes") else 1
                    configs = [
                        NodeConfig(name=f"node{i}", store_url=whole_url, broker_url=broker)
                        for i in range(count)
                    ]
                    total = n
                for dsn in dsns:
                    reset(dsn)
                rate = _drain(configs, dsns, total, args.timeout)
                ok = _checked(dsns, redis, total)
                failed += not ok
                rates[layout].append(rate)
                print(
                    f"  run {attempt + 1}, {layout}: {rate:,.0f} firings/s "
                    f"(checks {'ok' if ok else 'FAILED'})",
                    flush=True,
                )
    base = median(rates[LAYOUTS[0]])
    print(f"\n## split, {n:,} triggers due (median of {args.repeats})\n")
    print(
        table(
            ["layout", "firings/s", "vs 1 cluster x 1 node", "min", "max"],
            [(layout, median(r), median(r) / base, min(r), max(r)) for layout, r in rates.items()],
        )
    )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
