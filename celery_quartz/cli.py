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

from celery_quartz.clock import from_millis
from celery_quartz.config import Settings
from celery_quartz.store import migrate, open_store
from celery_quartz.store.engine import create_store_engine

logger = logging.getLogger(__name__)


def _settings(ctx: click.Context) -> Settings:
    app = ctx.obj.app
    return Settings.from_app(app)


@click.group(name="quartz")
def quartz() -> None:
    """celery-quartz: the clustered scheduler's store and state."""


@quartz.group()
def schema() -> None:
    """Create, upgrade and check the store's tables."""


@schema.command()
@click.option("--revision", default="head", show_default=True, help="Alembic revision to reach.")
@click.pass_context
def upgrade(ctx: click.Context, revision: str) -> None:
    """Create the tables, or bring them to the package's schema."""
    settings = _settings(ctx)
    engine = create_store_engine(settings.store_url)
    try:
        before = migrate.current_revision(engine, settings.table_prefix)
        migrate.upgrade(engine, settings.table_prefix, revision)
        after = migrate.current_revision(engine, settings.table_prefix)
    finally:
        engine.dispose()
    click.echo(f"schema {settings.table_prefix}*: {before or 'empty'} -> {after}")


@schema.command()
@click.pass_context
def check(ctx: click.Context) -> None:
    """Exit 0 when the tables match this version of celery-quartz, 1 otherwise."""
    settings = _settings(ctx)
    engine = create_store_engine(settings.store_url)
    try:
        report = migrate.check(engine, settings.table_prefix)
    finally:
        engine.dispose()
    if report.ok:
        click.echo(f"schema {settings.table_prefix}*: at {report.head}, matches")
        return
    click.echo(
        f"schema {settings.table_prefix}*: at {report.current or 'nothing'}, expected {report.head}"
    )
    for difference in report.differences:
        click.echo(f"  difference: {difference}")
    ctx.exit(1)


@quartz.command()
@click.pass_context
def status(ctx: click.Context) -> None:
    """The instances checked in, and the firings in flight."""
    settings = _settings(ctx)
    store = open_store(settings)
    try:
        rows: list[Any] = store.check_ins()
        click.echo(f"scheduler {settings.scheduler_name}:")
        for row in rows:
            click.echo(
                f"  {row.kind:9} {row.instance_name}  last check-in "
                f"{from_millis(row.last_checkin_millis).isoformat()}"
            )
        counts = store.count_rows()
        states: dict[str, int] = {}
        for state in store.firing_states().values():
            states[state] = states.get(state, 0) + 1
        click.echo(
            f"  jobs {counts['jobs']}, triggers {counts['triggers']}, firings in flight "
            + (", ".join(f"{k} {v}" for k, v in sorted(states.items())) or "0")
        )
    finally:
        store.dispose()


# -- scheduling files -------------------------------------------------------------------------


def _fail(ctx: click.Context, error: BaseException) -> None:
    """One line naming the problem, exit code 1; the traceback only in the debug log."""
    logger.debug("quartz command failed", exc_info=error)
    from celery_quartz.errors import QuartzError

    message = str(error) if isinstance(error, QuartzError) else f"{type(error).__name__}: {error}"
    click.echo(f"error: {' '.join(message.split())}", err=True)
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
