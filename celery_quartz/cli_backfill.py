"""``celery quartz backfill``: run a past range of a trigger's occurrences, each once
(docs/steering.md#backfill)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import click

from celery_quartz import presentation
from celery_quartz.backfill import DEFAULT_MAX_SLOTS, BackfillError
from celery_quartz.cli_ops import _client, _group_option, _store, _trigger_key, json_option

BACKFILL_COMMANDS: list[click.Command] = []


def _time(ctx: click.Context, param: click.Parameter, value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        return presentation.parse_time(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command()
@click.argument("name")
@_group_option("The trigger's group.")
@click.option(
    "--from",
    "start",
    required=True,
    callback=_time,
    help="The range's start (ISO 8601; UTC without an offset), inclusive.",
)
@click.option(
    "--to",
    "end",
    required=True,
    callback=_time,
    help="The range's end (ISO 8601), exclusive; not in the future.",
)
@click.option(
    "--max-slots",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_SLOTS,
    show_default=True,
    help="Refuse the whole backfill when the range holds more slots than this.",
)
@click.option(
    "--spacing",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Seconds between the slots' firings (the first at once).",
)
@click.option(
    "--include-succeeded",
    is_flag=True,
    help="Run again the slots whose occurrence already succeeded (skipped otherwise).",
)
@click.option("--dry-run", is_flag=True, help="Count the slots and say what would be done.")
@json_option
@click.pass_context
def backfill(
    ctx: click.Context,
    name: str,
    group: str,
    start: datetime,
    end: datetime,
    max_slots: int,
    spacing: float,
    include_succeeded: bool,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Run each past occurrence of a trigger in [--from, --to) once: its fire times, its
    calendar applied. A slot scheduled by an earlier backfill is not scheduled again, and one
    that already succeeded is skipped unless --include-succeeded."""
    key = _trigger_key(name, group)
    with _store(ctx) as store:
        try:
            result = _client(ctx, store).backfill(
                key,
                start,
                end,
                max_slots=max_slots,
                spacing=timedelta(seconds=spacing),
                dry_run=dry_run,
                include_succeeded=include_succeeded,
            )
        except BackfillError as exc:
            raise click.UsageError(str(exc)) from None
    if as_json:
        click.echo(json.dumps(presentation.backfill(result), indent=2))
        return
    verb = "would schedule" if dry_run else "scheduled"
    click.echo(
        f"backfill of trigger {key}: {result.slots_found} slot(s) found, {verb} "
        f"{result.scheduled}, {result.already_scheduled} already scheduled, "
        f"{result.already_succeeded} already succeeded"
    )
    for slot in result.slots:
        due = f" (fires {presentation.iso(slot.fire_at)})" if slot.fire_at is not None else ""
        click.echo(f"  {presentation.iso(slot.slot)}  {slot.outcome.value}{due}")


BACKFILL_COMMANDS.append(backfill)
