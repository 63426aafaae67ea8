"""Backfill: the occurrences a backfill scheduled, one row per (trigger, slot)
(``backfill_slots``), whose key makes a slot scheduled once however many backfills ask for it.

Additive: a new table.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

from celery_quartz.migrations.prefix import table_prefix

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    p = table_prefix()
    op.create_table(
        f"{p}backfill_slots",
        sa.Column("sched_name", sa.String(120), primary_key=True),
        sa.Column("trigger_group", sa.String(200), primary_key=True),
        sa.Column("trigger_name", sa.String(200), primary_key=True),
        sa.Column("slot_time", sa.BigInteger(), primary_key=True),
        sa.Column("created_time", sa.BigInteger(), nullable=False),
        sa.Column("firing_trigger_name", sa.String(200), nullable=False),
    )


def downgrade() -> None:
    op.drop_table(f"{table_prefix()}backfill_slots")
