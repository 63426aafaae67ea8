"""Writes of jobs and triggers that several roles share (:class:`Definitions`): storing by
batch, removing, and applying a late trigger's misfire instruction."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Connection,
    Row,
    delete,
    func,
    insert,
    select,
    update,
)

from celery_quartz.audit import Changes
from celery_quartz.clock import from_millis, to_millis
from celery_quartz.errors import (
    InvalidTriggerError,
    JobNotFoundError,
    ObjectAlreadyExistsError,
)
from celery_quartz.history import RunResult
from celery_quartz.job import Job, encode_json_object
from celery_quartz.keys import JobKey, TriggerKey
from celery_quartz.pausing import PauseRequest
from celery_quartz.store.schema import PAUSED_STATES, TriggerState
from celery_quartz.store.sql._context import SqlContext
from celery_quartz.store.sql._history_rows import HistoryRows
from celery_quartz.store.sql._rows import (
    ALL_GROUPS_PAUSED,
    PAUSE_COLUMNS,
    Rows,
    initial_state,
    job_from_row,
    trigger_from_row,
)
from celery_quartz.triggers.base import (
    Trigger,
)

logger = logging.getLogger(__name__)


class Definitions:
    """Storing and removing job and trigger rows; a late trigger's misfire outcome."""

    def __init__(self, sql: SqlContext, rows: Rows) -> None:
        self.sql = sql
        self.rows = rows
        #: The run history's rows: a misfire is recorded where it is decided.
        self.history = HistoryRows(sql)

    def delete_job(self, conn: Connection, key: JobKey, changes: Changes | None = None) -> bool:
        """Delete a job and its triggers; each recorded in ``changes`` when given (the audit)."""
        t, j = self.sql.tables.triggers, self.sql.tables.jobs
        if changes is None:
            conn.execute(delete(t).where(self.sql.triggers_of_job(key)))
            return conn.execute(delete(j).where(self.sql.job_key(key))).rowcount > 0
        for row in conn.execute(delete(t).where(self.sql.triggers_of_job(key)).returning(t)):
            changes.trigger("remove_trigger", trigger_from_row(row), None)
        job = conn.execute(delete(j).where(self.sql.job_key(key)).returning(j)).first()
        if job is not None:
            changes.job("remove_job", job_from_row(job), None)
        return job is not None

    def store_trigger(
        self, conn: Connection, trigger: Trigger, replace: bool, now: datetime
    ) -> None:
        self.store_many(conn, [], [trigger], replace, now)

    def store_many(
        self,
        conn: Connection,
        jobs: Sequence[Job],
        triggers: Sequence[Trigger],
        replace: bool,
        now: datetime,
        paused: PauseRequest | None = None,
    ) -> None:
        """Store jobs and triggers, reading and writing by batch:
        a few statements whatever their number (a ``beat_schedule`` of 10,000 entries is
        imported in one transaction).

        Raises :class:`ObjectAlreadyExistsError` when a key is stored (or given twice) and
        ``replace`` is false, :class:`JobNotFoundError` when a trigger names a job that is
        neither stored nor given, :class:`InvalidTriggerError` for a trigger that is invalid or
        would never fire; the caller's transaction then writes nothing.
        """
        if not jobs and not triggers:
            return
        j, t = self.sql.tables.jobs, self.sql.tables.triggers
        job_values: dict[JobKey, dict[str, Any]] = {}
        for job in jobs:
            if job.key in job_values and not replace:
                raise ObjectAlreadyExistsError(f"job {job.key} already exists")
            job_values[job.key] = self.rows.job_values(job)
        stored_jobs = self.rows.stored_keys(conn, j.c.job_name, j.c.job_group, list(job_values))
        if stored_jobs and not replace:
            key = next(k for k in job_values if (k.name, k.group) in stored_jobs)
            raise ObjectAlreadyExistsError(f"job {key} already exists")

        # What a trigger's initial state depends on: its job's flag, the paused groups, and
        # whether a disallow_concurrent job has a firing in flight.
        nonconcurrent = {key: v["is_nonconcurrent"] for key, v in job_values.items()}
        wanted = {trigger.job_key for trigger in triggers if trigger.job_key is not None}
        for row in self.rows.by_key(
            conn,
            select(j.c.job_name, j.c.job_group, j.c.is_nonconcurrent),
            j.c.job_name,
            j.c.job_group,
            [key for key in wanted if key not in nonconcurrent],
        ):
            nonconcurrent[JobKey.stored(row.job_name, row.job_group)] = bool(row.is_nonconcurrent)
        paused_groups = self.rows.paused_group_records(conn)
        # A trigger stored paused keeps the record asked for, or its paused group's.
        asked = self.rows.pause_values(paused) if paused is not None else None
        in_flight = self.rows.jobs_in_flight(
            conn, [key for key in wanted if nonconcurrent.get(key)]
        )
        calendars: dict[str, Any] = {}
        trigger_values: dict[TriggerKey, dict[str, Any]] = {}
        for trigger in triggers:
            if trigger.job_key is None:
                raise InvalidTriggerError(f"trigger {trigger.key} names no job")
            if trigger.job_key not in nonconcurrent:
                raise JobNotFoundError(
                    f"trigger {trigger.key}: job {trigger.job_key} is not stored"
                )
            if trigger.key in trigger_values and not replace:
                raise ObjectAlreadyExistsError(f"trigger {trigger.key} already exists")
            if trigger.start_at is None:
                trigger.start_at = now
            trigger.validate()
            name = trigger.calendar_name
            if name is not None and name not in calendars:
                calendars[name] = self.rows.calendar(conn, name, trigger.key)
            if trigger.compute_first_fire_time(calendars.get(name or "")) is None:
                raise InvalidTriggerError(
                    f"trigger {trigger.key}: based on its schedule it will never fire"
                )
            blocked = trigger.job_key in in_flight
            record = asked
            if record is not None:
                state = TriggerState.PAUSED_BLOCKED if blocked else TriggerState.PAUSED
            else:
                state = initial_state(trigger.key, paused_groups, blocked=blocked)
                record = paused_groups.get(trigger.key.group, paused_groups.get(ALL_GROUPS_PAUSED))
            trigger_values[trigger.key] = {
                **self.rows.trigger_values(trigger, state),
                **(record if state in PAUSED_STATES and record else dict.fromkeys(PAUSE_COLUMNS)),
            }
        stored_triggers = self.rows.stored_keys(
            conn, t.c.trigger_name, t.c.trigger_group, list(trigger_values)
        )
        if stored_triggers and not replace:
            stored = next(k for k in trigger_values if (k.name, k.group) in stored_triggers)
            raise ObjectAlreadyExistsError(f"trigger {stored} already exists")

        self._write_many(conn, j, job_values, stored_jobs, self.sql.job_key)
        self._write_many(conn, t, trigger_values, stored_triggers, self.sql.trigger_key)

    def _write_many(
        self,
        conn: Connection,
        table: Any,
        values: dict[Any, dict[str, Any]],
        stored: set[tuple[str, str]],
        key_clause: Callable[[Any], Any],
    ) -> None:
        """Update the stored rows one by one (a replace), insert the others in one executemany."""
        new = []
        for key, row in values.items():
            if (key.name, key.group) in stored:
                conn.execute(update(table).where(key_clause(key)).values(row))
            else:
                new.append(row)
        if new:
            conn.execute(insert(table), new)

    def remove_trigger(
        self, conn: Connection, key: TriggerKey, changes: Changes | None = None
    ) -> bool:
        """Remove a trigger, and its job when that is not durable and now has no trigger; each
        recorded in ``changes`` when given (the audit)."""
        t = self.sql.tables.triggers
        returned = (t.c.job_name, t.c.job_group) if changes is None else (t,)
        row = conn.execute(delete(t).where(self.sql.trigger_key(key)).returning(*returned)).first()
        if row is None:
            return False
        if changes is not None:
            changes.trigger("remove_trigger", trigger_from_row(row), None)
        self.delete_job_if_orphaned(conn, JobKey(row.job_name, row.job_group), changes)
        return True

    def delete_job_if_orphaned(
        self, conn: Connection, key: JobKey, changes: Changes | None = None
    ) -> None:
        t, j = self.sql.tables.triggers, self.sql.tables.jobs
        remaining = conn.execute(
            select(func.count())
            .select_from(t)
            .where(
                self.sql.scoped(t),
                t.c.job_name == key.name,
                t.c.job_group == key.group,
            )
        ).scalar_one()
        if remaining == 0:
            orphan = delete(j).where(self.sql.job_key(key), j.c.is_durable.is_(False))
            if changes is None:
                conn.execute(orphan)
                return
            row = conn.execute(orphan.returning(j)).first()
            if row is not None:
                changes.job("remove_job", job_from_row(row), None)

    def apply_misfire(
        self,
        conn: Connection,
        row: Row[Any],
        now: int,
        why: str,
        *conditions: Any,
        decided_by: str | None = None,
        held_by: str | None = None,
    ) -> bool:
        """Apply a late trigger's misfire instruction (one decision, logged): write its new fire
        times, or finish it when it will not fire again (:meth:`finish_trigger`). ``conditions``
        guard the update (the trigger is still as it was read). True when the trigger fires
        again.

        The occurrence missed is recorded in the history: ``misfired``, or ``held`` when
        ``held_by`` says what held it back (an execution group at its limit,
        ``disallow_concurrent``), with the instruction applied and the deciding instance
        ``decided_by``."""
        t = self.sql.tables.triggers
        trigger = trigger_from_row(row)
        trigger.update_after_misfire(
            from_millis(now), self.rows.calendar(conn, trigger.calendar_name, trigger.key)
        )
        applied = True
        if trigger.next_fire_time is None:
            if self.finish_trigger(conn, trigger.key, *conditions):
                outcome = "will not fire again; removed"
            else:
                outcome = "will not fire again; kept COMPLETE until its firings in flight end"
        else:
            applied = bool(
                conn.execute(
                    update(t)
                    .where(self.sql.trigger_key(trigger.key), *conditions)
                    .values(
                        next_fire_time=to_millis(trigger.next_fire_time),
                        times_triggered=trigger.times_triggered,
                        misfire_orig_fire_time=row.next_fire_time,
                        **self._rescheduled_definition(trigger),
                    )
                ).rowcount
            )
            outcome = f"next fire time {trigger.next_fire_time.isoformat()}"
        if applied:
            late = f"{(now - row.next_fire_time) / 1000:.1f}s late"
            instruction = trigger.misfire_instruction
            member = next((m for m in trigger.misfire_instructions if m == instruction), None)
            named = getattr(member, "name", str(instruction))
            applied_text = f"misfire instruction {named}: {outcome}"
            self.history.record_not_run(
                conn,
                RunResult.MISFIRED if held_by is None else RunResult.HELD,
                f"{late}{why.rstrip(',')}; {applied_text}"
                if held_by is None
                else f"held back by {held_by} ({late}); {applied_text}",
                trigger_key=trigger.key,
                job_key=trigger.job_key,
                scheduled_millis=row.next_fire_time,
                instance_name=decided_by,
            )
        logger.info(
            "misfire: trigger %s%s was %.1fs late (instruction %s); %s",
            trigger.key,
            why,
            (now - row.next_fire_time) / 1000,
            trigger.misfire_instruction,
            outcome,
        )
        return trigger.next_fire_time is not None

    def finish_trigger(self, conn: Connection, key: TriggerKey, *conditions: Any) -> bool:
        """A trigger that will not fire again is removed (and a non-durable job left with no
        trigger with it), unless a firing of it is still in flight: then it stays, COMPLETE,
        until its last firing ends, so that firing is still resolved by the trigger's misfire
        instruction if its message expires. True when removed.

        Race settled: the last two firings of a COMPLETE trigger ending at once, each seeing the
        other's row still there, would both keep the trigger for ever. The trigger row is locked
        first, so the second to finish reads the first one's end (committed) and removes it.
        """
        t, f = self.sql.tables.triggers, self.sql.tables.fired_triggers
        if self.sql.dialect != "sqlite":  # SQLite's transactions are serial already
            conn.execute(
                select(t.c.trigger_name).where(self.sql.trigger_key(key)).with_for_update()
            )
        in_flight = conn.execute(
            select(f.c.fire_instance_id)
            .where(self.sql.scoped(f), f.c.trigger_name == key.name, f.c.trigger_group == key.group)
            .limit(1)
        ).first()
        if in_flight is None:
            return self.remove_trigger(conn, key)
        conn.execute(
            update(t)
            .where(self.sql.trigger_key(key), *conditions)
            .values(trigger_state=TriggerState.COMPLETE, next_fire_time=None)
        )
        return False

    def _rescheduled_definition(self, trigger: Trigger) -> dict[str, Any]:
        """The definition columns a misfire instruction may rewrite.

        Beside next_fire_time and times_triggered, a simple trigger's "reschedule now"
        instructions move ``start_at`` to now and rewrite ``repeat_count`` (in ``detail``), as
        Quartz's SimpleTrigger does; without them the trigger read back from the store would
        compute its later fire times from the old start and count.
        """
        assert trigger.start_at is not None
        return {
            "start_time": to_millis(trigger.start_at),
            "detail": encode_json_object(
                f"trigger {trigger.key}", "detail", trigger.detail(), self.sql.max_data_bytes
            ),
        }
