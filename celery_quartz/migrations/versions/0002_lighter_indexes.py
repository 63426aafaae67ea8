"""Fewer index entries per firing: ``ix_fired_exec_group`` dropped (no query reads it), and the
worker index of fired rows and the execution-group index of triggers made partial (the rows with
a worker, the triggers with a group).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from typing import Any

import sqlalchemy as sa
from alembic import op

from celery_quartz.migrations.prefix import table_prefix

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def _partial(column: str) -> dict[str, Any]:
    condition = sa.text(f"{column} IS NOT NULL")
    return {"postgresql_where": condition, "sqlite_where": condition}


def upgrade() -> None:
    p = table_prefix()
    op.drop_index(f"ix_{p}fired_exec_group", table_name=f"{p}fired_triggers")
    op.drop_index(f"ix_{p}fired_worker", table_name=f"{p}fired_triggers")
    op.create_index(
        f"ix_{p}fired_worker",
        f"{p}fired_triggers",
        ["sched_name", "worker_name"],
        unique=False,
        **_partial("worker_name"),
    )
    op.drop_index(f"ix_{p}triggers_exec_group", table_name=f"{p}triggers")
    op.create_index(
        f"ix_{p}triggers_exec_group",
        f"{p}triggers",
        ["sched_name", "execution_group", "trigger_state"],
        unique=False,
        **_partial("execution_group"),
    )


def downgrade() -> None:
    p = table_prefix()
    op.drop_index(f"ix_{p}triggers_exec_group", table_name=f"{p}triggers")
    op.create_index(
        f"ix_{p}triggers_exec_group",
        f"{p}triggers",
        ["sched_name", "execution_group", "trigger_state"],
        unique=False,
    )
    op.drop_index(f"ix_{p}fired_worker", table_name=f"{p}fired_triggers")
    op.create_index(
        f"ix_{p}fired_worker", f"{p}fired_triggers", ["sched_name", "worker_name"], unique=False
    )
    op.create_index(
        f"ix_{p}fired_exec_group",
        f"{p}fired_triggers",
        ["sched_name", "execution_group", "state"],
        unique=False,
    )
