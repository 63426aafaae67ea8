"""The cluster manager's role: check-in, failure detection, recovery and fencing
(:class:`~celery_quartz.store.abc.ClusterStore`)."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    Connection,
    and_,
    delete,
    exists,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError

from celery_quartz.clock import from_millis
from celery_quartz.keys import TriggerKey
from celery_quartz.store.abc import ClusterStore
from celery_quartz.store.records import (
    CheckIn,
    Fence,
    FiringOwners,
    LeaderMoveRecovery,
    WorkerRecovery,
)
from celery_quartz.store.schema import (
    FiringState,
    TriggerState,
)
from celery_quartz.store.sql._context import LEADER_LOCK, SqlContext
from celery_quartz.store.sql._definitions import Definitions
from celery_quartz.store.sql._firings import FiringEnds

logger = logging.getLogger(__name__)


class ClusterSql(ClusterStore):
    """The cluster manager's role on the SQL tables; the fence is the shared context's."""

    def __init__(self, sql: SqlContext, definitions: Definitions, ends: FiringEnds) -> None:
        self.sql = sql
        self.definitions = definitions
        self.ends = ends

    @property
    def fence(self) -> Fence | None:
        return self.sql.fence

    @fence.setter
    def fence(self, fence: Fence | None) -> None:
        self.sql.fence = fence

    def check_in(
        self,
        instance_name: str,
        *,
        interval: float,
        kind: str = "scheduler",
        clustered: bool = True,
        hostname: str | None = None,
        pid: int | None = None,
        queues: Sequence[str] | None = None,
        concurrency: int | None = None,
    ) -> bool:
        """The time written is read once the connection is held and the fence checked, as Quartz
        reads it after getting its connection: a process kept waiting for one (a hung primary,
        a failover) must not write a check-in that is already as old as the wait."""
        s = self.sql.tables.scheduler_state
        values: dict[str, Any] = {
            "checkin_interval": int(interval * 1000),
            "kind": kind,
            "clustered": clustered,
            "hostname": hostname,
            "pid": pid,
            "queues": None if queues is None else json.dumps(list(queues)),
            "concurrency": concurrency,
        }
        clause = and_(self.sql.scoped(s), s.c.instance_name == instance_name)
        with self.sql.transaction() as conn:
            # A deposed leader (its fence stale) must not overwrite the new leader's row.
            self.sql.check_fence(conn)
            now = values["last_checkin_time"] = self.sql.now()
            if conn.execute(update(s).where(clause).values(values)).rowcount:
                return True
            conn.execute(
                insert(s).values(
                    sched_name=self.sql.scheduler_name,
                    instance_name=instance_name,
                    started_time=now,
                    **values,
                )
            )
            return False

    def remove_check_in(self, instance_name: str) -> None:
        s = self.sql.tables.scheduler_state
        with self.sql.transaction() as conn:
            conn.execute(delete(s).where(self.sql.scoped(s), s.c.instance_name == instance_name))

    def check_ins(self, kind: str | None = None) -> list[CheckIn]:
        s = self.sql.tables.scheduler_state
        q = select(s).where(self.sql.scoped(s))
        if kind is not None:
            q = q.where(s.c.kind == kind)
        with self.sql.transaction() as conn:
            rows = conn.execute(q.order_by(s.c.instance_name)).all()
        return [_check_in(r) for r in rows]

    def firing_owners(self) -> FiringOwners:
        f = self.sql.tables.fired_triggers
        with self.sql.transaction() as conn:
            rows = conn.execute(
                select(
                    f.c.state,
                    f.c.instance_name,
                    f.c.worker_name,
                    func.min(f.c.started_time).label("since"),
                )
                .where(
                    self.sql.scoped(f),
                    f.c.state.in_([FiringState.ACQUIRED, FiringState.FIRED, FiringState.EXECUTING]),
                )
                .group_by(f.c.state, f.c.instance_name, f.c.worker_name)
            ).all()
        return _owners(rows)

    def recover_scheduler(
        self, dead: str, *, seen_checkin_millis: int | None, recovered_by: str
    ) -> tuple[int, int] | None:
        """The survivor whose conditional delete of the check-in row matches does the whole
        recovery in the same transaction."""
        s, f = self.sql.tables.scheduler_state, self.sql.tables.fired_triggers
        with self.sql.transaction() as conn:
            if seen_checkin_millis is not None:
                gone = conn.execute(
                    delete(s).where(
                        self.sql.scoped(s),
                        s.c.instance_name == dead,
                        s.c.last_checkin_time == seen_checkin_millis,
                    )
                ).rowcount
                if not gone:
                    return None
            released = self.ends.release(conn, dead, None)
            moved = conn.execute(
                update(f)
                .where(
                    self.sql.scoped(f),
                    f.c.instance_name == dead,
                    f.c.state == FiringState.FIRED,
                )
                .values(instance_name=recovered_by)
            ).rowcount
        logger.info(
            "recovered scheduler instance %s: %d claimed trigger(s) released, %d firing(s) to "
            "publish again (by %s)",
            dead,
            released,
            moved,
            recovered_by,
        )
        return released, moved

    def recover_worker(
        self,
        worker_name: str,
        *,
        seen_checkin_millis: int | None,
        defer_nonconcurrent_millis: int = 0,
    ) -> WorkerRecovery | None:
        """A recovery firing is a one-shot trigger in the RECOVERING_JOBS group, due now,
        carrying the original trigger, occurrence and data (the task sees
        ``context.recovering``). The check-in row is locked while it is compared; each fired
        row is removed by a delete conditional on EXECUTING, and only the remover acts on it."""
        s, f = self.sql.tables.scheduler_state, self.sql.tables.fired_triggers
        now = self.sql.now()
        result = WorkerRecovery(worker_name)
        state_clause = and_(self.sql.scoped(s), s.c.instance_name == worker_name)
        with self.sql.transaction() as conn:
            self.sql.check_fence(conn)
            if seen_checkin_millis is not None:
                seen = conn.execute(
                    select(s.c.last_checkin_time).where(state_clause).with_for_update()
                ).scalar_one_or_none()
                if seen != seen_checkin_millis:
                    return None
            rows = conn.execute(
                select(f)
                .where(
                    self.sql.scoped(f),
                    f.c.worker_name == worker_name,
                    f.c.state == FiringState.EXECUTING,
                )
                .with_for_update(skip_locked=True)
            ).all()
            for row in rows:
                if row.is_nonconcurrent and defer_nonconcurrent_millis:
                    if row.recovery_after is None:
                        conn.execute(
                            update(f)
                            .where(self.sql.scoped(f))
                            .where(f.c.fire_instance_id == row.fire_instance_id)
                            .values(recovery_after=now + defer_nonconcurrent_millis)
                        )
                        logger.info(
                            "worker %s is dead; recovery of firing %s of disallow_concurrent "
                            "job %s.%s deferred %.1fs",
                            worker_name,
                            row.fire_instance_id,
                            row.job_group,
                            row.job_name,
                            defer_nonconcurrent_millis / 1000,
                        )
                        result.deferred += 1
                        continue
                    if now < row.recovery_after:
                        result.deferred += 1
                        continue
                if self.ends.remove_executing(conn, row.fire_instance_id) is None:
                    continue
                if self.ends.resolve_dead_execution(conn, row, now):
                    result.recovered += 1
                else:
                    result.interrupted += 1
                    logger.info(
                        "worker %s died running firing %s of trigger %s.%s (scheduled %s); "
                        "closed as interrupted",
                        worker_name,
                        row.fire_instance_id,
                        row.trigger_group,
                        row.trigger_name,
                        from_millis(row.sched_time).isoformat(),
                    )
            if seen_checkin_millis is not None and not result.deferred:
                conn.execute(delete(s).where(state_clause))
                result.pins_reset = self._reset_auto_pins(conn, worker_name)
        return result

    def _reset_auto_pins(self, conn: Connection, worker_name: str) -> int:
        """A dead worker's auto-claimed pins become unclaimed automatic pins, for any eligible
        worker to claim at its next start (named pins are never moved). The number reset."""
        t = self.sql.tables.triggers
        reset = conn.execute(
            update(t)
            .where(
                self.sql.scoped(t),
                t.c.preferred_node_auto.is_(True),
                t.c.preferred_node == worker_name,
            )
            .values(preferred_node=None)
        ).rowcount
        if reset:
            logger.info(
                "worker %s is dead: %d automatic pin(s) it had claimed reset to unclaimed",
                worker_name,
                reset,
            )
        return reset

    # -- fencing of a non-clustered leader ------------------------------------------------------

    def advance_epoch(self, instance_name: str) -> tuple[int, int]:
        """The epoch is the LEADER lock row's, incremented in place (the first election
        creates the row)."""
        locks, s = self.sql.tables.locks, self.sql.tables.scheduler_state
        with self.sql.transaction() as conn:
            row = conn.execute(
                update(locks)
                .where(self.sql.leader_key())
                .values(epoch=locks.c.epoch + 1)
                .returning(locks.c.epoch)
            ).first()
            if row is None:
                try:
                    with conn.begin_nested():
                        conn.execute(
                            insert(locks).values(
                                sched_name=self.sql.scheduler_name, lock_name=LEADER_LOCK, epoch=1
                            )
                        )
                    epoch = 1
                except IntegrityError:  # another process created it first
                    epoch = conn.execute(
                        update(locks)
                        .where(self.sql.leader_key())
                        .values(epoch=locks.c.epoch + 1)
                        .returning(locks.c.epoch)
                    ).scalar_one()
            else:
                epoch = row.epoch
            conn.execute(
                update(s)
                .where(self.sql.scoped(s), s.c.instance_name == instance_name)
                .values(epoch=epoch)
            )
        return epoch - 1, epoch

    def recover_leader_move(self, instance_name: str, fence: Fence | None) -> LeaderMoveRecovery:
        """Scoped by scheduler name, so it frees what the previous leader left whatever its
        instance id."""
        t, f = self.sql.tables.triggers, self.sql.tables.fired_triggers
        with self.sql.transaction() as conn:
            self.sql.check_fence(conn, fence)
            claims = conn.execute(
                delete(f)
                .where(self.sql.scoped(f), f.c.state == FiringState.ACQUIRED)
                .returning(f.c.trigger_name)
            ).all()
            released = conn.execute(
                update(t)
                .where(self.sql.scoped(t), t.c.trigger_state == TriggerState.ACQUIRED)
                .values(trigger_state=TriggerState.WAITING)
            ).rowcount
            others = conn.execute(
                delete(f)
                .where(
                    self.sql.scoped(f),
                    f.c.state == FiringState.FIRED,
                    f.c.instance_name != instance_name,
                )
                .returning(f.c.requests_recovery)
            ).all()
            republish = conn.execute(
                select(f.c.fire_instance_id).where(
                    self.sql.scoped(f),
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
                    self.sql.scoped(t),
                    t.c.trigger_state == TriggerState.BLOCKED,
                    ~in_flight,
                )
                .values(trigger_state=TriggerState.WAITING)
            ).rowcount
            unblocked += conn.execute(
                update(t)
                .where(
                    self.sql.scoped(t),
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
                        self.sql.scoped(t),
                        t.c.trigger_state == TriggerState.COMPLETE,
                        ~trigger_in_flight,
                    )
                )
            ]
            for name, group in complete:
                self.definitions.remove_trigger(conn, TriggerKey(name, group))
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
            "of other instance ids (%d of jobs requesting recovery), "
            "removed %d complete trigger(s)",
            instance_name,
            self.sql.scheduler_name,
            result.released,
            result.unblocked,
            result.republish,
            result.dropped,
            result.dropped_recovery,
            result.completed_removed,
        )
        return result

    def record_status(
        self, instance_name: str, status: str, *, hostname: str | None, pid: int | None
    ) -> None:
        s = self.sql.tables.scheduler_state
        with self.sql.transaction() as conn:
            self.sql.check_fence(conn)
            conn.execute(
                update(s)
                .where(
                    self.sql.scoped(s),
                    s.c.instance_name == instance_name,
                    s.c.hostname == hostname,
                    s.c.pid == pid,
                )
                .values(status=status)
            )

    def remove_check_in_of_process(
        self, instance_name: str, *, hostname: str | None, pid: int | None
    ) -> None:
        s = self.sql.tables.scheduler_state
        with self.sql.transaction() as conn:
            conn.execute(
                delete(s).where(
                    self.sql.scoped(s),
                    s.c.instance_name == instance_name,
                    s.c.hostname == hostname,
                    s.c.pid == pid,
                )
            )

    def ping(self) -> None:
        with self.sql.engine.connect() as conn:
            conn.execute(select(1)).scalar()


def _check_in(r: Any) -> CheckIn:
    return CheckIn(
        instance_name=r.instance_name,
        kind=r.kind,
        last_checkin_millis=r.last_checkin_time,
        checkin_interval_millis=r.checkin_interval,
        clustered=r.clustered,
        hostname=r.hostname,
        pid=r.pid,
    )


def _owners(rows: Any) -> FiringOwners:
    """The owners of fired rows, from their count per (state, instance, worker)."""
    owners = FiringOwners()
    for r in rows:
        if r.state == FiringState.EXECUTING:
            if r.worker_name is not None:
                known = owners.executing_since.get(r.worker_name, r.since)
                owners.executing_since[r.worker_name] = min(known, r.since)
            continue
        owners.schedulers.add(r.instance_name)
        if r.state == FiringState.FIRED:
            owners.unpublished.add(r.instance_name)
    return owners
