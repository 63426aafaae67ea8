"""The run history's verbs of ``celery -A proj quartz …``: ``history``, ``stats`` and ``audit``
(docs/cli.md#the-run-history).

Each reads through the store's :class:`~celery_quartz.store.abc.HistoryReader`, pages like the
other listings (``--limit``, ``--after`` with the cursor a page printed) and prints ``--json`` in
the HTTP API's shape (:mod:`celery_quartz.presentation`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import click

from celery_quartz import presentation
from celery_quartz.cli_ops import _limit_option, _store, _table, json_option
from celery_quartz.history import NOT_RUN_RESULTS, RunResult, parse_result
from celery_quartz.keys import DEFAULT_GROUP, JobKey, TriggerKey
from celery_quartz.store.views import AuditFilter, HistoryCursor, HistoryFilter

_NOT_RUN = frozenset(r.value for r in NOT_RUN_RESULTS)
#: The verbs, added to the ``quartz`` group by :mod:`celery_quartz.cli`.
HISTORY_COMMANDS: list[click.Command] = []


def _command(fn: click.Command) -> click.Command:
    HISTORY_COMMANDS.append(fn)
    return fn


def _parsed(parse: Callable[[str], Any]) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """A click callback: ``parse`` the option's text, a usage error (exit 2) naming it else."""

    def check(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value is None:
            return None
        try:
            return parse(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None

    return check


_since = click.option(
    "--since",
    callback=_parsed(presentation.parse_time),
    help="From this time (ISO 8601; UTC without an offset), inclusive.",
)
_until = click.option(
    "--until",
    callback=_parsed(presentation.parse_time),
    help="Up to this time (ISO 8601), exclusive.",
)
_history_after = click.option(
    "--after",
    callback=_parsed(presentation.decode_history_cursor),
    help="The cursor a previous page printed (next page).",
)


def _page_end(cursor: HistoryCursor | None) -> None:
    if cursor is not None:
        click.echo(f"more: --after {presentation.encode_history_cursor(cursor)}")


def _seconds(value: float | None) -> str | None:
    return None if value is None else f"{value:.3f}s"


@_command
@click.command()
@click.option("--job", help="Only the runs of this job (its name; -g for its group).")
@click.option("--trigger", help="Only this trigger's occurrences, its retries and recoveries.")
@click.option(
    "-g",
    "--group",
    help=f"The --job's or --trigger's group ({DEFAULT_GROUP} when not given); alone: only "
    "the triggers of this group.",
)
@click.option(
    "--result",
    "results",
    multiple=True,
    callback=_parsed(lambda values: tuple(parse_result(v).value for v in values)),
    help="Only this result (repeat for several): " + ", ".join(r.value for r in RunResult) + ".",
)
@_since
@_until
@_limit_option
@_history_after
@json_option
@click.pass_context
def history(
    ctx: click.Context,
    job: str | None,
    trigger: str | None,
    group: str | None,
    results: tuple[str, ...],
    since: datetime | None,
    until: datetime | None,
    limit: int,
    after: HistoryCursor | None,
    as_json: bool,
) -> None:
    """What ran and what did not, newest first."""
    if job and trigger:
        raise click.UsageError("give --job or --trigger, not both")
    key_group = group or DEFAULT_GROUP
    filters = HistoryFilter(
        job=JobKey(job, key_group) if job else None,
        trigger=TriggerKey(trigger, key_group) if trigger else None,
        group=group if not (job or trigger) else None,
        results=frozenset(results) if results else None,
        since=since,
        until=until,
    )
    with _store(ctx) as store:
        page = store.history(filters, after=after, limit=limit)
    if as_json:
        items = [presentation.history_entry(e) for e in page.items]
        cursor = presentation.encode_history_cursor(page.next_after)
        click.echo(json.dumps({"items": items, "next_after": cursor}, indent=2))
        return
    _table(
        ["time", "result", "trigger", "job", "scheduled", "duration", "late", "worker", "detail"],
        [
            (
                presentation.iso(e.event_time),
                e.result,
                e.trigger_key,
                e.job_key,
                presentation.iso(e.scheduled_fire_time),
                _seconds(e.duration),
                _seconds(e.start_lateness),
                e.worker_name,
                _detail(e.error_type, e.error_message, e.reason, e.summary),
            )
            for e in page.items
        ],
    )
    _page_end(page.next_after)


def _detail(*parts: str | None) -> str | None:
    error_type, message, reason, summary = parts
    if error_type:
        text = f"{error_type}: {message}" if message else error_type
    else:
        text = reason or summary or ""
    text = " ".join(text.split())
    return (text[:77] + "...") if len(text) > 80 else (text or None)


@_command
@click.command()
@click.option(
    "--job", help="One job's statistics (its name; -g for its group); else the whole scheduler."
)
@click.option("-g", "--group", default=DEFAULT_GROUP, show_default=True, help="The --job's group.")
@click.option(
    "--window",
    default="24h",
    show_default=True,
    callback=_parsed(presentation.parse_duration),
    help="How far back: 90m, 24h, 7d, 30d …",
)
@click.option(
    "--bucket",
    default="1h",
    show_default=True,
    callback=_parsed(presentation.parse_duration),
    help="Bucket width: 5m, 1h, 6h or 1d.",
)
@_until
@json_option
@click.pass_context
def stats(
    ctx: click.Context,
    job: str | None,
    group: str,
    window: timedelta,
    bucket: timedelta,
    until: datetime | None,
    as_json: bool,
) -> None:
    """Runs by result, duration and start-lateness percentiles, by bucket."""
    if bucket.total_seconds() not in (300, 3600, 21600, 86400):
        raise click.BadParameter("use 5m, 1h, 6h or 1d", param_hint="--bucket")
    with _store(ctx) as store:
        found = store.statistics(
            job=JobKey(job, group) if job else None, window=window, bucket=bucket, until=until
        )
    if as_json:
        click.echo(json.dumps(presentation.statistics(found), indent=2))
        return
    rows = [*((presentation.iso(b.start), b) for b in found.buckets), ("total", found.total)]
    _table(
        ["bucket", "total", "succeeded", "failed", "not run", "p50", "p95", "max", "late p95"],
        [
            (
                label,
                sum(b.counts.values()),
                b.counts.get(RunResult.SUCCEEDED.value, 0),
                b.counts.get(RunResult.FAILED.value, 0),
                sum(n for r, n in b.counts.items() if r in _NOT_RUN),
                _seconds(b.duration_p50),
                _seconds(b.duration_p95),
                _seconds(b.duration_max),
                _seconds(b.lateness_p95),
            )
            for label, b in rows
        ],
    )


@_command
@click.command()
@click.option("--principal", help="Only the changes of this principal (a user, a token's, …).")
@click.option("--via", help="Only changes made through this: client, cli, api, dashboard, …")
@click.option("--action", help="Only this action (pause_trigger, schedule_job, …).")
@click.option("--target", help="Only changes to this target (GROUP.NAME).")
@_since
@_until
@_limit_option
@_history_after
@json_option
@click.pass_context
def audit(
    ctx: click.Context,
    principal: str | None,
    via: str | None,
    action: str | None,
    target: str | None,
    since: datetime | None,
    until: datetime | None,
    limit: int,
    after: HistoryCursor | None,
    as_json: bool,
) -> None:
    """Who changed what, when, through what, newest first."""
    filters = AuditFilter(
        principal=principal, via=via, action=action, target=target, since=since, until=until
    )
    with _store(ctx) as store:
        page = store.audit(filters, after=after, limit=limit)
    if as_json:
        items = [presentation.audit_entry(e) for e in page.items]
        cursor = presentation.encode_history_cursor(page.next_after)
        click.echo(json.dumps({"items": items, "next_after": cursor}, indent=2))
        return
    _table(
        ["time", "principal", "via", "action", "target", "changes"],
        [
            (
                presentation.iso(e.event_time),
                e.principal,
                e.via,
                e.action,
                e.target,
                None if e.changes is None else _short(json.dumps(e.changes, sort_keys=True)),
            )
            for e in page.items
        ],
    )
    _page_end(page.next_after)


def _short(text: str) -> str:
    return (text[:77] + "...") if len(text) > 80 else text
