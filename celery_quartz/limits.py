"""Execution groups and their limits: how many firings of a category of work may run at once.

An execution group is a tag on a trigger (``trigger.execution_group``). Its firings are published
to the group's own Celery queue (the group's name unless configured), so a worker started with
``-Q reindex -c 2`` serves that group two at a time: the per-node limit is the worker's
concurrency on that queue. The scheduler adds what a worker cannot: it never lets the broker
hold a backlog. At acquisition, a limited group's firings in flight (claimed, published or
running, counted from the fired-trigger rows) are capped by the group's capacity:

* node scope (the default): what the live workers consuming the group's queue can run, each at
  most the limit (two workers, limit 2: up to 4);
* cluster scope: the limit itself, whatever the number of workers (a quota).

Triggers beyond the capacity stay WAITING with their fire time and misfire by their own
instruction if held past the threshold. Configured like Quartz's ``UseExecutionLimits``::

    app.conf.quartz_execution_limits = (
        ExecutionLimits()
        .for_group("reindex", max_concurrent=2)
        .for_group("billing", max_concurrent=1, scope=ExecutionLimitScope.CLUSTER)
        .for_other_groups(max_concurrent=8)
    )

or as a plain mapping (for configuration files): ``{"reindex": 2, "billing": {"max_concurrent":
1, "scope": "cluster"}, "*": 8}``, where ``"*"`` is every other group and ``""`` the ungrouped
triggers.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from celery_quartz.errors import ConfigurationError
from celery_quartz.keys import MAX_KEY_LENGTH

#: Key of the "every other group" entry in the mapping form.
OTHER_GROUPS = "*"
#: Key of the ungrouped triggers' entry in the mapping form.
UNGROUPED = ""


class ExecutionLimitScope(enum.Enum):
    """Where a limit is counted: per worker node (capacity), or once for the whole cluster."""

    #: Counted per worker: a worker's concurrency on the group's queue is its share.
    NODE = "node"
    #: Counted once for the whole cluster, from the firings in flight, at acquisition.
    CLUSTER = "cluster"


@dataclass(frozen=True)
class ExecutionLimit:
    """One group's limit: ``max_concurrent`` None is unlimited, 0 forbids the group."""

    max_concurrent: int | None
    scope: ExecutionLimitScope = ExecutionLimitScope.NODE

    @property
    def bounded(self) -> bool:
        return self.max_concurrent is not None


def check_group_name(owner: str, group: object) -> None:
    """Refuse an execution group name that is not a non-empty string of at most 200 characters."""
    if not isinstance(group, str) or not group.strip():
        raise ConfigurationError(f"{owner}: an execution group must be a non-empty string")
    if len(group) > MAX_KEY_LENGTH:
        raise ConfigurationError(
            f"{owner}: execution group {group[:40]!r}... is longer than {MAX_KEY_LENGTH}"
        )


class ExecutionLimits:
    """The execution limits of a scheduler, built with ``for_group``/``for_other_groups``/
    ``for_ungrouped`` (each returns the same object, so calls chain).

    Every scheduler of a cluster should be given the same limits: a cluster-scoped limit is
    counted by whichever scheduler acquires.
    """

    def __init__(self) -> None:
        self._groups: dict[str, ExecutionLimit] = {}
        self._queues: dict[str, str] = {}
        self._other: ExecutionLimit | None = None
        self._ungrouped: ExecutionLimit | None = None

    def for_group(
        self,
        group: str,
        max_concurrent: int | None,
        *,
        scope: ExecutionLimitScope | str = ExecutionLimitScope.NODE,
        queue: str | None = None,
    ) -> ExecutionLimits:
        """Limit ``group``; ``queue`` is the Celery queue its firings go to (default: its name)."""
        check_group_name("execution limits", group)
        self._groups[group] = _limit(f"execution group {group!r}", max_concurrent, scope)
        if queue is not None:
            if not isinstance(queue, str) or not queue:
                raise ConfigurationError(
                    f"execution group {group!r}: queue must be a non-empty string, got {queue!r}"
                )
            self._queues[group] = queue
        return self

    def for_other_groups(
        self,
        max_concurrent: int | None,
        *,
        scope: ExecutionLimitScope | str = ExecutionLimitScope.NODE,
    ) -> ExecutionLimits:
        """Limit each group that has no entry of its own (each group separately)."""
        self._other = _limit("other execution groups", max_concurrent, scope)
        return self

    def for_ungrouped(
        self,
        max_concurrent: int | None,
        *,
        scope: ExecutionLimitScope | str = ExecutionLimitScope.NODE,
    ) -> ExecutionLimits:
        """Limit the triggers that have no execution group (counted together)."""
        self._ungrouped = _limit("ungrouped triggers", max_concurrent, scope)
        return self

    @property
    def bounded(self) -> bool:
        """Whether any limit caps anything (otherwise acquisition counts nothing)."""
        entries = [*self._groups.values(), self._other, self._ungrouped]
        return any(e is not None and e.bounded for e in entries)

    @property
    def named_groups(self) -> list[str]:
        """The groups with an entry of their own, sorted."""
        return sorted(self._groups)

    def limit_for(self, group: str | None) -> ExecutionLimit | None:
        """The limit that applies to ``group`` (None: the ungrouped triggers); None: unlimited."""
        limit = self._ungrouped if group is None else self._groups.get(group, self._other)
        return limit if limit is not None and limit.bounded else None

    def queue_for(self, group: str) -> str:
        """The Celery queue of ``group``'s firings."""
        return self._queues.get(group, group)

    @classmethod
    def coerce(cls, value: object) -> ExecutionLimits:
        """``quartz_execution_limits`` as given: an :class:`ExecutionLimits`, a mapping, or None."""
        if value is None:
            return cls()
        if isinstance(value, ExecutionLimits):
            return value
        if not isinstance(value, Mapping):
            raise ConfigurationError(
                "quartz_execution_limits must be an ExecutionLimits or a mapping of group to "
                f"limit, got {type(value).__name__}"
            )
        limits = cls()
        for group, entry in value.items():
            max_concurrent, scope, queue = _entry(group, entry)
            if queue is not None and group in (OTHER_GROUPS, UNGROUPED):
                raise ConfigurationError(
                    f"quartz_execution_limits[{group!r}]: only a named group can have a queue"
                )
            if group == OTHER_GROUPS:
                limits.for_other_groups(max_concurrent, scope=scope)
            elif group == UNGROUPED:
                limits.for_ungrouped(max_concurrent, scope=scope)
            else:
                limits.for_group(group, max_concurrent, scope=scope, queue=queue)
        return limits

    def __repr__(self) -> str:
        parts = [f"{g!r}: {e.max_concurrent} ({e.scope.value})" for g, e in self._groups.items()]
        if self._other is not None:
            parts.append(f"other groups: {self._other.max_concurrent} ({self._other.scope.value})")
        if self._ungrouped is not None:
            u = self._ungrouped
            parts.append(f"ungrouped: {u.max_concurrent} ({u.scope.value})")
        return f"ExecutionLimits({', '.join(parts)})"


def _limit(owner: str, max_concurrent: object, scope: object) -> ExecutionLimit:
    if max_concurrent is not None and (
        isinstance(max_concurrent, bool) or not isinstance(max_concurrent, int)
    ):
        raise ConfigurationError(
            f"{owner}: max_concurrent must be a whole number or None, got {max_concurrent!r}"
        )
    if max_concurrent is not None and max_concurrent < 0:
        raise ConfigurationError(f"{owner}: max_concurrent must not be negative")
    try:
        parsed = ExecutionLimitScope(scope)
    except ValueError:
        raise ConfigurationError(
            f"{owner}: scope must be 'node' or 'cluster', got {scope!r}"
        ) from None
    return ExecutionLimit(max_concurrent, parsed)


def _entry(group: object, entry: object) -> tuple[Any, Any, Any]:
    if not isinstance(group, str):
        raise ConfigurationError(f"quartz_execution_limits: group {group!r} is not a string")
    if entry is None or isinstance(entry, int):
        return entry, ExecutionLimitScope.NODE, None
    if isinstance(entry, Mapping):
        unknown = set(entry) - {"max_concurrent", "scope", "queue"}
        if unknown:
            raise ConfigurationError(
                f"quartz_execution_limits[{group!r}]: unknown key(s) {', '.join(sorted(unknown))}"
            )
        return (
            entry.get("max_concurrent"),
            entry.get("scope", ExecutionLimitScope.NODE),
            entry.get("queue"),
        )
    raise ConfigurationError(
        f"quartz_execution_limits[{group!r}]: a limit is a whole number, None or a mapping, "
        f"got {entry!r}"
    )
