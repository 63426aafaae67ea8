"""The store's operations timed and traced: :class:`StoreObservation`, a store's hooks
(:class:`celery_quartz.hooks.StoreHooks`).

Every role operation records ``quartz.jobstore.operation.duration`` (tagged with the method's
name) and runs inside a span ``quartz.jobstore.<method>`` that records the exception if it
raises. A few operations feed Quartz's other beat-side instruments from what they return:

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
``check_ins``               which scheduler instances and workers are alive, by the rule of
                            failure detection (:func:`celery_quartz.liveness.failed_after`)
==========================  ===========================================================

Nothing here touches SQL; the SQL store only calls its hooks.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from celery_quartz.clock import Clock, SystemClock, to_millis
from celery_quartz.hooks import StoreHooks, StoreOperation
from celery_quartz.liveness import DEFAULT_CHECKIN_MISFIRE_THRESHOLD, failed_after
from celery_quartz.observability.instruments import (
    ERROR_TYPE,
    OPERATION,
    SCHEDULER_ID,
    SCHEDULER_NAME,
    instruments,
    tracer,
)

logger = logging.getLogger(__name__)


class StoreObservation(StoreHooks):
    """The store hooks of one scheduler instance: each operation measured and traced (see the
    module's table), and the live nodes as its last ``check_ins()`` read showed them."""

    def __init__(
        self,
        scheduler_name: str,
        *,
        instance_id: str,
        clock: Clock | None = None,
        checkin_misfire_threshold: float = DEFAULT_CHECKIN_MISFIRE_THRESHOLD,
    ) -> None:
        self._attributes = {SCHEDULER_NAME: scheduler_name, SCHEDULER_ID: instance_id}
        self._instance_id = instance_id
        self._clock = clock or SystemClock()
        self._threshold_millis = int(checkin_misfire_threshold * 1000)
        #: This instance's last check-in and the one before it (ms), as failure detection keeps
        #: them: a peer's silence is stretched by ours (:func:`failed_after`).
        self._last_checkin_millis: int | None = None
        self._previous_checkin_millis: int | None = None
        #: Scheduler instance ids alive at the last ``check_ins()`` read, sorted.
        self.live_schedulers: list[str] = []
        #: Worker check-ins alive at the last ``check_ins()`` read, by node name.
        self.live_workers: list[str] = []

    @property
    def attributes(self) -> dict[str, str]:
        """What every measurement of this scheduler carries."""
        return dict(self._attributes)

    def before_store_operation(self, operation: StoreOperation) -> Any:
        attributes = {**self._attributes, OPERATION: operation.name}
        span = tracer().start_span(
            f"quartz.jobstore.{operation.name}", kind=SpanKind.CLIENT, attributes=attributes
        )
        token = otel_context.attach(trace.set_span_in_context(span))
        return time.perf_counter(), span, token, attributes

    def after_store_operation(
        self,
        operation: StoreOperation,
        before: Any,
        *,
        result: Any = None,
        exception: BaseException | None = None,
    ) -> None:
        start, span, token, attributes = before
        elapsed = time.perf_counter() - start
        otel_context.detach(token)
        histogram = instruments().store_operation_duration
        if exception is not None:
            span.record_exception(exception)
            span.set_status(Status(StatusCode.ERROR, f"{type(exception).__name__}: {exception}"))
            span.end()
            histogram.record(elapsed, {**attributes, ERROR_TYPE: type(exception).__qualname__})
            return
        span.end()
        histogram.record(elapsed, attributes)
        after = _AFTER.get(operation.name)
        if after is not None:
            try:
                after(self, elapsed, result, operation)
            except Exception:  # a measurement must never fail the operation
                logger.debug("recording %s failed", operation.name, exc_info=True)

    # -- what some operations also record --------------------------------------------------------

    def _acquired(self, elapsed: float, claim: Any, operation: StoreOperation) -> None:
        found = claim if isinstance(claim, list) else [*claim.firings, *claim.acquired]
        instruments().acquisition_duration.record(elapsed, self._attributes)
        if found:
            instruments().acquired.add(len(found), self._attributes)

    def _misfired(self, elapsed: float, result: Any, operation: StoreOperation) -> None:
        handled = result[0]
        if handled:
            instruments().misfire.add(
                handled, {**self._attributes, "quartz.misfire.source": "trigger"}
            )

    def _expired(self, elapsed: float, result: Any, operation: StoreOperation) -> None:
        if result:
            instruments().misfire.add(
                len(result), {**self._attributes, "quartz.misfire.source": "expired_firing"}
            )

    def _checked_in(self, elapsed: float, result: Any, operation: StoreOperation) -> None:
        if operation.kwargs.get("kind", "scheduler") != "scheduler":
            return
        instruments().checkin_duration.record(elapsed, self._attributes)
        instance = operation.args[0] if operation.args else operation.kwargs.get("instance_name")
        if instance == self._instance_id:
            self._previous_checkin_millis = self._last_checkin_millis
            self._last_checkin_millis = to_millis(self._clock.now())

    def _recovered_scheduler(self, elapsed: float, result: Any, operation: StoreOperation) -> None:
        if result is not None and sum(result):
            instruments().recovery.add(sum(result), self._attributes)

    def _recovered_worker(self, elapsed: float, result: Any, operation: StoreOperation) -> None:
        if result is not None and (result.recovered + result.interrupted):
            instruments().recovery.add(result.recovered + result.interrupted, self._attributes)

    def _read_check_ins(self, elapsed: float, rows: Any, operation: StoreOperation) -> None:
        now = to_millis(self._clock.now())
        alive = [
            r
            for r in rows
            if now
            <= failed_after(
                r,
                now_millis=now,
                my_last_checkin_millis=self._previous_checkin_millis,
                threshold_millis=self._threshold_millis,
            )
        ]
        kind = operation.kwargs.get("kind")
        if kind in (None, "scheduler"):
            self.live_schedulers = sorted(r.instance_name for r in alive if r.kind == "scheduler")
        if kind in (None, "worker"):
            self.live_workers = sorted(r.instance_name for r in alive if r.kind == "worker")


_AFTER: dict[str, Callable[[StoreObservation, float, Any, StoreOperation], None]] = {
    "claim": StoreObservation._acquired,
    "acquire_next_triggers": StoreObservation._acquired,
    "handle_misfires": StoreObservation._misfired,
    "resolve_expired_firings": StoreObservation._expired,
    "check_in": StoreObservation._checked_in,
    "recover_scheduler": StoreObservation._recovered_scheduler,
    "recover_worker": StoreObservation._recovered_worker,
    "check_ins": StoreObservation._read_check_ins,
}
