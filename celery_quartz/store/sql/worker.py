"""The worker's role: start, complete, retry, persist job data
(:class:`~celery_quartz.store.abc.WorkerStore`)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    ARRAY,
    BigInteger,
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
from celery_quartz.store.records import FinishedExecution, ProcessLoss, StartedExecution
from celery_quartz.store.schema import FiringState, TriggerState
from celery_quartz.store.sql._firings import FiringsSql
from celery_quartz.store.sql._prepared import CompiledStatement
from celery_quartz.store.sql._rows import outcome_columns
from celery_quartz.store.views import FiringOutcome

logger = logging.getLogger(__name__)


class WorkerSql(FiringsSql, WorkerStore):
    def start_execution(
        self, fire_instance_id: str, worker_name: str, *, restart_from: str | None = None
    ) -> StartedExecution | None:
        """Mark a firing EXECUTING on ``worker_name``; None when it must not run here.

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
        if restart_from is None and self.dialect == "postgresql":
            return self._start_in_one_statement(fire_instance_id, worker_name)
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
                    self._scoped(f),
                    f.c.fire_instance_id == fire_instance_id,
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
                    f.c.is_nonconcurrent,
                    f.c.requests_recovery,
                )
            ).first()
            if started is None:
                return None
            if started.preferred_node_auto and started.preferred_node != worker_name:
                self._claim_auto_pin(conn, started, worker_name)
        return self._started(started)

    def _started(self, row: Any) -> StartedExecution:
        return StartedExecution(
            batchable=self.dialect == "postgresql"
            and not row.is_nonconcurrent
            and not row.requests_recovery
        )

    def _start_in_one_statement(
        self, fire_instance_id: str, worker_name: str
    ) -> StartedExecution | None:
        """PostgreSQL: the start and its automatic pin's claim as one statement committed on its
        own (one round trip, where a transaction of two statements takes three). The same
        conditions as the general path: the start only from FIRED/PUBLISHED, the claim a
        compare-and-swap against the pin the fired row recorded."""
        row = self._run_alone(
            self._start_statement, fire_id=fire_instance_id, worker=worker_name, now=self._now()
        )
        if row is None:
            return None
        if row.preferred_node_auto and row.preferred_node != worker_name:
            self._log_auto_pin(row, worker_name, claimed=bool(row.claimed))
        return self._started(row)

    @functools.cached_property
    def _start_statement(self) -> CompiledStatement:
        """``WITH started AS (UPDATE fired … RETURNING …), claimed AS (UPDATE triggers … FROM
        started …) SELECT started.*, count(claimed)`` with parameters ``fire_id``, ``worker``
        and ``now`` (built once)."""
        f, t = self.tables.fired_triggers, self.tables.triggers
        worker = bindparam("worker", type_=String)
        started = (
            update(f)
            .where(
                self._scoped(f),
                f.c.fire_instance_id == bindparam("fire_id", type_=String),
                or_(f.c.state == FiringState.FIRED, f.c.state == FiringState.PUBLISHED),
            )
            .values(
                state=FiringState.EXECUTING,
                worker_name=worker,
                started_time=bindparam("now", type_=BigInteger),
            )
            .returning(
                f.c.trigger_name,
                f.c.trigger_group,
                f.c.preferred_node,
                f.c.preferred_node_auto,
                f.c.is_nonconcurrent,
                f.c.requests_recovery,
            )
            .cte("started")
        )
        claimed = (
            update(t)
            .where(
                self._scoped(t),
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
        return self._compiled(
            select(
                started.c.trigger_name,
                started.c.trigger_group,
                started.c.preferred_node,
                started.c.preferred_node_auto,
                started.c.is_nonconcurrent,
                started.c.requests_recovery,
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
        self._log_auto_pin(fired, worker_name, claimed=bool(claimed))

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
                        self._scoped(f),
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
        """Finish a firing: remove its row and release what waited on it (Quartz's
        ``triggeredJobComplete``). ``job_data`` is written back to a job that persists its data.
        A ``failed`` firing also gets its retry, when its trigger's retry policy grants one
        (:meth:`_schedule_retry_firing`). Returns False if the firing was not executing (already
        done, or recovered). An ``outcome`` is kept on the trigger as its last one, by the
        release's own read of the trigger (:meth:`_release_after_firing`).

        Race settled: completion against recovery of the same firing; the delete is conditional on
        EXECUTING, so exactly one of them acts. The retry is written in the same transaction, so a
        crash leaves either the firing in flight or the retry scheduled, never both or neither.
        """
        failed = failed or (outcome is not None and outcome.failed)
        if (
            job_data is None
            and not failed
            and self.dialect == "postgresql"
            and self._complete_alone(fire_instance_id, outcome)
        ):
            return True
        j = self.tables.jobs
        with self.transaction() as conn:
            row = self._remove_executing(conn, fire_instance_id)
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
            self._release_after_firing(conn, row, outcome)
        return True

    def _complete_alone(self, fire_instance_id: str, outcome: FiringOutcome | None) -> bool:
        """PostgreSQL: the common completion as one statement committed on its own: the fired
        row removed when its end releases nothing (its job allows concurrent firings, and its
        trigger is not COMPLETE). False when that does not hold, or when the firing is not
        executing: the caller's transaction then does the whole completion. One round trip
        instead of three. With a (successful) ``outcome`` the same statement keeps the success
        on the trigger as its last outcome."""
        if outcome is not None:
            finished = outcome.finished_millis
            done = self._run_alone(
                self._complete_recorded_statement,
                fire_id=fire_instance_id,
                now=self._now() if finished is None else finished,
            )
        else:
            done = self._run_alone(self._complete_alone_statement, fire_id=fire_instance_id)
        return done is not None

    @functools.cached_property
    def _complete_alone_statement(self) -> CompiledStatement:
        return self._compiled(self._complete_alone_delete)

    @functools.cached_property
    def _complete_recorded_statement(self) -> CompiledStatement:
        """``WITH gone AS (DELETE … RETURNING …), recorded AS (UPDATE triggers … last outcome
        FROM gone) SELECT …``: the completion and its success kept on the trigger, one
        statement (parameters ``fire_id`` and ``now``)."""
        gone = self._complete_alone_delete.cte("gone")
        recorded = self._success_recorded(
            gone, gone.c.started_time, bindparam("now", type_=BigInteger)
        )
        return self._compiled(
            select(
                gone.c.fire_instance_id,
                select(func.count()).select_from(recorded).scalar_subquery().label("recorded"),
            )
        )

    def _success_recorded(
        self, ended: Any, started: Any, finished: Any, *conditions: ColumnElement[bool]
    ) -> Any:
        """``recorded AS (UPDATE triggers SET last outcome = success … FROM ended …
        RETURNING trigger_name)``: a success kept on the trigger of each row of ``ended`` (a
        CTE with the fired row's key) that meets ``conditions``."""
        t = self.tables.triggers
        return (
            update(t)
            .where(
                t.c.sched_name == ended.c.sched_name,
                t.c.trigger_name == ended.c.trigger_name,
                t.c.trigger_group == ended.c.trigger_group,
                *conditions,
            )
            .values(
                {
                    **outcome_columns(t, FiringOutcome(), None, 0),
                    "last_started_time": started,
                    "last_finished_time": finished,
                }
            )
            .returning(t.c.trigger_name)
            .cte("recorded")
        )

    def complete_executions(self, finished: Sequence[FinishedExecution]) -> int:
        """Record the successful ends of several executions (see the abstract method). On
        PostgreSQL those whose end releases nothing go in one statement committed on its own:
        their rows removed, and each trigger's latest success kept as its last outcome; the
        rest, and every end on another database, one by one as :meth:`complete_execution`."""
        done: set[str] = set()
        if finished and self.dialect == "postgresql":
            row = self._run_alone(
                self._complete_batch_statement,
                ids=[item.fire_instance_id for item in finished],
                finished=[item.finished_millis for item in finished],
            )
            assert row is not None  # an aggregate: one row, whatever it removed
            done = set(row.done or ())
        return len(done) + sum(
            self.complete_execution(
                item.fire_instance_id, outcome=FiringOutcome(finished_millis=item.finished_millis)
            )
            # In the order they finished: each trigger keeps its latest.
            for item in sorted(finished, key=lambda item: item.finished_millis)
            if item.fire_instance_id not in done
        )

    @functools.cached_property
    def _complete_batch_statement(self) -> CompiledStatement:
        """``WITH gone AS (DELETE fired USING unnest(ids, finished) … RETURNING …), latest AS
        (them ranked by finish per trigger), recorded AS (UPDATE triggers … last outcome,
        unless a later finish is already kept) SELECT array_agg(gone's ids), count(recorded)``
        (parameters ``ids`` and ``finished``, arrays of the same length)."""
        f, t = self.tables.fired_triggers, self.tables.triggers
        ended = (
            func.unnest(
                bindparam("ids", type_=ARRAY(String)),
                bindparam("finished", type_=ARRAY(BigInteger)),
            )
            .table_valued("fire_instance_id", "finished_time")
            .render_derived(name="ended")
        )
        gone = (
            delete(f)
            .where(
                self._scoped(f),
                f.c.fire_instance_id == ended.c.fire_instance_id,
                *self._ends_alone(f),
            )
            .returning(
                f.c.fire_instance_id,
                f.c.sched_name,
                f.c.trigger_name,
                f.c.trigger_group,
                f.c.started_time,
                ended.c.finished_time,
            )
            .cte("gone")
        )
        key = (gone.c.sched_name, gone.c.trigger_name, gone.c.trigger_group)
        latest = select(
            *key,
            gone.c.started_time,
            gone.c.finished_time,
            func.row_number()
            .over(partition_by=key, order_by=gone.c.finished_time.desc())
            .label("rank"),
        ).cte("latest")
        recorded = self._success_recorded(
            latest,
            latest.c.started_time,
            latest.c.finished_time,
            latest.c.rank == 1,
            func.coalesce(t.c.last_finished_time, 0) <= latest.c.finished_time,
        )
        return self._compiled(
            select(
                select(func.array_agg(gone.c.fire_instance_id)).scalar_subquery().label("done"),
                select(func.count()).select_from(recorded).scalar_subquery().label("recorded"),
            )
        )

    def executing_task_ids(self, worker_name: str) -> dict[str, str]:
        f = self.tables.fired_triggers
        with self.transaction() as conn:
            rows = conn.execute(
                select(f.c.fire_instance_id, f.c.expired_count).where(
                    self._scoped(f),
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
        """End a firing whose pool process stopped on ``worker_name`` (see the abstract
        method): ``"recovered"``, ``"interrupted"``, ``"failed"``, or None when it is not
        executing there."""
        with self.transaction() as conn:
            row = self._remove_executing(conn, fire_instance_id, worker_name=worker_name)
            if row is None:
                return None
            now = self._now()
            if loss is ProcessLoss.CRASHED:
                recovered = self._resolve_dead_execution(conn, row, now, outcome)
                ended = "recovered" if recovered else "interrupted"
            elif loss is ProcessLoss.TIMED_OUT:
                # Before the release, as for any failure (see complete_execution).
                self._schedule_retry_firing(conn, row, now)
                self._release_after_firing(conn, row, outcome)
                ended = "failed"
            else:
                self._release_after_firing(conn, row, outcome)
                ended = "interrupted"
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
                "recovered": "recovery firing scheduled",
                "interrupted": "closed as interrupted",
            }[ended],
        )
        return ended

    def _ends_alone(self, f: Any) -> list[ColumnElement[bool]]:
        """The fired rows whose end releases nothing: executing, of a job that allows
        concurrent executions, and of a trigger that is not COMPLETE."""
        t = self.tables.triggers
        trigger_complete = (
            select(t.c.trigger_name)
            .where(
                t.c.sched_name == f.c.sched_name,
                t.c.trigger_name == f.c.trigger_name,
                t.c.trigger_group == f.c.trigger_group,
                t.c.trigger_state == TriggerState.COMPLETE,
            )
            .exists()
        )
        return [
            f.c.state == FiringState.EXECUTING,
            f.c.is_nonconcurrent.is_(False),
            ~trigger_complete,
        ]

    @functools.cached_property
    def _complete_alone_delete(self) -> Any:
        """The fired row removed when its end releases nothing; its key and start returned."""
        f = self.tables.fired_triggers
        return (
            delete(f)
            .where(
                self._scoped(f),
                f.c.fire_instance_id == bindparam("fire_id", type_=String),
                *self._ends_alone(f),
            )
            .returning(
                f.c.fire_instance_id,
                f.c.sched_name,
                f.c.trigger_name,
                f.c.trigger_group,
                f.c.started_time,
            )
        )
