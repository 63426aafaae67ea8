"""A trigger's overlap policy, decided in the transaction that fires its occurrence
(:class:`Overlaps`, used by :class:`~celery_quartz.store.sql._claims.Claims`), and the release of
an occurrence held by ``buffer_one`` when the firing it waited for ends (:class:`HeldOccurrences`,
used by :class:`~celery_quartz.store.sql._firings.FiringEnds`); see docs/steering.md#overlap-policy.

An overlap is a firing of the same trigger still in flight (its fired row FIRED, PUBLISHED or
EXECUTING) when the trigger's next occurrence fires. A retry or recovery firing runs as a one-shot
trigger of its own (policy ``allow``): it is neither an overlap of its original trigger nor ever
skipped, held or cancelled.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Row, func, select, tuple_, update

from celery_quartz.clock import from_millis, to_millis
from celery_quartz.firing import AcquiredFiring, message_task_id
from celery_quartz.history import RunResult
from celery_quartz.keys import JobKey, TriggerKey
from celery_quartz.overlap import OVERLAP_REASON, OverlapPolicy
from celery_quartz.store.schema import FiringState, TriggerState
from celery_quartz.store.sql._context import SqlContext
from celery_quartz.store.sql._definitions import Definitions
from celery_quartz.store.sql._history_rows import HistoryRows
from celery_quartz.store.sql._rows import millis_or_none
from celery_quartz.triggers.base import MisfireInstruction

logger = logging.getLogger(__name__)

#: The states of a fired row in flight, for an overlap: published (or about to be) or running.
IN_FLIGHT = (FiringState.FIRED, FiringState.PUBLISHED, FiringState.EXECUTING)
#: Most occurrences a ``buffer_one`` firing records as skipped when it folds those that came due
#: while it was held (the rest are counted in the log).
_MAX_FOLDED_RECORDS = 100


def policy_of(firing: AcquiredFiring) -> OverlapPolicy:
    """The overlap policy that applies to ``firing``: ``allow`` for a retry or recovery firing
    and for a job that disallows concurrent execution (``disallow_concurrent`` wins)."""
    if firing.origin_trigger_key is not None or firing.job.disallow_concurrent:
        return OverlapPolicy.ALLOW
    return OverlapPolicy.parse(firing.trigger.overlap_policy)


class Overlaps:
    """The overlap decisions of one claim's batch, inside its transaction (the batch's trigger
    rows are locked by the caller)."""

    def __init__(self, sql: SqlContext, history: HistoryRows) -> None:
        self.sql = sql
        self.history = history

    def in_flight(
        self, conn: Connection, batch: Sequence[AcquiredFiring]
    ) -> dict[TriggerKey, list[Any]]:
        """The firings in flight of each trigger of ``batch`` whose policy is not ``allow``
        (the batch's own rows left out): one read for the batch, none when every trigger
        allows overlaps."""
        keys = {a.trigger.key for a in batch if policy_of(a) is not OverlapPolicy.ALLOW}
        if not keys:
            return {}
        f = self.sql.tables.fired_triggers
        rows = conn.execute(
            select(
                f.c.trigger_name,
                f.c.trigger_group,
                f.c.fire_instance_id,
                f.c.expired_count,
                f.c.state,
                f.c.worker_name,
            )
            .where(
                self.sql.scoped(f),
                tuple_(f.c.trigger_name, f.c.trigger_group).in_([(k.name, k.group) for k in keys]),
                f.c.state.in_(IN_FLIGHT),
                f.c.fire_instance_id.not_in([a.fire_instance_id for a in batch]),
            )
            .order_by(f.c.fired_time)
        ).all()
        found: dict[TriggerKey, list[Any]] = {}
        for row in rows:
            key = TriggerKey.stored(row.trigger_name, row.trigger_group)
            found.setdefault(key, []).append(row)
        return found

    def skip(
        self,
        conn: Connection,
        firing: AcquiredFiring,
        calendar: Any,
        in_flight: Sequence[Row[Any]],
        instance_name: str,
    ) -> dict[str, Any]:
        """``skip``: the occurrence is dropped (recorded ``skipped``, reason ``overlap``, decided
        by ``instance_name``) and the trigger moves to its next one, COMPLETE when it has none.
        Its count of firings and previous fire time stay. The trigger's new values."""
        trigger = copy.copy(firing.trigger)
        trigger.skip_occurrence(calendar)
        running = in_flight[0]
        reason = (
            f"{OVERLAP_REASON}: firing {running.fire_instance_id} of this trigger still "
            f"{running.state.lower()}"
        )
        self.history.record_not_run(
            conn,
            RunResult.SKIPPED,
            reason,
            trigger_key=firing.trigger.key,
            job_key=firing.job.key,
            scheduled_millis=firing.scheduled_millis,
            instance_name=instance_name,
        )
        nft = millis_or_none(trigger.next_fire_time)
        logger.info(
            "overlap: trigger %s skipped its occurrence %s (%s); %s",
            firing.trigger.key,
            from_millis(firing.scheduled_millis).isoformat(),
            reason,
            "next fire time " + trigger.next_fire_time.isoformat()
            if trigger.next_fire_time is not None
            else "it will not fire again",
        )
        return _values(
            firing,
            TriggerState.WAITING if nft is not None else TriggerState.COMPLETE,
            nft,
        )

    def hold(self, firing: AcquiredFiring, in_flight: Sequence[Row[Any]]) -> dict[str, Any]:
        """``buffer_one``: the occurrence is held, the trigger BLOCKED at it until the firing
        in flight ends (:class:`HeldOccurrences`). The trigger's new values."""
        logger.info(
            "overlap: trigger %s holds its occurrence %s until firing %s ends",
            firing.trigger.key,
            from_millis(firing.scheduled_millis).isoformat(),
            in_flight[0].fire_instance_id,
        )
        return _values(firing, TriggerState.BLOCKED, firing.scheduled_millis)

    def fold(
        self,
        conn: Connection,
        firing: AcquiredFiring,
        values: dict[str, Any],
        calendar: Any,
        now: int,
        instance_name: str,
    ) -> None:
        """``buffer_one`` holds one occurrence: when one fires, the occurrences after it already
        due (they came due while it was held) are skipped, reason ``overlap``, so the trigger
        never runs a backlog. Moves ``values``' next fire time past ``now``."""
        if values["b_nft"] is None or values["b_nft"] > now:
            return
        probe = copy.copy(firing.trigger)
        probe.triggered(calendar)
        folded = 0
        while probe.next_fire_time is not None and to_millis(probe.next_fire_time) <= now:
            if folded < _MAX_FOLDED_RECORDS:
                self.history.record_not_run(
                    conn,
                    RunResult.SKIPPED,
                    f"{OVERLAP_REASON}: came due while occurrence "
                    f"{from_millis(firing.scheduled_millis).isoformat()} was held (buffer_one)",
                    trigger_key=firing.trigger.key,
                    job_key=firing.job.key,
                    scheduled_millis=millis_or_none(probe.next_fire_time),
                    instance_name=instance_name,
                )
            folded += 1
            probe.skip_occurrence(calendar)
        values["b_nft"] = millis_or_none(probe.next_fire_time)
        logger.info(
            "overlap: trigger %s fired its held occurrence %s and skipped %d that came due "
            "meanwhile",
            firing.trigger.key,
            from_millis(firing.scheduled_millis).isoformat(),
            folded,
        )

    def revokes(
        self, conn: Connection, firing: AcquiredFiring, in_flight: Sequence[Row[Any]], now: int
    ) -> tuple[str, ...]:
        """``cancel_previous``: the task ids of the firings in flight to revoke once the new one
        is published (the decision is this transaction's; the revoke is the scheduler's). Their
        rows are marked cancel-requested (``cancel_requested_time``) in this transaction, for
        the workers whose pool cannot terminate a run (:meth:`WorkerSql.cancel_requested
        <celery_quartz.store.sql.worker.WorkerSql.cancel_requested>`).

        On PostgreSQL the mark skips a row another transaction holds: the claim holds the
        trigger's row, and a worker's end of that firing holds the fired row and then waits for
        the trigger's, so waiting here would deadlock. A row so held is being ended (or, for a
        few milliseconds, started or given progress); the revoke still goes to it."""
        ids = tuple(message_task_id(r.fire_instance_id, r.expired_count) for r in in_flight)
        f = self.sql.tables.fired_triggers
        free = (
            select(f.c.fire_instance_id)
            .where(
                self.sql.scoped(f),
                f.c.fire_instance_id.in_([r.fire_instance_id for r in in_flight]),
                f.c.state.in_(IN_FLIGHT),
                f.c.cancel_requested_time.is_(None),
            )
            .with_for_update(skip_locked=True)
        )
        marked = conn.execute(
            update(f)
            .where(self.sql.scoped(f), f.c.fire_instance_id.in_(free.scalar_subquery()))
            .values(cancel_requested_time=now)
        ).rowcount
        logger.info(
            "overlap: trigger %s fires %s and cancels its firing(s) in flight: %s (%d marked "
            "cancel-requested)",
            firing.trigger.key,
            from_millis(firing.scheduled_millis).isoformat(),
            ", ".join(
                f"{r.fire_instance_id} ({r.state.lower()}"
                + (f" on {r.worker_name})" if r.worker_name else ")")
                for r in in_flight
            ),
            marked,
        )
        return ids


def _values(firing: AcquiredFiring, state: str, nft: int | None) -> dict[str, Any]:
    """A trigger's values in a claim's batch advance: ``state`` and ``nft``, its previous fire
    time and count of firings as they were."""
    trigger = firing.trigger
    return {
        "b_name": trigger.key.name,
        "b_group": trigger.key.group,
        "b_state": state,
        "b_nft": nft,
        "b_prev": millis_or_none(trigger.previous_fire_time),
        "b_times": trigger.times_triggered,
    }


class HeldOccurrences:
    """The release of a ``buffer_one`` trigger's held occurrence when its firing ends."""

    def __init__(self, sql: SqlContext, definitions: Definitions) -> None:
        self.sql = sql
        self.definitions = definitions

    def release(
        self, conn: Connection, key: TriggerKey, state: str | None, decided_by: str | None
    ) -> None:
        """The end of a firing of trigger ``key`` (its row gone), whose state the caller read
        locked: a trigger BLOCKED (or PAUSED_BLOCKED) by ``buffer_one`` with no other firing of
        its own in flight is released, its held occurrence due at once, or, when the wait made
        it later than the misfire threshold, handed to its misfire instruction (recorded
        ``held``, reason ``overlap``, decided by ``decided_by``). A PAUSED_BLOCKED one becomes
        PAUSED, keeping the held occurrence for its resume."""
        if state not in (TriggerState.BLOCKED, TriggerState.PAUSED_BLOCKED):
            return
        t, f = self.sql.tables.triggers, self.sql.tables.fired_triggers
        row = conn.execute(select(t).where(self.sql.trigger_key(key))).first()
        if row is None or OverlapPolicy.parse(row.overlap_policy) is not OverlapPolicy.BUFFER_ONE:
            return
        others = conn.execute(
            select(func.count())
            .select_from(f)
            .where(
                self.sql.scoped(f),
                f.c.trigger_name == key.name,
                f.c.trigger_group == key.group,
                f.c.state.in_(IN_FLIGHT),
            )
        ).scalar_one()
        if others:
            return
        now = self.sql.now()
        if (
            state == TriggerState.BLOCKED
            and row.next_fire_time is not None
            and row.misfire_instr != MisfireInstruction.IGNORE_MISFIRE_POLICY
            and row.next_fire_time < now - self.sql.misfire_threshold_ms
        ):
            self.definitions.apply_misfire(
                conn,
                row,
                now,
                ", held by its overlap policy buffer_one,",
                decided_by=decided_by,
                held_by=f"{OVERLAP_REASON}: buffer_one, a firing of trigger {key} was running",
            )
        released = {
            TriggerState.BLOCKED: TriggerState.WAITING,
            TriggerState.PAUSED_BLOCKED: TriggerState.PAUSED,
        }
        conn.execute(
            update(t)
            .where(self.sql.trigger_key(key), t.c.trigger_state == state)
            .values(trigger_state=released[state])
        )
        logger.info("overlap: trigger %s released its held occurrence", key)

    def still_held(self, conn: Connection, row: Row[Any]) -> bool:
        """Whether the PAUSED_BLOCKED trigger ``row`` is still held by ``buffer_one`` as it is
        resumed: a firing of its own is in flight. (A trigger held by ``disallow_concurrent``,
        or one without the policy, stays as its state says.) A hold whose firing ended without
        releasing it (an end recorded by an older version's worker) is released by the resume."""
        if OverlapPolicy.parse(row.overlap_policy) is not OverlapPolicy.BUFFER_ONE:
            return True
        f, j = self.sql.tables.fired_triggers, self.sql.tables.jobs
        nonconcurrent = conn.execute(
            select(j.c.is_nonconcurrent).where(
                self.sql.job_key(JobKey.stored(row.job_name, row.job_group))
            )
        ).scalar_one_or_none()
        if nonconcurrent:
            return True
        return bool(
            conn.execute(
                select(func.count())
                .select_from(f)
                .where(
                    self.sql.scoped(f),
                    f.c.trigger_name == row.trigger_name,
                    f.c.trigger_group == row.trigger_group,
                    f.c.state.in_(IN_FLIGHT),
                )
            ).scalar_one()
        )
