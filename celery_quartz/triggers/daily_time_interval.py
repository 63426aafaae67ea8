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

_LAST_YEAR = 2299
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
    first pass. ``repeat_count`` (-1 = no limit) counts repeats after the first fire of each
    day, as Quartz.NET does: 0 fires once a day at ``start_time_of_day``. A trigger that fires at
    most once a day does so on a 25-hour day too (no second fire from the extra hour).
    ``start_at`` and ``end_at`` bound the fire times inclusively.
    """

    kind: ClassVar[str] = "DAILY_I"
    #: This kind's misfire instructions, :class:`CronMisfireInstruction`
    #: (``DailyTimeIntervalTrigger.MisfireInstruction.SMART_POLICY``).
    MisfireInstruction: ClassVar[type[CronMisfireInstruction]] = CronMisfireInstruction
    misfire_instructions: ClassVar[frozenset[int]] = frozenset(CronMisfireInstruction)

    #: The wall-clock time of each day's first fire time.
    start_time_of_day: time = time(0, 0, 0)
    #: The wall-clock time after which a day fires no more (inclusive).
    end_time_of_day: time = time(23, 59, 59)
    #: The days it fires on, 1 = Sunday ... 7 = Saturday (every day by default).
    days_of_week: frozenset[int] = field(default=ALL_DAYS_OF_WEEK)
    #: How many ``repeat_interval_unit``\ s between two fire times of a day.
    repeat_interval: int = 1
    #: The unit of the interval: ``SECOND``, ``MINUTE`` or ``HOUR``.
    repeat_interval_unit: IntervalUnit = IntervalUnit.MINUTE
    #: Repeats after each day's first fire time (-1: until ``end_time_of_day``).
    repeat_count: int = REPEAT_INDEFINITELY
    #: The IANA zone whose wall clock the times of day are read on.
    time_zone: str = "UTC"

    def __post_init__(self) -> None:
        self.repeat_interval_unit = IntervalUnit(self.repeat_interval_unit)
        self.days_of_week = frozenset(self.days_of_week)

    # -- the schedule -------------------------------------------------------------------------

    def next_fire_time_after(self, after: datetime) -> datetime | None:
        after = utc(after)
        start = optional_utc(self.start_at)
        if start is not None and after < start:
            after = start - ONE_MICROSECOND
        end = optional_utc(self.end_at)
        if end is not None and after >= end:
            return None
        if after.year >= _LAST_YEAR:
            return None  # as the other kinds: no fire times searched beyond 2299
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
            if n > self._repeats_per_day(step):
                return None
            candidate = first + timedelta(microseconds=n * step)
        return candidate if candidate <= last else None

    def _repeats_per_day(self, step: int) -> int:
        """The most repeats after a day's first fire; the elapsed-time end of the day bounds
        them too. A trigger whose second fire would fall after ``end_time_of_day`` on the wall
        clock fires once a day, even on a 25-hour day where elapsed time would fit another
        (Quartz.NET scopes its daylight-saving correction the same way)."""
        span = datetime.combine(date.min, self.end_time_of_day) - datetime.combine(
            date.min, self.start_time_of_day
        )
        if step > micros(span):
            return 0
        if self.repeat_count == REPEAT_INDEFINITELY:
            return 1 << 62
        return self.repeat_count

    def final_fire_time(self) -> datetime | None:
        """The last fire time at or before ``end_at``; ``None`` without an end."""
        end = optional_utc(self.end_at)
        if end is None or not self.days_of_week or self.repeat_interval_unit not in _UNITS:
            return None
        zone = self._zone()
        step = micros(_UNITS[self.repeat_interval_unit]) * self.repeat_interval
        if step <= 0:
            return None
        start = optional_utc(self.start_at)
        day = end.astimezone(zone).date() + timedelta(days=1)
        for _ in range(9):
            day -= timedelta(days=1)
            if _quartz_weekday(day) not in self.days_of_week:
                continue
            first = _instant(datetime.combine(day, self.start_time_of_day), zone)
            if first > end:
                continue
            bound = min(_instant(datetime.combine(day, self.end_time_of_day), zone), end)
            n = min(micros(bound - first) // step, self._repeats_per_day(step))
            last = first + timedelta(microseconds=n * step)
            return None if start is not None and last < start else last
        return None

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
        if interval * _UNITS[self.repeat_interval_unit] > timedelta(hours=24):
            raise InvalidTriggerError(
                f"{where}: repeat_interval must not exceed 24 hours, got {interval} "
                f"{self.repeat_interval_unit.value.lower()}s"
            )
        for name in ("start_time_of_day", "end_time_of_day"):
            value = getattr(self, name)
            if not isinstance(value, time) or value.microsecond or value.tzinfo is not None:
                raise InvalidTriggerError(
                    f"{where}: {name} must be a naive time of whole seconds, got {value!r}"
                )
        if self.repeat_count < REPEAT_INDEFINITELY:
            raise InvalidTriggerError(f"{where}: repeat_count must be -1 or a count >= 0")
        self._zone()


def _instant(wall: datetime, zone: tzinfo) -> datetime:
    """A wall time as an instant: first pass when repeated, pre-change offset in a gap."""
    return wall.replace(tzinfo=zone).astimezone(UTC)
