"""celery-redbeat's entries, read from Redis by their key prefix.

Facts about its storage (redbeat's schedulers.py and decoder.py, 2.x):

* Every entry's key is listed in the sorted set ``<prefix>:schedule`` (scored by its next run);
  the default prefix is ``redbeat:``, so the set is ``redbeat::schedule``.
* Each entry is a hash at ``<prefix><name>`` with the field ``definition``: JSON with ``name``,
  ``task``, ``args``, ``kwargs``, ``options``, ``schedule`` and ``enabled``; and the field
  ``meta``: JSON with ``last_run_at`` (and ``total_run_count``).
* Objects in that JSON carry a ``__type__``: ``interval`` (``every`` in seconds, ``relative``),
  ``crontab`` (its five fields as given; it runs in the app's time zone), ``rrule`` (dateutil's
  recurrence rule), ``datetime`` (its fields, and ``timezone``: an IANA name, or an offset in
  seconds).

Redbeat runs an entry at its schedule's next time after ``last_run_at`` (Celery's
``remaining_estimate``: a relative interval rounded down to its resolution), and an entry that
has never run at once; the import keeps the former and does not reproduce the latter (the
trigger starts at the schedule's next time).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

from celery import schedules

from celery_quartz.importers import SourceEntry, read_crontab
from celery_quartz.tz import resolve_time_zone

#: The group the imported jobs are stored in.
GROUP = "redbeat"
DEFAULT_PREFIX = "redbeat:"


def read_entries(client: Any, key_prefix: str, app_time_zone: str) -> list[SourceEntry]:
    """Every entry listed in ``<key_prefix>:schedule``, as :class:`SourceEntry` values."""
    keys = [_text(k) for k in client.zrange(f"{key_prefix}:schedule", 0, -1)]
    entries = []
    for key in sorted(keys):
        definition_text, meta_text = client.hmget(key, ["definition", "meta"])
        if not definition_text:
            continue  # listed but deleted meanwhile
        entries.append(
            _entry(key, key_prefix, _text(definition_text), _text(meta_text), app_time_zone)
        )
    return entries


def _entry(
    key: str, prefix: str, definition_text: str, meta_text: str | None, zone: str
) -> SourceEntry:
    name = key[len(prefix) :] if key.startswith(prefix) else key
    try:
        raw = json.loads(definition_text)
        meta = json.loads(meta_text) if meta_text else {}
    except ValueError as exc:
        return _broken(name, f"its definition is not JSON: {exc}")
    skip: str | None = None
    schedule: Any = None
    first_fire: datetime | None = None
    spec = raw.get("schedule")
    last_run = _datetime(meta.get("last_run_at"))
    kind = spec.get("__type__") if isinstance(spec, dict) else None
    if kind == "interval":
        every = timedelta(seconds=float(spec["every"]))
        relative = bool(spec.get("relative"))
        schedule = schedules.schedule(every, relative=relative)
        if last_run is not None:
            # Celery's own count from the last run: a relative schedule rounds it down to the
            # interval's resolution (hour, minute; midnight for days) in the last run's zone.
            probe = schedules.schedule(every, relative=relative, nowfun=lambda: last_run)
            first_fire = last_run.astimezone(timezone.utc) + probe.remaining_estimate(last_run)
    elif kind == "crontab":
        fields = {k: v for k, v in spec.items() if k != "__type__"}
        schedule, skip = read_crontab(fields)
    elif kind == "rrule":
        skip = "rrule schedules are not imported (a recurrence trigger could hold some of them)"
    else:
        skip = f"schedule {spec!r} is not one celery-quartz can translate"
    args, kwargs, options = raw.get("args") or [], raw.get("kwargs") or {}, raw.get("options") or {}
    if not skip and options.get("headers"):
        skip = (
            f"custom message headers {sorted(options['headers'])} cannot be carried: "
            f"celery-quartz sets a firing's headers itself"
        )
    return SourceEntry(
        name=name,
        task=raw.get("task") or "",
        schedule=schedule,
        time_zone=zone,
        args=list(args),
        kwargs=dict(kwargs),
        options=dict(options),
        enabled=bool(raw.get("enabled", True)),
        first_fire=first_fire,
        description=f"redbeat entry {name}",
        skip_reason=skip,
    )


def _broken(name: str, why: str) -> SourceEntry:
    return SourceEntry(name=name, task="", schedule=None, time_zone="UTC", skip_reason=why)


def _datetime(value: Any) -> datetime | None:
    """redbeat's encoded datetime: its fields and a zone (IANA name, or offset in seconds), in
    that zone, as redbeat decodes it."""
    if not isinstance(value, dict) or value.get("__type__") != "datetime":
        return None
    fields = {
        k: int(value[k])
        for k in ("year", "month", "day", "hour", "minute", "second", "microsecond")
    }
    zone_spec = value.get("timezone", "UTC")
    if isinstance(zone_spec, (int, float)):
        zone: Any = timezone(timedelta(seconds=zone_spec))
    else:
        zone = resolve_time_zone(str(zone_spec))
    return datetime(**fields, tzinfo=zone)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
