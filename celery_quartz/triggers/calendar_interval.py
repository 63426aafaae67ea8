"""The calendar-interval trigger: every n seconds, minutes, hours, days, weeks, months or years."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar

from celery_quartz.errors import InvalidTriggerError
from celery_quartz.triggers._time import UTC, micros, optional_utc, require_start, utc
from celery_quartz.triggers.cron import CronMisfireInstruction, ScheduleTrigger
from celery_quartz.tz import gap_end, is_in_gap


class IntervalUnit(str, enum.Enum):
    """The unit of a calendar interval (Quartz's names)."""

    #: A second (an exact length).
    SECOND = "SECOND"
    #: A minute (an exact length).
    MINUTE = "MINUTE"
    #: An hour (an exact length).
    HOUR = "HOUR"
    #: A calendar day (23 to 25 hours across daylight saving).
    DAY = "DAY"
    #: A calendar week (seven calendar days).
    WEEK = "WEEK"
    #: A calendar month (the start's day of month, clamped to shorter months).
    MONTH = "MONTH"
    #: A calendar year.
    YEAR = "YEAR"


_FIXED_UNITS = {
    IntervalUnit.SECOND: timedelta(seconds=1),
    IntervalUnit.MINUTE: timedelta(minutes=1),
    IntervalUnit.HOUR: timedelta(hours=1),
}
#: Shortest length of each calendar unit, to estimate how many intervals have passed.
_SHORTEST = {
    IntervalUnit.DAY: timedelta(hours=23),
    IntervalUnit.WEEK: timedelta(days=7, hours=-1),
    IntervalUnit.MONTH: timedelta(days=28, hours=-1),
    IntervalUnit.YEAR: timedelta(days=365, hours=-1),
}
_LAST_YEAR = 2299


def _add_months(wall: datetime, months: int) -> datetime | None:
    """``wall`` moved by whole months, the day clamped to the month's last day."""
    index = wall.year * 12 + wall.month - 1 + months
    year, month = divmod(index, 12)
    month += 1
    if year > _LAST_YEAR:
        return None
    day = min(wall.day, _month_length(year, month))
    return wall.replace(year=year, month=month, day=day)


def _month_length(year: int, month: int) -> int:
    if month == 2:
        return 29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28
    return 30 if month in (4, 6, 9, 11) else 31


@dataclass(kw_only=True, eq=False)
class CalendarIntervalTrigger(ScheduleTrigger):
    """Fires at ``start_at`` and then every ``repeat_interval`` ``repeat_interval_unit``\\ s.

    Seconds, minutes and hours are exact lengths of time. Days and longer are calendar steps:

    * with ``preserve_hour_of_day_across_daylight_savings`` the trigger keeps the wall-clock
      time of ``start_at`` in ``time_zone`` (a daily 09:00 stays at 09:00 across a change). When
      that time does not exist on a spring-forward day it fires when the gap ends, or skips the
      occurrence if ``skip_day_if_hour_does_not_exist``; a repeated time fires at its first pass;
    * without it (Quartz's default) steps are taken on the UTC offset ``start_at`` had, so the
      wall-clock hour moves by the daylight-saving difference.

    A month step keeps the start's day of month, clamped to shorter months (31 January, then
    28 February, then 31 March). ``end_at`` is exclusive, as in Quartz; the final fire time is
    the last time of the schedule at or before it (see :meth:`final_fire_time`).
    """

    kind: ClassVar[str] = "CAL_INT"
    #: This kind's misfire instructions, :class:`CronMisfireInstruction`
    #: (``CalendarIntervalTrigger.MisfireInstruction.SMART_POLICY``).
    MisfireInstruction: ClassVar[type[CronMisfireInstruction]] = CronMisfireInstruction
    misfire_instructions: ClassVar[frozenset[int]] = frozenset(CronMisfireInstruction)

    #: How many ``repeat_interval_unit``\ s between two fire times (at least 1).
    repeat_interval: int = 1
    #: The unit of the interval: an exact length up to hours, a calendar step from days on.
    repeat_interval_unit: IntervalUnit = IntervalUnit.DAY
    #: The IANA zone whose calendar the day and longer steps follow.
    time_zone: str = "UTC"
    #: Keep the wall-clock time of ``start_at`` across daylight-saving changes (see above).
    preserve_hour_of_day_across_daylight_savings: bool = False
    #: With ``preserve_hour_of_day_across_daylight_savings``, skip an occurrence whose time falls in
    #: a spring-forward gap instead of firing when the gap ends.
    skip_day_if_hour_does_not_exist: bool = False

    def __post_init__(self) -> None:
        self.repeat_interval_unit = IntervalUnit(self.repeat_interval_unit)

    # -- the schedule -------------------------------------------------------------------------

    def next_fire_time_after(self, after: datetime) -> datetime | None:
        start = require_start(self.key, self.start_at)
        after = utc(after)
        end = optional_utc(self.end_at)
        if end is not None and end <= after:
            return None
        if after < start:
            return start
        unit = self.repeat_interval_unit
        if unit in _FIXED_UNITS:
            step = micros(_FIXED_UNITS[unit]) * self.repeat_interval
            n = micros(after - start) // step + 1
            result: datetime | None = start + timedelta(microseconds=n * step)
        else:
            result = self._calendar_step_after(start, after)
        if result is not None and end is not None and end <= result:
            return None
        return result

    def _calendar_step_after(self, start: datetime, after: datetime) -> datetime | None:
        n = self._index_after(start, after)
        return None if n < 0 else self._occurrence(start, n)

    def _index_after(self, start: datetime, after: datetime) -> int:
        """The first calendar step ``n`` whose occurrence is after ``after`` or beyond the last
        year (where :meth:`_occurrence` is ``None``); -1 when the search gives up."""
        estimate = (after - start) // (_SHORTEST[self.repeat_interval_unit] * self.repeat_interval)
        n = max(int(estimate) - 2, 0)
        # Step back while the estimate overshoots, then forward to the first one after ``after``.
        while n > 0:
            t = self._occurrence(start, n)
            if t is not None and t <= after:
                break
            n -= 1
        for _ in range(10_000):
            n += 1
            t = self._occurrence(start, n)
            if t is None:
                if self._beyond_last_year(start, n):
                    return n
                continue  # a skipped day (its hour does not exist)
            if t > after:
                return n
        return -1

    def final_fire_time(self) -> datetime | None:
        """The last time of the schedule at or before ``end_at``; ``None`` without an end.

        An ``end_at`` that is itself a time of the schedule is the final fire time, as Quartz
        reports it (``FinalFireTimeUtc``), although the trigger does not fire at ``end_at``.
        """
        start = require_start(self.key, self.start_at)
        end = optional_utc(self.end_at)
        if end is None or end < start:
            return None
        unit = self.repeat_interval_unit
        if unit in _FIXED_UNITS:
            step = micros(_FIXED_UNITS[unit]) * self.repeat_interval
            n = micros(end - start) // step
            return start + timedelta(microseconds=n * step)
        n = self._index_after(start, end)
        if n < 0:
            return None
        for k in range(n - 1, -1, -1):
            t = self._occurrence(start, k)
            if t is not None and t <= end:
                return t
        return None

    def _beyond_last_year(self, start: datetime, n: int) -> bool:
        return self._wall(start, n, start.astimezone(self._zone()).replace(tzinfo=None)) is None

    def _wall(self, start: datetime, n: int, base: datetime) -> datetime | None:
        steps = n * self.repeat_interval
        unit = self.repeat_interval_unit
        if unit is IntervalUnit.DAY:
            moved: datetime | None = base + timedelta(days=steps)
        elif unit is IntervalUnit.WEEK:
            moved = base + timedelta(weeks=steps)
        elif unit is IntervalUnit.MONTH:
            moved = _add_months(base, steps)
        else:
            moved = _add_months(base, 12 * steps)
        if moved is not None and moved.year > _LAST_YEAR:
            return None
        return moved

    def _occurrence(self, start: datetime, n: int) -> datetime | None:
        """The ``n``-th fire time (0 is ``start_at``), or ``None`` when it is skipped."""
        zone = self._zone()
        local = start.astimezone(zone)
        if not self.preserve_hour_of_day_across_daylight_savings:
            offset = local.utcoffset()
            assert offset is not None
            wall = self._wall(start, n, (start + offset).replace(tzinfo=None))
            return None if wall is None else (wall - offset).replace(tzinfo=UTC)
        wall = self._wall(start, n, local.replace(tzinfo=None))
        if wall is None:
            return None
        if not is_in_gap(wall, zone):
            return wall.replace(tzinfo=zone).astimezone(UTC)
        # The hour does not exist that day (spring forward).
        if self.skip_day_if_hour_does_not_exist:
            return None
        return gap_end(wall, zone)

    # -- persistence --------------------------------------------------------------------------

    def detail(self) -> dict[str, Any]:
        return {
            "repeat_interval": self.repeat_interval,
            "repeat_interval_unit": self.repeat_interval_unit.value,
            "time_zone": self.time_zone,
            "preserve_hour_of_day_across_daylight_savings": (
                self.preserve_hour_of_day_across_daylight_savings
            ),
            "skip_day_if_hour_does_not_exist": self.skip_day_if_hour_does_not_exist,
        }

    @classmethod
    def from_detail(cls, detail: dict[str, Any], **common: Any) -> CalendarIntervalTrigger:
        return cls(
            repeat_interval=int(detail["repeat_interval"]),
            repeat_interval_unit=IntervalUnit(detail["repeat_interval_unit"]),
            time_zone=detail.get("time_zone", "UTC"),
            preserve_hour_of_day_across_daylight_savings=bool(
                detail.get("preserve_hour_of_day_across_daylight_savings", False)
            ),
            skip_day_if_hour_does_not_exist=bool(
                detail.get("skip_day_if_hour_does_not_exist", False)
            ),
            **common,
        )

    def validate(self) -> None:
        super().validate()
        interval = self.repeat_interval
        if not isinstance(interval, int) or isinstance(interval, bool) or interval < 1:
            raise InvalidTriggerError(
                f"trigger {self.key}: repeat_interval must be a whole number >= 1, got {interval!r}"
            )
        self._zone()
