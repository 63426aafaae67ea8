"""Limit: what this PostgreSQL can do with the firing transaction alone (pgbench, no Python).

The store's own tables are seeded as for the throughput scenario (rows copied from one the client
stored); pgbench then runs the firing transaction against them for ``--seconds``:

* ``1/txn``: Quartz's shape, one firing per transaction: claim the earliest due trigger with
  ``FOR UPDATE SKIP LOCKED``, insert its fired row, advance it (three statements);
* ``N/stmt``: one statement claiming ``N`` due triggers (``FOR UPDATE SKIP LOCKED``), inserting
  their fired rows and advancing them (a data-modifying CTE).

"Now" is the run's start time, a constant passed to pgbench (``-D now_ms=``), as the scheduler
passes its clock's time as a parameter. Triggers (fire times 1 ms apart) are advanced by an hour
but start a year in the past, so they stay due for the whole run and every client always finds
work. Firings/s = pgbench's tps times the batch size, checked against the fired rows inserted.

    .venv/bin/python bench/bench_limit.py [--triggers 10000] [--clients 1,2] [--batches 1,10,100]
        [--seconds 5] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from glob import glob
from pathlib import Path

from _harness import (
    TriggerSet,
    fresh_store,
    machine_summary,
    median,
    now_ms,
    query,
    seed,
    services,
    table,
)

# The run's start, passed with -D: a volatile now() in the WHERE clause would defeat the index.
NOW_MS = ":now_ms"
DUE = "sched_name = 'bench' AND trigger_state = 'WAITING' AND next_fire_time <= " + NOW_MS

ONE_PER_TRANSACTION = f"""\
BEGIN;
SELECT trigger_name AS tn, trigger_group AS tg, next_fire_time AS nft, priority AS pr
  FROM quartz_triggers WHERE {DUE}
  ORDER BY next_fire_time, priority DESC LIMIT 1 FOR UPDATE SKIP LOCKED \\gset
INSERT INTO quartz_fired_triggers (sched_name, fire_instance_id, trigger_name, trigger_group,
    instance_name, fired_time, sched_time, priority, state, job_name, job_group)
  VALUES ('bench', gen_random_uuid()::text, :tn, :tg, 'pgbench', {NOW_MS}, :nft, :pr,
    'FIRED', :tn, :tg);
UPDATE quartz_triggers SET next_fire_time = next_fire_time + 3600000, prev_fire_time = :nft,
    times_triggered = times_triggered + 1
  WHERE sched_name = 'bench' AND trigger_name = :tn AND trigger_group = :tg;
END;
"""

BATCH_STATEMENT = f"""\
WITH claimed AS (
  SELECT sched_name, trigger_name, trigger_group, next_fire_time, priority
  FROM quartz_triggers WHERE {DUE}
  ORDER BY next_fire_time, priority DESC LIMIT {{batch}} FOR UPDATE SKIP LOCKED
), fired AS (
  INSERT INTO quartz_fired_triggers (sched_name, fire_instance_id, trigger_name, trigger_group,
      instance_name, fired_time, sched_time, priority, state, job_name, job_group)
  SELECT sched_name, gen_random_uuid()::text, trigger_name, trigger_group, 'pgbench', {NOW_MS},
      next_fire_time, priority, 'FIRED', trigger_name, trigger_group FROM claimed
)
UPDATE quartz_triggers t SET next_fire_time = t.next_fire_time + 3600000,
    prev_fire_time = t.next_fire_time, times_triggered = t.times_triggered + 1
  FROM claimed c
  WHERE t.sched_name = c.sched_name AND t.trigger_name = c.trigger_name
    AND t.trigger_group = c.trigger_group;
"""


def find_pgbench() -> str:
    from tests.services import find_postgres_bindir

    candidate = find_postgres_bindir() / "pgbench"
    if os.access(candidate, os.X_OK):
        return str(candidate)
    found = sorted(glob("/usr/lib/postgresql/*/bin/pgbench"))
    if not found:
        raise SystemExit("pgbench not found (it ships with the postgresql server package)")
    return found[-1]


def run_pgbench(
    pgbench: str, pg: object, dbname: str, script: Path, clients: int, seconds: float
) -> float:
    command = [
        pgbench, "-n", "-M", "prepared", "-f", str(script),
        "-c", str(clients), "-j", str(clients), "-T", str(int(seconds)),
        "-D", f"now_ms={now_ms()}",
        "-h", pg.host, "-p", str(pg.port), "-U", pg.user, dbname,  # type: ignore[attr-defined]
    ]  # fmt: skip
    out = subprocess.run(command, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"pgbench failed:\n{out.stdout}\n{out.stderr}")
    found = re.search(r"tps = ([\d.]+) \(without initial connection time\)", out.stdout)
    if not found:
        raise RuntimeError(f"no tps in pgbench output:\n{out.stdout}")
    return float(found[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--triggers", type=int, default=10_000)
    parser.add_argument("--clients", default="1,2", help="comma-separated pgbench client counts")
    parser.add_argument("--batches", default="1,10,100", help="firings per transaction")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    clients = [int(c) for c in args.clients.split(",")]
    batches = [int(b) for b in args.batches.split(",")]
    pgbench = find_pgbench()
    print(f"# limit: pgbench firing transaction; {machine_summary()}", flush=True)
    rows = []
    with services() as (pg, _rd), tempfile.TemporaryDirectory(prefix="cq-pgbench-") as tmp:
        url, dsn = fresh_store(pg)
        dbname = dsn.rsplit("dbname=", 1)[1]
        year_ago = now_ms() - 365 * 86_400_000
        # Distinct fire times, 1 ms apart: with ties the acquisition ORDER BY (next_fire_time,
        # priority DESC) sorts every tied row, which bench_throughput measures, not this.
        seed(url, dsn, [TriggerSet("due", args.triggers, year_ago, interval_s=3600, step_ms=1)])
        version = query(dsn, "SHOW server_version")[0][0]
        for batch in batches:
            script = Path(tmp) / f"fire-{batch}.sql"
            text = ONE_PER_TRANSACTION if batch == 1 else BATCH_STATEMENT.format(batch=batch)
            script.write_text(text)
            label = "1/txn (3 statements)" if batch == 1 else f"{batch}/stmt (one CTE)"
            for count in clients:
                rates = []
                for _ in range(args.repeats):
                    query(dsn, "SELECT 1")
                    _truncate(dsn)
                    tps = run_pgbench(pgbench, pg, dbname, script, count, args.seconds)
                    inserted = query(dsn, "SELECT count(*) FROM quartz_fired_triggers")[0][0]
                    rate = tps * batch
                    # pgbench's tps excludes connection time; the rows inserted bound it.
                    if inserted < 0.9 * rate * args.seconds:
                        print(f"  warning: {inserted} rows for {rate:.0f}/s", flush=True)
                    rates.append(rate)
                print(f"  {label}, {count} client(s): {median(rates):,.0f} firings/s", flush=True)
                rows.append((label, count, median(rates), min(rates), max(rates)))
    print(f"\n## limit: the firing transaction in pgbench, PostgreSQL {version}\n")
    print(table(["firing transaction", "clients", "firings/s (median)", "min", "max"], rows))
    return 0


def _truncate(dsn: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE quartz_fired_triggers")
        conn.execute("VACUUM ANALYZE quartz_triggers")


if __name__ == "__main__":
    sys.exit(main())
