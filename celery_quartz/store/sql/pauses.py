"""The client's pauses (:class:`~celery_quartz.store.abc.PauseStore`): a trigger, a set of
triggers, a job's, a group's, everything. Each keeps its pause record (why, who, when), which
the resume clears (docs/steering.md#pause-with-a-reason), and each is audited with the states
it moved and the reason."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from sqlalchemy import Connection, and_, delete, insert, select, tuple_, update

from celery_quartz.keys import JobKey, TriggerKey
from celery_quartz.pausing import PauseRecord, PauseRequest
from celery_quartz.store.abc import PauseStore
from celery_quartz.store.schema import PAUSED_STATES, TriggerState
from celery_quartz.store.sql._audit import AuditTrail
from celery_quartz.store.sql._context import SqlContext
from celery_quartz.store.sql._definitions import Definitions
from celery_quartz.store.sql._overlaps import HeldOccurrences
from celery_quartz.store.sql._pause_rows import Moves, pause_matching
from celery_quartz.store.sql._rows import ALL_GROUPS_PAUSED, PAUSE_COLUMNS, Rows, pause_record

_Moves = Moves
#: Keys per statement when pausing or resuming a set of triggers.
_KEYS_PER_STATEMENT = 500


class PausesSql(PauseStore):
    """The pause and resume operations of the client's role, on the SQL tables."""

    def __init__(
        self, sql: SqlContext, rows: Rows, definitions: Definitions, audit: AuditTrail
    ) -> None:
        self.sql = sql
        self.rows = rows
        self.definitions = definitions
        self.held = HeldOccurrences(sql, definitions)
        self.audit = audit

    def pause_trigger(self, key: TriggerKey, request: PauseRequest | None = None) -> None:
        with self.sql.transaction() as conn:
            moved = self._pause_triggers(conn, self.sql.trigger_key(key), request)
            self._audit(conn, "pause_trigger", "trigger", key, moved, request)

    def resume_trigger(self, key: TriggerKey) -> None:
        with self.sql.transaction() as conn:
            moved = self._resume_triggers(conn, self.sql.trigger_key(key))
            self._audit(conn, "resume_trigger", "trigger", key, moved)

    def pause_triggers(
        self, keys: Sequence[TriggerKey], request: PauseRequest | None = None
    ) -> None:
        with self.sql.transaction() as conn:
            moved: _Moves = {}
            for chunk in _chunks(keys):
                moved.update(self._pause_triggers(conn, self._trigger_keys(chunk), request))
            self._audit(conn, "pause_triggers", "triggers", None, moved, request)

    def resume_triggers(self, keys: Sequence[TriggerKey]) -> None:
        with self.sql.transaction() as conn:
            moved: _Moves = {}
            for chunk in _chunks(keys):
                moved.update(self._resume_triggers(conn, self._trigger_keys(chunk)))
            self._audit(conn, "resume_triggers", "triggers", None, moved)

    def pause_job(self, key: JobKey, request: PauseRequest | None = None) -> None:
        with self.sql.transaction() as conn:
            moved = self._pause_triggers(conn, self.sql.triggers_of_job(key), request)
            self._audit(conn, "pause_job", "job", key, moved, request)

    def resume_job(self, key: JobKey) -> None:
        with self.sql.transaction() as conn:
            moved = self._resume_triggers(conn, self.sql.triggers_of_job(key))
            self._audit(conn, "resume_job", "job", key, moved)

    def pause_trigger_group(self, group: str, request: PauseRequest | None = None) -> None:
        t = self.sql.tables.triggers
        with self.sql.transaction() as conn:
            newly = self._pause_group(conn, group, request)
            moved = self._pause_triggers(
                conn, and_(self.sql.scoped(t), t.c.trigger_group == group), request
            )
            self._audit(conn, "pause_group", "group", group, moved, request, newly, (False, True))

    def resume_trigger_group(self, group: str) -> None:
        p, t = self.sql.tables.paused_trigger_groups, self.sql.tables.triggers
        with self.sql.transaction() as conn:
            was_paused = bool(
                conn.execute(
                    delete(p).where(self.sql.scoped(p), p.c.trigger_group == group)
                ).rowcount
            )
            moved = self._resume_triggers(
                conn, and_(self.sql.scoped(t), t.c.trigger_group == group)
            )
            self._audit(
                conn, "resume_group", "group", group, moved, None, was_paused, (True, False)
            )

    def pause_all(self, request: PauseRequest | None = None) -> None:
        t = self.sql.tables.triggers
        with self.sql.transaction() as conn:
            groups = list(
                conn.execute(
                    select(t.c.trigger_group).distinct().where(self.sql.scoped(t))
                ).scalars()
            )
            newly = False
            for group in (*groups, ALL_GROUPS_PAUSED):
                newly = self._pause_group(conn, group, request) or newly
            moved = self._pause_triggers(conn, self.sql.scoped(t), request)
            self._audit(conn, "pause_all", "scheduler", "*", moved, request, newly, (False, True))

    def resume_all(self) -> None:
        p, t = self.sql.tables.paused_trigger_groups, self.sql.tables.triggers
        with self.sql.transaction() as conn:
            was_paused = bool(conn.execute(delete(p).where(self.sql.scoped(p))).rowcount)
            moved = self._resume_triggers(conn, self.sql.scoped(t))
            self._audit(
                conn, "resume_all", "scheduler", "*", moved, None, was_paused, (True, False)
            )

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

    def _audit(
        self,
        conn: Connection,
        action: str,
        kind: str,
        target: object,
        moved: _Moves,
        request: PauseRequest | None = None,
        group_changed: bool = False,
        paused: tuple[bool, bool] = (False, False),
    ) -> None:
        """Audit the states ``moved`` (and a group's own flag), with the pause's reason when it
        moved anything; nothing when nothing moved."""
        reason = None if request is None or not (moved or group_changed) else request.reason
        self.audit.record_states(
            conn, action, kind, target, moved, group_changed, paused, reason=reason
        )

    def _trigger_keys(self, keys: Sequence[TriggerKey]) -> Any:
        t = self.sql.tables.triggers
        return and_(
            self.sql.scoped(t),
            tuple_(t.c.trigger_name, t.c.trigger_group).in_([(k.name, k.group) for k in keys]),
        )

    def _pause_group(self, conn: Connection, group: str, request: PauseRequest | None) -> bool:
        """Record ``group`` as paused (a group paused already takes the new record); whether it
        was not paused before."""
        p = self.sql.tables.paused_trigger_groups
        clause = and_(self.sql.scoped(p), p.c.trigger_group == group)
        record = self.rows.pause_values(request)
        if conn.execute(select(p.c.trigger_group).where(clause)).first() is None:
            conn.execute(
                insert(p).values(sched_name=self.sql.scheduler_name, trigger_group=group, **record)
            )
            return True
        if request is not None:
            conn.execute(update(p).where(clause).values(record))
        return False

    def _pause_triggers(self, conn: Connection, where: Any, request: PauseRequest | None) -> _Moves:
        return pause_matching(self.sql, self.rows, conn, where, request)

    def _resume_triggers(self, conn: Connection, where: Any) -> _Moves:
        t = self.sql.tables.triggers
        now = self.sql.now()
        moved: _Moves = {}
        rows = conn.execute(select(t).where(where, t.c.trigger_state.in_(PAUSED_STATES))).all()
        cleared = dict.fromkeys(PAUSE_COLUMNS)
        for row in rows:
            key = TriggerKey.stored(row.trigger_name, row.trigger_group)
            conn.execute(update(t).where(self.sql.trigger_key(key)).values(cleared))
            # Quartz applies the misfire instruction on resume when the pause made it late.
            if (
                row.next_fire_time is not None
                and row.next_fire_time < now - self.sql.misfire_threshold_ms
                and not self.definitions.apply_misfire(conn, row, now, ", paused,")
            ):
                moved[key] = (row.trigger_state, TriggerState.COMPLETE)
                continue
            blocked = row.trigger_state == TriggerState.PAUSED_BLOCKED and self.held.still_held(
                conn, row
            )
            state = TriggerState.BLOCKED if blocked else TriggerState.WAITING
            conn.execute(update(t).where(self.sql.trigger_key(key)).values(trigger_state=state))
            moved[key] = (row.trigger_state, state)
        return moved


def _chunks(keys: Sequence[TriggerKey]) -> list[Sequence[TriggerKey]]:
    return [keys[i : i + _KEYS_PER_STATEMENT] for i in range(0, len(keys), _KEYS_PER_STATEMENT)]
