"""A store with instruments: every role method timed and traced at the role interface.

:class:`InstrumentedStore` wraps any store (``store/abc.py``) and forwards every call. A method
declared on one of the role interfaces records ``quartz.jobstore.operation.duration`` (tagged with
the method's name) and runs inside a span ``quartz.jobstore.<method>`` that records the exception
if it raises. A few operations feed Quartz's other beat-side instruments from what they return:

==========================  ===========================================================
operation                   also records
==========================  ===========================================================
``claim``,                  ``quartz.trigger.acquisition.duration``, ``quartz.trigger.acquired``
``acquire_next_triggers``
``handle_misfires``,        ``quartz.trigger.misfire`` (``quartz.misfire.source``:
``resolve_expired_firings`` ``trigger`` or ``expired_firing``)
``check_in`` (a scheduler)  ``quartz.cluster.checkin.duration``
``recover_scheduler``,      ``quartz.cluster.recovery.trigger``
``recover_worker``
``check_ins``               which scheduler instances are alive (see :attr:`live_schedulers`)
==========================  ===========================================================

Nothing here touches SQL; the SQL store does not know it is observed.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any

from opentelemetry.trace import SpanKind

from celery_quartz.clock import Clock, SystemClock, to_millis
from celery_quartz.observability.instruments import (
    ERROR_TYPE,
    OPERATION,
    SCHEDULER_ID,
    SCHEDULER_NAME,
    instruments,
    tracer,
)
from celery_quartz.store.abc import (
    ClusterStore,
    JobStore,
    SchedulingStore,
    StoreReader,
    WorkerStore,
)

logger = logging.getLogger(__name__)

#: The role methods that are store operations.
OPERATIONS = frozenset(
    name
    for role in (JobStore, SchedulingStore, ClusterStore, WorkerStore, StoreReader)
    for name in role.__abstractmethods__
)
_OWN = frozenset({"_store", "_attributes", "_clock", "_threshold_millis", "_wrapped"})


class InstrumentedStore:
    """``store``, with every role operation measured and traced (see the module's table).

    Attributes are read from and written to the wrapped store (``fence`` included), so the
    loop holds this wrapper as it would the store itself.
    """

    def __init__(
        self,
        store: Any,
        *,
        instance_id: str,
        clock: Clock | None = None,
        checkin_misfire_threshold: float = 7.5,
    ) -> None:
        object.__setattr__(self, "_store", store)
        object.__setattr__(
            self,
            "_attributes",
            {SCHEDULER_NAME: store.scheduler_name, SCHEDULER_ID: instance_id},
        )
        object.__setattr__(self, "_clock", clock or SystemClock())
        object.__setattr__(self, "_threshold_millis", int(checkin_misfire_threshold * 1000))
        object.__setattr__(self, "_wrapped", {})
        #: Scheduler instance ids alive at the last ``check_ins()`` read, sorted.
        object.__setattr__(self, "live_schedulers", [])
        #: Worker check-ins alive at the last ``check_ins()`` read, by node name.
        object.__setattr__(self, "live_workers", [])

    @property
    def attributes(self) -> dict[str, str]:
        """What every measurement of this scheduler carries."""
        return dict(self._attributes)

    @property
    def wrapped(self) -> Any:
        return self._store

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._store, name)
        if name not in OPERATIONS or not callable(value):
            return value
        wrapper = self._wrapped.get(name)
        if wrapper is None:
            wrapper = self._wrapped[name] = self._instrument(name, value)
        return wrapper

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _OWN or name in ("live_schedulers", "live_workers"):
            object.__setattr__(self, name, value)
        else:
            setattr(self._store, name, value)

    def _instrument(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        attributes = {**self._attributes, OPERATION: name}
        histogram = instruments().store_operation_duration
        after = _AFTER.get(name)
        span_name = f"quartz.jobstore.{name}"

        @functools.wraps(method)
        def operation(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            with tracer().start_as_current_span(
                span_name,
                kind=SpanKind.CLIENT,
                attributes=attributes,
                record_exception=True,
                set_status_on_exception=True,
            ):
                try:
                    result = method(*args, **kwargs)
                except BaseException as exc:
                    histogram.record(
                        time.perf_counter() - start,
                        {**attributes, ERROR_TYPE: type(exc).__qualname__},
                    )
                    raise
            elapsed = time.perf_counter() - start
            histogram.record(elapsed, attributes)
            if after is not None:
                try:
                    after(self, elapsed, result, kwargs)
                except Exception:  # a measurement must never fail the operation
                    logger.debug("recording %s failed", name, exc_info=True)
            return result

        return operation

    # -- what some operations also record --------------------------------------------------------

    def _acquired(self, elapsed: float, claim: Any, kwargs: dict[str, Any]) -> None:
        found = claim if isinstance(claim, list) else [*claim.firings, *claim.acquired]
        instruments().acquisition_duration.record(elapsed, self._attributes)
        if found:
            instruments().acquired.add(len(found), self._attributes)

    def _misfired(self, elapsed: float, result: Any, kwargs: dict[str, Any]) -> None:
        handled = result[0]
        if handled:
            instruments().misfire.add(
                handled, {**self._attributes, "quartz.misfire.source": "trigger"}
            )

    def _expired(self, elapsed: float, result: Any, kwargs: dict[str, Any]) -> None:
        if result:
            instruments().misfire.add(
                len(result), {**self._attributes, "quartz.misfire.source": "expired_firing"}
            )

    def _checked_in(self, elapsed: float, result: Any, kwargs: dict[str, Any]) -> None:
        if kwargs.get("kind", "scheduler") == "scheduler":
            instruments().checkin_duration.record(elapsed, self._attributes)

    def _recovered_scheduler(self, elapsed: float, result: Any, kwargs: dict[str, Any]) -> None:
        if result is not None and sum(result):
            instruments().recovery.add(sum(result), self._attributes)

    def _recovered_worker(self, elapsed: float, result: Any, kwargs: dict[str, Any]) -> None:
        if result is not None and (result.recovered + result.interrupted):
            instruments().recovery.add(result.recovered + result.interrupted, self._attributes)

    def _read_check_ins(self, elapsed: float, rows: Any, kwargs: dict[str, Any]) -> None:
        now = to_millis(self._clock.now())
        alive = [
            r
            for r in rows
            if now <= r.last_checkin_millis + r.checkin_interval_millis + self._threshold_millis
        ]
        kind = kwargs.get("kind")
        if kind in (None, "scheduler"):
            self.live_schedulers = sorted(r.instance_name for r in alive if r.kind == "scheduler")
        if kind in (None, "worker"):
            self.live_workers = sorted(r.instance_name for r in alive if r.kind == "worker")


_AFTER: dict[str, Callable[[InstrumentedStore, float, Any, dict[str, Any]], None]] = {
    "claim": InstrumentedStore._acquired,
    "acquire_next_triggers": InstrumentedStore._acquired,
    "handle_misfires": InstrumentedStore._misfired,
    "resolve_expired_firings": InstrumentedStore._expired,
    "check_in": InstrumentedStore._checked_in,
    "recover_scheduler": InstrumentedStore._recovered_scheduler,
    "recover_worker": InstrumentedStore._recovered_worker,
    "check_ins": InstrumentedStore._read_check_ins,
}
