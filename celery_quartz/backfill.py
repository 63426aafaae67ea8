"""Backfill: run a past range of a trigger's occurrences, each once (docs/steering.md#backfill).

The slots of a backfill are the trigger's own fire times in ``[start, end)``, within its start and
end, with its calendar applied (:func:`backfill_slots`, computed on a copy of the trigger). What a
backfill asks (:class:`BackfillRequest`) is checked here, before any store is touched; what it did
or would do is a :class:`BackfillResult`, one :class:`BackfillSlot` per slot.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from typing import TYPE_CHECKING

from celery_quartz.errors import ValidationError
from celery_quartz.keys import TriggerKey

if TYPE_CHECKING:
    from celery_quartz.calendars import Calendar
    from celery_quartz.triggers.base import Trigger

#: The most slots a backfill schedules unless told otherwise.
DEFAULT_MAX_SLOTS = 1000
#: The most slots a refused backfill counts (beyond it, the count is "more than"): a
#: second-level trigger over a year would otherwise take minutes to refuse.
MAX_SLOTS_COUNTED = 100_000
#: The most fire times a backfill looks through, calendar-excluded ones included.
MAX_FIRE_TIMES_EXAMINED = 1_000_000


class BackfillError(ValidationError):
    """A backfill that cannot be done as asked (its range, its size): nothing was stored.
    ``field`` names the request's part at fault (``start``, ``end``, ``max_slots``,
    ``spacing``), when one is."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class SlotOutcome(str, Enum):
    """What a backfill did with one slot (or, in a dry run, would do)."""

    #: A firing of the slot is scheduled (by this backfill).
    SCHEDULED = "scheduled"
    #: An earlier (or concurrent) backfill scheduled this slot already: not scheduled again.
    ALREADY_SCHEDULED = "already_scheduled"
    #: The run history holds a success of this occurrence: skipped (``include_succeeded`` runs
    #: it anyway).
    ALREADY_SUCCEEDED = "already_succeeded"


@dataclass(frozen=True)
class BackfillSlot:
    """One slot: the occurrence's scheduled time, what became of it and, when scheduled, when
    its firing is due (``spacing`` apart, the first at once)."""

    #: The occurrence's original scheduled time (UTC): what the task reads as
    #: ``current_context().backfill_slot``.
    slot: datetime
    outcome: SlotOutcome
    #: When its firing is due (None unless scheduled).
    fire_at: datetime | None = None
    #: The one-shot trigger that fires it (None unless scheduled, and in a dry run).
    firing_trigger: TriggerKey | None = None


@dataclass(frozen=True)
class BackfillRequest:
    """What a backfill asks: the range ``[start, end)`` (aware datetimes, ``end`` not in the
    future), the most slots it may schedule, the spacing of their firings, whether slots that
    already succeeded run again, and whether anything is stored."""

    start: datetime
    end: datetime
    max_slots: int = DEFAULT_MAX_SLOTS
    spacing: timedelta = timedelta(0)
    include_succeeded: bool = False
    dry_run: bool = False

    @classmethod
    def checked(
        cls,
        start: object,
        end: object,
        *,
        now: datetime,
        max_slots: object = DEFAULT_MAX_SLOTS,
        spacing: object = timedelta(0),
        include_succeeded: bool = False,
        dry_run: bool = False,
    ) -> BackfillRequest:
        """The request, or :class:`BackfillError` naming what is wrong: a naive or missing
        time, ``start`` not before ``end``, ``end`` after ``now``, ``max_slots`` not a positive
        integer, ``spacing`` negative (seconds as a number are accepted)."""
        for name, value in (("start", start), ("end", end)):
            if not isinstance(value, datetime):
                raise BackfillError(f"backfill: {name} must be a datetime, got {value!r}", name)
            if value.tzinfo is None or value.utcoffset() is None:
                raise BackfillError(
                    f"backfill: {name} {value.isoformat()} has no time zone; give an aware "
                    "datetime (e.g. ending in +00:00)",
                    name,
                )
        assert isinstance(start, datetime) and isinstance(end, datetime)
        if start >= end:
            raise BackfillError(
                f"backfill: start {start.isoformat()} must be before end {end.isoformat()}",
                "end",
            )
        if end > now:
            raise BackfillError(
                f"backfill: end {end.isoformat()} is in the future (now is {now.isoformat()}); "
                "a backfill runs past occurrences only",
                "end",
            )
        if isinstance(max_slots, bool) or not isinstance(max_slots, int) or max_slots < 1:
            raise BackfillError(
                f"backfill: max_slots must be a positive integer, got {max_slots!r}", "max_slots"
            )
        if isinstance(spacing, (int, float)) and not isinstance(spacing, bool):
            spacing = timedelta(seconds=spacing)
        if not isinstance(spacing, timedelta) or spacing < timedelta(0):
            raise BackfillError(
                f"backfill: spacing must be a timedelta (or seconds) of 0 or more, got {spacing!r}",
                "spacing",
            )
        return cls(start, end, max_slots, spacing, bool(include_succeeded), bool(dry_run))


@dataclass(frozen=True)
class BackfillResult:
    """What a backfill of ``trigger_key`` over ``[start, end)`` did (``dry_run``: would do)."""

    trigger_key: TriggerKey
    start: datetime
    end: datetime
    dry_run: bool
    slots: list[BackfillSlot] = field(default_factory=list)

    @property
    def slots_found(self) -> int:
        """The trigger's fire times in the range, its calendar applied."""
        return len(self.slots)

    def _count(self, outcome: SlotOutcome) -> int:
        return sum(1 for s in self.slots if s.outcome is outcome)

    @property
    def scheduled(self) -> int:
        return self._count(SlotOutcome.SCHEDULED)

    @property
    def already_scheduled(self) -> int:
        return self._count(SlotOutcome.ALREADY_SCHEDULED)

    @property
    def already_succeeded(self) -> int:
        return self._count(SlotOutcome.ALREADY_SUCCEEDED)


def backfill_slots(
    trigger: Trigger,
    calendar: Calendar | None,
    start: datetime,
    end: datetime,
    max_slots: int,
) -> list[datetime]:
    """The fire times of ``trigger`` in ``[start, end)``, within its start and end time and
    included by ``calendar``, in order, computed on a copy (the trigger is left as it is).
    Raises :class:`BackfillError` with their count when there are more than ``max_slots``
    (counted up to :data:`MAX_SLOTS_COUNTED` fire times)."""
    probe = copy.deepcopy(trigger)
    slots: list[datetime] = []
    examined = 0
    candidate = probe.next_fire_time_after(start - timedelta(microseconds=1))
    while candidate is not None and candidate < end:
        examined += 1
        if calendar is None or calendar.is_time_included(candidate):
            slots.append(candidate)
        if len(slots) > max(max_slots, MAX_SLOTS_COUNTED) or examined >= MAX_FIRE_TIMES_EXAMINED:
            raise BackfillError(
                f"backfill of trigger {trigger.key}: the range holds more than {len(slots)} "
                f"slots (counted through {examined} fire times), over max_slots={max_slots}; "
                "nothing was scheduled (narrow the range)",
                "max_slots",
            )
        candidate = probe.next_fire_time_after(candidate)
    if len(slots) > max_slots:
        raise BackfillError(
            f"backfill of trigger {trigger.key}: the range holds {len(slots)} slots, over "
            f"max_slots={max_slots}; nothing was scheduled (narrow the range or raise max_slots)",
            "max_slots",
        )
    return slots
