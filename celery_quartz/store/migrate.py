"""Creating and upgrading the store's tables with the Alembic migrations shipped in the package.

Several scheduler processes may start at once against an empty database: the upgrade runs in one
transaction that first takes an exclusive lock (a PostgreSQL advisory lock; SQLite's write lock),
so one process migrates and the others find the schema at head.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, text

from celery_quartz.store.schema import DEFAULT_TABLE_PREFIX, build_tables


def _config(connection: Connection | None, prefix: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", "celery_quartz:migrations")
    cfg.attributes["connection"] = connection
    cfg.attributes["table_prefix"] = prefix
    return cfg


def head_revision() -> str:
    head = ScriptDirectory.from_config(_config(None, DEFAULT_TABLE_PREFIX)).get_current_head()
    assert head is not None
    return head


def current_revision(engine: Engine, prefix: str = DEFAULT_TABLE_PREFIX) -> str | None:
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"version_table": f"{prefix}alembic_version"})
        return ctx.get_current_revision()


def upgrade(engine: Engine, prefix: str = DEFAULT_TABLE_PREFIX, revision: str = "head") -> None:
    """Bring the tables under ``prefix`` to ``revision``; safe from many processes at once."""
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            # Held to the end of this transaction: concurrent upgrades run one after another.
            key = zlib.crc32(f"celery_quartz.migrate:{prefix}".encode()) & 0x7FFFFFFF
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})
        command.upgrade(_config(conn, prefix), revision)


@dataclass
class SchemaReport:
    """What ``celery quartz schema check`` found."""

    current: str | None
    head: str
    differences: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.current == self.head and not self.differences


def check(engine: Engine, prefix: str = DEFAULT_TABLE_PREFIX) -> SchemaReport:
    """Compare the database with the schema this version of the package expects."""
    report = SchemaReport(current=current_revision(engine, prefix), head=head_revision())
    metadata = build_tables(prefix).metadata
    with engine.connect() as conn:
        ctx = MigrationContext.configure(
            conn,
            opts={
                "version_table": f"{prefix}alembic_version",
                "compare_type": True,
                "include_name": lambda name, type_, parent: (
                    type_ != "table" or name in metadata.tables
                ),
            },
        )
        report.differences = [repr(diff) for diff in compare_metadata(ctx, metadata)]
    return report
