"""The scheduling loop's role (:class:`~celery_quartz.store.abc.SchedulingStore`): claim, fire,
record publication, release; late triggers, expired firings, triggers in error."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import and_, delete, func, select, tuple_, update

from celery_quartz.clock import to_millis
from celery_quartz.firing import AcquiredFiring, Firing
from celery_quartz.keys import TriggerKey
from celery_quartz.misfire import expired_firing_outcome
from celery_quartz.routing import Hold, Router
from celery_quartz.store.abc import SchedulingStore
from celery_quartz.store.records import Claim
from celery_quartz.store.schema import ERROR_TEXT, FiringState, TriggerState
from celery_quartz.store.sql._claims import Claims, after_firing
from celery_quartz.store.sql._context import SqlContext
from celery_quartz.store.sql._definitions import Definitions
from celery_quartz.store.sql._firings import FiringEnds
from celery_quartz.store.sql._history_rows import HistoryRows
from celery_quartz.store.sql._rows import Rows, routed_node, trigger_from_row
from celery_quartz.triggers.base import MisfireInstruction

logger = logging.getLogger(__name__)

#: Routing with no execution limits (pins are still routed to live workers).
_UNLIMITED = Router()


class SchedulingSql(SchedulingStore):
    """The scheduling loop's role on the SQL tables; a claim's statements are :class:`Claims`."""

    def __init__(
        self, sql: SqlContext, rows: Rows, definitions: Definitions, ends: FiringEnds
    ) -> None:
        self.sql = sql
        self.rows = rows
        self.definitions = definitions
        self.ends = ends
        self.claims = Claims(sql, rows, ends.history)

    def acquire_next_triggers(
        self,
        instance_name: str,
        *,
        no_later_than: datetime,
        max_count: int,
        time_window: float,
    ) -> list[AcquiredFiring]:
        claim = self.claim(
            instance_name,
            no_later_than=no_later_than,
            max_count=max_count,
            time_window=time_window,
            fire_due=False,
        )
        return claim.acquired

    def claim(
        self,
        instance_name: str,
        *,
        no_later_than: datetime,
        max_count: int,
        time_window: float,
        fire_due: bool = True,
        published: Sequence[str | tuple[str, int]] = (),
        task_exists: Callable[[str], bool] | None = None,
        router: Router | None = None,
    ) -> Claim:
        """On PostgreSQL the selection locks the rows it returns and skips rows another
        transaction holds (``FOR UPDATE SKIP LOCKED``); the ``state = WAITING`` condition on the
        update keeps the claim correct even without the lock."""
        t = self.sql.tables.triggers
        now = self.sql.now()
        limit_ms = to_millis(no_later_than)
        window_ms = int(time_window * 1000)
        params = {
            "due_by": limit_ms + window_ms,
            "misfire_before": now - self.sql.misfire_threshold_ms,
            "max_count": max_count,
        }
        claim = Claim()
        with self.sql.transaction() as conn:
            self.sql.check_fence(conn)
            if published:
                self.claims.mark_published(conn, instance_name, published, now)
            batch = self.claims.admitted_batch(
                conn, params, router or _UNLIMITED, claim, now, limit_ms, window_ms
            )
            if task_exists is not None:
                batch = self.claims.error_unrunnable(conn, batch, task_exists)
            if not batch:
                return claim
            if fire_due and batch[0].scheduled_millis <= now:
                expires = now + self.sql.misfire_threshold_ms
                calendars = self.rows.calendars_in(conn, {a.trigger.calendar_name for a in batch})
                claim.firings, _ = self.claims.write_fired(
                    conn, instance_name, batch, now, expires, calendars
                )
                rows_to_insert = {f.fire_instance_id for f in claim.firings}
                self.claims.insert_fired_rows(
                    conn,
                    instance_name,
                    [a for a in batch if a.fire_instance_id in rows_to_insert],
                    FiringState.FIRED,
                    now,
                    expires,
                )
            else:
                claimed = {
                    (r.trigger_name, r.trigger_group)
                    for r in conn.execute(
                        update(t)
                        .where(
                            self.sql.scoped(t),
                            tuple_(t.c.trigger_name, t.c.trigger_group).in_(
                                [(a.trigger.key.name, a.trigger.key.group) for a in batch]
                            ),
                            t.c.trigger_state == TriggerState.WAITING,
                        )
                        .values(trigger_state=TriggerState.ACQUIRED)
                        .returning(t.c.trigger_name, t.c.trigger_group)
                    )
                }
                claim.acquired = [
                    a for a in batch if (a.trigger.key.name, a.trigger.key.group) in claimed
                ]
                self.claims.insert_fired_rows(
                    conn, instance_name, claim.acquired, FiringState.ACQUIRED, now, None
                )
        logger.debug(
            "%s claimed %d trigger(s), fired %d at once",
            instance_name,
            len(claim.acquired),
            len(claim.firings),
        )
        return claim

    def fire(
        self,
        instance_name: str,
        acquired: Sequence[AcquiredFiring],
    ) -> list[Firing]:
        """Each trigger's next fire time is computed before the transaction opens, so the
        transaction only checks ownership and writes."""
        if not acquired:
            return []
        t, f = self.sql.tables.triggers, self.sql.tables.fired_triggers
        calendars = self.rows.calendars({a.trigger.calendar_name for a in acquired})
        advanced = after_firing(acquired, calendars)
        now = self.sql.now()
        expires = now + self.sql.misfire_threshold_ms
        with self.sql.transaction() as conn:
            self.sql.check_fence(conn)
            owned = {
                r.fire_instance_id
                for r in conn.execute(
                    select(f.c.fire_instance_id)
                    .where(
                        self.sql.scoped(f),
                        f.c.fire_instance_id.in_([a.fire_instance_id for a in acquired]),
                        f.c.instance_name == instance_name,
                        f.c.state == FiringState.ACQUIRED,
                    )
                    .with_for_update()
                )
            }
            still_acquired = {
                (r.trigger_name, r.trigger_group)
                for r in conn.execute(
                    select(t.c.trigger_name, t.c.trigger_group)
                    .where(
                        self.sql.scoped(t),
                        tuple_(t.c.trigger_name, t.c.trigger_group).in_(
                            [(a.trigger.key.name, a.trigger.key.group) for a in acquired]
                        ),
                        t.c.trigger_state == TriggerState.ACQUIRED,
                    )
                    .with_for_update()
                )
            }
            # A claim not owned any more was recovered by a survivor, or already fired by a
            # first attempt whose commit went through while its answer was lost: such a FIRED
            # row is published from the store (take-over), never deleted here.
            mine = [a for a in acquired if a.fire_instance_id in owned]
            live = [a for a in mine if (a.trigger.key.name, a.trigger.key.group) in still_acquired]
            firings, skipped = self.claims.write_fired(
                conn, instance_name, live, now, expires, calendars, advanced
            )
            dropped = [a.fire_instance_id for a in mine if a not in live] + skipped
            if dropped:
                conn.execute(delete(f).where(self.sql.scoped(f), f.c.fire_instance_id.in_(dropped)))
                logger.info(
                    "%s dropped %d claim(s): the trigger was paused, changed or removed meanwhile, "
                    "its disallow_concurrent job fired in this batch, or its overlap policy",
                    instance_name,
                    len(dropped),
                )
            if firings:
                conn.execute(
                    update(f)
                    .where(
                        self.sql.scoped(f),
                        f.c.fire_instance_id.in_([m.fire_instance_id for m in firings]),
                    )
                    .values(state=FiringState.FIRED, fired_time=now, expires_time=expires)
                )
        return firings

    def mark_published(
        self, instance_name: str, published: Sequence[str | tuple[str, int]]
    ) -> None:
        if not published:
            return
        with self.sql.transaction() as conn:
            self.sql.check_fence(conn)
            self.claims.mark_published(conn, instance_name, published, self.sql.now())

    def release_acquired(
        self,
        instance_name: str,
        acquired: Sequence[AcquiredFiring] | None = None,
        *,
        keep: Sequence[str] = (),
    ) -> int:
        if acquired is not None and not acquired:
            return 0
        with self.sql.transaction() as conn:
            self.sql.check_fence(conn)
            if acquired is not None:
                return self.ends.release(
                    conn, instance_name, [a.fire_instance_id for a in acquired]
                )
            return self.ends.release(conn, instance_name, None, keep=keep)

    def unpublished_firings(self, instance_name: str) -> list[Firing]:
        f = self.sql.tables.fired_triggers
        with self.sql.transaction() as conn:
            self.sql.check_fence(conn)
            return self.ends.firings_to_publish(
                conn,
                and_(f.c.instance_name == instance_name, f.c.state == FiringState.FIRED),
                instance_name,
            )

    def in_flight(self, instance_name: str | None = None) -> int:
        f = self.sql.tables.fired_triggers
        q = (
            select(func.count())
            .select_from(f)
            .where(self.sql.scoped(f), f.c.state != FiringState.ACQUIRED)
        )
        if instance_name is not None:
            q = q.where(f.c.instance_name == instance_name)
        with self.sql.transaction() as conn:
            return int(conn.execute(q).scalar_one())

    def handle_misfires(
        self, *, max_count: int, instance_name: str | None = None, router: Router | None = None
    ) -> tuple[int, bool]:
        """The late rows are locked, skipping those another handler holds; each update is
        conditional on the trigger still being WAITING at the fire time that was late."""
        t = self.sql.tables.triggers
        now = self.sql.now()
        late_before = now - self.sql.misfire_threshold_ms
        with self.sql.transaction() as conn:
            self.sql.check_fence(conn)
            rows = conn.execute(
                select(t)
                .where(
                    self.sql.scoped(t),
                    t.c.trigger_state == TriggerState.WAITING,
                    t.c.misfire_instr != MisfireInstruction.IGNORE_MISFIRE_POLICY,
                    t.c.next_fire_time < late_before,
                )
                .order_by(t.c.next_fire_time, t.c.priority.desc())
                .limit(max_count + 1)
                .with_for_update(skip_locked=True)
            ).all()
            more = len(rows) > max_count
            hold = _late_trigger_holds(self.claims, self.ends.history, conn, router, now, rows)
            for row in rows[:max_count]:
                self.definitions.apply_misfire(
                    conn,
                    row,
                    now,
                    "",
                    t.c.trigger_state == TriggerState.WAITING,
                    t.c.next_fire_time == row.next_fire_time,
                    decided_by=instance_name,
                    held_by=hold(row),
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
        """Each row is locked, skipping those another scheduler holds, and its update or
        delete is conditional on its state."""
        f = self.sql.tables.fired_triggers
        now = self.sql.now()
        cutoff = now - int(grace * 1000)
        in_flight = [FiringState.FIRED, FiringState.PUBLISHED]
        republish: list[str] = []
        why: dict[str, tuple[float, str]] = {}
        with self.sql.transaction() as conn:
            self.sql.check_fence(conn)
            rows = conn.execute(
                select(f)
                .where(
                    self.sql.scoped(f),
                    f.c.state.in_(in_flight),
                    f.c.expires_time < cutoff,
                )
                .order_by(f.c.expires_time)
                .limit(max_count)
                .with_for_update(skip_locked=True)
            ).all()
            for row in rows:
                trigger_row = self.rows.trigger_row(
                    conn, TriggerKey(row.trigger_name, row.trigger_group)
                )
                trigger = None if trigger_row is None else trigger_from_row(trigger_row)
                late_by = (now - row.sched_time) / 1000
                outcome = expired_firing_outcome(
                    trigger, recovering=row.recovering, expired_count=row.expired_count
                )
                if outcome.republish:
                    conn.execute(
                        update(f)
                        .where(self.sql.scoped(f))
                        .where(
                            f.c.fire_instance_id == row.fire_instance_id, f.c.state.in_(in_flight)
                        )
                        .values(
                            state=FiringState.FIRED,
                            instance_name=instance_name,
                            fired_time=now,
                            expires_time=now + self.sql.misfire_threshold_ms,
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
                    why_again = (
                        f"not started by any worker ({late_by:.1f}s late); published again: "
                        f"{outcome.why}"
                    )
                    self.ends.history.record_expired(conn, row, why_again, instance_name)
                else:
                    why_drop = f"misfire: {outcome.why} ({late_by:.1f}s late)"
                    _drop_expired(self.ends, conn, row, why_drop, instance_name)
            firings = (
                self.ends.firings_to_publish(
                    conn, f.c.fire_instance_id.in_(republish), instance_name
                )
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
                        _drop_expired(self.ends, conn, row, f"misfire: {reason}", instance_name)
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
        f = self.sql.tables.fired_triggers
        cutoff = self.sql.now() - int(grace * 1000)
        with self.sql.transaction() as conn:
            return int(
                conn.execute(
                    select(func.count())
                    .select_from(f)
                    .where(
                        self.sql.scoped(f),
                        f.c.state.in_([FiringState.FIRED, FiringState.PUBLISHED]),
                        f.c.expires_time < cutoff,
                    )
                ).scalar_one()
            )

    def set_trigger_error(self, acquired: AcquiredFiring, reason: str) -> None:
        t, f = self.sql.tables.triggers, self.sql.tables.fired_triggers
        with self.sql.transaction() as conn:
            conn.execute(
                delete(f).where(
                    self.sql.scoped(f),
                    f.c.fire_instance_id == acquired.fire_instance_id,
                )
            )
            conn.execute(
                update(t)
                .where(
                    self.sql.trigger_key(acquired.trigger.key),
                    t.c.trigger_state == TriggerState.ACQUIRED,
                )
                .values(trigger_state=TriggerState.ERROR, error_reason=reason[:ERROR_TEXT])
            )
        logger.error("trigger %s put in ERROR: %s", acquired.trigger.key, reason)


def _late_trigger_holds(
    claims: Claims,
    history: HistoryRows,
    conn: Any,
    router: Router | None,
    now: int,
    rows: Sequence[Any],
) -> Callable[[Any], str | None]:
    """What would hold each late trigger of ``rows`` back now (None: nothing; it is late for
    another reason, such as every scheduler down): the admission of a claim, read only when the
    history is recorded and a trigger has a group or a pin to be held by."""
    if (
        router is None
        or not history.enabled
        or not any(r.execution_group is not None or r.preferred_node for r in rows)
    ):
        return lambda _row: None
    admission = claims.admission(conn, router, now)

    def hold(row: Any) -> str | None:
        # A fresh copy each: admitting one late trigger must not count it against the next.
        decision = router.admission(
            admission.workers, admission.in_flight_by_group, admission.in_flight_by_queue
        ).admit(row.execution_group, row.preferred_node)
        return decision.describe() if isinstance(decision, Hold) else None

    return hold


def _drop_expired(ends: FiringEnds, conn: Any, row: Any, why: str, instance_name: str) -> None:
    """Drop the expired firing ``row``, its occurrence recorded as expired and dropped."""
    occurrence = ends.history.occurrence(conn, row)
    if ends.drop_firing(conn, row, why):
        reason = f"not started by any worker; dropped ({why})"
        ends.history.record_expired(conn, row, reason, instance_name, occurrence)
