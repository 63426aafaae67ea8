"""The daily-time-interval trigger: every interval between two times of day, on chosen weekdays."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta, tzinfo
from typing import Any, ClassVar

from celery_quartz.errors import InvalidTriggerError
from celery_quartz.triggers._time import ONE_MICROSECOND, UTC, micros, optional_utc, utc
from celery_quartz.triggers.calendar_interval import IntervalUnit
from celery_quartz.triggers.cron import CronMisfireInstruction, ScheduleTrigger
from celery_quartz.triggers.simple import REPEAT_INDEFINITELY

#: Every day of the week, Quartz-numbered (1 = Sunday ... 7 = Saturday).
ALL_DAYS_OF_WEEK = frozenset(range(1, 8))
#: Monday to Friday.
MONDAY_THROUGH_FRIDAY = frozenset(range(2, 7))
#: Saturday and Sunday.
SATURDAY_AND_SUNDAY = frozenset({1, 7})

_UNITS = {
    IntervalUnit.SECOND: timedelta(seconds=1),
    IntervalUnit.MINUTE: timedelta(minutes=1),
    IntervalUnit.HOUR: timedelta(hours=1),
}


def _quartz_weekday(day: date) -> int:
    return day.isoweekday() % 7 + 1


@dataclass(kw_only=True, eq=False)
class DailyTimeIntervalTrigger(ScheduleTrigger):
    """Fires every ``repeat_interval`` units from ``start_time_of_day`` to ``end_time_of_day``
    (both inclusive) on each of ``days_of_week`` (1 = Sunday ... 7 = Saturday), in ``time_zone``.

    Each day starts afresh at ``start_time_of_day``; within the day the interval is an exact
    length of time. A time of day that does not exist on a spring-forward day is read with the
    offset before the change (so 02:30 becomes 03:30, as Quartz does); a repeated one at its
    first pass. ``repeat_count`` (-1 = forever) counts repeats after the first fire, over all
    days. ``start_at`` and ``end_at`` bound the fire times inclusively.
    """

    kind: ClassVar[str] = "DAILY_I"
    MisfireInstruction: ClassVar[type[CronMisfireInstruction]] = CronMisfireInstruction
    misfire_instructions: ClassVar[frozenset[int]] = frozenset(CronMisfireInstruction)

    start_time_of_day: time = time(0, 0, 0)
    end_time_of_day: time = time(23, 59, 59)
    days_of_week: frozenset[int] = field(default=ALL_DAYS_OF_WEEK)
    repeat_interval: int = 1
    repeat_interval_unit: IntervalUnit = IntervalUnit.MINUTE
    repeat_count: int = REPEAT_INDEFINITELY
    time_zone: str = "UTC"

    def __post_init__(self) -> None:
        self.repeat_interval_unit = IntervalUnit(self.repeat_interval_unit)
        self.days_of_week = frozenset(self.days_of_week)

    # -- the schedule -------------------------------------------------------------------------

    def next_fire_time_after(self, after: datetime) -> datetime | None:
        after = utc(after)
        count = self.repeat_count
        if count != REPEAT_INDEFINITELY and self.times_triggered > count:
            return None
        start = optional_utc(self.start_at)
        if start is not None and after < start:
            after = start - ONE_MICROSECOND
        end = optional_utc(self.end_at)
        if end is not None and after >= end:
            return None
        if not self.days_of_week or self.repeat_interval_unit not in _UNITS:
            return None
        zone = self._zone()
        step = micros(_UNITS[self.repeat_interval_unit]) * self.repeat_interval
        if step <= 0:
            return None
        # The local day of ``after`` may still hold fire times; so may the day before it when
        # ``after`` falls in the small hours of a day whose local date moved.
        day = after.astimezone(zone).date() - timedelta(days=1)
        for _ in range(9):
            fire = self._fire_on(day, after, zone, step)
            if fire is not None:
                if end is not None and fire > end:
                    return None
                return fire
            day += timedelta(days=1)
        return None

    def _fire_on(self, day: date, after: datetime, zone: tzinfo, step: int) -> datetime | None:
        if _quartz_weekday(day) not in self.days_of_week:
            return None
        first = _instant(datetime.combine(day, self.start_time_of_day), zone)
        last = _instant(datetime.combine(day, self.end_time_of_day), zone)
        if after < first:
            candidate = first
        else:
            n = micros(after - first) // step + 1
            candidate = first + timedelta(microseconds=n * step)
        return candidate if candidate <= last else None

    # -- persistence --------------------------------------------------------------------------

    def detail(self) -> dict[str, Any]:
        return {
            "start_time_of_day": self.start_time_of_day.isoformat(),
            "end_time_of_day": self.end_time_of_day.isoformat(),
            "days_of_week": sorted(self.days_of_week),
            "repeat_interval": self.repeat_interval,
            "repeat_interval_unit": self.repeat_interval_unit.value,
            "repeat_count": self.repeat_count,
            "time_zone": self.time_zone,
        }

    @classmethod
    def from_detail(cls, detail: dict[str, Any], **common: Any) -> DailyTimeIntervalTrigger:
        return cls(
            start_time_of_day=time.fromisoformat(detail["start_time_of_day"]),
            end_time_of_day=time.fromisoformat(detail["end_time_of_day"]),
            days_of_week=frozenset(int(d) for d in detail["days_of_week"]),
            repeat_interval=int(detail["repeat_interval"]),
            repeat_interval_unit=IntervalUnit(detail["repeat_interval_unit"]),
            repeat_count=int(detail.get("repeat_count", REPEAT_INDEFINITELY)),
            time_zone=detail.get("time_zone", "UTC"),
            **common,
        )

    def validate(self) -> None:
        super().validate()
        where = f"trigger {self.key}"
        if self.repeat_interval_unit not in _UNITS:
            raise InvalidTriggerError(
                f"{where}: repeat_interval_unit must be SECOND, MINUTE or HOUR, "
                f"got {self.repeat_interval_unit.value}"
            )
        interval = self.repeat_interval
        if not isinstance(interval, int) or isinstance(interval, bool) or interval < 1:
            raise InvalidTriggerError(f"{where}: repeat_interval must be a whole number >= 1")
        if not self.days_of_week or not self.days_of_week <= ALL_DAYS_OF_WEEK:
            raise InvalidTriggerError(
                f"{where}: days_of_week must be a non-empty set of 1 (Sunday) to 7 (Saturday)"
            )
        if not self.start_time_of_day <= self.end_time_of_day:
            raise InvalidTriggerError(
                f"{where}: start_time_of_day {self.start_time_of_day} is after "
                f"end_time_of_day {self.end_time_of_day}"
            )
        if self.repeat_count < REPEAT_INDEFINITELY:
            raise InvalidTriggerError(f"{where}: repeat_count must be -1 or a count >= 0")
        self._zone()


def _instant(wall: datetime, zone: tzinfo) -> datetime:
    """A wall time as an instant: first pass when repeated, pre-change offset in a gap."""
    return wall.replace(tzinfo=zone).astimezone(UTC)
