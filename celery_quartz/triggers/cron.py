"""The cron trigger: a Quartz cron expression read in a named time zone."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from enum import IntEnum
from typing import TYPE_CHECKING, Any, ClassVar

from celery_quartz.cron import CronExpression
from celery_quartz.errors import CronSyntaxError, InvalidTriggerError
from celery_quartz.triggers._time import ONE_MICROSECOND, optional_utc, utc
from celery_quartz.triggers.base import Trigger

if TYPE_CHECKING:
    from celery_quartz.calendars import Calendar

logger = logging.getLogger(__name__)


class CronMisfireInstruction(IntEnum):
    """The misfire instructions of the cron, calendar-interval, daily-time-interval and
    recurrence triggers (Quartz's values)."""

    #: Catch up: fire every missed occurrence as fast as the workers allow.
    IGNORE_MISFIRE_POLICY = -1
    #: The default: ``FIRE_ONCE_NOW``.
    SMART_POLICY = 0
    #: Fire once now in place of every missed occurrence, then resume the schedule (Quartz's
    #: FireAndProceed).
    FIRE_ONCE_NOW = 1
    #: Skip what was missed: the next fire time is the first one after now that the calendar allows.
    DO_NOTHING = 2


#: Quartz's name for the same instruction on the other kinds; FireAndProceed is FIRE_ONCE_NOW.
FIRE_AND_PROCEED = CronMisfireInstruction.FIRE_ONCE_NOW


class ScheduleTrigger(Trigger):
    """Shared misfire handling of the kinds whose SmartPolicy is "fire once now".

    Subclasses set ``misfire_instructions`` from :class:`CronMisfireInstruction`.
    """

    def effective_misfire_instruction(self) -> CronMisfireInstruction:
        """What the stored instruction means (SmartPolicy resolved to FIRE_ONCE_NOW)."""
        instruction = CronMisfireInstruction(self.misfire_instruction)
        if instruction == CronMisfireInstruction.SMART_POLICY:
            return CronMisfireInstruction.FIRE_ONCE_NOW
        return instruction

    def update_after_misfire(self, now: datetime, calendar: Calendar | None = None) -> None:
        """FIRE_ONCE_NOW: fire at ``now`` then resume; DO_NOTHING: resume after ``now``."""
        now = utc(now)
        instruction = self.effective_misfire_instruction()
        if instruction == CronMisfireInstruction.IGNORE_MISFIRE_POLICY:
            return
        missed = self.next_fire_time
        if instruction == CronMisfireInstruction.DO_NOTHING:
            self.next_fire_time = self._skip_excluded(self.next_fire_time_after(now), calendar)
        else:
            self.next_fire_time = now
        logger.info(
            "trigger %s misfired (was due %s): %s, next fire time %s",
            self.key,
            missed,
            instruction.name,
            self.next_fire_time,
        )

    def _bounded(self, after: datetime, compute: Any) -> datetime | None:
        """Run ``compute(after')`` with ``start_at`` (inclusive) and ``end_at`` (inclusive)."""
        after = utc(after)
        start = optional_utc(self.start_at)
        if start is not None and after < start:
            after = start - ONE_MICROSECOND
        result: datetime | None = compute(after)
        end = optional_utc(self.end_at)
        if result is not None and end is not None and result > end:
            return None
        return result


@dataclass(kw_only=True, eq=False)
class CronTrigger(ScheduleTrigger):
    """Fires whenever a Quartz cron expression matches, read in ``time_zone``.

    ``CronTrigger(expression="0 0 2 * * ?", time_zone="Europe/Helsinki")``. The zone defaults to
    UTC, never to the machine's zone. ``start_at`` and ``end_at`` both bound the fire times
    inclusively. ``H`` tokens in the expression take their values from the trigger's key, so
    triggers with the same expression spread out (see :func:`celery_quartz.cron.hash_value`).
    """

    kind: ClassVar[str] = "CRON"
    #: This kind's misfire instructions, :class:`CronMisfireInstruction`
    #: (``CronTrigger.MisfireInstruction.SMART_POLICY``).
    MisfireInstruction: ClassVar[type[CronMisfireInstruction]] = CronMisfireInstruction
    misfire_instructions: ClassVar[frozenset[int]] = frozenset(CronMisfireInstruction)

    #: The Quartz cron expression (seconds first), stored in its canonical spelling.
    expression: str = ""
    #: The IANA zone whose wall clock the expression is read on.
    time_zone: str = "UTC"
    _parsed: CronExpression | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.expression, CronExpression):
            parsed = self.expression
            self.expression = parsed.expression
            self.time_zone = parsed.time_zone
        self._parsed = self._cron()
        self.expression = self._parsed.expression

    @property
    def cron_expression(self) -> CronExpression:
        """The parsed expression (re-read if ``expression`` or ``time_zone`` changed)."""
        return self._cron()

    def _cron(self) -> CronExpression:
        parsed = self._parsed
        if (
            parsed is None
            or parsed.expression != self.expression
            or parsed.time_zone != self.time_zone
            or (parsed.hash_key is not None and parsed.hash_key != str(self.key))
        ):
            try:
                parsed = CronExpression(
                    self.expression, time_zone=self.time_zone, hash_key=str(self.key)
                )
            except CronSyntaxError as exc:
                raise CronSyntaxError(f"trigger {self.key}: {exc}") from None
            except ValueError as exc:
                raise InvalidTriggerError(f"trigger {self.key}: {exc}") from None
            self._parsed = parsed
        return parsed

    def next_fire_time_after(self, after: datetime) -> datetime | None:
        return self._bounded(after, self._cron().next_valid_time_after)

    def final_fire_time(self) -> datetime | None:
        """The last fire time: the last one at or before ``end_at``, or in the year field's last
        year; ``None`` when neither bounds the expression, or nothing fires after ``start_at``."""
        cron = self._cron()
        end = optional_utc(self.end_at)
        last = (
            cron.time_before(end + ONE_MICROSECOND) if end is not None else cron.final_fire_time()
        )
        start = optional_utc(self.start_at)
        if last is None or (start is not None and last < start):
            return None
        return last

    def detail(self) -> dict[str, Any]:
        return {"expression": self.expression, "time_zone": self.time_zone}

    @classmethod
    def from_detail(cls, detail: dict[str, Any], **common: Any) -> CronTrigger:
        return cls(expression=detail["expression"], time_zone=detail["time_zone"], **common)

    def validate(self) -> None:
        super().validate()
        self._cron()
