"""The scheduling loop's role: claim, fire, record publication, release
(:class:`~celery_quartz.store.abc.SchedulingStore`)."""

from __future__ import annotations

import copy
import functools
import logging
from collections.abc import Callable, Sequence
from datetime import datetime
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
    delete,
    func,
    insert,
    literal,
    or_,
    select,
    tuple_,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY

from celery_quartz.clock import to_millis
from celery_quartz.firing import AcquiredFiring, Firing, new_ids
from celery_quartz.keys import JobKey, TriggerKey
from celery_quartz.routing import Admission, HeldBack, Router, take_batch
from celery_quartz.store.abc import SchedulingStore
from celery_quartz.store.records import (
    Claim,
)
from celery_quartz.store.schema import (
    ERROR_TEXT,
    FiringState,
    TriggerState,
)
from celery_quartz.store.sql._firings import FiringsSql
from celery_quartz.store.sql._rows import (
    in_acquisition_order,
    json_rows,
    millis_or_none,
    origin_key,
    pin_columns,
    recordset,
    same_job,
    tuple_rows,
)
from celery_quartz.triggers.base import (
    MisfireInstruction,
)

logger = logging.getLogger(__name__)

#: Routing with no execution limits (pins are still routed to live workers).
_UNLIMITED = Router()

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


class AcquisitionSql(FiringsSql, SchedulingStore):
    def acquire_next_triggers(
        self,
        instance_name: str,
        *,
        no_later_than: datetime,
        max_count: int,
        time_window: float,
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
        fire_due: bool = True,
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
            "misfire_before": now - self.misfire_threshold_ms,
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
                expires = now + self.misfire_threshold_ms
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
                            self._scoped(t),
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
            .join(j, same_job(j, t))
            .where(
                self._scoped(t),
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
                admission = self._admission(conn, router, now)
            decide = (
                (lambda group, _node: router.route(group)) if admission is None else admission.admit
            )
            admitted, held_more = take_batch(
                rows, decide, held, now_ms=now, no_later_than_ms=limit_ms, window_ms=window_ms
            )
            fire_instance_ids = new_ids(len(admitted))
            batch: list[AcquiredFiring] = []
            for row, route in admitted:
                acquired = self._acquired_from_row(row, fire_instance_ids.pop())
                acquired.queue, acquired.node = route.queue, route.node
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
            .where(self._scoped(f))
            .group_by(f.c.execution_group, f.c.queue)
        ):
            by_group[r.execution_group] = by_group.get(r.execution_group, 0) + r.n
            by_queue[r.queue] = by_queue.get(r.queue, 0) + r.n
        return router.admission(self._live_workers(conn, router, now), by_group, by_queue)

    def _error_unrunnable(
        self, conn: Connection, batch: list[AcquiredFiring], task_exists: Callable[[str], bool]
    ) -> list[AcquiredFiring]:
        t = self.tables.triggers
        runnable = []
        for firing in batch:
            if task_exists(firing.job.task):
                runnable.append(firing)
                continue
            reason = f"job {firing.job.key}: task {firing.job.task!r} is not registered"
            conn.execute(
                update(t)
                .where(self._trigger_key_clause(firing.trigger.key))
                .values(trigger_state=TriggerState.ERROR, error_reason=reason[:ERROR_TEXT])
            )
            logger.error("trigger %s put in ERROR: %s", firing.trigger.key, reason)
        return runnable

    def _acquired_from_row(self, row: Row[Any], fire_instance_id: str) -> AcquiredFiring:
        return AcquiredFiring(
            fire_instance_id=fire_instance_id,
            trigger=self._trigger_from_row(row),
            job=self._job_record_from_row(row),
            scheduled_millis=row.next_fire_time,
            recovering=row.recovering,
            origin_trigger_key=origin_key(row),
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
        if self.dialect == "postgresql":
            conn.execute(self._insert_fired_statement, {"fired": json_rows(rows), **shared})
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
        rows = recordset("fired", [f.c[name] for name in _FIRED_ROW_COLUMNS])
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
                "b_nft": millis_or_none(trigger.next_fire_time),
                "b_prev": millis_or_none(trigger.previous_fire_time),
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
                self._scoped(t),
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
            conn.execute(self._advance_statement, {"fired": json_rows(updates)})
            return
        conn.execute(
            update(t)
            .where(
                self._scoped(t),
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
    ) -> list[Firing]:
        """Fire claimed triggers: advance each, and turn its fired row into a message to publish.

        Each trigger's next fire time is computed before the transaction opens, so the
        transaction only checks ownership and writes. Each message expires the misfire threshold
        from now: a firing no worker starts by then is resolved as a misfire
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
        expires = now + self.misfire_threshold_ms
        with self.transaction() as conn:
            self._check_fence(conn)
            owned = {
                r.fire_instance_id
                for r in conn.execute(
                    select(f.c.fire_instance_id)
                    .where(
                        self._scoped(f),
                        f.c.fire_instance_id.in_([a.fire_instance_id for a in acquired]),
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
                        self._scoped(t),
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
                conn.execute(delete(f).where(self._scoped(f), f.c.fire_instance_id.in_(dropped)))
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
                        self._scoped(f),
                        f.c.fire_instance_id.in_([m.fire_instance_id for m in firings]),
                    )
                    .values(state=FiringState.FIRED, fired_time=now, expires_time=expires)
                )
        return firings

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
                    self._scoped(f),
                    f.c.instance_name == instance_name,
                    f.c.state == FiringState.FIRED,
                    f.c.fire_instance_id.in_(fire_ids),
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
                self._scoped(f),
                f.c.instance_name == bindparam("instance", type_=String),
                f.c.state == FiringState.FIRED,
                f.c.fire_instance_id == bindparam("ids", type_=ARRAY(String)).any_(),
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

    def in_flight(self, instance_name: str | None = None) -> int:
        """Firings published and not yet finished (of one scheduler instance, or of all)."""
        f = self.tables.fired_triggers
        q = (
            select(func.count())
            .select_from(f)
            .where(self._scoped(f), f.c.state != FiringState.ACQUIRED)
        )
        if instance_name is not None:
            q = q.where(f.c.instance_name == instance_name)
        with self.transaction() as conn:
            return int(conn.execute(q).scalar_one())
