"""Observability beside the core: OpenTelemetry metrics and traces, and health over HTTP.

* :mod:`~celery_quartz.observability.instruments`: the meter and tracer (named for the package)
  and Quartz's eight instruments;
* :mod:`~celery_quartz.observability.store`: the store roles, timed and traced at their
  interface (acquisition, misfires, check-in and recovery read from what the roles return);
* :mod:`~celery_quartz.observability.gauges`: gauges read from the store by one node;
* :mod:`~celery_quartz.observability.publishing`: a span per published firing, its context in
  the message;
* :mod:`~celery_quartz.observability.execution`: the worker's execution hooks (a span and the
  execution instruments per job execution, a span per refused start);
* :mod:`~celery_quartz.observability.http`: ``/healthz`` and ``/livez`` for beat.

A worker's ``celery inspect quartz_health`` is its check-in's (:mod:`celery_quartz.worker.checkin`).

Only ``opentelemetry-api`` is required; nothing is recorded until the application configures an
SDK (``pip install 'celery-quartz[otel]'``). See ``docs/observability.md``.
"""

from celery_quartz.observability.instruments import NAME, instruments, sdk_configured

__all__ = ["NAME", "instruments", "sdk_configured"]
