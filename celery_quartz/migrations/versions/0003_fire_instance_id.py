"""One name for the fire instance id: the fired rows' key column ``entry_id`` (Quartz's
``ENTRY_ID``) is renamed ``fire_instance_id``, the name the API, the task context and Celery's
task id already use. A rename: no row is rewritten.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from alembic import op

from celery_quartz.migrations.prefix import table_prefix

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.alter_column(
        f"{table_prefix()}fired_triggers", "entry_id", new_column_name="fire_instance_id"
    )


def downgrade() -> None:
    op.alter_column(
        f"{table_prefix()}fired_triggers", "fire_instance_id", new_column_name="entry_id"
    )
