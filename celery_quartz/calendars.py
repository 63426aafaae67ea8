"""Quartz's exclusion calendars: times a trigger must not fire at, chainable with a base calendar.

A calendar does not make a trigger fire; it removes fire times. When a trigger computes its next
fire time it skips every time its calendar excludes (see ``Trigger._skip_excluded``). A calendar
may have a base calendar: a time is included only when both include it.

Every calendar serialises to a JSON object (:meth:`Calendar.to_dict`) and back
(:func:`calendar_from_dict`), base calendar included, for the store's calendars table.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from datetime import date, datetime, time, timedelta, timezone, tzinfo
from typing import Any, ClassVar

from celery_quartz.clock import require_aware
from celery_quartz.cron import CronExpression
from celery_quartz.errors import ValidationError
from celery_quartz.tz import first_instant_at_or_after, resolve_time_zone

__all__ = [
    "CALENDAR_TYPES",
    "AnnualCalendar",
    "Calendar",
    "CronCalendar",
    "DailyCalendar",
    "HolidayCalendar",
    "MonthlyCalendar",
    "WeeklyCalendar",
    "calendar_from_dict",
]

_UTC = timezone.utc
_ONE_SECOND = timedelta(seconds=1)
#: How far a calendar searches for an included time before deciding it excludes everything.
_SEARCH_DAYS = 366 * 8

#: Every calendar class, by its ``type`` name in :meth:`Calendar.to_dict`.
CALENDAR_TYPES: dict[str, type[Calendar]] = {}


class Calendar(ABC):
    """What every calendar answers; subclasses say which local times they exclude."""

    #: The calendar's kind as stored (``holiday``, ``weekly``, …); names the class that reads it
    #: back.
    type_name: ClassVar[str]

    def __init__(
        self,
        *,
        base_calendar: Calendar | None = None,
        description: str | None = None,
        time_zone: str = "UTC",
    ) -> None:
        #: A calendar whose exclusions this one adds to its own (Quartz's base calendar); ``None``:
        #: none.
        self.base_calendar = base_calendar
        #: Free text for operators.
        self.description = description
        #: The IANA zone whose local days and times the calendar excludes.
        self.time_zone = time_zone
        try:
            self._zone: tzinfo = resolve_time_zone(time_zone)
        except ValueError as exc:
            raise ValidationError(f"{type(self).__name__}: {exc}") from None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        name = cls.__dict__.get("type_name")
        if isinstance(name, str):
            CALENDAR_TYPES[name] = cls

    # -- the two questions --------------------------------------------------------------------

    def is_time_included(self, t: datetime) -> bool:
        """Whether a trigger may fire at ``t``: this calendar and its base both allow it."""
        require_aware(t, f"calendar {type(self).__name__}")
        if self.base_calendar is not None and not self.base_calendar.is_time_included(t):
            return False
        return self._includes(t)

    def next_included_time(self, t: datetime) -> datetime:
        """The first instant at or after ``t`` that this calendar and its base include (UTC).

        Raises :class:`ValidationError` when nothing is included for years ahead.
        """
        candidate = require_aware(t, f"calendar {type(self).__name__}").astimezone(_UTC)
        for _ in range(10_000):
            own = self._next_own(candidate)
            if self.base_calendar is None:
                return own
            chained = self.base_calendar.next_included_time(own)
            if chained == own:
                return own
            candidate = chained
        raise ValidationError(f"{self!r}: no time is included by it and its base calendar")

    # -- what subclasses provide --------------------------------------------------------------

    @abstractmethod
    def _includes(self, t: datetime) -> bool:
        """Whether this calendar alone includes ``t``."""

    @abstractmethod
    def _next_own(self, t: datetime) -> datetime:
        """The first instant at or after ``t`` this calendar alone includes (UTC)."""

    @abstractmethod
    def _own_dict(self) -> dict[str, Any]:
        """The kind-specific part of :meth:`to_dict`."""

    @classmethod
    @abstractmethod
    def _from_own_dict(cls, d: dict[str, Any], **common: Any) -> Calendar:
        """Rebuild from :meth:`_own_dict` and the common arguments."""

    # -- serialisation ------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """A JSON object :func:`calendar_from_dict` reads back, base calendar nested."""
        return {
            "type": self.type_name,
            "description": self.description,
            "time_zone": self.time_zone,
            "base_calendar": None if self.base_calendar is None else self.base_calendar.to_dict(),
            **self._own_dict(),
        }

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._own_dict()!r}, time_zone={self.time_zone!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Calendar):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by content

    # -- helpers for day-based calendars ------------------------------------------------------

    def _local(self, t: datetime) -> datetime:
        return t.astimezone(self._zone)

    def _start_of_day(self, day: date) -> datetime:
        """The first instant of a local day (midnight, or the end of a gap at midnight)."""
        return first_instant_at_or_after(datetime.combine(day, time(0)), self._zone)


class _DayCalendar(Calendar):
    """A calendar that excludes whole local days."""

    @abstractmethod
    def _day_included(self, day: date) -> bool: ...

    def _includes(self, t: datetime) -> bool:
        return self._day_included(self._local(t).date())

    def _next_own(self, t: datetime) -> datetime:
        day = self._local(t).date()
        if self._day_included(day):
            return t.astimezone(_UTC)
        for _ in range(_SEARCH_DAYS):
            day += timedelta(days=1)
            if self._day_included(day):
                return self._start_of_day(day)
        raise ValidationError(f"{self!r} excludes every day for {_SEARCH_DAYS} days")


class HolidayCalendar(_DayCalendar):
    """Excludes the listed dates (local days in the calendar's zone)."""

    #: Stored as ``holiday``.
    type_name: ClassVar[str] = "holiday"

    def __init__(self, excluded_dates: Iterable[date] = (), **common: Any) -> None:
        super().__init__(**common)
        #: The local dates excluded, whole.
        self.excluded_dates: set[date] = set()
        for d in excluded_dates:
            self.add_excluded_date(d)

    def add_excluded_date(self, d: date) -> None:
        """Exclude the date ``d`` (a datetime's date) too."""
        self.excluded_dates.add(d.date() if isinstance(d, datetime) else d)

    def remove_excluded_date(self, d: date) -> None:
        """Include the date ``d`` (a datetime's date) again; nothing when it was not excluded."""
        self.excluded_dates.discard(d.date() if isinstance(d, datetime) else d)

    def _day_included(self, day: date) -> bool:
        return day not in self.excluded_dates

    def _own_dict(self) -> dict[str, Any]:
        return {"excluded_dates": sorted(d.isoformat() for d in self.excluded_dates)}

    @classmethod
    def _from_own_dict(cls, d: dict[str, Any], **common: Any) -> HolidayCalendar:
        return cls([date.fromisoformat(s) for s in d.get("excluded_dates", [])], **common)


#: Quartz's day-of-week numbers: 1 = Sunday ... 7 = Saturday.
SUNDAY, MONDAY, TUESDAY, WEDNESDAY, THURSDAY, FRIDAY, SATURDAY = range(1, 8)


def _quartz_weekday(day: date) -> int:
    return day.isoweekday() % 7 + 1


class WeeklyCalendar(_DayCalendar):
    """Excludes days of the week (1 = Sunday ... 7 = Saturday).

    As in Quartz, a new weekly calendar excludes Saturday and Sunday unless told otherwise.
    """

    #: Stored as ``weekly``.
    type_name: ClassVar[str] = "weekly"

    def __init__(self, excluded_days: Iterable[int] = (SATURDAY, SUNDAY), **common: Any) -> None:
        super().__init__(**common)
        days = set(excluded_days)
        if not days <= set(range(1, 8)):
            raise ValidationError(f"WeeklyCalendar: days of week are 1 (Sunday) to 7, got {days}")
        if len(days) == 7:
            raise ValidationError("WeeklyCalendar: a weekly calendar may not exclude every day")
        #: The days of the week excluded, 1 = Sunday ... 7 = Saturday.
        self.excluded_days = days

    def _day_included(self, day: date) -> bool:
        return _quartz_weekday(day) not in self.excluded_days

    def _own_dict(self) -> dict[str, Any]:
        return {"excluded_days": sorted(self.excluded_days)}

    @classmethod
    def _from_own_dict(cls, d: dict[str, Any], **common: Any) -> WeeklyCalendar:
        return cls(d.get("excluded_days", []), **common)


class MonthlyCalendar(_DayCalendar):
    """Excludes days of the month (1-31)."""

    #: Stored as ``monthly``.
    type_name: ClassVar[str] = "monthly"

    def __init__(self, excluded_days: Iterable[int] = (), **common: Any) -> None:
        super().__init__(**common)
        days = set(excluded_days)
        if not days <= set(range(1, 32)):
            raise ValidationError(f"MonthlyCalendar: days of month are 1 to 31, got {days}")
        if len(days) == 31:
            raise ValidationError("MonthlyCalendar: a monthly calendar may not exclude every day")
        #: The days of the month excluded (1 to 31).
        self.excluded_days = days

    def _day_included(self, day: date) -> bool:
        return day.day not in self.excluded_days

    def _own_dict(self) -> dict[str, Any]:
        return {"excluded_days": sorted(self.excluded_days)}

    @classmethod
    def _from_own_dict(cls, d: dict[str, Any], **common: Any) -> MonthlyCalendar:
        return cls(d.get("excluded_days", []), **common)


class AnnualCalendar(_DayCalendar):
    """Excludes days of the year, given as ``(month, day)``, every year."""

    #: Stored as ``annual``.
    type_name: ClassVar[str] = "annual"

    def __init__(self, excluded_days: Iterable[tuple[int, int]] = (), **common: Any) -> None:
        super().__init__(**common)
        #: The (month, day) pairs excluded every year.
        self.excluded_days: set[tuple[int, int]] = set()
        for month, day in excluded_days:
            if not (1 <= month <= 12 and 1 <= day <= 31):
                raise ValidationError(f"AnnualCalendar: ({month}, {day}) is not a day of the year")
            self.excluded_days.add((month, day))

    def _day_included(self, day: date) -> bool:
        return (day.month, day.day) not in self.excluded_days

    def _own_dict(self) -> dict[str, Any]:
        return {"excluded_days": [list(md) for md in sorted(self.excluded_days)]}

    @classmethod
    def _from_own_dict(cls, d: dict[str, Any], **common: Any) -> AnnualCalendar:
        return cls([(int(m), int(dd)) for m, dd in d.get("excluded_days", [])], **common)


class DailyCalendar(Calendar):
    """Excludes a stretch of every local day, ``range_start`` to ``range_end`` inclusive.

    With ``invert=True`` it excludes everything *outside* the stretch instead.
    """

    #: Stored as ``daily``.
    type_name: ClassVar[str] = "daily"

    def __init__(
        self, range_start: time, range_end: time, *, invert: bool = False, **common: Any
    ) -> None:
        super().__init__(**common)
        if not range_start < range_end:
            raise ValidationError(
                f"DailyCalendar: range_start {range_start} must be before range_end {range_end}"
            )
        #: The local time of day the excluded stretch starts at (inclusive).
        self.range_start = range_start
        #: The local time of day the excluded stretch ends at (inclusive).
        self.range_end = range_end
        #: Exclude everything outside the stretch instead of the stretch.
        self.invert = invert

    def _includes(self, t: datetime) -> bool:
        tod = self._local(t).time()
        inside = self.range_start <= tod <= self.range_end
        return inside if self.invert else not inside

    def _next_own(self, t: datetime) -> datetime:
        t = t.astimezone(_UTC)
        if self._includes(t):
            return t
        local = self._local(t)
        if not self.invert:
            # Inside the excluded stretch: included again just after its end.
            end = datetime.combine(local.date(), self.range_end) + timedelta(microseconds=1)
            return first_instant_at_or_after(end, self._zone)
        day = local.date()
        if local.time() > self.range_end:
            day += timedelta(days=1)
        return first_instant_at_or_after(datetime.combine(day, self.range_start), self._zone)

    def _own_dict(self) -> dict[str, Any]:
        return {
            "range_start": self.range_start.isoformat(),
            "range_end": self.range_end.isoformat(),
            "invert": self.invert,
        }

    @classmethod
    def _from_own_dict(cls, d: dict[str, Any], **common: Any) -> DailyCalendar:
        return cls(
            time.fromisoformat(d["range_start"]),
            time.fromisoformat(d["range_end"]),
            invert=bool(d.get("invert", False)),
            **common,
        )


class CronCalendar(Calendar):
    """Excludes every second a cron expression matches (read in the calendar's zone)."""

    #: Stored as ``cron``.
    type_name: ClassVar[str] = "cron"

    def __init__(self, expression: str, **common: Any) -> None:
        super().__init__(**common)
        #: The parsed expression, in the calendar's zone.
        self.cron = CronExpression(expression, time_zone=self._zone)
        #: The expression in its canonical spelling.
        self.expression = self.cron.expression

    def _includes(self, t: datetime) -> bool:
        return not self.cron.is_satisfied_by(t)

    def _next_own(self, t: datetime) -> datetime:
        t = t.astimezone(_UTC)
        if not self.cron.is_satisfied_by(t):
            return t
        following = self.cron.next_invalid_time_after(t)
        if following is None:
            raise ValidationError(f"{self!r}: the excluded run is too long to walk")
        return following

    def _own_dict(self) -> dict[str, Any]:
        return {"expression": self.expression}

    @classmethod
    def _from_own_dict(cls, d: dict[str, Any], **common: Any) -> CronCalendar:
        return cls(d["expression"], **common)


def calendar_from_dict(d: dict[str, Any]) -> Calendar:
    """Rebuild a calendar (and its base calendars) from :meth:`Calendar.to_dict`."""
    if not isinstance(d, dict) or d.get("type") not in CALENDAR_TYPES:
        raise ValidationError(
            f"not a calendar: expected a type of {sorted(CALENDAR_TYPES)}, got {d!r:.80}"
        )
    base = d.get("base_calendar")
    common: dict[str, Any] = {
        "description": d.get("description"),
        "time_zone": d.get("time_zone", "UTC"),
        "base_calendar": None if base is None else calendar_from_dict(base),
    }
    return CALENDAR_TYPES[d["type"]]._from_own_dict(d, **common)
