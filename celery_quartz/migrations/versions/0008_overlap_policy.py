"""A trigger's overlap policy (``triggers.overlap_policy``): what an occurrence due while the
trigger's previous firing is still in flight does (``skip``, ``buffer_one``,
``cancel_previous``; NULL is ``allow``, the behaviour before).

Additive: a nullable column with no default (adding it rewrites no row).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

from celery_quartz.migrations.prefix import table_prefix

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table(f"{table_prefix()}triggers") as batch:
        batch.add_column(sa.Column("overlap_policy", sa.String(16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table(f"{table_prefix()}triggers") as batch:
        batch.drop_column("overlap_policy")
