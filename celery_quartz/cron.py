"""Quartz cron expressions: the 4.x dialect and its daylight-saving rules.

A Quartz expression has six or seven fields, seconds first::

    second minute hour day-of-month month day-of-week [year]

Exactly one of day-of-month and day-of-week is ``?``. Day-of-week counts 1-7 from Sunday.
Beside ``*``, ranges, lists and steps, the day fields take ``L``, ``L-n``, ``W``, ``nW``, ``LW``
(day-of-month) and ``L``, ``nL``, ``n#k`` (day-of-week). ``CronFormat.UNIX`` reads the five-field
crontab form instead and stores its Quartz spelling.

The schedule is computed on the wall clock of the expression's time zone, then each matching wall
time is turned into an instant by Quartz 4.x's rules (see
:meth:`CronExpression.next_valid_time_after`).
"""

from __future__ import annotations

import bisect
import enum
import hashlib
import logging
import re
from collections.abc import Callable
from datetime import datetime, timedelta, timezone, tzinfo

from celery_quartz.errors import CronSyntaxError
from celery_quartz.tz import (
    LOCAL_TIME_ZONE,
    WINDOWS_TIME_ZONES,
    gap_end,
    offset_change,
    resolve_time_zone,
    time_zone_name,
)

logger = logging.getLogger(__name__)

__all__ = [
    "LOCAL_TIME_ZONE",
    "MAX_YEAR",
    "WINDOWS_TIME_ZONES",
    "CronExpression",
    "CronFormat",
    "hash_value",
    "resolve_time_zone",
    "time_zone_name",
]

#: The last year a schedule is searched in; beyond it an expression has no more fire times.
MAX_YEAR = 2299
#: Years the year field may name (Quartz's range).
_YEAR_MIN, _YEAR_MAX = 1970, 2199

_UTC = timezone.utc
_ONE_SECOND = timedelta(seconds=1)
_ONE_MICROSECOND = timedelta(microseconds=1)


class CronFormat(enum.Enum):
    """How the text of an expression is laid out."""

    #: Quartz: ``second minute hour day-of-month month day-of-week [year]``, day-of-week 1-7.
    QUARTZ = "quartz"
    #: crontab: ``minute hour day-of-month month day-of-week``, day-of-week 0-7 (0 and 7 Sunday).
    UNIX = "unix"


# -- parsing -----------------------------------------------------------------------------------

_MONTH_NAMES = {
    name: i + 1
    for i, name in enumerate(
        ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
    )
}
_DAY_NAMES = {
    name: i + 1 for i, name in enumerate(["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"])
}

_MACROS = {
    "@YEARLY": "0 0 0 1 1 ?",
    "@ANNUALLY": "0 0 0 1 1 ?",
    "@MONTHLY": "0 0 0 1 * ?",
    "@WEEKLY": "0 0 0 ? * 1",
    "@DAILY": "0 0 0 * * ?",
    "@MIDNIGHT": "0 0 0 * * ?",
    "@HOURLY": "0 0 * * * ?",
}


class _Field:
    """One field's name, bounds and value names."""

    __slots__ = ("hi", "lo", "name", "names")

    def __init__(self, name: str, lo: int, hi: int, names: dict[str, int] | None = None) -> None:
        self.name = name
        self.lo = lo
        self.hi = hi
        self.names = names or {}


_SECOND = _Field("second", 0, 59)
_MINUTE = _Field("minute", 0, 59)
_HOUR = _Field("hour", 0, 23)
_DOM = _Field("day-of-month", 1, 31)
_MONTH = _Field("month", 1, 12, _MONTH_NAMES)
_DOW = _Field("day-of-week", 1, 7, _DAY_NAMES)
_YEAR = _Field("year", _YEAR_MIN, _YEAR_MAX)


def _error(expression: str, field: _Field | str, token: str, why: str) -> CronSyntaxError:
    name = field if isinstance(field, str) else field.name
    return CronSyntaxError(f"cron expression {expression!r}: {name} field, token {token!r}: {why}")


def _number(expression: str, field: _Field, token: str, text: str) -> int:
    if text in field.names:
        return field.names[text]
    if not text.isdigit() or not text.isascii():
        if field.names:
            allowed = f"a number {field.lo}-{field.hi} or a name ({', '.join(field.names)})"
        else:
            allowed = f"a number {field.lo}-{field.hi}"
        raise _error(expression, field, token, f"{text!r} is not {allowed}")
    value = int(text)
    if not field.lo <= value <= field.hi:
        raise _error(expression, field, token, f"{value} is outside {field.lo}-{field.hi}")
    return value


def _step(expression: str, field: _Field, token: str, text: str) -> int:
    if not text.isdigit() or not text.isascii():
        raise _error(expression, field, token, f"step {text!r} is not a whole number")
    step = int(text)
    if step < 1:
        raise _error(expression, field, token, "a step must be at least 1")
    limit = field.hi if field is not _YEAR else _YEAR_MAX - _YEAR_MIN
    if step > limit:
        raise _error(expression, field, token, f"step {step} is larger than {limit}")
    return step


def _parse_item(expression: str, field: _Field, token: str, item: str) -> set[int]:
    """One comma-separated item of an ordinary field: ``*``, ``a``, ``a-b``, with ``/step``."""
    if item == "":
        raise _error(expression, field, token, "empty list item")
    base, slash, step_text = item.partition("/")
    step = _step(expression, field, token, step_text) if slash else 1
    if base == "*":
        start, end = field.lo, field.hi
    elif "-" in base:
        first, _, last = base.partition("-")
        start = _number(expression, field, token, first)
        end = _number(expression, field, token, last)
    else:
        start = _number(expression, field, token, base)
        end = field.hi if slash else start
    if slash and field is _DOW and base[:1].isalpha():
        logger.warning(
            "cron expression %r: day-of-week %r is a step through the week (Quartz 4.1), "
            "not every %s weeks as Quartz 3.x read it; for a fortnight use a recurrence trigger "
            "(FREQ=WEEKLY;INTERVAL=2)",
            expression,
            item,
            step,
        )
    if start <= end:
        sequence = list(range(start, end + 1))
    else:  # a range that wraps past the field's end, such as FRI-MON or 22-2
        sequence = list(range(start, field.hi + 1)) + list(range(field.lo, end + 1))
    return set(sequence[::step])


def _parse_plain(expression: str, field: _Field, token: str) -> set[int]:
    values: set[int] = set()
    for item in token.split(","):
        values |= _parse_item(expression, field, token, item)
    return values


def _reject_common(expression: str, field: _Field, token: str) -> None:
    bare = token
    for name in (*_MONTH_NAMES, *_DAY_NAMES):
        bare = bare.replace(name, "")
    if "C" in bare:
        raise _error(
            expression, field, token, "'C' is not supported; exclude days with a calendar instead"
        )
    if field not in (_DOM, _DOW) and ("L" in bare or "#" in bare):
        raise _error(expression, field, token, "'L' and '#' belong to the day fields")
    if "H" in bare and field not in _HASHED_FIELDS:
        raise _error(expression, field, token, "'H' belongs to the second, minute and hour fields")
    if field is not _DOM and "W" in bare:
        raise _error(expression, field, token, "'W' belongs to the day-of-month field")
    if "?" in token and (token != "?" or field not in (_DOM, _DOW)):
        raise _error(
            expression, field, token, "'?' stands alone, in day-of-month or day-of-week only"
        )


_HASHED_FIELDS = (_SECOND, _MINUTE, _HOUR)
#: ``H``, ``H(a-b)``, ``H/n`` and ``H(a-b)/n``.
_HASH_FORM = re.compile(r"H(?:\(([0-9]+)-([0-9]+)\))?(?:/([0-9]+))?")


def hash_value(hash_key: str, field_name: str) -> int:
    """The stable number an ``H`` token of ``field_name`` draws from for ``hash_key``.

    The first eight bytes, big-endian, of SHA-256 over the UTF-8 text ``hash_key``, a NUL and
    the field's name (``second``, ``minute`` or ``hour``). Every process and every node computes
    the same number; Python's own ``hash()`` is salted per process and would not.
    """
    text = f"{hash_key}\x00{field_name}".encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "big")


def _parse_hashed(expression: str, field: _Field, token: str, hash_key: str | None) -> set[int]:
    """A second, minute or hour field, whose items may be ``H`` tokens (see :func:`hash_value`)."""
    if "H" not in token:
        return _parse_plain(expression, field, token)
    values: set[int] = set()
    for item in token.split(","):
        if not item.startswith("H"):
            values |= _parse_item(expression, field, token, item)
            continue
        match = _HASH_FORM.fullmatch(item)
        if match is None:
            raise _error(
                expression, field, token, f"{item!r} is not one of H, H(a-b), H/n, H(a-b)/n"
            )
        if hash_key is None:
            raise _error(
                expression,
                field,
                token,
                "'H' takes its value from the trigger's identity; give the expression a "
                "hash_key (a CronTrigger passes its key)",
            )
        lo, hi = field.lo, field.hi
        if match[1] is not None:
            lo = _number(expression, field, token, match[1])
            hi = _number(expression, field, token, match[2])
            if lo > hi:
                raise _error(expression, field, token, f"range {lo}-{hi} in H() runs backwards")
        h = hash_value(hash_key, field.name)
        if match[3] is None:
            values.add(lo + h % (hi - lo + 1))
        else:
            step = _step(expression, field, token, match[3])
            values.update(range(lo + h % min(step, hi - lo + 1), hi + 1, step))
    return values


#: Kinds of day-of-month rule beside plain values (see :meth:`_DaySpec.days`).
_LAST = 0  # L-n: the n-th day before the last (n = 0: the last day)
_LAST_WEEKDAY = 1  # L-nW-m: the weekday nearest L-n, then m days earlier (not before the 1st)
_NEAREST_WEEKDAY = 2  # nW: the weekday nearest day n (clamped to the month), within the month


class _DaySpec:
    """What the two day fields allow, reduced to one rule per month."""

    __slots__ = (
        "dom_rules",
        "dom_values",
        "dow_last",
        "dow_nth",
        "dow_values",
        "on_dom",
    )

    def __init__(self) -> None:
        self.on_dom = True
        self.dom_values: frozenset[int] = frozenset()
        #: ``(kind, a, b)`` rules: ``(_LAST, n, 0)``, ``(_LAST_WEEKDAY, n, m)``,
        #: ``(_NEAREST_WEEKDAY, day, 0)``.
        self.dom_rules: tuple[tuple[int, int, int], ...] = ()
        self.dow_values: frozenset[int] = frozenset()
        self.dow_nth: tuple[int, int] | None = None
        self.dow_last: int | None = None

    def days(self, year: int, month: int) -> list[int]:
        """The days of ``month`` this rule allows, ascending."""
        last = _days_in_month(year, month)
        # Quartz numbering of the 1st: 1 = Sunday ... 7 = Saturday.
        first_dow = datetime(year, month, 1).isoweekday() % 7 + 1

        def dow(day: int) -> int:
            return (first_dow - 1 + day - 1) % 7 + 1

        if self.on_dom:
            days = {d for d in self.dom_values if d <= last}
            for kind, a, b in self.dom_rules:
                if kind == _NEAREST_WEEKDAY:
                    # Quartz.NET clamps a day past the month's end to its last day first.
                    days.add(_nearest_weekday(min(a, last), last, dow))
                elif last - a >= 1:
                    if kind == _LAST:
                        days.add(last - a)
                    else:
                        days.add(max(_nearest_weekday(last - a, last, dow) - b, 1))
            return sorted(days)
        if self.dow_nth is not None:
            wanted, nth = self.dow_nth
            first = 1 + (wanted - first_dow) % 7
            day = first + 7 * (nth - 1)
            return [day] if day <= last else []
        if self.dow_last is not None:
            last_dow = dow(last)
            return [last - (last_dow - self.dow_last) % 7]
        return [d for d in range(1, last + 1) if dow(d) in self.dow_values]


def _nearest_weekday(day: int, last: int, dow: Callable[[int], int]) -> int:
    """Quartz's ``W``: the weekday nearest ``day`` without leaving the month."""
    weekday = dow(day)
    if weekday == 7:  # Saturday: the Friday before, unless that is in the previous month
        return day + 2 if day == 1 else day - 1
    if weekday == 1:  # Sunday: the Monday after, unless that is in the next month
        return day - 2 if day == last else day + 1
    return day


def _days_in_month(year: int, month: int) -> int:
    if month == 2:
        leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
        return 29 if leap else 28
    return 30 if month in (4, 6, 9, 11) else 31


#: ``L``, ``L-n``, ``LW``, ``L-nW``, ``LW-m`` and ``L-nW-m`` (n and m up to 30).
_LAST_FORM = re.compile(r"L(?:-([0-9]{1,2}))?(?:(W)(?:-([0-9]{1,2}))?)?")


def _parse_dom(expression: str, token: str, spec: _DaySpec) -> None:
    field = _DOM
    _reject_common(expression, field, token)
    values: set[int] = set()
    rules: set[tuple[int, int, int]] = set()
    for item in token.split(","):
        if item.startswith("L"):
            match = _LAST_FORM.fullmatch(item)
            if match is None:
                raise _error(
                    expression,
                    field,
                    token,
                    f"{item!r} is not one of L, L-n, LW, L-nW, LW-n (n from 0 to 30)",
                )
            offset = int(match[1] or 0)
            before = int(match[3] or 0)
            if offset > 30 or before > 30:
                raise _error(expression, field, token, "L-n and LW-n take n from 0 to 30")
            if match[2]:
                rules.add((_LAST_WEEKDAY, offset, before))
            else:
                rules.add((_LAST, offset, 0))
        elif item.endswith("W"):
            day_text = item[:-1]
            if "-" in day_text or "/" in day_text or day_text == "*":
                raise _error(
                    expression,
                    field,
                    token,
                    f"'W' takes one day, not {day_text!r}: write a list such as 1W,2W,3W "
                    f"or drop the W",
                )
            rules.add((_NEAREST_WEEKDAY, _number(expression, field, token, day_text), 0))
        elif "L" in item or "W" in item:
            raise _error(expression, field, token, f"{item!r}: 'L' and 'W' are misplaced")
        else:
            values |= _parse_item(expression, field, token, item)
    spec.dom_values = frozenset(values)
    spec.dom_rules = tuple(sorted(rules))


def _parse_dow(expression: str, token: str, spec: _DaySpec) -> None:
    field = _DOW
    if token.startswith("L-") or token == "LW":
        raise _error(
            expression, field, token, "'L-n' and 'LW' belong to day-of-month; 'L' alone is Saturday"
        )
    _reject_common(expression, field, token)
    if token == "L":
        spec.dow_values = frozenset({7})
        return
    if "#" in token:
        if "," in token:
            raise _error(expression, field, token, "'#' cannot appear beside other days")
        day_text, _, nth_text = token.partition("#")
        day = _number(expression, field, token, day_text)
        if not nth_text.isdigit() or not nth_text.isascii() or not 1 <= int(nth_text) <= 5:
            raise _error(expression, field, token, "the number after '#' must be 1 to 5")
        spec.dow_nth = (day, int(nth_text))
        return
    if token.endswith("L"):
        if "," in token or "-" in token or "/" in token:
            raise _error(expression, field, token, "'nL' cannot appear beside other days")
        spec.dow_last = _number(expression, field, token, token[:-1])
        return
    if "L" in token:
        raise _error(expression, field, token, "'L' is either alone or after one day, as in 6L")
    spec.dow_values = frozenset(_parse_plain(expression, field, token))


def _next_table(values: set[int] | frozenset[int], size: int) -> list[int]:
    """``table[v]`` is the least allowed value >= v, or -1; ``table[size]`` is -1."""
    table = [-1] * (size + 1)
    upcoming = -1
    for v in range(size - 1, -1, -1):
        if v in values:
            upcoming = v
        table[v] = upcoming
    return table


def _is_interval_token(token: str) -> bool:
    # H and H(a-b) name one value (a fixed time); H/n is a step.
    return any(ch in _HASH_RANGE.sub("H", token) for ch in "*/-")


_HASH_RANGE = re.compile(r"H\([^)]*\)")


def _unix_to_quartz(expression: str, fields: list[str]) -> list[str]:
    """Renumber a five-field crontab line as the six Quartz fields."""
    minute, hour, dom, month, dow = fields
    dom_free = dom in ("*", "?")
    dow_free = dow in ("*", "?")
    if not dom_free and not dow_free:
        raise _error(
            expression,
            "day-of-month/day-of-week",
            f"{dom} {dow}",
            "crontab fires when either day field matches; Quartz names days in one of them. "
            "Use one day field, or two triggers",
        )
    if dow_free:
        return ["0", minute, hour, "*" if dom == "?" else dom, month, "?"]
    return ["0", minute, hour, "?", month, _unix_dow_to_quartz(expression, dow)]


_UNIX_DOW = _Field("day-of-week", 0, 7, _DAY_NAMES)


def _unix_day(expression: str, token: str, text: str) -> int:
    """A crontab day (0-7 or a name) as Quartz's 1-7."""
    if text in _DAY_NAMES:
        return _DAY_NAMES[text]
    return _number(expression, _UNIX_DOW, token, text) % 7 + 1


def _unix_dow_to_quartz(expression: str, token: str) -> str:
    if "#" in token:
        day_text, _, nth = token.partition("#")
        return f"{_unix_day(expression, token, day_text)}#{nth}"
    if token.endswith("L") and len(token) > 1 and "," not in token:
        return f"{_unix_day(expression, token, token[:-1])}L"
    if not any(ch.isdigit() for ch in token):
        return token  # names mean the same day in both dialects
    days: set[int] = set()
    for item in token.split(","):
        base, slash, step_text = item.partition("/")
        step = _step(expression, _DOW, token, step_text) if slash else 1
        if base in ("*", "?"):
            start, end = 0, 6
        elif "-" in base:
            first, _, last = base.partition("-")
            start = _unix_raw_day(expression, token, first)
            end = _unix_raw_day(expression, token, last)
        else:
            start = _unix_raw_day(expression, token, base)
            end = max(6, start) if slash else start
        if start > end:
            raise _error(expression, _DOW, token, f"range {base!r} runs backwards")
        days |= {d % 7 + 1 for d in range(start, end + 1, step)}
    return _compress(sorted(days))


def _unix_raw_day(expression: str, token: str, text: str) -> int:
    if text in _DAY_NAMES:
        return _DAY_NAMES[text] - 1
    return _number(expression, _UNIX_DOW, token, text)


def _compress(values: list[int]) -> str:
    parts: list[str] = []
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        if j - i >= 2:
            parts.append(f"{values[i]}-{values[j]}")
        else:
            parts.extend(str(v) for v in values[i : j + 1])
        i = j + 1
    return ",".join(parts)


# -- the expression ----------------------------------------------------------------------------


class CronExpression:
    """A parsed Quartz cron expression in a time zone.

    ``CronExpression("0 30 2 * * ?", time_zone="Europe/Berlin")`` fires at 02:30 Berlin time every
    day. ``hash_key`` is the identity ``H`` tokens draw their value from (a
    :class:`~celery_quartz.triggers.CronTrigger` passes its key); an expression with ``H`` and no
    ``hash_key`` is refused. Raises :class:`~celery_quartz.errors.CronSyntaxError` naming the
    field and the token when the text is not a valid expression, and
    :class:`~celery_quartz.errors.UnknownTimeZoneError` (a :class:`ValueError`) for an unknown
    time zone.
    """

    __slots__ = (
        "_day_cache",
        "_days",
        "_fixed_offset",
        "_hours",
        "_interval",
        "_minutes",
        "_months",
        "_seconds",
        "_years",
        "_zone",
        "expression",
        "hash_key",
        "time_zone",
    )

    def __init__(
        self,
        expression: str,
        *,
        time_zone: str | tzinfo = "UTC",
        format: CronFormat = CronFormat.QUARTZ,
        hash_key: str | None = None,
    ) -> None:
        if not isinstance(expression, str):
            raise CronSyntaxError(f"cron expression must be a string, got {expression!r}")
        if hash_key is not None and not isinstance(hash_key, str):
            raise CronSyntaxError(f"cron expression {expression!r}: hash_key must be a string")
        self._zone = resolve_time_zone(time_zone)
        #: The zone's name, as given (IANA, Windows id, "UTC" or "local").
        self.time_zone = time_zone if isinstance(time_zone, str) else time_zone_name(time_zone)
        offset = self._zone.utcoffset(None) if isinstance(self._zone, timezone) else None
        self._fixed_offset: timedelta | None = offset
        fields = expression.upper().split()
        if len(fields) == 1 and fields[0].startswith("@"):
            fields = self._macro(expression, fields[0])
        elif format is CronFormat.UNIX:
            if len(fields) != 5:
                raise CronSyntaxError(
                    f"cron expression {expression!r}: a crontab line has 5 fields "
                    f"(minute hour day-of-month month day-of-week), got {len(fields)}"
                )
            fields = _unix_to_quartz(expression, fields)
        elif len(fields) not in (6, 7):
            hint = (
                " (a five-field crontab line needs format=CronFormat.UNIX)"
                if len(fields) == 5
                else ""
            )
            raise CronSyntaxError(
                f"cron expression {expression!r}: expected 6 or 7 fields (second minute hour "
                f"day-of-month month day-of-week [year]), got {len(fields)}{hint}"
            )
        #: The canonical Quartz spelling: upper case, single spaces, six or seven fields.
        self.expression = " ".join(fields)
        #: The identity ``H`` tokens hash (see :func:`hash_value`); None when there are none.
        self.hash_key = hash_key if any("H" in f for f in fields[:3]) else None
        self._parse(expression, fields, hash_key)
        self._day_cache: dict[tuple[int, int], list[int]] = {}

    @staticmethod
    def _macro(expression: str, name: str) -> list[str]:
        if name == "@REBOOT":
            raise CronSyntaxError(
                f"cron expression {expression!r}: @reboot has no meaning for a scheduler"
            )
        if name not in _MACROS:
            raise CronSyntaxError(
                f"cron expression {expression!r}: unknown macro {name.lower()!r}; "
                f"one of {', '.join(m.lower() for m in _MACROS)}"
            )
        return _MACROS[name].split()

    def _parse(self, text: str, fields: list[str], hash_key: str | None) -> None:
        second, minute, hour, dom, month, dow = fields[:6]
        for field, token in ((_SECOND, second), (_MINUTE, minute), (_HOUR, hour), (_MONTH, month)):
            _reject_common(text, field, token)
        self._seconds = _next_table(_parse_hashed(text, _SECOND, second, hash_key), 60)
        self._minutes = _next_table(_parse_hashed(text, _MINUTE, minute, hash_key), 60)
        self._hours = _next_table(_parse_hashed(text, _HOUR, hour, hash_key), 24)
        self._months = _next_table(_parse_plain(text, _MONTH, month), 13)
        if len(fields) == 7:
            _reject_common(text, _YEAR, fields[6])
            years = _parse_plain(text, _YEAR, fields[6])
            self._years: list[int] | None = sorted(years)
        else:
            self._years = None
        for field, token in ((_DOM, dom), (_DOW, dow)):
            if "?" in token and token != "?":
                _reject_common(text, field, token)
        if (dom == "?") == (dow == "?"):
            raise _error(
                text,
                "day-of-month/day-of-week",
                f"{dom} {dow}",
                "exactly one of the two day fields must be '?'",
            )
        spec = _DaySpec()
        if dow == "?":
            _parse_dom(text, dom, spec)
        else:
            spec.on_dom = False
            _parse_dow(text, dow, spec)
        self._days = spec
        #: An interval expression fires through both passes of a repeated (fall-back) hour.
        self._interval = any(_is_interval_token(t) for t in (second, minute, hour))

    # -- public questions ---------------------------------------------------------------------

    @property
    def is_interval(self) -> bool:
        """Whether the second, minute or hour field holds a wildcard, step or range (4.x rule).

        ``H`` and ``H(a-b)`` name one value, so they are a fixed time; ``H/n`` is a step."""
        return self._interval

    @property
    def zone(self) -> tzinfo:
        return self._zone

    def __repr__(self) -> str:
        key = "" if self.hash_key is None else f", hash_key={self.hash_key!r}"
        return f"CronExpression({self.expression!r}, time_zone={self.time_zone!r}{key})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CronExpression):
            return NotImplemented
        return (self.expression, self.time_zone, self.hash_key) == (
            other.expression,
            other.time_zone,
            other.hash_key,
        )

    def __hash__(self) -> int:
        return hash((self.expression, self.time_zone, self.hash_key))

    def is_satisfied_by(self, t: datetime) -> bool:
        """Whether ``t`` (microseconds ignored) is an instant this expression fires at.

        Agrees with :meth:`next_valid_time_after` by construction: an instant is satisfied when
        the search from just before it lands on it.
        """
        _require_aware(t)
        t = t.replace(microsecond=0).astimezone(_UTC)
        if not 1 < t.year < MAX_YEAR:
            return False
        return self.next_valid_time_after(t - _ONE_MICROSECOND) == t

    def next_valid_time_after(self, after: datetime) -> datetime | None:
        """The first instant strictly after ``after`` that this expression fires at, in UTC.

        ``None`` when the expression names no later time (a past year, or beyond year 2299).
        The wall clock of the expression's zone is matched field by field, and each matching
        wall time becomes an instant by Quartz 4.x's rules:

        * a time inside a spring-forward gap fires once, at the end of the gap;
        * a time the fall-back repeats fires at its first pass only, unless the expression is
          an interval expression (see :attr:`is_interval`), which fires at both passes.
        """
        _require_aware(after)
        if after.year >= MAX_YEAR or after.year <= 1:
            # Outside the searched years (and away from datetime's own limits).
            if after.year >= MAX_YEAR:
                return None
            after = datetime(2, 1, 1, tzinfo=_UTC)
        if self._fixed_offset is not None:
            local = (after.astimezone(_UTC) + self._fixed_offset).replace(tzinfo=None)
            wall = self._next_wall(local.replace(microsecond=0) + _ONE_SECOND)
            if wall is None:
                return None
            return (wall - self._fixed_offset).replace(tzinfo=_UTC)
        return self._next_zoned(after)

    def time_before(self, before: datetime) -> datetime | None:
        """The last instant strictly before ``before`` that this expression fires at, in UTC.

        ``None`` when it fires at no earlier time (after year 1). The answer agrees with
        :meth:`next_valid_time_after`: the next valid time after the answer is the first one at
        or after ``before``. Found by widening a window back from ``before`` until it holds a fire
        time, then bisecting it, so it costs a few dozen forward searches.
        """
        _require_aware(before)
        end = before.astimezone(_UTC)
        if end.microsecond:
            end = end.replace(microsecond=0) + _ONE_SECOND
        if end.year >= MAX_YEAR:
            end = datetime(MAX_YEAR, 1, 1, tzinfo=_UTC)
        floor = datetime(2, 1, 1, tzinfo=_UTC)

        def fires_from(t: datetime) -> bool:
            # Whether a fire time lies in [t, end).
            found = self.next_valid_time_after(t - _ONE_MICROSECOND)
            return found is not None and found < end

        window = _ONE_SECOND
        while True:
            low = end - window if end - floor > window else floor
            if fires_from(low):
                break
            if low == floor:
                return None
            window *= 2
        # Invariant: a fire time lies in [low, end), none in [high, end).
        high = end
        while high - low > _ONE_SECOND:
            mid = low + (high - low) // 2
            mid = mid.replace(microsecond=0)
            if fires_from(mid):
                low = mid
            else:
                high = mid
        return self.next_valid_time_after(low - _ONE_MICROSECOND)

    def final_fire_time(self) -> datetime | None:
        """The last instant this expression fires at when its year field bounds it, else None."""
        if self._years is None:
            return None
        # Any zone's wall clock is still in the last year two days into the next one in UTC.
        return self.time_before(datetime(self._years[-1] + 1, 1, 2, tzinfo=_UTC))

    def next_invalid_time_after(self, after: datetime) -> datetime | None:
        """The first whole second at or after ``after``'s (microseconds dropped, as in
        Quartz.NET) that this expression does not fire at, in UTC.

        Walks the run of matching seconds, skipping a whole matching minute, hour or day at once
        when the finer fields match everything, so a long run is not a long walk. ``None`` only
        when the run is too long to walk (over a million steps).
        """
        _require_aware(after)
        candidate = after.astimezone(_UTC).replace(microsecond=0)
        if not self.is_satisfied_by(candidate):
            return candidate
        for _ in range(1_000_000):
            following = self.next_valid_time_after(candidate)
            if following != candidate + _ONE_SECOND:
                return candidate + _ONE_SECOND
            candidate = self._last_of_matching_unit(following)
            if not self.is_satisfied_by(candidate):
                return candidate
        return None

    def _last_of_matching_unit(self, t: datetime) -> datetime:
        """The last second of the wall-clock minute, hour or day around ``t`` when the finer
        fields match all of it and that second still fires; else ``t``."""
        full_seconds = all(self._seconds[s] == s for s in range(60))
        if not full_seconds:
            return t
        local = t.astimezone(self._zone)
        full_minutes = all(self._minutes[m] == m for m in range(60))
        full_hours = all(self._hours[h] == h for h in range(24))
        # Stay on the same wall-clock unit; move to its last second, which still matches.
        if full_minutes and full_hours:
            end = local.replace(hour=23, minute=59, second=59, tzinfo=None)
        elif full_minutes:
            end = local.replace(minute=59, second=59, tzinfo=None)
        else:
            end = local.replace(second=59, tzinfo=None)
        last = end.replace(tzinfo=self._zone).astimezone(_UTC)
        return last if last > t and self.is_satisfied_by(last) else t

    # -- the search --------------------------------------------------------------------------

    def _next_zoned(self, after: datetime) -> datetime | None:
        zone = self._zone
        local = after.astimezone(zone)
        wall0 = local.replace(tzinfo=None, fold=0, microsecond=0)
        offset0 = local.replace(fold=0).utcoffset()
        offset1 = local.replace(fold=1).utcoffset()
        assert offset0 is not None and offset1 is not None
        start = wall0 + _ONE_SECOND
        if offset0 > offset1:
            # ``after`` is inside a repeated (fall-back) stretch of wall time.
            window_start, window_end = self._fold_window(wall0, offset0, offset1)
            if local.fold == 1:
                # Second pass: an interval expression goes on through it; a fixed time
                # already fired at the first pass, so its search resumes after the stretch.
                if self._interval:
                    wall = self._next_wall(start)
                    if wall is not None and wall < window_end:
                        return _instant(wall, zone, fold=1)
                start = max(start, window_end)
            elif self._interval:
                wall = self._next_wall(start)
                if wall is not None and wall < window_end:
                    return _instant(wall, zone, fold=0)
                # The first pass is exhausted: the second pass comes before anything later.
                again = self._next_wall(window_start)
                if again is not None and again < window_end:
                    return _instant(again, zone, fold=1)
                start = max(start, window_end)
        wall = self._next_wall(start)
        if wall is None:
            return None
        return self._resolve(wall)

    def _resolve(self, wall: datetime) -> datetime:
        """The instant a matching wall time fires at (gap end, or first pass)."""
        zone = self._zone
        first = wall.replace(tzinfo=zone)
        offset0 = first.utcoffset()
        offset1 = wall.replace(tzinfo=zone, fold=1).utcoffset()
        assert offset0 is not None and offset1 is not None
        if offset0 < offset1:
            # The wall time falls in a spring-forward gap: fire when the clocks moved.
            return gap_end(wall, zone)
        return (wall - offset0).replace(tzinfo=_UTC)

    def _fold_window(
        self, wall: datetime, offset0: timedelta, offset1: timedelta
    ) -> tuple[datetime, datetime]:
        """The stretch of wall time ``[start, end)`` that the fall-back around ``wall`` repeats."""
        moment = offset_change(wall - offset0, wall - offset1, offset0, self._zone)
        naive = moment.replace(tzinfo=None)
        return naive + offset1, naive + offset0

    def _next_wall(self, w: datetime) -> datetime | None:
        """The first wall time at or after ``w`` (a whole second) matching every field."""
        year, month, day = w.year, w.month, w.day
        hour, minute, second = w.hour, w.minute, w.second
        seconds, minutes, hours, months = self._seconds, self._minutes, self._hours, self._months
        years = self._years
        while True:
            if year > MAX_YEAR:
                return None
            if years is not None:
                i = bisect.bisect_left(years, year)
                if i == len(years):
                    return None
                if years[i] != year:
                    year, month, day, hour, minute, second = years[i], 1, 1, 0, 0, 0
            m = months[month]
            if m < 0:
                year, month, day, hour, minute, second = year + 1, 1, 1, 0, 0, 0
                continue
            if m != month:
                month, day, hour, minute, second = m, 1, 0, 0, 0
            days = self._day_table(year, month)
            d = days[day] if day < len(days) else -1
            if d < 0:
                year, month = (year, month + 1) if month < 12 else (year + 1, 1)
                day, hour, minute, second = 1, 0, 0, 0
                continue
            if d != day:
                day, hour, minute, second = d, 0, 0, 0
            h = hours[hour]
            if h < 0:
                day, hour, minute, second = day + 1, 0, 0, 0
                continue
            if h != hour:
                hour, minute, second = h, 0, 0
            mi = minutes[minute]
            if mi < 0:
                hour, minute, second = hour + 1, 0, 0
                if hour == 24:
                    day, hour = day + 1, 0
                continue
            if mi != minute:
                minute, second = mi, 0
            s = seconds[second]
            if s < 0:
                minute, second = minute + 1, 0
                if minute == 60:
                    hour, minute = hour + 1, 0
                    if hour == 24:
                        day, hour = day + 1, 0
                continue
            return datetime(year, month, day, hour, minute, s)

    def _day_table(self, year: int, month: int) -> list[int]:
        key = (year, month)
        table = self._day_cache.get(key)
        if table is None:
            days = self._days.days(year, month)
            table = _next_table(set(days), 32) if days else [-1] * 33
            if len(self._day_cache) > 512:
                self._day_cache.clear()
            self._day_cache[key] = table
        return table


def _require_aware(t: datetime) -> None:
    if not isinstance(t, datetime) or t.tzinfo is None or t.utcoffset() is None:
        raise ValueError(f"expected an aware datetime, got {t!r}")


def _instant(wall: datetime, zone: tzinfo, fold: int) -> datetime:
    return wall.replace(tzinfo=zone, fold=fold).astimezone(_UTC)
