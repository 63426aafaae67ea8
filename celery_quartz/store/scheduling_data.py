"""The store's side of scheduling files: read what a load touches, write what it changes, in one
transaction; and read every job and trigger for an export.

Written beside the SQL store rather than inside it while the store was being split by role; it
belongs to the ``JobStore`` role (``store/abc.py``, ``store/sql/jobs.py``) and uses these
internals of :class:`SqlStore`: ``transaction``, ``_lock``, ``_scoped``, ``tables``,
``_rows_by_key``, ``_job_from_row``, ``_trigger_from_row``, ``_trigger_key_clause`` and
``_calendar`` (``store/sql/_base.py``), ``_delete_job`` and ``_store_many``
(``store/sql/_definitions.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, delete, select

from celery_quartz.job import Job
from celery_quartz.keys import JobKey, TriggerKey
from celery_quartz.scheduling_files.model import ALL_GROUPS, PROTECTED_GROUPS, SchedulingData
from celery_quartz.scheduling_files.plan import Needs, Plan, Snapshot, needs, plan
from celery_quartz.store.sql import SqlStore
from celery_quartz.triggers.base import Trigger


def apply_scheduling_data(
    store: SqlStore, files: Sequence[SchedulingData], now: datetime, *, dry_run: bool = False
) -> Plan:
    """Load ``files`` into the store: all of their changes or none.

    Race settled: several schedulers loading the same files as they start together. The read,
    the decision and the write are one transaction under the TRIGGER_ACCESS lock row (SQLite:
    its write lock), so the second loader reads the first one's rows, finds every job and
    trigger unchanged and writes nothing. With ``dry_run`` the plan is made the same way and
    nothing is written.
    """
    with store.transaction() as conn:
        if not dry_run:  # a dry run decides nothing others could race on
            store._lock(conn, "TRIGGER_ACCESS")
        snapshot = read_snapshot(store, conn, needs(files))
        result = plan(
            snapshot, files, now, calendar=lambda name, key: store._calendar(conn, name, key)
        )
        if dry_run or not result.changed:
            return result
        t = store.tables.triggers
        for tkey in result.triggers_deleted:
            conn.execute(delete(t).where(store._trigger_key_clause(tkey)))
        for key in result.jobs_deleted:
            store._delete_job(conn, key)
        store._store_many(
            conn,
            [(job, None) for job in result.jobs_to_write],
            result.triggers_to_write,
            True,
            now,
        )
    return result


def read_snapshot(store: SqlStore, conn: Connection, wanted: Needs) -> Snapshot:
    """The stored jobs and triggers ``wanted`` names, closed both ways: every trigger of a job
    read, and the job of every trigger read."""
    j, t = store.tables.jobs, store.tables.triggers
    jobs: dict[JobKey, Job] = {}
    triggers: dict[TriggerKey, Trigger] = {}

    def add_triggers(rows: Any) -> None:
        for row in rows:
            trigger = store._trigger_from_row(row)
            triggers[trigger.key] = trigger

    def add_jobs(rows: Any) -> None:
        for row in rows:
            job = store._job_from_row(row)
            jobs[job.key] = job

    everyone = store._scoped(t)
    if ALL_GROUPS in wanted.trigger_groups:
        add_triggers(conn.execute(select(t).where(everyone)))
    elif wanted.trigger_groups:
        add_triggers(
            conn.execute(select(t).where(everyone, t.c.trigger_group.in_(wanted.trigger_groups)))
        )
    add_triggers(
        store._rows_by_key(
            conn, select(t), t.c.trigger_name, t.c.trigger_group, sorted(wanted.trigger_keys)
        )
    )
    job_keys = set(wanted.job_keys) | {tr.job_key for tr in triggers.values() if tr.job_key}
    if ALL_GROUPS in wanted.job_groups:
        add_jobs(conn.execute(select(j).where(store._scoped(j))))
    elif wanted.job_groups:
        add_jobs(
            conn.execute(
                select(j).where(store._scoped(j), j.c.job_group.in_(wanted.job_groups))
            )
        )
    add_jobs(
        store._rows_by_key(
            conn, select(j), j.c.job_name, j.c.job_group, sorted(job_keys - jobs.keys())
        )
    )
    # Every trigger of every job read: whether a job keeps a trigger is judged on all of them.
    add_triggers(
        store._rows_by_key(conn, select(t), t.c.job_name, t.c.job_group, sorted(jobs))
    )
    return Snapshot(
        jobs=jobs,
        triggers=triggers,
        job_groups=wanted.job_groups,
        trigger_groups=wanted.trigger_groups,
    )


def read_all(store: SqlStore) -> tuple[list[Job], list[Trigger]]:
    """Every job and trigger outside the groups celery-quartz keeps itself (recovery, retry,
    ``beat_schedule``), read in one transaction: what an export writes."""
    j, t = store.tables.jobs, store.tables.triggers
    with store.transaction() as conn:
        job_rows = conn.execute(
            select(j).where(store._scoped(j), j.c.job_group.not_in(PROTECTED_GROUPS))
        ).all()
        trigger_rows = conn.execute(
            select(t).where(
                store._scoped(t),
                t.c.trigger_group.not_in(PROTECTED_GROUPS),
                t.c.job_group.not_in(PROTECTED_GROUPS),
            )
        ).all()
    return (
        [store._job_from_row(row) for row in job_rows],
        [store._trigger_from_row(row) for row in trigger_rows],
    )
