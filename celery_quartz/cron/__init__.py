"""Quartz cron expressions: the 4.x dialect and its daylight-saving rules.

A Quartz expression has six or seven fields, seconds first::

    second minute hour day-of-month month day-of-week [year]

At most one of day-of-month and day-of-week is ``?``; when both name days, a day either names
fires (Quartz.NET 4.x). Day-of-week counts 1-7 from Sunday. Beside ``*``, ranges, lists, steps
and ``H``, the day fields take ``L``, ``L-n``, ``W``, ``nW``, ``LW`` (day-of-month) and ``L``,
``nL``, ``n#k`` (day-of-week). ``CronFormat.UNIX`` reads the five-field crontab form instead and
stores its Quartz spelling.

The schedule is computed on the wall clock of the expression's time zone, then each matching wall
time is turned into an instant by Quartz 4.x's rules (see
:meth:`CronExpression.next_valid_time_after`).
"""

from __future__ import annotations

import bisect
import logging
from datetime import datetime, timedelta, timezone, tzinfo

from celery_quartz.clock import require_aware
from celery_quartz.cron._fields import (
    _DOM,
    _DOW,
    _HOUR,
    _MACROS,
    _MINUTE,
    _MONTH,
    _ONE_MICROSECOND,
    _ONE_SECOND,
    _SECOND,
    _UTC,
    _YEAR,
    MAX_YEAR,
    CronFormat,
    _DaySpec,
    _error,
    _is_interval_token,
    _next_table,
    _parse_dom,
    _parse_dow,
    _parse_hashed,
    _parse_plain,
    _reject_common,
    _unix_to_quartz,
    has_hash_token,
    hash_value,
)
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
        self.hash_key = hash_key if any(has_hash_token(f) for f in fields[:6]) else None
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
        self._months = _next_table(_parse_hashed(text, _MONTH, month, hash_key), 13)
        if len(fields) == 7:
            _reject_common(text, _YEAR, fields[6])
            years = _parse_plain(text, _YEAR, fields[6])
            self._years: list[int] | None = sorted(years)
        else:
            self._years = None
        for field, token in ((_DOM, dom), (_DOW, dow)):
            if "?" in token and token != "?":
                _reject_common(text, field, token)
        if dom == dow == "?":
            raise _error(
                text,
                "day-of-month/day-of-week",
                f"{dom} {dow}",
                "both day fields are '?'; at most one of them may be",
            )
        spec = _DaySpec()
        spec.on_dom, spec.on_dow = dom != "?", dow != "?"
        if spec.on_dom:
            _parse_dom(text, dom, spec, hash_key)
        if spec.on_dow:
            _parse_dow(text, dow, spec, hash_key)
        if spec.on_dom and spec.on_dow and "*" in (dom, dow) and dom != dow:
            logger.warning(
                "cron expression %r: day-of-month %r with day-of-week %r fires every day, "
                "because a day either field names fires (Quartz.NET 4.x); write '?' in the "
                "field with '*' to fire only on the other's days",
                text,
                dom,
                dow,
            )
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
        """The time zone the expression is read in."""
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
        require_aware(t, f"cron expression {self.expression!r}")
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
        require_aware(after, f"cron expression {self.expression!r}")
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
        require_aware(before, f"cron expression {self.expression!r}")
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
        require_aware(after, f"cron expression {self.expression!r}")
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


def _instant(wall: datetime, zone: tzinfo, fold: int) -> datetime:
    return wall.replace(tzinfo=zone, fold=fold).astimezone(_UTC)
