"""Rows of the SQL store: pure helpers over rows and columns, the conversions between rows and
the domain's objects, and :class:`Rows`, the reads and row values every role shares."""

from __future__ import annotations

import functools
import json
from collections import namedtuple
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    Column,
    ColumnClause,
    Connection,
    Result,
    Row,
    Text,
    and_,
    bindparam,
    cast,
    column,
    func,
    select,
    tuple_,
)
from sqlalchemy.dialects.postgresql import JSON

from celery_quartz.affinity import PreferredNode
from celery_quartz.clock import from_millis, to_millis
from celery_quartz.errors import InvalidTriggerError
from celery_quartz.firing import JobRecord
from celery_quartz.job import Job, check_success_deadline, encode_json, encode_json_object
from celery_quartz.keys import JobKey, TriggerKey
from celery_quartz.overlap import OverlapPolicy
from celery_quartz.pausing import PauseRecord, PauseRequest
from celery_quartz.retry import RetryPolicy, stored_policy
from celery_quartz.routing import LiveWorker, Router, direct_queue
from celery_quartz.store.schema import (
    ERROR_TEXT,
    KEY_PART,
    STATE,
    FiringState,
    TriggerState,
)
from celery_quartz.store.sql._context import SqlContext
from celery_quartz.store.views import FiringOutcome, LastOutcome
from celery_quartz.triggers.base import TRIGGER_KINDS, Trigger

#: ``triggers.last_outcome`` values.
SUCCEEDED = "SUCCEEDED"
FAILED = "FAILED"


def recordset(alias: str, columns: Sequence[ColumnClause[Any] | Column[Any]]) -> Any:
    """``json_to_recordset(CAST(:alias AS JSON)) AS alias(a TYPE, …)``: a batch's rows as one
    JSON parameter named after the alias, a list of objects keyed by column name
    (:func:`json_rows`).

    One parameter whatever the batch size, so the statement keeps one shape (SQLAlchemy compiles
    it once), and one string to pass: psycopg2 adapts an array parameter value by value, and
    PostgreSQL parses each value as a literal of the statement. With an array per column, a
    batch's INSERT cost the client 12.5 to 16.9 µs of CPU per row against 6.5, and took 38 µs per
    row end to end against 25 (``bench/RESULTS.md``).
    """
    typed = [column(c.name, c.type) for c in columns]
    return (
        func.json_to_recordset(cast(bindparam(alias, type_=Text), JSON))
        .table_valued(*typed)
        .render_derived(name=alias, with_types=True)
    )


#: A batch's rows as the JSON :func:`recordset` reads (compact: it is sent once per batch).
json_rows = json.JSONEncoder(separators=(",", ":")).encode

#: The paused-groups row that pauses every group (Quartz's marker).
ALL_GROUPS_PAUSED = "_$_ALL_GROUPS_PAUSED_$_"


#: The columns of a pause record, alike on triggers and paused trigger groups.
PAUSE_COLUMNS = ("pause_reason", "paused_by", "paused_time")


def pause_record(row: Any) -> PauseRecord | None:
    """The pause record kept on a trigger (or paused group) row, None when it has none."""
    if row.paused_time is None:
        return None
    return PauseRecord(row.pause_reason, row.paused_by, from_millis(row.paused_time))


def initial_state(
    key: TriggerKey, paused_groups: set[str] | Mapping[str, Any], *, blocked: bool
) -> str:
    """The state a trigger enters when stored or reset: paused with its group (or with every
    group), blocked while its disallow_concurrent job has a firing in flight."""
    if key.group in paused_groups or ALL_GROUPS_PAUSED in paused_groups:
        return TriggerState.PAUSED_BLOCKED if blocked else TriggerState.PAUSED
    return TriggerState.BLOCKED if blocked else TriggerState.WAITING


def same_job(jobs: Any, other: Any) -> Any:
    """The join of the jobs table to ``other`` (triggers or fired rows) on the job's key."""
    return and_(
        jobs.c.sched_name == other.c.sched_name,
        jobs.c.job_name == other.c.job_name,
        jobs.c.job_group == other.c.job_group,
    )


def pin_columns(pin: PreferredNode) -> dict[str, Any]:
    """A pin as its two columns, named alike on triggers and fired rows."""
    node, automatic = pin.to_columns()
    return {"preferred_node": node, "preferred_node_auto": automatic}


def origin_key(row: Row[Any]) -> TriggerKey | None:
    if row.origin_trigger_name is None:
        return None
    return TriggerKey(row.origin_trigger_name, row.origin_trigger_group)


def routed_node(row: Row[Any]) -> str | None:
    """The worker a fired row was routed to: its pin, when the row's queue is that worker's own."""
    node = row.preferred_node
    return node if node is not None and row.queue == direct_queue(node) else None


def millis_or_none(value: datetime | None) -> int | None:
    return None if value is None else to_millis(value)


def datetime_or_none(value: int | None) -> datetime | None:
    return None if value is None else from_millis(value)


@functools.lru_cache(maxsize=16)
def row_class(columns: tuple[str, ...]) -> Any:
    return namedtuple("_ClaimedRow", columns, rename=True)


def tuple_rows(result: Result[Any]) -> list[Any]:
    """A result's rows as named tuples, read by attribute like SQLAlchemy rows.

    For the claim's rows, read some forty times each on the way to a message: a named tuple's
    attribute is an index into a tuple, a SQLAlchemy ``Row``'s a lookup by key (several times
    slower).
    """
    make = row_class(tuple(result.keys()))._make
    return [make(row) for row in result]


def in_acquisition_order(rows: Sequence[Row[Any]]) -> list[Row[Any]]:
    """Trigger rows by next fire time, then higher priority first: the order the batch rule reads.

    The acquisition's ORDER BY alone does not give it on PostgreSQL: rows are sorted before they
    are locked, and a row another scheduler fired (and committed) meanwhile comes back with its
    new, later fire time in its old place. Taken as the batch's first trigger, that one would set
    the batch's fire time a whole repeat interval late, and every trigger before it with it.
    """
    return sorted(rows, key=lambda row: (row.next_fire_time, -row.priority))


def json_value(text: str) -> Any:
    """``json.loads``, skipping the parser for the empty object and list that most jobs' args,
    kwargs, data and options are (read once per firing)."""
    if text == "{}":
        return {}
    if text == "[]":
        return []
    return json.loads(text)


def outcome_columns(
    triggers: Any, outcome: FiringOutcome, started_millis: int | None, finished_millis: int
) -> dict[str, Any]:
    """The trigger columns that keep ``outcome`` as its last: texts cut to their columns'
    widths, and the failures in a row counted up (or back to 0) in the statement itself."""
    failures = func.coalesce(triggers.c.consecutive_failures, 0)
    return {
        "last_started_time": started_millis,
        "last_finished_time": finished_millis,
        "last_outcome": (FAILED if outcome.failed else SUCCEEDED)[:STATE],
        "last_error_type": _cut(outcome.error_type, KEY_PART),
        "last_error_message": _cut(outcome.error_message, ERROR_TEXT),
        "consecutive_failures": failures + 1 if outcome.failed else 0,
    }


def last_outcome(row: Any) -> LastOutcome | None:
    """A trigger row's last outcome, None before a firing of it finished."""
    if row.last_finished_time is None:
        return None
    return LastOutcome(
        started_time=datetime_or_none(row.last_started_time),
        finished_time=from_millis(row.last_finished_time),
        succeeded=row.last_outcome != FAILED,
        error_type=row.last_error_type,
        error_message=row.last_error_message,
        consecutive_failures=row.consecutive_failures or 0,
    )


def _millis_of(value: timedelta | None) -> int | None:
    return None if value is None else int(value // timedelta(milliseconds=1))


def _cut(text: str | None, width: int) -> str | None:
    return None if text is None else text[:width]


def job_from_row(row: Row[Any]) -> Job:
    return Job(
        key=JobKey(row.job_name, row.job_group),
        task=row.task_name,
        args=tuple(json.loads(row.args)),
        kwargs=json.loads(row.kwargs),
        data=json.loads(row.job_data),
        options=json.loads(row.options),
        description=row.description,
        durable=row.is_durable,
        requests_recovery=row.requests_recovery,
        disallow_concurrent=row.is_nonconcurrent,
        persist_job_data=row.is_update_data,
        require_success_within=_deadline(row._mapping.get("require_success_within")),
        retry_policy=RetryPolicy.parse_optional(row._mapping.get("retry_policy")),
    )


def _deadline(millis: int | None) -> timedelta | None:
    return None if millis is None else timedelta(milliseconds=millis)


def job_record_from_row(row: Row[Any]) -> JobRecord:
    return JobRecord(
        key=JobKey.stored(row.job_name, row.job_group),
        task=row.task_name,
        args=json_value(row.args),
        kwargs=json_value(row.kwargs),
        data=json_value(row.jobs_job_data),
        options=json_value(row.options),
        durable=row.is_durable,
        requests_recovery=row.requests_recovery,
        disallow_concurrent=row.is_nonconcurrent,
        persist_job_data=row.is_update_data,
    )


def stored_overlap_policy(trigger: Trigger) -> str | None:
    """The ``overlap_policy`` column of ``trigger``: NULL for ``allow`` (a row as before)."""
    policy = OverlapPolicy.parse(trigger.overlap_policy, f"trigger {trigger.key}")
    return None if policy is OverlapPolicy.ALLOW else policy.value


def trigger_from_row(row: Row[Any], data_column: str = "job_data") -> Trigger:
    cls = TRIGGER_KINDS.get(row.trigger_type)
    if cls is None:
        raise InvalidTriggerError(
            f"trigger {row.trigger_group}.{row.trigger_name}: unknown kind {row.trigger_type!r}"
        )
    return cls.from_detail(
        json.loads(row.detail),
        key=TriggerKey.stored(row.trigger_name, row.trigger_group),
        job_key=JobKey.stored(row.job_name, row.job_group),
        description=row.description,
        priority=row.priority,
        start_at=from_millis(row.start_time),
        end_at=datetime_or_none(row.end_time),
        misfire_instruction=row.misfire_instr,
        data=json_value(getattr(row, data_column)),
        calendar_name=row.calendar_name,
        next_fire_time=datetime_or_none(row.next_fire_time),
        previous_fire_time=datetime_or_none(row.prev_fire_time),
        times_triggered=row.times_triggered,
        execution_group=row.execution_group,
        preferred_node=PreferredNode.from_columns(row.preferred_node, row.preferred_node_auto),
        retry_policy=RetryPolicy.parse_optional(row.retry_policy),
        overlap_policy=OverlapPolicy.parse(row.overlap_policy),
        pause_when_retries_exhausted=row.pause_when_retries_exhausted,
    )


class Rows:
    """Rows of one scheduler name's tables, shared by every role: the columns of a job or a
    trigger to write, and the reads several roles make inside their own transactions."""

    def __init__(self, sql: SqlContext) -> None:
        self.sql = sql

    def job_values(self, job: Job) -> dict[str, Any]:
        owner = f"job {job.key}"
        limit = self.sql.max_data_bytes
        check_success_deadline(owner, job.require_success_within)
        return {
            "sched_name": self.sql.scheduler_name,
            "job_name": job.key.name,
            "job_group": job.key.group,
            "description": job.description,
            "task_name": job.task,
            "job_data": encode_json_object(owner, "data", job.data, limit),
            "args": encode_json(owner, "args", list(job.args), limit),
            "kwargs": encode_json_object(owner, "kwargs", job.kwargs, limit),
            "options": encode_json_object(owner, "options", job.options, limit),
            "is_durable": bool(job.durable),
            "is_nonconcurrent": bool(job.disallow_concurrent),
            "is_update_data": bool(job.persist_job_data),
            "requests_recovery": bool(job.requests_recovery),
            "require_success_within": _millis_of(job.require_success_within),
            "retry_policy": stored_policy(job.retry_policy),
        }

    def trigger_values(self, trigger: Trigger, state: str) -> dict[str, Any]:
        assert trigger.job_key is not None and trigger.start_at is not None
        owner, limit = f"trigger {trigger.key}", self.sql.max_data_bytes
        return {
            "sched_name": self.sql.scheduler_name,
            "trigger_name": trigger.key.name,
            "trigger_group": trigger.key.group,
            "job_name": trigger.job_key.name,
            "job_group": trigger.job_key.group,
            "description": trigger.description,
            "next_fire_time": millis_or_none(trigger.next_fire_time),
            "prev_fire_time": millis_or_none(trigger.previous_fire_time),
            "priority": trigger.priority,
            "trigger_state": state,
            "trigger_type": trigger.kind,
            "start_time": to_millis(trigger.start_at),
            "end_time": millis_or_none(trigger.end_at),
            "calendar_name": trigger.calendar_name,
            "misfire_instr": int(trigger.misfire_instruction),
            "job_data": encode_json_object(owner, "data", trigger.data, limit),
            "detail": encode_json_object(owner, "detail", trigger.detail(), limit),
            "times_triggered": trigger.times_triggered,
            "execution_group": trigger.execution_group,
            **pin_columns(trigger.preferred_node),
            "retry_policy": stored_policy(trigger.retry_policy),
            "overlap_policy": stored_overlap_policy(trigger),
            "pause_when_retries_exhausted": trigger.pause_when_retries_exhausted,
        }

    #: Keys per statement when reading rows by key (SQLite allows 32,766 parameters).
    _KEYS_PER_SELECT = 500

    def by_key(
        self,
        conn: Connection,
        query: Any,
        name: Any,
        group: Any,
        keys: Sequence[JobKey | TriggerKey],
        *where: Any,
    ) -> Iterator[Any]:
        """The rows of ``query`` whose (``name``, ``group``) is one of ``keys``, a few hundred
        keys per statement."""
        table = name.table
        for i in range(0, len(keys), self._KEYS_PER_SELECT):
            chunk = keys[i : i + self._KEYS_PER_SELECT]
            yield from conn.execute(
                query.where(
                    self.sql.scoped(table),
                    tuple_(name, group).in_([(k.name, k.group) for k in chunk]),
                    *where,
                )
            )

    def stored_keys(
        self,
        conn: Connection,
        name: Any,
        group: Any,
        keys: Sequence[JobKey | TriggerKey],
        *where: Any,
    ) -> set[tuple[str, str]]:
        """Which of ``keys`` have a row (matching ``where``), as (name, group) pairs."""
        query = select(name, group).distinct()
        return {(r[0], r[1]) for r in self.by_key(conn, query, name, group, keys, *where)}

    def paused_groups(self, conn: Connection) -> set[str]:
        p = self.sql.tables.paused_trigger_groups
        return set(conn.execute(select(p.c.trigger_group).where(self.sql.scoped(p))).scalars())

    def paused_group_records(self, conn: Connection) -> dict[str, dict[str, Any]]:
        """Each paused group's pause record, as the three columns a trigger stored in it takes
        (:data:`ALL_GROUPS_PAUSED` for everything paused)."""
        p = self.sql.tables.paused_trigger_groups
        rows = conn.execute(
            select(p.c.trigger_group, *(p.c[name] for name in PAUSE_COLUMNS)).where(
                self.sql.scoped(p)
            )
        )
        return {r.trigger_group: {name: r._mapping[name] for name in PAUSE_COLUMNS} for r in rows}

    def pause_values(self, request: PauseRequest | None) -> dict[str, Any]:
        """The pause record columns ``request`` writes, stamped now (all None without one)."""
        if request is None:
            return dict.fromkeys(PAUSE_COLUMNS)
        return {
            "pause_reason": request.reason,
            "paused_by": request.requested_by,
            "paused_time": self.sql.now(),
        }

    def jobs_in_flight(self, conn: Connection, keys: Sequence[JobKey]) -> set[JobKey]:
        """Which of the jobs ``keys`` have a firing fired and not finished (a disallow_concurrent
        job's new triggers start BLOCKED while it does)."""
        f = self.sql.tables.fired_triggers
        in_flight = self.stored_keys(
            conn, f.c.job_name, f.c.job_group, keys, f.c.state != FiringState.ACQUIRED
        )
        return {key for key in keys if (key.name, key.group) in in_flight}

    def calendar(self, conn: Connection, name: str | None, owner: TriggerKey) -> Any:
        if name is None:
            return None
        from celery_quartz.calendars import calendar_from_dict

        c = self.sql.tables.calendars
        row = conn.execute(
            select(c.c.calendar).where(self.sql.scoped(c), c.c.calendar_name == name)
        ).first()
        if row is None:
            raise InvalidTriggerError(f"trigger {owner}: calendar {name!r} is not stored")
        return calendar_from_dict(json.loads(row.calendar))

    def calendars(self, names: set[str | None]) -> dict[str, Any]:
        """The named calendars, read in one short transaction (none when no trigger has one)."""
        if not any(names):
            return {}
        with self.sql.transaction() as conn:
            return self.calendars_in(conn, names)

    def calendars_in(self, conn: Connection, names: set[str | None]) -> dict[str, Any]:
        wanted = {n for n in names if n}
        if not wanted:
            return {}
        from celery_quartz.calendars import calendar_from_dict

        c = self.sql.tables.calendars
        rows = conn.execute(
            select(c.c.calendar_name, c.c.calendar).where(
                self.sql.scoped(c), c.c.calendar_name.in_(wanted)
            )
        ).all()
        return {r.calendar_name: calendar_from_dict(json.loads(r.calendar)) for r in rows}

    def trigger_row(self, conn: Connection, key: TriggerKey) -> Row[Any] | None:
        return conn.execute(
            select(self.sql.tables.triggers).where(self.sql.trigger_key(key))
        ).first()

    def live_workers(self, conn: Connection, router: Router, now: int) -> dict[str, LiveWorker]:
        s = self.sql.tables.scheduler_state
        rows = conn.execute(
            select(
                s.c.instance_name,
                s.c.last_checkin_time.label("last_checkin_millis"),
                s.c.checkin_interval.label("checkin_interval_millis"),
                s.c.queues,
                s.c.concurrency,
            ).where(self.sql.scoped(s), s.c.kind == "worker")
        ).all()
        return router.live_workers(list(rows), now)
