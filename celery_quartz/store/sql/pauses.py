"""The client's pauses (:class:`~celery_quartz.store.abc.JobStore`'s pause and resume
operations): a trigger, a set of triggers, a job's, a group's, everything; each keeps its pause
record (why, who, when) and the resume clears it (docs/steering.md#pause-with-a-reason)."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from sqlalchemy import Connection, and_, delete, insert, select, tuple_, update

from celery_quartz.keys import JobKey, TriggerKey
from celery_quartz.pausing import PauseRecord, PauseRequest
from celery_quartz.store.abc import PauseStore
from celery_quartz.store.schema import PAUSED_STATES, TriggerState
from celery_quartz.store.sql._context import SqlContext
from celery_quartz.store.sql._definitions import Definitions
from celery_quartz.store.sql._rows import ALL_GROUPS_PAUSED, PAUSE_COLUMNS, Rows, pause_record


class PausesSql(PauseStore):
    """The pause and resume operations of the client's role, on the SQL tables."""

    def __init__(self, sql: SqlContext, rows: Rows, definitions: Definitions) -> None:
        self.sql = sql
        self.rows = rows
        self.definitions = definitions

    def pause_trigger(self, key: TriggerKey, request: PauseRequest | None = None) -> None:
        with self.sql.transaction() as conn:
            self._pause_triggers(conn, self.sql.trigger_key(key), request)

    def resume_trigger(self, key: TriggerKey) -> None:
        with self.sql.transaction() as conn:
            self._resume_triggers(conn, self.sql.trigger_key(key))

    def pause_triggers(
        self, keys: Sequence[TriggerKey], request: PauseRequest | None = None
    ) -> None:
        with self.sql.transaction() as conn:
            for chunk in _chunks(keys):
                self._pause_triggers(conn, self._trigger_keys(chunk), request)

    def resume_triggers(self, keys: Sequence[TriggerKey]) -> None:
        with self.sql.transaction() as conn:
            for chunk in _chunks(keys):
                self._resume_triggers(conn, self._trigger_keys(chunk))

    def pause_job(self, key: JobKey, request: PauseRequest | None = None) -> None:
        with self.sql.transaction() as conn:
            self._pause_triggers(conn, self.sql.triggers_of_job(key), request)

    def resume_job(self, key: JobKey) -> None:
        with self.sql.transaction() as conn:
            self._resume_triggers(conn, self.sql.triggers_of_job(key))

    def pause_trigger_group(self, group: str, request: PauseRequest | None = None) -> None:
        t = self.sql.tables.triggers
        with self.sql.transaction() as conn:
            self._pause_group(conn, group, request)
            self._pause_triggers(
                conn, and_(self.sql.scoped(t), t.c.trigger_group == group), request
            )

    def resume_trigger_group(self, group: str) -> None:
        p, t = self.sql.tables.paused_trigger_groups, self.sql.tables.triggers
        with self.sql.transaction() as conn:
            conn.execute(delete(p).where(self.sql.scoped(p), p.c.trigger_group == group))
            self._resume_triggers(conn, and_(self.sql.scoped(t), t.c.trigger_group == group))

    def pause_all(self, request: PauseRequest | None = None) -> None:
        t = self.sql.tables.triggers
        with self.sql.transaction() as conn:
            groups = conn.execute(
                select(t.c.trigger_group).distinct().where(self.sql.scoped(t))
            ).scalars()
            for group in (*groups, ALL_GROUPS_PAUSED):
                self._pause_group(conn, group, request)
            self._pause_triggers(conn, self.sql.scoped(t), request)

    def resume_all(self) -> None:
        p, t = self.sql.tables.paused_trigger_groups, self.sql.tables.triggers
        with self.sql.transaction() as conn:
            conn.execute(delete(p).where(self.sql.scoped(p)))
            self._resume_triggers(conn, self.sql.scoped(t))

    def paused_trigger_groups(self) -> list[str]:
        with self.sql.transaction() as conn:
            return sorted(self.rows.paused_groups(conn) - {ALL_GROUPS_PAUSED})

    def paused_group_records(self) -> dict[str, PauseRecord]:
        with self.sql.transaction() as conn:
            records = self.rows.paused_group_records(conn)
        return {
            "*" if group == ALL_GROUPS_PAUSED else group: record
            for group, values in sorted(records.items())
            if (record := pause_record(SimpleNamespace(**values))) is not None
        }

    def _trigger_keys(self, keys: Sequence[TriggerKey]) -> Any:
        t = self.sql.tables.triggers
        return and_(
            self.sql.scoped(t),
            tuple_(t.c.trigger_name, t.c.trigger_group).in_([(k.name, k.group) for k in keys]),
        )

    def _pause_group(self, conn: Connection, group: str, request: PauseRequest | None) -> None:
        """Record ``group`` as paused (a group paused already takes the new record)."""
        p = self.sql.tables.paused_trigger_groups
        clause = and_(self.sql.scoped(p), p.c.trigger_group == group)
        record = self.rows.pause_values(request)
        if conn.execute(select(p.c.trigger_group).where(clause)).first() is None:
            conn.execute(
                insert(p).values(sched_name=self.sql.scheduler_name, trigger_group=group, **record)
            )
        elif request is not None:
            conn.execute(update(p).where(clause).values(record))

    def _pause_triggers(self, conn: Connection, where: Any, request: PauseRequest | None) -> None:
        t = self.sql.tables.triggers
        # An ACQUIRED trigger becomes PAUSED too: the scheduler holding it sees the change when it
        # fires and drops the firing (the state is no longer ACQUIRED).
        record = self.rows.pause_values(request)
        conn.execute(
            update(t)
            .where(where, t.c.trigger_state.in_([TriggerState.WAITING, TriggerState.ACQUIRED]))
            .values(trigger_state=TriggerState.PAUSED, **record)
        )
        conn.execute(
            update(t)
            .where(where, t.c.trigger_state == TriggerState.BLOCKED)
            .values(trigger_state=TriggerState.PAUSED_BLOCKED, **record)
        )
        if request is not None:
            # Paused already: the latest pause's record is the one kept.
            conn.execute(
                update(t).where(where, t.c.trigger_state.in_(PAUSED_STATES)).values(record)
            )

    def _resume_triggers(self, conn: Connection, where: Any) -> None:
        t = self.sql.tables.triggers
        now = self.sql.now()
        rows = conn.execute(select(t).where(where, t.c.trigger_state.in_(PAUSED_STATES))).all()
        cleared = dict.fromkeys(PAUSE_COLUMNS)
        for row in rows:
            key = self.sql.trigger_key(TriggerKey(row.trigger_name, row.trigger_group))
            conn.execute(update(t).where(key).values(cleared))
            # Quartz applies the misfire instruction on resume when the pause made it late.
            if (
                row.next_fire_time is not None
                and row.next_fire_time < now - self.sql.misfire_threshold_ms
                and not self.definitions.apply_misfire(conn, row, now, ", paused,")
            ):
                continue
            blocked = row.trigger_state == TriggerState.PAUSED_BLOCKED
            conn.execute(
                update(t)
                .where(key)
                .values(trigger_state=TriggerState.BLOCKED if blocked else TriggerState.WAITING)
            )


#: Keys per statement when pausing or resuming a set of triggers.
_KEYS_PER_STATEMENT = 500


def _chunks(keys: Sequence[TriggerKey]) -> list[Sequence[TriggerKey]]:
    return [keys[i : i + _KEYS_PER_STATEMENT] for i in range(0, len(keys), _KEYS_PER_STATEMENT)]
