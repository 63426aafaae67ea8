"""The initial schema: jobs, triggers, fired triggers, scheduler state, locks, paused groups,
calendars.

Revision ID: 0001
Revises:
Create Date: 2026-11-30

A snapshot: later schema changes come as new revisions, never as edits here.
"""

import sqlalchemy as sa
from alembic import op

from celery_quartz.migrations.prefix import table_prefix

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    p = table_prefix()
    op.create_table(
        f"{p}calendars",
        sa.Column("sched_name", sa.String(length=120), nullable=False),
        sa.Column("calendar_name", sa.String(length=200), nullable=False),
        sa.Column("calendar", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("sched_name", "calendar_name"),
    )
    op.create_table(
        f"{p}fired_triggers",
        sa.Column("sched_name", sa.String(length=120), nullable=False),
        sa.Column("entry_id", sa.String(length=95), nullable=False),
        sa.Column("trigger_name", sa.String(length=200), nullable=False),
        sa.Column("trigger_group", sa.String(length=200), nullable=False),
        sa.Column("instance_name", sa.String(length=255), nullable=False),
        sa.Column("fired_time", sa.BigInteger(), nullable=False),
        sa.Column("sched_time", sa.BigInteger(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("job_name", sa.String(length=200), nullable=True),
        sa.Column("job_group", sa.String(length=200), nullable=True),
        sa.Column("is_nonconcurrent", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("requests_recovery", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("execution_group", sa.String(length=200), nullable=True),
        sa.Column("worker_name", sa.String(length=255), nullable=True),
        sa.Column("published_time", sa.BigInteger(), nullable=True),
        sa.Column("started_time", sa.BigInteger(), nullable=True),
        sa.Column("expires_time", sa.BigInteger(), nullable=True),
        sa.Column("retry_attempt", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("refire_count", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("recovering", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("expired_count", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("recovery_after", sa.BigInteger(), nullable=True),
        sa.Column("preferred_node", sa.String(length=255), nullable=True),
        sa.Column("preferred_node_auto", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("queue", sa.String(length=200), nullable=True),
        sa.PrimaryKeyConstraint("sched_name", "entry_id"),
    )
    op.create_index(
        f"ix_{p}fired_exec_group",
        f"{p}fired_triggers",
        ["sched_name", "execution_group", "state"],
        unique=False,
    )
    op.create_index(
        f"ix_{p}fired_instance",
        f"{p}fired_triggers",
        ["sched_name", "instance_name", "state"],
        unique=False,
    )
    op.create_index(
        f"ix_{p}fired_job",
        f"{p}fired_triggers",
        ["sched_name", "job_name", "job_group"],
        unique=False,
    )
    op.create_index(
        f"ix_{p}fired_trigger",
        f"{p}fired_triggers",
        ["sched_name", "trigger_name", "trigger_group"],
        unique=False,
    )
    op.create_index(
        f"ix_{p}fired_worker", f"{p}fired_triggers", ["sched_name", "worker_name"], unique=False
    )
    op.create_table(
        f"{p}jobs",
        sa.Column("sched_name", sa.String(length=120), nullable=False),
        sa.Column("job_name", sa.String(length=200), nullable=False),
        sa.Column("job_group", sa.String(length=200), nullable=False),
        sa.Column("description", sa.String(length=250), nullable=True),
        sa.Column("task_name", sa.String(length=255), nullable=False),
        sa.Column("job_data", sa.Text(), server_default="{}", nullable=False),
        sa.Column("args", sa.Text(), server_default="[]", nullable=False),
        sa.Column("kwargs", sa.Text(), server_default="{}", nullable=False),
        sa.Column("options", sa.Text(), server_default="{}", nullable=False),
        sa.Column("is_durable", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("is_nonconcurrent", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("is_update_data", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("requests_recovery", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("definition_hash", sa.String(length=64), nullable=True),
        sa.PrimaryKeyConstraint("sched_name", "job_name", "job_group"),
    )
    op.create_table(
        f"{p}locks",
        sa.Column("sched_name", sa.String(length=120), nullable=False),
        sa.Column("lock_name", sa.String(length=40), nullable=False),
        sa.Column("epoch", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.PrimaryKeyConstraint("sched_name", "lock_name"),
    )
    op.create_table(
        f"{p}paused_trigger_grps",
        sa.Column("sched_name", sa.String(length=120), nullable=False),
        sa.Column("trigger_group", sa.String(length=200), nullable=False),
        sa.PrimaryKeyConstraint("sched_name", "trigger_group"),
    )
    op.create_table(
        f"{p}scheduler_state",
        sa.Column("sched_name", sa.String(length=120), nullable=False),
        sa.Column("instance_name", sa.String(length=255), nullable=False),
        sa.Column("kind", sa.String(length=16), server_default="scheduler", nullable=False),
        sa.Column("last_checkin_time", sa.BigInteger(), nullable=False),
        sa.Column("checkin_interval", sa.BigInteger(), nullable=False),
        sa.Column("clustered", sa.Boolean(), server_default=sa.true(), nullable=False),
        sa.Column("epoch", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=True),
        sa.Column("hostname", sa.String(length=255), nullable=True),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.Column("started_time", sa.BigInteger(), nullable=True),
        sa.Column("queues", sa.Text(), nullable=True),
        sa.Column("concurrency", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("sched_name", "instance_name"),
    )
    op.create_table(
        f"{p}triggers",
        sa.Column("sched_name", sa.String(length=120), nullable=False),
        sa.Column("trigger_name", sa.String(length=200), nullable=False),
        sa.Column("trigger_group", sa.String(length=200), nullable=False),
        sa.Column("job_name", sa.String(length=200), nullable=False),
        sa.Column("job_group", sa.String(length=200), nullable=False),
        sa.Column("description", sa.String(length=250), nullable=True),
        sa.Column("next_fire_time", sa.BigInteger(), nullable=True),
        sa.Column("prev_fire_time", sa.BigInteger(), nullable=True),
        sa.Column("priority", sa.Integer(), server_default=sa.text("5"), nullable=False),
        sa.Column("trigger_state", sa.String(length=16), nullable=False),
        sa.Column("trigger_type", sa.String(length=8), nullable=False),
        sa.Column("start_time", sa.BigInteger(), nullable=False),
        sa.Column("end_time", sa.BigInteger(), nullable=True),
        sa.Column("calendar_name", sa.String(length=200), nullable=True),
        sa.Column("misfire_instr", sa.SmallInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("job_data", sa.Text(), server_default="{}", nullable=False),
        sa.Column("detail", sa.Text(), server_default="{}", nullable=False),
        sa.Column("times_triggered", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("execution_group", sa.String(length=200), nullable=True),
        sa.Column("preferred_node", sa.String(length=255), nullable=True),
        sa.Column("preferred_node_auto", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("retry_policy", sa.String(length=200), nullable=True),
        sa.Column("retry_attempt", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("origin_trigger_name", sa.String(length=200), nullable=True),
        sa.Column("origin_trigger_group", sa.String(length=200), nullable=True),
        sa.Column("origin_fire_time", sa.BigInteger(), nullable=True),
        sa.Column("origin_sched_time", sa.BigInteger(), nullable=True),
        sa.Column("recovering", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("misfire_orig_fire_time", sa.BigInteger(), nullable=True),
        sa.Column("definition_hash", sa.String(length=64), nullable=True),
        sa.ForeignKeyConstraint(
            ["sched_name", "job_name", "job_group"],
            [f"{p}jobs.sched_name", f"{p}jobs.job_name", f"{p}jobs.job_group"],
            name=f"fk_{p}triggers_job",
        ),
        sa.PrimaryKeyConstraint("sched_name", "trigger_name", "trigger_group"),
    )
    op.create_index(
        f"ix_{p}triggers_acquire",
        f"{p}triggers",
        ["sched_name", "trigger_state", "next_fire_time", sa.text("priority DESC")],
        unique=False,
    )
    op.create_index(
        f"ix_{p}triggers_exec_group",
        f"{p}triggers",
        ["sched_name", "execution_group", "trigger_state"],
        unique=False,
    )
    op.create_index(
        f"ix_{p}triggers_group",
        f"{p}triggers",
        ["sched_name", "trigger_group", "trigger_state"],
        unique=False,
    )
    op.create_index(
        f"ix_{p}triggers_job", f"{p}triggers", ["sched_name", "job_name", "job_group"], unique=False
    )


def downgrade() -> None:
    p = table_prefix()
    op.drop_table(f"{p}triggers")
    op.drop_table(f"{p}jobs")
    op.drop_table(f"{p}fired_triggers")
    op.drop_table(f"{p}calendars")
    op.drop_table(f"{p}locks")
    op.drop_table(f"{p}paused_trigger_grps")
    op.drop_table(f"{p}scheduler_state")
