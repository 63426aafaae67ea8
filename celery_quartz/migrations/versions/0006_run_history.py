"""Run history and audit: a row per finished execution and per occurrence that did not run
(``history``), their counts and percentiles by bucket (``history_rollups``), each job's and
trigger's runs in short, kept when history rows are swept (``run_status``), every change made
to the schedule (``audit``), and a job's success deadline (``jobs.require_success_within``).

Additive: new tables, and a nullable column with no default (adding it rewrites no row).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02
"""

from typing import Any

import sqlalchemy as sa
from alembic import op

from celery_quartz.migrations.prefix import table_prefix

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def _id(name: str) -> sa.Column[Any]:
    return sa.Column(
        name,
        sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
        primary_key=True,
        autoincrement=True,
    )


def upgrade() -> None:
    p = table_prefix()
    with op.batch_alter_table(f"{p}jobs") as batch:
        batch.add_column(sa.Column("require_success_within", sa.BigInteger(), nullable=True))

    op.create_table(
        f"{p}history",
        _id("history_id"),
        sa.Column("sched_name", sa.String(120), nullable=False),
        sa.Column("event_time", sa.BigInteger(), nullable=False),
        sa.Column("result", sa.String(16), nullable=False),
        sa.Column("trigger_name", sa.String(200), nullable=False),
        sa.Column("trigger_group", sa.String(200), nullable=False),
        sa.Column("job_name", sa.String(200)),
        sa.Column("job_group", sa.String(200)),
        sa.Column("scheduled_time", sa.BigInteger()),
        sa.Column("fire_instance_id", sa.String(95)),
        sa.Column("task_name", sa.String(255)),
        sa.Column("task_id", sa.String(120)),
        sa.Column("published_time", sa.BigInteger()),
        sa.Column("started_time", sa.BigInteger()),
        sa.Column("finished_time", sa.BigInteger()),
        sa.Column("duration_ms", sa.BigInteger()),
        sa.Column("lateness_ms", sa.BigInteger()),
        sa.Column("error_type", sa.String(200)),
        sa.Column("error_message", sa.String(1000)),
        sa.Column("worker_name", sa.String(255)),
        sa.Column("instance_name", sa.String(255)),
        sa.Column("retry_attempt", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("recovering", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("reason", sa.String(1000)),
        sa.Column("summary", sa.String(1000)),
        sa.Column("metrics", sa.Text()),
        sa.Column("args", sa.Text()),
        sa.Column("kwargs", sa.Text()),
        sa.Column("unfolded", sa.Boolean(), nullable=False, server_default=sa.true()),
    )
    h = f"{p}history"
    op.create_index(f"ix_{p}history_time", h, ["sched_name", "event_time", "history_id"])
    op.create_index(
        f"ix_{p}history_job",
        h,
        ["sched_name", "job_group", "job_name", "event_time", "history_id"],
    )
    op.create_index(
        f"ix_{p}history_trigger",
        h,
        ["sched_name", "trigger_group", "trigger_name", "event_time", "history_id"],
    )
    op.create_index(
        f"ix_{p}history_result", h, ["sched_name", "result", "event_time", "history_id"]
    )
    unfolded = sa.text("unfolded IS true")
    op.create_index(
        f"ix_{p}history_unfolded",
        h,
        ["sched_name", "history_id"],
        postgresql_where=unfolded,
        sqlite_where=unfolded,
    )

    op.create_table(
        f"{p}history_rollups",
        sa.Column("sched_name", sa.String(120), primary_key=True),
        sa.Column("job_group", sa.String(200), primary_key=True),
        sa.Column("job_name", sa.String(200), primary_key=True),
        sa.Column("bucket_seconds", sa.Integer(), primary_key=True),
        sa.Column("bucket_start", sa.BigInteger(), primary_key=True),
        sa.Column("result", sa.String(16), primary_key=True),
        sa.Column("runs", sa.BigInteger(), nullable=False, server_default=sa.text("0")),
        sa.Column("duration_max", sa.BigInteger()),
        sa.Column("duration_hist", sa.Text()),
        sa.Column("lateness_max", sa.BigInteger()),
        sa.Column("lateness_hist", sa.Text()),
    )
    op.create_index(
        f"ix_{p}history_rollups_age",
        f"{p}history_rollups",
        ["sched_name", "bucket_seconds", "bucket_start"],
    )

    op.create_table(
        f"{p}run_status",
        sa.Column("sched_name", sa.String(120), primary_key=True),
        sa.Column("kind", sa.String(8), primary_key=True),
        sa.Column("key_group", sa.String(200), primary_key=True),
        sa.Column("key_name", sa.String(200), primary_key=True),
        sa.Column("since_time", sa.BigInteger(), nullable=False),
        sa.Column("last_run_time", sa.BigInteger()),
        sa.Column("last_result", sa.String(16)),
        sa.Column("last_success_time", sa.BigInteger()),
        sa.Column(
            "consecutive_failures", sa.Integer(), nullable=False, server_default=sa.text("0")
        ),
        sa.Column("runs", sa.BigInteger(), nullable=False, server_default=sa.text("0")),
        sa.Column("failures", sa.BigInteger(), nullable=False, server_default=sa.text("0")),
        sa.Column("history_rows", sa.BigInteger(), nullable=False, server_default=sa.text("0")),
    )
    op.create_index(
        f"ix_{p}run_status_rows", f"{p}run_status", ["sched_name", "kind", "history_rows"]
    )

    op.create_table(
        f"{p}audit",
        _id("audit_id"),
        sa.Column("sched_name", sa.String(120), nullable=False),
        sa.Column("event_time", sa.BigInteger(), nullable=False),
        sa.Column("principal", sa.String(255), nullable=False),
        sa.Column("via", sa.String(32), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("target_kind", sa.String(16), nullable=False),
        sa.Column("target", sa.String(401)),
        sa.Column("changes", sa.Text()),
    )
    op.create_index(f"ix_{p}audit_time", f"{p}audit", ["sched_name", "event_time", "audit_id"])
    op.create_index(
        f"ix_{p}audit_principal",
        f"{p}audit",
        ["sched_name", "principal", "event_time", "audit_id"],
    )


def downgrade() -> None:
    p = table_prefix()
    op.drop_table(f"{p}audit")
    op.drop_table(f"{p}run_status")
    op.drop_table(f"{p}history_rollups")
    op.drop_table(f"{p}history")
    with op.batch_alter_table(f"{p}jobs") as batch:
        batch.drop_column("require_success_within")
