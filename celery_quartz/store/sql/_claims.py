"""A claim's batch, for the scheduling loop's role (:mod:`~celery_quartz.store.sql.scheduling`):
its selection and admission, its fired rows, its triggers advanced, its publication recorded."""

from __future__ import annotations

import copy
import dataclasses
import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import (
    BigInteger,
    Connection,
    Integer,
    Row,
    String,
    and_,
    bindparam,
    column,
    func,
    insert,
    literal,
    or_,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY

from celery_quartz.firing import (
    AcquiredFiring,
    Firing,
    backfill_slot_of,
    new_ids,
    run_arguments,
)
from celery_quartz.keys import JobKey, TriggerKey
from celery_quartz.overlap import OverlapPolicy
from celery_quartz.routing import Admission, HeldBack, Router, take_batch
from celery_quartz.store.records import Claim
from celery_quartz.store.schema import ERROR_TEXT, FiringState, TriggerState
from celery_quartz.store.sql._context import SqlContext
from celery_quartz.store.sql._history_rows import HistoryRows
from celery_quartz.store.sql._overlaps import Overlaps, policy_of
from celery_quartz.store.sql._rows import (
    Rows,
    in_acquisition_order,
    job_record_from_row,
    json_rows,
    millis_or_none,
    origin_key,
    pin_columns,
    recordset,
    same_job,
    trigger_from_row,
    tuple_rows,
)
from celery_quartz.triggers.base import MisfireInstruction

logger = logging.getLogger(__name__)

#: The columns of a fired row that are its own in a batch (the rest the batch's rows share).
_FIRED_ROW_COLUMNS = (
    "fire_instance_id",
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


class Claims:
    """The statements of a claim and a firing of its batch, inside the role's transactions."""

    def __init__(self, sql: SqlContext, rows: Rows, history: HistoryRows) -> None:
        self.sql = sql
        self.rows = rows
        self.overlaps = Overlaps(sql, history)

    #: Selections one claim makes at most while looking past held-back triggers.
    _MAX_ADMISSION_ROUNDS = 4

    @functools.cached_property
    def _claim_statement(self) -> Any:
        """The due WAITING triggers with their jobs, locked, skipping those another scheduler
        holds (built once: parameters ``due_by``, ``misfire_before`` and ``max_count``)."""
        t, j = self.sql.tables.triggers, self.sql.tables.jobs
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
            .join(j, same_job(j, t))
            .where(
                self.sql.scoped(t),
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

    def admitted_batch(
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
        t = self.sql.tables.triggers
        admission = None
        if router.limits.bounded:
            self.sql.lock(conn, "EXECUTION_LIMITS")
            admission = self.admission(conn, router, now)
        held = HeldBack(unserved=claim.unserved)
        for _ in range(self._MAX_ADMISSION_ROUNDS):
            selection = self._claim_statement
            if None in held.groups:
                selection = selection.where(t.c.execution_group.is_not(None))
            named = [g for g in held.groups if g is not None]
            if named:
                selection = selection.where(
                    or_(t.c.execution_group.is_(None), t.c.execution_group.not_in(named))
                )
            if held.nodes:
                selection = selection.where(
                    or_(t.c.preferred_node.is_(None), t.c.preferred_node.not_in(held.nodes))
                )
            for node, group in held.pairs:
                same_group = (
                    t.c.execution_group.is_(None) if group is None else t.c.execution_group == group
                )
                selection = selection.where(~and_(t.c.preferred_node == node, same_group))
            rows = in_acquisition_order(tuple_rows(conn.execute(selection, params)))
            # Unbounded limits count nothing: only a pin needs the workers and what they run.
            if admission is None and any(r.preferred_node is not None for r in rows):
                admission = self.admission(conn, router, now)
            decide = (
                (lambda group, _node: router.route(group)) if admission is None else admission.admit
            )
            admitted, held_more = take_batch(
                rows, decide, held, now_ms=now, no_later_than_ms=limit_ms, window_ms=window_ms
            )
            fire_instance_ids = new_ids(len(admitted))
            batch: list[AcquiredFiring] = []
            for row, route in admitted:
                acquired = _acquired_from_row(row, fire_instance_ids.pop())
                acquired.queue, acquired.node = route.queue, route.node
                batch.append(acquired)
            if batch or not held_more:
                return batch
        return []

    def admission(self, conn: Connection, router: Router, now: int) -> Admission:
        """What admission counts against, read in the claiming transaction: the live workers
        and the firings in flight, by execution group and by queue."""
        f = self.sql.tables.fired_triggers
        by_group: dict[str | None, int] = {}
        by_queue: dict[str | None, int] = {}
        for r in conn.execute(
            select(f.c.execution_group, f.c.queue, func.count().label("n"))
            .where(self.sql.scoped(f))
            .group_by(f.c.execution_group, f.c.queue)
        ):
            by_group[r.execution_group] = by_group.get(r.execution_group, 0) + r.n
            by_queue[r.queue] = by_queue.get(r.queue, 0) + r.n
        return router.admission(self.rows.live_workers(conn, router, now), by_group, by_queue)

    def error_unrunnable(
        self, conn: Connection, batch: list[AcquiredFiring], task_exists: Callable[[str], bool]
    ) -> list[AcquiredFiring]:
        t = self.sql.tables.triggers
        runnable = []
        for firing in batch:
            if task_exists(firing.job.task):
                runnable.append(firing)
                continue
            reason = f"job {firing.job.key}: task {firing.job.task!r} is not registered"
            conn.execute(
                update(t)
                .where(self.sql.trigger_key(firing.trigger.key))
                .values(trigger_state=TriggerState.ERROR, error_reason=reason[:ERROR_TEXT])
            )
            logger.error("trigger %s put in ERROR: %s", firing.trigger.key, reason)
        return runnable

    def insert_fired_rows(
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
                "fire_instance_id": a.fire_instance_id,
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
                **pin_columns(a.trigger.preferred_node),
            }
            for a in batch
        ]
        shared = {
            "instance_name": instance_name,
            "fired_time": now,
            "state": state,
            "expires_time": expires,
        }
        if self.sql.dialect == "postgresql":
            conn.execute(self._insert_fired_statement, {"fired": json_rows(rows), **shared})
            return
        conn.execute(
            insert(self.sql.tables.fired_triggers),
            [{"sched_name": self.sql.scheduler_name, **shared, **row} for row in rows],
        )

    @functools.cached_property
    def _insert_fired_statement(self) -> Any:
        """Fired rows for a batch as one PostgreSQL INSERT … SELECT (built once): the rows'
        own values from the JSON parameter ``fired``, the values they share as scalars."""
        f = self.sql.tables.fired_triggers
        shared = ("instance_name", "fired_time", "state", "expires_time")
        rows = recordset("fired", [f.c[name] for name in _FIRED_ROW_COLUMNS])
        columns = {
            f.c.sched_name: literal(self.sql.scheduler_name),
            **{f.c[name]: bindparam(name, type_=f.c[name].type) for name in shared},
            **{f.c[c.name]: c for c in rows.c},
        }
        return insert(f).from_select(list(columns), select(*columns.values()))

    def write_fired(
        self,
        conn: Connection,
        instance_name: str,
        batch: Sequence[AcquiredFiring],
        now: int,
        expires: int | None,
        calendars: Mapping[str, Any],
        advanced: dict[str, dict[str, Any]] | None = None,
    ) -> tuple[list[Firing], list[str]]:
        """Advance the batch's triggers (rows locked by the caller); the messages, and the fire
        instance ids left out: their disallow_concurrent job already fired in the batch, or
        their trigger's overlap policy skipped or held the occurrence. ``advanced``: each
        trigger's values after it fires (:func:`after_firing`, computed when not given).

        A job that disallows concurrent execution fires once per batch: the triggers of the batch
        were read before its first firing blocked the others, so its later firings in this batch
        are left out (their triggers stay BLOCKED until the first one completes).

        Race settled: two schedulers firing the same trigger's occurrence while its previous
        firing is in flight. The trigger row is locked (or the claim is conditional on its
        state), so one transaction decides the overlap (one skip recorded, one hold, one
        cancel), and a completion releasing a held trigger reads its state locked, after.
        """
        firings: list[Firing] = []
        skipped: list[str] = []
        updates: list[dict[str, Any]] = []
        nonconcurrent_fired: set[JobKey] = set()
        if advanced is None:
            advanced = after_firing(batch, calendars)
        overlapping = self.overlaps.in_flight(conn, batch)
        for firing in batch:
            if firing.job.key in nonconcurrent_fired:
                skipped.append(firing.fire_instance_id)
                continue
            policy = policy_of(firing)
            in_flight = overlapping.get(firing.trigger.key, [])
            calendar = calendars.get(firing.trigger.calendar_name or "")
            if in_flight and policy in (OverlapPolicy.SKIP, OverlapPolicy.BUFFER_ONE):
                updates.append(
                    self.overlaps.skip(conn, firing, calendar, in_flight, instance_name)
                    if policy is OverlapPolicy.SKIP
                    else self.overlaps.hold(firing, in_flight)
                )
                skipped.append(firing.fire_instance_id)
                continue
            values = dict(advanced[firing.fire_instance_id])
            if policy is OverlapPolicy.BUFFER_ONE:
                self.overlaps.fold(conn, firing, values, calendar, now, instance_name)
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
            message = _firing_message(firing, self.sql.scheduler_name, now, instance_name, expires)
            if in_flight and policy is OverlapPolicy.CANCEL_PREVIOUS:
                message = dataclasses.replace(
                    message, revokes=self.overlaps.revokes(conn, firing, in_flight, now)
                )
            firings.append(message)
        if updates:
            self._advance_triggers(conn, updates)
        return firings, skipped

    @functools.cached_property
    def _advance_statement(self) -> Any:
        """The batch advance as one PostgreSQL statement (built once per store), the batch's
        values from the JSON parameter ``fired``."""
        t = self.sql.tables.triggers
        fired = recordset(
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
                self.sql.scoped(t),
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
        t = self.sql.tables.triggers
        if self.sql.dialect == "postgresql":
            conn.execute(self._advance_statement, {"fired": json_rows(updates)})
            return
        conn.execute(
            update(t)
            .where(
                self.sql.scoped(t),
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

    def _block_other_triggers(self, conn: Connection, job: JobKey, fired: TriggerKey) -> None:
        t = self.sql.tables.triggers
        of_job = and_(self.sql.triggers_of_job(job), ~self.sql.trigger_key(fired))
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

    def mark_published(
        self,
        conn: Connection,
        instance_name: str,
        published: Sequence[str | tuple[str, int]],
        now: int,
    ) -> None:
        f = self.sql.tables.fired_triggers
        by_instant: dict[int, list[str]] = {}
        for item in published:
            fire_id, at = (item, now) if isinstance(item, str) else item
            by_instant.setdefault(at, []).append(fire_id)
        for at, fire_ids in by_instant.items():
            # Conditional: a worker may already have started one (EXECUTING) or finished it.
            if self.sql.dialect == "postgresql":
                conn.execute(
                    self.mark_published_statement,
                    {"instance": instance_name, "ids": fire_ids, "at": at},
                )
                continue
            conn.execute(
                update(f)
                .where(
                    self.sql.scoped(f),
                    f.c.instance_name == instance_name,
                    f.c.state == FiringState.FIRED,
                    f.c.fire_instance_id.in_(fire_ids),
                )
                .values(state=FiringState.PUBLISHED, published_time=at)
            )

    @functools.cached_property
    def mark_published_statement(self) -> Any:
        """FIRED → PUBLISHED for the ids of one instant, an array parameter: one PostgreSQL
        statement built once (the loop runs it with every claim; an IN list is built anew).

        The instance and the state come first: whatever the table's statistics, the rows read
        are the instance's FIRED ones (a batch or two, from ``ix_fired_instance``), never every
        fired row of the scheduler (an unanalysed table led PostgreSQL's planner there, at a cost
        growing with the firings in flight).
        """
        f = self.sql.tables.fired_triggers
        return (
            update(f)
            .where(
                self.sql.scoped(f),
                f.c.instance_name == bindparam("instance", type_=String),
                f.c.state == FiringState.FIRED,
                f.c.fire_instance_id == bindparam("ids", type_=ARRAY(String)).any_(),
            )
            .values(state=FiringState.PUBLISHED, published_time=bindparam("at", type_=BigInteger))
        )


def after_firing(
    batch: Sequence[AcquiredFiring], calendars: Mapping[str, Any]
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
            "b_nft": millis_or_none(trigger.next_fire_time),
            "b_prev": millis_or_none(trigger.previous_fire_time),
            "b_times": trigger.times_triggered,
        }
    return advanced


def _acquired_from_row(row: Row[Any], fire_instance_id: str) -> AcquiredFiring:
    return AcquiredFiring(
        fire_instance_id=fire_instance_id,
        trigger=trigger_from_row(row),
        job=job_record_from_row(row),
        scheduled_millis=row.next_fire_time,
        recovering=row.recovering,
        origin_trigger_key=origin_key(row),
        origin_scheduled_millis=row.origin_sched_time,
        retry_attempt=row.retry_attempt,
        priority=row.priority,
        execution_group=row.execution_group,
    )


def _firing_message(
    firing: AcquiredFiring, scheduler_name: str, now: int, instance_name: str, expires: int | None
) -> Firing:
    job = firing.job
    args, kwargs, trigger_data = run_arguments(job.args, job.kwargs, firing.trigger.data)
    return Firing(
        fire_instance_id=firing.fire_instance_id,
        scheduler_name=scheduler_name,
        task=job.task,
        args=args,
        kwargs=kwargs,
        options=job.options,
        job_key=job.key,
        trigger_key=firing.trigger.key,
        scheduled_millis=firing.occurrence_millis,
        fired_millis=now,
        fired_by=instance_name,
        job_data=job.data,
        trigger_data=trigger_data,
        expires_millis=expires,
        recovering=firing.recovering,
        retry_attempt=firing.retry_attempt,
        origin_trigger_key=firing.origin_trigger_key,
        persist_job_data=job.persist_job_data,
        queue=firing.queue,
        node=firing.node,
        backfill_slot_millis=backfill_slot_of(firing.trigger.data),
    )
