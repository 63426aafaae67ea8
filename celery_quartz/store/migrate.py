"""Creating and upgrading the store's tables with the Alembic migrations shipped in the package.

Several scheduler processes may start at once against an empty database: the upgrade runs in one
transaction that first takes an exclusive lock (a PostgreSQL advisory lock; SQLite's write lock),
so one process migrates and the others find the schema at head.

Every node looks at the schema at start (:func:`ensure_schema`): it upgrades the tables or refuses
to run on tables older than it needs, and runs on tables a newer version has upgraded (a rolling
upgrade: schema first, then nodes), which is sound while each migration is additive.
"""

from __future__ import annotations

import functools
import logging
import re
import zlib
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, String, column, inspect, select, table, text

from celery_quartz.errors import SchemaVersionError
from celery_quartz.store.schema import build_tables
from celery_quartz.table_prefix import DEFAULT_TABLE_PREFIX

if TYPE_CHECKING:
    from alembic.config import Config

logger = logging.getLogger(__name__)

# Alembic (and the migration scripts it loads) is imported only when the tables are not at this
# version's head: a node whose tables are current starts without it.
_MIGRATION_FILE = re.compile(r"(\d{4})_\w+\.py")


@functools.cache
def packaged_head() -> str:
    """The newest migration's revision, read from the names of the migration files (each is
    ``NNNN_<name>.py`` with revision ``NNNN``, one after another: a test checks both against
    Alembic). What :func:`ensure_schema` compares the tables with before it needs Alembic."""
    versions = resources.files("celery_quartz.migrations").joinpath("versions")
    found = [m.group(1) for f in versions.iterdir() if (m := _MIGRATION_FILE.fullmatch(f.name))]
    return max(found)


def _config(connection: Connection | None, prefix: str) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", "celery_quartz:migrations")
    cfg.attributes["connection"] = connection
    cfg.attributes["table_prefix"] = prefix
    return cfg


def head_revision() -> str:
    """The newest migration's revision, as Alembic reads the migration scripts."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(_config(None, DEFAULT_TABLE_PREFIX)).get_current_head()
    assert head is not None
    return head


def is_known_revision(revision: str) -> bool:
    """Whether ``revision`` is one of this version's migrations (a newer version's is not)."""
    from alembic.script import ScriptDirectory
    from alembic.util import CommandError

    script = ScriptDirectory.from_config(_config(None, DEFAULT_TABLE_PREFIX))
    try:
        return script.get_revision(revision) is not None
    except CommandError:
        return False


def current_revision(engine: Engine, prefix: str = DEFAULT_TABLE_PREFIX) -> str | None:
    """The revision the tables under ``prefix`` are at (Alembic's version table), or None when
    there is none."""
    name = f"{prefix}alembic_version"
    with engine.connect() as conn:
        if not inspect(conn).has_table(name):
            return None
        version = column("version_num", String)
        revisions = sorted(conn.execute(select(version).select_from(table(name))).scalars())
    if len(revisions) > 1:
        raise SchemaVersionError(f"{name} holds several revisions: {', '.join(revisions)}")
    return revisions[0] if revisions else None


def upgrade(engine: Engine, prefix: str = DEFAULT_TABLE_PREFIX, revision: str = "head") -> None:
    """Bring the tables under ``prefix`` to ``revision``; safe from many processes at once."""
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            # Held to the end of this transaction: concurrent upgrades run one after another.
            key = zlib.crc32(f"celery_quartz.migrate:{prefix}".encode()) & 0x7FFFFFFF
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})
        from alembic import command

        command.upgrade(_config(conn, prefix), revision)


def ensure_schema(
    engine: Engine,
    prefix: str = DEFAULT_TABLE_PREFIX,
    *,
    may_upgrade: bool,
    refuse_older: bool = True,
    who: str = "celery-quartz",
) -> None:
    """What a node does with the schema when it starts.

    - Tables at this version's head: nothing.
    - Tables at a revision this version does not know (a newer version upgraded them, the first
      step of a rolling upgrade): run on them, with a warning; never "upgrade" them, which would
      fail on the unknown revision.
    - Tables missing or older: upgrade them when it ``may_upgrade``; or else, with
      ``refuse_older``, raise :class:`~celery_quartz.errors.SchemaVersionError` naming both
      revisions and the command to run; without it, warn (a scheduler will upgrade them).
    """
    current = current_revision(engine, prefix)
    if current == packaged_head():
        return
    head = head_revision()
    if current is not None and not is_known_revision(current):
        logger.warning(
            "%s: the tables (prefix %r) are at schema revision %s, newer than this version's "
            "%s: a newer version upgraded them; running on them, as during a rolling upgrade "
            "(sound while its migrations are additive; see the release notes)",
            who,
            prefix,
            current,
            head,
        )
        return
    if may_upgrade:
        logger.info(
            "%s: upgrading the tables (prefix %r) from schema revision %s to %s",
            who,
            prefix,
            current or "none",
            head,
        )
        upgrade(engine, prefix)
        return
    found = f"at schema revision {current}" if current else "missing (no schema revision)"
    message = (
        f"{who}: the tables (prefix {prefix!r}) are {found}; this version needs {head}. Run "
        "`celery -A proj quartz schema upgrade` first"
    )
    if refuse_older:
        raise SchemaVersionError(f"{message} (quartz_schema_auto_upgrade is off)")
    logger.warning("%s; a scheduler upgrades them at its start", message)


@dataclass
class SchemaReport:
    """What ``celery quartz schema check`` found: the revision the tables are at, the package's,
    and each difference as one line (``missing table quartz_jobs``, ``missing index ix_… on
    quartz_triggers``, ``column quartz_jobs.task is VARCHAR(100), expected VARCHAR(255)``)."""

    current: str | None
    head: str
    differences: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.current == self.head and not self.differences


def check(engine: Engine, prefix: str = DEFAULT_TABLE_PREFIX) -> SchemaReport:
    """Compare the database with the schema this version of the package expects."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

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
        report.differences = describe_differences(compare_metadata(ctx, metadata))
    return report


def describe_differences(diffs: list[Any]) -> list[str]:
    """Alembic's differences (``compare_metadata``) as lines an operator reads. What a missing
    table holds (its indexes and constraints) is not listed again after it."""
    flat = [d for diff in diffs for d in (diff if isinstance(diff, list) else [diff])]
    missing = {d[1].name for d in flat if d[0] == "add_table"}
    lines = []
    for diff in flat:
        kind, what = diff[0], diff[1:]
        if kind in ("add_table", "remove_table"):
            lines.append(f"{_PRESENCE[kind]} table {what[0].name}")
        elif kind in ("add_column", "remove_column"):
            lines.append(f"{_PRESENCE[kind]} column {what[1]}.{what[2].name}")
        elif kind in ("add_index", "remove_index", "add_constraint", "remove_constraint"):
            table = what[0].table.name
            if kind.startswith("add") and table in missing:
                continue
            noun = "index" if kind.endswith("index") else "constraint"
            lines.append(f"{_PRESENCE[kind]} {noun} {what[0].name} on {table}")
        elif kind in ("add_fk", "remove_fk"):
            table = what[0].parent.name
            if kind == "add_fk" and table in missing:
                continue
            lines.append(f"{_PRESENCE[kind]} foreign key {what[0].name or ''} on {table}".strip())
        elif kind.startswith("modify_"):
            _, table, column, _, existing, expected = what
            template = _MODIFIED.get(kind, kind.replace("_", " ") + " {}, expected {}")
            change = template.format(_shown(existing), _shown(expected))
            lines.append(f"column {table}.{column} {change}")
        else:  # a kind of difference not named above: its kind and its object's name
            name = getattr(what[-1], "name", None) if what else None
            lines.append(f"{kind.replace('_', ' ')} {name or ''}".strip())
    return lines


_PRESENCE = {
    "add_table": "missing",
    "remove_table": "unexpected",
    "add_column": "missing",
    "remove_column": "unexpected",
    "add_index": "missing",
    "remove_index": "unexpected",
    "add_constraint": "missing",
    "remove_constraint": "unexpected",
    "add_fk": "missing",
    "remove_fk": "unexpected",
}

_MODIFIED = {
    "modify_type": "is {}, expected {}",
    "modify_nullable": "is {}, expected {}",
    "modify_default": "has the default {}, expected {}",
    "modify_comment": "has the comment {}, expected {}",
}


def _shown(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "nullable" if value else "NOT NULL"
    return str(getattr(value, "arg", value))
