"""The simple trigger: fire at a start time, then every interval, a number of times or forever."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import IntEnum
from typing import TYPE_CHECKING, Any, ClassVar

from celery_quartz.errors import InvalidTriggerError
from celery_quartz.triggers._time import micros, optional_utc, require_start, utc
from celery_quartz.triggers.base import Trigger

if TYPE_CHECKING:
    from celery_quartz.calendars import Calendar

logger = logging.getLogger(__name__)

#: ``repeat_count`` meaning "repeat forever" (Quartz's REPEAT_INDEFINITELY).
REPEAT_INDEFINITELY = -1


class SimpleMisfireInstruction(IntEnum):
    """A simple trigger's misfire instructions (Quartz's values)."""

    #: Catch up: fire every missed occurrence as fast as the workers allow.
    IGNORE_MISFIRE_POLICY = -1
    #: The default: ``FIRE_NOW`` for a trigger that fires once,
    #: ``RESCHEDULE_NEXT_WITH_REMAINING_COUNT`` for one that repeats forever,
    #: ``RESCHEDULE_NOW_WITH_EXISTING_REPEAT_COUNT`` otherwise.
    SMART_POLICY = 0
    #: Fire now; on a repeating trigger it means ``RESCHEDULE_NOW_WITH_REMAINING_REPEAT_COUNT``.
    FIRE_NOW = 1
    #: Restart at now with the repeats not yet fired (the missed ones are still to come).
    RESCHEDULE_NOW_WITH_EXISTING_REPEAT_COUNT = 2
    #: Restart at now, dropping the missed repeats from the count.
    RESCHEDULE_NOW_WITH_REMAINING_REPEAT_COUNT = 3
    #: Resume at the next scheduled time after now; the missed occurrences count as fired, so it
    #: ends when it would have.
    RESCHEDULE_NEXT_WITH_REMAINING_COUNT = 4
    #: Resume at the next scheduled time after now, keeping the count, so it ends later.
    RESCHEDULE_NEXT_WITH_EXISTING_COUNT = 5


_M = SimpleMisfireInstruction


@dataclass(kw_only=True, eq=False)
class SimpleTrigger(Trigger):
    """Fires at ``start_at``, then every ``repeat_interval``, ``repeat_count`` more times.

    ``repeat_count=-1`` (:data:`REPEAT_INDEFINITELY`) repeats until ``end_at`` (exclusive, as in
    Quartz) or forever. A trigger that repeats needs a positive interval. Fire times are an exact
    arithmetic sequence of instants, so a simple trigger ignores daylight saving entirely.
    """

    kind: ClassVar[str] = "SIMPLE"
    #: This kind's misfire instructions, :class:`SimpleMisfireInstruction`
    #: (``SimpleTrigger.MisfireInstruction.SMART_POLICY``).
    MisfireInstruction: ClassVar[type[SimpleMisfireInstruction]] = SimpleMisfireInstruction
    misfire_instructions: ClassVar[frozenset[int]] = frozenset(SimpleMisfireInstruction)

    #: The time between two fire times (a number is read as seconds); positive when it repeats.
    repeat_interval: timedelta = timedelta(0)
    #: How many times it fires after the first: 0 fires once, :data:`REPEAT_INDEFINITELY` (-1)
    #: without a count.
    repeat_count: int = 0

    def __post_init__(self) -> None:
        interval: object = self.repeat_interval
        if isinstance(interval, (int, float)) and not isinstance(interval, bool):
            self.repeat_interval = timedelta(seconds=interval)  # a number of seconds

    # -- the schedule -------------------------------------------------------------------------

    def next_fire_time_after(self, after: datetime) -> datetime | None:
        """The first fire time strictly after ``after``; an unset ``start_at`` is an error."""
        start = require_start(self.key, self.start_at)
        after = utc(after)
        end = optional_utc(self.end_at)
        count = self.repeat_count
        if count != REPEAT_INDEFINITELY and self.times_triggered > count:
            return None
        if count == 0 and after >= start:
            return None
        if end is not None and end <= after:
            return None
        if after < start:
            return start
        interval = micros(self.repeat_interval)
        if interval <= 0:
            return None
        fired = micros(after - start) // interval + 1
        if count != REPEAT_INDEFINITELY and fired > count:
            return None
        when = start + timedelta(microseconds=fired * interval)
        if end is not None and end <= when:
            return None
        return when

    def final_fire_time(self) -> datetime | None:
        """The last fire time, or ``None`` when the trigger repeats forever with no end."""
        start = require_start(self.key, self.start_at)
        end = optional_utc(self.end_at)
        if self.repeat_count == 0:
            return start
        interval = micros(self.repeat_interval)
        if self.repeat_count == REPEAT_INDEFINITELY:
            if end is None:
                return None
            fired = micros(end - start) // interval
            last = start + timedelta(microseconds=fired * interval)
            return last if last < end else last - self.repeat_interval
        last = start + timedelta(microseconds=self.repeat_count * interval)
        if end is not None and end <= last:
            fired = micros(end - start) // interval
            last = start + timedelta(microseconds=fired * interval)
            return last if last < end else last - self.repeat_interval
        return last

    def times_fired_between(self, first: datetime, last: datetime) -> int:
        """Whole intervals between two instants (Quartz's computeNumTimesFiredBetween)."""
        interval = micros(self.repeat_interval)
        if interval < 1:
            return 0
        return micros(utc(last) - utc(first)) // interval

    # -- persistence --------------------------------------------------------------------------

    def detail(self) -> dict[str, Any]:
        return {
            "repeat_interval_us": micros(self.repeat_interval),
            "repeat_count": self.repeat_count,
        }

    @classmethod
    def from_detail(cls, detail: dict[str, Any], **common: Any) -> SimpleTrigger:
        return cls(
            repeat_interval=timedelta(microseconds=int(detail["repeat_interval_us"])),
            repeat_count=int(detail["repeat_count"]),
            **common,
        )

    def validate(self) -> None:
        super().validate()
        count = self.repeat_count
        if not isinstance(count, int) or isinstance(count, bool) or count < REPEAT_INDEFINITELY:
            raise InvalidTriggerError(
                f"trigger {self.key}: repeat_count must be -1 (forever) or a count >= 0, "
                f"got {count!r}"
            )
        if not isinstance(self.repeat_interval, timedelta):
            raise InvalidTriggerError(f"trigger {self.key}: repeat_interval must be a timedelta")
        if self.repeat_interval < timedelta(0):
            raise InvalidTriggerError(f"trigger {self.key}: repeat_interval must not be negative")
        if count != 0 and self.repeat_interval <= timedelta(0):
            raise InvalidTriggerError(
                f"trigger {self.key}: a trigger that repeats needs a positive repeat_interval"
            )

    # -- misfires -----------------------------------------------------------------------------

    def effective_misfire_instruction(self) -> SimpleMisfireInstruction:
        """What the stored instruction means for this trigger (SmartPolicy resolved)."""
        instruction = _M(self.misfire_instruction)
        if instruction == _M.SMART_POLICY:
            if self.repeat_count == 0:
                return _M.FIRE_NOW
            if self.repeat_count == REPEAT_INDEFINITELY:
                return _M.RESCHEDULE_NEXT_WITH_REMAINING_COUNT
            return _M.RESCHEDULE_NOW_WITH_EXISTING_REPEAT_COUNT
        if instruction == _M.FIRE_NOW and self.repeat_count != 0:
            # Quartz: "fire now" on a repeating trigger keeps what is left of its count.
            return _M.RESCHEDULE_NOW_WITH_REMAINING_REPEAT_COUNT
        return instruction

    def update_after_misfire(self, now: datetime, calendar: Calendar | None = None) -> None:
        """Apply the misfire instruction at ``now``, Quartz's arithmetic included.

        The "reschedule now" instructions move ``start_at`` to ``now`` and may rewrite
        ``repeat_count`` and ``times_triggered``; the store persists all three.
        """
        now = utc(now)
        instruction = self.effective_misfire_instruction()
        if instruction == _M.IGNORE_MISFIRE_POLICY:
            return
        missed = self.next_fire_time
        if instruction == _M.FIRE_NOW:
            self.next_fire_time = now
        elif instruction == _M.RESCHEDULE_NEXT_WITH_EXISTING_COUNT:
            self.next_fire_time = self._skip_excluded(self.next_fire_time_after(now), calendar)
        elif instruction == _M.RESCHEDULE_NEXT_WITH_REMAINING_COUNT:
            upcoming = self._skip_excluded(self.next_fire_time_after(now), calendar)
            if upcoming is not None and missed is not None:
                # The skipped occurrences count as fired, so the trigger still ends on time.
                self.times_triggered += self.times_fired_between(missed, upcoming)
            self.next_fire_time = upcoming
        elif instruction == _M.RESCHEDULE_NOW_WITH_EXISTING_REPEAT_COUNT:
            if self.repeat_count not in (0, REPEAT_INDEFINITELY):
                self.repeat_count -= self.times_triggered
                self.times_triggered = 0
            self._restart_at(now)
        elif instruction == _M.RESCHEDULE_NOW_WITH_REMAINING_REPEAT_COUNT:
            skipped = self.times_fired_between(missed, now) if missed is not None else 0
            if self.repeat_count not in (0, REPEAT_INDEFINITELY):
                remaining = self.repeat_count - (self.times_triggered + skipped)
                self.repeat_count = max(remaining, 0)
                self.times_triggered = 0
            self._restart_at(now)
        logger.info(
            "trigger %s misfired (was due %s): %s, next fire time %s",
            self.key,
            missed,
            instruction.name,
            self.next_fire_time,
        )

    def _restart_at(self, now: datetime) -> None:
        end = optional_utc(self.end_at)
        if end is not None and end < now:
            self.next_fire_time = None
        else:
            self.start_at = now
            self.next_fire_time = now
