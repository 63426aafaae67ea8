"""The client's backfills (:class:`~celery_quartz.store.abc_backfill.BackfillStore`): a one-shot
trigger per past slot, each slot claimed once by a row of ``backfill_slots``."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import Connection, bindparam, select, update
from sqlalchemy.dialects import postgresql, sqlite

from celery_quartz.backfill import (
    BackfillError,
    BackfillRequest,
    BackfillResult,
    BackfillSlot,
    SlotOutcome,
    backfill_slots,
)
from celery_quartz.clock import from_millis, to_millis
from celery_quartz.definitions import PROTECTED_GROUPS
from celery_quartz.errors import TriggerNotFoundError
from celery_quartz.firing import BACKFILL_SLOT
from celery_quartz.history import RunResult
from celery_quartz.keys import (
    BACKFILL_JOBS_GROUP,
    MAX_DESCRIPTION_LENGTH,
    RECOVERING_JOBS_GROUP,
    RETRYING_JOBS_GROUP,
    TriggerKey,
)
from celery_quartz.store.abc_backfill import BackfillStore
from celery_quartz.store.sql._audit import AuditTrail
from celery_quartz.store.sql._context import SqlContext
from celery_quartz.store.sql._definitions import Definitions
from celery_quartz.store.sql._rows import Rows, trigger_from_row
from celery_quartz.triggers.base import MisfireInstruction, Trigger

logger = logging.getLogger(__name__)

#: Slots inserted per statement (six parameters each: within SQLite's oldest bound of 999).
_INSERT_BATCH = 150


class BackfillsSql(BackfillStore):
    """Backfills on the SQL tables."""

    def __init__(
        self, sql: SqlContext, rows: Rows, definitions: Definitions, audit: AuditTrail
    ) -> None:
        self.sql = sql
        self.rows = rows
        self.definitions = definitions
        self.audit = audit

    def backfill(self, key: TriggerKey, request: BackfillRequest) -> BackfillResult:
        """The slots are claimed by ``INSERT … ON CONFLICT DO NOTHING RETURNING``, in the order
        of their times (two backfills wait on each other's slots in one order: no deadlock); on
        PostgreSQL a second backfill's insert of a slot the first holds waits for it to commit,
        then inserts nothing."""
        now = self.sql.now()
        if to_millis(request.end) > now:
            raise BackfillError(
                f"backfill of trigger {key}: end {request.end.isoformat()} is in the future "
                f"(the store's clock says {from_millis(now).isoformat()})",
                "end",
            )
        t = self.sql.tables.triggers
        with self.sql.transaction() as conn:
            row = conn.execute(select(t).where(self.sql.trigger_key(key))).first()
            if row is None:
                raise TriggerNotFoundError(f"trigger {key} is not stored")
            if key.group in PROTECTED_GROUPS and row.origin_trigger_name is not None:
                raise BackfillError(
                    f"trigger {key} is a one-shot firing celery-quartz keeps; backfill the "
                    f"trigger it runs, {row.origin_trigger_group}.{row.origin_trigger_name}"
                )
            trigger = trigger_from_row(row)
            calendar = self.rows.calendar(conn, trigger.calendar_name, key)
            slots = [
                to_millis(s)
                for s in backfill_slots(
                    trigger, calendar, request.start, request.end, request.max_slots
                )
            ]
            scheduled = self._scheduled(conn, key, slots)
            succeeded = set() if request.include_succeeded else self._succeeded(conn, key, slots)
            wanted = [s for s in slots if s not in scheduled and s not in succeeded]
            names = {s: f"backfill_{uuid.uuid4()}" for s in wanted}
            if not request.dry_run:
                claimed = self._claim(conn, key, wanted, names, now)
                scheduled.update(s for s in wanted if s not in claimed)
                wanted = [s for s in wanted if s in claimed]
            fire_at = {slot: now + i * _millis(request.spacing) for i, slot in enumerate(wanted)}
            if not request.dry_run:
                self._store_firings(conn, trigger, key, fire_at, names, now)
            result = BackfillResult(
                trigger_key=key,
                start=request.start,
                end=request.end,
                dry_run=request.dry_run,
                slots=[
                    _slot(s, scheduled, succeeded, fire_at, names, request.dry_run) for s in slots
                ],
            )
            if not request.dry_run:
                self._audit(conn, key, request, result)
        if not request.dry_run:
            logger.info(
                "backfill of trigger %s from %s to %s: %d slots, %d scheduled, %d already "
                "scheduled, %d already succeeded",
                key,
                request.start.isoformat(),
                request.end.isoformat(),
                result.slots_found,
                result.scheduled,
                result.already_scheduled,
                result.already_succeeded,
            )
        return result

    def _scheduled(self, conn: Connection, key: TriggerKey, slots: Sequence[int]) -> set[int]:
        """The slots among ``slots`` that are scheduled already: by a backfill (one range read
        of the key), or by the trigger itself, its firing of the slot still in flight (a
        range read of its fired rows), or a retry or recovery firing of the slot waiting or in
        flight (the one-shot triggers of those groups, few)."""
        if not slots:
            return set()
        b, f, t = (
            self.sql.tables.backfill_slots,
            self.sql.tables.fired_triggers,
            self.sql.tables.triggers,
        )
        low, high = slots[0], slots[-1]
        found = set(
            conn.execute(
                select(b.c.slot_time).where(
                    self.sql.scoped(b),
                    b.c.trigger_group == key.group,
                    b.c.trigger_name == key.name,
                    b.c.slot_time.between(low, high),
                )
            ).scalars()
        )
        found.update(
            conn.execute(
                select(f.c.sched_time).where(
                    self.sql.scoped(f),
                    f.c.trigger_name == key.name,
                    f.c.trigger_group == key.group,
                    f.c.sched_time.between(low, high),
                )
            ).scalars()
        )
        found.update(
            conn.execute(
                select(t.c.origin_sched_time).where(
                    self.sql.scoped(t),
                    t.c.trigger_group.in_([RETRYING_JOBS_GROUP, RECOVERING_JOBS_GROUP]),
                    t.c.origin_trigger_name == key.name,
                    t.c.origin_trigger_group == key.group,
                    t.c.origin_sched_time.between(low, high),
                )
            ).scalars()
        )
        return found.intersection(slots)

    def _succeeded(self, conn: Connection, key: TriggerKey, slots: Sequence[int]) -> set[int]:
        """The slots among ``slots`` whose occurrence has a ``succeeded`` history row: read
        through the history's per-trigger index, whose rows per trigger the sweep bounds
        (``quartz_history_max_rows_per_trigger``)."""
        if not slots:
            return set()
        h = self.sql.tables.history
        return set(
            conn.execute(
                select(h.c.scheduled_time)
                .where(
                    h.c.sched_name == self.sql.scheduler_name,
                    h.c.trigger_group == key.group,
                    h.c.trigger_name == key.name,
                    h.c.result == RunResult.SUCCEEDED.value,
                    h.c.scheduled_time.between(slots[0], slots[-1]),
                )
                .distinct()
            ).scalars()
        ).intersection(slots)

    def _claim(
        self,
        conn: Connection,
        key: TriggerKey,
        slots: Sequence[int],
        names: dict[int, str],
        now: int,
    ) -> set[int]:
        """Insert a row for each of ``slots`` that has none; the slots inserted."""
        b = self.sql.tables.backfill_slots
        claimed: set[int] = set()
        for i in range(0, len(slots), _INSERT_BATCH):
            batch = slots[i : i + _INSERT_BATCH]
            insert = postgresql.insert(b) if self.sql.dialect == "postgresql" else sqlite.insert(b)
            statement = (
                insert.values(
                    [
                        {
                            "sched_name": self.sql.scheduler_name,
                            "trigger_group": key.group,
                            "trigger_name": key.name,
                            "slot_time": slot,
                            "created_time": now,
                            "firing_trigger_name": names[slot],
                        }
                        for slot in batch
                    ]
                )
                .on_conflict_do_nothing(
                    index_elements=[
                        b.c.sched_name,
                        b.c.trigger_group,
                        b.c.trigger_name,
                        b.c.slot_time,
                    ]
                )
                .returning(b.c.slot_time)
            )
            claimed.update(conn.execute(statement).scalars())
        return claimed

    def _store_firings(
        self,
        conn: Connection,
        trigger: Trigger,
        key: TriggerKey,
        fire_at: dict[int, int],
        names: dict[int, str],
        now: int,
    ) -> None:
        """One one-shot trigger per slot, due at ``fire_at``: the trigger's job, data, priority,
        retry policy, pin and execution group, ignoring misfires (however late its schedulers
        come back, it runs), standing for the occurrence as a retry firing does (``origin_*``)."""
        if not fire_at:
            return
        from celery_quartz.triggers.simple import SimpleTrigger

        firings = [
            SimpleTrigger(
                key=TriggerKey(names[slot], BACKFILL_JOBS_GROUP),
                job_key=trigger.job_key,
                description=f"backfill of {key} at {from_millis(slot).isoformat()}"[
                    :MAX_DESCRIPTION_LENGTH
                ],
                start_at=from_millis(at),
                repeat_count=0,
                repeat_interval=timedelta(0),
                priority=trigger.priority,
                misfire_instruction=MisfireInstruction.IGNORE_MISFIRE_POLICY,
                data={**trigger.data, BACKFILL_SLOT: slot},
                execution_group=trigger.execution_group,
                preferred_node=trigger.preferred_node,
                retry_policy=trigger.retry_policy,
            )
            for slot, at in fire_at.items()
        ]
        self.definitions.store_many(conn, [], firings, False, from_millis(now))
        t = self.sql.tables.triggers
        conn.execute(
            update(t)
            .where(
                self.sql.scoped(t),
                t.c.trigger_group == BACKFILL_JOBS_GROUP,
                t.c.trigger_name == bindparam("b_name"),
            )
            .values(
                origin_trigger_name=key.name,
                origin_trigger_group=key.group,
                origin_fire_time=bindparam("b_slot"),
                origin_sched_time=bindparam("b_slot"),
            ),
            [{"b_name": names[slot], "b_slot": slot} for slot in fire_at],
        )

    def _audit(
        self, conn: Connection, key: TriggerKey, request: BackfillRequest, result: BackfillResult
    ) -> None:
        """One audit row for the whole backfill: its range, its options and its counts."""
        details: dict[str, Any] = {
            "from": request.start.isoformat(),
            "to": request.end.isoformat(),
            "max_slots": request.max_slots,
            "spacing": request.spacing.total_seconds(),
            "include_succeeded": request.include_succeeded,
            "slots_found": result.slots_found,
            "scheduled": result.scheduled,
            "already_scheduled": result.already_scheduled,
            "already_succeeded": result.already_succeeded,
        }
        changes = self.audit.changes()
        changes.add("backfill", "trigger", key, None, details)
        self.audit.write(conn, changes)


def _millis(spacing: timedelta) -> int:
    return int(spacing.total_seconds() * 1000)


def _slot(
    slot: int,
    scheduled: set[int],
    succeeded: set[int],
    fire_at: dict[int, int],
    names: dict[int, str],
    dry_run: bool,
) -> BackfillSlot:
    if slot in fire_at:
        return BackfillSlot(
            slot=from_millis(slot),
            outcome=SlotOutcome.SCHEDULED,
            fire_at=from_millis(fire_at[slot]),
            firing_trigger=None if dry_run else TriggerKey(names[slot], BACKFILL_JOBS_GROUP),
        )
    if slot in scheduled:
        return BackfillSlot(from_millis(slot), SlotOutcome.ALREADY_SCHEDULED)
    return BackfillSlot(from_millis(slot), SlotOutcome.ALREADY_SUCCEEDED)
