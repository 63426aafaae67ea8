"""Running an occurrence again (:class:`OccurrenceAgain`): the recovery firing of an execution
whose process died, and the retry firing of a failed one under the retry policy that applies
(the trigger's, its job's or the scheduler's default), pausing the trigger when the policy has
no attempt left and it asks for that (docs/steering.md#retries-continued)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import Connection, Row, select, update

from celery_quartz.audit import acting_as
from celery_quartz.clock import from_millis
from celery_quartz.keys import RECOVERING_JOBS_GROUP, RETRYING_JOBS_GROUP, JobKey, TriggerKey
from celery_quartz.pausing import MAX_PAUSE_REASON, RETRIES_EXHAUSTED, PauseRequest
from celery_quartz.retry import RetryPolicy, decide_retry, effective_policy
from celery_quartz.store.sql._audit import AuditTrail
from celery_quartz.store.sql._context import SqlContext
from celery_quartz.store.sql._definitions import Definitions
from celery_quartz.store.sql._pause_rows import pause_matching
from celery_quartz.store.sql._rows import Rows, datetime_or_none
from celery_quartz.store.views import FiringOutcome
from celery_quartz.triggers.base import MisfireInstruction

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Origin:
    """The occurrence a recovery or retry firing stands for: its trigger and fire times (ms)."""

    name: str
    group: str
    fire_time: int
    sched_time: int


class OccurrenceAgain:
    """The one-shot firings that run an occurrence again: a recovery, or a retry."""

    def __init__(
        self, sql: SqlContext, rows: Rows, definitions: Definitions, audit: AuditTrail
    ) -> None:
        self.sql = sql
        self.rows = rows
        self.definitions = definitions
        self.audit = audit

    def schedule_recovery_firing(self, conn: Connection, row: Row[Any], now: int) -> bool:
        """A one-shot trigger that runs the interrupted occurrence again, as soon as possible."""
        source, origin = self._firing_source(conn, row)
        key = TriggerKey(f"recover_{row.fire_instance_id}", RECOVERING_JOBS_GROUP)
        # A recovered retry firing is still that retry: it keeps its attempt number.
        if not self._store_one_shot_firing(
            conn, row, source, origin, key, start=now, recovering=True
        ):
            return False
        logger.info(
            "worker %s died running firing %s of trigger %s.%s (scheduled %s); recovery firing "
            "%s scheduled",
            row.worker_name,
            row.fire_instance_id,
            origin.group,
            origin.name,
            from_millis(origin.sched_time).isoformat(),
            key,
        )
        return True

    def schedule_retry_firing(
        self, conn: Connection, row: Row[Any], now: int, outcome: FiringOutcome | None = None
    ) -> bool:
        """Apply the retry policy to the failed firing ``row``: a one-shot trigger that runs the
        same occurrence again after the policy's delay, or nothing (one decision, logged). True
        when a retry is scheduled.

        The policy is the original trigger's, else its job's, else the scheduler's default
        (:meth:`policy_of`); the rules are the original trigger's: no retry at, or within a
        second of, its next occurrence (the occurrence wins), nor after its end. An original
        that has gone since (a one-shot that completed) is stood for by the failed retry
        firing's own trigger, which carries a copy of the policy and the end. When the policy
        has no attempt left, the original trigger is paused if it or the scheduler says so
        (``pause_when_retries_exhausted``), the failure's message as the reason.
        """
        source, origin = self._firing_source(conn, row)
        if source is None:
            return False  # the trigger was removed while its firing ran: nothing to retry for
        original = source
        if (origin.name, origin.group) != (source.trigger_name, source.trigger_group):
            original = self.rows.trigger_row(conn, TriggerKey(origin.name, origin.group)) or source
        policy = self.policy_of(conn, original)
        attempt = row.retry_attempt + 1
        occurrence = (
            f"occurrence {origin.group}.{origin.name} "
            f"(scheduled {from_millis(origin.sched_time).isoformat()})"
        )
        decision = decide_retry(
            policy,
            attempt,
            failed_at_millis=now,
            next_fire_millis=original.next_fire_time,
            end_millis=original.end_time,
        )
        if decision.at_millis is None:
            paused = self._pause_when_exhausted(conn, origin, original, outcome, occurrence)
            if not paused and policy:  # no policy, no retry: nothing to say
                logger.info(
                    "retry: %s failed after %d retr%s, all its policy allows; the trigger "
                    "keeps its schedule",
                    occurrence,
                    row.retry_attempt,
                    "y" if row.retry_attempt == 1 else "ies",
                )
            return False
        if not decision.granted:
            logger.info(
                "retry: %s failed; retry %d at %s dropped: %s",
                occurrence,
                attempt,
                from_millis(decision.at_millis).isoformat(),
                decision.dropped_because,
            )
            return False
        key = TriggerKey(f"retry_{row.fire_instance_id}", RETRYING_JOBS_GROUP)
        if self._store_one_shot_firing(
            conn,
            row,
            source,
            origin,
            key,
            start=decision.at_millis,
            retry_attempt=attempt,
            retry_policy=policy.to_string(),
            end=original.end_time,
        ):
            logger.info(
                "retry: %s failed; retry %d of %d scheduled at %s (%s)",
                occurrence,
                attempt,
                policy.max_attempts,
                from_millis(decision.at_millis).isoformat(),
                key,
            )
            return True
        return False

    def policy_of(self, conn: Connection, trigger: Row[Any]) -> RetryPolicy:
        """The retry policy that applies to the occurrences of the trigger row ``trigger``: its
        own, else its job's, else the scheduler's default (``quartz_default_retry_policy``);
        :meth:`RetryPolicy.none` at any level stops the levels after it."""
        own = RetryPolicy.parse_optional(trigger.retry_policy)
        if own is not None:
            return own
        j = self.sql.tables.jobs
        stored = conn.execute(
            select(j.c.retry_policy).where(
                self.sql.job_key(JobKey(trigger.job_name, trigger.job_group))
            )
        ).scalar()
        return effective_policy(RetryPolicy.parse_optional(stored), self.sql.default_retry_policy)

    def _pause_when_exhausted(
        self,
        conn: Connection,
        origin: _Origin,
        original: Row[Any],
        outcome: FiringOutcome | None,
        occurrence: str,
    ) -> bool:
        """Pause the occurrence's own trigger, whose failure has no retry left, when it (or,
        having no say, the scheduler) asks for it; whether it was paused. A trigger that has
        completed or is paused already is left as it is."""
        if (original.trigger_name, original.trigger_group) != (origin.name, origin.group):
            return False  # the original has gone: nothing to pause
        wanted = original.pause_when_retries_exhausted
        if not (self.sql.pause_when_retries_exhausted if wanted is None else wanted):
            return False
        key = TriggerKey.stored(origin.name, origin.group)
        message = (outcome.error_message or outcome.error_type) if outcome is not None else None
        reason = (message or "failed with no retry left")[:MAX_PAUSE_REASON]
        request = PauseRequest.checked(reason.replace("\x00", " "), RETRIES_EXHAUSTED)
        moved = pause_matching(self.sql, self.rows, conn, self.sql.trigger_key(key), request)
        if not moved:
            return False
        with acting_as(RETRIES_EXHAUSTED, "scheduler"):
            self.audit.record_states(
                conn, "pause_trigger", "trigger", key, moved, reason=request.reason
            )
        logger.warning(
            "retry: %s failed with no retry left; trigger %s paused (%s)",
            occurrence,
            key,
            request.reason,
        )
        return True

    def _firing_source(self, conn: Connection, row: Row[Any]) -> tuple[Row[Any] | None, _Origin]:
        """The trigger row of the fired ``row`` (None if removed), and the occurrence the firing
        stands for: for a recovery or retry firing, the first occurrence, however many recoveries
        and retries ago."""
        source = self.rows.trigger_row(conn, TriggerKey(row.trigger_name, row.trigger_group))
        if source is not None and source.origin_trigger_name is not None:
            return source, _Origin(
                source.origin_trigger_name,
                source.origin_trigger_group,
                source.origin_fire_time,
                source.origin_sched_time,
            )
        return source, _Origin(row.trigger_name, row.trigger_group, row.fired_time, row.sched_time)

    def _store_one_shot_firing(
        self,
        conn: Connection,
        row: Row[Any],
        source: Row[Any] | None,
        origin: _Origin,
        key: TriggerKey,
        *,
        start: int,
        recovering: bool = False,
        retry_attempt: int | None = None,
        retry_policy: str | None = None,
        end: int | None = None,
    ) -> bool:
        """Store the one-shot trigger ``key`` that runs ``origin`` again at ``start`` (a recovery
        or retry firing of the fired ``row``): the same job, priority, execution group and
        trigger data, the source's retry policy unless given, and the fired row's retry attempt
        unless given. It ignores misfires: however late its schedulers come back, it runs.
        False when the job is gone."""
        from celery_quartz.triggers.simple import SimpleTrigger

        job_key = JobKey(row.job_name, row.job_group)
        if (
            conn.execute(
                select(self.sql.tables.jobs.c.job_name).where(self.sql.job_key(job_key))
            ).first()
            is None
        ):
            what = "recovery" if recovering else "retry"
            logger.info(
                "firing %s gets no %s firing: job %s is gone", row.fire_instance_id, what, job_key
            )
            return False
        if retry_policy is None and source is not None:
            retry_policy = source.retry_policy
        trigger = SimpleTrigger(
            key=key,
            job_key=job_key,
            start_at=from_millis(start),
            end_at=datetime_or_none(end),
            repeat_count=0,
            repeat_interval=timedelta(0),
            priority=row.priority,
            misfire_instruction=MisfireInstruction.IGNORE_MISFIRE_POLICY,
            data=json.loads(source.job_data) if source is not None else {},
            retry_policy=RetryPolicy.parse_optional(retry_policy),
        )
        self.definitions.store_trigger(conn, trigger, True, from_millis(start))
        conn.execute(
            update(self.sql.tables.triggers)
            .where(self.sql.trigger_key(key))
            .values(
                origin_trigger_name=origin.name,
                origin_trigger_group=origin.group,
                origin_fire_time=origin.fire_time,
                origin_sched_time=origin.sched_time,
                recovering=recovering,
                retry_attempt=row.retry_attempt if retry_attempt is None else retry_attempt,
                execution_group=row.execution_group,
            )
        )
        return True
