"""The recurrence trigger: an RFC 5545 RRULE, DTSTART being the trigger's start in its zone.

The rule is expanded by ``python-dateutil`` on the wall clock of ``time_zone``; each wall time
becomes an instant by RFC 5545 §3.3.5: a time that occurs twice means its first occurrence, and a
time that does not occur is read with the UTC offset from before the gap.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, tzinfo
from typing import Any, ClassVar

from dateutil import rrule as du

from celery_quartz.errors import InvalidTriggerError
from celery_quartz.triggers._time import UTC, optional_utc, require_start, utc
from celery_quartz.triggers.cron import CronMisfireInstruction, ScheduleTrigger
from celery_quartz.tz import is_in_gap

#: A gap moves a wall time by at most this much, so instants are out of wall order only this far.
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
    """

    kind: ClassVar[str] = "RRULE"
    MisfireInstruction: ClassVar[type[CronMisfireInstruction]] = CronMisfireInstruction
    misfire_instructions: ClassVar[frozenset[int]] = frozenset(CronMisfireInstruction)

    rule: str = ""
    time_zone: str = "UTC"
    _cache: tuple[Any, ...] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.rule = _canonical(self.rule)
        if self.start_at is not None:
            self._rrule()

    # -- the rule -----------------------------------------------------------------------------

    def _rrule(self) -> tuple[du.rrule, tzinfo, datetime, bool]:
        """The parsed rule on the wall clock, its zone, DTSTART (wall) and whether COUNT is set."""
        start = require_start(self.key, self.start_at)
        key = (self.rule, self.time_zone, start)
        if self._cache is not None and self._cache[0] == key:
            return self._cache[1]
        zone = self._zone()
        dtstart = start.astimezone(zone).replace(tzinfo=None)
        parsed = _parse(self.rule, dtstart, zone, self.key)
        has_count = getattr(parsed, "_count", None) is not None
        value = (parsed, zone, dtstart, has_count)
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
        rule, zone, dtstart, counted = self._rrule()
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
        expansion = self._expansion_from(rule, dtstart, search_from, counted)
        best: datetime | None = None
        best_wall: datetime | None = None
        for wall in expansion.xafter(max(search_from, dtstart), inc=True):
            if best_wall is not None and wall > best_wall + _MAX_SHIFT:
                break
            instant = wall.replace(tzinfo=zone).astimezone(UTC)  # RFC 5545 §3.3.5
            if instant > after and (best is None or instant < best):
                best, best_wall = instant, wall
                if not is_in_gap(wall, zone):
                    break  # an existing wall time: nothing later in wall order fires sooner
        if best is not None and end is not None and best > end:
            return None
        return best

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


def _parse(rule: str, dtstart: datetime, zone: tzinfo, key: object) -> du.rrule:
    text = _until_to_wall(rule, zone, key)
    try:
        parsed = du.rrulestr(text, dtstart=dtstart, forceset=False)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
        raise InvalidTriggerError(
            f"trigger {key}: recurrence rule {rule!r} is not valid: {exc}"
        ) from None
    if not isinstance(parsed, du.rrule):
        raise InvalidTriggerError(f"trigger {key}: recurrence rule {rule!r} must be one RRULE")
    return parsed


def _canonical(rule: str) -> str:
    if not isinstance(rule, str):
        raise InvalidTriggerError(f"recurrence rule must be a string, got {rule!r}")
    text = rule.strip()
    if text.upper().startswith("RRULE:"):
        text = text[6:]
    return ";".join(part.strip().upper() for part in text.split(";") if part.strip())


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
            wall = instant.astimezone(zone).replace(tzinfo=None)
            parts[i] = f"UNTIL={wall:%Y%m%dT%H%M%S}"
    return ";".join(parts)
