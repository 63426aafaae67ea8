"""``celery -A proj quartz …``: the store's schema, and a look at the cluster.

Installed through the ``celery.commands`` entry point, so it reads the same app (and the same
``quartz_*`` settings) as ``celery beat`` and ``celery worker``.
"""

from __future__ import annotations

from typing import Any

import click

from celery_quartz.clock import from_millis
from celery_quartz.config import Settings
from celery_quartz.store import migrate, open_store
from celery_quartz.store.engine import create_store_engine


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
