"""A trigger's retry policy (Quartz 4.x): how long to wait before running a failed occurrence again.

A policy is an immutable value, made only by :meth:`RetryPolicy.fixed`,
:meth:`RetryPolicy.exponential` and :meth:`RetryPolicy.explicit`, or :meth:`RetryPolicy.none`
(no retry). Attempts count from 1: ``delay_for(1)`` is the wait before the first retry.

A trigger without a policy of its own (``None``) takes its job's, and a job without one the
scheduler's default (``quartz_default_retry_policy``): :func:`effective_policy`. ``none()`` at
any of the three levels means no retry, whatever the levels after it say.

The store keeps a policy in the trigger row as a short string, times in milliseconds:

=======================================  ==================================================
``f:<max>:<delay>``                      fixed: ``f:5:30000`` is 5 retries 30 s apart
``e:<max>:<initial>:<factor>[:<cap>]``   exponential: ``e:5:30000:2:600000``
``x:<max>:<d1>,<d2>,...``                explicit, the last delay repeating up to ``max``
``n``                                    none: no retry
=======================================  ==================================================

No policy of its own (inherit) is stored as NULL. The string is at most
:data:`MAX_STORED_LENGTH` characters (the column's width); a policy that would not fit is refused
when it is made.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import ClassVar

from celery_quartz.clock import from_millis
from celery_quartz.errors import RetryPolicyError

#: Width of the ``retry_policy`` column.
MAX_STORED_LENGTH = 200
#: Longest wait a policy may ask for: a retry later than this is a schedule, not a retry (and
#: the bound keeps "now + delay" inside what a datetime can hold).
MAX_DELAY = timedelta(days=365)

_MS = timedelta(milliseconds=1)
_FACTORY = object()  # only the factories below may construct a policy

Delay = timedelta | float


class RetryPolicy:
    """When to run a failed occurrence again: a bounded number of attempts at stated waits."""

    __slots__ = ("_cap_ms", "_delays_ms", "_factor", "_kind", "_max_attempts")

    #: No retry (:meth:`none`).
    NONE: ClassVar[RetryPolicy]

    def __init__(
        self,
        token: object,
        kind: str,
        max_attempts: int,
        delays_ms: tuple[int, ...],
        factor: float = 1.0,
        cap_ms: int | None = None,
    ) -> None:
        if token is not _FACTORY:
            raise TypeError("make a RetryPolicy with RetryPolicy.fixed, .exponential or .explicit")
        self._kind = kind
        self._max_attempts = max_attempts
        self._delays_ms = delays_ms
        self._factor = factor
        self._cap_ms = cap_ms
        stored = self.to_string()
        if len(stored) > MAX_STORED_LENGTH:
            raise RetryPolicyError(
                f"retry policy {stored[:40]}...: takes {len(stored)} characters stored, at most "
                f"{MAX_STORED_LENGTH} (give fewer explicit delays)"
            )

    # -- the factories ------------------------------------------------------------------------

    @classmethod
    def none(cls) -> RetryPolicy:
        """No retry: a failed occurrence waits for the trigger's next one. Set on a trigger or a
        job, it stops the policy of the job or of the scheduler's default from applying."""
        return cls.NONE

    @classmethod
    def fixed(cls, max_attempts: int, delay: Delay) -> RetryPolicy:
        """``max_attempts`` retries, each ``delay`` after the failure before it."""
        return cls(_FACTORY, "f", _attempts(max_attempts), (_millis("delay", delay),))

    @classmethod
    def exponential(
        cls,
        max_attempts: int,
        initial_delay: Delay,
        factor: float = 2,
        max_delay: Delay | None = None,
    ) -> RetryPolicy:
        """``max_attempts`` retries waiting ``initial_delay``, then ``factor`` times longer each
        time, never longer than ``max_delay`` (or :data:`MAX_DELAY`)."""
        initial = _millis("initial_delay", initial_delay)
        if (
            not isinstance(factor, (int, float))
            or isinstance(factor, bool)
            or not math.isfinite(factor)
            or factor < 1
        ):
            raise RetryPolicyError(
                f"retry policy: factor must be a number of at least 1, got {factor!r}"
            )
        cap = None if max_delay is None else _millis("max_delay", max_delay)
        if cap is not None and cap < initial:
            raise RetryPolicyError(
                f"retry policy: max_delay {timedelta(milliseconds=cap)} is shorter than "
                f"initial_delay {timedelta(milliseconds=initial)}"
            )
        return cls(_FACTORY, "e", _attempts(max_attempts), (initial,), float(factor), cap)

    @classmethod
    def explicit(cls, *delays: Delay, max_attempts: int | None = None) -> RetryPolicy:
        """Retries at the given waits, in order; the last wait repeats up to ``max_attempts``
        (by default one retry per wait given)."""
        if not delays:
            raise RetryPolicyError("retry policy: explicit needs at least one delay")
        millis = tuple(_millis(f"delays[{i}]", d) for i, d in enumerate(delays))
        attempts = len(millis) if max_attempts is None else _attempts(max_attempts)
        if attempts < len(millis):
            raise RetryPolicyError(
                f"retry policy: max_attempts {attempts} is fewer than the {len(millis)} delays "
                "given"
            )
        return cls(_FACTORY, "x", attempts, millis)

    # -- what it says -------------------------------------------------------------------------

    @property
    def max_attempts(self) -> int:
        """How many retries the policy allows (0 for :data:`NONE`)."""
        return self._max_attempts

    def delay_for(self, attempt: int) -> timedelta | None:
        """The wait before retry number ``attempt`` (from 1); None once attempts run out."""
        if not isinstance(attempt, int) or attempt < 1:
            raise RetryPolicyError(
                f"retry policy: attempt must be an integer from 1, got {attempt!r}"
            )
        if attempt > self._max_attempts:
            return None
        if self._kind == "e":
            return timedelta(milliseconds=self._exponential_ms(attempt))
        return timedelta(milliseconds=self._delays_ms[min(attempt, len(self._delays_ms)) - 1])

    def _exponential_ms(self, attempt: int) -> int:
        initial = self._delays_ms[0]
        cap = self._cap_ms if self._cap_ms is not None else _MAX_DELAY_MS
        # Compare logarithms first: factor ** attempt overflows a float long before attempts do.
        if self._factor > 1 and (attempt - 1) * math.log(self._factor) >= math.log(cap / initial):
            return cap
        return min(cap, round(initial * self._factor ** (attempt - 1)))

    # -- the stored form ----------------------------------------------------------------------

    def to_string(self) -> str:
        """The compact form stored in the trigger row (see the module docstring)."""
        if self._kind == "n":
            return "n"
        head = f"{self._kind}:{self._max_attempts}"
        if self._kind == "f":
            return f"{head}:{self._delays_ms[0]}"
        if self._kind == "x":
            return f"{head}:{','.join(map(str, self._delays_ms))}"
        factor = int(self._factor) if self._factor.is_integer() else self._factor
        tail = "" if self._cap_ms is None else f":{self._cap_ms}"
        return f"{head}:{self._delays_ms[0]}:{factor}{tail}"

    @staticmethod
    def parse(stored: str) -> RetryPolicy:
        """The policy of a stored string (:meth:`to_string`). Cached: the store reads one per
        failed firing, and policies are immutable."""
        return _parse(stored)

    @staticmethod
    def parse_optional(stored: str | None) -> RetryPolicy | None:
        """:meth:`parse`, with None (no policy of its own: inherit) kept as None."""
        return None if stored is None else _parse(stored)

    # -- a value ------------------------------------------------------------------------------

    def _key(self) -> tuple[object, ...]:
        return (self._kind, self._max_attempts, self._delays_ms, self._factor, self._cap_ms)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RetryPolicy) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (
            "RetryPolicy.NONE" if self._kind == "n" else f"RetryPolicy.parse({self.to_string()!r})"
        )

    def __bool__(self) -> bool:
        """False for :data:`NONE`: ``if trigger.retry_policy:`` reads as "has retries"."""
        return self._max_attempts > 0


RetryPolicy.NONE = RetryPolicy(_FACTORY, "n", 0, ())


def effective_policy(*levels: RetryPolicy | None) -> RetryPolicy:
    """The policy that applies: the first level that has one (a trigger's, its job's, the
    scheduler's default, in that order), or no retry when none has."""
    for policy in levels:
        if policy is not None:
            return policy
    return RetryPolicy.NONE


def stored_policy(policy: RetryPolicy | None) -> str | None:
    """The column value of ``policy``: NULL for none of its own (inherit), ``"n"`` for
    :meth:`RetryPolicy.none`."""
    return None if policy is None else policy.to_string()


_MAX_DELAY_MS = MAX_DELAY // _MS


@functools.lru_cache(maxsize=1024)
def _parse(stored: str) -> RetryPolicy:
    kind, _, rest = stored.partition(":")
    fields = rest.split(":")
    try:
        if kind == "n" and not rest:
            return RetryPolicy.NONE
        if kind == "f" and len(fields) == 2:
            return RetryPolicy.fixed(int(fields[0]), _from_ms(fields[1]))
        if kind == "e" and len(fields) in (3, 4):
            cap = _from_ms(fields[3]) if len(fields) == 4 else None
            return RetryPolicy.exponential(
                int(fields[0]), _from_ms(fields[1]), float(fields[2]), cap
            )
        if kind == "x" and len(fields) == 2:
            delays: Sequence[timedelta] = [_from_ms(d) for d in fields[1].split(",")]
            return RetryPolicy.explicit(*delays, max_attempts=int(fields[0]))
    except (ValueError, OverflowError) as exc:
        # int()/float() of a malformed field, a delay past what a timedelta holds;
        # RetryPolicyError is a ValueError too.
        raise RetryPolicyError(f"retry policy {stored!r} cannot be read: {exc}") from None
    raise RetryPolicyError(f"retry policy {stored!r} cannot be read: not f:, e:, x: or n")


def _from_ms(text: str) -> timedelta:
    return timedelta(milliseconds=int(text))


def _attempts(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise RetryPolicyError(
            f"retry policy: max_attempts must be an integer of at least 1, got {value!r}"
        )
    return value


def _millis(name: str, value: object) -> int:
    """A positive delay, kept to the millisecond as the store keeps time."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise RetryPolicyError(f"retry policy: {name} must be finite, got {value!r}")
        value = timedelta(seconds=value)
    if not isinstance(value, timedelta):
        raise RetryPolicyError(
            f"retry policy: {name} must be a timedelta or seconds, got {value!r}"
        )
    if value > MAX_DELAY:
        raise RetryPolicyError(f"retry policy: {name} {value} is longer than {MAX_DELAY.days} days")
    millis = round(value / _MS)
    if millis < 1:
        raise RetryPolicyError(f"retry policy: {name} must be at least 1 ms, got {value}")
    return millis


@dataclass(frozen=True)
class RetryDecision:
    """What a retry policy grants a failed occurrence.

    ``at_millis`` is when the retry runs, or would have run; None when the policy has no attempt
    left. ``dropped_because`` says, for the log, why a retry the policy allows does not run.
    """

    at_millis: int | None
    dropped_because: str | None = None

    @property
    def granted(self) -> bool:
        return self.at_millis is not None and self.dropped_because is None


#: A retry due this close (ms) to the trigger's next occurrence gives way to the occurrence.
NEXT_OCCURRENCE_MARGIN_MS = 1000


def decide_retry(
    policy: RetryPolicy,
    attempt: int,
    *,
    failed_at_millis: int,
    next_fire_millis: int | None,
    end_millis: int | None,
) -> RetryDecision:
    """Whether retry ``attempt`` (from 1) of an occurrence that failed at ``failed_at_millis``
    runs, and when, under ``policy`` and the original trigger's next fire time and end (Quartz
    4.x): none once the policy's attempts are spent; none at, or within a second of, the next
    occurrence (the occurrence wins); none after the trigger's end."""
    delay = policy.delay_for(attempt) if policy else None
    if delay is None:
        return RetryDecision(None)
    at = failed_at_millis + delay // _MS
    if next_fire_millis is not None and at >= next_fire_millis - NEXT_OCCURRENCE_MARGIN_MS:
        return RetryDecision(at, f"the next occurrence, {_iso(next_fire_millis)}, wins")
    if end_millis is not None and at > end_millis:
        return RetryDecision(at, f"it is after the trigger's end, {_iso(end_millis)}")
    return RetryDecision(at)


def _iso(millis: int) -> str:
    return from_millis(millis).isoformat()
