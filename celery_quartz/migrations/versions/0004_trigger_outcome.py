"""The operators' read side: each trigger keeps its last firing's outcome (when it started and
finished, success or failure, the exception's type and message, consecutive failures) and the
reason it was put in ERROR; the group index of triggers becomes (group, name), the order the
dashboard and the HTTP API page triggers in (a page is the next rows of the index instead of a
sort of every match), and a partial index lists the triggers pinned to a worker in that order
(only pinned triggers have an entry).

Nullable columns with no default: adding them rewrites no row (PostgreSQL and SQLite).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from typing import Any

import sqlalchemy as sa
from alembic import op

from celery_quartz.migrations.prefix import table_prefix

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_COLUMNS = (
    ("error_reason", sa.String(1000)),
    ("last_started_time", sa.BigInteger()),
    ("last_finished_time", sa.BigInteger()),
    ("last_outcome", sa.String(16)),
    ("last_error_type", sa.String(200)),
    ("last_error_message", sa.String(1000)),
    ("consecutive_failures", sa.Integer()),
)


def _partial(column: str) -> dict[str, Any]:
    condition = sa.text(f"{column} IS NOT NULL")
    return {"postgresql_where": condition, "sqlite_where": condition}


def upgrade() -> None:
    p = table_prefix()
    with op.batch_alter_table(f"{p}triggers") as batch:
        for name, type_ in _COLUMNS:
            batch.add_column(sa.Column(name, type_, nullable=True))
    op.drop_index(f"ix_{p}triggers_group", table_name=f"{p}triggers")
    op.create_index(
        f"ix_{p}triggers_group",
        f"{p}triggers",
        ["sched_name", "trigger_group", "trigger_name"],
        unique=False,
    )
    op.create_index(
        f"ix_{p}triggers_pinned",
        f"{p}triggers",
        ["sched_name", "preferred_node", "trigger_group", "trigger_name"],
        unique=False,
        **_partial("preferred_node"),
    )


def downgrade() -> None:
    p = table_prefix()
    op.drop_index(f"ix_{p}triggers_pinned", table_name=f"{p}triggers")
    op.drop_index(f"ix_{p}triggers_group", table_name=f"{p}triggers")
    op.create_index(
        f"ix_{p}triggers_group",
        f"{p}triggers",
        ["sched_name", "trigger_group", "trigger_state"],
        unique=False,
    )
    with op.batch_alter_table(f"{p}triggers") as batch:
        for name, _ in reversed(_COLUMNS):
            batch.drop_column(name)
