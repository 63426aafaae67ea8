"""What every role of the SQL store builds on: the engine, the tables, the scheduler name's
scope, transactions, lock rows and the fence, and statements compiled once and run alone."""

from __future__ import annotations

import functools
import logging
from collections import namedtuple
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, and_, insert, select
from sqlalchemy.exc import DBAPIError, IntegrityError

from celery_quartz.clock import Clock, SystemClock, to_millis
from celery_quartz.errors import FencedError
from celery_quartz.keys import JobKey, TriggerKey
from celery_quartz.retry import RetryPolicy
from celery_quartz.store.engine import create_store_engine
from celery_quartz.store.records import Fence
from celery_quartz.store.schema import Tables, build_tables
from celery_quartz.store.sql._prepared import CompiledStatement

logger = logging.getLogger(__name__)

#: Name of the ``locks`` row that carries the leadership epoch.
LEADER_LOCK = "LEADER"

#: Key of a pooled connection's ``info``: the names of the statements prepared on it (the dict
#: lives as long as the driver's connection, and a new connection starts with an empty one).
_PREPARED = "celery_quartz_prepared"
#: SQLSTATE ``invalid_sql_statement_name``: ``EXECUTE`` of a statement the session does not have.
_UNDEFINED_PREPARED_STATEMENT = "26000"


class SqlContext:
    """The tables of one scheduler name under one prefix, on one engine: what each role object
    of :class:`~celery_quartz.store.sql.SqlStore` holds and shares."""

    def __init__(
        self,
        engine: Engine,
        *,
        scheduler_name: str,
        table_prefix: str,
        clock: Clock | None,
        max_data_bytes: int,
        misfire_threshold: float,
        checkin_misfire_threshold: float,
        pre_ping: bool,
        record_history: bool = True,
        default_retry_policy: RetryPolicy | None = None,
        pause_when_retries_exhausted: bool = False,
    ) -> None:
        """The arguments are :class:`~celery_quartz.store.sql.SqlStore`'s, the engine opened."""
        size = getattr(engine.pool, "size", None)  # a QueuePool's; SQLite's pools keep none
        self._engine_options: dict[str, Any] = {"pool_pre_ping": pre_ping}
        if callable(size):
            self._engine_options["pool_size"] = size()
        self.engine = engine
        self.scheduler_name = scheduler_name
        self.tables: Tables = build_tables(table_prefix)
        self.clock = clock or SystemClock()
        self.max_data_bytes = max_data_bytes
        #: The misfire threshold in milliseconds: every role judges lateness by it.
        self.misfire_threshold_ms = int(misfire_threshold * 1000)
        self.checkin_misfire_threshold_ms = int(checkin_misfire_threshold * 1000)
        #: Whether :meth:`execute_compiled` prepares statements on the server (psycopg2).
        self._prepare_statements = True
        #: A non-clustered leader's fencing epoch: every fenced write checks it
        #: (:meth:`check_fence`).
        self.fence: Fence | None = None
        #: Whether the run history is written (``quartz_history_retention`` above 0): every
        #: end of a firing and every non-run decision records a history row, and the runs
        #: their run status (:mod:`celery_quartz.store.sql._history_rows`).
        self.record_history = record_history
        #: The retry policy of triggers and jobs with none of their own
        #: (``quartz_default_retry_policy``), and whether a trigger whose retries ran out is
        #: paused when it does not say (``quartz_pause_when_retries_exhausted``).
        self.default_retry_policy = default_retry_policy
        self.pause_when_retries_exhausted = pause_when_retries_exhausted
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
        if "autocommit" in self.__dict__:  # opened at first use
            self.autocommit.dispose()

    def compiled(self, statement: Any) -> CompiledStatement:
        """``statement`` compiled once for :meth:`execute_compiled` (by a ``cached_property``
        of the caller): the driver's SQL, its fixed parameters and, on psycopg2, the statement
        to prepare it on the server."""
        return CompiledStatement.of(statement, self.engine.dialect)

    def execute_compiled(self, conn: Connection, compiled: CompiledStatement, **params: Any) -> Any:
        """Run a statement compiled by :meth:`compiled` with ``params``: the driver gets the SQL
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

    def run_alone(self, compiled: CompiledStatement, **params: Any) -> Any | None:
        """The first row (None without one) of a statement compiled by :meth:`compiled` that
        commits on its own: PostgreSQL's one-statement start and completions, run once per
        execution by the worker.

        It runs on a pooled connection of :attr:`autocommit`'s driver, prepared as by
        :meth:`execute_compiled`, without SQLAlchemy's per-call connection and result
        handling, which added half again to the worker's CPU per statement. The row's columns
        are attributes, as on a SQLAlchemy row. A driver error is raised as SQLAlchemy's
        :class:`~sqlalchemy.exc.DBAPIError`, and a connection it finds broken invalidates the
        whole pool, as through a Connection: after a database restart one call fails, and the
        pool opens new connections in place of all it held. While anyone listens to the
        engine's statements (``before_cursor_execute``/``after_cursor_execute``: tracing,
        tests), it runs through a Connection instead, so that they see it."""
        engine = self.autocommit
        events = engine.dispatch
        if events.before_cursor_execute or events.after_cursor_execute:
            with engine.connect() as conn:
                return self.execute_compiled(conn, compiled, **params).first()
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
        ``info`` this is, else as text (see :meth:`execute_compiled`)."""
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
    def autocommit(self) -> Engine:
        """A second engine on the same database, for a single statement that settles its race
        alone: its connections commit each statement by themselves, set once when they connect
        (switching a pooled connection's isolation level back and forth costs a round trip each
        time). Opened at first use; only PostgreSQL's fast paths use it."""
        return create_store_engine(
            self.engine.url.render_as_string(hide_password=False),
            isolation_level="AUTOCOMMIT",
            **self._engine_options,
        )

    def now(self) -> int:
        return to_millis(self.clock.now())

    def scoped(self, table: Any) -> Any:
        """The rows of ``table`` that belong to this scheduler name (every query's first
        condition: several clusters may share the tables)."""
        return table.c.sched_name == self.scheduler_name

    def leader_key(self) -> Any:
        locks = self.tables.locks
        return and_(self.scoped(locks), locks.c.lock_name == LEADER_LOCK)

    def check_fence(self, conn: Connection, fence: Fence | None = None) -> None:
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
        query = select(locks.c.epoch).where(self.leader_key())
        if self.dialect != "sqlite":
            query = query.with_for_update(read=True)
        current = conn.execute(query).scalar()
        if current != fence.epoch:
            raise FencedError(
                f"scheduler {self.scheduler_name!r}: instance {fence.instance_name} was elected "
                f"with epoch {fence.epoch}, but the epoch is now {current}: another leader has "
                "been elected since; this write is refused"
            )

    def lock(self, conn: Connection, name: str) -> None:
        """Hold the named lock row until the transaction ends (SQLite: the write lock is)."""
        if self.dialect == "sqlite":
            return
        locks = self.tables.locks
        key = and_(self.scoped(locks), locks.c.lock_name == name)
        if conn.execute(select(locks.c.lock_name).where(key).with_for_update()).first() is None:
            try:
                with conn.begin_nested():
                    conn.execute(
                        insert(locks).values(sched_name=self.scheduler_name, lock_name=name)
                    )
            except IntegrityError:
                pass  # another process created it first; the select below waits for its lock
            conn.execute(select(locks.c.lock_name).where(key).with_for_update())

    def trigger_key(self, key: TriggerKey) -> Any:
        t = self.tables.triggers
        return and_(
            self.scoped(t),
            t.c.trigger_name == key.name,
            t.c.trigger_group == key.group,
        )

    def job_key(self, key: JobKey) -> Any:
        j = self.tables.jobs
        return and_(
            self.scoped(j),
            j.c.job_name == key.name,
            j.c.job_group == key.group,
        )

    def triggers_of_job(self, key: JobKey) -> Any:
        t = self.tables.triggers
        return and_(
            self.scoped(t),
            t.c.job_name == key.name,
            t.c.job_group == key.group,
        )


@functools.lru_cache(maxsize=64)
def _named_row(columns: tuple[str, ...]) -> Any:
    return namedtuple("Row", columns, rename=True)


def _row_type(description: Sequence[Any]) -> Any:
    """A tuple type whose fields are the columns of a driver cursor's ``description``."""
    return _named_row(tuple(column[0] for column in description))
