"""The operators' listing of one execution group's triggers, in page order: a partial index on
(execution group, trigger group, trigger name), so that a page of the dashboard's and the HTTP
API's execution-group filter is the next rows of an index instead of a sort of the whole group.
Only triggers with an execution group have an entry.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

from celery_quartz.migrations.prefix import table_prefix

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    p = table_prefix()
    condition = sa.text("execution_group IS NOT NULL")
    op.create_index(
        f"ix_{p}triggers_exec_group_page",
        f"{p}triggers",
        ["sched_name", "execution_group", "trigger_group", "trigger_name"],
        unique=False,
        postgresql_where=condition,
        sqlite_where=condition,
    )


def downgrade() -> None:
    p = table_prefix()
    op.drop_index(f"ix_{p}triggers_exec_group_page", table_name=f"{p}triggers")
