"""The tables, declared once, after Quartz's ``QRTZ_*`` schema.

Every table carries ``sched_name`` so several logical schedulers (clusters) can share one set of
tables; every name starts with a configurable prefix (``quartz_`` by default). Times are integer
milliseconds since the Unix epoch, UTC, as Quartz stores them: exact, cheap to index and to compare.

Differences from Quartz, and why:

* One trigger table with a ``trigger_type`` and a JSON ``detail`` column instead of
  ``QRTZ_SIMPLE_TRIGGERS``/``QRTZ_CRON_TRIGGERS``/…: acquisition reads and advances a trigger with
  no join, in one statement per batch.
* Columns Quartz 4.x has in other forms or not at all: ``execution_group``, ``preferred_node`` with
  its auto-claim flag, ``retry_policy``/``retry_attempt``, the ``origin_*`` columns of recovery and
  retry firings, ``misfire_orig_fire_time``, a fencing ``epoch`` on scheduler state and locks.
* ``fired_triggers`` follows a firing to its completion on a Celery worker (``worker_name``,
  ``published_time``, ``started_time``, ``expires_time``).
* ``jobs`` names a registered Celery task and keeps JSON only: ``job_data``, ``args``, ``kwargs``,
  ``options`` (Celery publish options such as ``queue``). Never pickle.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    ColumnElement,
    Float,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
    false,
    text,
    true,
)

from celery_quartz.keys import MAX_DESCRIPTION_LENGTH, MAX_TASK_NAME_LENGTH
from celery_quartz.table_prefix import DEFAULT_TABLE_PREFIX

# Column widths shared by every table (Quartz's are 120/190/200; we keep room for Celery names).
SCHED_NAME = 120
KEY_PART = 200
TASK_NAME = MAX_TASK_NAME_LENGTH
NODE_NAME = 255
STATE = 16
#: Longest error reason or exception message kept on a trigger (longer ones are cut).
ERROR_TEXT = 1000
#: Longest reason a pause records.
PAUSE_REASON = 250
#: Longest overlap policy name (``cancel_previous``).
OVERLAP_POLICY = 16
#: Longest summary a task reports for its run, and longest reason of a run that did not happen.
SUMMARY_TEXT = 1000


class TriggerState:
    """The values of ``triggers.trigger_state`` (Quartz's)."""

    WAITING = "WAITING"
    ACQUIRED = "ACQUIRED"
    EXECUTING = "EXECUTING"  # not stored on triggers; kept for the vocabulary of get_trigger_state
    COMPLETE = "COMPLETE"
    PAUSED = "PAUSED"
    BLOCKED = "BLOCKED"
    PAUSED_BLOCKED = "PAUSED_BLOCKED"
    ERROR = "ERROR"


#: The states of a paused trigger (a pause record goes with them).
PAUSED_STATES = frozenset({TriggerState.PAUSED, TriggerState.PAUSED_BLOCKED})

#: The states a trigger row holds (every state but EXECUTING), in the order of a trigger's life.
STORED_TRIGGER_STATES = (
    TriggerState.WAITING,
    TriggerState.ACQUIRED,
    TriggerState.BLOCKED,
    TriggerState.PAUSED,
    TriggerState.PAUSED_BLOCKED,
    TriggerState.COMPLETE,
    TriggerState.ERROR,
)


class FiringState:
    """The values of ``fired_triggers.state``: a firing from acquisition to completion."""

    ACQUIRED = "ACQUIRED"  # claimed by a scheduler, not yet fired
    FIRED = "FIRED"  # trigger advanced; the message is being published (may or may not be out)
    PUBLISHED = "PUBLISHED"  # the broker accepted the message
    EXECUTING = "EXECUTING"  # a worker started it (exactly one worker: conditional update)


#: The states of a fired-trigger row, from its claim to its start on a worker.
FIRING_STATES = (
    FiringState.ACQUIRED,
    FiringState.FIRED,
    FiringState.PUBLISHED,
    FiringState.EXECUTING,
)


@dataclass(frozen=True)
class Tables:
    """The tables of one prefix, bound to one :class:`MetaData`."""

    metadata: MetaData
    jobs: Table
    triggers: Table
    fired_triggers: Table
    scheduler_state: Table
    locks: Table
    paused_trigger_groups: Table
    calendars: Table
    history: Table
    history_rollups: Table
    run_status: Table
    audit: Table
    backfill_slots: Table
    prefix: str


def _sched_name() -> Column[str]:
    return Column("sched_name", String(SCHED_NAME), primary_key=True)


def _where(condition: ColumnElement[bool]) -> dict[str, Any]:
    """A partial index's condition, on the dialects that have partial indexes (elsewhere the
    index covers every row)."""
    return {"postgresql_where": condition, "sqlite_where": condition}


@functools.cache
def build_tables(prefix: str = DEFAULT_TABLE_PREFIX) -> Tables:
    """Declare every table under ``prefix``, once per prefix and process: the tables are
    definitions, bound to no engine, so every store with that prefix shares them (declaring
    them took about 5 ms, at each store's opening)."""
    if not prefix.replace("_", "").isalnum() or not prefix[0].isalpha():
        from celery_quartz.errors import ConfigurationError

        raise ConfigurationError(
            f"quartz_table_prefix {prefix!r}: use letters, digits and underscores, "
            "starting with a letter"
        )
    md = MetaData()
    p = prefix

    jobs = Table(
        f"{p}jobs",
        md,
        _sched_name(),
        Column("job_name", String(KEY_PART), primary_key=True),
        Column("job_group", String(KEY_PART), primary_key=True),
        Column("description", String(MAX_DESCRIPTION_LENGTH)),
        Column("task_name", String(TASK_NAME), nullable=False),
        Column("job_data", Text, nullable=False, server_default="{}"),
        Column("args", Text, nullable=False, server_default="[]"),
        Column("kwargs", Text, nullable=False, server_default="{}"),
        Column("options", Text, nullable=False, server_default="{}"),
        Column("is_durable", Boolean, nullable=False, server_default=false()),
        Column("is_nonconcurrent", Boolean, nullable=False, server_default=false()),
        Column("is_update_data", Boolean, nullable=False, server_default=false()),
        Column("requests_recovery", Boolean, nullable=False, server_default=false()),
        # What produced the row (e.g. a beat_schedule entry): lets an import tell "unchanged".
        Column("definition_hash", String(64)),
        # The job must succeed at least this often (ms), or it is listed as owed (schema 0006).
        Column("require_success_within", BigInteger),
        # The retry policy of its triggers that have none (schema 0007).
        Column("retry_policy", String(200)),
    )

    triggers = Table(
        f"{p}triggers",
        md,
        _sched_name(),
        Column("trigger_name", String(KEY_PART), primary_key=True),
        Column("trigger_group", String(KEY_PART), primary_key=True),
        Column("job_name", String(KEY_PART), nullable=False),
        Column("job_group", String(KEY_PART), nullable=False),
        Column("description", String(MAX_DESCRIPTION_LENGTH)),
        Column("next_fire_time", BigInteger),
        Column("prev_fire_time", BigInteger),
        Column("priority", Integer, nullable=False, server_default=text("5")),
        Column("trigger_state", String(STATE), nullable=False),
        Column("trigger_type", String(8), nullable=False),
        Column("start_time", BigInteger, nullable=False),
        Column("end_time", BigInteger),
        Column("calendar_name", String(KEY_PART)),
        Column("misfire_instr", SmallInteger, nullable=False, server_default=text("0")),
        Column("job_data", Text, nullable=False, server_default="{}"),
        Column("detail", Text, nullable=False, server_default="{}"),
        Column("times_triggered", Integer, nullable=False, server_default=text("0")),
        Column("execution_group", String(KEY_PART)),
        Column("preferred_node", String(NODE_NAME)),
        Column("preferred_node_auto", Boolean, nullable=False, server_default=false()),
        Column("retry_policy", String(200)),
        Column("retry_attempt", Integer, nullable=False, server_default=text("0")),
        # A recovery or retry firing names the occurrence it stands for.
        Column("origin_trigger_name", String(KEY_PART)),
        Column("origin_trigger_group", String(KEY_PART)),
        Column("origin_fire_time", BigInteger),
        Column("origin_sched_time", BigInteger),
        Column("recovering", Boolean, nullable=False, server_default=false()),
        Column("misfire_orig_fire_time", BigInteger),
        Column("definition_hash", String(64)),
        # Why the trigger was put in ERROR (its task is not registered, ...); cleared by a reset.
        Column("error_reason", String(ERROR_TEXT)),
        # The last firing's outcome, written by the completion that ends it (schema 0004).
        Column("last_started_time", BigInteger),
        Column("last_finished_time", BigInteger),
        Column("last_outcome", String(STATE)),
        Column("last_error_type", String(KEY_PART)),
        Column("last_error_message", String(ERROR_TEXT)),
        Column("consecutive_failures", Integer),
        # Why it is paused, by whom, since when (schema 0007): set by a pause, cleared by the
        # resume; a trigger stored into a paused group takes the group's.
        Column("pause_reason", String(PAUSE_REASON)),
        Column("paused_by", String(NODE_NAME)),
        Column("paused_time", BigInteger),
        # Its overlap policy (schema 0008): NULL is ``allow``.
        Column("overlap_policy", String(OVERLAP_POLICY)),
        # Whether an occurrence failing with no retry left pauses it; NULL: the scheduler's
        # setting (schema 0010).
        Column("pause_when_retries_exhausted", Boolean),
        ForeignKeyConstraint(
            ["sched_name", "job_name", "job_group"],
            [jobs.c.sched_name, jobs.c.job_name, jobs.c.job_group],
            name=f"fk_{p}triggers_job",
        ),
    )
    # Acquisition: "WAITING triggers due by T, by next fire time then priority" is a range scan.
    Index(
        f"ix_{p}triggers_acquire",
        triggers.c.sched_name,
        triggers.c.trigger_state,
        triggers.c.next_fire_time,
        # Descending, as acquisition orders: a batch is the first rows of the index, even when
        # thousands are due at the same instant (no sort of everything due).
        triggers.c.priority.desc(),
    )
    Index(f"ix_{p}triggers_job", triggers.c.sched_name, triggers.c.job_name, triggers.c.job_group)
    # Group then name: the operators' listing pages in this order (keyset), so a page is the
    # next rows of the index whatever the table's size; it also serves every "of this group"
    # write (pause and resume a group). Replaced (group, state) in schema 0004.
    Index(
        f"ix_{p}triggers_group",
        triggers.c.sched_name,
        triggers.c.trigger_group,
        triggers.c.trigger_name,
    )
    # Partial: most triggers have no execution group, and every firing rewrites its trigger's row
    # (a new entry in each of the table's indexes that covers it).
    Index(
        f"ix_{p}triggers_exec_group",
        triggers.c.sched_name,
        triggers.c.execution_group,
        triggers.c.trigger_state,
        **_where(triggers.c.execution_group.is_not(None)),
    )

    # The operators' "of this execution group" listing, in page order (schema 0005): the page is
    # the next rows of the index, not a sort of the whole group. Partial, as the one above;
    # that one (with the state) serves the schedulers' per-group reads.
    Index(
        f"ix_{p}triggers_exec_group_page",
        triggers.c.sched_name,
        triggers.c.execution_group,
        triggers.c.trigger_group,
        triggers.c.trigger_name,
        **_where(triggers.c.execution_group.is_not(None)),
    )

    # The operators' "pinned to this worker" listing, in page order; partial: only pinned
    # triggers have an entry (and pay for it when they fire). Schema 0004.
    Index(
        f"ix_{p}triggers_pinned",
        triggers.c.sched_name,
        triggers.c.preferred_node,
        triggers.c.trigger_group,
        triggers.c.trigger_name,
        **_where(triggers.c.preferred_node.is_not(None)),
    )

    fired = Table(
        f"{p}fired_triggers",
        md,
        _sched_name(),
        # The fire instance id; also the Celery task id of the firing's message.
        Column("fire_instance_id", String(95), primary_key=True),
        Column("trigger_name", String(KEY_PART), nullable=False),
        Column("trigger_group", String(KEY_PART), nullable=False),
        Column("instance_name", String(NODE_NAME), nullable=False),
        Column("fired_time", BigInteger, nullable=False),
        Column("sched_time", BigInteger, nullable=False),
        Column("priority", Integer, nullable=False),
        Column("state", String(STATE), nullable=False),
        Column("job_name", String(KEY_PART)),
        Column("job_group", String(KEY_PART)),
        Column("is_nonconcurrent", Boolean, nullable=False, server_default=false()),
        Column("requests_recovery", Boolean, nullable=False, server_default=false()),
        Column("execution_group", String(KEY_PART)),
        Column("worker_name", String(NODE_NAME)),
        Column("published_time", BigInteger),
        Column("started_time", BigInteger),
        Column("expires_time", BigInteger),
        Column("retry_attempt", Integer, nullable=False, server_default=text("0")),
        Column("refire_count", Integer, nullable=False, server_default=text("0")),
        Column("recovering", Boolean, nullable=False, server_default=false()),
        # Times an expired (never started) message of this firing was published again.
        Column("expired_count", Integer, nullable=False, server_default=text("0")),
        # A dead worker's disallow_concurrent execution is recovered no earlier than this.
        Column("recovery_after", BigInteger),
        # The pin seen at acquisition (compare-and-swap of auto-pins) and where it was sent.
        Column("preferred_node", String(NODE_NAME)),
        Column("preferred_node_auto", Boolean, nullable=False, server_default=false()),
        Column("queue", String(KEY_PART)),
        # What the running task last reported (current_context().report_progress), schema 0007.
        Column("progress", Float),
        Column("progress_message", String(PAUSE_REASON)),
        Column("progress_time", BigInteger),
        # When a later firing of its trigger replaced it (``cancel_previous``), schema 0011: a
        # worker whose pool cannot terminate the run reads it (``current_context().cancelled``).
        Column("cancel_requested_time", BigInteger),
    )
    Index(f"ix_{p}fired_instance", fired.c.sched_name, fired.c.instance_name, fired.c.state)
    Index(f"ix_{p}fired_trigger", fired.c.sched_name, fired.c.trigger_name, fired.c.trigger_group)
    Index(f"ix_{p}fired_job", fired.c.sched_name, fired.c.job_name, fired.c.job_group)
    # Partial: a fired row has no worker until it starts, and is written twice before (fired,
    # then published), each time a new entry in each of the table's indexes that covers it.
    Index(
        f"ix_{p}fired_worker",
        fired.c.sched_name,
        fired.c.worker_name,
        **_where(fired.c.worker_name.is_not(None)),
    )

    scheduler_state = Table(
        f"{p}scheduler_state",
        md,
        _sched_name(),
        Column("instance_name", String(NODE_NAME), primary_key=True),
        # "scheduler" for a beat process, "worker" for a Celery worker.
        Column("kind", String(16), nullable=False, server_default="scheduler"),
        Column("last_checkin_time", BigInteger, nullable=False),
        Column("checkin_interval", BigInteger, nullable=False),
        Column("clustered", Boolean, nullable=False, server_default=true()),
        Column("epoch", BigInteger, nullable=False, server_default=text("0")),
        # A scheduler's lifecycle status (RUNNING, STANDBY, ...), written at each transition.
        Column("status", String(16)),
        Column("hostname", String(255)),
        Column("pid", Integer),
        Column("started_time", BigInteger),
        Column("queues", Text),  # a worker's consumed queues, JSON list
        Column("concurrency", Integer),
    )

    locks = Table(
        f"{p}locks",
        md,
        _sched_name(),
        Column("lock_name", String(40), primary_key=True),
        Column("epoch", BigInteger, nullable=False, server_default=text("0")),
    )

    paused = Table(
        f"{p}paused_trigger_grps",
        md,
        _sched_name(),
        Column("trigger_group", String(KEY_PART), primary_key=True),
        Column("pause_reason", String(PAUSE_REASON)),
        Column("paused_by", String(NODE_NAME)),
        Column("paused_time", BigInteger),
    )

    calendars = Table(
        f"{p}calendars",
        md,
        _sched_name(),
        Column("calendar_name", String(KEY_PART), primary_key=True),
        Column("calendar", Text, nullable=False),
    )

    # -- run history (schema 0006, docs/history.md) -------------------------------------------
    # One row per finished execution (result: succeeded, failed, cancelled, interrupted,
    # recovered, retried) and per occurrence that did not run (misfired, expired, held,
    # skipped), with a reason. Written by the worker in the transaction that ends the firing,
    # and by the scheduler where it decides a non-run. ``event_time`` is when it finished or
    # was decided: the axis of paging, statistics and retention.
    history = Table(
        f"{p}history",
        md,
        Column(
            "history_id",
            BigInteger().with_variant(Integer, "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        Column("sched_name", String(SCHED_NAME), nullable=False),
        Column("event_time", BigInteger, nullable=False),
        Column("result", String(STATE), nullable=False),
        # The occurrence: its original trigger (a recovery or retry firing's origin) and time.
        Column("trigger_name", String(KEY_PART), nullable=False),
        Column("trigger_group", String(KEY_PART), nullable=False),
        Column("job_name", String(KEY_PART)),
        Column("job_group", String(KEY_PART)),
        Column("scheduled_time", BigInteger),
        # The firing, when there was one.
        Column("fire_instance_id", String(95)),
        Column("task_name", String(TASK_NAME)),
        Column("task_id", String(120)),
        Column("published_time", BigInteger),
        Column("started_time", BigInteger),
        Column("finished_time", BigInteger),
        Column("duration_ms", BigInteger),
        Column("lateness_ms", BigInteger),
        Column("error_type", String(KEY_PART)),
        Column("error_message", String(ERROR_TEXT)),
        Column("worker_name", String(NODE_NAME)),
        # The scheduler instance that published the firing, or decided the non-run.
        Column("instance_name", String(NODE_NAME)),
        Column("retry_attempt", Integer, nullable=False, server_default=text("0")),
        Column("recovering", Boolean, nullable=False, server_default=false()),
        # Why an occurrence did not run (or what became of it: the misfire instruction applied).
        Column("reason", String(SUMMARY_TEXT)),
        # What the task reported (current_context().report), bounded.
        Column("summary", String(SUMMARY_TEXT)),
        Column("metrics", Text),
        # The run's arguments (JSON), for "Run again"; None when over the bound.
        Column("args", Text),
        Column("kwargs", Text),
        # Not yet folded into the rollups (the sweep folds, then clears it).
        Column("unfolded", Boolean, nullable=False, server_default=true()),
    )
    Index(
        f"ix_{p}history_time",
        history.c.sched_name,
        history.c.event_time,
        history.c.history_id,
    )
    Index(
        f"ix_{p}history_job",
        history.c.sched_name,
        history.c.job_group,
        history.c.job_name,
        history.c.event_time,
        history.c.history_id,
    )
    Index(
        f"ix_{p}history_trigger",
        history.c.sched_name,
        history.c.trigger_group,
        history.c.trigger_name,
        history.c.event_time,
        history.c.history_id,
    )
    Index(
        f"ix_{p}history_result",
        history.c.sched_name,
        history.c.result,
        history.c.event_time,
        history.c.history_id,
    )
    # Partial: only the rows the sweep has still to fold have an entry.
    Index(
        f"ix_{p}history_unfolded",
        history.c.sched_name,
        history.c.history_id,
        **_where(history.c.unfolded.is_(True)),
    )

    # Counts and percentiles of the history by bucket, folded by the sweep: per job and for the
    # whole scheduler (job_group = job_name = ''), at 300 s, 3600 s and 86400 s. Durations and
    # latenesses are kept as sparse histograms (JSON {bin: count}, log-spaced bins) so that
    # p50/p95 of any range merge from the buckets.
    history_rollups = Table(
        f"{p}history_rollups",
        md,
        _sched_name(),
        Column("job_group", String(KEY_PART), primary_key=True),
        Column("job_name", String(KEY_PART), primary_key=True),
        Column("bucket_seconds", Integer, primary_key=True),
        Column("bucket_start", BigInteger, primary_key=True),
        Column("result", String(STATE), primary_key=True),
        Column("runs", BigInteger, nullable=False, server_default=text("0")),
        Column("duration_max", BigInteger),
        Column("duration_hist", Text),
        Column("lateness_max", BigInteger),
        Column("lateness_hist", Text),
    )
    # The sweep's range of old rollups, by width and age (whatever the number of jobs).
    Index(
        f"ix_{p}history_rollups_age",
        history_rollups.c.sched_name,
        history_rollups.c.bucket_seconds,
        history_rollups.c.bucket_start,
    )

    # Each job's and trigger's runs in short, kept when the history rows are swept: the last
    # run and success, failures in a row, counts. Folded in the transaction of the history row.
    run_status = Table(
        f"{p}run_status",
        md,
        _sched_name(),
        # "job" or "trigger".
        Column("kind", String(8), primary_key=True),
        Column("key_group", String(KEY_PART), primary_key=True),
        Column("key_name", String(KEY_PART), primary_key=True),
        # When this status was first written (a deadline with no success yet counts from here).
        Column("since_time", BigInteger, nullable=False),
        Column("last_run_time", BigInteger),
        Column("last_result", String(STATE)),
        Column("last_success_time", BigInteger),
        Column("consecutive_failures", Integer, nullable=False, server_default=text("0")),
        Column("runs", BigInteger, nullable=False, server_default=text("0")),
        Column("failures", BigInteger, nullable=False, server_default=text("0")),
        # History rows of this key still stored (the sweep's count, for the per-trigger cap).
        Column("history_rows", BigInteger, nullable=False, server_default=text("0")),
    )
    # The sweep's range of the triggers over their cap of stored rows.
    Index(
        f"ix_{p}run_status_rows",
        run_status.c.sched_name,
        run_status.c.kind,
        run_status.c.history_rows,
    )

    # Every change, by whom, through what (docs/history.md#audit).
    audit = Table(
        f"{p}audit",
        md,
        Column(
            "audit_id",
            BigInteger().with_variant(Integer, "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        Column("sched_name", String(SCHED_NAME), nullable=False),
        Column("event_time", BigInteger, nullable=False),
        Column("principal", String(NODE_NAME), nullable=False),
        # client, cli, api, dashboard, file, import, beat_schedule, scheduler.
        Column("via", String(32), nullable=False),
        Column("action", String(64), nullable=False),
        # job, trigger, calendar, group, scheduler, ...
        Column("target_kind", String(16), nullable=False),
        Column("target", String(2 * KEY_PART + 1)),
        # JSON: {"field": [before, after], ...} with secrets redacted, or the action's details.
        Column("changes", Text),
    )
    Index(f"ix_{p}audit_time", audit.c.sched_name, audit.c.event_time, audit.c.audit_id)
    Index(
        f"ix_{p}audit_principal",
        audit.c.sched_name,
        audit.c.principal,
        audit.c.event_time,
        audit.c.audit_id,
    )

    # The occurrences a backfill scheduled (schema 0009, docs/steering.md#backfill): one row per
    # (trigger, slot), so that two backfills, even at once, schedule a slot once: the second
    # one's insert of the same key does nothing. The key serves the range read of a backfill.
    backfill_slots = Table(
        f"{p}backfill_slots",
        md,
        _sched_name(),
        Column("trigger_group", String(KEY_PART), primary_key=True),
        Column("trigger_name", String(KEY_PART), primary_key=True),
        Column("slot_time", BigInteger, primary_key=True),
        # When the backfill stored it, and the one-shot trigger that fires it.
        Column("created_time", BigInteger, nullable=False),
        Column("firing_trigger_name", String(KEY_PART), nullable=False),
    )

    return Tables(
        metadata=md,
        jobs=jobs,
        triggers=triggers,
        fired_triggers=fired,
        scheduler_state=scheduler_state,
        locks=locks,
        paused_trigger_groups=paused,
        calendars=calendars,
        history=history,
        history_rollups=history_rollups,
        run_status=run_status,
        audit=audit,
        backfill_slots=backfill_slots,
        prefix=prefix,
    )
