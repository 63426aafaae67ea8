"""Where a firing goes, and whether it may go now: execution groups and preferred nodes at
acquisition.

A firing's route is a Celery queue:

* a trigger pinned to a worker (a named pin, or an auto-pin that worker claimed) goes to that
  worker's own queue (Celery's ``worker_direct``: ``<node>.dq2``) while the worker checks in;
* otherwise a grouped trigger goes to its group's queue (see :mod:`celery_quartz.limits`), and an
  ungrouped one wherever the job's options and Celery's routing send it.

Admission decides, per candidate trigger, from one consistent view read in the claiming
transaction (the live workers and the firings in flight), whether it is acquired now or held
back: a limited group at its capacity, a pinned worker that is saturated, or a pinned worker that
does not consume the trigger's queue. Held triggers stay WAITING (see the module docs of
:mod:`celery_quartz.limits`). Everything here is computation; the store reads and writes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from celery_quartz.limits import ExecutionLimits, ExecutionLimitScope
from celery_quartz.liveness import failed_after

#: Celery's name for a worker's own queue (``celery.utils.nodenames.worker_direct``).
WORKER_DIRECT_FORMAT = "{node}.dq2"


def direct_queue(node: str) -> str:
    """The ``worker_direct`` queue of the Celery worker ``node`` (``celery@host``)."""
    return WORKER_DIRECT_FORMAT.format(node=node)


@dataclass(frozen=True)
class LiveWorker:
    """A worker whose check-in is recent enough: its node name, queues and concurrency."""

    name: str
    queues: frozenset[str]
    concurrency: int | None


@dataclass(frozen=True)
class Route:
    """Where one firing is published: ``queue`` None is the job's own routing; ``node`` names
    the worker whose direct queue it is."""

    queue: str | None = None
    node: str | None = None


#: The route of an ungrouped, unpinned firing.
DEFAULT_ROUTE = Route()


@dataclass(frozen=True)
class Unserved:
    """A group no live worker serves: ``node`` set when it is the pinned worker that does not
    consume the group's queue (or its own queue), None when no live worker consumes it."""

    group: str | None
    queue: str | None
    node: str | None = None

    def describe(self) -> str:
        group = "ungrouped triggers" if self.group is None else f"execution group {self.group!r}"
        if self.node is None:
            return f"{group}: no live worker consumes queue {self.queue!r}"
        return f"{group}: pinned worker {self.node} does not consume queue {self.queue!r}"


@dataclass(frozen=True)
class Hold:
    """Why a trigger is held back: what to exclude from the next selection of the same claim."""

    #: The trigger's group is at its capacity (``group`` None: the ungrouped triggers).
    group_full: bool = False
    group: str | None = None
    #: The pinned worker that is saturated.
    node: str | None = None
    #: (pinned worker, group): the worker does not consume a queue it would need.
    pair: tuple[str, str | None] | None = None
    unserved: Unserved | None = None

    def describe(self) -> str:
        """What holds the trigger back, as its history's reason says."""
        if self.unserved is not None:
            return self.unserved.describe()
        if self.node is not None:
            return f"pinned worker {self.node} at its concurrency"
        group = "ungrouped triggers" if self.group is None else f"execution group {self.group!r}"
        return f"{group} at its execution limit"


class Router:
    """The routing configuration of one scheduler: its limits, the default queue, and how a
    worker's liveness is judged (its check-in interval plus ``threshold_millis``)."""

    def __init__(
        self,
        limits: ExecutionLimits | None = None,
        *,
        default_queue: str = "celery",
        threshold_millis: int = 7500,
    ) -> None:
        self.limits = limits or ExecutionLimits()
        self.default_queue = default_queue
        self.threshold_millis = threshold_millis

    def group_queue(self, group: str | None) -> str | None:
        """The queue of ``group``'s firings; None for ungrouped (the job's own routing)."""
        return None if group is None else self.limits.queue_for(group)

    def route(self, group: str | None) -> Route:
        """The route of an unpinned firing of ``group``."""
        return DEFAULT_ROUTE if group is None else Route(self.limits.queue_for(group))

    def served_queue(self, group: str | None) -> str:
        """The queue whose consumers serve ``group``: ungrouped firings are the default queue's."""
        queue = self.group_queue(group)
        return self.default_queue if queue is None else queue

    def live_workers(self, rows: list[Any], now_millis: int) -> dict[str, LiveWorker]:
        """The workers among ``rows`` (check-in rows with ``queues`` and ``concurrency``) that
        have not failed by Quartz's rule (their interval plus the threshold)."""
        live = {}
        for r in rows:
            deadline = failed_after(
                r,
                now_millis=now_millis,
                my_last_checkin_millis=None,
                threshold_millis=self.threshold_millis,
            )
            if now_millis > deadline:
                continue
            queues = frozenset(json.loads(r.queues)) if r.queues else frozenset()
            live[r.instance_name] = LiveWorker(r.instance_name, queues, r.concurrency)
        return live

    def admission(
        self,
        workers: dict[str, LiveWorker],
        in_flight_by_group: dict[str | None, int],
        in_flight_by_queue: dict[str | None, int],
    ) -> Admission:
        return Admission(self, workers, dict(in_flight_by_group), dict(in_flight_by_queue))

    def unserved(
        self,
        groups: set[str | None],
        pins: set[tuple[str, str | None]],
        workers: dict[str, LiveWorker],
    ) -> list[Unserved]:
        """Which of ``groups`` no live worker serves, and which (pinned node, group) pairs name a
        live worker that does not consume the group's queue or its own."""
        found: list[Unserved] = []
        for group in sorted(groups, key=lambda g: (g is not None, g or "")):
            if group is None and self.limits.limit_for(None) is None:
                continue  # ungrouped and unlimited: the job's own routing, nothing to judge
            queue = self.served_queue(group)
            if not any(queue in w.queues for w in workers.values()):
                found.append(Unserved(group, queue))
        for node, group in sorted(pins, key=lambda p: (p[0], p[1] or "")):
            worker = workers.get(node)
            if worker is None:
                continue
            missing = _missing_queue(worker, self.group_queue(group))
            if missing is not None:
                found.append(Unserved(group, missing, node))
        return found


def _missing_queue(worker: LiveWorker, group_queue: str | None) -> str | None:
    """The queue a pinned worker must consume and does not: its own, or the trigger's group's."""
    own = direct_queue(worker.name)
    if own not in worker.queues:
        return own
    if group_queue is not None and group_queue not in worker.queues:
        return group_queue
    return None


@dataclass
class Admission:
    """One claim's admission bookkeeping: capacity left per group and per pinned worker,
    counted down as triggers are admitted."""

    router: Router
    workers: dict[str, LiveWorker]
    in_flight_by_group: dict[str | None, int]
    in_flight_by_queue: dict[str | None, int]
    _capacity: dict[str | None, int | None] = field(default_factory=dict)

    def capacity(self, group: str | None) -> int | None:
        """How many of ``group``'s firings may be in flight at once; None: no cap."""
        if group in self._capacity:
            return self._capacity[group]
        limit = self.router.limits.limit_for(group)
        cap: int | None
        if limit is None or limit.max_concurrent is None:
            cap = None
        elif limit.scope is ExecutionLimitScope.CLUSTER:
            cap = limit.max_concurrent
        else:
            queue = self.router.served_queue(group)
            cap = sum(
                min(limit.max_concurrent, w.concurrency or limit.max_concurrent)
                for w in self.workers.values()
                if queue in w.queues
            )
        self._capacity[group] = cap
        return cap

    def admit(self, group: str | None, pinned: str | None) -> Route | Hold:
        """Route a trigger of ``group`` pinned to ``pinned`` (None: unpinned or an unclaimed
        auto-pin), counting it in flight; or say why it waits."""
        route = self.router.route(group)
        worker = None if pinned is None else self.workers.get(pinned)
        if worker is not None:
            missing = _missing_queue(worker, route.queue)
            if missing is not None:
                # The pin is kept: the trigger waits for its worker to serve the queue.
                return Hold(
                    pair=(worker.name, group), unserved=Unserved(group, missing, worker.name)
                )
            route = Route(direct_queue(worker.name), worker.name)
            if (
                worker.concurrency
                and self.in_flight_by_queue.get(route.queue, 0) >= worker.concurrency
            ):
                return Hold(node=worker.name)  # saturated: it keeps its pin
        cap = self.capacity(group)
        if cap is not None and self.in_flight_by_group.get(group, 0) >= cap:
            limit = self.router.limits.limit_for(group)
            # Capacity 0 from a limit above 0: no live worker consumes the group's queue.
            unserved = (
                Unserved(group, self.router.served_queue(group))
                if cap == 0 and limit is not None and limit.max_concurrent
                else None
            )
            return Hold(group_full=True, group=group, unserved=unserved)
        self.in_flight_by_group[group] = self.in_flight_by_group.get(group, 0) + 1
        if route.node is not None:
            self.in_flight_by_queue[route.queue] = self.in_flight_by_queue.get(route.queue, 0) + 1
        return route


@dataclass
class HeldBack:
    """What the held-back triggers of one claim exclude from its next selection, and the groups
    found unserved on the way."""

    groups: set[str | None] = field(default_factory=set)
    nodes: set[str] = field(default_factory=set)
    pairs: set[tuple[str, str | None]] = field(default_factory=set)
    unserved: list[Unserved] = field(default_factory=list)

    def add(self, hold: Hold) -> bool:
        """Record ``hold``; True when it excludes something not excluded yet."""
        if hold.unserved is not None and hold.unserved not in self.unserved:
            self.unserved.append(hold.unserved)
        more = False
        if hold.group_full and hold.group not in self.groups:
            self.groups.add(hold.group)
            more = True
        if hold.node is not None and hold.node not in self.nodes:
            self.nodes.add(hold.node)
            more = True
        if hold.pair is not None and hold.pair not in self.pairs:
            self.pairs.add(hold.pair)
            more = True
        return more


def take_batch(
    rows: Sequence[Any],
    decide: Callable[[str | None, str | None], Route | Hold],
    held: HeldBack,
    *,
    now_ms: int,
    no_later_than_ms: int,
    window_ms: int,
) -> tuple[list[tuple[Any, Route]], bool]:
    """Quartz's batch rule over due trigger rows in acquisition order (``next_fire_time``,
    ``execution_group``, ``preferred_node``), each admitted by ``decide(group, pinned node)``.

    The first admitted trigger must be due by ``no_later_than_ms``; after it, the others only
    while due no later than max(its fire time, now) + ``window_ms``. A held-back trigger is
    skipped and what held it recorded in ``held``. Returns the admitted rows with their routes,
    and whether anything new was held back (a selection that excludes it may admit more).
    """
    batch: list[tuple[Any, Route]] = []
    batch_end: int | None = None
    held_more = False
    for row in rows:
        due = row.next_fire_time
        if due > (no_later_than_ms if batch_end is None else batch_end):
            break
        decision = decide(row.execution_group, row.preferred_node)
        if isinstance(decision, Hold):
            held_more = held.add(decision) or held_more
            continue
        if batch_end is None:
            batch_end = max(due, now_ms) + window_ms
        batch.append((row, decision))
    return batch, held_more
