"""One OpenTelemetry SDK per test process, read back in memory (the global providers can be set
only once per process): metric points and finished spans, filtered by what a test owns."""

from __future__ import annotations

from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

_sdk: tuple[InMemoryMetricReader, InMemorySpanExporter] | None = None


def sdk() -> tuple[InMemoryMetricReader, InMemorySpanExporter]:
    """The process's in-memory metric reader and span exporter (configured at the first call)."""
    global _sdk
    if _sdk is None:
        reader = InMemoryMetricReader()
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        _sdk = (reader, exporter)
    return _sdk


def points(name: str, **attributes: Any) -> list[Any]:
    """The data points of instrument ``name`` whose attributes include ``attributes`` (dots in
    attribute names written as double underscores)."""
    reader, _ = sdk()
    wanted = {k.replace("__", "."): v for k, v in attributes.items()}
    data = reader.get_metrics_data()
    found = []
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name != name:
                    continue
                for point in metric.data.data_points:
                    if all(point.attributes.get(k) == v for k, v in wanted.items()):
                        found.append(point)
    return found


def spans(name: str | None = None) -> list[ReadableSpan]:
    _, exporter = sdk()
    return [s for s in exporter.get_finished_spans() if name is None or s.name == name]
