"""Alembic environment: always run from :mod:`celery_quartz.store.migrate` with a connection."""

from alembic import context

from celery_quartz.migrations.prefix import table_prefix
from celery_quartz.store.schema import build_tables

connection = context.config.attributes["connection"]
prefix = table_prefix()
context.configure(
    connection=connection,
    target_metadata=build_tables(prefix).metadata,
    version_table=f"{prefix}alembic_version",
    transactional_ddl=True,
)
with context.begin_transaction():
    context.run_migrations()
