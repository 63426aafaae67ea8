"""The operators' verbs of ``celery -A proj quartz …``: list jobs, triggers, firings and nodes;
pause, resume, trigger, reset, unschedule, delete and re-pin; preview fire times; import from
django-celery-beat and redbeat.

Each verb reads through the store's read side (:class:`~celery_quartz.store.abc.StoreReader`)
and writes through the :class:`~celery_quartz.Quartz` client, never with SQL of its own. Each
takes ``--json`` for scripts, in the HTTP API's shape (:mod:`celery_quartz.presentation`).
Errors are translated to one line by the ``quartz`` group (:mod:`celery_quartz.cli`).
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any

import click

from celery_quartz import presentation
from celery_quartz.config import Settings
from celery_quartz.keys import DEFAULT_GROUP, JobKey, TriggerKey
from celery_quartz.store import ClientStore, TriggerState, open_store
from celery_quartz.store.schema import FIRING_STATES, STORED_TRIGGER_STATES
from celery_quartz.store.views import (
    MAX_PAGE,
    FiringFilter,
    JobFilter,
    Progress,
    TriggerFilter,
    TriggerView,
)
from celery_quartz.triggers.base import Trigger

OPERATOR_COMMANDS: list[click.Command] = []


def _command(fn: click.Command) -> click.Command:
    OPERATOR_COMMANDS.append(fn)
    return fn


#: Where ``--store NAME`` leaves the name, in the root context's ``meta``.
_STORE_META = "celery_quartz.store"


def settings_of(ctx: click.Context) -> Settings:
    """The app's settings, on the store ``--store NAME`` named (one of
    ``quartz_dashboard_stores``) when given."""
    root = ctx.find_root()
    settings = Settings.from_app(root.obj.app)
    name = root.meta.get(_STORE_META)
    return settings if name is None else settings.for_store(name)


def _remember_store(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.find_root().meta[_STORE_META] = value


def add_store_option(command: click.Command) -> None:
    """Give ``command`` the ``--store NAME`` option: its store is the one of
    ``quartz_dashboard_stores`` so named instead of ``quartz_store_url``."""
    command.params.append(
        click.Option(
            ["--store", "store_name"],
            metavar="NAME",
            expose_value=False,
            is_eager=True,
            callback=_remember_store,
            help="Use the store of this name in quartz_dashboard_stores.",
        )
    )


@contextmanager
def _store(ctx: click.Context) -> Iterator[ClientStore]:
    """The store of the app's settings, without creating tables: an operator's look at a store
    that has none says so (see :func:`celery_quartz.cli.describe_error`)."""
    store = open_store(settings_of(ctx))
    try:
        yield store
    finally:
        store.dispose()


def _publisher(ctx: click.Context) -> Any:
    """The app's publisher, for where it routes a firing (the CLI publishes nothing)."""
    from celery_quartz.publisher import Publisher

    return Publisher(ctx.find_root().obj.app)


def _client(ctx: click.Context, store: ClientStore) -> Any:
    from celery_quartz.client import Quartz

    return Quartz(ctx.find_root().obj.app, store=store)


# -- output ------------------------------------------------------------------------------------


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[("-" if v is None else str(v)) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    click.echo("  ".join(h.upper().ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    for row in cells:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def _encode_cursor(key: JobKey | TriggerKey | None) -> str | None:
    """A page's cursor as one opaque word (groups and names may hold any character)."""
    if key is None:
        return None
    raw = json.dumps([key.group, key.name], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(text: str | None, kind: type[JobKey] | type[TriggerKey]) -> Any:
    if not text:
        return None
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        group, name = json.loads(raw)
        return kind(name, group)
    except Exception:
        raise click.BadParameter(
            f"{text!r} is not a cursor printed by a previous page", param_hint="--after"
        ) from None


def _page_end(next_after: str | None, as_json: bool) -> None:
    if next_after is not None and not as_json:
        click.echo(f"more: --after {next_after}")


def _job_key(spec: str, group: str) -> JobKey:
    return JobKey(spec, group)


def _trigger_key(spec: str, group: str) -> TriggerKey:
    return TriggerKey(spec, group)


def _pin(trigger: Trigger) -> str | None:
    node, automatic = trigger.preferred_node.to_columns()
    if automatic:
        return f"*:{node}" if node else "*"
    return node


def _schedule_text(trigger: Trigger) -> str:
    detail = trigger.detail()
    if "expression" in detail:
        return f"cron {detail['expression']} {detail.get('time_zone') or ''}".rstrip()
    return f"{trigger.kind} " + ", ".join(f"{k}={v}" for k, v in sorted(detail.items()))


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
_limit_option = click.option(
    "--limit",
    type=click.IntRange(1, MAX_PAGE),
    default=100,
    show_default=True,
    help="Rows per page.",
)
_after_option = click.option("--after", help="The cursor a previous page printed (next page).")


def _progress_text(progress: Progress | None) -> str:
    """A running firing's last progress report: ``42% copying rows``."""
    if progress is None:
        return ""
    text = f"{progress.percent:.0f}%"
    return f"{text} {progress.message}" if progress.message else text


def _state_text(view: TriggerView) -> str:
    """A trigger's state, with its pause's reason and who paused it when it has them."""
    pause = view.pause
    if pause is None:
        return view.state
    why = f"{pause.reason}, " if pause.reason else ""
    return f"{view.state} ({why}by {pause.requested_by})"


def _group_option(help_text: str = "The key's group.") -> Callable[[Any], Any]:
    return click.option("-g", "--group", default=DEFAULT_GROUP, show_default=True, help=help_text)


def _state_option(what: str, states: Sequence[str]) -> Callable[[Any], Any]:
    """``--state``, in any case; another word is a usage error naming the states there are."""

    def check(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        if value is None or value.upper() in states:
            return None if value is None else value.upper()
        raise click.BadParameter(f"{value!r} is not a {what} state; use one of {', '.join(states)}")

    return click.option(
        "--state", callback=check, help=f"Only {what}s in this state: {', '.join(states)}."
    )


# -- listings ----------------------------------------------------------------------------------


@_command
@click.command()
@click.option("--group", help="Only jobs of this group.")
@click.option("--task", help="Only jobs of this Celery task.")
@_limit_option
@_after_option
@json_option
@click.pass_context
def jobs(
    ctx: click.Context,
    group: str | None,
    task: str | None,
    limit: int,
    after: str | None,
    as_json: bool,
) -> None:
    """List stored jobs by group and name."""
    with _store(ctx) as store:
        page = store.list_jobs(
            JobFilter(group=group, task=task),
            after=_decode_cursor(after, JobKey),
            limit=limit,
        )
    cursor = _encode_cursor(page.next_after)
    if as_json:
        items = [presentation.job(job) for job in page.items]
        click.echo(json.dumps({"items": items, "next_after": cursor}, indent=2))
        return
    _table(
        ["group", "name", "task", "durable", "description"],
        [(j.key.group, j.key.name, j.task, j.durable, j.description) for j in page.items],
    )
    _page_end(cursor, as_json)


@_command
@click.command()
@click.option("--group", help="Only triggers of this group.")
@_state_option("trigger", STORED_TRIGGER_STATES)
@click.option("--execution-group", help="Only triggers of this execution group.")
@click.option("--node", help="Only triggers pinned to this worker (its node name).")
@click.option("--task", help="Only triggers of jobs of this Celery task.")
@click.option("--job", help="Only the triggers of this job (its name; --job-group for its group).")
@click.option("--job-group", default=DEFAULT_GROUP, show_default=True, help="The --job's group.")
@_limit_option
@_after_option
@json_option
@click.pass_context
def triggers(
    ctx: click.Context,
    group: str | None,
    state: str | None,
    execution_group: str | None,
    node: str | None,
    task: str | None,
    job: str | None,
    job_group: str,
    limit: int,
    after: str | None,
    as_json: bool,
) -> None:
    """List stored triggers with their state and next fire time."""
    filters = TriggerFilter(
        group=group,
        state=state,
        execution_group=execution_group,
        preferred_node=node,
        task=task,
        job=JobKey(job, job_group) if job else None,
    )
    with _store(ctx) as store:
        page = store.list_triggers(filters, after=_decode_cursor(after, TriggerKey), limit=limit)
    cursor = _encode_cursor(page.next_after)
    if as_json:
        items = [presentation.trigger(view) for view in page.items]
        click.echo(json.dumps({"items": items, "next_after": cursor}, indent=2))
        return
    _table(
        ["group", "name", "state", "next fire time", "schedule", "job", "exec group", "pin"],
        [
            (
                v.key.group,
                v.key.name,
                _state_text(v),
                presentation.iso(v.trigger.next_fire_time),
                _schedule_text(v.trigger),
                v.trigger.job_key,
                v.trigger.execution_group,
                _pin(v.trigger),
            )
            for v in page.items
        ],
    )
    _page_end(cursor, as_json)


@_command
@click.command()
@_state_option("firing", FIRING_STATES)
@click.option("--trigger", help="Only firings of this trigger (its name; --trigger-group).")
@click.option("--trigger-group", default=DEFAULT_GROUP, show_default=True)
@click.option("--job", help="Only firings of this job (its name; --job-group).")
@click.option("--job-group", default=DEFAULT_GROUP, show_default=True)
@click.option("--scheduler", help="Only firings claimed by this scheduler instance.")
@click.option("--worker", help="Only firings started on this worker.")
@click.option("--execution-group", help="Only firings of this execution group.")
@click.option("--limit", type=click.IntRange(1, MAX_PAGE), default=100, show_default=True)
@_after_option
@json_option
@click.pass_context
def firings(
    ctx: click.Context,
    state: str | None,
    trigger: str | None,
    trigger_group: str,
    job: str | None,
    job_group: str,
    scheduler: str | None,
    worker: str | None,
    execution_group: str | None,
    limit: int,
    after: str | None,
    as_json: bool,
) -> None:
    """List the firings in flight, cluster-wide."""
    filters = FiringFilter(
        state=state,
        trigger=TriggerKey(trigger, trigger_group) if trigger else None,
        job=JobKey(job, job_group) if job else None,
        instance_name=scheduler,
        worker_name=worker,
        execution_group=execution_group,
    )
    with _store(ctx) as store:
        page = store.list_firings(filters, after=after or None, limit=limit)
        views = presentation.with_queues(page.items, store, _publisher(ctx).queue_of)
    if as_json:
        items = [presentation.firing(view) for view in views]
        click.echo(json.dumps({"items": items, "next_after": page.next_after}, indent=2))
        return
    _table(
        [
            "fire instance",
            "trigger",
            "state",
            "scheduled",
            "scheduler",
            "worker",
            "queue",
            "progress",
        ],
        [
            (
                f.fire_instance_id,
                f.trigger_key,
                f.state,
                presentation.iso(f.scheduled_time),
                f.instance_name,
                f.worker_name,
                f.queue,
                _progress_text(f.progress),
            )
            for f in views
        ],
    )
    _page_end(page.next_after, as_json)


@_command
@click.command()
@click.option("--kind", type=click.Choice(["scheduler", "worker"]), help="Only this kind.")
@click.option("--check", is_flag=True, help="Exit 1 when a node listed is not alive.")
@json_option
@click.pass_context
def nodes(ctx: click.Context, kind: str | None, check: bool, as_json: bool) -> None:
    """The scheduler and worker processes that check in, and whether each is alive."""
    with _store(ctx) as store:
        views = [v for v in store.list_nodes() if kind is None or v.kind == kind]
    if as_json:
        click.echo(json.dumps({"items": [presentation.node(v) for v in views]}, indent=2))
    elif not views:
        click.echo("no scheduler or worker has checked in")
    else:
        _table(
            ["kind", "instance", "alive", "last check-in", "host", "pid", "queues"],
            [
                (
                    v.kind,
                    v.instance_name,
                    "yes" if v.alive else "NO",
                    presentation.iso(v.last_checkin_time),
                    v.hostname,
                    v.pid,
                    ",".join(v.queues) if v.queues else None,
                )
                for v in views
            ],
        )
    if check and not all(v.alive for v in views):
        ctx.exit(1)


# -- control -----------------------------------------------------------------------------------


#: The states a trigger is in once paused, and once resumed. Quartz's job store pauses only a
#: WAITING, ACQUIRED or BLOCKED trigger and resumes only a paused one: one in ERROR or
#: COMPLETE stays as it is (JobStoreSupport.PauseTrigger, ResumeTrigger).
_OUTCOMES = {
    "pause": (TriggerState.PAUSED, TriggerState.PAUSED_BLOCKED),
    "resume": (
        TriggerState.WAITING,
        TriggerState.ACQUIRED,
        TriggerState.BLOCKED,
        TriggerState.EXECUTING,
    ),
}


def _check_outcome(verb: str, key: TriggerKey, state: str) -> None:
    """Fail, naming the state, when ``verb`` left the trigger ``key`` in a state it does not
    lead to (a trigger in ERROR or COMPLETE is neither paused nor resumed)."""
    if state in _OUTCOMES[verb]:
        return
    hint = " (`reset-trigger` returns it to its schedule)" if state == TriggerState.ERROR else ""
    raise _Failed(
        f"trigger {key} is {state}, not {verb}d: {verb} leaves a trigger in {state} as it is, "
        f"as Quartz does{hint}"
    )


def _done(as_json: bool, verb: str, what: str, **extra: Any) -> None:
    if as_json:
        click.echo(json.dumps({"done": verb, "target": what, **extra}))
    else:
        click.echo(f"{verb}: {what}" + "".join(f", {k} {v}" for k, v in extra.items()))


def _kind_command(verb: str, description: str) -> click.Command:
    @click.command(name=verb, help=description)
    @click.argument("kind", type=click.Choice(["trigger", "job", "group", "all"]))
    @click.argument("name", required=False)
    @_group_option("The trigger's or job's group (not used for KIND group or all).")
    @json_option
    @click.pass_context
    def command(
        ctx: click.Context,
        kind: str,
        name: str | None,
        group: str,
        as_json: bool,
        reason: str | None = None,
    ) -> None:
        if (name is None) != (kind == "all"):
            raise click.UsageError(
                f"{verb} all takes no NAME" if kind == "all" else f"{verb} {kind} needs a NAME"
            )
        pause = {"reason": reason} if verb == "pause" else {}
        with _store(ctx) as store:
            client = _client(ctx, store)
            extra: dict[str, Any] = {}
            if kind == "trigger":
                key: Any = _trigger_key(str(name), group)
                getattr(client, f"{verb}_trigger")(key, **pause)
                extra["state"] = store.get_trigger_state(key)
                _check_outcome(verb, key, extra["state"])
            elif kind == "job":
                key = _job_key(str(name), group)
                getattr(client, f"{verb}_job")(key, **pause)
            elif kind == "group":
                key = name
                getattr(client, f"{verb}_trigger_group")(name, **pause)
            else:
                key = "everything"
                getattr(client, f"{verb}_all")(**pause)
        if reason is not None:
            extra["reason"] = reason
        _done(as_json, f"{verb}d", kind if kind == "all" else f"{kind} {key}", **extra)

    if verb == "pause":
        command = click.option(
            "--reason", help="Why (up to 250 characters): shown with the paused triggers."
        )(command)
    return command


pause = _command(
    _kind_command(
        "pause",
        "Pause a trigger, every trigger of a job, a trigger group (and triggers stored in it "
        "later), or everything. KIND is trigger, job, group or all; NAME is its name (none for "
        "all). The pause keeps --reason, your user name and the time; resume clears them.",
    )
)
resume = _command(
    _kind_command(
        "resume",
        "Resume a trigger, a job's triggers, a trigger group or everything; KIND is trigger, "
        "job, group or all.",
    )
)


@_command
@click.command(name="trigger-job")
@click.argument("name")
@_group_option("The job's group.")
@click.option("--data", help="Job data for this firing, a JSON object.")
@json_option
@click.pass_context
def trigger_job(ctx: click.Context, name: str, group: str, data: str | None, as_json: bool) -> None:
    """Fire a stored job now, once, through the cluster."""
    payload: dict[str, Any] = {}
    if data:
        try:
            payload = json.loads(data)
        except ValueError as exc:
            raise click.BadParameter(f"not JSON: {exc}", param_hint="--data") from None
        if not isinstance(payload, dict):
            raise click.BadParameter("must be a JSON object", param_hint="--data")
    with _store(ctx) as store:
        trigger = _client(ctx, store).trigger_job(_job_key(name, group), payload)
    _done(as_json, "triggered", f"job {JobKey(name, group)}", trigger=str(trigger.key))


@_command
@click.command(name="reset-trigger")
@click.argument("name")
@_group_option("The trigger's group.")
@json_option
@click.pass_context
def reset_trigger(ctx: click.Context, name: str, group: str, as_json: bool) -> None:
    """Return a trigger in ERROR to its schedule; exit 1 when it was not in ERROR."""
    key = _trigger_key(name, group)
    with _store(ctx) as store:
        count = _client(ctx, store).reset_trigger_from_error_state(key)
    if not count:
        raise _Failed(f"trigger {key} is not in ERROR (nothing reset)")
    _done(as_json, "reset", f"trigger {key}")


@_command
@click.command()
@click.argument("name")
@_group_option("The trigger's group.")
@json_option
@click.pass_context
def unschedule(ctx: click.Context, name: str, group: str, as_json: bool) -> None:
    """Remove a trigger (and its job, when not durable and left without triggers)."""
    key = _trigger_key(name, group)
    with _store(ctx) as store:
        if not _client(ctx, store).unschedule_job(key):
            raise _Failed(f"trigger {key} is not stored")
    _done(as_json, "unscheduled", f"trigger {key}")


@_command
@click.command(name="delete-job")
@click.argument("name")
@_group_option("The job's group.")
@json_option
@click.pass_context
def delete_job(ctx: click.Context, name: str, group: str, as_json: bool) -> None:
    """Remove a job and all its triggers."""
    key = _job_key(name, group)
    with _store(ctx) as store:
        if not _client(ctx, store).delete_job(key):
            raise _Failed(f"job {key} is not stored")
    _done(as_json, "deleted", f"job {key}")


@_command
@click.command()
@click.argument("name")
@click.argument("node")
@_group_option("The trigger's group.")
@json_option
@click.pass_context
def pin(ctx: click.Context, name: str, node: str, group: str, as_json: bool) -> None:
    """Re-pin a trigger to the worker NODE (its node name), `*` for an automatic pin, or ''
    for none; its fire times stay as they are."""
    from celery_quartz.affinity import PreferredNode
    from celery_quartz.triggers.base import TriggerDetailsUpdate

    key = _trigger_key(name, group)
    preferred = PreferredNode.parse(node, owner=f"trigger {key}")
    with _store(ctx) as store:
        _client(ctx, store).update_trigger_details(
            key, TriggerDetailsUpdate(preferred_node=preferred)
        )
    _done(as_json, "pinned", f"trigger {key}", preferred_node=node or None)


@click.group()
def edit() -> None:
    """Edit a stored trigger's details in place (docs/steering.md#editing-in-place)."""


OPERATOR_COMMANDS.append(edit)


@edit.command(name="trigger")
@click.argument("name")
@_group_option("The trigger's group.")
@click.option("--cron", help="A new Quartz cron expression (a cron trigger).")
@click.option("--tz", "time_zone", help="A new IANA zone of the cron expression or RRULE.")
@click.option("--interval", type=float, help="A new repeat interval in seconds (a simple trigger).")
@click.option("--rrule", help="A new RFC 5545 rule (a recurrence trigger).")
@click.option("--priority", type=int, help="A new priority.")
@click.option("--misfire-instruction", help="A misfire instruction of the trigger's kind, by name.")
@click.option(
    "--overlap-policy", help="allow, skip, buffer_one or cancel_previous (docs/steering.md)."
)
@click.option("--pin", "preferred_node", help="A worker's node name, `*` (automatic) or '' (none).")
@click.option("--execution-group", help="A new execution group ('' for none).")
@click.option("--calendar", help="A stored calendar's name ('' for none).")
@click.option("--description", help="A new description ('' for none).")
@click.option("--dry-run", is_flag=True, help="Show the edited trigger; write nothing.")
@json_option
@click.pass_context
def edit_trigger(
    ctx: click.Context, name: str, group: str, dry_run: bool, as_json: bool, **options: Any
) -> None:
    """Change a trigger's schedule, priority, misfire instruction, overlap policy, pin,
    execution group, calendar or description; a new schedule or calendar recomputes its next
    fire time."""
    clearable = {"execution_group", "calendar", "description"}
    changes = {
        option: (None if value == "" and option in clearable else value)
        for option, value in options.items()
        if value is not None
    }
    if not changes:
        raise click.UsageError("give at least one detail to change (see --help)")
    key = _trigger_key(name, group)
    with _store(ctx) as store:
        before = store.trigger_view(key)
        if before is None:
            raise _Failed(f"trigger {key} is not stored")
        edited = _client(ctx, store).update_trigger(key, dry_run=dry_run, **changes)
    answer = presentation.trigger_edit(before, edited, dry_run=dry_run)
    changed = answer["changed"]
    if as_json:
        click.echo(json.dumps(answer, indent=2))
        return
    verb = "would change" if dry_run else "changed"
    click.echo(f"trigger {key}: {verb} {len(changed)} detail(s)")
    for field_name, (was, now) in changed.items():
        click.echo(f"  {field_name}: {json.dumps(was)} -> {json.dumps(now)}")


# A subcommand of a group made here is not added through the quartz group: --store by hand.
add_store_option(edit_trigger)


class _Failed(click.ClickException):
    """A check that failed or a target that is not there: one line, exit 1."""

    exit_code = 1

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {self.message}", err=True)


# -- fire times --------------------------------------------------------------------------------


def _zone(name: str | None) -> Any:
    from celery_quartz.tz import resolve_time_zone

    if not name:
        return timezone.utc
    try:
        return resolve_time_zone(name)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--tz") from None


def _print_times(times: list[datetime], zone: Any, as_json: bool, label: str) -> None:
    if as_json:
        click.echo(
            json.dumps(
                {
                    "source": label,
                    "fire_times": [t.astimezone(zone).isoformat() for t in times],
                    "fire_times_utc": [presentation.iso(t) for t in times],
                },
                indent=2,
            )
        )
        return
    for when in times:
        local = when.astimezone(zone)
        click.echo(f"{local.strftime('%a')} {local.isoformat()}  ({presentation.iso(when)})")
    if not times:
        click.echo(f"{label}: no fire time ahead")


@_command
@click.command()
@click.argument("expression")
@click.option("-n", "count", type=click.IntRange(1, 1000), default=5, show_default=True)
@click.option("--tz", "time_zone", default="UTC", show_default=True, help="IANA time zone.")
@click.option(
    "--unix",
    is_flag=True,
    help="Read EXPRESSION as a five-field crontab line (minute hour dom month dow, 0 = Sunday).",
)
@click.option("--after", "after", help="Start after this ISO time (default: now).")
@json_option
@click.pass_context
def cron(
    ctx: click.Context,
    expression: str,
    count: int,
    time_zone: str,
    unix: bool,
    after: str | None,
    as_json: bool,
) -> None:
    """Preview the next fire times of a cron EXPRESSION (Quartz's dialect, seconds first;
    --unix for a crontab line) in --tz:

    celery quartz cron "0 0 2 ? * MON-FRI" -n 5 --tz Europe/Helsinki"""
    from celery_quartz.cron import CronExpression, CronFormat
    from celery_quartz.errors import CronSyntaxError

    zone = _zone(time_zone)
    try:
        expr = CronExpression(
            expression,
            time_zone=time_zone,
            format=CronFormat.UNIX if unix else CronFormat.QUARTZ,
        )
    except CronSyntaxError as exc:  # the command line's own text: a usage error (exit 2)
        raise click.BadParameter(str(exc), param_hint="EXPRESSION") from None
    when: datetime | None = _start(after, zone)
    times: list[datetime] = []
    while len(times) < count:
        assert when is not None
        when = expr.next_valid_time_after(when)
        if when is None:
            break
        times.append(when)
    _print_times(times, zone, as_json, f"cron {expr.expression}")


@_command
@click.command(name="fire-times")
@click.argument("name")
@_group_option("The trigger's group.")
@click.option("-n", "count", type=click.IntRange(1, 1000), default=5, show_default=True)
@click.option("--tz", "time_zone", help="Show times in this IANA zone (default: UTC).")
@json_option
@click.pass_context
def fire_times(
    ctx: click.Context, name: str, group: str, count: int, time_zone: str | None, as_json: bool
) -> None:
    """Preview the next fire times of a stored trigger, from its next fire time on, with its
    calendar."""
    from celery_quartz.errors import TriggerNotFoundError

    key = _trigger_key(name, group)
    zone = _zone(time_zone)
    with _store(ctx) as store:
        trigger = store.retrieve_trigger(key)
        if trigger is None:
            raise TriggerNotFoundError(f"trigger {key} is not stored")
        calendar = store.retrieve_calendar(trigger.calendar_name) if trigger.calendar_name else None
    walk = copy.deepcopy(trigger)
    times: list[datetime] = []
    while walk.next_fire_time is not None and len(times) < count:
        times.append(walk.next_fire_time)
        walk.triggered(calendar)
    _print_times(times, zone, as_json, f"trigger {key}")


def _start(after: str | None, zone: Any) -> datetime:
    if not after:
        from celery_quartz.clock import SystemClock

        return SystemClock().now()
    try:
        when = datetime.fromisoformat(after)
    except ValueError:
        raise click.BadParameter(f"{after!r} is not an ISO time", param_hint="--after") from None
    return when if when.tzinfo else when.replace(tzinfo=zone)
