"""The recurrence trigger: an RFC 5545 RRULE, DTSTART being the trigger's start in its zone.

The rule is expanded by ``python-dateutil`` on the wall clock of ``time_zone``; each wall time
becomes an instant by RFC 5545 §3.3.5: a time that occurs twice means its first occurrence, and a
time that does not occur is read with the UTC offset from before the gap.
"""

from __future__ import annotations

import calendar
import re
import warnings
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, tzinfo
from typing import Any, ClassVar

from dateutil import rrule as du

from celery_quartz.errors import InvalidTriggerError
from celery_quartz.triggers._time import UTC, optional_utc, require_start, utc
from celery_quartz.triggers.cron import CronMisfireInstruction, ScheduleTrigger
from celery_quartz.tz import is_in_gap

#: Wall time past which no occurrence is searched (the other kinds stop at year 2299 too).
_SEARCH_END = datetime(2299, 12, 31, 23, 59, 59)
#: A gap moves a wall time by at most this much, so instants are out of wall order only this far.
#: The largest COUNT a rule may give: COUNT is counted from DTSTART, so every fire time of a
#: counted rule walks the occurrences before it (100,000 take well under a second).
MAX_COUNT = 100_000
_MAX_SHIFT = timedelta(hours=3)
_FAST_FORWARD = {
    du.SECONDLY: timedelta(seconds=1),
    du.MINUTELY: timedelta(minutes=1),
    du.HOURLY: timedelta(hours=1),
    du.DAILY: timedelta(days=1),
    du.WEEKLY: timedelta(weeks=1),
}


@dataclass(kw_only=True, eq=False)
class RecurrenceTrigger(ScheduleTrigger):
    """Fires at the occurrences of an RFC 5545 recurrence rule.

    ``RecurrenceTrigger(rule="FREQ=WEEKLY;INTERVAL=2;BYDAY=MO", start_at=..., time_zone=...)``.
    ``start_at`` is the rule's DTSTART, read on the wall clock of ``time_zone``; it is a fire time
    only when the rule matches it, and COUNT counts the occurrences that fire (an unmatched
    DTSTART and impossible dates such as 30 February do not count). UNTIL ending in ``Z`` is UTC,
    otherwise a wall time of ``time_zone``. ``end_at`` bounds the fire times inclusively.
    Parts RFC 5545 does not allow (``BYMONTH=13``, ``BYMONTHDAY=0``, ``BYDAY=54MO``, COUNT with
    UNTIL, ...) are refused with :class:`InvalidTriggerError`; ``X-`` extension parts are
    dropped, as the RFC says to ignore them.
    """

    kind: ClassVar[str] = "RRULE"
    #: This kind's misfire instructions, :class:`CronMisfireInstruction`
    #: (``RecurrenceTrigger.MisfireInstruction.SMART_POLICY``).
    MisfireInstruction: ClassVar[type[CronMisfireInstruction]] = CronMisfireInstruction
    misfire_instructions: ClassVar[frozenset[int]] = frozenset(CronMisfireInstruction)

    #: The RFC 5545 recurrence rule (``FREQ=…;…``), stored in its canonical spelling.
    rule: str = ""
    #: The IANA zone whose wall clock the rule and ``start_at`` (its DTSTART) are read on.
    time_zone: str = "UTC"
    _cache: tuple[Any, ...] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.rule = _canonical(self.rule)
        if self.start_at is not None:
            self._rrule()

    # -- the rule -----------------------------------------------------------------------------

    def _rrule(self) -> tuple[du.rrule, tzinfo, datetime, bool, bool]:
        """The parsed rule on the wall clock, its zone, DTSTART (wall), whether COUNT is set, and
        whether its day filters never meet (so it has no fire time at all)."""
        start = require_start(self.key, self.start_at)
        key = (self.rule, self.time_zone, start)
        if self._cache is not None and self._cache[0] == key:
            return self._cache[1]
        zone = self._zone()
        dtstart = start.astimezone(zone).replace(tzinfo=None)
        parsed = _parse(self.rule, dtstart, zone, self.key)
        has_count = getattr(parsed, "_count", None) is not None
        try:
            empty = not _days_ever_match(parsed, self.rule)
        except _LIBRARY_ERRORS as exc:
            raise InvalidTriggerError(
                f"trigger {self.key}: recurrence rule {self.rule!r} is not valid: {exc}"
            ) from None
        value = (parsed, zone, dtstart, has_count, empty)
        self._cache = (key, value)
        return value

    def _expansion_from(self, rule: du.rrule, dtstart: datetime, wall: datetime, counted: bool):  # type: ignore[no-untyped-def]
        """A rule equivalent to ``rule`` from ``wall`` on, anchored as late as its period allows.

        dateutil expands from DTSTART every time; for the fixed-length frequencies the phase
        repeats every INTERVAL periods, so the anchor can move forward by whole cycles.
        """
        freq = getattr(rule, "_freq", None)
        if counted or freq not in _FAST_FORWARD:
            return rule
        cycle = _FAST_FORWARD[freq] * int(getattr(rule, "_interval", 1))
        cycles = (wall - dtstart) // cycle - 1
        if cycles <= 0:
            return rule
        return rule.replace(dtstart=dtstart + cycle * cycles)

    # -- the schedule -------------------------------------------------------------------------

    def next_fire_time_after(self, after: datetime) -> datetime | None:
        rule, zone, dtstart, counted, empty = self._rrule()
        if empty:
            return None
        after = utc(after)
        start = require_start(self.key, self.start_at)
        if after < start:
            after = start - timedelta(microseconds=1)
        end = optional_utc(self.end_at)
        wall_after = after.astimezone(zone).replace(tzinfo=None)
        # A wall time in a spring-forward gap fires later than its wall order says; look back
        # far enough to see one only when a change of offset lies just behind ``after``.
        behind = (after - _MAX_SHIFT).astimezone(zone).utcoffset()
        search_from = (
            wall_after - _MAX_SHIFT if behind != after.astimezone(zone).utcoffset() else wall_after
        )
        best: datetime | None = None
        best_wall: datetime | None = None
        try:
            expansion = self._expansion_from(rule, dtstart, search_from, counted)
            for wall in expansion.xafter(max(search_from, dtstart), inc=True):
                if best_wall is not None and wall > best_wall + _MAX_SHIFT:
                    break
                instant = wall.replace(tzinfo=zone).astimezone(UTC)  # RFC 5545 §3.3.5
                if instant > after and (best is None or instant < best):
                    best, best_wall = instant, wall
                    if not is_in_gap(wall, zone):
                        break  # an existing wall time: nothing later in wall order fires sooner
        except OverflowError:
            pass  # the expansion ran past the last year a datetime holds: no later fire time
        except _LIBRARY_ERRORS as exc:
            raise InvalidTriggerError(
                f"trigger {self.key}: recurrence rule {self.rule!r} cannot be expanded: {exc}"
            ) from None
        if best is not None and end is not None and best > end:
            return None
        return best

    def final_fire_time(self) -> datetime | None:
        """The last fire time: the last occurrence by COUNT or UNTIL, or at or before ``end_at``;
        ``None`` when neither bounds the rule. A COUNT-bounded rule is walked from its start."""
        rule, zone, dtstart, counted, empty = self._rrule()
        if empty:
            return None
        end = optional_utc(self.end_at)
        if end is None and not counted and "UNTIL=" not in self.rule:
            return None
        limit = None if end is None else end.astimezone(zone).replace(tzinfo=None) + _MAX_SHIFT
        until = getattr(rule, "_until", None)
        if not counted and until is not None:
            # Walk only the stretch before UNTIL, as before end_at: a MINUTELY rule years long
            # has millions of occurrences.
            if until.tzinfo is not None:
                until = until.astimezone(zone).replace(tzinfo=None)
            until_limit = until + _MAX_SHIFT
            limit = until_limit if limit is None else min(limit, until_limit)
        expansion = rule
        if limit is not None:
            expansion = self._expansion_from(rule, dtstart, limit - 2 * _MAX_SHIFT, counted)
        best: datetime | None = None
        try:
            for wall in expansion:
                if limit is not None and wall > limit:
                    break
                instant = wall.replace(tzinfo=zone).astimezone(UTC)  # RFC 5545 §3.3.5
                if (end is None or instant <= end) and (best is None or instant > best):
                    best = instant
        except OverflowError:
            pass
        except _LIBRARY_ERRORS as exc:
            raise InvalidTriggerError(
                f"trigger {self.key}: recurrence rule {self.rule!r} cannot be expanded: {exc}"
            ) from None
        if best is None and limit is not None and expansion is not rule:
            # Nothing in the last stretch: the last occurrence lies further back.
            wall_before = rule.before(limit - 2 * _MAX_SHIFT, inc=True)
            if wall_before is not None:
                best = wall_before.replace(tzinfo=zone).astimezone(UTC)
        start = require_start(self.key, self.start_at)
        return best if best is not None and best >= start else None

    # -- persistence --------------------------------------------------------------------------

    def detail(self) -> dict[str, Any]:
        return {"rule": self.rule, "time_zone": self.time_zone}

    @classmethod
    def from_detail(cls, detail: dict[str, Any], **common: Any) -> RecurrenceTrigger:
        return cls(rule=detail["rule"], time_zone=detail.get("time_zone", "UTC"), **common)

    def validate(self) -> None:
        super().validate()
        if not self.rule:
            raise InvalidTriggerError(f"trigger {self.key}: a recurrence rule is required")
        if self.start_at is None:
            # The scheduler fills in the start when it stores the trigger; check the rule alone.
            _parse(self.rule, datetime(2000, 1, 1), self._zone(), self.key)
        else:
            self._rrule()


#: What dateutil may raise on a rule it cannot expand; turned into our own error.
_LIBRARY_ERRORS = (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError)

_FREQUENCIES = frozenset({"SECONDLY", "MINUTELY", "HOURLY", "DAILY", "WEEKLY", "MONTHLY", "YEARLY"})
_WEEKDAYS = frozenset({"MO", "TU", "WE", "TH", "FR", "SA", "SU"})
#: Each BYxxx part's allowed magnitude and whether it may be negative (RFC 5545 §3.3.10).
#: BYSECOND stops at 59: a leap second has no datetime.
_NUMBER_LISTS = {
    "BYSECOND": (0, 59, False),
    "BYMINUTE": (0, 59, False),
    "BYHOUR": (0, 23, False),
    "BYMONTHDAY": (1, 31, True),
    "BYYEARDAY": (1, 366, True),
    "BYWEEKNO": (1, 53, True),
    "BYMONTH": (1, 12, False),
    "BYSETPOS": (1, 366, True),
}
_BYDAY = re.compile(r"([+-]?)([0-9]{1,2})?(MO|TU|WE|TH|FR|SA|SU)")


def _check_parts(rule: str, key: object) -> None:
    """Refuse what RFC 5545 §3.3.10 does not allow, before dateutil sees it (dateutil accepts
    some of it and fails later, or quietly reads it as something else)."""
    where = f"trigger {key}: recurrence rule {rule!r}"
    parts: dict[str, str] = {}
    for part in rule.split(";"):
        name, eq, value = part.partition("=")
        if not eq or not value:
            raise InvalidTriggerError(f"{where}: {part!r} is not NAME=VALUE")
        if name in parts:
            raise InvalidTriggerError(f"{where}: {name} is given twice")
        parts[name] = value
    unknown = set(parts) - {"FREQ", "UNTIL", "COUNT", "INTERVAL", "BYDAY", "WKST", *_NUMBER_LISTS}
    if unknown:
        raise InvalidTriggerError(f"{where}: unknown part {sorted(unknown)[0]}")
    freq = parts.get("FREQ")
    if freq not in _FREQUENCIES:
        raise InvalidTriggerError(f"{where}: FREQ must be one of {sorted(_FREQUENCIES)}")
    for name in ("COUNT", "INTERVAL"):
        if name in parts and not _positive(parts[name]):
            raise InvalidTriggerError(f"{where}: {name} must be a whole number >= 1")
    if "COUNT" in parts and int(parts["COUNT"]) > MAX_COUNT:
        # A COUNT is counted from DTSTART: each fire time would walk up to COUNT occurrences.
        raise InvalidTriggerError(
            f"{where}: COUNT {parts['COUNT']} is more than {MAX_COUNT:,}; bound a longer rule "
            f"by UNTIL (or the trigger's end_at)"
        )
    until = parts.get("UNTIL")
    if until is not None and not _is_rfc_date_or_date_time(until):
        raise InvalidTriggerError(
            f"{where}: UNTIL {until!r} is not a date (19971224) or a date-time "
            f"(19971224T000000, or 19971224T000000Z in UTC)"
        )
    if "COUNT" in parts and "UNTIL" in parts:
        raise InvalidTriggerError(f"{where}: COUNT and UNTIL cannot both be given")
    if parts.get("WKST", "MO") not in _WEEKDAYS:
        raise InvalidTriggerError(f"{where}: WKST must be a weekday (MO ... SU)")
    for name, (lo, hi, signed) in _NUMBER_LISTS.items():
        for item in parts.get(name, "0").split(",") if name in parts else ():
            digits = item[1:] if signed and item[:1] in "+-" and len(item) > 1 else item
            if not (digits.isascii() and digits.isdigit() and lo <= int(digits) <= hi):
                sign = "±" if signed else ""
                raise InvalidTriggerError(
                    f"{where}: {name} value {item!r} is outside {sign}{lo}-{hi}"
                )
    ordinal_limit = {"MONTHLY": 5, "YEARLY": 53}.get(freq, 0)
    for item in parts.get("BYDAY", "").split(",") if "BYDAY" in parts else ():
        match = _BYDAY.fullmatch(item)
        if match is None or (match[1] and match[2] is None):
            raise InvalidTriggerError(f"{where}: BYDAY value {item!r} is not [±n]MO ... SU")
        if match[2] is not None:
            ordinal = int(match[2])
            if not 1 <= ordinal <= ordinal_limit:
                allowed = (
                    f"from 1 to {ordinal_limit} with FREQ={freq}"
                    if ordinal_limit
                    else "only with FREQ=MONTHLY or YEARLY"
                )
                raise InvalidTriggerError(
                    f"{where}: BYDAY value {item!r}: an ordinal is allowed {allowed}"
                )
    if "BYWEEKNO" in parts and freq != "YEARLY":
        raise InvalidTriggerError(f"{where}: BYWEEKNO is only allowed with FREQ=YEARLY")
    if "BYYEARDAY" in parts and freq in ("DAILY", "WEEKLY", "MONTHLY"):
        raise InvalidTriggerError(f"{where}: BYYEARDAY is not allowed with FREQ={freq}")
    if "BYMONTHDAY" in parts and freq == "WEEKLY":
        raise InvalidTriggerError(f"{where}: BYMONTHDAY is not allowed with FREQ=WEEKLY")
    _check_set_positions(parts, freq, where)


#: The most days one period of each frequency can hold, for the BYSETPOS check.
_PERIOD_DAYS = {"WEEKLY": 7, "MONTHLY": 31, "YEARLY": 366}
#: The time-of-day parts finer than each frequency.
_FINER = {
    "SECONDLY": (),
    "MINUTELY": ("BYSECOND",),
    "HOURLY": ("BYMINUTE", "BYSECOND"),
}


def _check_set_positions(parts: dict[str, str], freq: str, where: str) -> None:
    """BYSETPOS picks from each period's set; a position past the largest set never matches,
    and dateutil would search to year 9999 for it."""
    if "BYSETPOS" not in parts:
        return
    day_parts = {"BYDAY", "BYMONTHDAY", "BYYEARDAY", "BYWEEKNO"} & set(parts)
    if freq == "YEARLY" and not day_parts:
        size = len(parts["BYMONTH"].split(",")) if "BYMONTH" in parts else 1
    elif freq in _PERIOD_DAYS and day_parts == {"BYDAY"}:
        # An ordinal names one day a period; a bare weekday at most 5 a month, 53 a year.
        each = {"WEEKLY": 1, "MONTHLY": 5, "YEARLY": 53}[freq]
        size = sum(1 if item[-3:-2].isdigit() else each for item in parts["BYDAY"].split(","))
    elif freq in _PERIOD_DAYS and day_parts:
        size = _PERIOD_DAYS[freq]
    else:
        size = 1  # one day per period: DTSTART's, or the day itself
    for name in _FINER.get(freq, ("BYHOUR", "BYMINUTE", "BYSECOND")):
        if name in parts:
            size *= len(parts[name].split(","))
    for item in parts["BYSETPOS"].split(","):
        if abs(int(item)) > size:
            raise InvalidTriggerError(
                f"{where}: BYSETPOS {item} can never match: a FREQ={freq} period of this rule "
                f"holds at most {size} occurrence(s)"
            )


_DAY_FILTERS = ("BYMONTH", "BYMONTHDAY", "BYYEARDAY", "BYWEEKNO", "BYDAY")


def _days_ever_match(rule: du.rrule, text: str) -> bool:
    """Whether the rule's day filters together allow any day at all.

    dateutil checks UNTIL only on a day that passes the filters, so a rule whose filters never
    meet (BYMONTH=2 with BYMONTHDAY=30) would be searched to year 9999. Asked only when two or
    more day filters could contradict each other. Calendar years repeat every 28 years (within
    1901-2099), so the days of 2000-2027 hold every arrangement of weekdays and leap years. A
    day at a year's edge counts for either year's week numbering, so the answer errs towards
    "it matches".
    """
    names = {part.partition("=")[0] for part in text.split(";")}
    if len(names & set(_DAY_FILTERS)) < 2:
        return True
    months = set(getattr(rule, "_bymonth", None) or ())
    monthdays = set(getattr(rule, "_bymonthday", None) or ())
    monthdays_back = set(getattr(rule, "_bynmonthday", None) or ())
    yeardays = set(getattr(rule, "_byyearday", None) or ())
    weeknos = set(getattr(rule, "_byweekno", None) or ())
    weekdays = set(getattr(rule, "_byweekday", None) or ())
    weekdays |= {wd for wd, _ in getattr(rule, "_bynweekday", None) or ()}
    wkst = getattr(rule, "_wkst", 0) or 0
    day = date(2000, 1, 1)
    while day.year < 2028:
        year_length = 366 if calendar.isleap(day.year) else 365
        month_length = calendar.monthrange(day.year, day.month)[1]
        yearday = day.timetuple().tm_yday
        if (
            (not months or day.month in months)
            and (
                not (monthdays or monthdays_back)
                or day.day in monthdays
                or day.day - month_length - 1 in monthdays_back
            )
            and (not yeardays or yearday in yeardays or yearday - year_length - 1 in yeardays)
            and (not weekdays or day.weekday() in weekdays)
            and (not weeknos or _week_numbers(day, wkst) & weeknos)
        ):
            return True
        day += timedelta(days=1)
    return False


def _week_numbers(day: date, wkst: int) -> set[int]:
    """The week numbers (positive and negative) ``day`` may carry, RFC 5545's numbering."""

    def week_one(year: int) -> date:
        jan1 = date(year, 1, 1)
        offset = (jan1.weekday() - wkst) % 7
        return jan1 - timedelta(days=offset) if offset <= 3 else jan1 + timedelta(days=7 - offset)

    out: set[int] = set()
    for year in (day.year - 1, day.year, day.year + 1):
        first, following = week_one(year), week_one(year + 1)
        if first <= day < following:
            weeks = (following - first).days // 7
            n = (day - first).days // 7 + 1
            out |= {n, n - weeks - 1}
    # A day outside its year's numbered weeks: allow any week of the edges.
    return out or {1, 52, 53, -1}


def _as_daily(rule: du.rrule, text: str) -> du.rrule:
    """The same occurrences as a DAILY rule, when ``rule`` is SECONDLY, MINUTELY or HOURLY with
    INTERVAL=1, no BYSETPOS, and a day filter.

    dateutil walks a sub-daily rule period by period, so one restricted to rare days
    (``FREQ=SECONDLY;BYYEARDAY=366;BYHOUR=23``) took tens of seconds to answer. Every second,
    minute or hour the filters allow is also what DAILY with the same BYHOUR, BYMINUTE and
    BYSECOND (all values where the finer frequency left them open) expands, day by day.
    """
    freq = getattr(rule, "_freq", None)
    if (
        freq not in (du.SECONDLY, du.MINUTELY, du.HOURLY)
        or getattr(rule, "_interval", 1) != 1
        or getattr(rule, "_bysetpos", None)
        or not any(f"{name}=" in text for name in _DAY_FILTERS)
    ):
        return rule
    every_hour, every_minute = tuple(range(24)), tuple(range(60))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return rule.replace(
            freq=du.DAILY,
            byhour=getattr(rule, "_byhour", None) or every_hour,
            byminute=getattr(rule, "_byminute", None) or every_minute,
            bysecond=getattr(rule, "_bysecond", None) or every_minute,
        )


def _is_rfc_date_or_date_time(text: str) -> bool:
    """RFC 5545 DATE or DATE-TIME: dateutil's own parser would read much more, guessing."""
    if not _UNTIL_FORM.fullmatch(text):
        return False
    try:
        datetime.strptime(text[:15], "%Y%m%dT%H%M%S" if len(text) > 8 else "%Y%m%d")
    except ValueError:
        return False
    return True


_UNTIL_FORM = re.compile(r"[0-9]{8}(?:T[0-9]{6}Z?)?")


def _positive(text: str) -> bool:
    return text.isascii() and text.isdigit() and int(text) >= 1


def _parse(rule: str, dtstart: datetime, zone: tzinfo, key: object) -> du.rrule:
    _check_parts(rule, key)
    text = _until_to_wall(rule, zone, key)
    try:
        parsed = du.rrulestr(text, dtstart=dtstart, forceset=False)
    except _LIBRARY_ERRORS as exc:
        raise InvalidTriggerError(
            f"trigger {key}: recurrence rule {rule!r} is not valid: {exc}"
        ) from None
    if not isinstance(parsed, du.rrule):
        raise InvalidTriggerError(f"trigger {key}: recurrence rule {rule!r} must be one RRULE")
    parsed = _as_daily(parsed, rule)
    until = getattr(parsed, "_until", None)
    if until is None or until > _SEARCH_END:
        # No fire time is searched past 2299 (as for the other kinds); the bound also keeps a
        # rule whose parts never meet (BYMONTH=2;BYMONTHDAY=30) from running to year 9999.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # COUNT beside UNTIL
            parsed = parsed.replace(until=_SEARCH_END)
    return parsed


def _canonical(rule: str) -> str:
    if not isinstance(rule, str):
        raise InvalidTriggerError(f"recurrence rule must be a string, got {rule!r}")
    text = rule.strip()
    if text.upper().startswith("RRULE:"):
        text = text[6:]
    parts = (part.strip().upper() for part in text.split(";"))
    # RFC 5545 §3.3.10: x-name parts are extensions an application ignores.
    return ";".join(part for part in parts if part and not part.startswith("X-"))


def _until_to_wall(rule: str, zone: tzinfo, key: object) -> str:
    """UNTIL in UTC (``...Z``) rewritten as the zone's wall time, which dateutil compares."""
    parts = rule.split(";")
    for i, part in enumerate(parts):
        name, _, value = part.partition("=")
        if name == "UNTIL" and value.endswith("Z"):
            try:
                instant = datetime.strptime(value, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
            except ValueError:
                raise InvalidTriggerError(
                    f"trigger {key}: UNTIL {value!r} is not a UTC date-time such as "
                    f"19971224T000000Z"
                ) from None
            try:
                wall = instant.astimezone(zone).replace(tzinfo=None)
            except OverflowError:  # past year 9999 on the zone's clock: no bound at all
                wall = datetime.max.replace(microsecond=0)
            parts[i] = f"UNTIL={wall:%Y%m%dT%H%M%S}"
    return ";".join(parts)
