"""An OpenTelemetry SDK for the integration tests' processes: spans and metrics written as JSON
lines to a directory, one file per process and signal, read back by the tests."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def configure_sdk(directory: str) -> None:
    """Spans exported as each ends, metrics every half second, to ``directory``."""
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import (
        ConsoleMetricExporter,
        PeriodicExportingMetricReader,
    )
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

    pid = os.getpid()
    spans = open(Path(directory) / f"spans-{pid}.jsonl", "a", buffering=1)  # noqa: SIM115
    points = open(Path(directory) / f"metrics-{pid}.jsonl", "a", buffering=1)  # noqa: SIM115
    provider = TracerProvider()
    provider.add_span_processor(
        SimpleSpanProcessor(
            ConsoleSpanExporter(out=spans, formatter=lambda s: s.to_json(indent=None) + "\n")
        )
    )
    trace.set_tracer_provider(provider)
    reader = PeriodicExportingMetricReader(
        ConsoleMetricExporter(out=points, formatter=lambda m: m.to_json(indent=None) + "\n"),
        export_interval_millis=500,
    )
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))


def read_spans(directory: Path) -> list[dict[str, Any]]:
    found = []
    for path in directory.glob("spans-*.jsonl"):
        for line in path.read_text().splitlines():
            if line.strip():
                found.append(json.loads(line))
    return found


def read_points(directory: Path) -> dict[str, list[dict[str, Any]]]:
    """Every data point exported, by instrument name, each with the file's pid as ``_pid``."""
    found: dict[str, list[dict[str, Any]]] = {}
    for path in directory.glob("metrics-*.jsonl"):
        pid = path.stem.split("-")[1]
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            for resource in json.loads(line)["resource_metrics"]:
                for scope in resource["scope_metrics"]:
                    for metric in scope["metrics"]:
                        for point in metric["data"]["data_points"]:
                            found.setdefault(metric["name"], []).append({**point, "_pid": pid})
    return found


def latest_exports(directory: Path) -> dict[str, set[str]]:
    """The instruments with data points in each process's latest metrics export, by pid."""
    found: dict[str, set[str]] = {}
    for path in directory.glob("metrics-*.jsonl"):
        lines = [line for line in path.read_text().splitlines() if line.strip()]
        names: set[str] = set()
        if lines:
            for resource in json.loads(lines[-1])["resource_metrics"]:
                for scope in resource["scope_metrics"]:
                    for metric in scope["metrics"]:
                        if metric["data"]["data_points"]:
                            names.add(metric["name"])
        found[path.stem.split("-")[1]] = names
    return found
