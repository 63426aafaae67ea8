"""The fields of a Quartz cron expression: their tokens parsed into values and day rules
(``L``, ``W``, ``#``, ``H``), and the Unix five-field form renamed to Quartz's. The expression
itself, which computes fire times from them, is :class:`celery_quartz.cron.CronExpression`."""

from __future__ import annotations

import enum
import hashlib
import logging
import re
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

from celery_quartz.errors import CronSyntaxError

logger = logging.getLogger(__name__)

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
        raise _error(expression, field, token, "'H' is hashed in every field but the year")
    if field is not _DOM and "W" in bare:
        raise _error(expression, field, token, "'W' belongs to the day-of-month field")
    if "?" in token and (token != "?" or field not in (_DOM, _DOW)):
        raise _error(
            expression, field, token, "'?' stands alone, in day-of-month or day-of-week only"
        )


_HASHED_FIELDS = (_SECOND, _MINUTE, _HOUR, _DOM, _MONTH, _DOW)
#: ``H``, ``H(a-b)``, ``H/n`` and ``H(a-b)/n``.
_HASH_FORM = re.compile(r"H(?:\(([0-9]+)-([0-9]+)\))?(?:/([0-9]+))?")


def hash_value(hash_key: str, field_name: str) -> int:
    """The stable number an ``H`` token of ``field_name`` draws from for ``hash_key``.

    The first eight bytes, big-endian, of SHA-256 over the UTF-8 text ``hash_key``, a NUL and
    the field's name (``second``, ``minute``, ``hour``, ``day-of-month``, ``month`` or
    ``day-of-week``). Every process and every node computes the same number; Python's own
    ``hash()`` is salted per process and would not.
    """
    text = f"{hash_key}\x00{field_name}".encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "big")


def has_hash_token(field_text: str) -> bool:
    """Whether a field holds an ``H`` token: an item starting with ``H`` (``THU`` does not)."""
    return any(item.startswith("H") for item in field_text.split(","))


def _parse_hashed(expression: str, field: _Field, token: str, hash_key: str | None) -> set[int]:
    """An ordinary field whose items may be ``H`` tokens (see :func:`hash_value`)."""
    values: set[int] = set()
    for item in token.split(","):
        if item.startswith("H"):
            values |= _hashed_item(expression, field, token, item, hash_key)
        else:
            values |= _parse_item(expression, field, token, item)
    return values


def _hashed_item(
    expression: str, field: _Field, token: str, item: str, hash_key: str | None
) -> set[int]:
    """One ``H``, ``H(a-b)``, ``H/n`` or ``H(a-b)/n`` item, over the field's own range."""
    match = _HASH_FORM.fullmatch(item)
    if match is None:
        raise _error(expression, field, token, f"{item!r} is not one of H, H(a-b), H/n, H(a-b)/n")
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
        return {lo + h % (hi - lo + 1)}
    step = _step(expression, field, token, match[3])
    return set(range(lo + h % min(step, hi - lo + 1), hi + 1, step))


#: Kinds of day-of-month rule beside plain values (see :meth:`_DaySpec.days`).
_LAST = 0  # L-n: the n-th day before the last (n = 0: the last day)
_LAST_WEEKDAY = 1  # L-nW-m: the weekday nearest L-n, then m days earlier (not before the 1st)
_NEAREST_WEEKDAY = 2  # nW: the weekday nearest day n (clamped to the month), within the month


class _DaySpec:
    """What the two day fields allow, reduced to the days of each month.

    A field that is ``?`` takes no part. When both fields name days, a day either of them names
    is allowed (Quartz.NET 4.x, like crontab): ``5/5`` with ``MON`` is the 5th, 10th, ... and
    every Monday.
    """

    __slots__ = (
        "dom_rules",
        "dom_values",
        "dow_last",
        "dow_nth",
        "dow_values",
        "on_dom",
        "on_dow",
    )

    def __init__(self) -> None:
        #: Whether day-of-month, and day-of-week, name days (are not ``?``).
        self.on_dom = True
        self.on_dow = False
        self.dom_values: frozenset[int] = frozenset()
        #: ``(kind, a, b)`` rules: ``(_LAST, n, 0)``, ``(_LAST_WEEKDAY, n, m)``,
        #: ``(_NEAREST_WEEKDAY, day, 0)``.
        self.dom_rules: tuple[tuple[int, int, int], ...] = ()
        self.dow_values: frozenset[int] = frozenset()
        self.dow_nth: tuple[int, int] | None = None
        self.dow_last: int | None = None

    def days(self, year: int, month: int) -> list[int]:
        """The days of ``month`` these rules allow, ascending."""
        last = _days_in_month(year, month)
        # Quartz numbering of the 1st: 1 = Sunday ... 7 = Saturday.
        first_dow = datetime(year, month, 1).isoweekday() % 7 + 1

        def dow(day: int) -> int:
            return (first_dow - 1 + day - 1) % 7 + 1

        days: set[int] = set()
        if self.on_dom:
            days |= self._dom_days(last, dow)
        if self.on_dow:
            days |= self._dow_days(last, first_dow, dow)
        return sorted(days)

    def _dom_days(self, last: int, dow: Callable[[int], int]) -> set[int]:
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
        return days

    def _dow_days(self, last: int, first_dow: int, dow: Callable[[int], int]) -> set[int]:
        if self.dow_nth is not None:
            wanted, nth = self.dow_nth
            first = 1 + (wanted - first_dow) % 7
            day = first + 7 * (nth - 1)
            return {day} if day <= last else set()
        if self.dow_last is not None:
            return {last - (dow(last) - self.dow_last) % 7}
        return {d for d in range(1, last + 1) if dow(d) in self.dow_values}


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


def _parse_dom(expression: str, token: str, spec: _DaySpec, hash_key: str | None) -> None:
    field = _DOM
    _reject_common(expression, field, token)
    values: set[int] = set()
    rules: set[tuple[int, int, int]] = set()
    for item in token.split(","):
        if item.startswith("H"):
            values |= _hashed_item(expression, field, token, item, hash_key)
        elif item.startswith("L"):
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


def _parse_dow(expression: str, token: str, spec: _DaySpec, hash_key: str | None) -> None:
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
    spec.dow_values = frozenset(_parse_hashed(expression, field, token, hash_key))


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
    if dow_free:
        return ["0", minute, hour, "*" if dom == "?" else dom, month, "?"]
    if dom_free:
        return ["0", minute, hour, "?", month, _unix_dow_to_quartz(expression, dow)]
    if dom.startswith("*") or dow.startswith("*"):
        # Vixie cron requires both fields to match when one starts with '*' (*/2), other
        # crontabs either one; a Quartz expression can only say "either".
        raise _error(
            expression,
            "day-of-month/day-of-week",
            f"{dom} {dow}",
            "crontabs disagree on a day field starting with '*' beside a restricted one "
            "(Vixie cron requires both to match); write the range out (1-31/2) or use one "
            "day field",
        )
    # Both fields restricted: crontab fires when either matches, and so does Quartz.
    return ["0", minute, hour, dom, month, _unix_dow_to_quartz(expression, dow)]


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
