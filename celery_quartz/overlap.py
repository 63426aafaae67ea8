"""A trigger's overlap policy (docs/steering.md#overlap-policy): what happens when its next
occurrence comes due while a firing of the same trigger is still in flight (published or
executing).

The store decides it in the transaction that fires the occurrence (a claim, or the firing of a
claim), so a cluster decides each overlap once. Only the trigger's own firings count: another
trigger of the same job running is not an overlap, and neither is a retry or recovery firing of
one of its occurrences (those run as one-shot triggers of their own, and are never skipped, held
or cancelled). ``disallow_concurrent`` on the job wins: its triggers are BLOCKED while any of its
firings runs, so they never overlap.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from celery_quartz.errors import InvalidTriggerError


class OverlapPolicy(str, Enum):
    """What a trigger does with an occurrence due while its previous firing is in flight."""

    #: Fire it anyway (the default; the behaviour before overlap policies).
    ALLOW = "allow"
    #: Drop it: the trigger moves to its next occurrence, and the history records the occurrence
    #: as ``skipped`` (reason ``overlap``). Not a misfire.
    SKIP = "skip"
    #: Hold it: the trigger is BLOCKED until the firing in flight ends, then the held occurrence
    #: fires at once (or, past the misfire threshold, its misfire instruction decides).
    BUFFER_ONE = "buffer_one"
    #: Fire it, and revoke the firing in flight with ``terminate=True`` (cooperatively, through
    #: ``current_context().cancelled``, on a pool that cannot terminate).
    CANCEL_PREVIOUS = "cancel_previous"

    @classmethod
    def parse(cls, value: Any, owner: str = "trigger") -> OverlapPolicy:
        """The policy named ``value`` (any case, ``-`` for ``_``; None is ``allow``); an
        :class:`InvalidTriggerError` naming ``owner`` and the value otherwise."""
        if value is None:
            return cls.ALLOW
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            try:
                return cls(value.strip().lower().replace("-", "_"))
            except ValueError:
                pass
        names = ", ".join(p.value for p in cls)
        raise InvalidTriggerError(
            f"{owner}: overlap_policy {value!r} is not one of {names}"
        ) from None

    def __str__(self) -> str:
        return self.value


#: Why an occurrence was skipped or held, as its history row says.
OVERLAP_REASON = "overlap"
