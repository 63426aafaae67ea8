"""Plans of the publication update (FIRED → PUBLISHED) with many firings in flight, with and
without table statistics: the store's statement on its schema, and the forms tried for a
heap-only-tuple (HOT) update, which needs ``state`` out of ``ix_fired_instance`` (no indexed
column changes) and free room on the page (``fillfactor``).

For each size, a new database with the store's tables gets ``--rows`` fired rows of one
scheduler, half of each of two instances, all PUBLISHED except the newest 200, which are FIRED;
the statement marks 100 of instance ``node0``'s FIRED rows. Each plan is run by ``EXPLAIN
ANALYZE`` in a transaction rolled back, first on the table as loaded (autovacuum off: no
statistics, as a new database has until autovacuum's first ANALYZE), then after ``ANALYZE``.
Prints the scan nodes, the rows they read and threw away, and the execution time.

    .venv/bin/python bench/explain_publication.py [--rows 2000,20000,60000]
"""

from __future__ import annotations

import argparse
import re
import sys
import uuid
from typing import Any

from _harness import fresh_store, machine_summary, services

# Each form takes %(sched)s, %(scheds)s (one per id), %(ids)s and %(instance)s.
HOT_FORMS: dict[str, str] = {
    "= ANY(:ids)": (
        "UPDATE quartz_fired_triggers SET state = 'PUBLISHED', published_time = 5 "
        "WHERE sched_name = %(sched)s AND instance_name = %(instance)s AND state = 'FIRED' "
        "AND fire_instance_id = ANY(%(ids)s::varchar[])"
    ),
    "= ANY(:ids), instance as an expression": (
        "UPDATE quartz_fired_triggers SET state = 'PUBLISHED', published_time = 5 "
        "WHERE sched_name = %(sched)s AND fire_instance_id = ANY(%(ids)s::varchar[]) "
        "AND (instance_name || '') = %(instance)s AND state = 'FIRED'"
    ),
    "FROM unnest(:ids)": (
        "UPDATE quartz_fired_triggers f SET state = 'PUBLISHED', published_time = 5 "
        "FROM unnest(%(ids)s::varchar[]) AS u(id) WHERE f.sched_name = %(sched)s "
        "AND f.fire_instance_id = u.id AND f.instance_name = %(instance)s AND f.state = 'FIRED'"
    ),
    "FROM unnest(:scheds, :ids), instance as an expression": (
        "UPDATE quartz_fired_triggers f SET state = 'PUBLISHED', published_time = 5 "
        "FROM unnest(%(scheds)s::varchar[], %(ids)s::varchar[]) AS u(s, id) "
        "WHERE f.sched_name = u.s AND f.fire_instance_id = u.id "
        "AND (f.instance_name || '') = %(instance)s AND f.state = 'FIRED'"
    ),
    "ctid from a per-id LATERAL probe": (
        "UPDATE quartz_fired_triggers SET state = 'PUBLISHED', published_time = 5 "
        "WHERE ctid = ANY(ARRAY(SELECT hit.ctid FROM unnest(%(ids)s::varchar[]) AS u(id) "
        "CROSS JOIN LATERAL (SELECT f.ctid FROM quartz_fired_triggers f "
        "WHERE f.sched_name = %(sched)s AND f.fire_instance_id = u.id LIMIT 1) AS hit)) "
        "AND sched_name = %(sched)s AND instance_name = %(instance)s AND state = 'FIRED'"
    ),
}

HOT_SCHEMA = (
    "DROP INDEX ix_quartz_fired_instance; "
    "CREATE INDEX ix_quartz_fired_instance ON quartz_fired_triggers (sched_name, instance_name); "
    "ALTER TABLE quartz_fired_triggers SET (fillfactor = 50)"
)


def store_statement() -> tuple[str, dict[str, Any]]:
    """The store's own statement as the driver gets it, and the values it fixes itself."""
    from sqlalchemy.dialects import postgresql

    from celery_quartz.store.sql import SqlStore
    from celery_quartz.store.sql._prepared import CompiledStatement

    store = SqlStore("postgresql://nobody@localhost/none", scheduler_name="bench")
    statement = store.scheduling.claims.mark_published_statement
    compiled = CompiledStatement.of(statement, postgresql.dialect())
    return compiled.sql, {**compiled.fixed, "at": 5}


def load(cur: Any, rows: int) -> list[str]:
    """``rows`` fired rows; the ids of 100 FIRED rows of instance node0."""
    ids = [str(uuid.uuid4()) for _ in range(rows)]
    for start in range(0, rows, 5000):
        values = ",".join(
            cur.mogrify(
                "('bench', %s, %s, 'g', %s, 1, 1, 5, %s, 'job', 'g')",
                (fid, f"t{n}", f"node{n % 2}", "FIRED" if n >= rows - 200 else "PUBLISHED"),
            ).decode()
            for n, fid in enumerate(ids[start : start + 5000], start=start)
        )
        cur.execute(
            "INSERT INTO quartz_fired_triggers (sched_name, fire_instance_id, trigger_name, "
            "trigger_group, instance_name, fired_time, sched_time, priority, state, job_name, "
            "job_group) VALUES " + values
        )
    return [ids[n] for n in range(max(0, rows - 200), rows) if n % 2 == 0][:100]


def summary(plan: list[str]) -> str:
    """The plan's scan and join nodes, rows thrown away, and its execution time, on one line."""
    keep = re.compile(r"Scan|Join|Loop|Rows Removed|Execution Time")
    return " | ".join(
        re.sub(r"\s+", " ", line.replace("->", "")).strip() for line in plan if keep.search(line)
    )


def explain(cur: Any, sql: str, params: dict[str, Any]) -> str:
    cur.execute("BEGIN")
    try:
        cur.execute("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) " + sql, params)
        return summary([r[0] for r in cur.fetchall()])
    finally:
        cur.execute("ROLLBACK")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="2000,20000,60000", help="comma-separated sizes")
    args = parser.parse_args(argv)
    import psycopg2

    print(f"# publication update plans; {machine_summary()}")
    store_sql, store_values = store_statement()
    forms: list[tuple[str, str | None, str, dict[str, Any]]] = [
        ("store (state in ix_fired_instance)", None, store_sql, store_values)
    ]
    forms += [(f"HOT schema, {name}", HOT_SCHEMA, sql, {}) for name, sql in HOT_FORMS.items()]
    with services() as (pg, _rd):
        for rows in (int(n) for n in args.rows.split(",")):
            for label, schema, sql, fixed in forms:
                _url, dsn = fresh_store(pg)
                conn = psycopg2.connect(dsn)
                conn.autocommit = True
                cur = conn.cursor()
                cur.execute("ALTER TABLE quartz_fired_triggers SET (autovacuum_enabled = false)")
                if schema:
                    cur.execute(schema)
                ids = load(cur, rows)
                params = {
                    **fixed,
                    "sched": "bench",
                    "scheds": ["bench"] * len(ids),
                    "ids": ids,
                    "instance": "node0",
                }
                print(f"\n## {rows:,} in flight: {label}")
                print(f"- no statistics: {explain(cur, sql, params)}")
                cur.execute("ANALYZE quartz_fired_triggers")
                print(f"- analysed:      {explain(cur, sql, params)}")
                conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
