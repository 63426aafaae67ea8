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
    check_schema: bool = False,
) -> SqlStore:
    """The store of ``settings`` (URL, table prefix, scheduler name, misfire thresholds, bound
    on JSON data), as beat, the worker, the client, the CLI and the dashboard open it.

    ``scheduler_name`` overrides the configured one (a worker runs firings of whichever
    scheduler name a message carries). ``pre_ping`` tests a pooled connection before each
    transaction; the scheduling loop turns it off and retries a failed step itself. ``pool_size``
    is how many connections the pool keeps open (for a PostgreSQL store; SQLite keeps none).
    ``upgrade_schema`` (schedulers, clients, the CLI's writing commands) creates or upgrades the
    tables first when ``quartz_schema_auto_upgrade`` is on, and when it is off refuses tables
    older than this version (:class:`~celery_quartz.errors.SchemaVersionError`).
    ``check_schema`` (workers) never upgrades: it refuses older tables when auto-upgrade is off
    and warns when it is on (a scheduler upgrades them). Both run on tables a newer version
    upgraded, with a warning (:func:`celery_quartz.store.migrate.ensure_schema`). With an election
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
        # A leader frozen inside a transaction (a paused VM) would hold its row locks, and its
        # successor's epoch and recovery pass with them, until it resumed: the database ends
        # that transaction within the lock timeout, the bound on a failover.
        idle_transaction_timeout=settings.election_lock_timeout if settings.election else None,
    )
    if upgrade_schema or check_schema:
        auto = settings.schema_auto_upgrade
        try:
            migrate.ensure_schema(
                store.engine,
                settings.table_prefix,
                may_upgrade=upgrade_schema and auto,
                refuse_older=not auto,
                who=f"scheduler name {store.scheduler_name!r}" if upgrade_schema else "worker",
            )
        except DBAPIError as exc:
            if upgrade_schema:
                store.dispose()
                raise
            # A worker rides out a store that does not answer, as it does for every firing.
            logger.warning("worker: the schema could not be checked at start: %s", exc)
        except BaseException:
            store.dispose()
            raise
    return store


def discover_scheduler_names(settings: Settings) -> list[str]:
    """Every scheduler name with jobs, triggers or check-ins in the tables of ``settings`` (URL
    and table prefix), sorted; the configured name too, even before it has rows. A store is
    per scheduler name: open one for each with ``open_store(settings, scheduler_name=...)``."""
    from celery_quartz.store.engine import create_store_engine
    from celery_quartz.store.schema import build_tables
    from celery_quartz.store.sql.reads import scheduler_names

    engine = create_store_engine(settings.store_url)
    try:
        found = scheduler_names(engine, build_tables(settings.table_prefix))
    finally:
        engine.dispose()
    return sorted({*found, settings.scheduler_name})
