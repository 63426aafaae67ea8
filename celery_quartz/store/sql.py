"""The SQL job store: every decision two processes could race on is one transaction.

PostgreSQL settles races with row locks (``FOR UPDATE SKIP LOCKED`` when acquiring) and
conditional updates; SQLite with a write lock taken at ``BEGIN IMMEDIATE`` (see
:mod:`celery_quartz.store.engine`). Nothing here holds a lock while waiting for a fire time: an
acquisition is a committed state change (WAITING → ACQUIRED) plus a fired-trigger row naming the
scheduler instance that owns it.
"""

from __future__ import annotations

import copy
import functools
import json
import logging
from collections import namedtuple
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    ColumnClause,
    ColumnElement,
    Connection,
    Engine,
    Integer,
    Result,
    Row,
    String,
    Text,
    and_,
    bindparam,
    cast,
    column,
    delete,
    func,
    insert,
    literal,
    or_,
    select,
    text,
    tuple_,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSON
from sqlalchemy.exc import IntegrityError

from celery_quartz.affinity import PreferredNode
from celery_quartz.clock import Clock, SystemClock, from_millis, to_millis
from celery_quartz.errors import (
    InvalidTriggerError,
    JobNotFoundError,
    ObjectAlreadyExistsError,
    TriggerNotFoundError,
)
from celery_quartz.firing import AcquiredFiring, Firing, JobRecord, new_ids
from celery_quartz.job import DEFAULT_MAX_DATA_BYTES, Job, encode_json, encode_json_object
from celery_quartz.keys import RECOVERING_JOBS_GROUP, RETRYING_JOBS_GROUP, JobKey, TriggerKey
from celery_quartz.retry import RetryPolicy
from celery_quartz.routing import (
    Admission,
    Hold,
    LiveWorker,
    Route,
    Router,
    Unserved,
    direct_queue,
)
from celery_quartz.store.engine import create_store_engine
from celery_quartz.store.fencing import Fence, check_fence
from celery_quartz.store.schema import (
    DEFAULT_TABLE_PREFIX,
    FiringState,
    Tables,
    TriggerState,
    build_tables,
)
from celery_quartz.triggers.base import (
    TRIGGER_KINDS,
    UNCHANGED,
    MisfireInstruction,
    Trigger,
    TriggerDetailsUpdate,
)

logger = logging.getLogger(__name__)

#: An import that adds at least this many jobs refreshes PostgreSQL's planner statistics.
_ANALYZE_AFTER_ROWS = 1000

#: Routing with no execution limits (pins are still routed to live workers).
_UNLIMITED = Router()

#: ``get_trigger_state`` of a key that is not stored (Quartz's ``TriggerState.None``).
NONE_STATE = "NONE"


@dataclass
class Claim:
    """What one :meth:`SqlStore.claim` took: firings to publish now, or claims to fire later."""

    firings: list[Firing] = field(default_factory=list)
    acquired: list[AcquiredFiring] = field(default_factory=list)
    #: Groups (or pinned workers) whose due triggers were held back because no live worker
    #: serves them (see :mod:`celery_quartz.routing`).
    unserved: list[Unserved] = field(default_factory=list)


@dataclass
class SyncResult:
    """What :meth:`SqlStore.sync_job_group` did, by job key."""

    added: list[JobKey] = field(default_factory=list)
    updated: list[JobKey] = field(default_factory=list)
    removed: list[JobKey] = field(default_factory=list)
    unchanged: list[JobKey] = field(default_factory=list)


@dataclass
class FiringOwners:
    """What :meth:`SqlStore.firing_owners` read from the fired rows in flight."""

    #: Scheduler instances holding claims (ACQUIRED) or firings not yet published (FIRED).
    schedulers: set[str] = field(default_factory=set)
    #: Of those, the instances holding firings not yet published.
    unpublished: set[str] = field(default_factory=set)
    #: Worker node name → the earliest start time (ms) of the firings it is executing.
    executing_since: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckIn:
    """A row of ``scheduler_state``: a scheduler or worker process and its last check-in."""

    instance_name: str
    kind: str
    last_checkin_millis: int
    checkin_interval_millis: int
    clustered: bool
    hostname: str | None
    pid: int | None


class SqlStore:
    """Jobs, triggers and firings of one scheduler name, in SQL tables under one prefix."""

    def __init__(
        self,
        url: str | None = None,
        *,
        scheduler_name: str,
        table_prefix: str = DEFAULT_TABLE_PREFIX,
        clock: Clock | None = None,
        max_data_bytes: int = DEFAULT_MAX_DATA_BYTES,
        engine: Engine | None = None,
        pre_ping: bool = True,
    ) -> None:
        """``pre_ping`` tests a pooled connection before each transaction, so a database
        restart is invisible to callers. The scheduling loop turns it off: it costs a round trip
        per transaction, and the loop retries a failed step itself."""
        if engine is None:
            if url is None:
                raise ValueError("SqlStore needs a url or an engine")
            engine = create_store_engine(url, pool_pre_ping=pre_ping)
        self.engine = engine
        self.scheduler_name = scheduler_name
        self.tables: Tables = build_tables(table_prefix)
        self.clock = clock or SystemClock()
        self.max_data_bytes = max_data_bytes
        #: A non-clustered leader's fencing epoch: its writes check it (see store.fencing).
        self.fence: Fence | None = None
        # Trigger kinds register themselves on import.
        import celery_quartz.triggers  # noqa: F401

    # -- plumbing -------------------------------------------------------------------------------

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        with self.engine.begin() as conn:
            yield conn

    def create_tables(self) -> None:
        """Create the tables directly (tests, the RAM store); production uses the migrations."""
        self.tables.metadata.create_all(self.engine)

    def dispose(self) -> None:
        self.engine.dispose()

    def _now(self) -> int:
        return to_millis(self.clock.now())

    def _check_fence(self, conn: Connection) -> None:
        """Refuse the transaction when this store's fence is stale (nothing without one)."""
        if self.fence is not None:
            check_fence(self, conn, self.fence)

    def _lock(self, conn: Connection, name: str) -> None:
        """Hold the named lock row until the transaction ends (SQLite: the write lock is)."""
        if self.dialect == "sqlite":
            return
        locks = self.tables.locks
        key = and_(locks.c.sched_name == self.scheduler_name, locks.c.lock_name == name)
        if conn.execute(select(locks.c.lock_name).where(key).with_for_update()).first() is None:
            try:
                with conn.begin_nested():
                    conn.execute(
                        insert(locks).values(sched_name=self.scheduler_name, lock_name=name)
                    )
            except IntegrityError:
                pass  # another process created it first; the select below waits for its lock
            conn.execute(select(locks.c.lock_name).where(key).with_for_update())

    # -- conversions ----------------------------------------------------------------------------

    def _trigger_key_clause(self, key: TriggerKey) -> Any:
        t = self.tables.triggers
        return and_(
            t.c.sched_name == self.scheduler_name,
            t.c.trigger_name == key.name,
            t.c.trigger_group == key.group,
        )

    def _job_key_clause(self, key: JobKey) -> Any:
        j = self.tables.jobs
        return and_(
            j.c.sched_name == self.scheduler_name,
            j.c.job_name == key.name,
            j.c.job_group == key.group,
        )

    def _job_values(self, job: Job) -> dict[str, Any]:
        owner = f"job {job.key}"
        limit = self.max_data_bytes
        return {
            "sched_name": self.scheduler_name,
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
        }

    @staticmethod
    def _job_from_row(row: Row[Any]) -> Job:
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
        )

    @staticmethod
    def _job_record_from_row(row: Row[Any]) -> JobRecord:
        return JobRecord(
            key=JobKey.stored(row.job_name, row.job_group),
            task=row.task_name,
            args=_json_value(row.args),
            kwargs=_json_value(row.kwargs),
            data=_json_value(row.jobs_job_data),
            options=_json_value(row.options),
            durable=row.is_durable,
            requests_recovery=row.requests_recovery,
            disallow_concurrent=row.is_nonconcurrent,
            persist_job_data=row.is_update_data,
        )

    def _trigger_values(self, trigger: Trigger, state: str) -> dict[str, Any]:
        assert trigger.job_key is not None and trigger.start_at is not None
        owner = f"trigger {trigger.key}"
        return {
            "sched_name": self.scheduler_name,
            "trigger_name": trigger.key.name,
            "trigger_group": trigger.key.group,
            "job_name": trigger.job_key.name,
            "job_group": trigger.job_key.group,
            "description": trigger.description,
            "next_fire_time": _millis_or_none(trigger.next_fire_time),
            "prev_fire_time": _millis_or_none(trigger.previous_fire_time),
            "priority": trigger.priority,
            "trigger_state": state,
            "trigger_type": trigger.kind,
            "start_time": to_millis(trigger.start_at),
            "end_time": _millis_or_none(trigger.end_at),
            "calendar_name": trigger.calendar_name,
            "misfire_instr": int(trigger.misfire_instruction),
            "job_data": encode_json_object(owner, "data", trigger.data, self.max_data_bytes),
            "detail": encode_json_object(owner, "detail", trigger.detail(), self.max_data_bytes),
            "times_triggered": trigger.times_triggered,
            "execution_group": trigger.execution_group,
            **_pin_columns(trigger.preferred_node),
            "retry_policy": trigger.retry_policy.to_string() if trigger.retry_policy else None,
        }

    @staticmethod
    def _trigger_from_row(row: Row[Any], data_column: str = "job_data") -> Trigger:
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
            end_at=_datetime_or_none(row.end_time),
            misfire_instruction=row.misfire_instr,
            data=_json_value(getattr(row, data_column)),
            calendar_name=row.calendar_name,
            next_fire_time=_datetime_or_none(row.next_fire_time),
            previous_fire_time=_datetime_or_none(row.prev_fire_time),
            times_triggered=row.times_triggered,
            execution_group=row.execution_group,
            preferred_node=PreferredNode.from_columns(row.preferred_node, row.preferred_node_auto),
            retry_policy=RetryPolicy.parse(row.retry_policy),
        )

    # -- jobs and triggers (the client's operations) ---------------------------------------------

    def store_jobs_and_triggers(
        self,
        items: Sequence[tuple[Job | None, Sequence[Trigger]]],
        *,
        replace: bool = False,
        definition_hashes: dict[JobKey, str] | None = None,
    ) -> None:
        """Store jobs and their triggers in one transaction: all of them, or none.

        A job of ``None`` means the triggers refer to jobs already stored. Raises
        :class:`ObjectAlreadyExistsError` when a key exists and ``replace`` is false,
        :class:`JobNotFoundError` when a trigger names a job that is not stored.
        """
        hashes = definition_hashes or {}
        jobs = [(job, hashes.get(job.key)) for job, _ in items if job is not None]
        triggers = [trigger for _, item_triggers in items for trigger in item_triggers]
        with self.transaction() as conn:
            self._store_many(conn, jobs, triggers, replace, self.clock.now())

    def sync_job_group(
        self, group: str, desired: Mapping[JobKey, tuple[Job, Sequence[Trigger], str]]
    ) -> SyncResult:
        """Make the jobs of ``group`` exactly ``desired`` (job, its triggers, a definition hash).

        Used to import configuration (``beat_schedule``) idempotently. A job whose stored hash
        equals the desired one is left alone, so its triggers keep their fire times across
        restarts; a changed one is replaced with its triggers; one no longer desired is removed.

        Race settled: several schedulers importing the same configuration at start. The whole
        comparison and write is one transaction under the TRIGGER_ACCESS lock row, so the second
        importer sees the first one's rows and finds nothing to do.
        """
        now = self.clock.now()
        result = SyncResult()
        j = self.tables.jobs
        with self.transaction() as conn:
            self._lock(conn, "TRIGGER_ACCESS")
            stored = {
                JobKey(r.job_name, r.job_group): r.definition_hash
                for r in conn.execute(
                    select(j.c.job_name, j.c.job_group, j.c.definition_hash).where(
                        j.c.sched_name == self.scheduler_name, j.c.job_group == group
                    )
                )
            }
            jobs: list[tuple[Job, str | None]] = []
            new_triggers: list[Trigger] = []
            for key, (job, triggers, definition_hash) in desired.items():
                if key in stored and stored[key] == definition_hash:
                    result.unchanged.append(key)
                    continue
                if key in stored:
                    self._delete_job(conn, key)
                    result.updated.append(key)
                else:
                    result.added.append(key)
                jobs.append((job, definition_hash))
                new_triggers.extend(triggers)
            self._store_many(conn, jobs, new_triggers, False, now)
            for key in stored.keys() - desired.keys():
                self._delete_job(conn, key)
                result.removed.append(key)
        if self.dialect == "postgresql" and len(result.added) >= _ANALYZE_AFTER_ROWS:
            # Fresh statistics: a planner that has never seen the new rows scans a whole trigger
            # group where one key lookup would do, until autovacuum gets round to it.
            with self.engine.connect() as conn:
                conn.execute(text(f"ANALYZE {self.tables.jobs.name}"))
                conn.execute(text(f"ANALYZE {self.tables.triggers.name}"))
                conn.commit()
        return result

    def _delete_job(self, conn: Connection, key: JobKey) -> bool:
        t, j = self.tables.triggers, self.tables.jobs
        conn.execute(delete(t).where(self._triggers_of_job_clause(key)))
        return conn.execute(delete(j).where(self._job_key_clause(key))).rowcount > 0

    def _store_trigger(
        self, conn: Connection, trigger: Trigger, replace: bool, now: datetime
    ) -> None:
        self._store_many(conn, [], [trigger], replace, now)

    def _store_many(
        self,
        conn: Connection,
        jobs: Sequence[tuple[Job, str | None]],
        triggers: Sequence[Trigger],
        replace: bool,
        now: datetime,
    ) -> None:
        """Store jobs (each with its definition hash) and triggers, reading and writing by batch:
        a few statements whatever their number (a ``beat_schedule`` of 10,000 entries is
        imported in one transaction).

        Raises :class:`ObjectAlreadyExistsError` when a key is stored (or given twice) and
        ``replace`` is false, :class:`JobNotFoundError` when a trigger names a job that is
        neither stored nor given, :class:`InvalidTriggerError` for a trigger that is invalid or
        would never fire; the caller's transaction then writes nothing.
        """
        if not jobs and not triggers:
            return
        j, t = self.tables.jobs, self.tables.triggers
        job_values: dict[JobKey, dict[str, Any]] = {}
        for job, definition_hash in jobs:
            if job.key in job_values and not replace:
                raise ObjectAlreadyExistsError(f"job {job.key} already exists")
            job_values[job.key] = {**self._job_values(job), "definition_hash": definition_hash}
        stored_jobs = self._stored_keys(conn, j.c.job_name, j.c.job_group, list(job_values))
        if stored_jobs and not replace:
            key = next(k for k in job_values if (k.name, k.group) in stored_jobs)
            raise ObjectAlreadyExistsError(f"job {key} already exists")

        # What a trigger's initial state depends on: its job's flag, the paused groups, and
        # whether a disallow_concurrent job has a firing in flight.
        nonconcurrent = {key: v["is_nonconcurrent"] for key, v in job_values.items()}
        wanted = {trigger.job_key for trigger in triggers if trigger.job_key is not None}
        for row in self._rows_by_key(
            conn,
            select(j.c.job_name, j.c.job_group, j.c.is_nonconcurrent),
            j.c.job_name,
            j.c.job_group,
            [key for key in wanted if key not in nonconcurrent],
        ):
            nonconcurrent[JobKey.stored(row.job_name, row.job_group)] = bool(row.is_nonconcurrent)
        paused_groups = self._paused_groups(conn)
        in_flight = self._jobs_in_flight(conn, [key for key in wanted if nonconcurrent.get(key)])
        calendars: dict[str, Any] = {}
        trigger_values: dict[TriggerKey, dict[str, Any]] = {}
        for trigger in triggers:
            if trigger.job_key is None:
                raise InvalidTriggerError(f"trigger {trigger.key} names no job")
            if trigger.job_key not in nonconcurrent:
                raise JobNotFoundError(
                    f"trigger {trigger.key}: job {trigger.job_key} is not stored"
                )
            if trigger.key in trigger_values and not replace:
                raise ObjectAlreadyExistsError(f"trigger {trigger.key} already exists")
            if trigger.start_at is None:
                trigger.start_at = now
            trigger.validate()
            name = trigger.calendar_name
            if name is not None and name not in calendars:
                calendars[name] = self._calendar(conn, name, trigger.key)
            if trigger.compute_first_fire_time(calendars.get(name or "")) is None:
                raise InvalidTriggerError(
                    f"trigger {trigger.key}: based on its schedule it will never fire"
                )
            state = _initial_state(trigger.key, paused_groups, blocked=trigger.job_key in in_flight)
            trigger_values[trigger.key] = self._trigger_values(trigger, state)
        stored_triggers = self._stored_keys(
            conn, t.c.trigger_name, t.c.trigger_group, list(trigger_values)
        )
        if stored_triggers and not replace:
            stored = next(k for k in trigger_values if (k.name, k.group) in stored_triggers)
            raise ObjectAlreadyExistsError(f"trigger {stored} already exists")

        self._write_many(conn, j, job_values, stored_jobs, self._job_key_clause)
        self._write_many(conn, t, trigger_values, stored_triggers, self._trigger_key_clause)

    def _write_many(
        self,
        conn: Connection,
        table: Any,
        values: dict[Any, dict[str, Any]],
        stored: set[tuple[str, str]],
        key_clause: Callable[[Any], Any],
    ) -> None:
        """Update the stored rows one by one (a replace), insert the others in one executemany."""
        new = []
        for key, row in values.items():
            if (key.name, key.group) in stored:
                conn.execute(update(table).where(key_clause(key)).values(row))
            else:
                new.append(row)
        if new:
            conn.execute(insert(table), new)

    #: Keys per statement when reading rows by key (SQLite allows 32,766 parameters).
    _KEYS_PER_SELECT = 500

    def _rows_by_key(
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
                    table.c.sched_name == self.scheduler_name,
                    tuple_(name, group).in_([(k.name, k.group) for k in chunk]),
                    *where,
                )
            )

    def _stored_keys(
        self,
        conn: Connection,
        name: Any,
        group: Any,
        keys: Sequence[JobKey | TriggerKey],
        *where: Any,
    ) -> set[tuple[str, str]]:
        """Which of ``keys`` have a row (matching ``where``), as (name, group) pairs."""
        query = select(name, group).distinct()
        return {(r[0], r[1]) for r in self._rows_by_key(conn, query, name, group, keys, *where)}

    def _paused_groups(self, conn: Connection) -> set[str]:
        p = self.tables.paused_trigger_groups
        return set(
            conn.execute(
                select(p.c.trigger_group).where(p.c.sched_name == self.scheduler_name)
            ).scalars()
        )

    def _jobs_in_flight(self, conn: Connection, keys: Sequence[JobKey]) -> set[JobKey]:
        """Which of the jobs ``keys`` have a firing fired and not finished (a disallow_concurrent
        job's new triggers start BLOCKED while it does)."""
        f = self.tables.fired_triggers
        in_flight = self._stored_keys(
            conn, f.c.job_name, f.c.job_group, keys, f.c.state != FiringState.ACQUIRED
        )
        return {key for key in keys if (key.name, key.group) in in_flight}

    def _calendar(self, conn: Connection, name: str | None, owner: TriggerKey) -> Any:
        if name is None:
            return None
        from celery_quartz.calendars import calendar_from_dict

        c = self.tables.calendars
        row = conn.execute(
            select(c.c.calendar).where(
                c.c.sched_name == self.scheduler_name, c.c.calendar_name == name
            )
        ).first()
        if row is None:
            raise InvalidTriggerError(f"trigger {owner}: calendar {name!r} is not stored")
        return calendar_from_dict(json.loads(row.calendar))

    def store_calendar(self, name: str, calendar: Any, *, replace: bool = False) -> None:
        c = self.tables.calendars
        encoded = encode_json_object(
            f"calendar {name!r}", "definition", calendar.to_dict(), self.max_data_bytes
        )
        clause = and_(c.c.sched_name == self.scheduler_name, c.c.calendar_name == name)
        with self.transaction() as conn:
            if conn.execute(select(c.c.calendar_name).where(clause)).first() is not None:
                if not replace:
                    raise ObjectAlreadyExistsError(f"calendar {name!r} already exists")
                conn.execute(update(c).where(clause).values(calendar=encoded))
            else:
                conn.execute(
                    insert(c).values(
                        sched_name=self.scheduler_name, calendar_name=name, calendar=encoded
                    )
                )

    def retrieve_job(self, key: JobKey) -> Job | None:
        j = self.tables.jobs
        with self.transaction() as conn:
            row = conn.execute(select(j).where(self._job_key_clause(key))).first()
        return None if row is None else self._job_from_row(row)

    def retrieve_trigger(self, key: TriggerKey) -> Trigger | None:
        t = self.tables.triggers
        with self.transaction() as conn:
            row = conn.execute(select(t).where(self._trigger_key_clause(key))).first()
        return None if row is None else self._trigger_from_row(row)

    def get_trigger_state(self, key: TriggerKey) -> str:
        t = self.tables.triggers
        with self.transaction() as conn:
            row = conn.execute(
                select(t.c.trigger_state).where(self._trigger_key_clause(key))
            ).first()
        if row is None:
            return NONE_STATE
        # Quartz reports ACQUIRED as NORMAL to users; we keep the store's own word.
        return str(row.trigger_state)

    def get_triggers_of_job(self, key: JobKey) -> list[Trigger]:
        t = self.tables.triggers
        with self.transaction() as conn:
            rows = conn.execute(
                select(t)
                .where(
                    t.c.sched_name == self.scheduler_name,
                    t.c.job_name == key.name,
                    t.c.job_group == key.group,
                )
                .order_by(t.c.trigger_group, t.c.trigger_name)
            ).all()
        return [self._trigger_from_row(r) for r in rows]

    def job_keys(self, group: str | None = None) -> list[JobKey]:
        j = self.tables.jobs
        q = select(j.c.job_name, j.c.job_group).where(j.c.sched_name == self.scheduler_name)
        if group is not None:
            q = q.where(j.c.job_group == group)
        with self.transaction() as conn:
            rows = conn.execute(q.order_by(j.c.job_group, j.c.job_name)).all()
        return [JobKey(r.job_name, r.job_group) for r in rows]

    def remove_trigger(self, key: TriggerKey) -> bool:
        """Remove a trigger; a non-durable job left with no trigger goes with it."""
        with self.transaction() as conn:
            return self._remove_trigger(conn, key)

    def _remove_trigger(self, conn: Connection, key: TriggerKey) -> bool:
        t = self.tables.triggers
        row = conn.execute(
            delete(t).where(self._trigger_key_clause(key)).returning(t.c.job_name, t.c.job_group)
        ).first()
        if row is None:
            return False
        self._delete_job_if_orphaned(conn, JobKey(row.job_name, row.job_group))
        return True

    def _delete_job_if_orphaned(self, conn: Connection, key: JobKey) -> None:
        t, j = self.tables.triggers, self.tables.jobs
        remaining = conn.execute(
            select(func.count())
            .select_from(t)
            .where(
                t.c.sched_name == self.scheduler_name,
                t.c.job_name == key.name,
                t.c.job_group == key.group,
            )
        ).scalar_one()
        if remaining == 0:
            conn.execute(delete(j).where(self._job_key_clause(key), j.c.is_durable.is_(False)))

    def remove_job(self, key: JobKey) -> bool:
        """Remove a job and every trigger of it."""
        with self.transaction() as conn:
            return self._delete_job(conn, key)

    def update_trigger_details(self, key: TriggerKey, details: TriggerDetailsUpdate) -> None:
        """Write the changed details of the stored trigger ``key`` in place; its fire times,
        state and counts are left alone. Raises :class:`TriggerNotFoundError` naming ``key``.

        A firing already acquired keeps the pin it recorded; when the pin changed, that firing's
        auto-claim finds nothing to swap (:meth:`_claim_auto_pin`), so the change wins.
        """
        t = self.tables.triggers
        values: dict[str, Any] = {}
        if details.description is not UNCHANGED:
            values["description"] = details.description
        if details.preferred_node is not UNCHANGED:
            values.update(_pin_columns(details.preferred_node))
        with self.transaction() as conn:
            if values:
                found = conn.execute(
                    update(t).where(self._trigger_key_clause(key)).values(values)
                ).rowcount
            else:
                found = conn.execute(
                    select(func.count()).select_from(t).where(self._trigger_key_clause(key))
                ).scalar_one()
            if not found:
                raise TriggerNotFoundError(f"trigger {key} is not stored")

    def replace_trigger(self, key: TriggerKey, new_trigger: Trigger) -> bool:
        """Replace a stored trigger by ``new_trigger`` (same job unless it names another)."""
        t = self.tables.triggers
        now = self.clock.now()
        with self.transaction() as conn:
            row = conn.execute(
                select(t.c.job_name, t.c.job_group).where(self._trigger_key_clause(key))
            ).first()
            if row is None:
                return False
            if new_trigger.job_key is None:
                new_trigger.job_key = JobKey(row.job_name, row.job_group)
            conn.execute(delete(t).where(self._trigger_key_clause(key)))
            self._store_trigger(conn, new_trigger, replace=False, now=now)
            if new_trigger.job_key != JobKey(row.job_name, row.job_group):
                self._delete_job_if_orphaned(conn, JobKey(row.job_name, row.job_group))
        return True

    def pause_trigger(self, key: TriggerKey) -> None:
        with self.transaction() as conn:
            self._pause_triggers(conn, self._trigger_key_clause(key))

    def resume_trigger(self, key: TriggerKey) -> None:
        with self.transaction() as conn:
            self._resume_triggers(conn, self._trigger_key_clause(key))

    def pause_job(self, key: JobKey) -> None:
        with self.transaction() as conn:
            self._pause_triggers(conn, self._triggers_of_job_clause(key))

    def resume_job(self, key: JobKey) -> None:
        with self.transaction() as conn:
            self._resume_triggers(conn, self._triggers_of_job_clause(key))

    def pause_trigger_group(self, group: str) -> None:
        """Pause every trigger of ``group``, and the triggers stored in it later."""
        p, t = self.tables.paused_trigger_groups, self.tables.triggers
        with self.transaction() as conn:
            clause = and_(p.c.sched_name == self.scheduler_name, p.c.trigger_group == group)
            if conn.execute(select(p.c.trigger_group).where(clause)).first() is None:
                conn.execute(insert(p).values(sched_name=self.scheduler_name, trigger_group=group))
            self._pause_triggers(
                conn, and_(t.c.sched_name == self.scheduler_name, t.c.trigger_group == group)
            )

    def resume_trigger_group(self, group: str) -> None:
        """Resume every trigger of ``group``; a trigger the pause made late follows its misfire
        instruction."""
        p, t = self.tables.paused_trigger_groups, self.tables.triggers
        with self.transaction() as conn:
            conn.execute(
                delete(p).where(p.c.sched_name == self.scheduler_name, p.c.trigger_group == group)
            )
            self._resume_triggers(
                conn, and_(t.c.sched_name == self.scheduler_name, t.c.trigger_group == group)
            )

    def paused_trigger_groups(self) -> list[str]:
        with self.transaction() as conn:
            return sorted(self._paused_groups(conn))

    def _triggers_of_job_clause(self, key: JobKey) -> Any:
        t = self.tables.triggers
        return and_(
            t.c.sched_name == self.scheduler_name,
            t.c.job_name == key.name,
            t.c.job_group == key.group,
        )

    def _pause_triggers(self, conn: Connection, where: Any) -> None:
        t = self.tables.triggers
        # An ACQUIRED trigger becomes PAUSED too: the scheduler holding it sees the change when it
        # fires and drops the firing (the state is no longer ACQUIRED).
        conn.execute(
            update(t)
            .where(where, t.c.trigger_state.in_([TriggerState.WAITING, TriggerState.ACQUIRED]))
            .values(trigger_state=TriggerState.PAUSED)
        )
        conn.execute(
            update(t)
            .where(where, t.c.trigger_state == TriggerState.BLOCKED)
            .values(trigger_state=TriggerState.PAUSED_BLOCKED)
        )

    def _resume_triggers(self, conn: Connection, where: Any) -> None:
        t = self.tables.triggers
        now = self._now()
        rows = conn.execute(
            select(t).where(
                where, t.c.trigger_state.in_([TriggerState.PAUSED, TriggerState.PAUSED_BLOCKED])
            )
        ).all()
        for row in rows:
            # Quartz applies the misfire instruction on resume when the pause made it late.
            if (
                row.next_fire_time is not None
                and row.next_fire_time < now - self._misfire_threshold_ms
                and not self._apply_misfire(conn, row, now, ", paused,")
            ):
                continue
            blocked = row.trigger_state == TriggerState.PAUSED_BLOCKED
            conn.execute(
                update(t)
                .where(self._trigger_key_clause(TriggerKey(row.trigger_name, row.trigger_group)))
                .values(trigger_state=TriggerState.BLOCKED if blocked else TriggerState.WAITING)
            )

    def _apply_misfire(
        self, conn: Connection, row: Row[Any], now: int, why: str, *conditions: Any
    ) -> bool:
        """Apply a late trigger's misfire instruction (one decision, logged): write its new fire
        times, or remove it when it will not fire again. ``conditions`` guard the update (the
        trigger is still as it was read). True when the trigger is still stored."""
        t = self.tables.triggers
        trigger = self._trigger_from_row(row)
        trigger.update_after_misfire(
            from_millis(now), self._calendar(conn, trigger.calendar_name, trigger.key)
        )
        if trigger.next_fire_time is None:
            self._remove_trigger(conn, trigger.key)
            outcome = "will not fire again; removed"
        else:
            conn.execute(
                update(t)
                .where(self._trigger_key_clause(trigger.key), *conditions)
                .values(
                    next_fire_time=to_millis(trigger.next_fire_time),
                    times_triggered=trigger.times_triggered,
                    misfire_orig_fire_time=row.next_fire_time,
                    **self._rescheduled_definition(trigger),
                )
            )
            outcome = f"next fire time {trigger.next_fire_time.isoformat()}"
        logger.info(
            "misfire: trigger %s%s was %.1fs late (instruction %s); %s",
            trigger.key,
            why,
            (now - row.next_fire_time) / 1000,
            trigger.misfire_instruction,
            outcome,
        )
        return trigger.next_fire_time is not None

    def _rescheduled_definition(self, trigger: Trigger) -> dict[str, Any]:
        """The definition columns a misfire instruction may rewrite.

        Beside next_fire_time and times_triggered, a simple trigger's "reschedule now"
        instructions move ``start_at`` to now and rewrite ``repeat_count`` (in ``detail``), as
        Quartz's SimpleTrigger does; without them the trigger read back from the store would
        compute its later fire times from the old start and count.
        """
        assert trigger.start_at is not None
        return {
            "start_time": to_millis(trigger.start_at),
            "detail": encode_json_object(
                f"trigger {trigger.key}", "detail", trigger.detail(), self.max_data_bytes
            ),
        }

    #: Set by the scheduler from ``quartz_misfire_threshold``; used when resuming paused triggers.
    _misfire_threshold_ms: int = 60_000

    def set_misfire_threshold(self, seconds: float) -> None:
        self._misfire_threshold_ms = int(seconds * 1000)

    def count_rows(self) -> dict[str, int]:
        """Rows per table for this scheduler name (diagnostics, and tests of "store unchanged")."""
        counts = {}
        with self.transaction() as conn:
            for name in (
                "jobs",
                "triggers",
                "fired_triggers",
                "calendars",
                "paused_trigger_groups",
            ):
                table = getattr(self.tables, name)
                counts[name] = conn.execute(
                    select(func.count())
                    .select_from(table)
                    .where(table.c.sched_name == self.scheduler_name)
                ).scalar_one()
        return counts

    # -- acquisition and firing (the scheduling loop) --------------------------------------------

    def acquire_next_triggers(
        self,
        instance_name: str,
        *,
        no_later_than: datetime,
        max_count: int,
        time_window: float,
        misfire_threshold: float,
    ) -> list[AcquiredFiring]:
        """Claim up to ``max_count`` due triggers for ``instance_name``, committed before returning.

        Race settled: two schedulers selecting the same due triggers. On PostgreSQL the select
        locks the rows it returns and skips rows another transaction holds, so concurrent
        schedulers claim disjoint batches; the ``state = WAITING`` condition on the update keeps
        the claim correct even without the lock. Triggers later than the misfire threshold are
        left to the misfire handler unless they ignore misfires (Quartz does the same).
        """
        claim = self.claim(
            instance_name,
            no_later_than=no_later_than,
            max_count=max_count,
            time_window=time_window,
            misfire_threshold=misfire_threshold,
            fire_due=False,
        )
        return claim.acquired

    def claim(
        self,
        instance_name: str,
        *,
        no_later_than: datetime,
        max_count: int,
        time_window: float,
        misfire_threshold: float,
        fire_due: bool = True,
        expires_after: float | None = None,
        published: Sequence[str | tuple[str, int]] = (),
        task_exists: Callable[[str], bool] | None = None,
        router: Router | None = None,
    ) -> Claim:
        """Claim the next batch of due triggers (Quartz's batch rule), in one transaction.

        When the batch's first trigger is already due and ``fire_due`` is set, the batch is fired
        in the same transaction (:attr:`Claim.firings`, fired rows written FIRED): one commit per
        batch instead of a claim and a firing. Otherwise the batch is claimed (ACQUIRED,
        :attr:`Claim.acquired`), to be fired by :meth:`fire` once due. ``published`` fire
        instance ids are recorded as PUBLISHED in the same transaction (they were handed to the
        broker since the last claim). A trigger whose job's task ``task_exists`` does not know is
        put in ERROR instead (Quartz: the job cannot be run).

        With a ``router``, each trigger is routed (its group's queue, or its pinned worker's own
        queue) and admitted only within its execution group's capacity and its pinned worker's
        (:mod:`celery_quartz.routing`); the others stay WAITING.

        Race settled: as for :meth:`acquire_next_triggers` — the rows are locked (skipping those
        another scheduler holds) and still WAITING when written. With bounded execution limits,
        two schedulers counting a group's firings in flight at once: the count and the claim are
        made under the ``EXECUTION_LIMITS`` lock row.
        """
        t = self.tables.triggers
        now = self._now()
        limit_ms = to_millis(no_later_than)
        window_ms = int(time_window * 1000)
        params = {
            "due_by": limit_ms + window_ms,
            "misfire_before": now - int(misfire_threshold * 1000),
            "max_count": max_count,
        }
        claim = Claim()
        with self.transaction() as conn:
            self._check_fence(conn)
            if published:
                self._mark_published(conn, instance_name, published, now)
            batch = self._admitted_batch(
                conn, params, router or _UNLIMITED, claim, now, limit_ms, window_ms
            )
            if task_exists is not None:
                batch = self._error_unrunnable(conn, batch, task_exists)
            if not batch:
                return claim
            if fire_due and batch[0].scheduled_millis <= now:
                expires = None if expires_after is None else now + int(expires_after * 1000)
                calendars = self._calendars_in(conn, {a.trigger.calendar_name for a in batch})
                claim.firings, _ = self._write_fired(
                    conn, instance_name, batch, self._advance(batch, calendars), now, expires
                )
                rows_to_insert = {f.fire_instance_id for f in claim.firings}
                self._insert_fired_rows(
                    conn,
                    instance_name,
                    [a for a in batch if a.fire_instance_id in rows_to_insert],
                    FiringState.FIRED,
                    now,
                    expires,
                )
            else:
                claimed = {
                    (r.trigger_name, r.trigger_group)
                    for r in conn.execute(
                        update(t)
                        .where(
                            t.c.sched_name == self.scheduler_name,
                            tuple_(t.c.trigger_name, t.c.trigger_group).in_(
                                [(a.trigger.key.name, a.trigger.key.group) for a in batch]
                            ),
                            t.c.trigger_state == TriggerState.WAITING,
                        )
                        .values(trigger_state=TriggerState.ACQUIRED)
                        .returning(t.c.trigger_name, t.c.trigger_group)
                    )
                }
                claim.acquired = [
                    a for a in batch if (a.trigger.key.name, a.trigger.key.group) in claimed
                ]
                self._insert_fired_rows(
                    conn, instance_name, claim.acquired, FiringState.ACQUIRED, now, None
                )
        logger.debug(
            "%s claimed %d trigger(s), fired %d at once",
            instance_name,
            len(claim.acquired),
            len(claim.firings),
        )
        return claim

    #: Selections one claim makes at most while looking past held-back triggers.
    _MAX_ADMISSION_ROUNDS = 4

    @functools.cached_property
    def _claim_statement(self) -> Any:
        """The due WAITING triggers with their jobs, locked, skipping those another scheduler
        holds (built once: parameters ``due_by``, ``misfire_before`` and ``max_count``)."""
        t, j = self.tables.triggers, self.tables.jobs
        return (
            select(
                t,
                j.c.task_name,
                j.c.args,
                j.c.kwargs,
                j.c.options,
                j.c.is_durable,
                j.c.is_nonconcurrent,
                j.c.is_update_data,
                j.c.requests_recovery,
                j.c.job_data.label("jobs_job_data"),
            )
            .join(j, _same_job(j, t))
            .where(
                t.c.sched_name == self.scheduler_name,
                t.c.trigger_state == TriggerState.WAITING,
                # Quartz selects up to noLaterThan + timeWindow; the first trigger must still be
                # due by no_later_than.
                t.c.next_fire_time <= bindparam("due_by", type_=BigInteger),
                or_(
                    t.c.misfire_instr == MisfireInstruction.IGNORE_MISFIRE_POLICY,
                    t.c.next_fire_time >= bindparam("misfire_before", type_=BigInteger),
                ),
            )
            .order_by(t.c.next_fire_time, t.c.priority.desc())
            .limit(bindparam("max_count", type_=Integer))
            .with_for_update(skip_locked=True, of=t)
        )

    def _admitted_batch(
        self,
        conn: Connection,
        params: dict[str, Any],
        router: Router,
        claim: Claim,
        now: int,
        limit_ms: int,
        window_ms: int,
    ) -> list[AcquiredFiring]:
        """The batch rule applied to the triggers admitted by ``router``, each with its route.

        A held-back trigger is excluded from the next selection by what held it (its group, its
        pinned worker, or the pair), so a full group's due triggers do not fill every selection
        and starve the triggers behind them.
        """
        t = self.tables.triggers
        admission = None
        if router.limits.bounded:
            self._lock(conn, "EXECUTION_LIMITS")
            admission = self._admission(conn, router, now)
        held_groups: set[str | None] = set()
        held_nodes: set[str] = set()
        held_pairs: set[tuple[str, str | None]] = set()
        for _ in range(self._MAX_ADMISSION_ROUNDS):
            selection = self._claim_statement
            if None in held_groups:
                selection = selection.where(t.c.execution_group.is_not(None))
            named = [g for g in held_groups if g is not None]
            if named:
                selection = selection.where(
                    or_(t.c.execution_group.is_(None), t.c.execution_group.not_in(named))
                )
            if held_nodes:
                selection = selection.where(
                    or_(t.c.preferred_node.is_(None), t.c.preferred_node.not_in(held_nodes))
                )
            for node, group in held_pairs:
                same_group = (
                    t.c.execution_group.is_(None) if group is None else t.c.execution_group == group
                )
                selection = selection.where(~and_(t.c.preferred_node == node, same_group))
            rows = in_acquisition_order(_tuple_rows(conn.execute(selection, params)))
            fire_instance_ids = new_ids(len(rows))
            # Unbounded limits count nothing: only a pin needs the workers and what they run.
            if admission is None and any(r.preferred_node is not None for r in rows):
                admission = self._admission(conn, router, now)
            batch: list[AcquiredFiring] = []
            batch_end: int | None = None
            held_more = False
            for row in rows:
                if batch_end is None and row.next_fire_time > limit_ms:
                    break
                if batch_end is not None and row.next_fire_time > batch_end:
                    break
                decision: Route | Hold = (
                    router.route(row.execution_group)
                    if admission is None
                    else admission.admit(row.execution_group, row.preferred_node)
                )
                if isinstance(decision, Hold):
                    if decision.unserved is not None and decision.unserved not in claim.unserved:
                        claim.unserved.append(decision.unserved)
                    if decision.group_full and decision.group not in held_groups:
                        held_groups.add(decision.group)
                        held_more = True
                    if decision.node is not None and decision.node not in held_nodes:
                        held_nodes.add(decision.node)
                        held_more = True
                    if decision.pair is not None and decision.pair not in held_pairs:
                        held_pairs.add(decision.pair)
                        held_more = True
                    continue
                if batch_end is None:
                    # Quartz's batch rule: after the first trigger, take the others only while
                    # they are due no later than max(first fire time, now) + the window.
                    batch_end = max(row.next_fire_time, now) + window_ms
                acquired = self._acquired_from_row(row, fire_instance_ids.pop())
                acquired.queue, acquired.node = decision.queue, decision.node
                batch.append(acquired)
            if batch or not held_more:
                return batch
        return []

    def _admission(self, conn: Connection, router: Router, now: int) -> Admission:
        """What admission counts against, read in the claiming transaction: the live workers
        and the firings in flight, by execution group and by queue."""
        f = self.tables.fired_triggers
        by_group: dict[str | None, int] = {}
        by_queue: dict[str | None, int] = {}
        for r in conn.execute(
            select(f.c.execution_group, f.c.queue, func.count().label("n"))
            .where(f.c.sched_name == self.scheduler_name)
            .group_by(f.c.execution_group, f.c.queue)
        ):
            by_group[r.execution_group] = by_group.get(r.execution_group, 0) + r.n
            by_queue[r.queue] = by_queue.get(r.queue, 0) + r.n
        return router.admission(self._live_workers(conn, router, now), by_group, by_queue)

    def _live_workers(self, conn: Connection, router: Router, now: int) -> dict[str, LiveWorker]:
        s = self.tables.scheduler_state
        rows = conn.execute(
            select(
                s.c.instance_name,
                s.c.last_checkin_time.label("last_checkin_millis"),
                s.c.checkin_interval.label("checkin_interval_millis"),
                s.c.queues,
                s.c.concurrency,
            ).where(s.c.sched_name == self.scheduler_name, s.c.kind == "worker")
        ).all()
        return router.live_workers(list(rows), now)

    def unserved(self, router: Router) -> list[Unserved]:
        """The execution groups of the schedulable triggers that no live worker serves, and the
        live pinned workers that do not consume their triggers' queues (or their own)."""
        t = self.tables.triggers
        schedulable = and_(
            t.c.sched_name == self.scheduler_name,
            t.c.trigger_state.in_(
                [TriggerState.WAITING, TriggerState.ACQUIRED, TriggerState.BLOCKED]
            ),
        )
        with self.transaction() as conn:
            workers = self._live_workers(conn, router, self._now())
            groups = set(
                conn.execute(select(t.c.execution_group).where(schedulable).distinct()).scalars()
            )
            pins = {
                (r.preferred_node, r.execution_group)
                for r in conn.execute(
                    select(t.c.preferred_node, t.c.execution_group)
                    .where(schedulable, t.c.preferred_node.is_not(None))
                    .distinct()
                )
            }
        return router.unserved(groups, pins, workers)

    def _error_unrunnable(
        self, conn: Connection, batch: list[AcquiredFiring], task_exists: Callable[[str], bool]
    ) -> list[AcquiredFiring]:
        t = self.tables.triggers
        runnable = []
        for firing in batch:
            if task_exists(firing.job.task):
                runnable.append(firing)
                continue
            conn.execute(
                update(t)
                .where(self._trigger_key_clause(firing.trigger.key))
                .values(trigger_state=TriggerState.ERROR)
            )
            logger.error(
                "trigger %s put in ERROR: job %s: task %r is not registered",
                firing.trigger.key,
                firing.job.key,
                firing.job.task,
            )
        return runnable

    def _acquired_from_row(self, row: Row[Any], fire_instance_id: str) -> AcquiredFiring:
        return AcquiredFiring(
            fire_instance_id=fire_instance_id,
            trigger=self._trigger_from_row(row),
            job=self._job_record_from_row(row),
            scheduled_millis=row.next_fire_time,
            recovering=row.recovering,
            origin_trigger_key=_origin_key(row),
            origin_scheduled_millis=row.origin_sched_time,
            retry_attempt=row.retry_attempt,
            priority=row.priority,
            execution_group=row.execution_group,
        )

    def _insert_fired_rows(
        self,
        conn: Connection,
        instance_name: str,
        batch: Sequence[AcquiredFiring],
        state: str,
        now: int,
        expires: int | None,
    ) -> None:
        if not batch:
            return
        rows = [  # keyed by _FIRED_ROW_COLUMNS
            {
                "entry_id": a.fire_instance_id,
                "trigger_name": a.trigger.key.name,
                "trigger_group": a.trigger.key.group,
                "sched_time": a.scheduled_millis,
                "priority": a.priority,
                "job_name": a.job.key.name,
                "job_group": a.job.key.group,
                "is_nonconcurrent": a.job.disallow_concurrent,
                "requests_recovery": a.job.requests_recovery,
                "execution_group": a.execution_group,
                "queue": a.queue,
                "recovering": a.recovering,
                "retry_attempt": a.retry_attempt,
                **_pin_columns(a.trigger.preferred_node),
            }
            for a in batch
        ]
        shared = {
            "instance_name": instance_name,
            "fired_time": now,
            "state": state,
            "expires_time": expires,
        }
        if self.dialect == "postgresql":
            conn.execute(self._insert_fired_statement, {"fired": _json_rows(rows), **shared})
            return
        conn.execute(
            insert(self.tables.fired_triggers),
            [{"sched_name": self.scheduler_name, **shared, **row} for row in rows],
        )

    @functools.cached_property
    def _insert_fired_statement(self) -> Any:
        """Fired rows for a batch as one PostgreSQL INSERT … SELECT (built once): the rows'
        own values from the JSON parameter ``fired``, the values they share as scalars."""
        f = self.tables.fired_triggers
        shared = ("instance_name", "fired_time", "state", "expires_time")
        rows = _recordset("fired", [f.c[name] for name in _FIRED_ROW_COLUMNS])
        columns = {
            f.c.sched_name: literal(self.scheduler_name),
            **{f.c[name]: bindparam(name, type_=f.c[name].type) for name in shared},
            **{f.c[c.name]: c for c in rows.c},
        }
        return insert(f).from_select(list(columns), select(*columns.values()))

    @staticmethod
    def _advance(
        batch: Sequence[AcquiredFiring], calendars: dict[str, Any]
    ) -> dict[str, dict[str, Any]]:
        """Each trigger's values after it fires, computed on a copy: the claim keeps the trigger
        as claimed, so firing the same batch again (after a store outage) computes the same next
        fire time, not the one after."""
        advanced: dict[str, dict[str, Any]] = {}
        for firing in batch:
            trigger = copy.copy(firing.trigger)
            trigger.triggered(calendars.get(trigger.calendar_name or ""))
            advanced[firing.fire_instance_id] = {
                "b_name": trigger.key.name,
                "b_group": trigger.key.group,
                "b_nft": _millis_or_none(trigger.next_fire_time),
                "b_prev": _millis_or_none(trigger.previous_fire_time),
                "b_times": trigger.times_triggered,
            }
        return advanced

    def _write_fired(
        self,
        conn: Connection,
        instance_name: str,
        batch: Sequence[AcquiredFiring],
        advanced: dict[str, dict[str, Any]],
        now: int,
        expires: int | None,
    ) -> tuple[list[Firing], list[str]]:
        """Advance the batch's triggers (rows locked by the caller); the messages, and the fire
        instance ids left out because their disallow_concurrent job already fired in the batch.

        A job that disallows concurrent execution fires once per batch: the triggers of the batch
        were read before its first firing blocked the others, so its later firings in this batch
        are left out (their triggers stay BLOCKED until the first one completes).
        """
        firings: list[Firing] = []
        skipped: list[str] = []
        updates: list[dict[str, Any]] = []
        nonconcurrent_fired: set[JobKey] = set()
        for firing in batch:
            if firing.job.key in nonconcurrent_fired:
                skipped.append(firing.fire_instance_id)
                continue
            values = advanced[firing.fire_instance_id]
            if values["b_nft"] is None:
                values["b_state"] = TriggerState.COMPLETE
            elif firing.job.disallow_concurrent:
                values["b_state"] = TriggerState.BLOCKED
            else:
                values["b_state"] = TriggerState.WAITING
            updates.append(values)
            if firing.job.disallow_concurrent:
                self._block_other_triggers(conn, firing.job.key, firing.trigger.key)
                nonconcurrent_fired.add(firing.job.key)
            firings.append(self._firing_message(firing, now, instance_name, expires))
        if updates:
            self._advance_triggers(conn, updates)
        return firings, skipped

    @functools.cached_property
    def _advance_statement(self) -> Any:
        """The batch advance as one PostgreSQL statement (built once per store), the batch's
        values from the JSON parameter ``fired``."""
        t = self.tables.triggers
        fired = _recordset(
            "fired",
            [
                column("b_name", String),
                column("b_group", String),
                column("b_state", String),
                column("b_nft", BigInteger),
                column("b_prev", BigInteger),
                column("b_times", Integer),
            ],
        )
        return (
            update(t)
            .where(
                t.c.sched_name == self.scheduler_name,
                t.c.trigger_name == fired.c.b_name,
                t.c.trigger_group == fired.c.b_group,
            )
            .values(
                trigger_state=fired.c.b_state,
                next_fire_time=fired.c.b_nft,
                prev_fire_time=fired.c.b_prev,
                times_triggered=fired.c.b_times,
            )
        )

    def _advance_triggers(self, conn: Connection, updates: list[dict[str, Any]]) -> None:
        """Write each fired trigger's new state and fire times: on PostgreSQL one statement for
        the whole batch, elsewhere one executemany."""
        t = self.tables.triggers
        if self.dialect == "postgresql":
            conn.execute(self._advance_statement, {"fired": _json_rows(updates)})
            return
        conn.execute(
            update(t)
            .where(
                t.c.sched_name == self.scheduler_name,
                t.c.trigger_name == bindparam("b_name"),
                t.c.trigger_group == bindparam("b_group"),
            )
            .values(
                trigger_state=bindparam("b_state"),
                next_fire_time=bindparam("b_nft"),
                prev_fire_time=bindparam("b_prev"),
                times_triggered=bindparam("b_times"),
            ),
            updates,
        )

    def fire(
        self,
        instance_name: str,
        acquired: Sequence[AcquiredFiring],
        *,
        expires_after: float | None = None,
    ) -> list[Firing]:
        """Fire claimed triggers: advance each, and turn its fired row into a message to publish.

        Each trigger's next fire time is computed before the transaction opens, so the
        transaction only checks ownership and writes. ``expires_after`` (seconds) gives each
        message an expiry: a firing no worker starts by then is resolved as a misfire
        (:meth:`resolve_expired_firings`).

        Race settled: a scheduler that was declared dead (and whose claims were released and
        taken by a survivor) must not fire. Ownership is the fired row with this instance's name
        in state ACQUIRED, and the trigger still ACQUIRED; both are checked under row locks here.
        Claims that lost the trigger are dropped, their fired rows removed.
        """
        if not acquired:
            return []
        t, f = self.tables.triggers, self.tables.fired_triggers
        advanced = self._advance(
            acquired, self._calendars({a.trigger.calendar_name for a in acquired})
        )
        now = self._now()
        expires = None if expires_after is None else now + int(expires_after * 1000)
        with self.transaction() as conn:
            self._check_fence(conn)
            owned = {
                r.entry_id
                for r in conn.execute(
                    select(f.c.entry_id)
                    .where(
                        f.c.sched_name == self.scheduler_name,
                        f.c.entry_id.in_([a.fire_instance_id for a in acquired]),
                        f.c.instance_name == instance_name,
                        f.c.state == FiringState.ACQUIRED,
                    )
                    .with_for_update()
                )
            }
            still_acquired = {
                (r.trigger_name, r.trigger_group)
                for r in conn.execute(
                    select(t.c.trigger_name, t.c.trigger_group)
                    .where(
                        t.c.sched_name == self.scheduler_name,
                        tuple_(t.c.trigger_name, t.c.trigger_group).in_(
                            [(a.trigger.key.name, a.trigger.key.group) for a in acquired]
                        ),
                        t.c.trigger_state == TriggerState.ACQUIRED,
                    )
                    .with_for_update()
                )
            }
            # A claim not owned any more was recovered by a survivor, or already fired by a
            # first attempt whose commit went through while its answer was lost: such a FIRED
            # row is published from the store (take-over), never deleted here.
            mine = [a for a in acquired if a.fire_instance_id in owned]
            live = [a for a in mine if (a.trigger.key.name, a.trigger.key.group) in still_acquired]
            firings, skipped = self._write_fired(conn, instance_name, live, advanced, now, expires)
            dropped = [a.fire_instance_id for a in mine if a not in live] + skipped
            if dropped:
                conn.execute(
                    delete(f).where(
                        f.c.sched_name == self.scheduler_name, f.c.entry_id.in_(dropped)
                    )
                )
                logger.info(
                    "%s dropped %d claim(s): the trigger was paused, changed or removed "
                    "meanwhile, or its disallow_concurrent job already fired in this batch",
                    instance_name,
                    len(dropped),
                )
            if firings:
                conn.execute(
                    update(f)
                    .where(
                        f.c.sched_name == self.scheduler_name,
                        f.c.entry_id.in_([m.fire_instance_id for m in firings]),
                    )
                    .values(state=FiringState.FIRED, fired_time=now, expires_time=expires)
                )
        return firings

    def _calendars(self, names: set[str | None]) -> dict[str, Any]:
        """The named calendars, read in one short transaction (none when no trigger has one)."""
        if not any(names):
            return {}
        with self.transaction() as conn:
            return self._calendars_in(conn, names)

    def _calendars_in(self, conn: Connection, names: set[str | None]) -> dict[str, Any]:
        wanted = {n for n in names if n}
        if not wanted:
            return {}
        from celery_quartz.calendars import calendar_from_dict

        c = self.tables.calendars
        rows = conn.execute(
            select(c.c.calendar_name, c.c.calendar).where(
                c.c.sched_name == self.scheduler_name, c.c.calendar_name.in_(wanted)
            )
        ).all()
        return {r.calendar_name: calendar_from_dict(json.loads(r.calendar)) for r in rows}

    def _block_other_triggers(self, conn: Connection, job: JobKey, fired: TriggerKey) -> None:
        t = self.tables.triggers
        of_job = and_(self._triggers_of_job_clause(job), ~self._trigger_key_clause(fired))
        conn.execute(
            update(t)
            .where(of_job, t.c.trigger_state.in_([TriggerState.WAITING, TriggerState.ACQUIRED]))
            .values(trigger_state=TriggerState.BLOCKED)
        )
        conn.execute(
            update(t)
            .where(of_job, t.c.trigger_state == TriggerState.PAUSED)
            .values(trigger_state=TriggerState.PAUSED_BLOCKED)
        )

    def _firing_message(
        self, firing: AcquiredFiring, now: int, instance_name: str, expires: int | None
    ) -> Firing:
        job = firing.job
        return Firing(
            fire_instance_id=firing.fire_instance_id,
            scheduler_name=self.scheduler_name,
            task=job.task,
            args=job.args,
            kwargs=job.kwargs,
            options=job.options,
            job_key=job.key,
            trigger_key=firing.trigger.key,
            scheduled_millis=firing.occurrence_millis,
            fired_millis=now,
            fired_by=instance_name,
            job_data=job.data,
            trigger_data=firing.trigger.data,
            expires_millis=expires,
            recovering=firing.recovering,
            retry_attempt=firing.retry_attempt,
            origin_trigger_key=firing.origin_trigger_key,
            persist_job_data=job.persist_job_data,
            queue=firing.queue,
            node=firing.node,
        )

    def mark_published(
        self, instance_name: str, published: Sequence[str | tuple[str, int]]
    ) -> None:
        """Record that the broker accepted these firings of ``instance_name`` (FIRED →
        PUBLISHED): fire instance ids, or (id, the instant in milliseconds it was published)
        pairs. A firing handed to another instance meanwhile (this one was declared dead) is
        that instance's to publish and record."""
        if not published:
            return
        with self.transaction() as conn:
            self._check_fence(conn)
            self._mark_published(conn, instance_name, published, self._now())

    def _mark_published(
        self,
        conn: Connection,
        instance_name: str,
        published: Sequence[str | tuple[str, int]],
        now: int,
    ) -> None:
        f = self.tables.fired_triggers
        by_instant: dict[int, list[str]] = {}
        for item in published:
            fire_id, at = (item, now) if isinstance(item, str) else item
            by_instant.setdefault(at, []).append(fire_id)
        for at, fire_ids in by_instant.items():
            # Conditional: a worker may already have started one (EXECUTING) or finished it.
            if self.dialect == "postgresql":
                conn.execute(
                    self._mark_published_statement,
                    {"instance": instance_name, "ids": fire_ids, "at": at},
                )
                continue
            conn.execute(
                update(f)
                .where(
                    f.c.sched_name == self.scheduler_name,
                    f.c.instance_name == instance_name,
                    f.c.state == FiringState.FIRED,
                    f.c.entry_id.in_(fire_ids),
                )
                .values(state=FiringState.PUBLISHED, published_time=at)
            )

    @functools.cached_property
    def _mark_published_statement(self) -> Any:
        """FIRED → PUBLISHED for the ids of one instant, an array parameter: one PostgreSQL
        statement built once (the loop runs it with every claim; an IN list is built anew).

        The instance and the state come first: whatever the table's statistics, the rows read
        are the instance's FIRED ones (a batch or two, from ``ix_fired_instance``), never every
        fired row of the scheduler (an unanalysed table led PostgreSQL's planner there, at a cost
        growing with the firings in flight).
        """
        f = self.tables.fired_triggers
        return (
            update(f)
            .where(
                f.c.sched_name == self.scheduler_name,
                f.c.instance_name == bindparam("instance", type_=String),
                f.c.state == FiringState.FIRED,
                f.c.entry_id == bindparam("ids", type_=ARRAY(String)).any_(),
            )
            .values(state=FiringState.PUBLISHED, published_time=bindparam("at", type_=BigInteger))
        )

    def release_acquired(
        self,
        instance_name: str,
        acquired: Sequence[AcquiredFiring] | None = None,
        *,
        keep: Sequence[str] = (),
    ) -> int:
        """Give claimed-but-unfired triggers back (ACQUIRED → WAITING), as at shutdown.

        ``None`` releases every claim of the instance (a restart under a fixed instance id),
        except the fire instance ids in ``keep``.
        """
        if acquired is not None and not acquired:
            return 0
        with self.transaction() as conn:
            self._check_fence(conn)
            if acquired is not None:
                return self._release(conn, instance_name, [a.fire_instance_id for a in acquired])
            return self._release(conn, instance_name, None, keep=keep)

    def _release(
        self,
        conn: Connection,
        instance_name: str,
        fire_ids: Sequence[str] | None,
        *,
        keep: Sequence[str] = (),
    ) -> int:
        t, f = self.tables.triggers, self.tables.fired_triggers
        where = [
            f.c.sched_name == self.scheduler_name,
            f.c.instance_name == instance_name,
            f.c.state == FiringState.ACQUIRED,
        ]
        if fire_ids is not None:
            where.append(f.c.entry_id.in_(list(fire_ids)))
        if keep:
            where.append(f.c.entry_id.not_in(list(keep)))
        rows = conn.execute(
            delete(f).where(*where).returning(f.c.trigger_name, f.c.trigger_group)
        ).all()
        if rows:
            conn.execute(
                update(t)
                .where(
                    t.c.sched_name == self.scheduler_name,
                    tuple_(t.c.trigger_name, t.c.trigger_group).in_(
                        [(r.trigger_name, r.trigger_group) for r in rows]
                    ),
                    t.c.trigger_state == TriggerState.ACQUIRED,
                )
                .values(trigger_state=TriggerState.WAITING)
            )
        return len(rows)

    # -- misfires --------------------------------------------------------------------------------

    def handle_misfires(self, *, threshold: float, max_count: int) -> tuple[int, bool]:
        """Apply the misfire instruction of up to ``max_count`` late triggers, earliest first.

        Returns (handled, more remain). Race settled: two schedulers' misfire handlers picking the
        same trigger; the rows are locked (skipping those another handler holds) and the update
        is conditional on the trigger still being WAITING at the fire time that was late.
        """
        t = self.tables.triggers
        now = self._now()
        late_before = now - int(threshold * 1000)
        with self.transaction() as conn:
            self._check_fence(conn)
            rows = conn.execute(
                select(t)
                .where(
                    t.c.sched_name == self.scheduler_name,
                    t.c.trigger_state == TriggerState.WAITING,
                    t.c.misfire_instr != MisfireInstruction.IGNORE_MISFIRE_POLICY,
                    t.c.next_fire_time < late_before,
                )
                .order_by(t.c.next_fire_time, t.c.priority.desc())
                .limit(max_count + 1)
                .with_for_update(skip_locked=True)
            ).all()
            more = len(rows) > max_count
            for row in rows[:max_count]:
                self._apply_misfire(
                    conn,
                    row,
                    now,
                    "",
                    t.c.trigger_state == TriggerState.WAITING,
                    t.c.next_fire_time == row.next_fire_time,
                )
        return min(len(rows), max_count), more

    # -- check-in and recovery of dead schedulers ------------------------------------------------

    def check_in(
        self,
        instance_name: str,
        *,
        interval: float,
        kind: str = "scheduler",
        clustered: bool = True,
        hostname: str | None = None,
        pid: int | None = None,
        queues: Sequence[str] | None = None,
        concurrency: int | None = None,
    ) -> bool:
        """Write this process's check-in. Returns False when the row had gone: another instance
        recovered this one (it thought us dead); the row is written anew."""
        s = self.tables.scheduler_state
        now = self._now()
        values: dict[str, Any] = {
            "last_checkin_time": now,
            "checkin_interval": int(interval * 1000),
            "kind": kind,
            "clustered": clustered,
            "hostname": hostname,
            "pid": pid,
            "queues": None if queues is None else json.dumps(list(queues)),
            "concurrency": concurrency,
        }
        clause = and_(s.c.sched_name == self.scheduler_name, s.c.instance_name == instance_name)
        with self.transaction() as conn:
            if conn.execute(update(s).where(clause).values(values)).rowcount:
                return True
            conn.execute(
                insert(s).values(
                    sched_name=self.scheduler_name,
                    instance_name=instance_name,
                    started_time=now,
                    **values,
                )
            )
            return False

    def remove_check_in(self, instance_name: str) -> None:
        s = self.tables.scheduler_state
        with self.transaction() as conn:
            conn.execute(
                delete(s).where(
                    s.c.sched_name == self.scheduler_name, s.c.instance_name == instance_name
                )
            )

    def check_ins(self, kind: str | None = None) -> list[CheckIn]:
        s = self.tables.scheduler_state
        q = select(s).where(s.c.sched_name == self.scheduler_name)
        if kind is not None:
            q = q.where(s.c.kind == kind)
        with self.transaction() as conn:
            rows = conn.execute(q.order_by(s.c.instance_name)).all()
        return [
            CheckIn(
                instance_name=r.instance_name,
                kind=r.kind,
                last_checkin_millis=r.last_checkin_time,
                checkin_interval_millis=r.checkin_interval,
                clustered=r.clustered,
                hostname=r.hostname,
                pid=r.pid,
            )
            for r in rows
        ]

    def firing_owners(self) -> FiringOwners:
        """Who holds fired rows in flight: the scheduler instances owning claims or unpublished
        firings, and the workers executing firings. One read for a check-in's recovery pass."""
        f = self.tables.fired_triggers
        with self.transaction() as conn:
            rows = conn.execute(
                select(
                    f.c.state,
                    f.c.instance_name,
                    f.c.worker_name,
                    func.min(f.c.started_time).label("since"),
                )
                .where(
                    f.c.sched_name == self.scheduler_name,
                    f.c.state.in_([FiringState.ACQUIRED, FiringState.FIRED, FiringState.EXECUTING]),
                )
                .group_by(f.c.state, f.c.instance_name, f.c.worker_name)
            ).all()
        owners = FiringOwners()
        for r in rows:
            if r.state == FiringState.EXECUTING:
                if r.worker_name is not None:
                    known = owners.executing_since.get(r.worker_name, r.since)
                    owners.executing_since[r.worker_name] = min(known, r.since)
                continue
            owners.schedulers.add(r.instance_name)
            if r.state == FiringState.FIRED:
                owners.unpublished.add(r.instance_name)
        return owners

    def recover_scheduler(
        self, dead: str, *, seen_checkin_millis: int | None, recovered_by: str
    ) -> tuple[int, int] | None:
        """Take over a dead scheduler's work; (released, to republish) or None if another did it.

        Race settled: several survivors see the same dead peer. Each deletes its check-in row on
        the condition that it still carries the check-in time it judged stale; only one delete
        matches, and that survivor does the whole recovery in the same transaction. A peer that
        came back to life and checked in meanwhile no longer matches, and is left alone.

        Claims the dead scheduler never fired go back to WAITING. Firings it fired but may not have
        published (FIRED) move to ``recovered_by``, which publishes them again with the same fire
        instance id: if the first message did go out, the worker's start guard lets only one run.
        """
        s, f = self.tables.scheduler_state, self.tables.fired_triggers
        with self.transaction() as conn:
            if seen_checkin_millis is not None:
                gone = conn.execute(
                    delete(s).where(
                        s.c.sched_name == self.scheduler_name,
                        s.c.instance_name == dead,
                        s.c.last_checkin_time == seen_checkin_millis,
                    )
                ).rowcount
                if not gone:
                    return None
            released = self._release(conn, dead, None)
            moved = conn.execute(
                update(f)
                .where(
                    f.c.sched_name == self.scheduler_name,
                    f.c.instance_name == dead,
                    f.c.state == FiringState.FIRED,
                )
                .values(instance_name=recovered_by)
            ).rowcount
        logger.info(
            "recovered scheduler instance %s: %d claimed trigger(s) released, %d firing(s) to "
            "publish again (by %s)",
            dead,
            released,
            moved,
            recovered_by,
        )
        return released, moved

    def unpublished_firings(self, instance_name: str) -> list[Firing]:
        """Firings this instance fired (or took over) whose publication is not recorded.

        A firing whose job was deleted meanwhile cannot be published: it is removed, and what
        waited on it is released.
        """
        f = self.tables.fired_triggers
        with self.transaction() as conn:
            self._check_fence(conn)
            return self._firings_to_publish(
                conn,
                and_(f.c.instance_name == instance_name, f.c.state == FiringState.FIRED),
                instance_name,
            )

    def _firings_to_publish(self, conn: Connection, where: Any, instance_name: str) -> list[Firing]:
        f, j, t = self.tables.fired_triggers, self.tables.jobs, self.tables.triggers
        rows = conn.execute(
            select(
                f,
                j.c.task_name,
                j.c.args,
                j.c.kwargs,
                j.c.options,
                j.c.job_data,
                j.c.is_update_data,
                t.c.job_data.label("trigger_data"),
                t.c.origin_trigger_name,
                t.c.origin_trigger_group,
                t.c.origin_sched_time,
            )
            .outerjoin(j, _same_job(j, f))
            .outerjoin(
                t,
                and_(
                    t.c.sched_name == f.c.sched_name,
                    t.c.trigger_name == f.c.trigger_name,
                    t.c.trigger_group == f.c.trigger_group,
                ),
            )
            .where(f.c.sched_name == self.scheduler_name, where)
        ).all()
        firings = []
        for r in rows:
            if r.task_name is None:
                self._drop_firing(conn, r, "its job no longer exists")
                continue
            firings.append(
                Firing(
                    fire_instance_id=r.entry_id,
                    scheduler_name=self.scheduler_name,
                    task=r.task_name,
                    args=json.loads(r.args),
                    kwargs=json.loads(r.kwargs),
                    options=json.loads(r.options),
                    job_key=JobKey(r.job_name, r.job_group),
                    trigger_key=TriggerKey(r.trigger_name, r.trigger_group),
                    scheduled_millis=(
                        r.origin_sched_time if r.origin_sched_time is not None else r.sched_time
                    ),
                    fired_millis=r.fired_time,
                    fired_by=instance_name,
                    job_data=json.loads(r.job_data),
                    trigger_data=json.loads(r.trigger_data or "{}"),
                    expires_millis=r.expires_time,
                    recovering=r.recovering,
                    retry_attempt=r.retry_attempt,
                    refire_count=r.refire_count,
                    origin_trigger_key=_origin_key(r),
                    persist_job_data=r.is_update_data,
                    queue=r.queue,
                    node=_routed_node(r),
                )
            )
        return firings

    # -- the worker's side -----------------------------------------------------------------------

    def start_execution(
        self, fire_instance_id: str, worker_name: str, *, restart_from: str | None = None
    ) -> bool:
        """Mark a firing EXECUTING on ``worker_name``; False when it must not run here.

        Race settled: the same firing delivered twice (a broker redelivery, a republish after a
        scheduler died between publishing and recording, a republish of an expired message).
        Only the first conditional update from FIRED/PUBLISHED matches; every later delivery
        finds EXECUTING, or no row once complete.

        ``restart_from`` names a worker whose own start of this firing may or may not have been
        recorded (its store connection broke); it did not run the task, so a row EXECUTING on
        that worker may be taken over.

        A start of an auto-pinned trigger's firing claims the pin for ``worker_name`` in the same
        transaction (:meth:`_claim_auto_pin`).
        """
        f = self.tables.fired_triggers
        startable: ColumnElement[bool] = f.c.state.in_([FiringState.FIRED, FiringState.PUBLISHED])
        if restart_from is not None:
            startable = or_(
                startable,
                and_(f.c.state == FiringState.EXECUTING, f.c.worker_name == restart_from),
            )
        with self.transaction() as conn:
            started = conn.execute(
                update(f)
                .where(
                    f.c.sched_name == self.scheduler_name,
                    f.c.entry_id == fire_instance_id,
                    startable,
                )
                .values(
                    state=FiringState.EXECUTING, worker_name=worker_name, started_time=self._now()
                )
                .returning(
                    f.c.trigger_name,
                    f.c.trigger_group,
                    f.c.preferred_node,
                    f.c.preferred_node_auto,
                )
            ).first()
            if (
                started is not None
                and started.preferred_node_auto
                and started.preferred_node != worker_name
            ):
                self._claim_auto_pin(conn, started, worker_name)
        return started is not None

    def _claim_auto_pin(self, conn: Connection, fired: Row[Any], worker_name: str) -> None:
        """Write ``worker_name`` into the auto pin of the trigger of ``fired``: the first worker to
        start a firing claims it, and a worker starting one still claimed by another takes it
        over (steal on fire). The firing reached this worker only because its routing judged the
        seen claimant not live (a live one gets its firings on its own queue).

        Race settled: the claim against a re-pin or clear made since the firing was acquired, and
        against a claim from another firing of the same trigger. The update is a compare-and-swap
        against the pin the fired row recorded at acquisition, so whichever change came first
        wins and this one matches nothing.

        Recovery and retry firings are one-shot triggers with no pin of their own, so their start
        claims nothing, not even the original trigger's pin: the next firing of that trigger
        claims it.
        """
        t = self.tables.triggers
        key = TriggerKey(fired.trigger_name, fired.trigger_group)
        claimed = conn.execute(
            update(t)
            .where(
                self._trigger_key_clause(key),
                t.c.preferred_node_auto.is_(True),
                t.c.preferred_node.is_not_distinct_from(fired.preferred_node),
            )
            .values(preferred_node=worker_name)
        ).rowcount
        if claimed:
            logger.info(
                "trigger %s: automatic pin claimed by worker %s%s",
                key,
                worker_name,
                "" if fired.preferred_node is None else f" (from {fired.preferred_node})",
            )
        else:
            logger.debug(
                "trigger %s: worker %s did not claim its automatic pin: the pin changed since "
                "the firing was acquired",
                key,
                worker_name,
            )

    def return_to_published(self, fire_instance_id: str, *, refire: bool = False) -> bool:
        """Put an executing firing back in flight, for the same firing's next delivery.

        For a Celery retry (``self.retry()``), or with ``refire`` for a refire-immediately request
        (:class:`celery_quartz.errors.RefireJob`), which also counts ``refire_count`` up.
        """
        f = self.tables.fired_triggers
        values: dict[str, Any] = {"state": FiringState.PUBLISHED, "worker_name": None}
        if refire:
            values["refire_count"] = f.c.refire_count + 1
        with self.transaction() as conn:
            return bool(
                conn.execute(
                    update(f)
                    .where(
                        f.c.sched_name == self.scheduler_name,
                        f.c.entry_id == fire_instance_id,
                        f.c.state == FiringState.EXECUTING,
                    )
                    .values(values)
                ).rowcount
            )

    def complete_execution(
        self,
        fire_instance_id: str,
        *,
        job_data: dict[str, Any] | None = None,
        failed: bool = False,
    ) -> bool:
        """Finish a firing: remove its row and release what waited on it (Quartz's
        ``triggeredJobComplete``). ``job_data`` is written back to a job that persists its data.
        A ``failed`` firing also gets its retry, when its trigger's retry policy grants one
        (:meth:`_schedule_retry_firing`). Returns False if the firing was not executing (already
        done, or recovered).

        Race settled: completion against recovery of the same firing; the delete is conditional on
        EXECUTING, so exactly one of them acts. The retry is written in the same transaction, so a
        crash leaves either the firing in flight or the retry scheduled, never both or neither.
        """
        f, j = self.tables.fired_triggers, self.tables.jobs
        with self.transaction() as conn:
            row = conn.execute(
                delete(f)
                .where(
                    f.c.sched_name == self.scheduler_name,
                    f.c.entry_id == fire_instance_id,
                    f.c.state == FiringState.EXECUTING,
                )
                .returning(f)
            ).first()
            if row is None:
                return False
            if job_data is not None:
                job_key = JobKey(row.job_name, row.job_group)
                encoded = encode_json_object(
                    f"job {job_key}", "data", job_data, self.max_data_bytes
                )
                conn.execute(
                    update(j)
                    .where(self._job_key_clause(job_key), j.c.is_update_data.is_(True))
                    .values(job_data=encoded)
                )
            if failed:
                # Before the release: a finished one-shot trigger is removed there, and the retry
                # reads its policy and data (and keeps a non-durable job alive).
                self._schedule_retry_firing(conn, row, self._now())
            self._release_after_firing(conn, row)
        return True

    def _drop_firing(self, conn: Connection, row: Row[Any], why: str) -> bool:
        """Remove a fired row (if still there) and release what waited on it."""
        f = self.tables.fired_triggers
        gone = conn.execute(
            delete(f).where(f.c.sched_name == self.scheduler_name, f.c.entry_id == row.entry_id)
        ).rowcount
        if gone:
            self._release_after_firing(conn, row)
            logger.info(
                "firing %s of trigger %s.%s (scheduled %s) dropped: %s",
                row.entry_id,
                row.trigger_group,
                row.trigger_name,
                from_millis(row.sched_time).isoformat(),
                why,
            )
        return bool(gone)

    def _release_after_firing(self, conn: Connection, row: Row[Any]) -> None:
        """What a firing's end releases: its job's blocked triggers, and a finished trigger."""
        t = self.tables.triggers
        if row.is_nonconcurrent and row.job_name is not None:
            self._unblock_triggers(conn, JobKey(row.job_name, row.job_group))
        trigger_key = TriggerKey(row.trigger_name, row.trigger_group)
        state = conn.execute(
            select(t.c.trigger_state).where(self._trigger_key_clause(trigger_key))
        ).scalar_one_or_none()
        if state == TriggerState.COMPLETE:
            self._remove_trigger(conn, trigger_key)

    def _unblock_triggers(self, conn: Connection, job: JobKey) -> None:
        """A disallow_concurrent job's firing ended: its other triggers may fire again. One made
        late by the block gets its misfire instruction on the spot (Quartz 4.x)."""
        t = self.tables.triggers
        of_job = self._triggers_of_job_clause(job)
        now = self._now()
        late = conn.execute(
            select(t).where(
                of_job,
                t.c.trigger_state == TriggerState.BLOCKED,
                t.c.misfire_instr != MisfireInstruction.IGNORE_MISFIRE_POLICY,
                t.c.next_fire_time < now - self._misfire_threshold_ms,
            )
        ).all()
        for row in late:
            self._apply_misfire(conn, row, now, ", blocked by its job's running firing,")
        conn.execute(
            update(t)
            .where(of_job, t.c.trigger_state == TriggerState.BLOCKED)
            .values(trigger_state=TriggerState.WAITING)
        )
        conn.execute(
            update(t)
            .where(of_job, t.c.trigger_state == TriggerState.PAUSED_BLOCKED)
            .values(trigger_state=TriggerState.PAUSED)
        )

    # -- dead workers, expired messages, triggers in error ----------------------------------------

    def recover_worker(
        self,
        worker_name: str,
        *,
        seen_checkin_millis: int | None,
        defer_nonconcurrent_millis: int = 0,
    ) -> WorkerRecovery | None:
        """Resolve the executions of a dead worker; None if another scheduler got there first or
        the worker checked in again.

        * a job with ``requests_recovery`` gets a recovery firing: a one-shot trigger in the
          RECOVERING_JOBS group, due now, carrying the original trigger, occurrence and data;
          the task sees ``context.recovering``;
        * any other job's occurrence is closed as interrupted (its row removed; it is not run
          again);
        * a ``disallow_concurrent`` execution is first deferred by ``defer_nonconcurrent_millis``
          (4.x: it may still be running on a worker that is only slow), then resolved as above.

        Race settled: several schedulers see the same dead worker. Its check-in row is locked and
        must still carry the check-in time judged stale; each fired row is removed by a delete
        conditional on EXECUTING, and only the remover acts on it.
        """
        s, f = self.tables.scheduler_state, self.tables.fired_triggers
        now = self._now()
        result = WorkerRecovery(worker_name)
        state_clause = and_(s.c.sched_name == self.scheduler_name, s.c.instance_name == worker_name)
        with self.transaction() as conn:
            self._check_fence(conn)
            if seen_checkin_millis is not None:
                seen = conn.execute(
                    select(s.c.last_checkin_time).where(state_clause).with_for_update()
                ).scalar_one_or_none()
                if seen != seen_checkin_millis:
                    return None
            rows = conn.execute(
                select(f)
                .where(
                    f.c.sched_name == self.scheduler_name,
                    f.c.worker_name == worker_name,
                    f.c.state == FiringState.EXECUTING,
                )
                .with_for_update(skip_locked=True)
            ).all()
            for row in rows:
                if row.is_nonconcurrent and defer_nonconcurrent_millis:
                    if row.recovery_after is None:
                        conn.execute(
                            update(f)
                            .where(f.c.sched_name == self.scheduler_name)
                            .where(f.c.entry_id == row.entry_id)
                            .values(recovery_after=now + defer_nonconcurrent_millis)
                        )
                        logger.info(
                            "worker %s is dead; recovery of firing %s of disallow_concurrent "
                            "job %s.%s deferred %.1fs",
                            worker_name,
                            row.entry_id,
                            row.job_group,
                            row.job_name,
                            defer_nonconcurrent_millis / 1000,
                        )
                        result.deferred += 1
                        continue
                    if now < row.recovery_after:
                        result.deferred += 1
                        continue
                gone = conn.execute(
                    delete(f).where(
                        f.c.sched_name == self.scheduler_name,
                        f.c.entry_id == row.entry_id,
                        f.c.state == FiringState.EXECUTING,
                    )
                ).rowcount
                if not gone:
                    continue
                if row.requests_recovery and self._schedule_recovery_firing(conn, row, now):
                    result.recovered += 1
                else:
                    result.interrupted += 1
                    logger.info(
                        "worker %s died running firing %s of trigger %s.%s (scheduled %s); "
                        "closed as interrupted",
                        worker_name,
                        row.entry_id,
                        row.trigger_group,
                        row.trigger_name,
                        from_millis(row.sched_time).isoformat(),
                    )
                self._release_after_firing(conn, row)
            if seen_checkin_millis is not None and not result.deferred:
                conn.execute(delete(s).where(state_clause))
                result.pins_reset = self._reset_auto_pins(conn, worker_name)
        return result

    def _reset_auto_pins(self, conn: Connection, worker_name: str) -> int:
        """A dead worker's auto-claimed pins become unclaimed automatic pins, for any eligible
        worker to claim at its next start (named pins are never moved). The number reset."""
        t = self.tables.triggers
        reset = conn.execute(
            update(t)
            .where(
                t.c.sched_name == self.scheduler_name,
                t.c.preferred_node_auto.is_(True),
                t.c.preferred_node == worker_name,
            )
            .values(preferred_node=None)
        ).rowcount
        if reset:
            logger.info(
                "worker %s is dead: %d automatic pin(s) it had claimed reset to unclaimed",
                worker_name,
                reset,
            )
        return reset

    def _schedule_recovery_firing(self, conn: Connection, row: Row[Any], now: int) -> bool:
        """A one-shot trigger that runs the interrupted occurrence again, as soon as possible."""
        source, origin = self._firing_source(conn, row)
        key = TriggerKey(f"recover_{row.entry_id}", RECOVERING_JOBS_GROUP)
        # A recovered retry firing is still that retry: it keeps its attempt number.
        if not self._store_one_shot_firing(
            conn, row, source, origin, key, start=now, recovering=True
        ):
            return False
        logger.info(
            "worker %s died running firing %s of trigger %s.%s (scheduled %s); recovery firing "
            "%s scheduled",
            row.worker_name,
            row.entry_id,
            origin.group,
            origin.name,
            from_millis(origin.sched_time).isoformat(),
            key,
        )
        return True

    def _schedule_retry_firing(self, conn: Connection, row: Row[Any], now: int) -> None:
        """Apply the retry policy to the failed firing ``row``: a one-shot trigger that runs the
        same occurrence again after the policy's delay, or nothing (one decision, logged).

        The policy and the rules are the original trigger's: no retry at, or within a second of,
        its next occurrence (the occurrence wins), nor after its end. An original that has gone
        since (a one-shot that completed) is stood for by the failed retry firing's own trigger,
        which carries a copy of its policy and end.
        """
        source, origin = self._firing_source(conn, row)
        if source is None:
            return  # the trigger was removed while its firing ran: nothing to retry for
        original = source
        if (origin.name, origin.group) != (source.trigger_name, source.trigger_group):
            original = self._trigger_row(conn, TriggerKey(origin.name, origin.group)) or source
        policy = RetryPolicy.parse(original.retry_policy)
        if not policy:
            return
        attempt = row.retry_attempt + 1
        occurrence = (
            f"occurrence {origin.group}.{origin.name} "
            f"(scheduled {from_millis(origin.sched_time).isoformat()})"
        )
        delay = policy.delay_for(attempt)
        if delay is None:
            logger.info(
                "retry: %s failed after %d retr%s, all its policy allows; the trigger keeps "
                "its schedule",
                occurrence,
                row.retry_attempt,
                "y" if row.retry_attempt == 1 else "ies",
            )
            return
        at = now + delay // timedelta(milliseconds=1)
        if original.next_fire_time is not None and at >= original.next_fire_time - 1000:
            why = f"the next occurrence, {from_millis(original.next_fire_time).isoformat()}, wins"
        elif original.end_time is not None and at > original.end_time:
            why = f"it is after the trigger's end, {from_millis(original.end_time).isoformat()}"
        else:
            key = TriggerKey(f"retry_{row.entry_id}", RETRYING_JOBS_GROUP)
            if self._store_one_shot_firing(
                conn,
                row,
                source,
                origin,
                key,
                start=at,
                retry_attempt=attempt,
                retry_policy=original.retry_policy,
                end=original.end_time,
            ):
                logger.info(
                    "retry: %s failed; retry %d of %d scheduled at %s (%s)",
                    occurrence,
                    attempt,
                    policy.max_attempts,
                    from_millis(at).isoformat(),
                    key,
                )
            return
        logger.info(
            "retry: %s failed; retry %d at %s dropped: %s",
            occurrence,
            attempt,
            from_millis(at).isoformat(),
            why,
        )

    def _firing_source(self, conn: Connection, row: Row[Any]) -> tuple[Row[Any] | None, _Origin]:
        """The trigger row of the fired ``row`` (None if removed), and the occurrence the firing
        stands for: for a recovery or retry firing, the first occurrence, however many recoveries
        and retries ago."""
        source = self._trigger_row(conn, TriggerKey(row.trigger_name, row.trigger_group))
        if source is not None and source.origin_trigger_name is not None:
            return source, _Origin(
                source.origin_trigger_name,
                source.origin_trigger_group,
                source.origin_fire_time,
                source.origin_sched_time,
            )
        return source, _Origin(row.trigger_name, row.trigger_group, row.fired_time, row.sched_time)

    def _trigger_row(self, conn: Connection, key: TriggerKey) -> Row[Any] | None:
        return conn.execute(
            select(self.tables.triggers).where(self._trigger_key_clause(key))
        ).first()

    def _store_one_shot_firing(
        self,
        conn: Connection,
        row: Row[Any],
        source: Row[Any] | None,
        origin: _Origin,
        key: TriggerKey,
        *,
        start: int,
        recovering: bool = False,
        retry_attempt: int | None = None,
        retry_policy: str | None = None,
        end: int | None = None,
    ) -> bool:
        """Store the one-shot trigger ``key`` that runs ``origin`` again at ``start`` (a recovery
        or retry firing of the fired ``row``): the same job, priority, execution group and
        trigger data, the source's retry policy unless given, and the fired row's retry attempt
        unless given. It ignores misfires: however late its schedulers come back, it runs.
        False when the job is gone."""
        from celery_quartz.triggers.simple import SimpleTrigger

        job_key = JobKey(row.job_name, row.job_group)
        if (
            conn.execute(
                select(self.tables.jobs.c.job_name).where(self._job_key_clause(job_key))
            ).first()
            is None
        ):
            what = "recovery" if recovering else "retry"
            logger.info("firing %s gets no %s firing: job %s is gone", row.entry_id, what, job_key)
            return False
        if retry_policy is None and source is not None:
            retry_policy = source.retry_policy
        trigger = SimpleTrigger(
            key=key,
            job_key=job_key,
            start_at=from_millis(start),
            end_at=_datetime_or_none(end),
            repeat_count=0,
            repeat_interval=timedelta(0),
            priority=row.priority,
            misfire_instruction=MisfireInstruction.IGNORE_MISFIRE_POLICY,
            data=json.loads(source.job_data) if source is not None else {},
            retry_policy=RetryPolicy.parse(retry_policy),
        )
        self._store_trigger(conn, trigger, True, from_millis(start))
        conn.execute(
            update(self.tables.triggers)
            .where(self._trigger_key_clause(key))
            .values(
                origin_trigger_name=origin.name,
                origin_trigger_group=origin.group,
                origin_fire_time=origin.fire_time,
                origin_sched_time=origin.sched_time,
                recovering=recovering,
                retry_attempt=row.retry_attempt if retry_attempt is None else retry_attempt,
                execution_group=row.execution_group,
            )
        )
        return True

    def resolve_expired_firings(
        self,
        instance_name: str,
        *,
        grace: float,
        expires_after: float,
        max_count: int,
        router: Router | None = None,
    ) -> list[Firing]:
        """Resolve firings whose message expired before any worker started it (see
        :mod:`celery_quartz.misfire`); returns those to publish again (now owned by
        ``instance_name``, with a new expiry ``expires_after`` seconds from now). One that was
        sent to its pinned worker's own queue goes to its group's queue this time: that worker
        did not start it in time.

        ``grace`` (seconds past the expiry) lets a worker that took the message just in time mark
        it EXECUTING first. Race settled: two schedulers resolving the same firing, or a worker
        starting it meanwhile; each row is locked and its update or delete is conditional on its
        state, so exactly one outcome holds.
        """
        from celery_quartz.misfire import runs_missed_occurrence

        f, t = self.tables.fired_triggers, self.tables.triggers
        now = self._now()
        cutoff = now - int(grace * 1000)
        in_flight = [FiringState.FIRED, FiringState.PUBLISHED]
        republish: list[str] = []
        with self.transaction() as conn:
            self._check_fence(conn)
            rows = conn.execute(
                select(f)
                .where(
                    f.c.sched_name == self.scheduler_name,
                    f.c.state.in_(in_flight),
                    f.c.expires_time < cutoff,
                )
                .order_by(f.c.expires_time)
                .limit(max_count)
                .with_for_update(skip_locked=True)
            ).all()
            for row in rows:
                trigger_row = conn.execute(
                    select(t).where(
                        self._trigger_key_clause(TriggerKey(row.trigger_name, row.trigger_group))
                    )
                ).first()
                trigger = None if trigger_row is None else self._trigger_from_row(trigger_row)
                late_by = (now - row.sched_time) / 1000
                if (
                    row.expired_count == 0
                    and trigger is not None
                    and (row.recovering or runs_missed_occurrence(trigger))
                ):
                    conn.execute(
                        update(f)
                        .where(f.c.sched_name == self.scheduler_name)
                        .where(f.c.entry_id == row.entry_id, f.c.state.in_(in_flight))
                        .values(
                            state=FiringState.FIRED,
                            instance_name=instance_name,
                            fired_time=now,
                            expires_time=now + int(expires_after * 1000),
                            expired_count=f.c.expired_count + 1,
                            queue=(
                                (router or _UNLIMITED).group_queue(row.execution_group)
                                if _routed_node(row) is not None
                                else row.queue
                            ),
                        )
                    )
                    republish.append(row.entry_id)
                    logger.info(
                        "misfire: firing %s of trigger %s.%s was not started by any worker "
                        "(%.1fs after its fire time); its instruction runs it now: published again",
                        row.entry_id,
                        row.trigger_group,
                        row.trigger_name,
                        late_by,
                    )
                else:
                    why = (
                        "it expired again after being published again"
                        if row.expired_count
                        else "no worker started it and its misfire instruction skips a missed "
                        "occurrence"
                    )
                    self._drop_firing(conn, row, f"misfire: {why} ({late_by:.1f}s late)")
            firings = (
                self._firings_to_publish(conn, f.c.entry_id.in_(republish), instance_name)
                if republish
                else []
            )
        return firings

    def set_trigger_error(self, acquired: AcquiredFiring, reason: str) -> None:
        """Put a claimed trigger in ERROR (Quartz: its job cannot be run) and drop the claim."""
        t, f = self.tables.triggers, self.tables.fired_triggers
        with self.transaction() as conn:
            conn.execute(
                delete(f).where(
                    f.c.sched_name == self.scheduler_name,
                    f.c.entry_id == acquired.fire_instance_id,
                )
            )
            conn.execute(
                update(t)
                .where(
                    self._trigger_key_clause(acquired.trigger.key),
                    t.c.trigger_state == TriggerState.ACQUIRED,
                )
                .values(trigger_state=TriggerState.ERROR)
            )
        logger.error("trigger %s put in ERROR: %s", acquired.trigger.key, reason)

    def reset_trigger_from_error_state(self, keys: Sequence[TriggerKey]) -> int:
        """Return triggers in ERROR to their schedule (WAITING, or PAUSED when their group is
        paused, or BLOCKED while their disallow_concurrent job runs). The number reset."""
        t, j = self.tables.triggers, self.tables.jobs
        reset = 0
        with self.transaction() as conn:
            for key in keys:
                row = conn.execute(
                    select(t.c.trigger_state, j.c.is_nonconcurrent, t.c.job_name, t.c.job_group)
                    .join(j, _same_job(j, t))
                    .where(self._trigger_key_clause(key))
                ).first()
                if row is None or row.trigger_state != TriggerState.ERROR:
                    continue
                job_key = JobKey.stored(row.job_name, row.job_group)
                state = _initial_state(
                    key,
                    self._paused_groups(conn),
                    blocked=bool(row.is_nonconcurrent and self._jobs_in_flight(conn, [job_key])),
                )
                reset += conn.execute(
                    update(t)
                    .where(self._trigger_key_clause(key), t.c.trigger_state == TriggerState.ERROR)
                    .values(trigger_state=state)
                ).rowcount
        return reset

    def in_flight(self, instance_name: str | None = None) -> int:
        """Firings published and not yet finished (of one scheduler instance, or of all)."""
        f = self.tables.fired_triggers
        q = (
            select(func.count())
            .select_from(f)
            .where(f.c.sched_name == self.scheduler_name, f.c.state != FiringState.ACQUIRED)
        )
        if instance_name is not None:
            q = q.where(f.c.instance_name == instance_name)
        with self.transaction() as conn:
            return int(conn.execute(q).scalar_one())

    def firing_states(self) -> dict[str, str]:
        """Every fired row of this scheduler: fire instance id → state (diagnostics and tests)."""
        f = self.tables.fired_triggers
        with self.transaction() as conn:
            rows = conn.execute(
                select(f.c.entry_id, f.c.state).where(f.c.sched_name == self.scheduler_name)
            ).all()
        return {r.entry_id: r.state for r in rows}


@dataclass(frozen=True)
class _Origin:
    """The occurrence a recovery or retry firing stands for: its trigger and fire times (ms)."""

    name: str
    group: str
    fire_time: int
    sched_time: int


@dataclass
class WorkerRecovery:
    """What :meth:`SqlStore.recover_worker` did with a dead worker's executions."""

    worker_name: str
    recovered: int = 0
    interrupted: int = 0
    deferred: int = 0
    #: Automatic pins it had claimed, reset to unclaimed (only once it is confirmed dead).
    pins_reset: int = 0


def _recordset(alias: str, columns: Sequence[ColumnClause[Any] | Column[Any]]) -> Any:
    """``json_to_recordset(CAST(:alias AS JSON)) AS alias(a TYPE, …)``: a batch's rows as one
    JSON parameter named after the alias, a list of objects keyed by column name
    (:func:`_json_rows`).

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


#: The columns of a fired row that are its own in a batch (the rest the batch's rows share).
_FIRED_ROW_COLUMNS = (
    "entry_id",
    "trigger_name",
    "trigger_group",
    "sched_time",
    "priority",
    "job_name",
    "job_group",
    "is_nonconcurrent",
    "requests_recovery",
    "execution_group",
    "queue",
    "recovering",
    "retry_attempt",
    "preferred_node",
    "preferred_node_auto",
)

#: A batch's rows as the JSON :func:`_recordset` reads (compact: it is sent once per batch).
_json_rows = json.JSONEncoder(separators=(",", ":")).encode


#: The paused-groups row that pauses every group (Quartz's marker).
_ALL_GROUPS_PAUSED = "_$_ALL_GROUPS_PAUSED_$_"


def _initial_state(key: TriggerKey, paused_groups: set[str], *, blocked: bool) -> str:
    """The state a trigger enters when stored or reset: paused with its group (or with every
    group), blocked while its disallow_concurrent job has a firing in flight."""
    if key.group in paused_groups or _ALL_GROUPS_PAUSED in paused_groups:
        return TriggerState.PAUSED_BLOCKED if blocked else TriggerState.PAUSED
    return TriggerState.BLOCKED if blocked else TriggerState.WAITING


def _same_job(jobs: Any, other: Any) -> Any:
    """The join of the jobs table to ``other`` (triggers or fired rows) on the job's key."""
    return and_(
        jobs.c.sched_name == other.c.sched_name,
        jobs.c.job_name == other.c.job_name,
        jobs.c.job_group == other.c.job_group,
    )


def _pin_columns(pin: PreferredNode) -> dict[str, Any]:
    """A pin as its two columns, named alike on triggers and fired rows."""
    node, automatic = pin.to_columns()
    return {"preferred_node": node, "preferred_node_auto": automatic}


def _origin_key(row: Row[Any]) -> TriggerKey | None:
    if row.origin_trigger_name is None:
        return None
    return TriggerKey(row.origin_trigger_name, row.origin_trigger_group)


def _routed_node(row: Row[Any]) -> str | None:
    """The worker a fired row was routed to: its pin, when the row's queue is that worker's own."""
    node = row.preferred_node
    return node if node is not None and row.queue == direct_queue(node) else None


def _millis_or_none(value: datetime | None) -> int | None:
    return None if value is None else to_millis(value)


def _datetime_or_none(value: int | None) -> datetime | None:
    return None if value is None else from_millis(value)


@functools.lru_cache(maxsize=16)
def _row_class(columns: tuple[str, ...]) -> Any:
    return namedtuple("_ClaimedRow", columns, rename=True)


def _tuple_rows(result: Result[Any]) -> list[Any]:
    """A result's rows as named tuples, read by attribute like SQLAlchemy rows.

    For the claim's rows, read some forty times each on the way to a message: a named tuple's
    attribute is an index into a tuple, a SQLAlchemy ``Row``'s a lookup by key (several times
    slower).
    """
    make = _row_class(tuple(result.keys()))._make
    return [make(row) for row in result]


def in_acquisition_order(rows: Sequence[Row[Any]]) -> list[Row[Any]]:
    """Trigger rows by next fire time, then higher priority first: the order the batch rule reads.

    The acquisition's ORDER BY alone does not give it on PostgreSQL: rows are sorted before they
    are locked, and a row another scheduler fired (and committed) meanwhile comes back with its
    new, later fire time in its old place. Taken as the batch's first trigger, that one would set
    the batch's fire time a whole repeat interval late, and every trigger before it with it.
    """
    return sorted(rows, key=lambda row: (row.next_fire_time, -row.priority))


def _json_value(text: str) -> Any:
    """``json.loads``, skipping the parser for the empty object and list that most jobs' args,
    kwargs, data and options are (read once per firing)."""
    if text == "{}":
        return {}
    if text == "[]":
        return []
    return json.loads(text)
