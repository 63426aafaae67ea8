"""The run history's pages (docs/history.md#pages): the History page (runs over time by result
with duration percentiles, drawn on the server as SVG by :mod:`celery_quartz.dashboard.charts`,
its filters and its rows), the recent runs of a trigger's and a job's page, the Audit page, and
"Run again" of a recorded run. Reads go through the store's ``HistoryReader``; Run again writes
through the :class:`~celery_quartz.Quartz` client, as every other write."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from markupsafe import Markup

from celery_quartz import presentation
from celery_quartz.dashboard import present
from celery_quartz.dashboard.actions import HttpError, invalid
from celery_quartz.dashboard.app import Dashboard
from celery_quartz.dashboard.charts import Bar, Line, Size, stacked_bars
from celery_quartz.dashboard.targets import Target
from celery_quartz.errors import ValidationError
from celery_quartz.history import RUN_RESULTS, RunResult, parse_result
from celery_quartz.keys import DEFAULT_GROUP, JobKey, TriggerKey
from celery_quartz.store.views import (
    MAX_PAGE,
    AuditFilter,
    HistoryCursor,
    HistoryEntry,
    HistoryFilter,
    Statistics,
    TriggerFilter,
)

#: Every result, in the order the bars stack them (runs first, successes at the bottom).
SERIES = tuple(r.value for r in RunResult)
#: The buckets the statistics offer, by the name the filters use.
BUCKETS = {
    "5m": timedelta(minutes=5),
    "1h": timedelta(hours=1),
    "6h": timedelta(hours=6),
    "1d": timedelta(days=1),
}
#: The windows the History page offers in its menu (any ``<n><m|h|d>`` is accepted).
WINDOWS = ("1h", "6h", "24h", "7d", "30d")
#: The most buckets one chart draws.
MAX_BUCKETS = 400
#: Rows on a page of history or audit by default, and runs on a trigger's or a job's page.
PAGE_ROWS = 50
RECENT_RUNS = 15
_DURATION = re.compile(r"^\s*(\d+)\s*([mhd])\s*$")
_UNITS = {"m": 60, "h": 3600, "d": 86400}


# -- query parameters ---------------------------------------------------------------------------


def _text(params: Mapping[str, str], name: str) -> str | None:
    value = params.get(name, "").strip()
    return value or None


def span_of(params: Mapping[str, str], name: str, default: str) -> timedelta:
    """A window such as ``24h``, ``7d`` or ``90m``."""
    text = _text(params, name) or default
    found = _DURATION.match(text)
    if not found or int(found.group(1)) == 0:
        raise invalid(name, f"a number of minutes, hours or days such as 24h or 7d, not {text!r}")
    return timedelta(seconds=int(found.group(1)) * _UNITS[found.group(2)])


def bucket_of(params: Mapping[str, str]) -> timedelta:
    text = _text(params, "bucket") or "1h"
    if text not in BUCKETS:
        raise invalid("bucket", f"one of {', '.join(BUCKETS)}, not {text!r}")
    return BUCKETS[text]


def time_of(params: Mapping[str, str], name: str) -> datetime | None:
    """An ISO 8601 time (UTC when it names no offset), from a form's datetime-local too."""
    text = _text(params, name)
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise invalid(name, f"an ISO 8601 time such as 2026-12-01T02:00, not {text!r}") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def limit_of(params: Mapping[str, str], default: int = PAGE_ROWS) -> int:
    text = params.get("limit") or str(default)
    if not text.isdigit() or not 1 <= int(text) <= MAX_PAGE:
        raise invalid("limit", f"a whole number from 1 to {MAX_PAGE}, not {text!r}")
    return int(text)


def cursor_of(params: Mapping[str, str]) -> HistoryCursor | None:
    """A page's cursor, ``<event time ms>.<row id>`` (the last row of the page before)."""
    text = _text(params, "after")
    if text is None:
        return None
    found = re.fullmatch(r"(-?\d{1,18})\.(\d{1,18})", text)
    if not found:
        raise invalid("after", "not a cursor this page gave (its Next page link)")
    return int(found.group(1)), int(found.group(2))


def encode_cursor(cursor: HistoryCursor | None) -> str | None:
    return None if cursor is None else f"{cursor[0]}.{cursor[1]}"


def history_filter(params: Mapping[str, str]) -> HistoryFilter:
    """``job`` and ``trigger`` are names in the group ``group`` (DEFAULT when none); with
    neither, ``group`` selects the triggers' group. ``result``: one or more, comma-separated."""
    group = _text(params, "group")
    job, trigger = _text(params, "job"), _text(params, "trigger")
    results = None
    if _text(params, "result"):
        try:
            results = frozenset(
                parse_result(r).value for r in params["result"].split(",") if r.strip()
            )
        except ValueError as error:
            raise invalid("result", str(error)) from None
    since, until = time_of(params, "since"), time_of(params, "until")
    if since is not None and until is not None and since >= until:
        raise invalid("until", "must be after since")
    try:
        return HistoryFilter(
            job=None if job is None else JobKey(job, group or DEFAULT_GROUP),
            trigger=None if trigger is None else TriggerKey(trigger, group or DEFAULT_GROUP),
            group=group if job is None and trigger is None else None,
            results=results,
            since=since,
            until=until,
        )
    except ValueError as error:  # a key part too long or empty
        raise invalid("job" if job else "trigger", str(error)) from None


# -- what the pages show ------------------------------------------------------------------------


def entry(e: HistoryEntry, d: Dashboard) -> dict[str, Any]:
    """A history row as the pages show it (arguments redacted as job data is)."""
    return {
        "history_id": e.history_id,
        "event_millis": int(e.event_time.timestamp() * 1000),
        "event_time": presentation.iso(e.event_time),
        "result": e.result,
        "ran": e.result in {r.value for r in RUN_RESULTS},
        "trigger": presentation.key(e.trigger_key),
        "job": None if e.job_key is None else presentation.key(e.job_key),
        "scheduled_time": presentation.iso(e.scheduled_fire_time),
        "started_time": presentation.iso(e.started_time),
        "duration": e.duration,
        "start_lateness": e.start_lateness,
        "error": None if e.error_type is None else f"{e.error_type}: {e.error_message or ''}",
        "worker_name": e.worker_name,
        "instance_name": e.instance_name,
        "retry_attempt": e.retry_attempt,
        "recovering": e.recovering,
        "reason": e.reason,
        "summary": e.summary,
        "recorded_arguments": e.args is not None or e.kwargs is not None,
        "args": None if e.args is None else d.redact(list(e.args)),
        "kwargs": None if e.kwargs is None else d.redact(dict(e.kwargs)),
    }


def chart(stats: Statistics, *, compact: bool = False) -> Markup:
    """The statistics' buckets as bars stacked by result, with p50 and p95 duration lines."""
    wide = stats.until - stats.since > timedelta(days=1)
    form = "%m-%d" if stats.bucket >= timedelta(days=1) else "%m-%d %H:%M" if wide else "%H:%M"
    bars = [Bar(b.start.astimezone(timezone.utc).strftime(form), b.counts) for b in stats.buckets]
    lines = [
        Line("p50 duration", [b.duration_p50 for b in stats.buckets]),
        Line("p95 duration", [b.duration_p95 for b in stats.buckets]),
    ]
    whose = "the whole scheduler" if stats.job is None else f"job {stats.job}"
    title = (
        f"Runs of {whose} by result, {_span(stats.until - stats.since)} by {_span(stats.bucket)}"
    )
    size = Size(360, 70, compact=True) if compact else Size()
    seen = [s for s in SERIES if any(b.counts.get(s) for b in stats.buckets)] or ["succeeded"]
    return Markup(stacked_bars(bars, seen, [] if compact else lines, title=title, size=size))


def _span(span: timedelta) -> str:
    seconds = int(span.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _totals(stats: Statistics) -> dict[str, Any]:
    t = stats.total
    return {
        "counts": {s: t.counts[s] for s in SERIES if t.counts.get(s)},
        "runs": sum(t.counts.values()),
        "duration_p50": t.duration_p50,
        "duration_p95": t.duration_p95,
        "duration_max": t.duration_max,
        "lateness_p95": t.lateness_p95,
    }


# -- reads, as functions of (dashboard, target, query parameters) ------------------------------


def read_history(d: Dashboard, t: Target, params: Mapping[str, str]) -> dict[str, Any]:
    """The History page: the chart of the window (for the job filtered on, or the whole
    scheduler) and a page of rows matching every filter."""
    filters = history_filter(params)
    window = span_of(params, "window", "24h")
    bucket = bucket_of(params)
    if window / bucket > MAX_BUCKETS:
        raise invalid("window", f"at most {MAX_BUCKETS} buckets of {_span(bucket)}")
    try:
        page = t.store.history(filters, after=cursor_of(params), limit=limit_of(params))
        stats = t.store.statistics(
            job=filters.job, window=window, bucket=bucket, until=filters.until
        )
    except ValidationError as error:  # what the store refuses, past the checks above
        raise HttpError(422, "invalid", str(error)) from None
    return {
        "items": [entry(e, d) for e in page.items],
        "next_after": encode_cursor(page.next_after),
        "chart": chart(stats),
        "totals": _totals(stats),
        "chart_of": None if filters.job is None else presentation.key(filters.job),
        "since": presentation.iso(stats.since),
        "until": presentation.iso(stats.until),
        "results": SERIES,
        "windows": WINDOWS,
        "buckets": tuple(BUCKETS),
    }


def recent_runs(d: Dashboard, t: Target, job: JobKey, trigger: TriggerKey | None) -> dict[str, Any]:
    """The last runs (of ``trigger``, or of ``job``) and a small chart of the job's last 24
    hours, for a trigger's or a job's page."""
    filters = HistoryFilter(trigger=trigger) if trigger is not None else HistoryFilter(job=job)
    page = t.store.history(filters, limit=RECENT_RUNS)
    stats = t.store.statistics(job=job, window=timedelta(hours=24), bucket=timedelta(hours=1))
    return {
        "items": [entry(e, d) for e in page.items],
        "chart": chart(stats, compact=True),
        "totals": _totals(stats),
        "more": page.next_after is not None,
    }


def read_job_page(
    d: Dashboard, t: Target, group: str, name: str, params: Mapping[str, str]
) -> dict[str, Any]:
    """A job's page: its definition, its triggers, whether it is past its success deadline,
    and its recent runs."""
    key = JobKey.stored(name, group)
    job = t.store.retrieve_job(key)
    if job is None:
        raise HttpError(404, "not_found", f"job {group}.{name} is not stored")
    deadline = job.require_success_within or d.settings.success_deadlines.get(key)
    late = [s for s in t.store.overdue_jobs(d.settings.success_deadlines) if s.key == key]
    triggers = t.store.list_triggers(TriggerFilter(job=key), limit=MAX_PAGE).items
    return {
        **presentation.job(job, d.redact),
        "deadline": None if deadline is None else _span(deadline),
        "deadline_from_settings": job.require_success_within is None and deadline is not None,
        "overdue": None if not late else present.late_job(late[0]),
        "triggers": [presentation.trigger(v, d.redact) for v in triggers],
        "runs": recent_runs(d, t, key, None),
    }


def read_trigger_page(
    d: Dashboard, t: Target, group: str, name: str, params: Mapping[str, str]
) -> dict[str, Any]:
    """A trigger's page (the API's view of it) with its recent runs."""
    from celery_quartz.dashboard.api import read_trigger

    view = read_trigger(d, t, group, name, params)
    job = JobKey.stored(view["job"]["name"], view["job"]["group"])
    return {**view, "runs": recent_runs(d, t, job, TriggerKey.stored(name, group))}


def read_audit(d: Dashboard, t: Target, params: Mapping[str, str]) -> dict[str, Any]:
    """The Audit page: changes newest first, by principal and time."""
    since, until = time_of(params, "since"), time_of(params, "until")
    filters = AuditFilter(principal=_text(params, "principal"), since=since, until=until)
    try:
        page = t.store.audit(filters, after=cursor_of(params), limit=limit_of(params))
    except ValidationError as error:
        raise HttpError(422, "invalid", str(error)) from None
    return {
        "items": [
            {
                "audit_id": a.audit_id,
                "event_time": presentation.iso(a.event_time),
                "principal": a.principal,
                "via": a.via,
                "action": a.action,
                "target_kind": a.target_kind,
                "target": a.target,
                "changes": a.changes,
            }
            for a in page.items
        ],
        "next_after": encode_cursor(page.next_after),
    }
