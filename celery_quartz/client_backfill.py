"""The client's backfill (docs/steering.md#backfill): :class:`Backfills`, which
:class:`~celery_quartz.Quartz` inherits."""

from __future__ import annotations

from datetime import datetime, timedelta

from celery_quartz.audit import acting_as
from celery_quartz.backfill import DEFAULT_MAX_SLOTS, BackfillRequest, BackfillResult
from celery_quartz.clock import Clock
from celery_quartz.errors import ValidationError
from celery_quartz.keys import TriggerKey
from celery_quartz.store import ClientStore


class Backfills:
    """Run a past range of a trigger's occurrences, each once."""

    #: Set by :class:`~celery_quartz.Quartz`.
    store: ClientStore
    clock: Clock
    principal: str | None

    def backfill(
        self,
        trigger_key: TriggerKey,
        start: datetime,
        end: datetime,
        max_slots: int = DEFAULT_MAX_SLOTS,
        spacing: timedelta = timedelta(0),
        dry_run: bool = False,
        *,
        include_succeeded: bool = False,
    ) -> BackfillResult:
        """Run each past occurrence ("slot") of the trigger ``trigger_key`` in ``[start,
        end)`` once: its own fire times, within its start and end time, its calendar applied.
        Each slot is a one-shot firing of the trigger's job, published ``spacing`` apart (the
        first at once), with the trigger's data, priority, retry policy, pin and execution
        group, under ``disallow_concurrent`` like any firing of the job; its task reads the slot
        as ``current_context().backfill_slot``, and its history row is the trigger's, at the
        slot's time.

        Idempotent: a slot a backfill scheduled before (or schedules at the same moment) is not
        scheduled again (``already_scheduled``), and one that already succeeded according to
        the run history is skipped (``already_succeeded``) unless ``include_succeeded``. With
        ``dry_run`` nothing is stored and the result says what would be done. The audit
        records one ``backfill`` row with the range and the counts.

        Raises :class:`~celery_quartz.backfill.BackfillError` (a :class:`ValidationError`)
        when ``end`` is in the future, ``start`` is not before ``end``, a time is naive, or the
        range holds more than ``max_slots`` slots (their count in the message); and
        :class:`~celery_quartz.errors.TriggerNotFoundError`. Nothing is stored then."""
        if not isinstance(trigger_key, TriggerKey):
            raise ValidationError(f"backfill: expected a TriggerKey, got {trigger_key!r}")
        request = BackfillRequest.checked(
            start,
            end,
            now=self.clock.now(),
            max_slots=max_slots,
            spacing=spacing,
            include_succeeded=include_succeeded,
            dry_run=dry_run,
        )
        if self.principal is None:
            return self.store.backfill(trigger_key, request)
        with acting_as(self.principal, "client"):
            return self.store.backfill(trigger_key, request)
