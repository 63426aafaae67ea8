"""Row helpers of the SQL store: pure functions over rows and columns, shared by every role."""

from __future__ import annotations

import functools
import json
from collections import namedtuple
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Column,
    ColumnClause,
    Result,
    Row,
    Text,
    and_,
    bindparam,
    cast,
    column,
    func,
)
from sqlalchemy.dialects.postgresql import JSON

from celery_quartz.affinity import PreferredNode
from celery_quartz.clock import from_millis, to_millis
from celery_quartz.keys import TriggerKey
from celery_quartz.routing import (
    direct_queue,
)
from celery_quartz.store.schema import (
    ERROR_TEXT,
    KEY_PART,
    STATE,
    TriggerState,
)
from celery_quartz.store.views import FiringOutcome, LastOutcome

#: ``triggers.last_outcome`` values.
SUCCEEDED = "SUCCEEDED"
FAILED = "FAILED"


def recordset(alias: str, columns: Sequence[ColumnClause[Any] | Column[Any]]) -> Any:
    """``json_to_recordset(CAST(:alias AS JSON)) AS alias(a TYPE, …)``: a batch's rows as one
    JSON parameter named after the alias, a list of objects keyed by column name
    (:func:`json_rows`).

    One parameter whatever the batch size, so the statement keeps one shape (SQLAlchemy compiles
    it once), and one string to pass: psycopg2 adapts an array parameter value by value, and
    PostgreSQL parses each value as a literal of the statement. With an array per column, a
    batch's INSERT cost the client 12.5 to 16.9 µs of CPU per row against 6.5, and took 38 µs per
    row end to end against 25 (``bench/RESULTS.md``).
    """
    typed = [column(c.name, c.type) for c in columns]
    return (
        func.json_to_recordset(cast(bindparam(alias, type_=Text), JSON))
        .table_valued(*typed)
        .render_derived(name=alias, with_types=True)
    )


#: A batch's rows as the JSON :func:`recordset` reads (compact: it is sent once per batch).
json_rows = json.JSONEncoder(separators=(",", ":")).encode

#: The paused-groups row that pauses every group (Quartz's marker).
ALL_GROUPS_PAUSED = "_$_ALL_GROUPS_PAUSED_$_"


def initial_state(key: TriggerKey, paused_groups: set[str], *, blocked: bool) -> str:
    """The state a trigger enters when stored or reset: paused with its group (or with every
    group), blocked while its disallow_concurrent job has a firing in flight."""
    if key.group in paused_groups or ALL_GROUPS_PAUSED in paused_groups:
        return TriggerState.PAUSED_BLOCKED if blocked else TriggerState.PAUSED
    return TriggerState.BLOCKED if blocked else TriggerState.WAITING


def same_job(jobs: Any, other: Any) -> Any:
    """The join of the jobs table to ``other`` (triggers or fired rows) on the job's key."""
    return and_(
        jobs.c.sched_name == other.c.sched_name,
        jobs.c.job_name == other.c.job_name,
        jobs.c.job_group == other.c.job_group,
    )


def pin_columns(pin: PreferredNode) -> dict[str, Any]:
    """A pin as its two columns, named alike on triggers and fired rows."""
    node, automatic = pin.to_columns()
    return {"preferred_node": node, "preferred_node_auto": automatic}


def origin_key(row: Row[Any]) -> TriggerKey | None:
    if row.origin_trigger_name is None:
        return None
    return TriggerKey(row.origin_trigger_name, row.origin_trigger_group)


def routed_node(row: Row[Any]) -> str | None:
    """The worker a fired row was routed to: its pin, when the row's queue is that worker's own."""
    node = row.preferred_node
    return node if node is not None and row.queue == direct_queue(node) else None


def millis_or_none(value: datetime | None) -> int | None:
    return None if value is None else to_millis(value)


def datetime_or_none(value: int | None) -> datetime | None:
    return None if value is None else from_millis(value)


@functools.lru_cache(maxsize=16)
def row_class(columns: tuple[str, ...]) -> Any:
    return namedtuple("_ClaimedRow", columns, rename=True)


def tuple_rows(result: Result[Any]) -> list[Any]:
    """A result's rows as named tuples, read by attribute like SQLAlchemy rows.

    For the claim's rows, read some forty times each on the way to a message: a named tuple's
    attribute is an index into a tuple, a SQLAlchemy ``Row``'s a lookup by key (several times
    slower).
    """
    make = row_class(tuple(result.keys()))._make
    return [make(row) for row in result]


def in_acquisition_order(rows: Sequence[Row[Any]]) -> list[Row[Any]]:
    """Trigger rows by next fire time, then higher priority first: the order the batch rule reads.

    The acquisition's ORDER BY alone does not give it on PostgreSQL: rows are sorted before they
    are locked, and a row another scheduler fired (and committed) meanwhile comes back with its
    new, later fire time in its old place. Taken as the batch's first trigger, that one would set
    the batch's fire time a whole repeat interval late, and every trigger before it with it.
    """
    return sorted(rows, key=lambda row: (row.next_fire_time, -row.priority))


def json_value(text: str) -> Any:
    """``json.loads``, skipping the parser for the empty object and list that most jobs' args,
    kwargs, data and options are (read once per firing)."""
    if text == "{}":
        return {}
    if text == "[]":
        return []
    return json.loads(text)


def outcome_columns(
    triggers: Any, outcome: FiringOutcome, started_millis: int | None, finished_millis: int
) -> dict[str, Any]:
    """The trigger columns that keep ``outcome`` as its last: texts cut to their columns'
    widths, and the failures in a row counted up (or back to 0) in the statement itself."""
    failures = func.coalesce(triggers.c.consecutive_failures, 0)
    return {
        "last_started_time": started_millis,
        "last_finished_time": finished_millis,
        "last_outcome": (FAILED if outcome.failed else SUCCEEDED)[:STATE],
        "last_error_type": _cut(outcome.error_type, KEY_PART),
        "last_error_message": _cut(outcome.error_message, ERROR_TEXT),
        "consecutive_failures": failures + 1 if outcome.failed else 0,
    }


def last_outcome(row: Any) -> LastOutcome | None:
    """A trigger row's last outcome, None before a firing of it finished."""
    if row.last_finished_time is None:
        return None
    return LastOutcome(
        started_time=datetime_or_none(row.last_started_time),
        finished_time=from_millis(row.last_finished_time),
        succeeded=row.last_outcome != FAILED,
        error_type=row.last_error_type,
        error_message=row.last_error_message,
        consecutive_failures=row.consecutive_failures or 0,
    )


def _cut(text: str | None, width: int) -> str | None:
    return None if text is None else text[:width]
