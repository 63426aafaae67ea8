"""The meter, the tracer and Quartz 4.x's eight instruments, with their names, units and meaning.

Everything goes through ``opentelemetry-api``: until the application configures an SDK (a
``MeterProvider``, a ``TracerProvider``), the instruments and spans are the API's no-ops. The
instruments are created once, on the global proxy meter, so an SDK configured later (say, in
Celery's ``worker_process_init``) still receives them.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from opentelemetry import metrics, trace

#: The meter's and the tracer's name: the package's.
NAME = "celery_quartz"
#: Attributes every measurement carries.
SCHEDULER_NAME = "quartz.scheduler.name"
SCHEDULER_ID = "quartz.scheduler.id"
#: The store operation of ``quartz.jobstore.operation.duration`` and of a store span.
OPERATION = "quartz.jobstore.operation"
#: Span attributes of a firing.
JOB_NAME = "quartz.job.name"
JOB_GROUP = "quartz.job.group"
TRIGGER_NAME = "quartz.trigger.name"
TRIGGER_GROUP = "quartz.trigger.group"
TASK_NAME = "quartz.job.task"
FIRE_INSTANCE_ID = "quartz.fire_instance_id"
SCHEDULED_FIRE_TIME = "quartz.scheduled_fire_time"
ERROR_TYPE = "error.type"
#: The execution's result (:class:`celery_quartz.history.RunResult`'s value), on
#: ``quartz.job.execution.duration``.
RESULT = "quartz.job.result"


@dataclass(frozen=True)
class Instruments:
    """The eight instruments (Quartz.NET 4.x's names, units and meaning)."""

    #: Histogram, seconds: one per job execution, ``error.type`` set when it failed.
    execution_duration: Any
    #: Up-down counter: executions in flight in this worker process.
    execution_active: Any
    #: Counter: firings owed and not made on time (late triggers, expired firings).
    misfire: Any
    #: Histogram, seconds: how long the loop waited on its store for the next batch.
    acquisition_duration: Any
    #: Counter: triggers acquired.
    acquired: Any
    #: Histogram, seconds: one scheduler check-in.
    checkin_duration: Any
    #: Counter: triggers recovered from a failed scheduler or worker.
    recovery: Any
    #: Histogram, seconds: one store operation, tagged ``quartz.jobstore.operation``.
    store_operation_duration: Any


_lock = threading.Lock()
_instruments: Instruments | None = None


def instruments() -> Instruments:
    """The package's instruments (created once, on the global meter)."""
    global _instruments
    with _lock:
        if _instruments is None:
            _instruments = _create(meter())
        return _instruments


def meter() -> Any:
    return metrics.get_meter(NAME)


def tracer() -> trace.Tracer:
    return trace.get_tracer(NAME)


#: Histogram buckets in seconds (the SDK's default buckets suit milliseconds): store operations
#: and check-ins at the low end, job executions up to an hour.
SECONDS_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
)  # fmt: skip


def _create(m: Any) -> Instruments:
    buckets = {"explicit_bucket_boundaries_advisory": list(SECONDS_BUCKETS)}
    return Instruments(
        execution_duration=m.create_histogram(
            "quartz.job.execution.duration",
            unit="s",
            description="Duration of job executions",
            **buckets,
        ),
        execution_active=m.create_up_down_counter(
            "quartz.job.execution.active",
            unit="{execution}",
            description="Job executions in progress",
        ),
        misfire=m.create_counter(
            "quartz.trigger.misfire", unit="{misfire}", description="Triggers that misfired"
        ),
        acquisition_duration=m.create_histogram(
            "quartz.trigger.acquisition.duration",
            unit="s",
            description="Time spent acquiring the next triggers from the store",
            **buckets,
        ),
        acquired=m.create_counter(
            "quartz.trigger.acquired", unit="{trigger}", description="Triggers acquired"
        ),
        checkin_duration=m.create_histogram(
            "quartz.cluster.checkin.duration",
            unit="s",
            description="Duration of a check-in",
            **buckets,
        ),
        recovery=m.create_counter(
            "quartz.cluster.recovery.trigger",
            unit="{trigger}",
            description="Triggers recovered from failed cluster nodes",
        ),
        store_operation_duration=m.create_histogram(
            "quartz.jobstore.operation.duration",
            unit="s",
            description="Duration of job store operations",
            **buckets,
        ),
    )


def sdk_configured() -> bool:
    """Whether the application has set a tracer or meter provider (else nothing is recorded,
    and the worker hooks skip their instrumentation altogether)."""
    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return True
    return type(metrics.get_meter_provider()).__name__ not in _UNSET_METER_PROVIDERS


#: The API's meter providers before an SDK is set (the proxy is private to the API).
_UNSET_METER_PROVIDERS = ("_ProxyMeterProvider", "NoOpMeterProvider")
