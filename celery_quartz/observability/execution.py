"""Worker side: one span and Quartz's two execution instruments per job execution.

:class:`ExecutionInstrumentation` implements the worker's
:class:`~celery_quartz.hooks.ExecutionHooks`: :meth:`~ExecutionInstrumentation.after_start` once a
firing's start is recorded, :meth:`~ExecutionInstrumentation.after_start_refused` when a start is
refused (a duplicate delivery, or a start held back while the store does not answer: Quartz's
veto), and :meth:`~ExecutionInstrumentation.after_end` at the end.

Per execution, in the worker process:

* ``quartz.job.execution.active`` +1 at the start, -1 at the end;
* ``quartz.job.execution.duration`` at the end, with ``quartz.job.result`` (``succeeded`` or
  ``failed``, as the history records it; none when the process was stopped under the task,
  whose result the worker's main process or the recovery records) and ``error.type`` when the
  task raised;
  both tagged with the scheduler (name, and the instance that fired) and the job (name, group);
* a span ``quartz.job.execute`` whose parent is the trace context the message carries (the
  ``quartz.firing.publish`` span beat started), or, when ``opentelemetry-instrumentation-celery``
  already runs a span for the task, that span: ours joins its trace and does not duplicate it.
  The exception is recorded on it. A refused start is a span ``quartz.job.veto``.

Nothing is done, not even a lookup, when the application has configured no OpenTelemetry SDK, and
no store is read: the instrumentation costs the worker no database round trip.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

from celery.states import FAILURE
from opentelemetry import context as context_api
from opentelemetry import trace
from opentelemetry.propagate import extract
from opentelemetry.trace import SpanKind, Status, StatusCode

from celery_quartz.history import RunResult
from celery_quartz.hooks import ExecutionHooks
from celery_quartz.observability.instruments import (
    ERROR_TYPE,
    FIRE_INSTANCE_ID,
    JOB_GROUP,
    JOB_NAME,
    RESULT,
    SCHEDULED_FIRE_TIME,
    SCHEDULER_ID,
    SCHEDULER_NAME,
    TASK_NAME,
    TRIGGER_GROUP,
    TRIGGER_NAME,
    instruments,
    sdk_configured,
    tracer,
)

if TYPE_CHECKING:
    from celery import Task

    from celery_quartz.context import JobExecutionContext
    from celery_quartz.firing import FiringHeader

logger = logging.getLogger(__name__)

_OBSERVED = "quartz_observed"


class ExecutionInstrumentation(ExecutionHooks):
    """The execution instruments and spans (see the module)."""

    def after_start(self, task: Task, context: JobExecutionContext) -> None:
        if not sdk_configured():
            return
        try:
            self._start(task, context)
        except Exception:  # instrumentation must never fail the job
            logger.debug("execution instrumentation failed", exc_info=True)

    def _start(self, task: Task, context: JobExecutionContext) -> None:
        request = task.request
        # The job's key, as Quartz tags its execution instruments: bounded by the jobs stored,
        # and what an alert on "this job has not run" filters by.
        attributes = {
            SCHEDULER_NAME: context.scheduler_name,
            SCHEDULER_ID: context.fired_by,
            JOB_NAME: context.job_key.name,
            JOB_GROUP: context.job_key.group,
        }
        span = tracer().start_span(
            "quartz.job.execute",
            context=_parent(request),
            kind=SpanKind.INTERNAL,
            attributes={
                **attributes,
                TRIGGER_NAME: context.trigger_key.name,
                TRIGGER_GROUP: context.trigger_key.group,
                TASK_NAME: task.name,
                FIRE_INSTANCE_ID: context.fire_instance_id,
                SCHEDULED_FIRE_TIME: context.scheduled_fire_time.isoformat(),
                "quartz.worker.name": context.worker_name or "",
                "quartz.recovering": context.recovering,
                "quartz.retry_attempt": context.retry_attempt,
                "quartz.refire_count": context.refire_count,
            },
        )
        token = context_api.attach(trace.set_span_in_context(span))
        instruments().execution_active.add(1, attributes)
        setattr(request, _OBSERVED, (time.perf_counter(), span, token, attributes))

    def after_start_refused(self, task: Task, header: FiringHeader, reason: str) -> None:
        if not sdk_configured():
            return
        try:
            self._veto(task, header, reason)
        except Exception:
            logger.debug("veto instrumentation failed", exc_info=True)

    def _veto(self, task: Task, header: FiringHeader, reason: str) -> None:
        job, trigger = header.job_key, header.trigger_key
        span = tracer().start_span(
            "quartz.job.veto",
            context=_parent(task.request),
            attributes={
                SCHEDULER_NAME: header.scheduler_name,
                SCHEDULER_ID: header.fired_by,
                JOB_NAME: job.name,
                JOB_GROUP: job.group,
                TRIGGER_NAME: trigger.name,
                TRIGGER_GROUP: trigger.group,
                TASK_NAME: task.name,
                FIRE_INSTANCE_ID: header.fire_instance_id,
                "quartz.veto.reason": reason,
            },
        )
        span.end()

    def after_end(
        self, task: Task, context: JobExecutionContext, state: str | None, result: Any
    ) -> None:
        """End what :meth:`after_start` began."""
        request = task.request
        observed = getattr(request, _OBSERVED, None)
        if observed is None:
            return
        setattr(request, _OBSERVED, None)
        try:
            self._end(observed, state, result)
        except Exception:
            logger.debug("execution instrumentation failed", exc_info=True)

    def _end(self, observed: Any, state: str | None, retval: Any) -> None:
        started, span, token, attributes = observed
        elapsed = time.perf_counter() - started
        failed = state == FAILURE and isinstance(retval, BaseException)
        if failed:
            attributes = {**attributes, ERROR_TYPE: type(retval).__qualname__}
            span.record_exception(retval)
            span.set_status(Status(StatusCode.ERROR, str(retval)))
        elif state is not None:
            span.set_attribute("celery.state", state)
        meters = instruments()
        active = attributes
        if state is not None:
            # Only an exception is a failure (Ignore and Reject end as the store records them:
            # not failed); a retry the policy schedules is known to the store only.
            result = RunResult.FAILED if failed else RunResult.SUCCEEDED
            attributes = {**attributes, RESULT: result.value}
        meters.execution_duration.record(elapsed, attributes)
        meters.execution_active.add(-1, {k: v for k, v in active.items() if k != ERROR_TYPE})
        span.end()
        with contextlib.suppress(Exception):  # detached elsewhere: nothing to restore
            context_api.detach(token)


def _parent(request: Any) -> Any:
    """The current span's context when one is running (opentelemetry-instrumentation-celery's
    task span), else the trace context of the message's headers."""
    current = trace.get_current_span()
    if current.get_span_context().is_valid:
        return None  # the current context
    headers = getattr(request, "headers", None)
    carrier = dict(headers) if isinstance(headers, dict) else {}
    for key in ("traceparent", "tracestate"):
        value = getattr(request, key, None)
        if isinstance(value, str):
            carrier.setdefault(key, value)
    return extract(carrier)
