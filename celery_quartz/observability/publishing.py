"""One span per firing beat publishes, its context carried to the worker in the message.

:class:`PublishTracing` implements the publisher's :class:`~celery_quartz.hooks.PublishHooks`:
for each firing of a batch it starts a ``quartz.firing.publish`` span (kind PRODUCER, the firing's
job, trigger, task and fire instance id as attributes) and adds its W3C trace context to the message
headers (``traceparent``, ``tracestate``), on the Celery path and the Redis path alike. On the
Celery path the span is also the current one while ``send_task`` runs, so an application that uses
``opentelemetry-instrumentation-celery`` gets its ``apply_async`` span as a child of ours (and its
injected context, which then wins, is still in our trace).

With no tracer provider configured the spans are not recording and nothing is added to messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from opentelemetry import trace
from opentelemetry.propagate import inject
from opentelemetry.trace import SpanKind, Status, StatusCode

from celery_quartz.clock import from_millis
from celery_quartz.firing import Firing
from celery_quartz.hooks import PublishHooks
from celery_quartz.observability.instruments import (
    FIRE_INSTANCE_ID,
    JOB_GROUP,
    JOB_NAME,
    SCHEDULED_FIRE_TIME,
    SCHEDULER_ID,
    SCHEDULER_NAME,
    TASK_NAME,
    TRIGGER_GROUP,
    TRIGGER_NAME,
    sdk_configured,
    tracer,
)


def firing_attributes(firing: Firing) -> dict[str, Any]:
    return {
        JOB_NAME: firing.job_key.name,
        JOB_GROUP: firing.job_key.group,
        TRIGGER_NAME: firing.trigger_key.name,
        TRIGGER_GROUP: firing.trigger_key.group,
        TASK_NAME: firing.task,
        FIRE_INSTANCE_ID: firing.fire_instance_id,
        SCHEDULED_FIRE_TIME: from_millis(firing.scheduled_millis).isoformat(),
    }


class PublishTracing(PublishHooks):
    """Spans for published firings (see the module)."""

    def __init__(self, instance_id: str) -> None:
        self.instance_id = instance_id
        self._spans: dict[str, trace.Span] = {}

    def before_publish(self, firings: Sequence[Firing]) -> dict[str, dict[str, str]]:
        if not sdk_configured():
            return {}
        t = tracer()
        extra: dict[str, dict[str, str]] = {}
        for firing in firings:
            span = t.start_span(
                "quartz.firing.publish",
                kind=SpanKind.PRODUCER,
                attributes={
                    **firing_attributes(firing),
                    SCHEDULER_NAME: firing.scheduler_name,
                    SCHEDULER_ID: self.instance_id,
                },
            )
            if not span.is_recording():
                continue
            self._spans[firing.fire_instance_id] = span
            carrier: dict[str, str] = {}
            inject(carrier, context=trace.set_span_in_context(span))
            if carrier:
                extra[firing.fire_instance_id] = carrier
        return extra

    def sending(self, firing: Firing) -> AbstractContextManager[Any]:
        span = self._spans.get(firing.fire_instance_id)
        if span is None:
            return nullcontext()
        return trace.use_span(span, end_on_exit=False)

    def after_publish(self, firings: Sequence[Firing], error: BaseException | None) -> None:
        for firing in firings:
            span = self._spans.pop(firing.fire_instance_id, None)
            if span is None:
                continue
            if error is not None:
                span.record_exception(error)
                span.set_status(Status(StatusCode.ERROR, str(error)))
            span.end()
