"""One way to open a store: from the ``quartz_*`` settings, for every kind of process."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from sqlalchemy.exc import DBAPIError

from celery_quartz.clock import Clock
from celery_quartz.store import migrate
from celery_quartz.store.sql import SqlStore

if TYPE_CHECKING:
    from celery_quartz.config import Settings

logger = logging.getLogger(__name__)


def open_store(
    settings: Settings,
    *,
    clock: Clock | None = None,
    scheduler_name: str | None = None,
    pre_ping: bool = True,
    pool_size: int | None = None,
    upgrade_schema: bool = False,
) -> SqlStore:
    """The store of ``settings`` (URL, table prefix, scheduler name, misfire thresholds, bound
    on JSON data), as beat, the worker, the client, the CLI and the dashboard open it.

    ``scheduler_name`` overrides the configured one (a worker runs firings of whichever
    scheduler name a message carries). ``pre_ping`` tests a pooled connection before each
    transaction; the scheduling loop turns it off and retries a failed step itself. ``pool_size``
    is how many connections the pool keeps open (for a PostgreSQL store; SQLite keeps none).
    ``upgrade_schema`` (schedulers, clients, the CLI's writing commands) creates or upgrades the
    tables first when ``quartz_schema_auto_upgrade`` is on, and when it is off refuses tables
    older than this version (:class:`~celery_quartz.errors.SchemaVersionError`); it runs on
    tables a newer version upgraded, with a warning
    (:func:`celery_quartz.store.migrate.ensure_schema`; a worker's check is
    :func:`check_worker_schema`). With an election
    (``quartz_election``), PostgreSQL ends a session left idle inside a transaction for
    ``quartz_election_lock_timeout``.
    """
    store = SqlStore(
        settings.store_url,
        scheduler_name=scheduler_name or settings.scheduler_name,
        table_prefix=settings.table_prefix,
        clock=clock,
        max_data_bytes=settings.max_job_data_bytes,
        pre_ping=pre_ping,
        pool_size=pool_size,
        misfire_threshold=settings.misfire_threshold,
        checkin_misfire_threshold=settings.checkin_misfire_threshold,
        redact_keys=settings.dashboard_redact_keys,
        record_history=settings.records_history,
        default_retry_policy=settings.retry_default,
        pause_when_retries_exhausted=settings.pause_when_retries_exhausted,
        # A leader frozen inside a transaction (a paused VM) would hold its row locks, and its
        # successor's epoch and recovery pass with them, until it resumed: the database ends
        # that transaction within the lock timeout, the bound on a failover.
        idle_transaction_timeout=settings.election_lock_timeout if settings.election else None,
    )
    if upgrade_schema:
        try:
            migrate.ensure_schema(
                store.engine,
                settings.table_prefix,
                may_upgrade=settings.schema_auto_upgrade,
                refuse_older=True,
                who=f"scheduler name {store.scheduler_name!r}",
            )
        except BaseException:
            store.dispose()
            raise
    return store


def check_worker_schema(settings: Settings) -> None:
    """A worker's look at the schema when it starts: it never upgrades. Tables older than this
    version (or missing) stop it with :class:`~celery_quartz.errors.SchemaVersionError` when
    ``quartz_schema_auto_upgrade`` is off, and are only warned about when it is on (a scheduler
    upgrades them at its start); tables a newer version upgraded are run on, with a warning. A
    store that does not answer is warned about: the worker rides out an outage as it does for
    every firing."""
    from celery_quartz.store.engine import create_store_engine

    engine = create_store_engine(settings.store_url)
    try:
        migrate.ensure_schema(
            engine,
            settings.table_prefix,
            may_upgrade=False,
            refuse_older=not settings.schema_auto_upgrade,
            who="worker",
        )
    except DBAPIError as exc:
        logger.warning("worker: the schema could not be checked at start: %s", exc)
    finally:
        engine.dispose()


def discover_scheduler_names(settings: Settings, *, include_configured: bool = True) -> list[str]:
    """Every scheduler name with jobs, triggers or check-ins in the tables of ``settings`` (URL
    and table prefix), sorted; the configured name too, even before it has rows, unless
    ``include_configured`` is false. A store is per scheduler name: open one for each with
    ``open_store(settings, scheduler_name=...)``."""
    from celery_quartz.store.engine import create_store_engine
    from celery_quartz.store.schema import build_tables
    from celery_quartz.store.sql.reads import scheduler_names

    engine = create_store_engine(settings.store_url)
    try:
        found = scheduler_names(engine, build_tables(settings.table_prefix))
    finally:
        engine.dispose()
    names = set(found)
    if include_configured:
        names.add(settings.scheduler_name)
    return sorted(names)
