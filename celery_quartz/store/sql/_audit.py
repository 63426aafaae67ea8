"""The audit rows of the client's role (:class:`AuditTrail`): each write's changes, recorded
in its own transaction as the actor of the moment (:func:`celery_quartz.audit.current_actor`)."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Connection, insert

from celery_quartz.audit import Changes, Redaction, current_actor
from celery_quartz.keys import TriggerKey
from celery_quartz.store.sql._context import SqlContext


class AuditTrail:
    """Collects a transaction's changes (:meth:`changes`) and writes them (:meth:`write`)."""

    def __init__(self, sql: SqlContext, redact_keys: str) -> None:
        self.sql = sql
        self.redaction = Redaction(redact_keys)
        a = sql.tables.audit
        self._limits = {
            name: a.c[name].type.length  # type: ignore[attr-defined]
            for name in ("principal", "action", "target_kind", "target")
        }

    def changes(self) -> Changes:
        """An empty collection of changes, redacted as this store redacts."""
        return Changes(self.redaction)

    def write(self, conn: Connection, changes: Changes) -> None:
        """Insert ``changes`` in ``conn``'s transaction (one statement, however many; none
        without a change), as the current actor, at the store clock's time."""
        if not changes:
            return
        actor = current_actor()
        now = self.sql.now()
        principal = actor.principal[: self._limits["principal"]]
        conn.execute(
            insert(self.sql.tables.audit),
            [
                {
                    "sched_name": self.sql.scheduler_name,
                    "event_time": now,
                    "principal": principal,
                    "via": actor.via,
                    "action": change.action[: self._limits["action"]],
                    "target_kind": change.target_kind[: self._limits["target_kind"]],
                    "target": None
                    if change.target is None
                    else change.target[: self._limits["target"]],
                    "changes": json.dumps(change.changes, separators=(",", ":"), sort_keys=True),
                }
                for change in changes.items
            ],
        )

    def record_states(
        self,
        conn: Connection,
        action: str,
        kind: str,
        target: object,
        moved: dict[TriggerKey, tuple[str, str]],
        group_changed: bool = False,
        paused: tuple[bool, bool] = (False, False),
        *,
        reason: str | None = None,
    ) -> None:
        """Audit a pause or a resume: the group's own flag when it changed, and each trigger's
        state that moved, (before, after) (``state`` for one trigger, else by trigger key),
        with the pause's ``reason`` when it gave one; nothing when none moved."""
        before: dict[str, Any] = {"paused": paused[0]} if group_changed else {}
        after: dict[str, Any] = {"paused": paused[1]} if group_changed else {}
        if reason is not None:
            before["pause_reason"], after["pause_reason"] = None, reason
        for key, (old, new) in moved.items():
            name = "state" if kind == "trigger" else str(key)
            before[name], after[name] = old, new
        changes = self.changes()
        changes.add(action, kind, target, before, after)
        self.write(conn, changes)
