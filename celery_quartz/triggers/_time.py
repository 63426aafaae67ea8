"""Small time helpers shared by the trigger kinds (private)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from celery_quartz.clock import require_aware
from celery_quartz.errors import InvalidTriggerError

UTC = timezone.utc
ONE_MICROSECOND = timedelta(microseconds=1)


def utc(when: datetime) -> datetime:
    """``when`` as an aware UTC datetime; a naive one is refused."""
    return require_aware(when, "a trigger's time").astimezone(UTC)


def optional_utc(when: datetime | None) -> datetime | None:
    return None if when is None else utc(when)


def require_start(trigger_key: object, start_at: datetime | None) -> datetime:
    if start_at is None:
        raise InvalidTriggerError(
            f"trigger {trigger_key}: start_at is not set; a trigger has no clock of its own, "
            f"so give it a start time (the scheduler fills in 'now' when it stores one)"
        )
    return utc(start_at)


def micros(delta: timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
