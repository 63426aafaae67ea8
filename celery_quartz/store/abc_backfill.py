"""The client's backfill role (:class:`BackfillStore`): past occurrences of a trigger run
again, each once (docs/steering.md#backfill)."""

from __future__ import annotations

import abc

from celery_quartz.backfill import BackfillRequest, BackfillResult
from celery_quartz.keys import TriggerKey


class BackfillStore(abc.ABC):
    """Schedules the past slots of a trigger as one-shot firings, once each."""

    @abc.abstractmethod
    def backfill(self, key: TriggerKey, request: BackfillRequest) -> BackfillResult:
        """Schedule a one-shot firing for each slot of the trigger ``key`` in the request's
        range (:func:`celery_quartz.backfill.backfill_slots`: its own fire times, its calendar
        applied), ``spacing`` apart from now, in one transaction, with one audit row
        (``backfill``: the range and the counts). Each firing keeps the trigger's job, data,
        priority, retry policy, pin and execution group, and runs the occurrence: its history
        row is the trigger's, at the slot's scheduled time, and its task reads the slot as
        ``current_context().backfill_slot``. A slot an earlier backfill scheduled is counted
        ``already_scheduled``; one whose occurrence has a ``succeeded`` history row is counted
        ``already_succeeded`` unless ``include_succeeded``. With ``dry_run`` nothing is
        written and the result says what would be done.

        Race settled: two backfills of overlapping ranges at once; each slot is a row under a
        unique key, inserted only if absent, so one of them schedules it and the other counts
        it ``already_scheduled``.

        Raises :class:`~celery_quartz.errors.TriggerNotFoundError`, or
        :class:`~celery_quartz.backfill.BackfillError` (more slots than ``max_slots``, with
        their count; an ``end`` after the store clock's now; a one-shot trigger of
        celery-quartz's own); nothing is written then."""
