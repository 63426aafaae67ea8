"""History, run-status and audit rows written straight into the tables of schema 0006 (the
contract between the writers and the read side), for the read side's and the sweep's tests."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import insert

from celery_quartz.clock import to_millis
from celery_quartz.store import SqlStore


def history_row(
    when: datetime,
    result: str = "succeeded",
    *,
    trigger: str = "t1",
    trigger_group: str = "DEFAULT",
    job: str | None = "job",
    job_group: str = "DEFAULT",
    duration_ms: int | None = None,
    lateness_ms: int | None = None,
    unfolded: bool = True,
    **columns: Any,
) -> dict[str, Any]:
    """The columns of one history row finished (or decided) at ``when``; a run's times follow
    from its duration and lateness."""
    finished = to_millis(when)
    ran = result not in ("misfired", "expired", "held", "skipped")
    if ran and duration_ms is None:
        duration_ms = 1000
    if ran and lateness_ms is None:
        lateness_ms = 50
    started = None if duration_ms is None else finished - duration_ms
    scheduled = None if started is None or lateness_ms is None else started - lateness_ms
    row: dict[str, Any] = {
        "event_time": finished,
        "result": result,
        "trigger_name": trigger,
        "trigger_group": trigger_group,
        "job_name": job,
        "job_group": None if job is None else job_group,
        "scheduled_time": scheduled if ran else finished,
        "started_time": started,
        "finished_time": finished if ran else None,
        "duration_ms": duration_ms,
        "lateness_ms": lateness_ms,
        "unfolded": unfolded,
    }
    if ran:
        row.update(fire_instance_id=f"fi-{finished}-{trigger}", task_name="tasks.report")
    else:
        row.update(reason=f"{result}: MISFIRE_INSTRUCTION_FIRE_NOW")
    row.update(columns)
    return row


def insert_history(store: SqlStore, *rows: dict[str, Any]) -> None:
    """Insert ``rows`` (from :func:`history_row`) into the store's history table."""
    columns = {name for row in rows for name in row}
    with store.transaction() as conn:
        conn.execute(
            insert(store.tables.history),
            [{"sched_name": store.scheduler_name, **dict.fromkeys(columns), **row} for row in rows],
        )


def insert_audit(
    store: SqlStore,
    when: datetime,
    *,
    principal: str = "alice",
    via: str = "cli",
    action: str = "pause_trigger",
    target_kind: str = "trigger",
    target: str | None = "DEFAULT.t1",
    changes: dict[str, Any] | None = None,
) -> None:
    with store.transaction() as conn:
        conn.execute(
            insert(store.tables.audit).values(
                sched_name=store.scheduler_name,
                event_time=to_millis(when),
                principal=principal,
                via=via,
                action=action,
                target_kind=target_kind,
                target=target,
                changes=None if changes is None else json.dumps(changes),
            )
        )


def insert_status(
    store: SqlStore,
    name: str,
    *,
    kind: str = "job",
    group: str = "DEFAULT",
    since: datetime,
    last_success: datetime | None = None,
    last_run: datetime | None = None,
    last_result: str | None = None,
    **columns: Any,
) -> None:
    with store.transaction() as conn:
        conn.execute(
            insert(store.tables.run_status).values(
                sched_name=store.scheduler_name,
                kind=kind,
                key_group=group,
                key_name=name,
                since_time=to_millis(since),
                last_success_time=None if last_success is None else to_millis(last_success),
                last_run_time=None if last_run is None else to_millis(last_run),
                last_result=last_result,
                **columns,
            )
        )
