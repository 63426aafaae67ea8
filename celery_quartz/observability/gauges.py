"""Gauges read from the store, beyond Quartz's instruments: what "absence" hides.

=======================================  ==========================================================
gauge                                    what it reads
=======================================  ==========================================================
``quartz.trigger.count``                 stored triggers, by ``quartz.trigger.state``
``quartz.trigger.oldest_due.age``        seconds since the earliest next fire time among the
                                         BLOCKED, and among the ERROR triggers (by state)
``quartz.trigger.overdue``               triggers due by more than the misfire threshold
``quartz.firing.in_flight``              fired instances in flight (claimed to completed)
``quartz.execution_group.in_flight``     an execution group's firings in flight
``quartz.execution_group.limit``         its ``max_concurrent`` (groups with a limit only)
``quartz.execution_group.due_waiting``   its due triggers held back
``quartz.job.overdue``                   1 for each job past its success deadline (by
                                         ``quartz.job.group`` and ``quartz.job.name``)
``quartz.job.since_success``             seconds since such a job's last success (since its
                                         first recorded run when it never succeeded)
=======================================  ==========================================================

The job gauges read :meth:`~celery_quartz.store.abc.HistoryReader.overdue_jobs` with the
settings' ``quartz_require_success_within`` (``deadlines``): a job back within its deadline
leaves the series. The dashboard process exports the same names from the store itself
(:mod:`celery_quartz.observability.exposition`), so an alert on them fires with every scheduler
down.

The execution-group gauges cover every group configured in ``quartz_execution_limits``, the
ungrouped triggers when they have a limit, and every group seen in flight or held back since the
scheduler started: an idle group reports 0 (and its limit), it does not vanish from the series.

One collection costs four statements (``trigger_summary()``: one grouped query;
``group_occupancy()``: two; ``overdue_jobs()``: one, and one per 500 jobs of the settings'
deadlines), shared by every gauge of that collection, and is made by one scheduler
of the cluster only: the running instance whose id sorts first among the live scheduler check-ins
it last read. That is settled in the database (the check-in rows every scheduler reads for its
recovery pass anyway), not between processes; a node that is not the collector reports nothing.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

from opentelemetry.metrics import CallbackOptions, Observation

from celery_quartz.clock import Clock, to_millis
from celery_quartz.health import MAX_OVERDUE_JOBS
from celery_quartz.health import overdue_triggers as overdue
from celery_quartz.keys import JobKey
from celery_quartz.observability.instruments import JOB_GROUP, JOB_NAME, meter
from celery_quartz.store.views import GroupOccupancy, RunStatus

logger = logging.getLogger(__name__)

STATE = "quartz.trigger.state"
GROUP = "quartz.execution_group"
#: Snapshots younger than this are shared between the gauges of one collection.
_SNAPSHOT_TTL = 5.0


class StoreGauges:
    """Registers the gauges for one scheduler; ``is_collector()`` says whether this node reads."""

    def __init__(
        self,
        reader: Any,
        attributes: dict[str, str],
        clock: Clock,
        is_collector: Callable[[], bool],
        limit_for: Callable[[str | None], int | None] = lambda group: None,
        groups: Callable[[], Iterable[str]] = lambda: (),
        deadlines: Callable[[], dict[JobKey, timedelta]] = dict,
    ) -> None:
        self.reader = reader
        self.attributes = attributes
        self.clock = clock
        self.is_collector = is_collector
        self.limit_for = limit_for
        #: The execution groups configured (``quartz_execution_limits``' named groups).
        self.groups = groups
        #: The success deadlines of jobs defined elsewhere (``quartz_require_success_within``).
        self.deadlines = deadlines
        # Every group observed in flight or held back since the start, reported at 0 when idle.
        self._seen: set[str | None] = set()
        self._lock = threading.Lock()
        self._snapshot: tuple[float, Any, Any, list[RunStatus]] | None = None
        #: Collections that read the store (for tests and the idle query-rate measurement).
        self.reads = 0
        _register(self)

    def close(self) -> None:
        """Stop observing (the scheduler closed)."""
        with _lock:
            _registered.discard(self)

    def snapshot(self) -> tuple[Any, Any, list[RunStatus]] | None:
        """(trigger summary, group occupancy, jobs past their success deadline), read at most
        once per collection; None when this node does not collect or the store did not
        answer."""
        if not self.is_collector():
            return None
        with self._lock:
            now = time.monotonic()
            if self._snapshot is not None and now - self._snapshot[0] < _SNAPSHOT_TTL:
                return self._snapshot[1], self._snapshot[2], self._snapshot[3]
            try:
                summary = self.reader.trigger_summary()
                occupancy = self.reader.group_occupancy()
                late = self.reader.overdue_jobs(self.deadlines(), limit=MAX_OVERDUE_JOBS)
            except Exception as exc:
                logger.debug("store gauges not read: %s", exc)
                return None
            self.reads += 1
            occupancy = self._every_group(occupancy)
            self._snapshot = (now, summary, occupancy, late)
            return summary, occupancy, late

    def _every_group(self, occupancy: list[GroupOccupancy]) -> list[GroupOccupancy]:
        """``occupancy`` (the groups with firings in flight or due triggers held back) with every
        other group known, idle: the configured ones, the ungrouped triggers under a limit, and
        those seen before."""
        self._seen.update(g.execution_group for g in occupancy)
        self._seen.update(self.groups())
        if self.limit_for(None) is not None:
            self._seen.add(None)
        found = {g.execution_group: g for g in occupancy}
        return [
            found.get(group) or GroupOccupancy(group, in_flight=0, due_waiting=0)
            for group in sorted(self._seen, key=lambda g: (g is not None, g or ""))
        ]

    def _observe(self, values: Iterable[tuple[float, dict[str, Any]]]) -> list[Observation]:
        return [Observation(v, {**self.attributes, **extra}) for v, extra in values]

    def _counts(self, options: CallbackOptions) -> list[Observation]:
        snap = self.snapshot()
        if snap is None:
            return []
        return self._observe((s.count, {STATE: state}) for state, s in snap[0].items())

    def _oldest(self, options: CallbackOptions) -> list[Observation]:
        snap = self.snapshot()
        if snap is None:
            return []
        now = to_millis(self.clock.now())
        found = []
        for state in ("BLOCKED", "ERROR"):
            summary = snap[0].get(state)
            earliest = summary.earliest_next_fire_time if summary else None
            age = 0.0 if earliest is None else max(0.0, (now - to_millis(earliest)) / 1000)
            found.append((age, {STATE: state}))
        return self._observe(found)

    def _overdue(self, options: CallbackOptions) -> list[Observation]:
        snap = self.snapshot()
        if snap is None:
            return []
        return self._observe([(overdue(snap[0]), {})])

    def _in_flight(self, options: CallbackOptions) -> list[Observation]:
        snap = self.snapshot()
        if snap is None:
            return []
        return self._observe([(sum(g.in_flight for g in snap[1]), {})])

    def _group_in_flight(self, options: CallbackOptions) -> list[Observation]:
        snap = self.snapshot()
        if snap is None:
            return []
        return self._observe((g.in_flight, _group(g.execution_group)) for g in snap[1])

    def _group_waiting(self, options: CallbackOptions) -> list[Observation]:
        snap = self.snapshot()
        if snap is None:
            return []
        return self._observe((g.due_waiting, _group(g.execution_group)) for g in snap[1])

    def _group_limit(self, options: CallbackOptions) -> list[Observation]:
        snap = self.snapshot()
        if snap is None:
            return []
        found = []
        for g in snap[1]:
            limit = self.limit_for(g.execution_group)
            if limit is not None:
                found.append((limit, _group(g.execution_group)))
        return self._observe(found)

    def _late_jobs(self, options: CallbackOptions) -> list[Observation]:
        snap = self.snapshot()
        if snap is None:
            return []
        return self._observe((1, job_attributes(s)) for s in snap[2])

    def _since_success(self, options: CallbackOptions) -> list[Observation]:
        snap = self.snapshot()
        if snap is None:
            return []
        now = self.clock.now()
        return self._observe((since_success(s, now), job_attributes(s)) for s in snap[2])


def job_attributes(status: RunStatus) -> dict[str, str]:
    """The attributes of a job's gauges (the execution instruments' names)."""
    return {JOB_GROUP: status.key.group, JOB_NAME: status.key.name}


def since_success(status: RunStatus, now: datetime) -> float:
    """Seconds since the job last succeeded (since its first recorded run, never)."""
    return max(0.0, (now - (status.last_success_time or status.since)).total_seconds())


_lock = threading.Lock()
_registered: weakref.WeakSet[StoreGauges] = weakref.WeakSet()
_gauges: list[Any] = []


def _register(gauges: StoreGauges) -> None:
    """Add ``gauges`` to what the package's gauges observe. The gauges are created once per
    process (an SDK keeps the first instrument of a name and ignores a second one's callbacks);
    each scheduler in the process adds its observations."""
    with _lock:
        _registered.add(gauges)
        if _gauges:
            return
        m = meter()
        for name, unit, text, method in _GAUGES:
            _gauges.append(
                m.create_observable_gauge(
                    name, callbacks=[_each(method)], unit=unit, description=text
                )
            )


def _each(
    method: Callable[[StoreGauges, CallbackOptions], list[Observation]],
) -> Callable[[CallbackOptions], list[Observation]]:
    def observe(options: CallbackOptions) -> list[Observation]:
        found: list[Observation] = []
        for gauges in list(_registered):
            found.extend(method(gauges, options))
        return found

    return observe


_GAUGES: tuple[tuple[str, str, str, Callable[..., list[Observation]]], ...] = (
    ("quartz.trigger.count", "{trigger}", "Stored triggers by state", StoreGauges._counts),
    (
        "quartz.trigger.oldest_due.age",
        "s",
        "Seconds since the earliest next fire time of a BLOCKED or ERROR trigger",
        StoreGauges._oldest,
    ),
    (
        "quartz.trigger.overdue",
        "{trigger}",
        "Triggers due by more than the misfire threshold",
        StoreGauges._overdue,
    ),
    ("quartz.firing.in_flight", "{firing}", "Fired instances in flight", StoreGauges._in_flight),
    (
        "quartz.execution_group.in_flight",
        "{firing}",
        "Firings in flight by execution group",
        StoreGauges._group_in_flight,
    ),
    (
        "quartz.execution_group.limit",
        "{firing}",
        "An execution group's max_concurrent",
        StoreGauges._group_limit,
    ),
    (
        "quartz.execution_group.due_waiting",
        "{trigger}",
        "Due triggers of an execution group held back",
        StoreGauges._group_waiting,
    ),
    (
        "quartz.job.overdue",
        "{job}",
        "1 for each job past its success deadline",
        StoreGauges._late_jobs,
    ),
    (
        "quartz.job.since_success",
        "s",
        "Seconds since the last success of a job past its success deadline",
        StoreGauges._since_success,
    ),
)


def _group(name: str | None) -> dict[str, str]:
    return {GROUP: name if name is not None else ""}
