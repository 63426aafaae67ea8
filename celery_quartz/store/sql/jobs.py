"""The client's role: jobs, triggers, calendars, pause and resume
(:class:`~celery_quartz.store.abc.JobStore`)."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Connection,
    and_,
    delete,
    insert,
    select,
    text,
    update,
)

from celery_quartz.audit import Changes
from celery_quartz.clock import to_millis
from celery_quartz.definitions import (
    ALL_GROUPS,
    PROTECTED_GROUPS,
    Needs,
    Plan,
    SchedulingData,
    Snapshot,
    needs,
    plan,
)
from celery_quartz.editing import TriggerEdit
from celery_quartz.errors import (
    CalendarInUseError,
    InvalidTriggerError,
    ObjectAlreadyExistsError,
    TriggerNotFoundError,
)
from celery_quartz.job import Job, encode_json_object
from celery_quartz.keys import JobKey, TriggerKey
from celery_quartz.pausing import PauseRequest
from celery_quartz.store.abc import JobStore
from celery_quartz.store.records import NONE_STATE
from celery_quartz.store.schema import (
    TriggerState,
)
from celery_quartz.store.sql._audit import AuditTrail
from celery_quartz.store.sql._context import SqlContext
from celery_quartz.store.sql._definitions import Definitions
from celery_quartz.store.sql._rows import (
    Rows,
    initial_state,
    job_from_row,
    pin_columns,
    same_job,
    trigger_from_row,
)
from celery_quartz.triggers.base import (
    UNCHANGED,
    Trigger,
    TriggerDetailsUpdate,
)

logger = logging.getLogger(__name__)

#: Each trigger whose state a pause or a resume moved: (state before, state after).
#: The columns :meth:`JobsSql.update_trigger_details` may change.
_DETAILS = ("description", "preferred_node", "preferred_node_auto")

#: A load that adds at least this many jobs refreshes PostgreSQL's planner statistics.
_ANALYZE_AFTER_ROWS = 1000


class JobsSql(JobStore):
    """The client's role on the SQL tables. Every write records its changes in the audit
    (:class:`~celery_quartz.store.sql._audit.AuditTrail`) before it commits."""

    def __init__(
        self, sql: SqlContext, rows: Rows, definitions: Definitions, audit: AuditTrail
    ) -> None:
        self.sql = sql
        self.rows = rows
        self.definitions = definitions
        self.audit = audit
        self.clock = sql.clock
        self.max_data_bytes = sql.max_data_bytes

    def store_jobs_and_triggers(
        self,
        items: Sequence[tuple[Job | None, Sequence[Trigger]]],
        *,
        replace: bool = False,
        paused: PauseRequest | None = None,
    ) -> None:
        jobs = [job for job, _ in items if job is not None]
        triggers = [trigger for _, item_triggers in items for trigger in item_triggers]
        with self.sql.transaction() as conn:
            stored_jobs, stored_triggers = (
                _stored(conn, self.sql, self.rows, jobs, triggers) if replace else ({}, {})
            )
            self.definitions.store_many(
                conn, jobs, triggers, replace, self.sql.clock.now(), paused=paused
            )
            changes = self.audit.changes()
            for job in jobs:
                before = stored_jobs.get(job.key)
                changes.job("schedule_job" if before is None else "replace_job", before, job)
            for trigger in triggers:
                old = stored_triggers.get(trigger.key)
                changes.trigger(
                    "schedule_trigger" if old is None else "replace_trigger", old, trigger
                )
            self.audit.write(conn, changes)

    def store_calendar(self, name: str, calendar: Any, *, replace: bool = False) -> None:
        c = self.sql.tables.calendars
        encoded = encode_json_object(
            f"calendar {name!r}", "definition", calendar.to_dict(), self.sql.max_data_bytes
        )
        clause = and_(self.sql.scoped(c), c.c.calendar_name == name)
        with self.sql.transaction() as conn:
            changes = self.audit.changes()
            stored = conn.execute(select(c.c.calendar).where(clause)).first()
            if stored is not None:
                if not replace:
                    raise ObjectAlreadyExistsError(f"calendar {name!r} already exists")
                conn.execute(update(c).where(clause).values(calendar=encoded))
                before = json.loads(stored.calendar)
                changes.add("replace_calendar", "calendar", name, before, json.loads(encoded))
            else:
                conn.execute(
                    insert(c).values(
                        sched_name=self.sql.scheduler_name, calendar_name=name, calendar=encoded
                    )
                )
                changes.add("store_calendar", "calendar", name, None, json.loads(encoded))
            self.audit.write(conn, changes)

    def retrieve_calendar(self, name: str) -> Any | None:
        from celery_quartz.calendars import calendar_from_dict

        c = self.sql.tables.calendars
        with self.sql.transaction() as conn:
            row = conn.execute(
                select(c.c.calendar).where(self.sql.scoped(c), c.c.calendar_name == name)
            ).first()
        return None if row is None else calendar_from_dict(json.loads(row.calendar))

    def remove_calendar(self, name: str) -> bool:
        c, t = self.sql.tables.calendars, self.sql.tables.triggers
        with self.sql.transaction() as conn:
            user = conn.execute(
                select(t.c.trigger_name, t.c.trigger_group)
                .where(self.sql.scoped(t), t.c.calendar_name == name)
                .limit(1)
            ).first()
            if user is not None:
                raise CalendarInUseError(
                    f"calendar {name!r} is used by trigger {user.trigger_group}.{user.trigger_name}"
                )
            removed = conn.execute(
                delete(c)
                .where(self.sql.scoped(c), c.c.calendar_name == name)
                .returning(c.c.calendar)
            ).first()
            if removed is None:
                return False
            changes = self.audit.changes()
            changes.add("remove_calendar", "calendar", name, json.loads(removed.calendar), None)
            self.audit.write(conn, changes)
            return True

    def retrieve_job(self, key: JobKey) -> Job | None:
        j = self.sql.tables.jobs
        with self.sql.transaction() as conn:
            row = conn.execute(select(j).where(self.sql.job_key(key))).first()
        return None if row is None else job_from_row(row)

    def retrieve_trigger(self, key: TriggerKey) -> Trigger | None:
        t = self.sql.tables.triggers
        with self.sql.transaction() as conn:
            row = conn.execute(select(t).where(self.sql.trigger_key(key))).first()
        return None if row is None else trigger_from_row(row)

    def get_trigger_state(self, key: TriggerKey) -> str:
        t = self.sql.tables.triggers
        with self.sql.transaction() as conn:
            row = conn.execute(select(t.c.trigger_state).where(self.sql.trigger_key(key))).first()
        if row is None:
            return NONE_STATE
        # Quartz reports ACQUIRED as NORMAL to users; we keep the store's own word.
        return str(row.trigger_state)

    def get_triggers_of_job(self, key: JobKey) -> list[Trigger]:
        t = self.sql.tables.triggers
        with self.sql.transaction() as conn:
            rows = conn.execute(
                select(t)
                .where(
                    self.sql.scoped(t),
                    t.c.job_name == key.name,
                    t.c.job_group == key.group,
                )
                .order_by(t.c.trigger_group, t.c.trigger_name)
            ).all()
        return [trigger_from_row(r) for r in rows]

    def job_keys(self, group: str | None = None) -> list[JobKey]:
        j = self.sql.tables.jobs
        q = select(j.c.job_name, j.c.job_group).where(self.sql.scoped(j))
        if group is not None:
            q = q.where(j.c.job_group == group)
        with self.sql.transaction() as conn:
            rows = conn.execute(q.order_by(j.c.job_group, j.c.job_name)).all()
        return [JobKey(r.job_name, r.job_group) for r in rows]

    def remove_trigger(self, key: TriggerKey) -> bool:
        with self.sql.transaction() as conn:
            changes = self.audit.changes()
            removed = self.definitions.remove_trigger(conn, key, changes)
            self.audit.write(conn, changes)
            return removed

    def remove_job(self, key: JobKey) -> bool:
        with self.sql.transaction() as conn:
            changes = self.audit.changes()
            removed = self.definitions.delete_job(conn, key, changes)
            self.audit.write(conn, changes)
            return removed

    def update_trigger_details(self, key: TriggerKey, details: TriggerDetailsUpdate) -> None:
        """A firing already acquired keeps the pin it recorded; when the pin changed, that
        firing's start finds nothing to swap (:mod:`~celery_quartz.store.sql.worker`)."""
        t = self.sql.tables.triggers
        values: dict[str, Any] = {}
        if details.description is not UNCHANGED:
            values["description"] = details.description
        if details.preferred_node is not UNCHANGED:
            values.update(pin_columns(details.preferred_node))
        with self.sql.transaction() as conn:
            before = conn.execute(
                select(*(t.c[name] for name in _DETAILS)).where(self.sql.trigger_key(key))
            ).first()
            if before is None or (
                values
                and not conn.execute(
                    update(t).where(self.sql.trigger_key(key)).values(values)
                ).rowcount
            ):
                raise TriggerNotFoundError(f"trigger {key} is not stored")
            changes = self.audit.changes()
            old = dict(before._mapping)
            changes.add("update_trigger", "trigger", key, old, {**old, **values})
            self.audit.write(conn, changes)

    def replace_trigger(self, key: TriggerKey, new_trigger: Trigger) -> bool:
        t = self.sql.tables.triggers
        now = self.sql.clock.now()
        with self.sql.transaction() as conn:
            row = conn.execute(select(t).where(self.sql.trigger_key(key))).first()
            if row is None:
                return False
            if new_trigger.job_key is None:
                new_trigger.job_key = JobKey(row.job_name, row.job_group)
            conn.execute(delete(t).where(self.sql.trigger_key(key)))
            self.definitions.store_trigger(conn, new_trigger, replace=False, now=now)
            changes = self.audit.changes()
            changes.trigger("replace_trigger", trigger_from_row(row), new_trigger)
            if new_trigger.job_key != JobKey(row.job_name, row.job_group):
                self.definitions.delete_job_if_orphaned(
                    conn, JobKey(row.job_name, row.job_group), changes
                )
            self.audit.write(conn, changes)
        return True

    def edit_trigger(self, key: TriggerKey, edit: TriggerEdit, *, dry_run: bool = False) -> Trigger:
        t = self.sql.tables.triggers
        with self.sql.transaction() as conn:
            row = conn.execute(select(t).where(self.sql.trigger_key(key)).with_for_update()).first()
            if row is None:
                raise TriggerNotFoundError(f"trigger {key} is not stored")
            stored = trigger_from_row(row)
            edited = edit.apply(stored)
            values = self.rows.trigger_values(edited, row.trigger_state)
            # What firing wrote stays: the counts, the last fire time, and (unless the schedule
            # changed) the next one.
            values.update(
                prev_fire_time=row.prev_fire_time,
                times_triggered=row.times_triggered,
                next_fire_time=row.next_fire_time,
            )
            if edit.reschedules(stored, edited):
                calendar = self.rows.calendar(conn, edited.calendar_name, key)
                next_fire_time = edited.reschedule_from(self.sql.clock.now(), calendar)
                if next_fire_time is None:
                    raise InvalidTriggerError(
                        f"trigger {key}: based on its edited schedule it will never fire again"
                    )
                values["next_fire_time"] = to_millis(next_fire_time)
                if row.trigger_state == TriggerState.ACQUIRED:
                    values["trigger_state"] = TriggerState.WAITING
            else:
                edited.next_fire_time = stored.next_fire_time
            if not dry_run:
                conn.execute(update(t).where(self.sql.trigger_key(key)).values(values))
                changes = self.audit.changes()
                changes.trigger("update_trigger", stored, edited)
                self.audit.write(conn, changes)
        return edited

    def reset_trigger_from_error_state(self, keys: Sequence[TriggerKey]) -> int:
        t, j = self.sql.tables.triggers, self.sql.tables.jobs
        reset = 0
        with self.sql.transaction() as conn:
            changes = self.audit.changes()
            for key in keys:
                row = conn.execute(
                    select(t.c.trigger_state, j.c.is_nonconcurrent, t.c.job_name, t.c.job_group)
                    .join(j, same_job(j, t))
                    .where(self.sql.trigger_key(key))
                ).first()
                if row is None or row.trigger_state != TriggerState.ERROR:
                    continue
                job_key = JobKey.stored(row.job_name, row.job_group)
                state = initial_state(
                    key,
                    self.rows.paused_groups(conn),
                    blocked=bool(
                        row.is_nonconcurrent and self.rows.jobs_in_flight(conn, [job_key])
                    ),
                )
                done = conn.execute(
                    update(t)
                    .where(self.sql.trigger_key(key), t.c.trigger_state == TriggerState.ERROR)
                    .values(trigger_state=state, error_reason=None)
                ).rowcount
                if done:
                    changes.add(
                        "reset_trigger", "trigger", key, {"state": "ERROR"}, {"state": state}
                    )
                reset += done
            self.audit.write(conn, changes)
        return reset

    # -- scheduling files -----------------------------------------------------------------------

    def apply_scheduling_data(
        self, files: Sequence[SchedulingData], now: datetime, *, dry_run: bool = False
    ) -> Plan:
        # The read, the plan and the write are one transaction under the TRIGGER_ACCESS lock row
        # (SQLite: its write lock).
        with self.sql.transaction() as conn:
            if not dry_run:  # a dry run decides nothing others could race on
                self.sql.lock(conn, "TRIGGER_ACCESS")
            snapshot = _read_snapshot(conn, self.sql, self.rows, needs(files))
            result = plan(
                snapshot, files, now, calendar=lambda name, key: self.rows.calendar(conn, name, key)
            )
            if dry_run or not result.changed:
                return result
            t = self.sql.tables.triggers
            changes = self.audit.changes()
            for tkey in result.triggers_deleted:
                for row in conn.execute(delete(t).where(self.sql.trigger_key(tkey)).returning(t)):
                    changes.trigger("remove_trigger", trigger_from_row(row), None)
            for key in result.jobs_deleted:
                self.definitions.delete_job(conn, key, changes)
            self.definitions.store_many(
                conn, result.jobs_to_write, result.triggers_to_write, True, now
            )
            _record_plan(changes, snapshot, result)
            self.audit.write(conn, changes)
            # A trigger scheduled relative to the one it replaced keeps the next fire time the
            # plan gave it (the store computed one from its start).
            for tkey, when in result.next_fire_times.items():
                conn.execute(
                    update(t)
                    .where(self.sql.trigger_key(tkey))
                    .values(next_fire_time=to_millis(when))
                )
        if self.sql.dialect == "postgresql" and len(result.jobs_added) >= _ANALYZE_AFTER_ROWS:
            # Fresh statistics: a planner that has never seen the new rows scans a whole trigger
            # group where one key lookup would do, until autovacuum gets round to it.
            with self.sql.engine.connect() as conn:
                conn.execute(text(f"ANALYZE {self.sql.tables.jobs.name}"))
                conn.execute(text(f"ANALYZE {self.sql.tables.triggers.name}"))
                conn.commit()
        return result

    def scheduled_definitions(self) -> tuple[list[Job], list[Trigger]]:
        j, t = self.sql.tables.jobs, self.sql.tables.triggers
        with self.sql.transaction() as conn:
            job_rows = conn.execute(
                select(j).where(self.sql.scoped(j), j.c.job_group.not_in(PROTECTED_GROUPS))
            ).all()
            trigger_rows = conn.execute(
                select(t).where(
                    self.sql.scoped(t),
                    t.c.trigger_group.not_in(PROTECTED_GROUPS),
                    t.c.job_group.not_in(PROTECTED_GROUPS),
                )
            ).all()
        return (
            [job_from_row(row) for row in job_rows],
            [trigger_from_row(row) for row in trigger_rows],
        )


def _record_plan(changes: Changes, snapshot: Snapshot, result: Plan) -> None:
    """The audit of a load's jobs and triggers written, each against the one stored before (the
    snapshot's); one whose definition the audit sees unchanged records nothing."""
    for job in result.jobs_to_write:
        before = snapshot.jobs.get(job.key)
        changes.job("schedule_job" if before is None else "replace_job", before, job)
    for trigger in result.triggers_to_write:
        old = snapshot.triggers.get(trigger.key)
        changes.trigger("schedule_trigger" if old is None else "replace_trigger", old, trigger)


def _stored(
    conn: Connection,
    sql: SqlContext,
    rows: Rows,
    jobs: Sequence[Job],
    triggers: Sequence[Trigger],
) -> tuple[dict[JobKey, Job], dict[TriggerKey, Trigger]]:
    """The stored jobs and triggers of the keys of ``jobs`` and ``triggers`` (what a replace
    replaces, for the audit)."""
    j, t = sql.tables.jobs, sql.tables.triggers
    stored_jobs = {
        job.key: job
        for job in map(
            job_from_row,
            rows.by_key(conn, select(j), j.c.job_name, j.c.job_group, [x.key for x in jobs]),
        )
    }
    stored_triggers = {
        trigger.key: trigger
        for trigger in map(
            trigger_from_row,
            rows.by_key(
                conn, select(t), t.c.trigger_name, t.c.trigger_group, [x.key for x in triggers]
            ),
        )
    }
    return stored_jobs, stored_triggers


def _read_snapshot(conn: Connection, sql: SqlContext, rows: Rows, wanted: Needs) -> Snapshot:
    """The stored jobs and triggers ``wanted`` names, closed both ways: every trigger of a job
    read, and the job of every trigger read."""
    j, t = sql.tables.jobs, sql.tables.triggers
    jobs: dict[JobKey, Job] = {}
    triggers: dict[TriggerKey, Trigger] = {}

    def add_triggers(found: Any) -> None:
        for row in found:
            key = TriggerKey.stored(row.trigger_name, row.trigger_group)
            if key not in triggers:  # a delete command's group and a job's may overlap
                triggers[key] = trigger_from_row(row)

    def add_jobs(found: Any) -> None:
        for row in found:
            job = job_from_row(row)
            jobs[job.key] = job

    def add_jobs_by_key(keys: set[JobKey]) -> None:
        add_jobs(rows.by_key(conn, select(j), j.c.job_name, j.c.job_group, sorted(keys)))

    def add_triggers_of(keys: set[JobKey]) -> None:
        add_triggers(rows.by_key(conn, select(t), t.c.job_name, t.c.job_group, sorted(keys)))

    def jobs_of_triggers() -> set[JobKey]:
        return {tr.job_key for tr in triggers.values() if tr.job_key}

    everyone = sql.scoped(t)
    if ALL_GROUPS in wanted.trigger_groups:
        add_triggers(conn.execute(select(t).where(everyone)))
    elif wanted.trigger_groups:
        add_triggers(
            conn.execute(select(t).where(everyone, t.c.trigger_group.in_(wanted.trigger_groups)))
        )
    if ALL_GROUPS in wanted.job_groups:
        add_jobs(conn.execute(select(j).where(sql.scoped(j))))
    elif wanted.job_groups:
        add_jobs(conn.execute(select(j).where(sql.scoped(j), j.c.job_group.in_(wanted.job_groups))))
    add_jobs_by_key((set(wanted.job_keys) | jobs_of_triggers()) - jobs.keys())
    # Every trigger of every job read: whether a job keeps a trigger is judged on all of them.
    add_triggers_of(set(jobs))
    # Then the triggers named by key that none of those jobs holds (one moving to another job),
    # with their jobs and those jobs' triggers: each trigger is read once.
    add_triggers(
        rows.by_key(
            conn,
            select(t),
            t.c.trigger_name,
            t.c.trigger_group,
            sorted(wanted.trigger_keys - triggers.keys()),
        )
    )
    moved = jobs_of_triggers() - jobs.keys()
    add_jobs_by_key(moved)
    add_triggers_of(moved)
    return Snapshot(
        jobs=jobs,
        triggers=triggers,
        job_groups=wanted.job_groups,
        trigger_groups=wanted.trigger_groups,
    )
