"""The scheduling loop's misfire handling: late triggers, expired firings, triggers in error
(the rest of :class:`~celery_quartz.store.abc.SchedulingStore`)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from sqlalchemy import (
    delete,
    func,
    select,
    update,
)

from celery_quartz.firing import AcquiredFiring, Firing
from celery_quartz.keys import TriggerKey
from celery_quartz.misfire import expired_firing_outcome
from celery_quartz.routing import (
    Router,
)
from celery_quartz.store.schema import (
    ERROR_TEXT,
    FiringState,
    TriggerState,
)
from celery_quartz.store.sql._firings import FiringsSql
from celery_quartz.store.sql._rows import (
    routed_node,
)
from celery_quartz.triggers.base import (
    MisfireInstruction,
)

logger = logging.getLogger(__name__)

#: Routing with no execution limits (pins are still routed to live workers).
_UNLIMITED = Router()


class MisfiresSql(FiringsSql):
    """The misfire half of :class:`~celery_quartz.store.abc.SchedulingStore`."""

    def handle_misfires(self, *, max_count: int) -> tuple[int, bool]:
        """Apply the misfire instruction of up to ``max_count`` late triggers, earliest first.

        Returns (handled, more remain). Race settled: two schedulers' misfire handlers picking the
        same trigger; the rows are locked (skipping those another handler holds) and the update
        is conditional on the trigger still being WAITING at the fire time that was late.
        """
        t = self.tables.triggers
        now = self._now()
        late_before = now - self.misfire_threshold_ms
        with self.transaction() as conn:
            self._check_fence(conn)
            rows = conn.execute(
                select(t)
                .where(
                    self._scoped(t),
                    t.c.trigger_state == TriggerState.WAITING,
                    t.c.misfire_instr != MisfireInstruction.IGNORE_MISFIRE_POLICY,
                    t.c.next_fire_time < late_before,
                )
                .order_by(t.c.next_fire_time, t.c.priority.desc())
                .limit(max_count + 1)
                .with_for_update(skip_locked=True)
            ).all()
            more = len(rows) > max_count
            for row in rows[:max_count]:
                self._apply_misfire(
                    conn,
                    row,
                    now,
                    "",
                    t.c.trigger_state == TriggerState.WAITING,
                    t.c.next_fire_time == row.next_fire_time,
                )
        return min(len(rows), max_count), more

    def resolve_expired_firings(
        self,
        instance_name: str,
        *,
        grace: float,
        max_count: int,
        router: Router | None = None,
        refuse: Callable[[Firing], str | None] | None = None,
    ) -> list[Firing]:
        """Resolve firings whose message expired before any worker started it (see
        :mod:`celery_quartz.misfire`); returns those to publish again (now owned by
        ``instance_name``, with a new expiry the misfire threshold from now). One that was
        sent to its pinned worker's own queue goes to its group's queue this time: that worker
        did not start it in time.

        ``grace`` (seconds past the expiry) lets a worker that took the message just in time mark
        it EXECUTING first. Race settled: two schedulers resolving the same firing, or a worker
        starting it meanwhile; each row is locked and its update or delete is conditional on its
        state, so exactly one outcome holds.
        """
        f = self.tables.fired_triggers
        now = self._now()
        cutoff = now - int(grace * 1000)
        in_flight = [FiringState.FIRED, FiringState.PUBLISHED]
        republish: list[str] = []
        why: dict[str, tuple[float, str]] = {}
        with self.transaction() as conn:
            self._check_fence(conn)
            rows = conn.execute(
                select(f)
                .where(
                    self._scoped(f),
                    f.c.state.in_(in_flight),
                    f.c.expires_time < cutoff,
                )
                .order_by(f.c.expires_time)
                .limit(max_count)
                .with_for_update(skip_locked=True)
            ).all()
            for row in rows:
                trigger_row = self._trigger_row(
                    conn, TriggerKey(row.trigger_name, row.trigger_group)
                )
                trigger = None if trigger_row is None else self._trigger_from_row(trigger_row)
                late_by = (now - row.sched_time) / 1000
                outcome = expired_firing_outcome(
                    trigger, recovering=row.recovering, expired_count=row.expired_count
                )
                if outcome.republish:
                    conn.execute(
                        update(f)
                        .where(self._scoped(f))
                        .where(
                            f.c.fire_instance_id == row.fire_instance_id, f.c.state.in_(in_flight)
                        )
                        .values(
                            state=FiringState.FIRED,
                            instance_name=instance_name,
                            fired_time=now,
                            expires_time=now + self.misfire_threshold_ms,
                            expired_count=f.c.expired_count + 1,
                            queue=(
                                (router or _UNLIMITED).group_queue(row.execution_group)
                                if routed_node(row) is not None
                                else row.queue
                            ),
                        )
                    )
                    republish.append(row.fire_instance_id)
                    why[row.fire_instance_id] = (late_by, outcome.why)
                else:
                    self._drop_firing(conn, row, f"misfire: {outcome.why} ({late_by:.1f}s late)")
            firings = (
                self._firings_to_publish(conn, f.c.fire_instance_id.in_(republish), instance_name)
                if republish
                else []
            )
            if refuse is not None and firings:
                by_id = {row.fire_instance_id: row for row in rows}
                kept = []
                for firing in firings:
                    reason = refuse(firing)
                    if reason is None:
                        kept.append(firing)
                    else:
                        row = by_id[firing.fire_instance_id]
                        self._drop_firing(conn, row, f"misfire: {reason}")
                firings = kept
        for firing in firings:
            late_by, because = why.get(firing.fire_instance_id, (0.0, ""))
            logger.info(
                "misfire: firing %s of trigger %s was not started by any worker "
                "(%.1fs after its fire time); %s: published again",
                firing.fire_instance_id,
                firing.trigger_key,
                late_by,
                because,
            )
        return firings

    def count_expired_firings(self, *, grace: float) -> int:
        f = self.tables.fired_triggers
        cutoff = self._now() - int(grace * 1000)
        with self.transaction() as conn:
            return int(
                conn.execute(
                    select(func.count())
                    .select_from(f)
                    .where(
                        self._scoped(f),
                        f.c.state.in_([FiringState.FIRED, FiringState.PUBLISHED]),
                        f.c.expires_time < cutoff,
                    )
                ).scalar_one()
            )

    def set_trigger_error(self, acquired: AcquiredFiring, reason: str) -> None:
        """Put a claimed trigger in ERROR (Quartz: its job cannot be run) and drop the claim."""
        t, f = self.tables.triggers, self.tables.fired_triggers
        with self.transaction() as conn:
            conn.execute(
                delete(f).where(
                    self._scoped(f),
                    f.c.fire_instance_id == acquired.fire_instance_id,
                )
            )
            conn.execute(
                update(t)
                .where(
                    self._trigger_key_clause(acquired.trigger.key),
                    t.c.trigger_state == TriggerState.ACQUIRED,
                )
                .values(trigger_state=TriggerState.ERROR, error_reason=reason[:ERROR_TEXT])
            )
        logger.error("trigger %s put in ERROR: %s", acquired.trigger.key, reason)
