"""The audit of every change: who made it (:class:`Actor`), and what changed (:func:`diff`).

Every write of the client's role (:class:`~celery_quartz.store.abc.JobStore`) records, in its own
transaction, one audit row per object it changes, as the actor of the moment:
:func:`current_actor`, set by each surface around its calls with :func:`acting_as` (the CLI,
the HTTP API, the dashboard's forms, scheduling files, importers, the ``beat_schedule`` sync),
and otherwise the operating system's user, through the ``client``.

What changed is a diff of the object's definition, ``{field: [before, after]}``, changed fields
only, with the values under secret-looking keys replaced by ``[redacted]``
(``quartz_dashboard_redact_keys``). See docs/history.md#audit.
"""

from __future__ import annotations

import dataclasses
import getpass
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from enum import Enum
from typing import TYPE_CHECKING, Any

from celery_quartz.errors import ValidationError
from celery_quartz.overlap import OverlapPolicy
from celery_quartz.retry import RetryPolicy, stored_policy

if TYPE_CHECKING:
    from celery_quartz.job import Job
    from celery_quartz.triggers.base import Trigger

#: The surfaces a change comes through.
VIAS = frozenset(
    {"client", "cli", "api", "dashboard", "file", "import", "beat_schedule", "scheduler"}
)
#: What a redacted value reads as.
REDACTED = "[redacted]"
#: The keys whose values are secrets by default (``quartz_dashboard_redact_keys``).
DEFAULT_REDACT_KEYS = "password|passwd|secret|token|key|credential|auth"
#: The principal when the operating system names no user.
UNKNOWN_USER = "unknown"
#: The types JSON holds as they are.
_JSON_SCALARS = frozenset({str, int, float, bool})


@dataclass(frozen=True)
class Actor:
    """Who makes a change (``principal``: a user, a token's principal, ``file:<name>``, …) and
    through what (``via``: one of :data:`VIAS`)."""

    #: Who: a user, a token's principal, ``file:<name>``, ``import:<source>``, ``beat_schedule``.
    principal: str
    #: Through what: ``client``, ``cli``, ``api``, ``dashboard``, ``file``, ``import``,
    #: ``beat_schedule`` or ``scheduler``.
    via: str

    def __post_init__(self) -> None:
        if not isinstance(self.principal, str) or not self.principal.strip():
            raise ValidationError(
                f"an actor's principal must be a non-empty string, not {self.principal!r}"
            )
        if self.via not in VIAS:
            raise ValidationError(
                f"an actor's via must be one of {', '.join(sorted(VIAS))}, not {self.via!r}"
            )


_actor: ContextVar[Actor | None] = ContextVar("celery_quartz_actor", default=None)


@contextmanager
def acting_as(principal: str, via: str) -> Iterator[Actor]:
    """Record the changes made inside the block as ``principal`` through ``via`` (in this
    thread or task; blocks nest, the innermost wins)."""
    actor = Actor(principal, via)
    token = _actor.set(actor)
    try:
        yield actor
    finally:
        _actor.reset(token)


def current_actor() -> Actor:
    """The actor set by the innermost :func:`acting_as`, or else the operating system's user
    through the ``client``."""
    return _actor.get() or Actor(os_user(), "client")


def os_user() -> str:
    """The operating system's user running this process (``getpass.getuser``), or
    :data:`UNKNOWN_USER` when none can be found (a container's user with no name)."""
    try:
        return getpass.getuser() or UNKNOWN_USER
    except Exception:  # KeyError before Python 3.13, OSError since
        return UNKNOWN_USER


# -- what changed -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """One audit row to write: an action on a target, and its diff."""

    action: str
    target_kind: str
    target: str | None
    changes: dict[str, list[Any]] = field(default_factory=dict)


class Redaction:
    """Replaces the values under keys matching ``pattern`` (case-insensitive, searched anywhere in
    the key; an empty pattern matches none) by ``marker`` (the audit's :data:`REDACTED`; the
    dashboard shows ``***``)."""

    def __init__(self, pattern: str = DEFAULT_REDACT_KEYS, marker: str = REDACTED) -> None:
        self.pattern = re.compile(pattern, re.IGNORECASE) if pattern else None
        self.marker = marker

    def secret(self, key: str) -> bool:
        return self.pattern is not None and self.pattern.search(key) is not None

    def __call__(self, value: Any) -> Any:
        """``value`` with every value under a secret key, at any depth, redacted."""
        if value is None or type(value) in _JSON_SCALARS:
            return value
        if isinstance(value, Mapping):
            return {
                k: self.marker if isinstance(k, str) and self.secret(k) else self(v)
                for k, v in value.items()
            }
        if isinstance(value, (list, tuple)):
            return [self(v) for v in value]
        return value


def diff(
    before: Mapping[str, Any] | None,
    after: Mapping[str, Any] | None,
    redaction: Redaction | None = None,
) -> dict[str, list[Any]]:
    """The fields that differ between two definitions, ``{field: [before, after]}`` (a field
    missing on one side is None there). Where both sides of a field are mappings, their keys are
    compared one by one, as ``field.key`` (at any depth), so a change of one entry of a job's data
    records that entry only. Values under a key matching ``redaction``'s pattern, below the
    top-level fields, read :data:`REDACTED` (a changed secret still shows as changed)."""
    redaction = redaction or Redaction("")
    found: dict[str, list[Any]] = {}
    if before is None or after is None:  # added or removed: every field, against None
        side = 1 if before is None else 0
        for name, value in ((after if before is None else before) or {}).items():
            if value is not None:
                pair = [None, None]
                pair[side] = redaction(value)
                found[name] = pair
        return found
    _compare(before, after, "", False, redaction, found)
    return found


def _compare(
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    prefix: str,
    nested: bool,
    redaction: Redaction,
    found: dict[str, list[Any]],
) -> None:
    for name in [*before, *(k for k in after if k not in before)]:
        old, new = before.get(name), after.get(name)
        if old == new:
            continue
        path = f"{prefix}{name}"
        secret = nested and redaction.secret(str(name))
        if isinstance(old, Mapping) and isinstance(new, Mapping) and not secret:
            _compare(old, new, f"{path}.", True, redaction, found)
        elif secret:
            found[path] = [None if old is None else REDACTED, None if new is None else REDACTED]
        else:
            found[path] = [redaction(old), redaction(new)]


def json_value(value: Any) -> Any:
    """``value`` as JSON can hold it: times as ISO 8601, durations as seconds, enumerations as
    their value, tuples as lists."""
    if value is None or type(value) in _JSON_SCALARS:
        return value
    if isinstance(value, Enum):
        return json_value(value.value)
    if isinstance(value, (datetime, date, time)):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, RetryPolicy):
        return value.to_string()
    if isinstance(value, Mapping):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [json_value(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def job_fields(job: Job) -> dict[str, Any]:
    """A job's definition as the audit compares it: every field but its key."""
    return {name: json_value(getattr(job, name)) for name in _job_field_names(type(job))}


def _job_field_names(cls: type) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(
            f.name for f in dataclasses.fields(cls) if f.name != "key"
        )
    return names


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def trigger_fields(trigger: Trigger) -> dict[str, Any]:
    """A trigger's definition as the audit compares it: the fields every kind shares, its job,
    and its kind's own (``expression``, ``repeat_interval``, …); not its state (fire times,
    counts)."""
    pin_node, pin_auto = trigger.preferred_node.to_columns()
    fields: dict[str, Any] = {
        "kind": trigger.kind,
        "job": None if trigger.job_key is None else str(trigger.job_key),
        "description": trigger.description,
        "priority": trigger.priority,
        "start_at": json_value(trigger.start_at),
        "end_at": json_value(trigger.end_at),
        "misfire_instruction": int(trigger.misfire_instruction),
        "data": json_value(trigger.data),
        "calendar": trigger.calendar_name,
        "execution_group": trigger.execution_group,
        "preferred_node": pin_node,
        "preferred_node_auto": pin_auto,
        "retry_policy": stored_policy(trigger.retry_policy),
        "pause_when_retries_exhausted": trigger.pause_when_retries_exhausted,
        "overlap_policy": str(OverlapPolicy.parse(trigger.overlap_policy)),
    }
    for name, value in trigger.detail().items():
        fields[f"detail.{name}" if name in fields else name] = json_value(value)
    return fields


class Changes:
    """The audit rows of one transaction, collected as it writes and written at its end in one
    statement; a change whose diff is empty is not kept (nothing changed)."""

    def __init__(self, redaction: Redaction) -> None:
        self.redaction = redaction
        self.items: list[Change] = []

    def __bool__(self) -> bool:
        return bool(self.items)

    def add(
        self,
        action: str,
        target_kind: str,
        target: object,
        before: Mapping[str, Any] | None,
        after: Mapping[str, Any] | None,
    ) -> None:
        found = diff(before, after, self.redaction)
        if found:
            self.items.append(
                Change(action, target_kind, None if target is None else str(target), found)
            )

    def job(self, action: str, before: Job | None, after: Job | None) -> None:
        """A job added (``before`` None), replaced or removed (``after`` None)."""
        job = after or before
        assert job is not None
        self.add(
            action,
            "job",
            job.key,
            None if before is None else job_fields(before),
            None if after is None else job_fields(after),
        )

    def trigger(self, action: str, before: Trigger | None, after: Trigger | None) -> None:
        """A trigger added, replaced (a new key shows as ``key``) or removed."""
        old = None if before is None else trigger_fields(before)
        new = None if after is None else trigger_fields(after)
        if before is not None and after is not None and before.key != after.key:
            assert old is not None and new is not None
            old["key"], new["key"] = str(before.key), str(after.key)
        trigger = before or after
        assert trigger is not None
        self.add(action, "trigger", trigger.key, old, new)
