"""Outcome: what keeping each firing's outcome on its trigger costs the worker's completion.

N due triggers are seeded and fired by the store (claim with ``fire_due``, marked started as a
worker would); then the firings are completed alternately in blocks, half with an outcome
(``complete_execution(outcome=...)``: the release's read of the trigger becomes an UPDATE …
RETURNING that writes the outcome), half without (the plain SELECT of the trigger's state), so
drift of the machine hits both alike. Printed: µs per completion (median and p99 of each
block's mean), and the ratio with/without.

    .venv/bin/python bench/bench_outcome.py [--triggers 20000] [--block 500] [--repeats 3]

Services: a throwaway PostgreSQL (tests/services.py). Nothing is asserted; a completion that
does not find its firing prints CHECK FAILED.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import timedelta

from _harness import (
    SCHEDULER_NAME,
    TriggerSet,
    fresh_store,
    machine_summary,
    median,
    now_ms,
    seed,
    services,
    table,
)


def run(url: str, dsn: str, count: int, block: int) -> dict[str, list[float]]:
    from celery_quartz.clock import from_millis
    from celery_quartz.store.sql import SqlStore
    from celery_quartz.store.views import FiringOutcome

    start = now_ms() - 3_600_000
    seed(url, dsn, [TriggerSet("outcome", count, start, 3600.0, 1.0)])
    store = SqlStore(url, scheduler_name=SCHEDULER_NAME, misfire_threshold=86_400)
    ids: list[str] = []
    while len(ids) < count:
        claim = store.claim(
            "bench-node",
            no_later_than=from_millis(now_ms()) + timedelta(seconds=1),
            max_count=100,
            time_window=0,
            fire_due=True,
        )
        if not claim.firings:
            break
        ids += [f.fire_instance_id for f in claim.firings]
    for fire_id in ids:
        store.start_execution(fire_id, "bench-worker@host")
    failed = FiringOutcome.of_exception(RuntimeError("bench"))
    per_block: dict[str, list[float]] = {"without": [], "with": []}
    misses = 0
    for i in range(0, len(ids), block):
        chunk = ids[i : i + block]
        recording = (i // block) % 2 == 1
        began = time.perf_counter()
        for n, fire_id in enumerate(chunk):
            outcome = (failed if n % 10 == 0 else FiringOutcome()) if recording else None
            misses += not store.complete_execution(fire_id, outcome=outcome)
        spent = (time.perf_counter() - began) / len(chunk) * 1e6
        per_block["with" if recording else "without"].append(spent)
    store.dispose()
    if misses:
        print(f"CHECK FAILED: {misses} completions found no executing firing")
    return per_block


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--triggers", type=int, default=20_000)
    parser.add_argument("--block", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(machine_summary())
    rows = []
    with services() as (pg, _):
        for repeat in range(args.repeats):
            url, dsn = fresh_store(pg)
            blocks = run(url, dsn, args.triggers, args.block)
            without, with_ = median(blocks["without"]), median(blocks["with"])
            rows.append(
                [
                    repeat + 1,
                    without,
                    _p99(blocks["without"]),
                    with_,
                    _p99(blocks["with"]),
                    with_ / without if without else float("nan"),
                ]
            )
    print(
        table(
            [
                "run",
                "µs/completion without",
                "p99 of blocks",
                "µs/completion with outcome",
                "p99 of blocks",
                "ratio",
            ],
            rows,
        )
    )
    print(f"median ratio with/without: {median([r[-1] for r in rows]):.3f}")
    return 0


def _p99(values: list[float]) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100)[-1]


if __name__ == "__main__":
    sys.exit(main())
