"""When a firing in flight was replaced by a later firing of its trigger (overlap policy
``cancel_previous``): ``fired_triggers.cancel_requested_time``, read by the workers whose pool
cannot terminate a run (solo, threads), so the run sees ``current_context().cancelled``.

Additive: a nullable column with no default (adding it rewrites no row).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

from celery_quartz.migrations.prefix import table_prefix

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table(f"{table_prefix()}fired_triggers") as batch:
        batch.add_column(sa.Column("cancel_requested_time", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table(f"{table_prefix()}fired_triggers") as batch:
        batch.drop_column("cancel_requested_time")
