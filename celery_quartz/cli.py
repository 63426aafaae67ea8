"""``celery -A proj quartz …``: the store's schema, and a look at the cluster.

Installed through the ``celery.commands`` entry point, so it reads the same app (and the same
``quartz_*`` settings) as ``celery beat`` and ``celery worker``.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import click

from celery_quartz import presentation
from celery_quartz.cli_backfill import BACKFILL_COMMANDS
from celery_quartz.cli_history import HISTORY_COMMANDS
from celery_quartz.cli_ops import OPERATOR_COMMANDS, add_store_option, json_option, settings_of
from celery_quartz.errors import ConfigurationError
from celery_quartz.store import migrate, open_store
from celery_quartz.store.engine import create_store_engine, redact_url

logger = logging.getLogger(__name__)


_settings = settings_of

#: The verbs that read no store of their own: ``--store`` is not theirs (the dashboard reads
#: every store of ``quartz_dashboard_stores``; the time helpers read none).
_STORELESS = frozenset({"dashboard", "cron", "fire-times"})


class _QuartzGroup(click.Group):
    """Every verb's errors, translated in one place: a store that cannot be reached, tables
    not created, a bad URL and our own errors become one line naming the problem (exit 1),
    never a traceback; the traceback goes to the debug log.

    Every verb that reads or writes a store, in this group and its subgroups, takes
    ``--store NAME`` (:func:`~celery_quartz.cli_ops.add_store_option`)."""

    group_class = type

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        if not isinstance(cmd, click.Group) and (name or cmd.name) not in _STORELESS:
            add_store_option(cmd)
        super().add_command(cmd, name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Exception as error:
            logger.debug("quartz command failed", exc_info=error)
            click.echo(f"error: {describe_error(error, ctx)}", err=True)
            ctx.exit(1)


def describe_error(error: BaseException, ctx: click.Context | None = None) -> str:
    """One line naming what went wrong, for an operator."""
    from sqlalchemy import exc as sa_exc

    from celery_quartz.errors import QuartzError

    url = _shown_url(ctx)
    if isinstance(error, (sa_exc.OperationalError, sa_exc.ProgrammingError)):
        cause = " ".join(str(getattr(error, "orig", error) or error).split())
        if _missing_table(cause):
            return (
                f"the store's tables are missing at {url} ({cause}); create them with "
                f"`celery -A <app> quartz schema upgrade`"
            )
        return f"cannot use the store at {url}: {cause}"
    if isinstance(error, (sa_exc.ArgumentError, sa_exc.NoSuchModuleError)):
        return f"quartz_store_url {url} is not usable: {' '.join(str(error).split())}"
    if isinstance(error, sa_exc.DBAPIError):
        cause = " ".join(str(getattr(error, "orig", error) or error).split())
        return f"the store at {url} refused: {cause}"
    if isinstance(error, QuartzError):
        return " ".join(str(error).split())
    return " ".join(f"{type(error).__name__}: {error}".split())


def _missing_table(cause: str) -> bool:
    lowered = cause.lower()
    # SQLite: "no such table: quartz_…"; PostgreSQL: 'relation "quartz_…" does not exist'.
    return "no such table" in lowered or ("relation" in lowered and "does not exist" in lowered)


def _shown_url(ctx: click.Context | None) -> str:
    """The URL of the store the verb used (``--store NAME``'s, or ``quartz_store_url``), without
    its password; a neutral word when the settings do not read."""
    try:
        url = settings_of(ctx).store_url if ctx is not None else ""
    except Exception:
        return "the configured store"
    if not url:
        return "the configured store"
    return repr(redact_url(url))


@click.group(name="quartz", cls=_QuartzGroup)
@click.pass_context
def quartz(ctx: click.Context) -> None:
    """celery-quartz: the clustered scheduler's store and state."""
    from celery_quartz.audit import acting_as, os_user

    # Every verb's writes are audited as the OS user, through the CLI.
    ctx.with_resource(acting_as(os_user(), "cli"))


@quartz.group()
def schema() -> None:
    """Create, upgrade and check the store's tables."""


@schema.command()
@click.option("--revision", default="head", show_default=True, help="Alembic revision to reach.")
@json_option
@click.pass_context
def upgrade(ctx: click.Context, revision: str, as_json: bool) -> None:
    """Create the tables, or bring them to the package's schema."""
    settings = _settings(ctx)
    engine = create_store_engine(settings.store_url)
    try:
        before = migrate.current_revision(engine, settings.table_prefix)
        migrate.upgrade(engine, settings.table_prefix, revision)
        after = migrate.current_revision(engine, settings.table_prefix)
    finally:
        engine.dispose()
    if as_json:
        click.echo(
            json.dumps({"table_prefix": settings.table_prefix, "before": before, "after": after})
        )
        return
    click.echo(f"schema {settings.table_prefix}*: {before or 'empty'} -> {after}")


@schema.command()
@json_option
@click.pass_context
def check(ctx: click.Context, as_json: bool) -> None:
    """Exit 0 when the tables match this version of celery-quartz, 1 otherwise (each difference
    on a line of its own)."""
    settings = _settings(ctx)
    engine = create_store_engine(settings.store_url)
    try:
        report = migrate.check(engine, settings.table_prefix)
    finally:
        engine.dispose()
    if as_json:
        click.echo(
            json.dumps(
                {
                    "table_prefix": settings.table_prefix,
                    "ok": report.ok,
                    "current": report.current,
                    "head": report.head,
                    "differences": report.differences,
                },
                indent=2,
            )
        )
    elif report.ok:
        click.echo(f"schema {settings.table_prefix}*: at {report.head}, matches")
    else:
        click.echo(
            f"schema {settings.table_prefix}*: at {report.current or 'nothing'}, "
            f"expected {report.head}"
        )
        for difference in report.differences:
            click.echo(f"  {difference}")
        if report.current is None:
            click.echo("create the tables with `celery -A <app> quartz schema upgrade`")
    if not report.ok:
        ctx.exit(1)


@quartz.command()
@json_option
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """The instances checked in, and the firings in flight."""
    settings = _settings(ctx)
    store = open_store(settings)
    try:
        nodes = store.list_nodes()
        counts = store.count_rows()
        states: dict[str, int] = {}
        for state in store.firing_states().values():
            states[state] = states.get(state, 0) + 1
    finally:
        store.dispose()
    if as_json:
        found = {
            "scheduler": settings.scheduler_name,
            "nodes": [presentation.node(view) for view in nodes],
            "jobs": counts["jobs"],
            "triggers": counts["triggers"],
            "firings_in_flight": dict(sorted(states.items())),
        }
        click.echo(json.dumps(found, indent=2))
        return
    click.echo(f"scheduler {settings.scheduler_name}:")
    for view in nodes:
        click.echo(
            f"  {view.kind:9} {view.instance_name}  last check-in "
            f"{view.last_checkin_time.isoformat()}" + ("" if view.alive else "  (not alive)")
        )
    click.echo(
        f"  jobs {counts['jobs']}, triggers {counts['triggers']}, firings in flight "
        + (", ".join(f"{k} {v}" for k, v in sorted(states.items())) or "0")
    )


# -- scheduling files -------------------------------------------------------------------------


def _fail(ctx: click.Context, error: BaseException) -> None:
    """One line naming the problem, exit code 1; the traceback only in the debug log."""
    logger.debug("quartz command failed", exc_info=error)
    click.echo(f"error: {describe_error(error, ctx)}", err=True)
    ctx.exit(1)


@quartz.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--dry-run", is_flag=True, help="Show what would change; write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print what changed as JSON.")
@click.pass_context
def load(ctx: click.Context, files: tuple[str, ...], dry_run: bool, as_json: bool) -> None:
    """Load scheduling files (quartz_jobs.xml, .json, .yaml) into the store, all or nothing."""
    from celery_quartz.scheduling_files import load_scheduling_files

    app = ctx.obj.app
    try:
        store = open_store(_settings(ctx), upgrade_schema=True)
        try:
            plan = load_scheduling_files(app, store, list(files), dry_run=dry_run)
        finally:
            store.dispose()
    except Exception as error:  # one line, never a traceback
        _fail(ctx, error)
        return
    if as_json:
        click.echo(json.dumps({"dry_run": dry_run, **plan.as_dict()}, indent=2))
        return
    if dry_run or plan.changed:
        for line in plan.lines():
            if dry_run or not line.startswith("="):
                click.echo(line)
    click.echo(("would change " if dry_run else "") + plan.summary())


@quartz.command()
@click.option(
    "--format",
    "format_",
    type=click.Choice(["xml", "json", "yaml"]),
    help="The file's format (default: from the -o file's extension).",
)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write here, not stdout.")
@click.pass_context
def export(ctx: click.Context, format_: str | None, output: str | None) -> None:
    """Write the store's jobs and triggers as a scheduling file."""
    from celery_quartz.scheduling_files import export_scheduling_data

    if format_ is None:
        extension = os.path.splitext(output or "")[1].lower()
        format_ = {".xml": "xml", ".json": "json", ".yaml": "yaml", ".yml": "yaml"}.get(extension)
        if format_ is None:
            raise click.UsageError("give --format xml, json or yaml")
    try:
        store = open_store(_settings(ctx), upgrade_schema=True)
        try:
            text = export_scheduling_data(store, format_)
        finally:
            store.dispose()
        if output is None:
            click.echo(text, nl=False)
        else:
            with open(output, "w", encoding="utf-8") as handle:
                handle.write(text)
    except Exception as error:  # one line, never a traceback
        _fail(ctx, error)


@quartz.command()
@click.option("--address", default=None, help="Interface to listen on (quartz_dashboard_address).")
@click.option("--port", type=int, default=None, help="Port to listen on (quartz_dashboard_port).")
@click.option(
    "--url-prefix",
    default=None,
    help="Path the dashboard is served under behind a proxy (quartz_dashboard_url_prefix).",
)
@click.option("--read-only", is_flag=True, default=None, help="Refuse every write.")
@click.pass_context
def dashboard(
    ctx: click.Context,
    address: str | None,
    port: int | None,
    url_prefix: str | None,
    read_only: bool | None,
) -> None:
    """Serve the dashboard and HTTP API over the store (needs celery-quartz[dashboard]).

    Attaches to the store of the app's quartz_* settings without starting a scheduler, and
    shows every scheduler name found in its tables.
    """
    from dataclasses import replace

    try:
        import uvicorn

        from celery_quartz.dashboard import create_app
    except ImportError as error:
        raise click.ClickException(
            f"the dashboard needs its extra: pip install 'celery-quartz[dashboard]' ({error})"
        ) from None
    settings = _settings(ctx)
    changes: dict[str, Any] = {}
    if address is not None:
        changes["dashboard_address"] = address
    if port is not None:
        changes["dashboard_port"] = port
    if url_prefix is not None:
        changes["dashboard_url_prefix"] = url_prefix.rstrip("/")
    if read_only:
        changes["dashboard_read_only"] = True
    settings = replace(settings, **changes)
    settings.validate()
    asgi = create_app(ctx.obj.app, settings=settings)
    click.echo(
        f"celery-quartz dashboard on http://{settings.dashboard_address}:{settings.dashboard_port}"
        f"{settings.dashboard_url_prefix}/"
        + (" (read-only)" if settings.dashboard_read_only else "")
    )
    uvicorn.run(
        asgi,
        host=settings.dashboard_address,
        port=settings.dashboard_port,
        proxy_headers=True,
        forwarded_allow_ips=settings.dashboard_forwarded_allow_ips,
        log_level="info",
    )


# The operators' verbs (list, pause, resume, pin, preview fire times, import) live in their own
# module, so this one stays the group, its error translation and the schema's commands.
for _command in (*OPERATOR_COMMANDS, *HISTORY_COMMANDS, *BACKFILL_COMMANDS):
    quartz.add_command(_command)


# -- importers --------------------------------------------------------------------------------


@quartz.group(name="import")
def import_() -> None:
    """Import another scheduler's periodic tasks (see docs/migrating.md)."""


def _run_import(
    ctx: click.Context, source: str, group: str, read: Any, dry_run: bool, as_json: bool
) -> None:
    """Read the source, then apply (or, with ``dry_run``, show) the import; one transaction."""
    from celery_quartz.clock import SystemClock
    from celery_quartz.importers import run_import

    app = ctx.find_root().obj.app
    settings = _settings(ctx)
    now = SystemClock().now()
    entries = read(now)
    store = open_store(settings, upgrade_schema=True)
    try:
        report = run_import(
            app, store, source=source, group=group, entries=entries, now=now, dry_run=dry_run
        )
    finally:
        store.dispose()
    if as_json:
        click.echo(json.dumps(report.as_dict(), indent=2))
        return
    for line in report.lines():
        click.echo(line)
    click.echo(("would change " if dry_run else "") + report.summary())


@import_.command(name="django-celery-beat")
@click.option("--url", required=True, help="SQLAlchemy URL of django-celery-beat's database.")
@click.option("--dry-run", is_flag=True, help="Show what would change; write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def import_django_celery_beat(ctx: click.Context, url: str, dry_run: bool, as_json: bool) -> None:
    """Import django-celery-beat's periodic tasks into the group django_celery_beat."""
    from celery_quartz.importers import django_celery_beat as source

    def read(now: Any) -> Any:
        from sqlalchemy.exc import DBAPIError

        engine = source.open_source(url)
        try:
            return source.read_entries(engine, now)
        except DBAPIError as error:  # named as the source's, not the store's (describe_error)
            shown = engine.url.render_as_string(hide_password=True)
            cause = " ".join(str(error.orig or error).split())
            raise ConfigurationError(
                f"cannot read django-celery-beat at {shown!r}: {cause}"
            ) from None
        finally:
            engine.dispose()

    _run_import(ctx, "django-celery-beat", source.GROUP, read, dry_run, as_json)


@import_.command(name="redbeat")
@click.option("--redis-url", help="Redis URL (default: the app's redbeat_redis_url or broker).")
@click.option("--key-prefix", default="redbeat:", show_default=True, help="redbeat_key_prefix.")
@click.option("--dry-run", is_flag=True, help="Show what would change; write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def import_redbeat(
    ctx: click.Context, redis_url: str | None, key_prefix: str, dry_run: bool, as_json: bool
) -> None:
    """Import celery-redbeat's entries into the group redbeat."""
    from celery_quartz.importers import redbeat as source

    app = ctx.find_root().obj.app
    url = redis_url or app.conf.get("redbeat_redis_url") or app.conf.broker_url
    if not url or not str(url).startswith(("redis://", "rediss://", "unix://")):
        raise click.UsageError(f"give --redis-url (no Redis URL configured: {url!r})")

    def read(now: Any) -> Any:
        import redis

        client = redis.Redis.from_url(url)
        try:
            return source.read_entries(client, key_prefix, str(app.conf.timezone or "UTC"))
        except redis.RedisError as error:
            shown = redact_url(url)
            raise ConfigurationError(
                f"cannot read redbeat's entries at {shown!r}: {error}"
            ) from None
        finally:
            client.close()

    _run_import(ctx, "redbeat", source.GROUP, read, dry_run, as_json)
