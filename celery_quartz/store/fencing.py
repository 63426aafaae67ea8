"""The fencing epoch of a non-clustered scheduler, and the recovery pass when its leader moves.

Quartz's ``QRTZ_*`` tables have no epoch column, so a deposed leader (paused past its lease, or
cut off by a partition that healed) keeps writing beside the new one. Here every leadership
acquisition increments an epoch kept in the ``locks`` row ``LEADER`` of the scheduler name (and
copied to the leader's ``scheduler_state`` row, for operators); each write of a non-clustered
scheduler reads that row ``FOR SHARE`` in its own transaction and is refused when the epoch is no
longer the one it was elected with.

Race settled: the new leader's increment (an ``UPDATE`` of the row) waits for every transaction
that holds the row ``FOR SHARE``; once it commits, every later transaction of the old leader sees
the new epoch and is refused. On SQLite the write lock taken at ``BEGIN IMMEDIATE`` orders them.
Clustered schedulers never carry a fence: the cluster's own row locks and ownership checks decide
there, and the hot path pays nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, and_, delete, exists, insert, select, update
from sqlalchemy.exc import IntegrityError

from celery_quartz.errors import FencedError
from celery_quartz.store.schema import FiringState, TriggerState

if TYPE_CHECKING:
    from celery_quartz.store.sql import SqlStore

logger = logging.getLogger(__name__)

#: Name of the ``locks`` row that carries the leadership epoch.
LEADER_LOCK = "LEADER"


@dataclass(frozen=True)
class Fence:
    """The epoch a non-clustered scheduler was elected with; its writes require it unchanged."""

    epoch: int
    instance_name: str


@dataclass(frozen=True)
class LeaderMoveRecovery:
    """What :func:`recover_leader_move` did."""

    released: int
    unblocked: int
    republish: int
    dropped: int
    dropped_recovery: int
    completed_removed: int


def _leader_key(store: SqlStore) -> Any:
    locks = store.tables.locks
    return and_(locks.c.sched_name == store.scheduler_name, locks.c.lock_name == LEADER_LOCK)


def check_fence(store: SqlStore, conn: Connection, fence: Fence | None) -> None:
    """Refuse this transaction (raise :class:`FencedError`) if another leader has been elected.

    One statement: the epoch row read ``FOR SHARE`` (no lock on SQLite, whose transactions are
    already serial). Nothing at all without a fence.
    """
    if fence is None:
        return
    locks = store.tables.locks
    query = select(locks.c.epoch).where(_leader_key(store))
    if store.dialect != "sqlite":
        query = query.with_for_update(read=True)
    current = conn.execute(query).scalar()
    if current != fence.epoch:
        raise FencedError(
            f"scheduler {store.scheduler_name!r}: instance {fence.instance_name} was elected "
            f"with epoch {fence.epoch}, but the epoch is now {current}: another leader has "
            "been elected since; this write is refused"
        )


def advance_epoch(store: SqlStore, instance_name: str) -> tuple[int, int]:
    """Take the next epoch for a new leadership of ``instance_name``: (previous, new).

    Race settled: two processes elected at once (the election's own window); each increment is
    a row update, so they get different epochs and the earlier one's writes are refused.
    """
    locks, s = store.tables.locks, store.tables.scheduler_state
    with store.transaction() as conn:
        row = conn.execute(
            update(locks)
            .where(_leader_key(store))
            .values(epoch=locks.c.epoch + 1)
            .returning(locks.c.epoch)
        ).first()
        if row is None:
            try:
                with conn.begin_nested():
                    conn.execute(
                        insert(locks).values(
                            sched_name=store.scheduler_name, lock_name=LEADER_LOCK, epoch=1
                        )
                    )
                epoch = 1
            except IntegrityError:  # another process created it first
                epoch = conn.execute(
                    update(locks)
                    .where(_leader_key(store))
                    .values(epoch=locks.c.epoch + 1)
                    .returning(locks.c.epoch)
                ).scalar_one()
        else:
            epoch = row.epoch
        conn.execute(
            update(s)
            .where(s.c.sched_name == store.scheduler_name, s.c.instance_name == instance_name)
            .values(epoch=epoch)
        )
    return epoch - 1, epoch


def current_epoch(store: SqlStore) -> int:
    locks = store.tables.locks
    with store.transaction() as conn:
        return conn.execute(select(locks.c.epoch).where(_leader_key(store))).scalar() or 0


def recover_leader_move(
    store: SqlStore, instance_name: str, fence: Fence | None
) -> LeaderMoveRecovery:
    """The recovery pass a new non-clustered leader runs (seed 000, steps 1, 3 and 4; step 2,
    every misfire with no limit, is the caller's), in one fenced transaction.

    Scoped by scheduler name, so it frees what the previous leader left whatever its instance id.
    Adapted to Celery, where the firings a scheduler published run on workers that outlive it:

    1. Claims (ACQUIRED fired rows, any instance) are deleted and their triggers go back to
       WAITING; BLOCKED goes to WAITING and PAUSED_BLOCKED to PAUSED for every job that has no
       firing left in flight.
    3. Firings fired but not recorded as published (FIRED) under *this* instance id survive: the
       loop publishes them again with the same fire instance id (the worker's start guard runs
       it once). Under another id they are deleted, ``requests_recovery`` or not: the instance
       id decides whether they survive a leader move.
    4. Lingering COMPLETE triggers with nothing in flight are deleted. Published and executing
       firings are left to the workers (and to the misfire handler once their message expires).
    """
    t, f = store.tables.triggers, store.tables.fired_triggers
    with store.transaction() as conn:
        check_fence(store, conn, fence)
        claims = conn.execute(
            delete(f)
            .where(f.c.sched_name == store.scheduler_name, f.c.state == FiringState.ACQUIRED)
            .returning(f.c.trigger_name)
        ).all()
        released = conn.execute(
            update(t)
            .where(
                t.c.sched_name == store.scheduler_name, t.c.trigger_state == TriggerState.ACQUIRED
            )
            .values(trigger_state=TriggerState.WAITING)
        ).rowcount
        others = conn.execute(
            delete(f)
            .where(
                f.c.sched_name == store.scheduler_name,
                f.c.state == FiringState.FIRED,
                f.c.instance_name != instance_name,
            )
            .returning(f.c.requests_recovery)
        ).all()
        republish = conn.execute(
            select(f.c.entry_id).where(
                f.c.sched_name == store.scheduler_name,
                f.c.state == FiringState.FIRED,
                f.c.instance_name == instance_name,
            )
        ).all()
        in_flight = exists().where(
            f.c.sched_name == t.c.sched_name,
            f.c.job_name == t.c.job_name,
            f.c.job_group == t.c.job_group,
        )
        unblocked = conn.execute(
            update(t)
            .where(
                t.c.sched_name == store.scheduler_name,
                t.c.trigger_state == TriggerState.BLOCKED,
                ~in_flight,
            )
            .values(trigger_state=TriggerState.WAITING)
        ).rowcount
        unblocked += conn.execute(
            update(t)
            .where(
                t.c.sched_name == store.scheduler_name,
                t.c.trigger_state == TriggerState.PAUSED_BLOCKED,
                ~in_flight,
            )
            .values(trigger_state=TriggerState.PAUSED)
        ).rowcount
        trigger_in_flight = exists().where(
            f.c.sched_name == t.c.sched_name,
            f.c.trigger_name == t.c.trigger_name,
            f.c.trigger_group == t.c.trigger_group,
        )
        complete = [
            (r.trigger_name, r.trigger_group)
            for r in conn.execute(
                select(t.c.trigger_name, t.c.trigger_group).where(
                    t.c.sched_name == store.scheduler_name,
                    t.c.trigger_state == TriggerState.COMPLETE,
                    ~trigger_in_flight,
                )
            )
        ]
        from celery_quartz.keys import TriggerKey

        for name, group in complete:
            store._remove_trigger(conn, TriggerKey(name, group))
    result = LeaderMoveRecovery(
        released=max(released, len(claims)),
        unblocked=unblocked,
        republish=len(republish),
        dropped=len(others),
        dropped_recovery=sum(1 for r in others if r.requests_recovery),
        completed_removed=len(complete),
    )
    logger.info(
        "leader %s of %s: recovery pass released %d claim(s), unblocked %d trigger(s), "
        "will publish %d firing(s) of this instance id again, dropped %d unpublished firing(s) "
        "of other instance ids (%d of jobs requesting recovery), removed %d complete trigger(s)",
        instance_name,
        store.scheduler_name,
        result.released,
        result.unblocked,
        result.republish,
        result.dropped,
        result.dropped_recovery,
        result.completed_removed,
    )
    return result


def record_status(
    store: SqlStore, instance_name: str, status: str, *, hostname: str | None, pid: int | None
) -> None:
    """Write a scheduler's lifecycle status to its check-in row (operators, health, tests), if
    this process (host, pid) wrote the row last: replicas may share the leader's instance id."""
    s = store.tables.scheduler_state
    with store.transaction() as conn:
        conn.execute(
            update(s)
            .where(
                s.c.sched_name == store.scheduler_name,
                s.c.instance_name == instance_name,
                s.c.hostname == hostname,
                s.c.pid == pid,
            )
            .values(status=status)
        )


def remove_check_in_of_process(
    store: SqlStore, instance_name: str, *, hostname: str | None, pid: int | None
) -> None:
    """Remove the check-in row of ``instance_name`` only if this process (host, pid) wrote it."""
    s = store.tables.scheduler_state
    with store.transaction() as conn:
        conn.execute(
            delete(s).where(
                s.c.sched_name == store.scheduler_name,
                s.c.instance_name == instance_name,
                s.c.hostname == hostname,
                s.c.pid == pid,
            )
        )


def ping(store: SqlStore) -> None:
    """Raise unless the store's database answers a query."""
    with store.engine.connect() as conn:
        conn.execute(select(1)).scalar()
