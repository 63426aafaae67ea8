"""The one source of time. Every component reads ``clock.now()``; tests inject a fake."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from typing import Protocol

from celery_quartz.errors import NaiveDatetimeError


class Clock(Protocol):
    """What the scheduler needs of a clock: the current instant, aware, in UTC."""

    def now(self) -> datetime:
        """The current instant, aware, in UTC."""
        ...


class SystemClock:
    """The machine's clock."""

    def now(self) -> datetime:
        """The current instant, aware, in UTC."""
        return datetime.now(timezone.utc)


class FakeClock:
    """A clock that moves only when told to; it may be set backwards, for tests of clock skew."""

    def __init__(self, start: datetime | None = None) -> None:
        if start is not None:
            require_aware(start, "FakeClock's start")
        self._now = (start or datetime(2026, 1, 1, tzinfo=timezone.utc)).astimezone(timezone.utc)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        """The instant the clock was set or advanced to, aware, in UTC."""
        with self._lock:
            return self._now

    def set(self, when: datetime) -> None:
        """Move the clock to ``when`` (aware), forwards or backwards."""
        require_aware(when, "FakeClock.set")
        with self._lock:
            self._now = when.astimezone(timezone.utc)

    def advance(self, seconds: float | timedelta) -> datetime:
        """Move the clock on by ``seconds`` (a number or a timedelta; negative moves it back); the
        new time."""
        delta = seconds if isinstance(seconds, timedelta) else timedelta(seconds=seconds)
        with self._lock:
            self._now += delta
            return self._now


def require_aware(when: datetime, owner: str) -> datetime:
    """``when``, if it is an aware datetime; otherwise raises :class:`NaiveDatetimeError` naming
    ``owner``, what it was given to (``"cron expression '0 0 2 * * ?'"``)."""
    if not isinstance(when, datetime) or when.tzinfo is None or when.utcoffset() is None:
        raise NaiveDatetimeError(
            f"{owner}: {when!r} is not an aware datetime; celery-quartz needs aware datetimes"
        )
    return when


def to_millis(when: datetime) -> int:
    """An aware datetime as integer milliseconds since the Unix epoch (how the store keeps time)."""
    delta = require_aware(when, "a stored time") - _EPOCH
    return delta.days * 86_400_000 + delta.seconds * 1000 + delta.microseconds // 1000


def from_millis(millis: int) -> datetime:
    """Integer milliseconds since the epoch as an aware UTC datetime."""
    return _EPOCH + timedelta(milliseconds=millis)


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
