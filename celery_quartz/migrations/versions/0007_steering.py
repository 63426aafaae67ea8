"""Steering a running schedule: why a trigger or a trigger group is paused, by whom and since
when (``pause_reason``, ``paused_by``, ``paused_time`` on triggers and on paused trigger groups),
a job's retry policy, inherited by its triggers that have none (``jobs.retry_policy``), and what a
running firing last reported of its progress (``progress``, ``progress_message``,
``progress_time`` on fired triggers).

Additive: nullable columns with no default (adding them rewrites no row).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

from celery_quartz.migrations.prefix import table_prefix

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def _pause_columns() -> list[sa.Column[object]]:
    return [
        sa.Column("pause_reason", sa.String(250), nullable=True),
        sa.Column("paused_by", sa.String(255), nullable=True),
        sa.Column("paused_time", sa.BigInteger(), nullable=True),
    ]


def upgrade() -> None:
    p = table_prefix()
    for table in (f"{p}triggers", f"{p}paused_trigger_grps"):
        with op.batch_alter_table(table) as batch:
            for column in _pause_columns():
                batch.add_column(column)
    with op.batch_alter_table(f"{p}jobs") as batch:
        batch.add_column(sa.Column("retry_policy", sa.String(200), nullable=True))
    with op.batch_alter_table(f"{p}fired_triggers") as batch:
        batch.add_column(sa.Column("progress", sa.Float(), nullable=True))
        batch.add_column(sa.Column("progress_message", sa.String(250), nullable=True))
        batch.add_column(sa.Column("progress_time", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    p = table_prefix()
    with op.batch_alter_table(f"{p}fired_triggers") as batch:
        for name in ("progress_time", "progress_message", "progress"):
            batch.drop_column(name)
    with op.batch_alter_table(f"{p}jobs") as batch:
        batch.drop_column("retry_policy")
    for table in (f"{p}paused_trigger_grps", f"{p}triggers"):
        with op.batch_alter_table(table) as batch:
            for column in reversed(_pause_columns()):
                batch.drop_column(column.name)
