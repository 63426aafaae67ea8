"""Celery's beat schedules (``crontab``, ``schedule``/timedelta/seconds, ``solar``) as our triggers.

Each translation keeps what the beat entry meant under stock ``celery beat`` and refuses, with a
:class:`~celery_quartz.errors.ValidationError` naming the entry, what no trigger kind can say.
"""

from __future__ import annotations

import numbers
from datetime import datetime, time, timedelta, tzinfo
from typing import Any

from celery import schedules as celery_schedules

from celery_quartz.cron import CronExpression
from celery_quartz.cron._fields import _DOM, _HOUR, _MINUTE, _MONTH, _compress, _Field, _parse_plain
from celery_quartz.errors import CronSyntaxError, ValidationError
from celery_quartz.keys import TriggerKey
from celery_quartz.triggers._time import utc
from celery_quartz.triggers.base import Trigger
from celery_quartz.triggers.calendar_interval import CalendarIntervalTrigger, IntervalUnit
from celery_quartz.triggers.cron import CronTrigger
from celery_quartz.triggers.simple import REPEAT_INDEFINITELY, SimpleTrigger
from celery_quartz.tz import resolve_time_zone, time_zone_name

__all__ = ["trigger_from_celery_schedule"]

_DAY = timedelta(days=1)
_HOUR_DELTA = timedelta(hours=1)
_MINUTE_DELTA = timedelta(minutes=1)


def trigger_from_celery_schedule(
    schedule: Any,
    *,
    entry_name: str,
    key: TriggerKey,
    default_time_zone: str,
    now: datetime,
) -> Trigger:
    """The trigger that fires when the beat entry ``entry_name`` would have run.

    * ``crontab``: a :class:`CronTrigger` at second 0, Celery's day numbering (0 = Sunday)
      renumbered, in the crontab's own zone (its app's ``timezone`` or its ``nowfun``'s) or else
      ``default_time_zone``. Celery requires *both* day fields to match; Quartz fires on a day
      either field names, so a crontab restricting both is refused.
    * ``schedule``, :class:`~datetime.timedelta` or a number of seconds: a
      :class:`SimpleTrigger` repeating forever, first one interval after ``now`` (a fresh stock
      beat entry first runs one interval after beat starts). ``relative=True`` rounds the first
      run down to the interval's resolution (hour, minute) as Celery does; a relative interval
      of whole days becomes a :class:`CalendarIntervalTrigger` at local midnight in
      ``default_time_zone``; a relative interval that is not a whole number of its unit is
      refused (Celery's runs would not be evenly spaced).
    * ``solar``: refused; sunrise and sunset move every day and no trigger kind follows them.
    """
    now = utc(now)
    where = f"beat entry {entry_name!r}"
    if isinstance(schedule, celery_schedules.crontab):
        return _from_crontab(schedule, where, key, default_time_zone)
    if isinstance(schedule, celery_schedules.solar):
        raise ValidationError(
            f"{where}: solar schedules ({getattr(schedule, 'event', '?')}) cannot be represented: "
            f"the event moves every day and no Quartz trigger kind follows the sun"
        )
    if isinstance(schedule, celery_schedules.schedule):
        run_every = schedule.run_every
        relative = bool(getattr(schedule, "relative", False))
        if type(schedule) is not celery_schedules.schedule:
            raise ValidationError(
                f"{where}: schedule type {type(schedule).__name__} is not one celery-quartz "
                f"can translate (crontab, schedule, timedelta or seconds)"
            )
        return _from_interval(run_every, relative, where, key, default_time_zone, now)
    if isinstance(schedule, timedelta):
        return _from_interval(schedule, False, where, key, default_time_zone, now)
    if isinstance(schedule, numbers.Real) and not isinstance(schedule, bool):
        return _from_interval(
            timedelta(seconds=float(schedule)), False, where, key, default_time_zone, now
        )
    raise ValidationError(
        f"{where}: cannot translate schedule {schedule!r} of type {type(schedule).__name__}; "
        f"use crontab, schedule, timedelta or a number of seconds"
    )


# -- intervals ---------------------------------------------------------------------------------


def _from_interval(
    run_every: Any,
    relative: bool,
    where: str,
    key: TriggerKey,
    default_time_zone: str,
    now: datetime,
) -> Trigger:
    if isinstance(run_every, numbers.Real) and not isinstance(run_every, bool):
        run_every = timedelta(seconds=float(run_every))
    if not isinstance(run_every, timedelta):
        raise ValidationError(f"{where}: run_every {run_every!r} is not a timedelta or seconds")
    if run_every <= timedelta(0):
        raise ValidationError(f"{where}: the interval {run_every} must be positive")
    first = now + run_every
    if relative and run_every >= _DAY:
        return _relative_days(run_every, where, key, default_time_zone, now)
    if relative:
        first = _relative_first(run_every, first, where, default_time_zone, now)
    return SimpleTrigger(
        key=key,
        start_at=first,
        repeat_interval=run_every,
        repeat_count=REPEAT_INDEFINITELY,
        description=f"celery beat {where[11:]}: every {run_every}",
    )


def _relative_days(
    run_every: timedelta, where: str, key: TriggerKey, default_time_zone: str, now: datetime
) -> Trigger:
    """Celery's relative day schedules run at local midnight, every so many calendar days."""
    if run_every % _DAY:
        raise ValidationError(
            f"{where}: a relative schedule of {run_every} is rounded to whole days by Celery, "
            f"so its runs are not evenly spaced; give a whole number of days or a crontab"
        )
    zone = _zone(default_time_zone, where)
    days = run_every // _DAY
    local = now.astimezone(zone)
    midnight = datetime.combine(local.date() + timedelta(days=days), time(0), tzinfo=zone)
    return CalendarIntervalTrigger(
        key=key,
        start_at=utc(midnight),
        repeat_interval=days,
        repeat_interval_unit=IntervalUnit.DAY,
        time_zone=default_time_zone,
        preserve_hour_of_day_across_daylight_savings=True,
        description=f"celery beat {where[11:]}: every {days} days at midnight",
    )


def _relative_first(
    run_every: timedelta, first: datetime, where: str, default_time_zone: str, now: datetime
) -> datetime:
    """Celery's ``relative=True``: runs land on the interval's resolution, in the app's zone."""
    zone = _zone(default_time_zone, where)
    for unit in (_HOUR_DELTA, _MINUTE_DELTA):
        if run_every >= unit:
            if run_every % unit:
                raise ValidationError(
                    f"{where}: a relative schedule of {run_every} is rounded to whole "
                    f"{_unit_name(unit)}s by Celery, so its runs are not evenly spaced; "
                    f"give a whole number of {_unit_name(unit)}s or a crontab"
                )
            local = first.astimezone(zone)
            if unit == _HOUR_DELTA:
                rounded = local.replace(minute=0, second=0, microsecond=0)
            else:
                rounded = local.replace(second=0, microsecond=0)
            result = utc(rounded)
            return result if result > now else result + unit
    return first


def _unit_name(unit: timedelta) -> str:
    return {_DAY: "day", _HOUR_DELTA: "hour", _MINUTE_DELTA: "minute"}[unit]


def _zone(name: str, where: str) -> tzinfo:
    try:
        return resolve_time_zone(name)
    except ValueError as exc:
        raise ValidationError(f"{where}: {exc}") from None


# -- crontab -----------------------------------------------------------------------------------


def _from_crontab(
    schedule: Any, where: str, key: TriggerKey, default_time_zone: str
) -> CronTrigger:
    minute = _field(schedule, "minute", _MINUTE)
    hour = _field(schedule, "hour", _HOUR)
    dom = _field(schedule, "day_of_month", _DOM)
    month = _field(schedule, "month_of_year", _MONTH)
    dow_values = set(schedule.day_of_week)
    if not dow_values <= set(range(7)):
        raise ValidationError(f"{where}: crontab day_of_week {sorted(dow_values)} is not 0-6")
    dow_restricted = dow_values != set(range(7))
    if dow_restricted and dom != "*":
        raise ValidationError(
            f"{where}: the crontab restricts both day_of_month ({schedule._orig_day_of_month!r}) "
            f"and day_of_week ({schedule._orig_day_of_week!r}); Celery requires both to match "
            f"but a Quartz expression fires on a day either field names: drop one restriction "
            f"(or check the other in the task)"
        )
    if not set(schedule.minute) or not set(schedule.hour) or not set(schedule.day_of_month):
        raise ValidationError(f"{where}: the crontab names no time at all")
    if dow_restricted:
        days = _compress(sorted(d + 1 for d in dow_values))  # Celery 0 = Sunday, Quartz 1
        expression = f"0 {minute} {hour} ? {month} {days}"
    else:
        expression = f"0 {minute} {hour} {dom} {month} ?"
    zone = _crontab_zone(schedule, default_time_zone, where)
    try:
        CronExpression(expression, time_zone=zone)
    except CronSyntaxError as exc:
        raise ValidationError(f"{where}: crontab {schedule!r} translates badly: {exc}") from None
    return CronTrigger(
        key=key,
        expression=expression,
        time_zone=zone,
        description=f"celery beat {where[11:]}: {schedule!r}",
    )


def _field(schedule: Any, name: str, field: _Field) -> str:
    """A crontab field in Quartz syntax: the user's own spelling when Quartz reads it the same.

    Keeping ``*/15`` rather than ``0,15,30,45`` matters: a wildcard, step or range in the
    minute or hour field makes the expression an interval one for the daylight-saving rules.
    """
    values = set(getattr(schedule, name))
    full = set(range(field.lo, field.hi + 1))
    if values == full:
        return "*"
    original = getattr(schedule, f"_orig_{name}", None)
    if isinstance(original, int) and not isinstance(original, bool):
        original = str(original)
    if isinstance(original, str):
        text = original.strip().upper().replace(" ", "")
        try:
            if _parse_plain("crontab", field, text) == values:
                return text
        except CronSyntaxError:
            pass
    return ",".join(str(v) for v in sorted(values))


def _crontab_zone(schedule: Any, default_time_zone: str, where: str) -> str:
    app = getattr(schedule, "_app", None)
    if app is not None:
        configured = getattr(app.conf, "timezone", None)
        if configured:
            name = configured if isinstance(configured, str) else _name_of(configured, where)
            _zone(name, where)
            return name
    nowfun = getattr(schedule, "nowfun", None)
    if nowfun is not None:
        zone = getattr(nowfun(), "tzinfo", None)
        if zone is not None:
            return _name_of(zone, where)
    _zone(default_time_zone, where)
    return default_time_zone


def _name_of(zone: tzinfo, where: str) -> str:
    try:
        return time_zone_name(zone)
    except ValueError as exc:
        raise ValidationError(f"{where}: {exc}") from None
