"""The worker's role (:class:`~celery_quartz.store.abc.WorkerStore`): start, complete, retry,
persist job data."""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    ARRAY,
    BigInteger,
    Boolean,
    ColumnElement,
    Connection,
    Row,
    String,
    and_,
    bindparam,
    delete,
    func,
    or_,
    select,
    update,
)

from celery_quartz.clock import from_millis
from celery_quartz.firing import message_task_id
from celery_quartz.job import encode_json_object
from celery_quartz.keys import JobKey, TriggerKey
from celery_quartz.store.abc import WorkerStore
from celery_quartz.store.records import (
    FinishedExecution,
    ProcessLoss,
    ProgressReport,
    StartedExecution,
)
from celery_quartz.store.schema import FiringState, TriggerState
from celery_quartz.store.sql._context import SqlContext
from celery_quartz.store.sql._firings import FiringEnds
from celery_quartz.store.sql._history_rows import HistoryRows
from celery_quartz.store.sql._prepared import CompiledStatement
from celery_quartz.store.sql._rows import outcome_columns
from celery_quartz.store.views import FiringOutcome

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _End:
    """An execution's end to record: what :meth:`WorkerSql.complete_execution` takes."""

    fire_instance_id: str
    job_data: dict[str, Any] | None = None
    failed: bool = False
    outcome: FiringOutcome | None = None

    @property
    def may_end_alone(self) -> bool:
        """Whether the end may be the one statement's: no job data to write, no retry to
        decide (whether its job or trigger wants a release, the statement checks)."""
        return (
            self.job_data is None
            and not self.failed
            and not (self.outcome is not None and self.outcome.cancelled)
        )


class WorkerSql(WorkerStore):
    """The worker hooks' role on the SQL tables.

    On PostgreSQL each race is settled by one statement committed on its own (one round trip,
    where a transaction of two statements takes three), run on the pooled driver connection
    (:meth:`~celery_quartz.store.sql._context.SqlContext.run_alone`): the start with its
    automatic pin's claim, and every end whose release is nothing. Elsewhere, and for an end
    that does release something, the same conditions are written in one transaction.
    """

    def __init__(self, sql: SqlContext, ends: FiringEnds) -> None:
        self.sql = sql
        self.ends = ends

    def start_execution(
        self, fire_instance_id: str, worker_name: str, *, restart_from: str | None = None
    ) -> StartedExecution | None:
        """Only the first conditional update from FIRED/PUBLISHED (or from EXECUTING on
        ``restart_from``) matches; the automatic pin's claim is a compare-and-swap against the
        pin the fired row recorded (:meth:`_claim_auto_pin`)."""
        now = self.sql.now()
        if self.sql.dialect == "postgresql":
            started = self.sql.run_alone(
                self._start_statement,
                fire_id=fire_instance_id,
                worker=worker_name,
                restart_from=restart_from,
                now=now,
            )
            if started is None:
                return None
            if started.preferred_node_auto and started.preferred_node != worker_name:
                self._log_auto_pin(started, worker_name, claimed=bool(started.claimed))
            return self._started(started)
        f = self.sql.tables.fired_triggers
        with self.sql.transaction() as conn:
            started = conn.execute(
                update(f)
                .where(
                    self.sql.scoped(f),
                    f.c.fire_instance_id == fire_instance_id,
                    self._startable(restart_from),
                )
                .values(state=FiringState.EXECUTING, worker_name=worker_name, started_time=now)
                .returning(*self._started_columns)
            ).first()
            if started is None:
                return None
            if started.preferred_node_auto and started.preferred_node != worker_name:
                self._claim_auto_pin(conn, started, worker_name)
        return self._started(started)

    def _startable(self, restart_from: Any) -> ColumnElement[bool]:
        """The fired rows a start may take: in flight and not started, or (``restart_from``
        given) EXECUTING on the worker named, whose own start may or may not have been
        recorded."""
        f = self.sql.tables.fired_triggers
        # Equalities, not IN: a statement compiled once takes no expanding parameter.
        fresh = [f.c.state == FiringState.FIRED, f.c.state == FiringState.PUBLISHED]
        if restart_from is None:
            return or_(*fresh)
        executing = and_(f.c.state == FiringState.EXECUTING, f.c.worker_name == restart_from)
        return or_(*fresh, executing)

    @property
    def _started_columns(self) -> tuple[Any, ...]:
        f = self.sql.tables.fired_triggers
        return (
            f.c.trigger_name,
            f.c.trigger_group,
            f.c.preferred_node,
            f.c.preferred_node_auto,
            f.c.is_nonconcurrent,
            f.c.requests_recovery,
        )

    def _started(self, row: Any) -> StartedExecution:
        return StartedExecution(
            batchable=self.sql.dialect == "postgresql"
            and not row.is_nonconcurrent
            and not row.requests_recovery
        )

    @functools.cached_property
    def _start_statement(self) -> CompiledStatement:
        """``WITH started AS (UPDATE fired … RETURNING …), claimed AS (UPDATE triggers … FROM
        started …) SELECT started.*, count(claimed)`` with parameters ``fire_id``, ``worker``,
        ``restart_from`` (NULL: none) and ``now`` (built once)."""
        f, t = self.sql.tables.fired_triggers, self.sql.tables.triggers
        worker = bindparam("worker", type_=String)
        started = (
            update(f)
            .where(
                self.sql.scoped(f),
                f.c.fire_instance_id == bindparam("fire_id", type_=String),
                self._startable(bindparam("restart_from", type_=String)),
            )
            .values(
                state=FiringState.EXECUTING,
                worker_name=worker,
                started_time=bindparam("now", type_=BigInteger),
            )
            .returning(*self._started_columns)
            .cte("started")
        )
        claimed = (
            update(t)
            .where(
                self.sql.scoped(t),
                t.c.trigger_name == started.c.trigger_name,
                t.c.trigger_group == started.c.trigger_group,
                started.c.preferred_node_auto.is_(True),
                started.c.preferred_node.is_distinct_from(worker),
                t.c.preferred_node_auto.is_(True),
                t.c.preferred_node.is_not_distinct_from(started.c.preferred_node),
            )
            .values(preferred_node=worker)
            .returning(t.c.trigger_name)
            .cte("claimed")
        )
        return self.sql.compiled(
            select(
                *started.c,
                select(func.count()).select_from(claimed).scalar_subquery().label("claimed"),
            )
        )

    def _log_auto_pin(self, fired: Any, worker_name: str, *, claimed: bool) -> None:
        key = TriggerKey(fired.trigger_name, fired.trigger_group)
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

    def _claim_auto_pin(self, conn: Connection, fired: Row[Any], worker_name: str) -> None:
        """Write ``worker_name`` into the auto pin of the trigger of ``fired``, as a
        compare-and-swap against the pin the fired row recorded at acquisition."""
        t = self.sql.tables.triggers
        key = TriggerKey(fired.trigger_name, fired.trigger_group)
        claimed = conn.execute(
            update(t)
            .where(
                self.sql.trigger_key(key),
                t.c.preferred_node_auto.is_(True),
                t.c.preferred_node.is_not_distinct_from(fired.preferred_node),
            )
            .values(preferred_node=worker_name)
        ).rowcount
        self._log_auto_pin(fired, worker_name, claimed=bool(claimed))

    def return_to_published(self, fire_instance_id: str, *, refire: bool = False) -> bool:
        f = self.sql.tables.fired_triggers
        values: dict[str, Any] = {"state": FiringState.PUBLISHED, "worker_name": None}
        if refire:
            values["refire_count"] = f.c.refire_count + 1
        with self.sql.transaction() as conn:
            return bool(
                conn.execute(
                    update(f)
                    .where(
                        self.sql.scoped(f),
                        f.c.fire_instance_id == fire_instance_id,
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
        outcome: FiringOutcome | None = None,
    ) -> bool:
        failed = failed or (outcome is not None and outcome.failed)
        return self._complete([_End(fire_instance_id, job_data, failed, outcome)], False) == 1

    def complete_executions(self, finished: Sequence[FinishedExecution]) -> int:
        ends = [
            _End(
                item.fire_instance_id,
                outcome=FiringOutcome(
                    finished_millis=item.finished_millis,
                    summary=item.summary,
                    metrics=item.metrics,
                ),
            )
            for item in finished
        ]
        return self._complete(ends, True)

    def _complete(self, ends: Sequence[_End], latest_wins: bool) -> int:
        """Record ``ends``; how many were executing. The one path of every completion.

        On PostgreSQL the ends whose release is nothing (their job allows concurrent firings,
        their trigger is not COMPLETE, no job data or retry to write) go first, in one statement
        committed on its own: their rows removed, each trigger's latest success kept as its last
        outcome (with ``latest_wins``, unless a later finish is kept already: the ends of a
        batch come out of order). The rest, and every end on another database, get one
        transaction each, in the order they finished: each trigger keeps its latest.
        """
        done: set[str] = set()
        alone = [end for end in ends if end.may_end_alone]
        if alone and self.sql.dialect == "postgresql":
            now = self.sql.now()
            row = self.sql.run_alone(
                self._complete_statement,
                ids=[end.fire_instance_id for end in alone],
                finished=[_finished_millis(end, now) for end in alone],
                summaries=[None if end.outcome is None else end.outcome.summary for end in alone],
                metrics=[None if end.outcome is None else end.outcome.metrics for end in alone],
                latest_wins=latest_wins,
                **({"now": now} if self.sql.record_history else {}),
            )
            assert row is not None  # an aggregate: one row, whatever it removed
            done = set(row.done or ())
        rest = [end for end in ends if end.fire_instance_id not in done]
        rest.sort(key=lambda end: _finished_millis(end, 0) or 0)
        return len(done) + sum(self._complete_in_transaction(end) for end in rest)

    def cancel_firing(self, fire_instance_id: str, worker_name: str) -> bool:
        f = self.sql.tables.fired_triggers
        with self.sql.transaction() as conn:
            row = conn.execute(
                delete(f)
                .where(
                    self.sql.scoped(f),
                    f.c.fire_instance_id == fire_instance_id,
                    or_(f.c.state == FiringState.FIRED, f.c.state == FiringState.PUBLISHED),
                )
                .returning(f)
            ).first()
            if row is None:
                return False
            # Its trigger keeps its last outcome: this firing never ran.
            self.ends.end_execution(conn, row, None, cancelled=True)
        logger.info(
            "firing %s of trigger %s.%s (scheduled %s) revoked before it started: discarded by "
            "worker %s, recorded as cancelled",
            fire_instance_id,
            row.trigger_group,
            row.trigger_name,
            from_millis(row.sched_time).isoformat(),
            worker_name,
        )
        return True

    def _complete_in_transaction(self, end: _End) -> bool:
        """The completion as one transaction: the conditional delete, the job data written
        back, the retry decided and written, and the release, which keeps the outcome."""
        j = self.sql.tables.jobs
        with self.sql.transaction() as conn:
            row = self.ends.remove_executing(conn, end.fire_instance_id)
            if row is None:
                return False
            if end.job_data is not None:
                job_key = JobKey(row.job_name, row.job_group)
                encoded = encode_json_object(
                    f"job {job_key}", "data", end.job_data, self.sql.max_data_bytes
                )
                conn.execute(
                    update(j)
                    .where(self.sql.job_key(job_key), j.c.is_update_data.is_(True))
                    .values(job_data=encoded)
                )
            cancelled = end.outcome is not None and end.outcome.cancelled
            self.ends.end_execution(conn, row, end.outcome, failed=end.failed, cancelled=cancelled)
        return True

    @functools.cached_property
    def _complete_statement(self) -> CompiledStatement:
        return _complete_statement(self.sql, self.ends.history)

    def record_progress(self, reports: Sequence[ProgressReport]) -> int:
        if not reports:
            return 0
        f = self.sql.tables.fired_triggers
        statement = (
            update(f)
            .where(
                self.sql.scoped(f),
                f.c.fire_instance_id == bindparam("report_fire_id"),
                f.c.state == FiringState.EXECUTING,
            )
            .values(
                progress=bindparam("report_percent"),
                progress_message=bindparam("report_message"),
                progress_time=bindparam("report_time"),
            )
        )
        with self.sql.transaction() as conn:
            return conn.execute(
                statement,
                [
                    {
                        "report_fire_id": r.fire_instance_id,
                        "report_percent": r.percent,
                        "report_message": r.message,
                        "report_time": r.reported_millis,
                    }
                    for r in reports
                ],
            ).rowcount

    def cancel_requested(self, fire_instance_ids: Sequence[str]) -> set[str]:
        if not fire_instance_ids:
            return set()
        f = self.sql.tables.fired_triggers
        with self.sql.transaction() as conn:
            return set(
                conn.execute(
                    select(f.c.fire_instance_id).where(
                        self.sql.scoped(f),
                        f.c.fire_instance_id.in_(list(fire_instance_ids)),
                        f.c.cancel_requested_time.is_not(None),
                    )
                ).scalars()
            )

    def executing_task_ids(self, worker_name: str) -> dict[str, str]:
        f = self.sql.tables.fired_triggers
        with self.sql.transaction() as conn:
            rows = conn.execute(
                select(f.c.fire_instance_id, f.c.expired_count).where(
                    self.sql.scoped(f),
                    f.c.worker_name == worker_name,
                    f.c.state == FiringState.EXECUTING,
                )
            )
            return {message_task_id(r[0], r[1]): r[0] for r in rows}

    def end_lost_execution(
        self,
        fire_instance_id: str,
        worker_name: str,
        outcome: FiringOutcome,
        *,
        loss: ProcessLoss,
    ) -> str | None:
        with self.sql.transaction() as conn:
            row = self.ends.remove_executing(conn, fire_instance_id, worker_name=worker_name)
            if row is None:
                return None
            now = self.sql.now()
            if loss is ProcessLoss.CRASHED:
                recovered = self.ends.resolve_dead_execution(conn, row, now, outcome)
                ended = "recovered" if recovered else "interrupted"
            else:
                # Timed out: a failure, handed to the retry policy. Terminated: cancelled.
                ended = self.ends.end_execution(
                    conn,
                    row,
                    outcome,
                    failed=loss is ProcessLoss.TIMED_OUT,
                    cancelled=loss is ProcessLoss.TERMINATED,
                ).value
        logger.info(
            "worker %s: its pool process stopped (%s: %s) running firing %s of trigger %s.%s "
            "(scheduled %s); %s",
            worker_name,
            outcome.error_type,
            outcome.error_message,
            fire_instance_id,
            row.trigger_group,
            row.trigger_name,
            from_millis(row.sched_time).isoformat(),
            {
                "failed": "recorded as failed",
                "retried": "recorded as failed; a retry is scheduled",
                "recovered": "recovery firing scheduled",
                "interrupted": "closed as interrupted",
                "cancelled": "recorded as cancelled",
            }[ended],
        )
        return ended


def _finished_millis(end: _End, now: int) -> int | None:
    """When ``end`` finished, as its trigger keeps it: None without an outcome to keep."""
    if end.outcome is None:
        return None
    return now if end.outcome.finished_millis is None else end.outcome.finished_millis


def _complete_statement(sql: SqlContext, history: HistoryRows) -> CompiledStatement:
    """``WITH gone AS (DELETE fired USING unnest(ids, finished) … RETURNING …), latest AS
    (them ranked by finish per trigger), recorded AS (UPDATE triggers … last outcome,
    unless ``latest_wins`` and a later finish is already kept) SELECT array_agg(gone's
    ids), count(recorded)`` (parameters ``ids`` and ``finished``, arrays of the same length,
    a NULL finish keeping no outcome; and ``latest_wins``)."""
    f, t = sql.tables.fired_triggers, sql.tables.triggers
    ended = (
        func.unnest(
            bindparam("ids", type_=ARRAY(String)),
            bindparam("finished", type_=ARRAY(BigInteger)),
            bindparam("summaries", type_=ARRAY(String)),
            bindparam("metrics", type_=ARRAY(String)),
        )
        .table_valued("fire_instance_id", "finished_time", "summary", "metrics")
        .render_derived(name="ended")
    )
    gone = (
        delete(f)
        .where(
            sql.scoped(f),
            f.c.fire_instance_id == ended.c.fire_instance_id,
            *_ends_alone(sql, f),
        )
        .returning(
            f.c.fire_instance_id,
            f.c.sched_name,
            f.c.trigger_name,
            f.c.trigger_group,
            f.c.started_time,
            ended.c.finished_time,
            *_history_columns(sql, f, ended),
        )
        .cte("gone")
    )
    key = (gone.c.sched_name, gone.c.trigger_name, gone.c.trigger_group)
    latest = (
        select(
            *key,
            gone.c.started_time,
            gone.c.finished_time,
            func.row_number()
            .over(partition_by=key, order_by=gone.c.finished_time.desc())
            .label("rank"),
        )
        .where(gone.c.finished_time.is_not(None))
        .cte("latest")
    )
    recorded = (
        update(t)
        .where(
            t.c.sched_name == latest.c.sched_name,
            t.c.trigger_name == latest.c.trigger_name,
            t.c.trigger_group == latest.c.trigger_group,
            latest.c.rank == 1,
            or_(
                ~bindparam("latest_wins", type_=Boolean),
                func.coalesce(t.c.last_finished_time, 0) <= latest.c.finished_time,
            ),
        )
        .values(
            {
                **outcome_columns(t, FiringOutcome(), None, 0),
                "last_started_time": latest.c.started_time,
                "last_finished_time": latest.c.finished_time,
            }
        )
        .returning(t.c.trigger_name)
        .cte("recorded")
    )
    counts = [
        select(func.array_agg(gone.c.fire_instance_id)).scalar_subquery().label("done"),
        select(func.count()).select_from(recorded).scalar_subquery().label("recorded"),
    ]
    if sql.record_history:
        # The history rows and the run statuses, in the same statement.
        rows, status = history.batch_ctes(gone, bindparam("now", type_=BigInteger))
        counts.append(select(func.count()).select_from(rows).scalar_subquery().label("history"))
        counts.append(select(func.count()).select_from(status).scalar_subquery().label("status"))
    return sql.compiled(select(*counts))


def _history_columns(sql: SqlContext, f: Any, ended: Any) -> tuple[Any, ...]:
    """What the history rows of a batch need of the removed fired rows (nothing when the
    history is off)."""
    if not sql.record_history:
        return ()
    return (
        f.c.job_name,
        f.c.job_group,
        f.c.sched_time,
        f.c.published_time,
        f.c.worker_name,
        f.c.instance_name,
        f.c.retry_attempt,
        f.c.recovering,
        f.c.expired_count,
        ended.c.summary,
        ended.c.metrics,
    )


def _ends_alone(sql: SqlContext, f: Any) -> list[ColumnElement[bool]]:
    """The fired rows whose end releases nothing: executing, of a job that allows
    concurrent executions, and of a trigger that is not COMPLETE and has no overlap policy (an
    overlap policy's claim may hold or complete the trigger while this end runs: such an end
    reads the trigger locked, in a transaction)."""
    t = sql.tables.triggers
    trigger_complete = (
        select(t.c.trigger_name)
        .where(
            t.c.sched_name == f.c.sched_name,
            t.c.trigger_name == f.c.trigger_name,
            t.c.trigger_group == f.c.trigger_group,
            or_(
                t.c.trigger_state == TriggerState.COMPLETE,
                t.c.overlap_policy.is_not(None),
            ),
        )
        .exists()
    )
    return [
        f.c.state == FiringState.EXECUTING,
        f.c.is_nonconcurrent.is_(False),
        ~trigger_complete,
    ]
