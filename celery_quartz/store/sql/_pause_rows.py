"""Pausing the triggers a clause matches, keeping the pause's record: shared by the client's
pauses (:mod:`celery_quartz.store.sql.pauses`) and the pause of a trigger whose retries ran out
(:mod:`celery_quartz.store.sql._again`)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, update

from celery_quartz.keys import TriggerKey
from celery_quartz.pausing import PauseRequest
from celery_quartz.store.schema import PAUSED_STATES, TriggerState
from celery_quartz.store.sql._context import SqlContext
from celery_quartz.store.sql._rows import Rows

#: Each trigger whose state a pause or resume moved: (before, after).
Moves = dict[TriggerKey, tuple[str, str]]
#: A pause, state by state: what each state becomes.
_PAUSES = (
    (TriggerState.WAITING, TriggerState.PAUSED),
    (TriggerState.ACQUIRED, TriggerState.PAUSED),
    (TriggerState.BLOCKED, TriggerState.PAUSED_BLOCKED),
)


def pause_matching(
    sql: SqlContext, rows: Rows, conn: Connection, where: Any, request: PauseRequest | None
) -> Moves:
    """Pause the triggers ``where`` matches in ``conn``'s transaction, with ``request``'s record
    (a trigger paused already takes the new record): each trigger whose state moved."""
    t = sql.tables.triggers
    record = rows.pause_values(request)
    moved: Moves = {}
    # An ACQUIRED trigger becomes PAUSED too: the scheduler holding it sees the change when it
    # fires and drops the firing (the state is no longer ACQUIRED). One statement per state, so
    # the audit knows each trigger's state before.
    for old, new in _PAUSES:
        for row in conn.execute(
            update(t)
            .where(where, t.c.trigger_state == old)
            .values(trigger_state=new, **record)
            .returning(t.c.trigger_name, t.c.trigger_group)
        ):
            moved[TriggerKey.stored(row.trigger_name, row.trigger_group)] = (old, new)
    if request is not None:
        # Paused already: the latest pause's record is the one kept.
        conn.execute(update(t).where(where, t.c.trigger_state.in_(PAUSED_STATES)).values(record))
    return moved
