"""The store's gauges in Prometheus's text format, read by a process that runs no scheduler: the
dashboard serves them on its own ``/metrics`` (docs/history.md#success-deadlines), so that an
alert on a job past its success deadline, or on overdue triggers, still fires when every
scheduler is down. Beat's gauges (:mod:`celery_quartz.observability.gauges`) stop with beat.

The names are those the OpenTelemetry Prometheus exporter gives beat's gauges (dots become
underscores, a unit in seconds appends ``_seconds``), so one alert rule matches either source.
No SDK is needed: the text is written here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from celery_quartz.clock import to_millis
from celery_quartz.health import MAX_OVERDUE_JOBS, overdue_triggers
from celery_quartz.keys import JobKey
from celery_quartz.observability.gauges import since_success

SCHEDULER = "quartz_scheduler_name"


@dataclass(frozen=True)
class Family:
    """One metric: its name, help text, and samples (labels, value)."""

    name: str
    help: str
    samples: list[tuple[dict[str, str], float]] = field(default_factory=list)


def families() -> dict[str, Family]:
    """The metrics served, empty, in the order they are written."""
    found = [
        Family("quartz_store_up", "1 when the store answered this scrape, 0 when it did not"),
        Family("quartz_trigger_count", "Stored triggers by state"),
        Family("quartz_trigger_overdue", "Triggers due by more than the misfire threshold"),
        Family(
            "quartz_trigger_oldest_due_age_seconds",
            "Seconds since the earliest next fire time of a BLOCKED or ERROR trigger",
        ),
        Family("quartz_job_overdue", "1 for each job past its success deadline"),
        Family(
            "quartz_job_since_success_seconds",
            "Seconds since the last success of a job past its success deadline",
        ),
    ]
    return {f.name: f for f in found}


def read_store(
    into: dict[str, Family],
    scheduler: str,
    reader: Any,
    deadlines: dict[JobKey, timedelta],
    now: datetime,
) -> None:
    """Add ``scheduler``'s samples, read through ``reader`` (a ``StoreReader`` and
    ``HistoryReader``), to ``into``; a store that does not answer is ``quartz_store_up 0``."""
    base = {SCHEDULER: scheduler}
    try:
        summary = reader.trigger_summary()
        late = reader.overdue_jobs(deadlines, limit=MAX_OVERDUE_JOBS)
    except Exception:
        into["quartz_store_up"].samples.append((base, 0))
        return
    into["quartz_store_up"].samples.append((base, 1))
    for state, s in sorted(summary.items()):
        into["quartz_trigger_count"].samples.append(
            ({**base, "quartz_trigger_state": state}, s.count)
        )
    into["quartz_trigger_overdue"].samples.append((base, overdue_triggers(summary)))
    millis = to_millis(now)
    for state in ("BLOCKED", "ERROR"):
        s = summary.get(state)
        earliest = s.earliest_next_fire_time if s else None
        age = 0.0 if earliest is None else max(0.0, (millis - to_millis(earliest)) / 1000)
        into["quartz_trigger_oldest_due_age_seconds"].samples.append(
            ({**base, "quartz_trigger_state": state}, age)
        )
    for status in late:
        labels = {**base, "quartz_job_group": status.key.group, "quartz_job_name": status.key.name}
        into["quartz_job_overdue"].samples.append((labels, 1))
        into["quartz_job_since_success_seconds"].samples.append(
            (labels, round(since_success(status, now), 3))
        )


def prometheus_text(found: Iterable[Family]) -> str:
    """The families in Prometheus's text exposition format (version 0.0.4)."""
    lines: list[str] = []
    for family in found:
        lines.append(f"# HELP {family.name} {_help(family.help)}")
        lines.append(f"# TYPE {family.name} gauge")
        for labels, value in family.samples:
            lines.append(f"{family.name}{_labels(labels)} {_value(value)}")
    return "\n".join(lines) + "\n"


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _value(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


__all__: Sequence[str] = ("Family", "families", "prometheus_text", "read_store")
