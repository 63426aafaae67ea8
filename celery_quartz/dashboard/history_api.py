"""The HTTP API's reads of the run history (docs/api.md#the-run-history): ``…/history``,
``…/history/misfires``, ``…/stats``, ``…/job-status`` and ``…/audit``, in the CLI's JSON
(:mod:`celery_quartz.presentation`). A bad query parameter is a 400 naming it."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

from celery_quartz import presentation
from celery_quartz.dashboard.actions import HttpError
from celery_quartz.dashboard.app import Dashboard
from celery_quartz.dashboard.targets import Target
from celery_quartz.errors import ValidationError
from celery_quartz.history import NOT_RUN_RESULTS, parse_result
from celery_quartz.keys import JobKey, TriggerKey
from celery_quartz.store.views import MAX_PAGE, AuditFilter, HistoryFilter

#: The times a query may name: a stored time is epoch milliseconds in UTC.
EARLIEST = datetime(1970, 1, 1, tzinfo=timezone.utc)
LATEST = datetime(9000, 1, 1, tzinfo=timezone.utc)
#: Bucket widths of ``…/stats``.
BUCKETS = {"5m": 300, "1h": 3600, "6h": 21600, "1d": 86400}
T = TypeVar("T")


def bad(field: str, message: str) -> HttpError:
    """A query parameter at fault: 400, naming it."""
    return HttpError(400, "invalid", f"{field}: {message}", field)


def _text(params: Mapping[str, str], name: str) -> str | None:
    value = params.get(name)
    return value if value else None


def _parsed(params: Mapping[str, str], name: str, parse: Callable[[str], T]) -> T | None:
    text = _text(params, name)
    if text is None:
        return None
    try:
        return parse(text)
    except (ValueError, OverflowError) as exc:
        raise bad(name, str(exc)) from None


def _time(params: Mapping[str, str], name: str) -> datetime | None:
    value = _parsed(params, name, presentation.parse_time)
    if value is not None and not EARLIEST <= value < LATEST:
        raise bad(name, f"a time from {EARLIEST.year} to {LATEST.year}")
    return value


def _limit(params: Mapping[str, str]) -> int:
    text = params.get("limit")
    if text is None:
        return 100
    if not text.isdigit() or not 1 <= int(text) <= MAX_PAGE:
        raise bad("limit", f"a whole number from 1 to {MAX_PAGE}, not {text!r}")
    return int(text)


def _key(params: Mapping[str, str], prefix: str) -> tuple[str, str] | None:
    """(group, name) of ``<prefix>_group`` and ``<prefix>_name``, given both or neither."""
    group, name = _text(params, f"{prefix}_group"), _text(params, f"{prefix}_name")
    if (group is None) != (name is None):
        raise bad(f"{prefix}_name" if name is None else f"{prefix}_group", "give both or neither")
    return None if group is None or name is None else (group, name)


def _results(params: Mapping[str, str], within: frozenset[str] | None = None) -> frozenset[str]:
    text = _text(params, "result")
    if text is None:
        return within or frozenset()
    try:
        results = frozenset(parse_result(part).value for part in text.split(","))
    except ValueError as exc:
        raise bad("result", str(exc)) from None
    if within is not None and not results <= within:
        raise bad("result", f"one of {', '.join(sorted(within))} here")
    return results


def _refused(field: str, error: ValidationError) -> HttpError:
    return bad(field, str(error))


def _history_page(
    d: Dashboard, t: Target, params: Mapping[str, str], within: frozenset[str] | None
) -> dict[str, Any]:
    job, trigger = _key(params, "job"), _key(params, "trigger")
    results = _results(params, within)
    filters = HistoryFilter(
        job=None if job is None else JobKey.stored(job[1], job[0]),
        trigger=None if trigger is None else TriggerKey.stored(trigger[1], trigger[0]),
        group=_text(params, "group"),
        results=results or None,
        since=_time(params, "since"),
        until=_time(params, "until"),
    )
    after = _parsed(params, "after", presentation.decode_history_cursor)
    try:
        page = t.store.history(filters, after=after, limit=_limit(params))
    except ValidationError as error:
        raise _refused("result", error) from None
    return {
        "items": [presentation.history_entry(e, d.redact) for e in page.items],
        "next_after": presentation.encode_history_cursor(page.next_after),
    }


def read_history(d: Dashboard, t: Target, params: Mapping[str, str]) -> dict[str, Any]:
    return _history_page(d, t, params, None)


def read_misfires(d: Dashboard, t: Target, params: Mapping[str, str]) -> dict[str, Any]:
    """The occurrences owed and not run: misfired, expired, held, skipped."""
    return _history_page(d, t, params, frozenset(r.value for r in NOT_RUN_RESULTS))


def read_stats(d: Dashboard, t: Target, params: Mapping[str, str]) -> dict[str, Any]:
    job = _key(params, "job")
    window = _parsed(params, "window", presentation.parse_duration) or timedelta(hours=24)
    bucket_text = params.get("bucket", "1h")
    if bucket_text not in BUCKETS:
        raise bad("bucket", f"one of {', '.join(BUCKETS)}, not {bucket_text!r}")
    try:
        found = t.store.statistics(
            job=None if job is None else JobKey.stored(job[1], job[0]),
            window=window,
            bucket=timedelta(seconds=BUCKETS[bucket_text]),
            until=_time(params, "until"),
        )
    except ValidationError as error:
        raise _refused("window", error) from None
    return presentation.statistics(found)


def read_job_status(d: Dashboard, t: Target, params: Mapping[str, str]) -> dict[str, Any]:
    """Each job's runs in short with its success deadline; ``overdue=true``: only the jobs
    past it, oldest due first (one page)."""
    overdue = params.get("overdue", "false").lower()
    if overdue not in ("true", "false"):
        raise bad("overdue", f"true or false, not {overdue!r}")
    limit = _limit(params)
    if overdue == "true":
        items = t.store.overdue_jobs(limit=limit)
        return {"items": [presentation.run_status(s) for s in items], "next_after": None}
    group, name = _text(params, "group"), _text(params, "name")
    if name is not None and group is None:
        raise bad("group", "give the group of name")
    after = _parsed(params, "after", _decode_key)
    page = t.store.run_status(kind="job", group=group, name=name, after=after, limit=limit)
    return {
        "items": [presentation.run_status(s) for s in page.items],
        "next_after": None if page.next_after is None else _encode_key(page.next_after),
    }


def read_audit(d: Dashboard, t: Target, params: Mapping[str, str]) -> dict[str, Any]:
    filters = AuditFilter(
        principal=_text(params, "principal"),
        via=_text(params, "via"),
        action=_text(params, "action"),
        target=_text(params, "target"),
        since=_time(params, "since"),
        until=_time(params, "until"),
    )
    after = _parsed(params, "after", presentation.decode_history_cursor)
    page = t.store.audit(filters, after=after, limit=_limit(params))
    return {
        "items": [presentation.audit_entry(e, d.redact) for e in page.items],
        "next_after": presentation.encode_history_cursor(page.next_after),
    }


def _encode_key(key: tuple[str, str]) -> str:
    raw = json.dumps(list(key), separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_key(text: str) -> tuple[str, str]:
    try:
        group, name = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        if isinstance(group, str) and isinstance(name, str) and "\x00" not in group + name:
            return group, name
    except (binascii.Error, ValueError, TypeError):
        pass
    raise ValueError("not a cursor this API returned (next_after of a page)")
