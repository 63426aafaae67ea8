"""Why a trigger is paused: the record a pause keeps (docs/steering.md#pause-with-a-reason).

Every pause (a trigger, a job, a group, a set of triggers, everything) records its ``reason``
and who asked (``requested_by``); the store adds when (``paused_at``). Resuming clears it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from celery_quartz.errors import ValidationError

#: Longest reason a pause keeps.
MAX_PAUSE_REASON = 250
#: Longest ``requested_by``.
MAX_REQUESTED_BY = 255
#: Who pauses a trigger whose retries ran out (``quartz_pause_when_retries_exhausted``).
RETRIES_EXHAUSTED = "celery-quartz:retries-exhausted"


@dataclass(frozen=True)
class PauseRequest:
    """What a pause asks to record: why, and who asks."""

    reason: str | None
    requested_by: str

    @classmethod
    def checked(cls, reason: str | None, requested_by: str) -> PauseRequest:
        """The request, or a :class:`ValidationError` naming what is wrong with it."""
        if reason is not None:
            if not isinstance(reason, str):
                raise ValidationError(f"pause reason must be text, got {type(reason).__name__}")
            reason = reason.strip() or None
        if reason is not None and len(reason) > MAX_PAUSE_REASON:
            raise ValidationError(
                f"pause reason is {len(reason)} characters; at most {MAX_PAUSE_REASON}"
            )
        if not isinstance(requested_by, str) or not requested_by.strip():
            raise ValidationError("pause requested_by must be a non-empty name")
        if len(requested_by) > MAX_REQUESTED_BY:
            raise ValidationError(
                f"pause requested_by is {len(requested_by)} characters; at most {MAX_REQUESTED_BY}"
            )
        for name, text in (("reason", reason or ""), ("requested_by", requested_by)):
            if "\x00" in text:
                raise ValidationError(f"pause {name} holds a NUL character")
        return cls(reason, requested_by.strip())


@dataclass(frozen=True)
class PauseRecord:
    """A paused trigger's (or paused group's) record: why, by whom, since when."""

    reason: str | None
    requested_by: str | None
    paused_at: datetime
