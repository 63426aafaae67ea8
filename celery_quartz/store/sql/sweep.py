"""The run history's upkeep (:class:`~celery_quartz.store.abc.HistoryKeeper`): fold new rows
into the rollups, then delete what retention no longer keeps (docs/history.md#retention).

Every statement reads one range of an index, as long as one batch at most, whatever the size of
the tables:

* folding reads the partial index ``ix_history_unfolded`` (only the rows not folded yet);
* the age of each result is a range of ``ix_history_result`` (result, event time);
* the caps never count the table: the sweep keeps each trigger's count of stored rows in its
  ``run_status`` row (``history_rows``: +n when folded, -n when deleted), and the scheduler's
  in a ``run_status`` row of kind ``history`` (key ``''``/``''``); the triggers over their cap
  are a range of ``ix_run_status_rows``, and their oldest rows one of ``ix_history_trigger``;
  the scheduler's oldest rows are one of ``ix_history_time``;
* old rollups are a range of ``ix_history_rollups_age`` (width, bucket start), the old audit
  of ``ix_audit_time``.

Only folded rows are deleted, so the statistics never lose a row to the sweep. One node sweeps at
a time: each batch's transaction first takes the ``HISTORY_SWEEP`` lock row with ``FOR UPDATE
SKIP LOCKED`` (PostgreSQL), and a node that finds it taken leaves the sweep to its holder.
SQLite's transactions are serial already.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any

from sqlalchemy import (
    BigInteger,
    Connection,
    String,
    and_,
    bindparam,
    case,
    column,
    delete,
    insert,
    select,
    tuple_,
    update,
    values,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError, IntegrityError

from celery_quartz.errors import ValidationError
from celery_quartz.history import HistoryRetention, RunResult, histogram_bin, merge_histograms
from celery_quartz.store.abc import HistoryKeeper
from celery_quartz.store.sql._context import SqlContext
from celery_quartz.store.sql.history import (
    BUCKET_SOURCES,
    TRIGGER,
    WHOLE_SCHEDULER,
    dump_histogram,
    parse_histogram,
)
from celery_quartz.store.views import SweepReport

logger = logging.getLogger(__name__)

#: Name of the ``locks`` row a sweeping node holds for each batch's transaction.
SWEEP_LOCK = "HISTORY_SWEEP"
#: ``run_status.kind`` of the row that counts the scheduler's stored history rows.
TOTAL = "history"
#: How long the rollups of each width are kept: five-minute buckets two days (the 24 h chart
#: by 5 min, with a day to spare), hourly ones 35 days (a month by hour or by 6 h), daily ones
#: 400 days (a year by day).
ROLLUP_RETENTION = {
    300: timedelta(days=2),
    3600: timedelta(days=35),
    86400: timedelta(days=400),
}
#: Largest batch a sweep takes at once.
MAX_BATCH = 50_000
#: Most triggers over their cap trimmed in one sweep.
_CAPPED_TRIGGERS = 100
#: Longest the sweep waits for a row lock (ms), below PostgreSQL's ``deadlock_timeout`` (1 s).
_LOCK_TIMEOUT_MS = 200
#: SQLSTATEs of a batch that gave way: lock_not_available, deadlock_detected.
_GAVE_WAY = frozenset({"55P03", "40P01"})
#: Keys per statement when looking up existing rollups (bound parameters stay few).
_CHUNK = 1000


class SweepSql(HistoryKeeper):
    """The history's sweep over the SQL tables."""

    def __init__(self, sql: SqlContext) -> None:
        self.sql = sql

    def sweep_history(self, retention: HistoryRetention, *, batch: int = 5000) -> SweepReport:
        """One pass of bounded batches: fold, delete by age, by cap, old rollups and audit;
        ``more`` when one of them found a full batch. Another node holding the sweep's lock
        makes this pass stop where it is."""
        if isinstance(batch, bool) or not isinstance(batch, int) or not 0 < batch <= MAX_BATCH:
            raise ValidationError(f"sweep batch {batch!r}: 1 to {MAX_BATCH} rows")
        counts: Counter[str] = Counter()
        more = False
        steps: list[tuple[str, Callable[[Connection], tuple[int, bool]]]] = [
            ("folded", lambda conn: self._fold(conn, batch)),
            ("deleted_by_age", lambda conn: self._delete_by_age(conn, retention, batch)),
            ("deleted_by_cap", lambda conn: self._delete_by_cap(conn, retention, batch)),
            ("rollups_deleted", lambda conn: self._delete_rollups(conn, batch)),
            ("audit_deleted", lambda conn: self._delete_audit(conn, retention, batch)),
        ]
        for name, step in steps:
            try:
                with self.sql.transaction() as conn:
                    if self.sql.dialect == "postgresql":
                        # The sweep waits for a row lock (a run status a worker is updating)
                        # less than the deadlock detector waits: in a cycle it is the sweep's
                        # batch that gives up, never the worker's transaction.
                        conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{_LOCK_TIMEOUT_MS}ms'")
                    if not self._take_lock(conn):
                        logger.debug("history sweep: another node holds %s", SWEEP_LOCK)
                        break
                    done, full = step(conn)
            except DBAPIError as exc:
                if getattr(exc.orig, "pgcode", None) not in _GAVE_WAY:
                    raise
                logger.info("history sweep: %s waited too long for a row lock; later", name)
                more = True
                break
            counts[name] += done
            more = more or full
        report = SweepReport(more=more, **counts)
        if any(counts.values()):
            logger.info(
                "history sweep of %s: folded %d, deleted %d by age and %d by cap, %d rollup(s) "
                "and %d audit row(s)%s",
                self.sql.scheduler_name,
                report.folded,
                report.deleted_by_age,
                report.deleted_by_cap,
                report.rollups_deleted,
                report.audit_deleted,
                "; more to sweep" if more else "",
            )
        return report

    def _take_lock(self, conn: Connection) -> bool:
        """Hold the sweep's lock row until the transaction ends; False when another node holds
        it now (PostgreSQL; SQLite's write lock, taken at BEGIN, is the lock)."""
        if self.sql.dialect == "sqlite":
            return True
        locks = self.sql.tables.locks
        key = and_(self.sql.scoped(locks), locks.c.lock_name == SWEEP_LOCK)
        take = select(locks.c.lock_name).where(key).with_for_update(skip_locked=True)
        if conn.execute(take).first() is not None:
            return True
        if conn.execute(select(locks.c.lock_name).where(key)).first() is None:
            try:
                with conn.begin_nested():
                    conn.execute(
                        insert(locks).values(
                            sched_name=self.sql.scheduler_name, lock_name=SWEEP_LOCK
                        )
                    )
            except IntegrityError:
                pass  # another node created it first
        return conn.execute(take).first() is not None

    # -- folding ---------------------------------------------------------------------------------

    def _fold(self, conn: Connection, batch: int) -> tuple[int, bool]:
        h = self.sql.tables.history
        rows = conn.execute(
            select(
                h.c.history_id,
                h.c.event_time,
                h.c.result,
                h.c.job_group,
                h.c.job_name,
                h.c.trigger_group,
                h.c.trigger_name,
                h.c.duration_ms,
                h.c.lateness_ms,
            )
            .where(self.sql.scoped(h), h.c.unfolded.is_(True))
            .order_by(h.c.history_id)
            .limit(batch)
        ).all()
        if not rows:
            return 0, False
        rollups: dict[tuple[str, str, int, int, str], _Rollup] = {}
        for row in rows:
            owners = [(WHOLE_SCHEDULER, WHOLE_SCHEDULER)]
            if row.job_name is not None:
                owners.append((row.job_group or "", row.job_name))
            for width in sorted(set(BUCKET_SOURCES.values())):
                start = row.event_time - row.event_time % (width * 1000)
                for group, name in owners:
                    key = (group, name, width, start, row.result)
                    rollups.setdefault(key, _Rollup()).add(row)
        self._merge_rollups(conn, rollups)
        ids = [row.history_id for row in rows]
        for chunk in _chunks(ids, 1000):
            conn.execute(update(h).where(h.c.history_id.in_(chunk)).values(unfolded=False))
        per_trigger = Counter((row.trigger_group, row.trigger_name) for row in rows)
        self._add_counts(conn, per_trigger, len(rows))
        return len(rows), len(rows) >= batch

    def _merge_rollups(
        self, conn: Connection, rollups: dict[tuple[str, str, int, int, str], _Rollup]
    ) -> None:
        r = self.sql.tables.history_rollups
        pk = tuple_(r.c.job_group, r.c.job_name, r.c.bucket_seconds, r.c.bucket_start, r.c.result)
        existing: dict[tuple[str, str, int, int, str], Any] = {}
        for chunk in _chunks(sorted(rollups), _CHUNK):
            for row in conn.execute(select(r).where(self.sql.scoped(r), pk.in_(chunk))):
                key = (
                    row.job_group,
                    row.job_name,
                    row.bucket_seconds,
                    row.bucket_start,
                    row.result,
                )
                existing[key] = row
        # The rows a merge changes are deleted and written again whole, with the new rows:
        # one DELETE per chunk of keys and one multi-row INSERT, whatever their number (only
        # the sweep, holding its lock, writes rollups; readers see one or the other).
        rows = []
        for key, rollup in sorted(rollups.items()):
            old = existing.get(key)
            if old is not None:
                rollup.add_rollup(old)
            group, name, width, start, result = key
            rows.append(
                {
                    "sched_name": self.sql.scheduler_name,
                    "job_group": group,
                    "job_name": name,
                    "bucket_seconds": width,
                    "bucket_start": start,
                    "result": result,
                    **rollup.values(),
                }
            )
        for chunk in _chunks(sorted(existing), _CHUNK):
            conn.execute(delete(r).where(self.sql.scoped(r), pk.in_(chunk)))
        conn.execute(insert(r), rows)

    def _add_counts(
        self, conn: Connection, per_trigger: Counter[tuple[str, str]], total: int
    ) -> None:
        """Add the rows just folded to their triggers' counts and to the scheduler's (a status
        row is created where none is yet: a trigger that has only occurrences not run)."""
        rs = self.sql.tables.run_status
        now = self.sql.now()
        values = [
            {
                "sched_name": self.sql.scheduler_name,
                "kind": kind,
                "key_group": group,
                "key_name": name,
                "since_time": now,
                "history_rows": n,
            }
            # In key order, as every statement that locks several status rows should.
            for kind, group, name, n in sorted(
                [(TRIGGER, g, t, n) for (g, t), n in per_trigger.items()]
                + [(TOTAL, WHOLE_SCHEDULER, WHOLE_SCHEDULER, total)]
            )
        ]
        statement = (postgresql.insert if self.sql.dialect == "postgresql" else sqlite.insert)(rs)
        conn.execute(
            statement.on_conflict_do_update(
                index_elements=[rs.c.sched_name, rs.c.kind, rs.c.key_group, rs.c.key_name],
                set_={"history_rows": rs.c.history_rows + statement.excluded.history_rows},
            ),
            values,
        )

    # -- deleting --------------------------------------------------------------------------------

    def _delete_by_age(
        self, conn: Connection, retention: HistoryRetention, batch: int
    ) -> tuple[int, bool]:
        h = self.sql.tables.history
        now = self.sql.now()
        deleted, full = 0, False
        for result in sorted(RunResult, key=lambda r: r.value):
            room = batch - deleted
            if room <= 0:
                return deleted, True
            cutoff = now - int(retention.age_of(result).total_seconds() * 1000)
            done = self._delete_oldest(
                conn, room, h.c.result == result.value, h.c.event_time < cutoff
            )
            deleted += done
            full = full or done >= room
        return deleted, full

    def _delete_by_cap(
        self, conn: Connection, retention: HistoryRetention, batch: int
    ) -> tuple[int, bool]:
        h, rs = self.sql.tables.history, self.sql.tables.run_status
        deleted, full = 0, False
        cap = retention.max_rows_per_trigger
        if cap is not None:
            over = conn.execute(
                select(rs.c.key_group, rs.c.key_name, rs.c.history_rows)
                .where(self.sql.scoped(rs), rs.c.kind == TRIGGER, rs.c.history_rows > cap)
                .order_by(rs.c.history_rows.desc())
                .limit(_CAPPED_TRIGGERS)
            ).all()
            full = len(over) >= _CAPPED_TRIGGERS
            for row in over:
                room = min(row.history_rows - cap, batch - deleted)
                if room <= 0:
                    return deleted, True
                done = self._delete_oldest(
                    conn,
                    room,
                    h.c.trigger_group == row.key_group,
                    h.c.trigger_name == row.key_name,
                )
                deleted += done
        cap = retention.max_rows
        if cap is not None and deleted < batch:
            stored = conn.execute(
                select(rs.c.history_rows).where(
                    self.sql.scoped(rs),
                    rs.c.kind == TOTAL,
                    rs.c.key_group == WHOLE_SCHEDULER,
                    rs.c.key_name == WHOLE_SCHEDULER,
                )
            ).scalar()
            if stored is not None and stored > cap:
                room = min(stored - cap, batch - deleted)
                done = self._delete_oldest(conn, room)
                deleted += done
                full = full or stored - cap > done
        return deleted, full or deleted >= batch

    def _delete_oldest(self, conn: Connection, count: int, *conditions: Any) -> int:
        """Delete the oldest ``count`` folded rows meeting ``conditions`` and take them off
        their triggers' counts and the scheduler's; how many were deleted."""
        h = self.sql.tables.history
        oldest = (
            select(h.c.history_id)
            .where(self.sql.scoped(h), *conditions, h.c.unfolded.is_(False))
            .order_by(h.c.event_time, h.c.history_id)
            .limit(count)
        )
        # The ids first, then a delete by primary key: a DELETE … WHERE id IN (subquery)
        # may be planned as a join over the whole table.
        ids = list(conn.execute(oldest).scalars())
        gone: list[Any] = []
        for chunk in _chunks(ids, _CHUNK):
            gone += conn.execute(
                delete(h)
                .where(h.c.history_id.in_(chunk))
                .returning(h.c.trigger_group, h.c.trigger_name)
            ).all()
        if gone:
            per_trigger = Counter((row.trigger_group, row.trigger_name) for row in gone)
            self._take_counts(conn, per_trigger, len(gone))
        return len(gone)

    def _take_counts(
        self, conn: Connection, per_trigger: Counter[tuple[str, str]], total: int
    ) -> None:
        rs = self.sql.tables.run_status
        taken = [
            {"kind": kind, "key_group": group, "key_name": name, "n": count}
            for kind, group, name, count in sorted(
                [(TRIGGER, g, t, c) for (g, t), c in per_trigger.items()]
                + [(TOTAL, WHOLE_SCHEDULER, WHOLE_SCHEDULER, total)]
            )
        ]
        if self.sql.dialect == "postgresql":
            # One UPDATE … FROM (VALUES …) for every count: psycopg2 would send an executemany
            # of UPDATEs one statement at a time.
            for chunk in _chunks(taken, _CHUNK):
                rows = values(
                    column("kind", String),
                    column("key_group", String),
                    column("key_name", String),
                    column("n", BigInteger),
                    name="taken",
                ).data([tuple(row.values()) for row in chunk])
                conn.execute(
                    update(rs)
                    .where(
                        self.sql.scoped(rs),
                        rs.c.kind == rows.c.kind,
                        rs.c.key_group == rows.c.key_group,
                        rs.c.key_name == rows.c.key_name,
                    )
                    .values(history_rows=_less(rs.c.history_rows, rows.c.n))
                )
            return
        n: Any = bindparam("n")
        conn.execute(
            update(rs)
            .where(
                self.sql.scoped(rs),
                rs.c.kind == bindparam("k_kind"),
                rs.c.key_group == bindparam("k_group"),
                rs.c.key_name == bindparam("k_name"),
            )
            .values(history_rows=_less(rs.c.history_rows, n)),
            [
                {
                    "k_kind": r["kind"],
                    "k_group": r["key_group"],
                    "k_name": r["key_name"],
                    "n": r["n"],
                }
                for r in taken
            ],
        )

    def _delete_rollups(self, conn: Connection, batch: int) -> tuple[int, bool]:
        r = self.sql.tables.history_rollups
        now = self.sql.now()
        pk = (r.c.job_group, r.c.job_name, r.c.bucket_seconds, r.c.bucket_start, r.c.result)
        deleted = 0
        for width, keep in sorted(ROLLUP_RETENTION.items()):
            room = batch - deleted
            if room <= 0:
                return deleted, True
            old = (
                select(*pk)
                .where(
                    self.sql.scoped(r),
                    r.c.bucket_seconds == width,
                    r.c.bucket_start < now - int(keep.total_seconds() * 1000),
                )
                .order_by(r.c.bucket_start)
                .limit(room)
            )
            keys = [tuple(row) for row in conn.execute(old)]
            for chunk in _chunks(keys, _CHUNK):
                result = conn.execute(delete(r).where(self.sql.scoped(r), tuple_(*pk).in_(chunk)))
                deleted += result.rowcount
        return deleted, deleted >= batch

    def _delete_audit(
        self, conn: Connection, retention: HistoryRetention, batch: int
    ) -> tuple[int, bool]:
        a = self.sql.tables.audit
        cutoff = self.sql.now() - int(retention.audit_max_age.total_seconds() * 1000)
        old = (
            select(a.c.audit_id)
            .where(self.sql.scoped(a), a.c.event_time < cutoff)
            .order_by(a.c.event_time, a.c.audit_id)
            .limit(batch)
        )
        ids = list(conn.execute(old).scalars())
        deleted = 0
        for chunk in _chunks(ids, _CHUNK):
            deleted += conn.execute(delete(a).where(a.c.audit_id.in_(chunk))).rowcount
        return deleted, deleted >= batch


class _Rollup:
    """A rollup row being folded: runs, and duration and lateness histograms and maxima."""

    COLUMNS = ("runs", "duration_max", "duration_hist", "lateness_max", "lateness_hist")

    def __init__(self) -> None:
        self.runs = 0
        self.durations: dict[int, int] = {}
        self.latenesses: dict[int, int] = {}
        self.duration_max: int | None = None
        self.lateness_max: int | None = None

    def add(self, row: Any) -> None:
        self.runs += 1
        if row.duration_ms is not None:
            index = histogram_bin(row.duration_ms)
            self.durations[index] = self.durations.get(index, 0) + 1
            self.duration_max = _max(self.duration_max, row.duration_ms)
        if row.lateness_ms is not None:
            index = histogram_bin(row.lateness_ms)
            self.latenesses[index] = self.latenesses.get(index, 0) + 1
            self.lateness_max = _max(self.lateness_max, row.lateness_ms)

    def add_rollup(self, row: Any) -> None:
        self.runs += row.runs
        self.durations = merge_histograms([self.durations, parse_histogram(row.duration_hist)])
        self.latenesses = merge_histograms([self.latenesses, parse_histogram(row.lateness_hist)])
        self.duration_max = _max(self.duration_max, row.duration_max)
        self.lateness_max = _max(self.lateness_max, row.lateness_max)

    def values(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "duration_max": self.duration_max,
            "duration_hist": dump_histogram(self.durations),
            "lateness_max": self.lateness_max,
            "lateness_hist": dump_histogram(self.latenesses),
        }


def _chunks(items: list[Any], size: int) -> Iterable[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _less(count: Any, n: Any) -> Any:
    """``count - n``, never below 0."""
    return case((count > n, count - n), else_=0)


def _max(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else max(a, b)
