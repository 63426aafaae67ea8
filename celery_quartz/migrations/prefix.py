"""The table prefix a migration runs under, passed in by :mod:`celery_quartz.store.migrate`."""

from __future__ import annotations

from alembic import context

from celery_quartz.table_prefix import DEFAULT_TABLE_PREFIX


def table_prefix() -> str:
    return str(context.config.attributes.get("table_prefix", DEFAULT_TABLE_PREFIX))
