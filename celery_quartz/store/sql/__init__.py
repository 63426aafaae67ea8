"""The SQL store: every decision two processes could race on is one transaction.

PostgreSQL settles races with row locks (``FOR UPDATE SKIP LOCKED`` when acquiring) and
conditional updates; SQLite with a write lock taken at ``BEGIN IMMEDIATE`` (see
:mod:`celery_quartz.store.engine`). Nothing here holds a lock while waiting for a fire time: an
acquisition is a committed state change (WAITING → ACQUIRED) plus a fired-trigger row naming the
scheduler instance that owns it.

One object per role of :mod:`celery_quartz.store.abc`, each built on one shared
:class:`~celery_quartz.store.sql._context.SqlContext` (engine, tables, scope, transactions, the
fence) and the services several roles share:

* ``_rows`` — conversions between rows and the domain's objects, reads every role makes;
* ``_definitions`` — storing and removing jobs and triggers, a late trigger's misfire outcome;
* ``_firings`` — what a firing's end releases, recovery and retry firings;
* ``_claims`` — a claim's statements, for the scheduling role;
* ``jobs``, ``pauses`` and ``backfills`` (client), ``scheduling`` (scheduling loop),
  ``cluster`` (cluster manager), ``worker`` (worker hooks), ``reads`` (operators), ``history``
  (the run history's reads), ``sweep`` (the history's upkeep): the roles.

:class:`SqlStore` composes them: every role operation, called between the store's hooks.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from sqlalchemy import Connection, Engine

from celery_quartz.audit import DEFAULT_REDACT_KEYS
from celery_quartz.clock import Clock
from celery_quartz.errors import ConfigurationError
from celery_quartz.hooks import StoreHooks, StoreOperation, call_safely
from celery_quartz.job import DEFAULT_MAX_DATA_BYTES
from celery_quartz.liveness import DEFAULT_CHECKIN_MISFIRE_THRESHOLD
from celery_quartz.misfire import DEFAULT_MISFIRE_THRESHOLD
from celery_quartz.retry import RetryPolicy
from celery_quartz.store.abc import (
    ClusterStore,
    HistoryKeeper,
    HistoryReader,
    JobStore,
    PauseStore,
    SchedulingStore,
    Store,
    StoreReader,
    WorkerStore,
)
from celery_quartz.store.abc_backfill import BackfillStore
from celery_quartz.store.engine import create_store_engine
from celery_quartz.store.records import NONE_STATE, Fence
from celery_quartz.store.schema import Tables
from celery_quartz.store.sql._audit import AuditTrail
from celery_quartz.store.sql._context import SqlContext
from celery_quartz.store.sql._definitions import Definitions
from celery_quartz.store.sql._firings import FiringEnds
from celery_quartz.store.sql._rows import Rows, in_acquisition_order
from celery_quartz.store.sql.backfills import BackfillsSql
from celery_quartz.store.sql.cluster import ClusterSql
from celery_quartz.store.sql.history import HistorySql
from celery_quartz.store.sql.jobs import JobsSql
from celery_quartz.store.sql.pauses import PausesSql
from celery_quartz.store.sql.reads import ReadsSql
from celery_quartz.store.sql.scheduling import SchedulingSql
from celery_quartz.store.sql.sweep import SweepSql
from celery_quartz.store.sql.worker import WorkerSql
from celery_quartz.table_prefix import DEFAULT_TABLE_PREFIX

__all__ = ["NONE_STATE", "SqlStore", "in_acquisition_order"]

P = ParamSpec("P")
R = TypeVar("R")


class _Operation(Generic[P, R]):
    """A role operation of :class:`SqlStore`: the method of the same name of one of its role
    objects (``role``), typed as the interface declares it, and called between the store's
    hooks when it has any."""

    def __init__(self, role: str, declared: Callable[Concatenate[Any, P], R]) -> None:
        self.role = role
        self.name = declared.__name__

    @overload
    def __get__(self, store: None, owner: type) -> _Operation[P, R]: ...

    @overload
    def __get__(self, store: SqlStore, owner: type) -> Callable[P, R]: ...

    def __get__(self, store: SqlStore | None, owner: type) -> Any:
        if store is None:
            return self
        method = getattr(getattr(store, self.role), self.name)
        if not store.hooks:
            return method
        return _between(store.hooks, self.name, method)


def _between(hooks: tuple[StoreHooks, ...], name: str, method: Any) -> Any:
    def operation(*args: Any, **kwargs: Any) -> Any:
        call = StoreOperation(name, args, kwargs)
        before = [call_safely(hook.before_store_operation, call, default=None) for hook in hooks]
        try:
            result = method(*args, **kwargs)
        except BaseException as exc:
            for hook, state in zip(reversed(hooks), reversed(before), strict=True):
                call_safely(hook.after_store_operation, call, state, exception=exc, default=None)
            raise
        for hook, state in zip(reversed(hooks), reversed(before), strict=True):
            call_safely(hook.after_store_operation, call, state, result=result, default=None)
        return result

    return operation


class SqlStore(Store):
    """Jobs, triggers and firings of one scheduler name, in SQL tables under one prefix: one
    object per role (:attr:`jobs`, :attr:`scheduling`, :attr:`cluster`, :attr:`worker`,
    :attr:`reader`, :attr:`history_reader`, :attr:`history_keeper`) on one
    :class:`~celery_quartz.store.sql._context.SqlContext`, and every
    role operation of :mod:`celery_quartz.store.abc` on the store itself, called between its
    hooks (:meth:`add_hooks`)."""

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
        redact_keys: str = DEFAULT_REDACT_KEYS,
        record_history: bool = True,
        default_retry_policy: RetryPolicy | None = None,
        pause_when_retries_exhausted: bool = False,
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
        transaction that long (:func:`~celery_quartz.store.engine.create_store_engine`).
        ``redact_keys`` is the regular expression of the keys whose values the audit records
        as ``[redacted]`` (``quartz_dashboard_redact_keys``). ``record_history`` off writes no
        run history (``quartz_history_retention = 0``). ``default_retry_policy`` applies to
        triggers and jobs with no retry policy of their own (``quartz_default_retry_policy``),
        and ``pause_when_retries_exhausted`` pauses a trigger, that does not say otherwise,
        whose occurrence fails with no retry left (``quartz_pause_when_retries_exhausted``)."""
        if engine is None:
            if url is None:
                raise ConfigurationError(
                    f"the store of scheduler {scheduler_name!r} needs a url or an engine"
                )
            options: dict[str, Any] = {"pool_pre_ping": pre_ping}
            if pool_size is not None:
                options["pool_size"] = pool_size
            engine = create_store_engine(
                url, idle_transaction_timeout=idle_transaction_timeout, **options
            )
        sql = SqlContext(
            engine,
            scheduler_name=scheduler_name,
            table_prefix=table_prefix,
            clock=clock,
            max_data_bytes=max_data_bytes,
            misfire_threshold=misfire_threshold,
            checkin_misfire_threshold=checkin_misfire_threshold,
            pre_ping=pre_ping,
            record_history=record_history,
            default_retry_policy=default_retry_policy,
            pause_when_retries_exhausted=pause_when_retries_exhausted,
        )
        rows = Rows(sql)
        definitions = Definitions(sql, rows)
        audit = AuditTrail(sql, redact_keys)
        ends = FiringEnds(sql, rows, definitions, audit)
        #: What every role object builds on.
        self.context = sql
        self.jobs = JobsSql(sql, rows, definitions, audit)
        self.pauses = PausesSql(sql, rows, definitions, audit)
        self.backfills = BackfillsSql(sql, rows, definitions, audit)
        self.scheduling = SchedulingSql(sql, rows, definitions, ends)
        self.cluster = ClusterSql(sql, definitions, ends)
        self.worker = WorkerSql(sql, ends)
        self.reader = ReadsSql(sql, rows)
        self.history_reader = HistorySql(sql)
        self.history_keeper = SweepSql(sql)
        #: Called around every role operation, in this order (see :meth:`add_hooks`).
        self.hooks: tuple[StoreHooks, ...] = ()
        self.engine: Engine = sql.engine
        self.tables: Tables = sql.tables
        self.scheduler_name = scheduler_name
        self.clock = sql.clock
        self.max_data_bytes = max_data_bytes
        self.misfire_threshold_ms = sql.misfire_threshold_ms
        self.checkin_misfire_threshold_ms = sql.checkin_misfire_threshold_ms

    def add_hooks(self, hooks: StoreHooks) -> None:
        """Call ``hooks`` around every role operation of this store from now on, after those
        added before."""
        self.hooks = (*self.hooks, hooks)

    @property
    def fence(self) -> Fence | None:
        return self.context.fence

    @fence.setter
    def fence(self, fence: Fence | None) -> None:
        self.context.fence = fence

    @property
    def dialect(self) -> str:
        return self.context.dialect

    def transaction(self) -> AbstractContextManager[Connection]:
        """A transaction on the store's engine (tests and diagnostics)."""
        return self.context.transaction()

    def create_tables(self) -> None:
        """Create the tables directly (tests, the RAM store); production uses the migrations."""
        self.context.create_tables()

    def dispose(self) -> None:
        self.context.dispose()

    # -- JobStore ---------------------------------------------------------------------------------
    store_jobs_and_triggers = _Operation("jobs", JobStore.store_jobs_and_triggers)
    store_calendar = _Operation("jobs", JobStore.store_calendar)
    retrieve_calendar = _Operation("jobs", JobStore.retrieve_calendar)
    remove_calendar = _Operation("jobs", JobStore.remove_calendar)
    retrieve_job = _Operation("jobs", JobStore.retrieve_job)
    retrieve_trigger = _Operation("jobs", JobStore.retrieve_trigger)
    get_trigger_state = _Operation("jobs", JobStore.get_trigger_state)
    get_triggers_of_job = _Operation("jobs", JobStore.get_triggers_of_job)
    job_keys = _Operation("jobs", JobStore.job_keys)
    remove_trigger = _Operation("jobs", JobStore.remove_trigger)
    remove_job = _Operation("jobs", JobStore.remove_job)
    update_trigger_details = _Operation("jobs", JobStore.update_trigger_details)
    replace_trigger = _Operation("jobs", JobStore.replace_trigger)
    edit_trigger = _Operation("jobs", JobStore.edit_trigger)
    pause_trigger = _Operation("pauses", PauseStore.pause_trigger)
    resume_trigger = _Operation("pauses", PauseStore.resume_trigger)
    pause_job = _Operation("pauses", PauseStore.pause_job)
    resume_job = _Operation("pauses", PauseStore.resume_job)
    pause_triggers = _Operation("pauses", PauseStore.pause_triggers)
    resume_triggers = _Operation("pauses", PauseStore.resume_triggers)
    pause_trigger_group = _Operation("pauses", PauseStore.pause_trigger_group)
    resume_trigger_group = _Operation("pauses", PauseStore.resume_trigger_group)
    pause_all = _Operation("pauses", PauseStore.pause_all)
    resume_all = _Operation("pauses", PauseStore.resume_all)
    paused_trigger_groups = _Operation("pauses", PauseStore.paused_trigger_groups)
    paused_group_records = _Operation("pauses", PauseStore.paused_group_records)
    backfill = _Operation("backfills", BackfillStore.backfill)
    apply_scheduling_data = _Operation("jobs", JobStore.apply_scheduling_data)
    scheduled_definitions = _Operation("jobs", JobStore.scheduled_definitions)
    reset_trigger_from_error_state = _Operation("jobs", JobStore.reset_trigger_from_error_state)

    # -- SchedulingStore ----------------------------------------------------------------------
    claim = _Operation("scheduling", SchedulingStore.claim)
    acquire_next_triggers = _Operation("scheduling", SchedulingStore.acquire_next_triggers)
    fire = _Operation("scheduling", SchedulingStore.fire)
    mark_published = _Operation("scheduling", SchedulingStore.mark_published)
    release_acquired = _Operation("scheduling", SchedulingStore.release_acquired)
    unpublished_firings = _Operation("scheduling", SchedulingStore.unpublished_firings)
    in_flight = _Operation("scheduling", SchedulingStore.in_flight)
    handle_misfires = _Operation("scheduling", SchedulingStore.handle_misfires)
    resolve_expired_firings = _Operation("scheduling", SchedulingStore.resolve_expired_firings)
    count_expired_firings = _Operation("scheduling", SchedulingStore.count_expired_firings)
    set_trigger_error = _Operation("scheduling", SchedulingStore.set_trigger_error)

    # -- ClusterStore -------------------------------------------------------------------------
    check_in = _Operation("cluster", ClusterStore.check_in)
    remove_check_in = _Operation("cluster", ClusterStore.remove_check_in)
    remove_check_in_of_process = _Operation("cluster", ClusterStore.remove_check_in_of_process)
    check_ins = _Operation("cluster", ClusterStore.check_ins)
    firing_owners = _Operation("cluster", ClusterStore.firing_owners)
    recover_scheduler = _Operation("cluster", ClusterStore.recover_scheduler)
    recover_worker = _Operation("cluster", ClusterStore.recover_worker)
    advance_epoch = _Operation("cluster", ClusterStore.advance_epoch)
    recover_leader_move = _Operation("cluster", ClusterStore.recover_leader_move)
    record_status = _Operation("cluster", ClusterStore.record_status)
    ping = _Operation("cluster", ClusterStore.ping)

    # -- WorkerStore --------------------------------------------------------------------------
    start_execution = _Operation("worker", WorkerStore.start_execution)
    return_to_published = _Operation("worker", WorkerStore.return_to_published)
    complete_execution = _Operation("worker", WorkerStore.complete_execution)
    complete_executions = _Operation("worker", WorkerStore.complete_executions)
    executing_task_ids = _Operation("worker", WorkerStore.executing_task_ids)
    record_progress = _Operation("worker", WorkerStore.record_progress)
    cancel_requested = _Operation("worker", WorkerStore.cancel_requested)
    end_lost_execution = _Operation("worker", WorkerStore.end_lost_execution)
    cancel_firing = _Operation("worker", WorkerStore.cancel_firing)

    # -- StoreReader --------------------------------------------------------------------------
    list_jobs = _Operation("reader", StoreReader.list_jobs)
    list_triggers = _Operation("reader", StoreReader.list_triggers)
    trigger_view = _Operation("reader", StoreReader.trigger_view)
    owed_triggers = _Operation("reader", StoreReader.owed_triggers)
    list_firings = _Operation("reader", StoreReader.list_firings)
    list_nodes = _Operation("reader", StoreReader.list_nodes)
    group_occupancy = _Operation("reader", StoreReader.group_occupancy)
    calendars = _Operation("reader", StoreReader.calendars)
    trigger_summary = _Operation("reader", StoreReader.trigger_summary)
    unserved = _Operation("reader", StoreReader.unserved)
    current_epoch = _Operation("reader", StoreReader.current_epoch)
    count_rows = _Operation("reader", StoreReader.count_rows)
    firing_states = _Operation("reader", StoreReader.firing_states)

    # -- HistoryReader ------------------------------------------------------------------------
    history = _Operation("history_reader", HistoryReader.history)
    statistics = _Operation("history_reader", HistoryReader.statistics)
    run_status = _Operation("history_reader", HistoryReader.run_status)
    overdue_jobs = _Operation("history_reader", HistoryReader.overdue_jobs)
    audit = _Operation("history_reader", HistoryReader.audit)

    # -- HistoryKeeper ------------------------------------------------------------------------
    sweep_history = _Operation("history_keeper", HistoryKeeper.sweep_history)
