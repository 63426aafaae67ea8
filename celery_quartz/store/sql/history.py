"""The run history's read side (:class:`~celery_quartz.store.abc.HistoryReader`): pages of
history and audit rows, statistics from the rollups and the unfolded tail, run statuses and the
jobs past their success deadline.

Each page is one range of an index of schema 0006, read newest first by (event time, id):
``ix_history_job`` or ``ix_history_trigger`` for a key, ``ix_history_result`` for one result
(several results: one range per result, merged by a ``UNION ALL`` of per-result pages),
``ix_history_time`` otherwise; ``ix_audit_principal`` or ``ix_audit_time`` for the audit.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    Connection,
    Float,
    Integer,
    and_,
    case,
    cast,
    func,
    select,
    tuple_,
    union_all,
)

from celery_quartz.clock import from_millis, require_aware, to_millis
from celery_quartz.errors import ValidationError
from celery_quartz.history import (
    BINS_PER_DOUBLING,
    LAST_BIN,
    histogram_bin,
    merge_histograms,
    parse_result,
    percentile,
)
from celery_quartz.keys import JobKey, TriggerKey
from celery_quartz.store.abc import HistoryReader
from celery_quartz.store.sql._context import SqlContext
from celery_quartz.store.sql._rows import datetime_or_none
from celery_quartz.store.views import (
    MAX_PAGE,
    AuditEntry,
    AuditFilter,
    HistoryCursor,
    HistoryEntry,
    HistoryFilter,
    Page,
    RunStatus,
    Statistics,
    StatisticsBucket,
)

#: ``run_status.kind`` of a job's status and of a trigger's.
JOB, TRIGGER = "job", "trigger"
#: Bucket widths a statistics read accepts (seconds), and the rollup each is read from: 6 h
#: buckets are merged from the hourly rollups.
BUCKET_SOURCES = {300: 300, 3600: 3600, 21600: 3600, 86400: 86400}
#: Most buckets one statistics read returns.
MAX_BUCKETS = 5000
#: ``job_group``/``job_name`` of the scheduler-wide rollups.
WHOLE_SCHEDULER = ""


class HistorySql(HistoryReader):
    """The run history's read side over the SQL tables."""

    def __init__(self, sql: SqlContext) -> None:
        self.sql = sql

    # -- history ---------------------------------------------------------------------------------

    def history(
        self,
        filters: HistoryFilter | None = None,
        *,
        after: HistoryCursor | None = None,
        limit: int = 100,
    ) -> Page[HistoryEntry, HistoryCursor]:
        h = self.sql.tables.history
        filters = filters or HistoryFilter()
        limit = page_size(limit)
        results = _results(filters.results)
        conditions = [self.sql.scoped(h), *self._history_conditions(filters)]
        if after is not None:
            conditions.append(tuple_(h.c.event_time, h.c.history_id) < tuple(_cursor(after)))
        newest = (h.c.event_time.desc(), h.c.history_id.desc())
        if (
            results is not None
            and len(results) > 1
            and filters.job is None
            and filters.trigger is None
        ):
            # One range of ix_history_result per result, each cut to a page, merged: a filter
            # on several results costs a page per result, not a scan of the time index. The
            # ranges give only the keys (the index holds them); the page's rows are read next.
            arms = [
                select(
                    select(h.c.event_time, h.c.history_id)
                    .where(*conditions, h.c.result == r)
                    .order_by(*newest)
                    .limit(limit + 1)
                    .subquery(f"result_{i}")
                )
                for i, r in enumerate(sorted(results))
            ]
            merged = union_all(*arms).subquery("by_result")
            keys = (
                select(merged.c.history_id)
                .order_by(merged.c.event_time.desc(), merged.c.history_id.desc())
                .limit(limit + 1)
            )
            with self.sql.transaction() as conn:
                ids = list(conn.execute(keys).scalars())
                rows = (
                    conn.execute(select(h).where(h.c.history_id.in_(ids)).order_by(*newest)).all()
                    if ids
                    else []
                )
        else:
            if results is not None:
                conditions.append(h.c.result.in_(sorted(results)))
            query = select(h).where(*conditions).order_by(*newest)
            with self.sql.transaction() as conn:
                rows = conn.execute(query.limit(limit + 1)).all()
        entries = [history_entry(r) for r in rows[:limit]]
        last = entries[-1] if len(rows) > limit else None
        return Page(
            entries, None if last is None else (to_millis(last.event_time), last.history_id)
        )

    def _history_conditions(self, filters: HistoryFilter) -> list[Any]:
        h = self.sql.tables.history
        conditions: list[Any] = []
        if filters.job is not None:
            conditions += [h.c.job_group == filters.job.group, h.c.job_name == filters.job.name]
        if filters.trigger is not None:
            conditions += [
                h.c.trigger_group == filters.trigger.group,
                h.c.trigger_name == filters.trigger.name,
            ]
        if filters.group is not None and filters.job is None and filters.trigger is None:
            conditions.append(h.c.trigger_group == filters.group)
        if filters.since is not None:
            conditions.append(h.c.event_time >= _millis(filters.since, "since"))
        if filters.until is not None:
            conditions.append(h.c.event_time < _millis(filters.until, "until"))
        return conditions

    # -- statistics ------------------------------------------------------------------------------

    def statistics(
        self,
        *,
        job: JobKey | None = None,
        window: timedelta = timedelta(hours=24),
        bucket: timedelta = timedelta(hours=1),
        until: datetime | None = None,
    ) -> Statistics:
        """Buckets are aligned to whole multiples of their width since the epoch (UTC), and the
        window ends at the end of the bucket holding ``until``: ``Statistics.until`` is that
        end, ``since`` is ``ceil(window / bucket)`` buckets before it."""
        width = _bucket_seconds(bucket)
        count = _bucket_count(window, width)
        end_at = _millis(until, "until") if until is not None else self.sql.now()
        width_ms = width * 1000
        end = (end_at // width_ms + 1) * width_ms
        start = end - count * width_ms
        source = BUCKET_SOURCES[width]
        r, h = self.sql.tables.history_rollups, self.sql.tables.history
        group, name = (job.group, job.name) if job else (WHOLE_SCHEDULER, WHOLE_SCHEDULER)
        rollups = select(
            r.c.bucket_start,
            r.c.result,
            r.c.runs,
            r.c.duration_max,
            r.c.duration_hist,
            r.c.lateness_max,
            r.c.lateness_hist,
        ).where(
            self.sql.scoped(r),
            r.c.job_group == group,
            r.c.job_name == name,
            r.c.bucket_seconds == source,
            r.c.bucket_start >= start,
            r.c.bucket_start < end,
        )
        # The rows the sweep has not folded yet: the partial index ix_history_unfolded holds
        # only them, so this reads as many rows as the sweep lags behind.
        in_tail = [
            self.sql.scoped(h),
            h.c.unfolded.is_(True),
            h.c.event_time >= start,
            h.c.event_time < end,
        ]
        if job is not None:
            in_tail += [h.c.job_group == job.group, h.c.job_name == job.name]
        buckets = [_Accumulator() for _ in range(count)]
        with self._snapshot() as conn:
            # Both reads in one snapshot: a sweep that folds rows between them would count
            # them twice, or not at all.
            for row in conn.execute(rollups):
                buckets[(row.bucket_start - start) // width_ms].add_rollup(row)
            if self.sql.dialect == "postgresql":
                self._add_tail_binned(conn, buckets, in_tail, start, width_ms)
            else:
                tail = select(h.c.event_time, h.c.result, h.c.duration_ms, h.c.lateness_ms)
                for unfolded in conn.execute(tail.where(*in_tail)):
                    buckets[(unfolded.event_time - start) // width_ms].add_row(unfolded)
        total = _Accumulator()
        for accumulator in buckets:
            total.merge(accumulator)
        return Statistics(
            job=job,
            since=from_millis(start),
            until=from_millis(end),
            bucket=timedelta(seconds=width),
            buckets=[b.bucket(from_millis(start + i * width_ms)) for i, b in enumerate(buckets)],
            total=total.bucket(from_millis(start)),
        )

    def _add_tail_binned(
        self,
        conn: Connection,
        buckets: list[_Accumulator],
        in_tail: list[Any],
        start: int,
        width_ms: int,
    ) -> None:
        """The unfolded tail counted by PostgreSQL: one row per (bucket, result, bin) rather
        than per history row (bins as :func:`~celery_quartz.history.histogram_bin` computes
        them, with the same libm logarithm)."""
        h = self.sql.tables.history
        index = ((h.c.event_time - start) // width_ms).label("bucket")
        for column, latenesses in ((h.c.duration_ms, False), (h.c.lateness_ms, True)):
            value = _bin(column).label("bin")
            query = select(index, h.c.result, value, func.count().label("n"), func.max(column))
            query = query.where(*in_tail)
            if latenesses:
                query = query.where(column.is_not(None))
            for row in conn.execute(query.group_by(index, h.c.result, value)):
                buckets[row.bucket].add_binned(row.result, row.bin, row.n, row[4], latenesses)

    @contextmanager
    def _snapshot(self) -> Iterator[Connection]:
        """A read transaction that sees one snapshot of the database (PostgreSQL: REPEATABLE
        READ, set by its first statement; SQLite's transactions are serial already)."""
        with self.sql.transaction() as conn:
            if self.sql.dialect == "postgresql":
                conn.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            yield conn

    # -- run status ------------------------------------------------------------------------------

    def run_status(
        self,
        *,
        kind: str = JOB,
        group: str | None = None,
        name: str | None = None,
        after: tuple[str, str] | None = None,
        limit: int = 100,
    ) -> Page[RunStatus, tuple[str, str]]:
        if kind not in (JOB, TRIGGER):
            raise ValidationError(f"run status kind {kind!r}: use 'job' or 'trigger'")
        if name is not None and group is None:
            raise ValidationError(f"run status of {name!r}: give its group too")
        rs = self.sql.tables.run_status
        limit = page_size(limit)
        query = self._status_query().where(rs.c.kind == kind)
        if group is not None:
            query = query.where(rs.c.key_group == group)
        if name is not None:
            query = query.where(rs.c.key_name == name)
        if after is not None:
            query = query.where(tuple_(rs.c.key_group, rs.c.key_name) > tuple(after))
        now = self.sql.now()
        with self.sql.transaction() as conn:
            rows = conn.execute(
                query.order_by(rs.c.key_group, rs.c.key_name).limit(limit + 1)
            ).all()
        statuses = [run_status(r, kind, r.require_success_within, now) for r in rows[:limit]]
        return Page(
            statuses,
            (rows[limit - 1].key_group, rows[limit - 1].key_name) if len(rows) > limit else None,
        )

    def _status_query(self) -> Any:
        rs, j = self.sql.tables.run_status, self.sql.tables.jobs
        same_job = and_(
            j.c.sched_name == rs.c.sched_name,
            j.c.job_group == rs.c.key_group,
            j.c.job_name == rs.c.key_name,
            rs.c.kind == JOB,
        )
        return (
            select(rs, j.c.require_success_within)
            .select_from(rs.outerjoin(j, same_job))
            .where(self.sql.scoped(rs))
        )

    def overdue_jobs(
        self, deadlines: dict[JobKey, timedelta] | None = None, *, limit: int = 100
    ) -> list[RunStatus]:
        """A deadline stored on the job wins over one in ``deadlines``. It counts from the last
        success, or from the job's first recorded run when it never succeeded; a job with no
        recorded run is not listed (its overdue triggers are: ``owed_triggers``)."""
        limit = page_size(limit)
        rs, j = self.sql.tables.run_status, self.sql.tables.jobs
        now = self.sql.now()
        reference = func.coalesce(rs.c.last_success_time, rs.c.since_time)
        stored = self._status_query().where(
            rs.c.kind == JOB,
            j.c.require_success_within.is_not(None),
            reference + j.c.require_success_within < now,
        )
        found: dict[tuple[str, str], RunStatus] = {}
        given = {k: _deadline_millis(k, d) for k, d in (deadlines or {}).items()}
        with self.sql.transaction() as conn:
            for row in conn.execute(stored):
                found[(row.key_group, row.key_name)] = run_status(
                    row, JOB, row.require_success_within, now
                )
            keys = [(k.group, k.name) for k in given]
            for chunk in range(0, len(keys), 500):
                part = keys[chunk : chunk + 500]
                query = self._status_query().where(
                    rs.c.kind == JOB,
                    j.c.require_success_within.is_(None),
                    tuple_(rs.c.key_group, rs.c.key_name).in_(part),
                )
                for row in conn.execute(query):
                    deadline = given[JobKey.stored(row.key_name, row.key_group)]
                    status = run_status(row, JOB, deadline, now)
                    if status.overdue:
                        found[(row.key_group, row.key_name)] = status
        due = sorted(found.values(), key=lambda s: (_due(s), s.key.group, s.key.name))
        return due[:limit]

    # -- audit -----------------------------------------------------------------------------------

    def audit(
        self,
        filters: AuditFilter | None = None,
        *,
        after: HistoryCursor | None = None,
        limit: int = 100,
    ) -> Page[AuditEntry, HistoryCursor]:
        a = self.sql.tables.audit
        filters = filters or AuditFilter()
        limit = page_size(limit)
        query = select(a).where(self.sql.scoped(a))
        for value, column in (
            (filters.principal, a.c.principal),
            (filters.via, a.c.via),
            (filters.action, a.c.action),
            (filters.target, a.c.target),
        ):
            if value is not None:
                query = query.where(column == value)
        if filters.since is not None:
            query = query.where(a.c.event_time >= _millis(filters.since, "since"))
        if filters.until is not None:
            query = query.where(a.c.event_time < _millis(filters.until, "until"))
        if after is not None:
            query = query.where(tuple_(a.c.event_time, a.c.audit_id) < tuple(_cursor(after)))
        query = query.order_by(a.c.event_time.desc(), a.c.audit_id.desc()).limit(limit + 1)
        with self.sql.transaction() as conn:
            rows = conn.execute(query).all()
        entries = [audit_entry(r) for r in rows[:limit]]
        last = entries[-1] if len(rows) > limit else None
        return Page(entries, None if last is None else (to_millis(last.event_time), last.audit_id))


class _Accumulator:
    """Counts by result, and duration and lateness histograms and maxima, of one bucket."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.durations: dict[int, int] = {}
        self.latenesses: dict[int, int] = {}
        self.duration_max: int | None = None
        self.lateness_max: int | None = None

    def add_rollup(self, row: Any) -> None:
        self.counts[row.result] = self.counts.get(row.result, 0) + row.runs
        self.durations = merge_histograms([self.durations, parse_histogram(row.duration_hist)])
        self.latenesses = merge_histograms([self.latenesses, parse_histogram(row.lateness_hist)])
        self.duration_max = _max(self.duration_max, row.duration_max)
        self.lateness_max = _max(self.lateness_max, row.lateness_max)

    def add_row(self, row: Any) -> None:
        self.counts[row.result] = self.counts.get(row.result, 0) + 1
        if row.duration_ms is not None:
            index = histogram_bin(row.duration_ms)
            self.durations[index] = self.durations.get(index, 0) + 1
            self.duration_max = _max(self.duration_max, row.duration_ms)
        if row.lateness_ms is not None:
            index = histogram_bin(row.lateness_ms)
            self.latenesses[index] = self.latenesses.get(index, 0) + 1
            self.lateness_max = _max(self.lateness_max, row.lateness_ms)

    def add_binned(
        self, result: str, index: int | None, n: int, largest: int | None, latenesses: bool
    ) -> None:
        """``n`` rows of ``result`` in bin ``index`` (None: no value), largest ``largest``: of
        the durations (counted by result too), or of the latenesses."""
        if latenesses:
            assert index is not None
            self.latenesses[index] = self.latenesses.get(index, 0) + n
            self.lateness_max = _max(self.lateness_max, largest)
            return
        self.counts[result] = self.counts.get(result, 0) + n
        if index is not None:
            self.durations[index] = self.durations.get(index, 0) + n
            self.duration_max = _max(self.duration_max, largest)

    def merge(self, other: _Accumulator) -> None:
        for result, n in other.counts.items():
            self.counts[result] = self.counts.get(result, 0) + n
        self.durations = merge_histograms([self.durations, other.durations])
        self.latenesses = merge_histograms([self.latenesses, other.latenesses])
        self.duration_max = _max(self.duration_max, other.duration_max)
        self.lateness_max = _max(self.lateness_max, other.lateness_max)

    def bucket(self, start: datetime) -> StatisticsBucket:
        return StatisticsBucket(
            start=start,
            counts=dict(sorted(self.counts.items())),
            duration_p50=_seconds(_within(percentile(self.durations, 0.5), self.duration_max)),
            duration_p95=_seconds(_within(percentile(self.durations, 0.95), self.duration_max)),
            duration_max=_seconds(self.duration_max),
            lateness_p50=_seconds(_within(percentile(self.latenesses, 0.5), self.lateness_max)),
            lateness_p95=_seconds(_within(percentile(self.latenesses, 0.95), self.lateness_max)),
            lateness_max=_seconds(self.lateness_max),
        )


# -- conversions and checks (shared with the sweep) --------------------------------------------


def page_size(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValidationError(f"page limit {limit!r}: a page holds 1 to {MAX_PAGE} rows")
    return min(limit, MAX_PAGE)


def parse_histogram(text: str | None) -> dict[int, int]:
    """A rollup's histogram column (JSON ``{"bin": count}``) as bin → count."""
    if not text:
        return {}
    return {int(index): int(count) for index, count in json.loads(text).items()}


def dump_histogram(histogram: dict[int, int]) -> str | None:
    if not histogram:
        return None
    return json.dumps({str(k): v for k, v in sorted(histogram.items())}, separators=(",", ":"))


def history_entry(r: Any) -> HistoryEntry:
    return HistoryEntry(
        history_id=r.history_id,
        event_time=from_millis(r.event_time),
        result=r.result,
        trigger_key=TriggerKey.stored(r.trigger_name, r.trigger_group),
        job_key=None if r.job_name is None else JobKey.stored(r.job_name, r.job_group or ""),
        scheduled_fire_time=datetime_or_none(r.scheduled_time),
        fire_instance_id=r.fire_instance_id,
        task_name=r.task_name,
        task_id=r.task_id,
        published_time=datetime_or_none(r.published_time),
        started_time=datetime_or_none(r.started_time),
        finished_time=datetime_or_none(r.finished_time),
        duration=_seconds(r.duration_ms),
        start_lateness=_seconds(r.lateness_ms),
        error_type=r.error_type,
        error_message=r.error_message,
        worker_name=r.worker_name,
        instance_name=r.instance_name,
        retry_attempt=r.retry_attempt,
        recovering=bool(r.recovering),
        reason=r.reason,
        summary=r.summary,
        metrics=_json(r.metrics),
        args=_json(r.args),
        kwargs=_json(r.kwargs),
    )


def audit_entry(r: Any) -> AuditEntry:
    return AuditEntry(
        audit_id=r.audit_id,
        event_time=from_millis(r.event_time),
        principal=r.principal,
        via=r.via,
        action=r.action,
        target_kind=r.target_kind,
        target=r.target,
        changes=_json(r.changes),
    )


def run_status(row: Any, kind: str, deadline_ms: int | None, now: int) -> RunStatus:
    key: JobKey | TriggerKey
    if kind == JOB:
        key = JobKey.stored(row.key_name, row.key_group)
    else:
        key = TriggerKey.stored(row.key_name, row.key_group)
    reference = row.last_success_time if row.last_success_time is not None else row.since_time
    return RunStatus(
        kind=kind,
        key=key,
        since=from_millis(row.since_time),
        last_run_time=datetime_or_none(row.last_run_time),
        last_result=row.last_result,
        last_success_time=datetime_or_none(row.last_success_time),
        consecutive_failures=row.consecutive_failures,
        runs=row.runs,
        failures=row.failures,
        require_success_within=None if deadline_ms is None else timedelta(milliseconds=deadline_ms),
        overdue=deadline_ms is not None and reference + deadline_ms < now,
    )


def _due(status: RunStatus) -> datetime:
    assert status.require_success_within is not None
    return (status.last_success_time or status.since) + status.require_success_within


def _deadline_millis(key: JobKey, deadline: timedelta) -> int:
    if not isinstance(deadline, timedelta) or deadline <= timedelta(0):
        raise ValidationError(
            f"success deadline of job {key}: a positive timedelta, got {deadline!r}"
        )
    return int(deadline.total_seconds() * 1000)


def _bin(column: Any) -> Any:
    """:func:`~celery_quartz.history.histogram_bin` in SQL (PostgreSQL); NULL stays NULL."""
    doublings = func.ln(cast(column + 1, Float)) / math.log(2)
    binned = func.least(LAST_BIN, func.floor(doublings * BINS_PER_DOUBLING))
    return case((column <= 0, 0), else_=cast(binned, Integer))


def _json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _seconds(millis: int | None) -> float | None:
    return None if millis is None else millis / 1000


def _within(value: int | None, largest: int | None) -> int | None:
    """A percentile read from a bin (its middle), never above the largest value counted."""
    if value is None or largest is None:
        return value
    return min(value, largest)


def _max(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else max(a, b)


def _millis(when: datetime, field: str) -> int:
    if not isinstance(when, datetime) or when.tzinfo is None:
        raise ValidationError(f"{field} {when!r}: an aware datetime (with a time zone)")
    return to_millis(require_aware(when, field))


def _cursor(after: Any) -> tuple[int, int]:
    try:
        event_time, row_id = after
        if isinstance(event_time, bool) or isinstance(row_id, bool):
            raise TypeError
        return int(event_time), int(row_id)
    except (TypeError, ValueError):
        raise ValidationError(f"page cursor {after!r}: (event time in ms, row id)") from None


def _results(results: frozenset[str] | None) -> frozenset[str] | None:
    if results is None:
        return None
    if not results:
        raise ValidationError("results: name at least one result, or none for any")
    try:
        return frozenset(parse_result(r).value for r in results)
    except ValueError as exc:
        raise ValidationError(f"results: {exc}") from None


def _bucket_seconds(bucket: timedelta) -> int:
    seconds = bucket.total_seconds() if isinstance(bucket, timedelta) else None
    if seconds is None or seconds not in BUCKET_SOURCES:
        raise ValidationError(
            f"statistics bucket {bucket!r}: use 5 minutes, 1 hour, 6 hours or 1 day"
        )
    return int(seconds)


def _bucket_count(window: timedelta, width: int) -> int:
    if not isinstance(window, timedelta) or window <= timedelta(0):
        raise ValidationError(f"statistics window {window!r}: a positive timedelta")
    count = -(-int(window.total_seconds() * 1000) // (width * 1000))
    if count > MAX_BUCKETS:
        raise ValidationError(
            f"statistics window {window} by {timedelta(seconds=width)}: {count} buckets, more "
            f"than {MAX_BUCKETS}; use a wider bucket"
        )
    return count
