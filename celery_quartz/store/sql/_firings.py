"""The end of a firing (:class:`FiringEnds`), shared by the worker's completion, the recovery of
dead workers and the misfire handler: what it releases, and the recovery and retry firings it may
leave behind."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    Connection,
    Row,
    and_,
    delete,
    select,
    tuple_,
    update,
)

from celery_quartz.clock import from_millis
from celery_quartz.firing import Firing, backfill_slot_of, run_arguments
from celery_quartz.history import RunResult
from celery_quartz.keys import JobKey, TriggerKey
from celery_quartz.store.schema import (
    FiringState,
    TriggerState,
)
from celery_quartz.store.sql._again import OccurrenceAgain
from celery_quartz.store.sql._audit import AuditTrail
from celery_quartz.store.sql._context import SqlContext
from celery_quartz.store.sql._definitions import Definitions
from celery_quartz.store.sql._history_rows import HistoryRows
from celery_quartz.store.sql._overlaps import HeldOccurrences
from celery_quartz.store.sql._rows import (
    Rows,
    origin_key,
    outcome_columns,
    routed_node,
    same_job,
)
from celery_quartz.store.views import FiringOutcome
from celery_quartz.triggers.base import (
    MisfireInstruction,
)

logger = logging.getLogger(__name__)


class FiringEnds:
    """What a firing's end releases, and the one-shot firings that run an occurrence again."""

    def __init__(
        self, sql: SqlContext, rows: Rows, definitions: Definitions, audit: AuditTrail
    ) -> None:
        self.sql = sql
        self.rows = rows
        self.definitions = definitions
        #: The recovery and retry firings an end may leave behind.
        self.again = OccurrenceAgain(sql, rows, definitions, audit)
        #: The run history's rows, written by every end (shared with the misfire handler).
        self.history: HistoryRows = definitions.history
        #: The occurrences ``buffer_one`` held, released by the end of the firing they waited for.
        self.held = HeldOccurrences(sql, definitions)

    def release(
        self,
        conn: Connection,
        instance_name: str,
        fire_ids: Sequence[str] | None,
        *,
        keep: Sequence[str] = (),
    ) -> int:
        t, f = self.sql.tables.triggers, self.sql.tables.fired_triggers
        where = [
            self.sql.scoped(f),
            f.c.instance_name == instance_name,
            f.c.state == FiringState.ACQUIRED,
        ]
        if fire_ids is not None:
            where.append(f.c.fire_instance_id.in_(list(fire_ids)))
        if keep:
            where.append(f.c.fire_instance_id.not_in(list(keep)))
        rows = conn.execute(
            delete(f).where(*where).returning(f.c.trigger_name, f.c.trigger_group)
        ).all()
        if rows:
            conn.execute(
                update(t)
                .where(
                    self.sql.scoped(t),
                    tuple_(t.c.trigger_name, t.c.trigger_group).in_(
                        [(r.trigger_name, r.trigger_group) for r in rows]
                    ),
                    t.c.trigger_state == TriggerState.ACQUIRED,
                )
                .values(trigger_state=TriggerState.WAITING)
            )
        return len(rows)

    def drop_firing(self, conn: Connection, row: Row[Any], why: str) -> bool:
        """Remove a fired row (if still there) and release what waited on it."""
        f = self.sql.tables.fired_triggers
        gone = conn.execute(
            delete(f).where(self.sql.scoped(f), f.c.fire_instance_id == row.fire_instance_id)
        ).rowcount
        if gone:
            self.release_after_firing(conn, row)
            logger.info(
                "firing %s of trigger %s.%s (scheduled %s) dropped: %s",
                row.fire_instance_id,
                row.trigger_group,
                row.trigger_name,
                from_millis(row.sched_time).isoformat(),
                why,
            )
        return bool(gone)

    def remove_executing(
        self, conn: Connection, fire_instance_id: str, *, worker_name: str | None = None
    ) -> Row[Any] | None:
        """Remove the fired row of ``fire_instance_id`` if it is still EXECUTING (on
        ``worker_name``, when given): the row, or None. Every end of an execution goes through
        this conditional delete, so of a completion and a recovery of the same firing exactly
        one acts."""
        f = self.sql.tables.fired_triggers
        where = [
            self.sql.scoped(f),
            f.c.fire_instance_id == fire_instance_id,
            f.c.state == FiringState.EXECUTING,
        ]
        if worker_name is not None:
            where.append(f.c.worker_name == worker_name)
        return conn.execute(delete(f).where(*where).returning(f)).first()

    def resolve_dead_execution(
        self, conn: Connection, row: Row[Any], now: int, outcome: FiringOutcome | None = None
    ) -> bool:
        """An execution whose process died, its row removed: a recovery firing when its job
        requests recovery (True, recorded as ``recovered``), otherwise closed as interrupted
        (False, ``interrupted``); then what it held is released, keeping ``outcome`` as its
        trigger's last when given."""
        occurrence = self.history.occurrence(conn, row)
        recovered = bool(row.requests_recovery) and self.again.schedule_recovery_firing(
            conn, row, now
        )
        result = RunResult.RECOVERED if recovered else RunResult.INTERRUPTED
        self.history.record_run(conn, row, occurrence, result, outcome, now)
        self.release_after_firing(conn, row, outcome)
        return recovered

    def end_execution(
        self,
        conn: Connection,
        row: Row[Any],
        outcome: FiringOutcome | None,
        *,
        failed: bool = False,
        cancelled: bool = False,
    ) -> RunResult:
        """An execution that ended on its worker, its row removed: a failure handed to the
        retry policy (``retried`` when a retry is scheduled, otherwise ``failed``), a cancel,
        or a success; recorded in the history, then what it held released, keeping
        ``outcome`` as its trigger's last when given. The result recorded."""
        occurrence = self.history.occurrence(conn, row)
        if cancelled:
            result = RunResult.CANCELLED
        elif failed:
            # Before the release: a finished one-shot trigger is removed there, and the retry
            # reads its policy and data (and keeps a non-durable job alive).
            retried = self.again.schedule_retry_firing(conn, row, self.sql.now(), outcome)
            result = RunResult.RETRIED if retried else RunResult.FAILED
        else:
            result = RunResult.SUCCEEDED
        self.history.record_run(conn, row, occurrence, result, outcome)
        self.release_after_firing(conn, row, outcome)
        return result

    def release_after_firing(
        self, conn: Connection, row: Row[Any], outcome: FiringOutcome | None = None
    ) -> None:
        """What a firing's end releases: its job's blocked triggers, and a finished (COMPLETE)
        trigger once its last firing in flight has ended. With an ``outcome``, the read of the
        trigger's state is an update that keeps the outcome on the trigger (one statement
        either way)."""
        t = self.sql.tables.triggers
        if row.is_nonconcurrent and row.job_name is not None:
            self._unblock_triggers(conn, JobKey(row.job_name, row.job_group), row.worker_name)
        trigger_key = TriggerKey(row.trigger_name, row.trigger_group)
        if outcome is None:
            # Locked: a claim holding the row (an overlap's hold) commits first.
            read: Any = select(t.c.trigger_state).where(self.sql.trigger_key(trigger_key))
            read = read.with_for_update()
        else:
            read = (
                update(t)
                .where(self.sql.trigger_key(trigger_key))
                .values(
                    outcome_columns(
                        t,
                        outcome,
                        row.started_time,
                        self.sql.now()
                        if outcome.finished_millis is None
                        else outcome.finished_millis,
                    )
                )
                .returning(t.c.trigger_state)
            )
        state = conn.execute(read).scalar_one_or_none()
        if state == TriggerState.COMPLETE:
            self.definitions.finish_trigger(conn, trigger_key)
        else:
            self.held.release(conn, trigger_key, state, row.worker_name)

    def _unblock_triggers(self, conn: Connection, job: JobKey, decided_by: str | None) -> None:
        """A disallow_concurrent job's firing ended: its other triggers may fire again. One made
        late by the block gets its misfire instruction on the spot (Quartz 4.x), its occurrence
        recorded as ``held`` (by ``disallow_concurrent``), decided by ``decided_by`` (the node
        whose end released it)."""
        t = self.sql.tables.triggers
        of_job = self.sql.triggers_of_job(job)
        now = self.sql.now()
        late = conn.execute(
            select(t).where(
                of_job,
                t.c.trigger_state == TriggerState.BLOCKED,
                t.c.misfire_instr != MisfireInstruction.IGNORE_MISFIRE_POLICY,
                t.c.next_fire_time < now - self.sql.misfire_threshold_ms,
            )
        ).all()
        for row in late:
            self.definitions.apply_misfire(
                conn,
                row,
                now,
                ", blocked by its job's running firing,",
                decided_by=decided_by,
                held_by=f"disallow_concurrent: a firing of job {job} was running",
            )
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

    def firings_to_publish(self, conn: Connection, where: Any, instance_name: str) -> list[Firing]:
        f, j, t = self.sql.tables.fired_triggers, self.sql.tables.jobs, self.sql.tables.triggers
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
            .outerjoin(j, same_job(j, f))
            .outerjoin(
                t,
                and_(
                    t.c.sched_name == f.c.sched_name,
                    t.c.trigger_name == f.c.trigger_name,
                    t.c.trigger_group == f.c.trigger_group,
                ),
            )
            .where(self.sql.scoped(f), where)
        ).all()
        firings = []
        for r in rows:
            if r.task_name is None:
                self.drop_firing(conn, r, "its job no longer exists")
                continue
            firings.append(_firing(r, self.sql.scheduler_name, instance_name))
        return firings


def _firing(r: Any, scheduler_name: str, instance_name: str) -> Firing:
    """The firing to publish of a fired row read with its job and trigger."""
    raw_data = json.loads(r.trigger_data or "{}")
    args, kwargs, trigger_data = run_arguments(json.loads(r.args), json.loads(r.kwargs), raw_data)
    return Firing(
        fire_instance_id=r.fire_instance_id,
        scheduler_name=scheduler_name,
        task=r.task_name,
        args=args,
        kwargs=kwargs,
        options=json.loads(r.options),
        job_key=JobKey(r.job_name, r.job_group),
        trigger_key=TriggerKey(r.trigger_name, r.trigger_group),
        scheduled_millis=(r.origin_sched_time if r.origin_sched_time is not None else r.sched_time),
        fired_millis=r.fired_time,
        fired_by=instance_name,
        job_data=json.loads(r.job_data),
        trigger_data=trigger_data,
        expires_millis=r.expires_time,
        expired_count=r.expired_count,
        recovering=r.recovering,
        retry_attempt=r.retry_attempt,
        refire_count=r.refire_count,
        origin_trigger_key=origin_key(r),
        persist_job_data=r.is_update_data,
        queue=r.queue,
        node=routed_node(r),
        backfill_slot_millis=backfill_slot_of(raw_data),
    )
