"""The run history's rows (docs/history.md), written by every end of a firing and by every
decision that an occurrence does not run, in the transaction of that end or decision: one
``history`` row and, for a run, the ``run_status`` of its job and of its trigger.

Nothing is written when the history is off (``quartz_history_retention = 0``,
:attr:`~celery_quartz.store.sql._context.SqlContext.record_history`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Connection,
    Row,
    and_,
    case,
    cast,
    func,
    insert,
    literal,
    select,
    true,
    union_all,
)
from sqlalchemy import String as SqlString
from sqlalchemy.dialects import postgresql, sqlite

from celery_quartz.firing import message_task_id
from celery_quartz.history import (
    FAILURE_RESULTS,
    MAX_ARGUMENTS_BYTES,
    MAX_ERROR_MESSAGE_CHARS,
    MAX_ERROR_TYPE_CHARS,
    RunResult,
)
from celery_quartz.keys import BACKFILL_JOBS_GROUP, JobKey, TriggerKey
from celery_quartz.store.schema import SUMMARY_TEXT
from celery_quartz.store.sql._context import SqlContext
from celery_quartz.store.views import FiringOutcome

#: ``run_status.kind`` of a job's status and of a trigger's.
JOB = "job"
TRIGGER = "trigger"


@dataclass(frozen=True)
class Occurrence:
    """What the history row of a firing says of its occurrence and job, read before the end
    releases anything (a finished one-shot trigger is removed there): the original trigger and
    scheduled time (a retry or recovery firing's origin), the task and its arguments."""

    trigger_key: TriggerKey
    scheduled_millis: int
    task_name: str | None
    args: str | None
    kwargs: str | None
    #: What its start lateness counts from: the scheduled time, but for a backfill's firing
    #: when that firing was due (a past slot would count days late and skew the statistics).
    due_millis: int | None = None

    def lateness(self, started: int | None) -> int | None:
        """How late (ms) a start at ``started`` is: from ``due_millis``, else the scheduled
        time."""
        return None if started is None else started - (self.due_millis or self.scheduled_millis)


class HistoryRows:
    """The history rows and run statuses of one store, written inside the callers'
    transactions (the worker's ends, the recovery of dead workers, the misfire handler)."""

    def __init__(self, sql: SqlContext) -> None:
        self.sql = sql

    @property
    def enabled(self) -> bool:
        return self.sql.record_history

    # -- runs --------------------------------------------------------------------------------

    def occurrence(self, conn: Connection, fired: Row[Any]) -> Occurrence | None:
        """The occurrence of the fired row ``fired`` (None when history is off)."""
        if not self.enabled:
            return None
        t, j = self.sql.tables.triggers, self.sql.tables.jobs
        # One read: the job, with its trigger's origin (a retry or recovery firing's) joined;
        # the trigger alone when the job is gone.
        origin_columns = (t.c.origin_trigger_name, t.c.origin_trigger_group, t.c.origin_sched_time)
        trigger_key = TriggerKey(fired.trigger_name, fired.trigger_group)
        job: Any = None
        origin: Any = None
        if fired.job_name is not None:
            job = origin = conn.execute(
                select(j.c.task_name, j.c.args, j.c.kwargs, *origin_columns)
                .select_from(j)
                .outerjoin(
                    t,
                    and_(
                        t.c.sched_name == j.c.sched_name,
                        t.c.trigger_name == trigger_key.name,
                        t.c.trigger_group == trigger_key.group,
                    ),
                )
                .where(self.sql.job_key(JobKey(fired.job_name, fired.job_group)))
            ).first()
        if job is None:
            origin = conn.execute(
                select(*origin_columns).where(self.sql.trigger_key(trigger_key))
            ).first()
        key = TriggerKey(fired.trigger_name, fired.trigger_group)
        scheduled = fired.sched_time
        if origin is not None and origin.origin_trigger_name is not None:
            key = TriggerKey(origin.origin_trigger_name, origin.origin_trigger_group)
            scheduled = origin.origin_sched_time
        return Occurrence(
            trigger_key=key,
            scheduled_millis=scheduled,
            due_millis=fired.sched_time if fired.trigger_group == BACKFILL_JOBS_GROUP else None,
            task_name=None if job is None else job.task_name,
            args=None if job is None else _bounded_arguments(job.args),
            kwargs=None if job is None else _bounded_arguments(job.kwargs),
        )

    def record_run(
        self,
        conn: Connection,
        fired: Row[Any],
        occurrence: Occurrence | None,
        result: RunResult,
        outcome: FiringOutcome | None = None,
        finished_millis: int | None = None,
    ) -> None:
        """The history row of the execution ``fired`` ended with ``result`` (its row removed,
        ``occurrence`` read by :meth:`occurrence` before), and the run status of its job and
        trigger folded in. ``finished_millis`` defaults to the outcome's finish, then now."""
        if occurrence is None or not self.enabled:
            return
        outcome = outcome or FiringOutcome()
        now = self.sql.now()
        finished = finished_millis or outcome.finished_millis or now
        started = fired.started_time
        conn.execute(
            insert(self.sql.tables.history).values(
                sched_name=self.sql.scheduler_name,
                event_time=finished,
                result=result.value,
                trigger_name=occurrence.trigger_key.name,
                trigger_group=occurrence.trigger_key.group,
                job_name=fired.job_name,
                job_group=fired.job_group,
                scheduled_time=occurrence.scheduled_millis,
                fire_instance_id=fired.fire_instance_id,
                task_name=occurrence.task_name,
                task_id=message_task_id(fired.fire_instance_id, fired.expired_count),
                published_time=fired.published_time,
                started_time=started,
                finished_time=finished,
                duration_ms=None if started is None else finished - started,
                lateness_ms=occurrence.lateness(started),
                error_type=_cut(outcome.error_type, MAX_ERROR_TYPE_CHARS),
                error_message=_cut(outcome.error_message, MAX_ERROR_MESSAGE_CHARS),
                worker_name=fired.worker_name,
                instance_name=fired.instance_name,
                retry_attempt=fired.retry_attempt,
                recovering=bool(fired.recovering),
                summary=outcome.summary,
                metrics=outcome.metrics,
                args=occurrence.args,
                kwargs=occurrence.kwargs,
                unfolded=True,
            )
        )
        status = {
            "sched_name": self.sql.scheduler_name,
            "since_time": now,
            "last_run_time": finished,
            "last_result": result.value,
            "last_success_time": finished if result is RunResult.SUCCEEDED else None,
            "consecutive_failures": 1 if result in FAILURE_RESULTS else 0,
            "runs": 1,
            "failures": 1 if result in FAILURE_RESULTS else 0,
        }
        rows = [
            {
                **status,
                "kind": TRIGGER,
                "key_group": occurrence.trigger_key.group,
                "key_name": occurrence.trigger_key.name,
            },
        ]
        if fired.job_name is not None:
            rows.append(
                {**status, "kind": JOB, "key_group": fired.job_group, "key_name": fired.job_name}
            )
        conn.execute(self._fold_status(self._status_insert().values(rows)))

    # -- what did not run --------------------------------------------------------------------

    def record_not_run(
        self,
        conn: Connection,
        result: RunResult,
        reason: str,
        *,
        trigger_key: TriggerKey,
        job_key: JobKey | None,
        scheduled_millis: int | None,
        instance_name: str | None,
        fired: Row[Any] | None = None,
        occurrence: Occurrence | None = None,
    ) -> None:
        """The history row of an occurrence that did not run: ``result`` (one of
        :data:`~celery_quartz.history.NOT_RUN_RESULTS`), why, and the scheduler instance that
        decided it; with the firing's identity when there was one (``fired``, whose
        ``occurrence`` then names the original trigger and time). No run status is written.

        The writers: the misfire instruction applied (``misfired``, or ``held`` for what an
        execution limit or ``disallow_concurrent`` held back; :meth:`~celery_quartz.store.sql.
        _definitions.Definitions.apply_misfire`) and an expired message (``expired``;
        :meth:`record_expired`), and the overlap policy's ``skipped``, where the claim decides
        it (:class:`~celery_quartz.store.sql._overlaps.Overlaps`)."""
        if not self.enabled:
            return
        assert not result.ran
        now = self.sql.now()
        values: dict[str, Any] = {
            "sched_name": self.sql.scheduler_name,
            "event_time": now,
            "result": result.value,
            "trigger_name": trigger_key.name,
            "trigger_group": trigger_key.group,
            "job_name": None if job_key is None else job_key.name,
            "job_group": None if job_key is None else job_key.group,
            "scheduled_time": scheduled_millis,
            "instance_name": instance_name,
            "reason": _cut(reason, SUMMARY_TEXT),
            "unfolded": True,
        }
        if occurrence is not None:
            values.update(
                trigger_name=occurrence.trigger_key.name,
                trigger_group=occurrence.trigger_key.group,
                scheduled_time=occurrence.scheduled_millis,
                task_name=occurrence.task_name,
                args=occurrence.args,
                kwargs=occurrence.kwargs,
            )
        if fired is not None:
            values.update(
                fire_instance_id=fired.fire_instance_id,
                task_id=message_task_id(fired.fire_instance_id, fired.expired_count),
                published_time=fired.published_time,
                retry_attempt=fired.retry_attempt,
                recovering=bool(fired.recovering),
            )
        conn.execute(insert(self.sql.tables.history).values(values))

    def record_expired(
        self,
        conn: Connection,
        fired: Row[Any],
        reason: str,
        instance_name: str,
        occurrence: Occurrence | None = None,
    ) -> None:
        """The history row of the firing ``fired`` whose message expired unstarted: dropped, or
        published again (``reason`` says which), decided by ``instance_name``."""
        if not self.enabled:
            return
        self.record_not_run(
            conn,
            RunResult.EXPIRED,
            reason,
            trigger_key=TriggerKey(fired.trigger_name, fired.trigger_group),
            job_key=None if fired.job_name is None else JobKey(fired.job_name, fired.job_group),
            scheduled_millis=fired.sched_time,
            instance_name=instance_name,
            fired=fired,
            occurrence=occurrence or self.occurrence(conn, fired),
        )

    # -- PostgreSQL's batch of successes -----------------------------------------------------

    def batch_ctes(self, gone: Any, now: Any) -> list[Any]:
        """The CTEs that record a batch of successes in the completion's one statement (see
        :meth:`~celery_quartz.store.sql.worker.WorkerSql._complete_statement`): the history
        rows of ``gone`` (a CTE of the removed fired rows with ``finished_time``,
        ``summary`` and ``metrics``) and the run statuses of their jobs and triggers, each
        key's successes aggregated (one upsert may not touch a row twice). ``now`` is the
        statement's parameter for a finish not given and the statuses' first write."""
        t, j = self.sql.tables.triggers, self.sql.tables.jobs
        h = self.sql.tables.history
        finished = func.coalesce(gone.c.finished_time, now)
        info = (
            select(
                gone.c.fire_instance_id,
                gone.c.sched_name,
                gone.c.job_name,
                gone.c.job_group,
                func.coalesce(t.c.origin_trigger_name, gone.c.trigger_name).label("o_name"),
                func.coalesce(t.c.origin_trigger_group, gone.c.trigger_group).label("o_group"),
                func.coalesce(t.c.origin_sched_time, gone.c.sched_time).label("scheduled"),
                case((gone.c.trigger_group == BACKFILL_JOBS_GROUP, gone.c.sched_time)).label("due"),
                gone.c.published_time,
                gone.c.started_time,
                finished.label("finished"),
                gone.c.worker_name,
                gone.c.instance_name,
                gone.c.retry_attempt,
                gone.c.recovering,
                gone.c.expired_count,
                gone.c.summary,
                gone.c.metrics,
                j.c.task_name,
                j.c.args,
                j.c.kwargs,
            )
            .select_from(gone)
            .outerjoin(
                t,
                and_(
                    t.c.sched_name == gone.c.sched_name,
                    t.c.trigger_name == gone.c.trigger_name,
                    t.c.trigger_group == gone.c.trigger_group,
                ),
            )
            .outerjoin(
                j,
                and_(
                    j.c.sched_name == gone.c.sched_name,
                    j.c.job_name == gone.c.job_name,
                    j.c.job_group == gone.c.job_group,
                ),
            )
            .cte("ended_info")
        )
        task_id = case(
            (info.c.expired_count == 0, info.c.fire_instance_id),
            else_=info.c.fire_instance_id + literal(".r") + cast(info.c.expired_count, SqlString),
        )
        columns = {
            "sched_name": info.c.sched_name,
            "event_time": info.c.finished,
            "result": literal(RunResult.SUCCEEDED.value),
            "trigger_name": info.c.o_name,
            "trigger_group": info.c.o_group,
            "job_name": info.c.job_name,
            "job_group": info.c.job_group,
            "scheduled_time": info.c.scheduled,
            "fire_instance_id": info.c.fire_instance_id,
            "task_name": info.c.task_name,
            "task_id": task_id,
            "published_time": info.c.published_time,
            "started_time": info.c.started_time,
            "finished_time": info.c.finished,
            "duration_ms": info.c.finished - info.c.started_time,
            "lateness_ms": info.c.started_time - func.coalesce(info.c.due, info.c.scheduled),
            "worker_name": info.c.worker_name,
            "instance_name": info.c.instance_name,
            "retry_attempt": info.c.retry_attempt,
            "recovering": info.c.recovering,
            "summary": info.c.summary,
            "metrics": info.c.metrics,
            "args": _bounded_in_sql(info.c.args),
            "kwargs": _bounded_in_sql(info.c.kwargs),
            "unfolded": true(),
        }
        recorded = (
            insert(h)
            .from_select(list(columns), select(*columns.values()))
            .returning(h.c.history_id)
            .cte("history_recorded")
        )
        keys = union_all(
            select(
                info.c.sched_name,
                literal(TRIGGER).label("kind"),
                info.c.o_group.label("key_group"),
                info.c.o_name.label("key_name"),
                info.c.finished,
            ),
            select(
                info.c.sched_name,
                literal(JOB).label("kind"),
                info.c.job_group,
                info.c.job_name,
                info.c.finished,
            ).where(info.c.job_name.is_not(None)),
        ).subquery("status_keys")
        last = func.max(keys.c.finished)
        folded = (
            self._fold_status(
                self._status_insert().from_select(
                    [
                        "sched_name",
                        "kind",
                        "key_group",
                        "key_name",
                        "since_time",
                        "last_run_time",
                        "last_result",
                        "last_success_time",
                        "consecutive_failures",
                        "runs",
                        "failures",
                    ],
                    select(
                        keys.c.sched_name,
                        keys.c.kind,
                        keys.c.key_group,
                        keys.c.key_name,
                        now,
                        last,
                        literal(RunResult.SUCCEEDED.value),
                        last,
                        literal(0),
                        func.count(),
                        literal(0),
                    ).group_by(keys.c.sched_name, keys.c.kind, keys.c.key_group, keys.c.key_name),
                )
            )
            .returning(self.sql.tables.run_status.c.kind)
            .cte("status_folded")
        )
        return [recorded, folded]

    # -- run status --------------------------------------------------------------------------

    def _status_insert(self) -> Any:
        rs = self.sql.tables.run_status
        if self.sql.dialect == "postgresql":
            return postgresql.insert(rs)
        return sqlite.insert(rs)

    def _fold_status(self, statement: Any) -> Any:
        """``statement`` (an insert of run statuses) folding into the existing ones: counts
        added, the later run kept as the last, failures in a row reset by a success and counted
        up by a failure (a result of neither kind leaves them)."""
        rs = self.sql.tables.run_status
        new = statement.excluded
        later = func.coalesce(rs.c.last_run_time, 0) <= new.last_run_time
        return statement.on_conflict_do_update(
            index_elements=[rs.c.sched_name, rs.c.kind, rs.c.key_group, rs.c.key_name],
            set_={
                "last_run_time": case((later, new.last_run_time), else_=rs.c.last_run_time),
                "last_result": case((later, new.last_result), else_=rs.c.last_result),
                "last_success_time": case(
                    (
                        and_(
                            new.last_success_time.is_not(None),
                            func.coalesce(rs.c.last_success_time, 0) <= new.last_success_time,
                        ),
                        new.last_success_time,
                    ),
                    else_=rs.c.last_success_time,
                ),
                "consecutive_failures": case(
                    (new.last_success_time.is_not(None), new.consecutive_failures),
                    else_=rs.c.consecutive_failures + new.consecutive_failures,
                ),
                "runs": rs.c.runs + new.runs,
                "failures": rs.c.failures + new.failures,
            },
        )


def _cut(text: str | None, width: int) -> str | None:
    return None if text is None else text[:width]


def _bounded_arguments(encoded: str | None) -> str | None:
    """A run's args (or kwargs) as JSON, None when over :data:`MAX_ARGUMENTS_BYTES`."""
    if encoded is None or len(encoded.encode()) > MAX_ARGUMENTS_BYTES:
        return None
    return encoded


def _bounded_in_sql(encoded: Any) -> Any:
    return case((func.octet_length(encoded) <= MAX_ARGUMENTS_BYTES, encoded), else_=None)
