"""Whether a trigger is paused when an occurrence fails with no retry left
(``triggers.pause_when_retries_exhausted``; NULL: the scheduler's
``quartz_pause_when_retries_exhausted``).

Additive: a nullable column with no default (adding it rewrites no row).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

from celery_quartz.migrations.prefix import table_prefix

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table(f"{table_prefix()}triggers") as batch:
        batch.add_column(sa.Column("pause_when_retries_exhausted", sa.Boolean(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table(f"{table_prefix()}triggers") as batch:
        batch.drop_column("pause_when_retries_exhausted")
