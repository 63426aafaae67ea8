"""The SQL store's plumbing: engine, tables, transactions, lock rows, the fence, and the
conversions between rows and the domain's objects. Every role of the store builds on it."""

from __future__ import annotations

import functools
import json
import logging
from collections import namedtuple
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    Row,
    and_,
    insert,
    select,
    tuple_,
)
from sqlalchemy.exc import DBAPIError, IntegrityError

from celery_quartz.affinity import PreferredNode
from celery_quartz.clock import Clock, SystemClock, from_millis, to_millis
from celery_quartz.errors import (
    FencedError,
    InvalidTriggerError,
)
from celery_quartz.firing import JobRecord
from celery_quartz.job import DEFAULT_MAX_DATA_BYTES, Job, encode_json, encode_json_object
from celery_quartz.keys import JobKey, TriggerKey
from celery_quartz.liveness import DEFAULT_CHECKIN_MISFIRE_THRESHOLD
from celery_quartz.misfire import DEFAULT_MISFIRE_THRESHOLD
from celery_quartz.retry import RetryPolicy
from celery_quartz.routing import (
    LiveWorker,
    Router,
)
from celery_quartz.store.engine import create_store_engine
from celery_quartz.store.records import (
    Fence,
)
from celery_quartz.store.schema import (
    DEFAULT_TABLE_PREFIX,
    FiringState,
    Tables,
    build_tables,
)
from celery_quartz.store.sql._prepared import CompiledStatement
from celery_quartz.store.sql._rows import (
    datetime_or_none,
    json_value,
    millis_or_none,
    pin_columns,
)
from celery_quartz.triggers.base import (
    TRIGGER_KINDS,
    Trigger,
)

logger = logging.getLogger(__name__)

#: Name of the ``locks`` row that carries the leadership epoch.
LEADER_LOCK = "LEADER"

#: Key of a pooled connection's ``info``: the names of the statements prepared on it (the dict
#: lives as long as the driver's connection, and a new connection starts with an empty one).
_PREPARED = "celery_quartz_prepared"
#: SQLSTATE ``invalid_sql_statement_name``: ``EXECUTE`` of a statement the session does not have.
_UNDEFINED_PREPARED_STATEMENT = "26000"


class SqlBase:
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
        pool_size: int | None = None,
        idle_transaction_timeout: float | None = None,
        misfire_threshold: float = DEFAULT_MISFIRE_THRESHOLD,
        checkin_misfire_threshold: float = DEFAULT_CHECKIN_MISFIRE_THRESHOLD,
    ) -> None:
        """Open the store of ``scheduler_name`` on ``url`` (or on an existing ``engine``).

        Applications open it with :func:`celery_quartz.store.open_store`, which reads every
        argument from the ``quartz_*`` settings. ``misfire_threshold`` (seconds) is how late a
        trigger is before its misfire instruction applies, and how long a firing's message lives
        unstarted; every role judges lateness by it. ``checkin_misfire_threshold`` (seconds of
        silence beyond a process's check-in interval) is when the read side reports a node as
        dead, by the rule failure detection uses. ``pre_ping`` tests a pooled connection
        before each transaction, so a database restart is invisible to callers. The scheduling
        loop turns it off: it costs a round trip per transaction, and the loop retries a failed
        step itself. ``pool_size`` is how many connections the pool keeps open (SQLAlchemy's
        default, 5, unless given): a process whose threads use the store at once (a threads-pool
        worker) keeps one each rather than opening and closing the rest every time.
        ``idle_transaction_timeout`` (seconds, PostgreSQL) ends a session left idle inside a
        transaction that long (:func:`~celery_quartz.store.engine.create_store_engine`)."""
        if engine is None:
            if url is None:
                raise ValueError("SqlStore needs a url or an engine")
            options: dict[str, Any] = {"pool_pre_ping": pre_ping}
            if pool_size is not None:
                options["pool_size"] = pool_size
            engine = create_store_engine(
                url, idle_transaction_timeout=idle_transaction_timeout, **options
            )
        size = getattr(engine.pool, "size", None)  # a QueuePool's; SQLite's pools keep none
        self._engine_options: dict[str, Any] = {"pool_pre_ping": pre_ping}
        if callable(size):
            self._engine_options["pool_size"] = size()
        self.engine = engine
        self.scheduler_name = scheduler_name
        self.tables: Tables = build_tables(table_prefix)
        self.clock = clock or SystemClock()
        self.max_data_bytes = max_data_bytes
        #: The misfire threshold in milliseconds (see ``misfire_threshold`` above).
        self.misfire_threshold_ms = int(misfire_threshold * 1000)
        self.checkin_misfire_threshold_ms = int(checkin_misfire_threshold * 1000)
        #: Whether :meth:`_execute_compiled` prepares statements on the server (psycopg2).
        self._prepare_statements = True
        #: A non-clustered leader's fencing epoch: its writes check it
        #: (:mod:`celery_quartz.store.sql.cluster`).
        self.fence: Fence | None = None
        # Trigger kinds register themselves on import.
        import celery_quartz.triggers  # noqa: F401

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
        if "_autocommit" in self.__dict__:
            self._autocommit.dispose()

    def _compiled(self, statement: Any) -> CompiledStatement:
        """``statement`` compiled once for :meth:`_execute_compiled` (by a ``cached_property``
        of the caller): the driver's SQL, its fixed parameters and, on psycopg2, the statement
        to prepare it on the server."""
        return CompiledStatement.of(statement, self.engine.dialect)

    def _execute_compiled(
        self, conn: Connection, compiled: CompiledStatement, **params: Any
    ) -> Any:
        """Run a statement compiled by :meth:`_compiled` with ``params``: the driver gets the SQL
        as is, with none of the per-call work of building, caching and binding a Core statement
        (for the worker's one-statement start and completion, run once per execution).

        On psycopg2 the statement is prepared on the server once per connection (``PREPARE``)
        and then run by name (``EXECUTE``), so PostgreSQL parses and plans it once rather than
        on every execution; psycopg 3 prepares a statement it runs often by itself. A server
        that does not keep the prepared statement between two of its connection's statements
        (a pooler such as PgBouncer in transaction mode hands them to different sessions) makes
        this store run its statements unprepared from then on, with a warning."""
        return self._run_prepared(
            lambda sql, values: conn.exec_driver_sql(sql, values),
            conn.connection.info,
            compiled,
            {**compiled.fixed, **params},
        )

    def _run_alone(self, compiled: CompiledStatement, **params: Any) -> Any | None:
        """The first row (None without one) of a statement compiled by :meth:`_compiled` that
        commits on its own: PostgreSQL's one-statement start and completions, run once per
        execution by the worker.

        It runs on a pooled connection of :attr:`_autocommit`'s driver, prepared as by
        :meth:`_execute_compiled`, without SQLAlchemy's per-call connection and result
        handling, which added half again to the worker's CPU per statement. The row's columns
        are attributes, as on a SQLAlchemy row. A driver error is raised as SQLAlchemy's
        :class:`~sqlalchemy.exc.DBAPIError`, and a connection it finds broken invalidates the
        whole pool, as through a Connection: after a database restart one call fails, and the
        pool opens new connections in place of all it held. While anyone listens to the
        engine's statements (``before_cursor_execute``/``after_cursor_execute``: tracing,
        tests), it runs through a Connection instead, so that they see it."""
        engine = self._autocommit
        events = engine.dispatch
        if events.before_cursor_execute or events.after_cursor_execute:
            with engine.connect() as conn:
                return self._execute_compiled(conn, compiled, **params).first()
        values = {**compiled.fixed, **params}
        dbapi_error = engine.dialect.loaded_dbapi.Error
        connection = cursor = None
        try:
            connection = engine.raw_connection()
            cursor = connection.cursor()
            self._run_prepared(cursor.execute, connection.info, compiled, values)
            row = cursor.fetchone()
            return None if row is None else _row_type(cursor.description)(*row)
        except dbapi_error as exc:
            broken = connection is not None and engine.dialect.is_disconnect(
                exc, connection.dbapi_connection, cursor
            )
            if broken:
                assert connection is not None
                # As SQLAlchemy does on a disconnect through a Connection: every connection
                # the pool opened before this one is stale too (a restart, a failover), so the
                # pool replaces each at its next checkout instead of letting it fail a call.
                engine.pool._invalidate(connection, exc)
            raise DBAPIError.instance(
                compiled.sql,
                values,
                exc,
                dbapi_error,
                connection_invalidated=broken,
                dialect=engine.dialect,
            ) from exc
        finally:
            if connection is not None:
                if cursor is not None and connection.is_valid:
                    cursor.close()
                connection.close()

    def _run_prepared(
        self,
        run: Callable[[str, dict[str, Any] | None], Any],
        info: dict[Any, Any],
        compiled: CompiledStatement,
        values: dict[str, Any],
    ) -> Any:
        """``run(sql, values)`` of ``compiled``: by name once prepared on the connection whose
        ``info`` this is, else as text (see :meth:`_execute_compiled`)."""
        statement = compiled.prepared
        if statement is None or not self._prepare_statements:
            return run(compiled.sql, values)
        prepared: set[str] = info.setdefault(_PREPARED, set())
        if statement.name not in prepared:
            run(statement.prepare, None)
            prepared.add(statement.name)
        try:
            return run(statement.execute, values)
        except Exception as exc:  # the driver's error, or SQLAlchemy's wrapping it
            if getattr(getattr(exc, "orig", exc), "pgcode", None) != _UNDEFINED_PREPARED_STATEMENT:
                raise
        prepared.discard(statement.name)
        self._prepare_statements = False
        logger.warning(
            "store %s: a statement prepared on this connection was gone at its next use (a "
            "connection pooler between the workers and PostgreSQL?); running the store's "
            "statements unprepared from now on",
            self.engine.url.render_as_string(hide_password=True),
        )
        return run(compiled.sql, values)

    @functools.cached_property
    def _autocommit(self) -> Engine:
        """A second engine on the same database, for a single statement that settles its race
        alone: its connections commit each statement by themselves, set once when they connect
        (switching a pooled connection's isolation level back and forth costs a round trip each
        time). Opened at first use; only PostgreSQL's fast paths use it."""
        return create_store_engine(
            self.engine.url.render_as_string(hide_password=False),
            isolation_level="AUTOCOMMIT",
            **self._engine_options,
        )

    def _now(self) -> int:
        return to_millis(self.clock.now())

    def _scoped(self, table: Any) -> Any:
        """The rows of ``table`` that belong to this scheduler name (every query's first
        condition: several clusters may share the tables)."""
        return table.c.sched_name == self.scheduler_name

    def _leader_key(self) -> Any:
        locks = self.tables.locks
        return and_(self._scoped(locks), locks.c.lock_name == LEADER_LOCK)

    def _check_fence(self, conn: Connection, fence: Fence | None = None) -> None:
        """Refuse this transaction (raise :class:`FencedError`) when the fence (this store's,
        unless given) is stale, that is another leader has been elected since; nothing at all
        without a fence.

        One statement: the epoch row read ``FOR SHARE`` (no lock on SQLite, whose transactions
        are already serial). Race settled: the new leader's increment of the epoch waits for
        every transaction holding the row ``FOR SHARE``; once it commits, every later
        transaction of the old leader sees the new epoch and is refused.
        """
        fence = fence or self.fence
        if fence is None:
            return
        locks = self.tables.locks
        query = select(locks.c.epoch).where(self._leader_key())
        if self.dialect != "sqlite":
            query = query.with_for_update(read=True)
        current = conn.execute(query).scalar()
        if current != fence.epoch:
            raise FencedError(
                f"scheduler {self.scheduler_name!r}: instance {fence.instance_name} was elected "
                f"with epoch {fence.epoch}, but the epoch is now {current}: another leader has "
                "been elected since; this write is refused"
            )

    def _lock(self, conn: Connection, name: str) -> None:
        """Hold the named lock row until the transaction ends (SQLite: the write lock is)."""
        if self.dialect == "sqlite":
            return
        locks = self.tables.locks
        key = and_(self._scoped(locks), locks.c.lock_name == name)
        if conn.execute(select(locks.c.lock_name).where(key).with_for_update()).first() is None:
            try:
                with conn.begin_nested():
                    conn.execute(
                        insert(locks).values(sched_name=self.scheduler_name, lock_name=name)
                    )
            except IntegrityError:
                pass  # another process created it first; the select below waits for its lock
            conn.execute(select(locks.c.lock_name).where(key).with_for_update())

    def _trigger_key_clause(self, key: TriggerKey) -> Any:
        t = self.tables.triggers
        return and_(
            self._scoped(t),
            t.c.trigger_name == key.name,
            t.c.trigger_group == key.group,
        )

    def _job_key_clause(self, key: JobKey) -> Any:
        j = self.tables.jobs
        return and_(
            self._scoped(j),
            j.c.job_name == key.name,
            j.c.job_group == key.group,
        )

    def _triggers_of_job_clause(self, key: JobKey) -> Any:
        t = self.tables.triggers
        return and_(
            self._scoped(t),
            t.c.job_name == key.name,
            t.c.job_group == key.group,
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
            args=json_value(row.args),
            kwargs=json_value(row.kwargs),
            data=json_value(row.jobs_job_data),
            options=json_value(row.options),
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
            "next_fire_time": millis_or_none(trigger.next_fire_time),
            "prev_fire_time": millis_or_none(trigger.previous_fire_time),
            "priority": trigger.priority,
            "trigger_state": state,
            "trigger_type": trigger.kind,
            "start_time": to_millis(trigger.start_at),
            "end_time": millis_or_none(trigger.end_at),
            "calendar_name": trigger.calendar_name,
            "misfire_instr": int(trigger.misfire_instruction),
            "job_data": encode_json_object(owner, "data", trigger.data, self.max_data_bytes),
            "detail": encode_json_object(owner, "detail", trigger.detail(), self.max_data_bytes),
            "times_triggered": trigger.times_triggered,
            "execution_group": trigger.execution_group,
            **pin_columns(trigger.preferred_node),
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
            end_at=datetime_or_none(row.end_time),
            misfire_instruction=row.misfire_instr,
            data=json_value(getattr(row, data_column)),
            calendar_name=row.calendar_name,
            next_fire_time=datetime_or_none(row.next_fire_time),
            previous_fire_time=datetime_or_none(row.prev_fire_time),
            times_triggered=row.times_triggered,
            execution_group=row.execution_group,
            preferred_node=PreferredNode.from_columns(row.preferred_node, row.preferred_node_auto),
            retry_policy=RetryPolicy.parse(row.retry_policy),
        )

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
                    self._scoped(table),
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
        return set(conn.execute(select(p.c.trigger_group).where(self._scoped(p))).scalars())

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
            select(c.c.calendar).where(self._scoped(c), c.c.calendar_name == name)
        ).first()
        if row is None:
            raise InvalidTriggerError(f"trigger {owner}: calendar {name!r} is not stored")
        return calendar_from_dict(json.loads(row.calendar))

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
                self._scoped(c), c.c.calendar_name.in_(wanted)
            )
        ).all()
        return {r.calendar_name: calendar_from_dict(json.loads(r.calendar)) for r in rows}

    def _trigger_row(self, conn: Connection, key: TriggerKey) -> Row[Any] | None:
        return conn.execute(
            select(self.tables.triggers).where(self._trigger_key_clause(key))
        ).first()

    def _live_workers(self, conn: Connection, router: Router, now: int) -> dict[str, LiveWorker]:
        s = self.tables.scheduler_state
        rows = conn.execute(
            select(
                s.c.instance_name,
                s.c.last_checkin_time.label("last_checkin_millis"),
                s.c.checkin_interval.label("checkin_interval_millis"),
                s.c.queues,
                s.c.concurrency,
            ).where(self._scoped(s), s.c.kind == "worker")
        ).all()
        return router.live_workers(list(rows), now)


@functools.lru_cache(maxsize=64)
def _named_row(columns: tuple[str, ...]) -> Any:
    return namedtuple("Row", columns, rename=True)


def _row_type(description: Sequence[Any]) -> Any:
    """A tuple type whose fields are the columns of a driver cursor's ``description``."""
    return _named_row(tuple(column[0] for column in description))
