"""The Celery app the integration tests run in real beat and worker processes.

Configured from the environment (set by :mod:`tests.integration.processes`):
``CQ_BROKER_URL``, ``CQ_STORE_URL``, ``CQ_LEDGER_URL`` and optional ``CQ_CHECKIN_INTERVAL``,
``CQ_CHECKIN_THRESHOLD``, ``CQ_BEAT_SCHEDULE`` (JSON: name -> {"task", "schedule" seconds});
``CQ_CLUSTERED=0`` with ``CQ_ELECTION``, ``CQ_ELECTION_REDIS_URL``, ``CQ_ELECTION_LOCK_TIMEOUT``,
``CQ_ELECTION_RETRY``, ``CQ_INSTANCE_ID`` for a non-clustered scheduler under an election;
``CQ_EXECUTION_LIMITS`` (JSON, the mapping form of ``quartz_execution_limits``);
``CQ_SCHEDULING_FILES`` (paths joined by ``os.pathsep``) and ``CQ_SCHEDULING_FILES_SCAN``
(seconds) for ``quartz_scheduling_files``; ``CQ_COMPLETION_DELAY`` (seconds) for
``quartz_worker_completion_delay``; ``CQ_SCHEMA_AUTO_UPGRADE`` (``0`` or ``1``) for
``quartz_schema_auto_upgrade``; ``CQ_BROKER_MASTER_NAME`` (a ``sentinel://`` broker's
``broker_transport_options["master_name"]``); ``CQ_TASK_QUEUE_ARGUMENTS`` (JSON: the default
queue ``celery`` declared with these arguments, ``{"x-queue-type": "quorum"}`` or
``{"x-max-priority": 10}``).

Test-only instruments, none of them in the package: ``CQ_CLOCK_OFFSET`` (seconds) moves the
system clock every celery-quartz component reads (``celery_quartz.clock.SystemClock``) by a fixed
amount, so a process runs as if it were another day (the beat and the worker of one test must be
given the same offset); ``CQ_HEALTH_FILE`` makes a beat process write
``celery_quartz.health.health_check`` of its own scheduler to that file, as JSON, twice a second.

The task ``ledger.record`` writes one row per execution start into a ledger table whose primary
key is the occurrence (trigger group, trigger name, scheduled fire time): a second execution of
the same occurrence cannot insert and is written to ``ledger_duplicates`` instead. The task
``ledger.flaky`` writes every execution start, retries included, into ``ledger_attempts`` and
fails its first attempts on purpose; ``ledger.celery_retry`` and ``ledger.refire`` record each
delivery there too, asking Celery to retry them (``self.retry``) or raising ``RefireJob``.
``ledger.count`` records the counter it finds in its job data and increments it.
``ledger.backfill`` records each execution with the backfill slot its context says.
"""

from __future__ import annotations

import faulthandler
import json
import logging
import os
import signal
import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from celery import Celery
from celery.signals import after_setup_logger, beat_init
from sqlalchemy import (
    BigInteger,
    Column,
    Engine,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    create_engine,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError, OperationalError

import celery_quartz
from celery_quartz.clock import to_millis
from celery_quartz.errors import RefireJob
from celery_quartz.store.schema import build_tables
from celery_quartz.store.sql import SqlStore
from celery_quartz.table_prefix import DEFAULT_TABLE_PREFIX
from tests.stores import store_at

metadata = MetaData()


def _occurrence_columns() -> list[Column[Any]]:
    """An occurrence (its trigger's key and scheduled time) and the firing that ran it."""
    return [
        Column("trigger_group", String(200)),
        Column("trigger_name", String(200)),
        Column("scheduled_ms", BigInteger),
        Column("fire_instance_id", String(95)),
    ]


ledger = Table(
    "ledger",
    metadata,
    Column("trigger_group", String(200), primary_key=True),
    Column("trigger_name", String(200), primary_key=True),
    Column("scheduled_ms", BigInteger, primary_key=True),
    Column("fire_instance_id", String(95), nullable=False),
    Column("fired_by", String(255)),
    Column("worker", String(255)),
    Column("started", Float, nullable=False),
    Column("ended", Float),
)
duplicates = Table(
    "ledger_duplicates",
    metadata,
    *_occurrence_columns(),
    Column("worker", String(255)),
)
# Recovery firings run an occurrence again on purpose (its first worker died): recorded apart.
recoveries = Table(
    "ledger_recoveries",
    metadata,
    *_occurrence_columns(),
    Column("worker", String(255)),
    Column("started", Float),
)
# Retry firings run an occurrence again on purpose (it failed): every start, one row each.
attempts = Table(
    "ledger_attempts",
    metadata,
    *_occurrence_columns(),
    Column("firing_trigger_group", String(200)),
    Column("retry_attempt", Integer),
    Column("fired_by", String(255)),
    Column("started", Float),
)
# Backfill firings (ledger.backfill): each start with the slot its context says, and its end.
backfills = Table(
    "ledger_backfills",
    metadata,
    *_occurrence_columns(),
    Column("backfill_slot_ms", BigInteger),
    Column("worker", String(255)),
    Column("started", Float),
    Column("ended", Float),
)
# A persist_job_data job's counter, as each execution read it from its job data.
counts = Table(
    "ledger_counts",
    metadata,
    *_occurrence_columns(),
    Column("count", Integer),
)

# A process that does not stop in time is asked for its threads' stacks before it is killed
# (tests/integration/processes.py), so its log shows where it hung.
faulthandler.register(signal.SIGUSR1)

if os.environ.get("CQ_CLOCK_OFFSET"):
    # Every component reads time from SystemClock (the package's invariant: time is injected);
    # shifting it here runs beat and worker on another day, a daylight-saving change included.
    from datetime import timedelta

    from celery_quartz.clock import SystemClock

    _offset = timedelta(seconds=float(os.environ["CQ_CLOCK_OFFSET"]))
    _system_now = SystemClock.now

    def _shifted_now(self: SystemClock) -> Any:
        return _system_now(self) + _offset

    SystemClock.now = _shifted_now  # type: ignore[method-assign]

app = Celery("ledger_app", broker=os.environ.get("CQ_BROKER_URL", "memory://"))
if os.environ.get("CQ_BROKER_MASTER_NAME"):
    app.conf.broker_transport_options = {"master_name": os.environ["CQ_BROKER_MASTER_NAME"]}
if os.environ.get("CQ_TASK_QUEUE_ARGUMENTS"):
    from kombu import Exchange, Queue

    app.conf.task_queues = [
        Queue(
            "celery",
            Exchange("celery"),
            routing_key="celery",
            queue_arguments=json.loads(os.environ["CQ_TASK_QUEUE_ARGUMENTS"]),
        )
    ]
app.conf.quartz_store_url = os.environ.get("CQ_STORE_URL", "sqlite://")
app.conf.quartz_checkin_interval = float(os.environ.get("CQ_CHECKIN_INTERVAL", "1"))
if os.environ.get("CQ_CLUSTERED", "1") == "1":
    app.conf.quartz_checkin_misfire_threshold = float(os.environ.get("CQ_CHECKIN_THRESHOLD", "1"))
else:
    # Non-clustered, under an election (tests/integration/test_leadership.py).
    app.conf.quartz_clustered = False
    app.conf.quartz_election = os.environ.get("CQ_ELECTION", "")
    app.conf.quartz_election_redis_url = os.environ.get("CQ_ELECTION_REDIS_URL", "")
    app.conf.quartz_election_lock_timeout = float(os.environ.get("CQ_ELECTION_LOCK_TIMEOUT", "10"))
    app.conf.quartz_election_retry_interval = float(os.environ.get("CQ_ELECTION_RETRY", "0.5"))
    if os.environ.get("CQ_INSTANCE_ID"):
        app.conf.quartz_instance_id = os.environ["CQ_INSTANCE_ID"]
app.conf.quartz_idle_wait = float(os.environ.get("CQ_IDLE_WAIT", "1"))
if os.environ.get("CQ_SCHEMA_AUTO_UPGRADE"):
    app.conf.quartz_schema_auto_upgrade = os.environ["CQ_SCHEMA_AUTO_UPGRADE"] == "1"
app.conf.quartz_misfire_threshold = float(os.environ.get("CQ_MISFIRE_THRESHOLD", "60"))
if os.environ.get("CQ_COMPLETION_DELAY"):
    app.conf.quartz_worker_completion_delay = float(os.environ["CQ_COMPLETION_DELAY"])
app.conf.worker_prefetch_multiplier = 1
# Every worker consumes its own queue, as pinned triggers need (docs/affinity.md).
app.conf.worker_direct = True
# The history's sweep (docs/history.md#retention): its interval, and the scheduler's cap.
app.conf.quartz_history_sweep_interval = float(os.environ.get("CQ_HISTORY_SWEEP_INTERVAL", "10"))
if os.environ.get("CQ_HISTORY_MAX_ROWS"):
    app.conf.quartz_history_max_rows = int(os.environ["CQ_HISTORY_MAX_ROWS"])
if os.environ.get("CQ_DEFAULT_RETRY_POLICY"):
    app.conf.quartz_default_retry_policy = os.environ["CQ_DEFAULT_RETRY_POLICY"]
if os.environ.get("CQ_PAUSE_WHEN_RETRIES_EXHAUSTED"):
    app.conf.quartz_pause_when_retries_exhausted = (
        os.environ["CQ_PAUSE_WHEN_RETRIES_EXHAUSTED"] == "1"
    )
if os.environ.get("CQ_EXECUTION_LIMITS"):
    app.conf.quartz_execution_limits = json.loads(os.environ["CQ_EXECUTION_LIMITS"])
if os.environ.get("CQ_SCHEDULING_FILES"):
    app.conf.quartz_scheduling_files = os.environ["CQ_SCHEDULING_FILES"].split(os.pathsep)
    app.conf.quartz_scheduling_files_scan_interval = float(
        os.environ.get("CQ_SCHEDULING_FILES_SCAN", "0")
    )
app.conf.beat_schedule = {
    name: {"task": spec["task"], "schedule": float(spec["schedule"])}
    for name, spec in json.loads(os.environ.get("CQ_BEAT_SCHEDULE", "{}")).items()
}

if os.environ.get("CQ_SHUTDOWN_WAIT"):
    app.conf.quartz_shutdown_wait_for_jobs = True
    app.conf.quartz_shutdown_timeout = float(os.environ["CQ_SHUTDOWN_WAIT"])
if os.environ.get("CQ_HEALTH_PORT"):
    app.conf.quartz_health_port = int(os.environ["CQ_HEALTH_PORT"])
if os.environ.get("CQ_SEND_EVENTS"):
    app.conf.worker_send_task_events = True
    app.conf.task_send_sent_event = True
if os.environ.get("CQ_OTEL_DIR"):
    # An OpenTelemetry SDK writing spans and metrics as JSON lines, one file per process
    # (tests/integration/test_observability.py reads them back).
    from tests.integration.otel_files import configure_sdk

    configure_sdk(os.environ["CQ_OTEL_DIR"])

if os.environ.get("CQ_QUARTZ_DEBUG"):
    # Every firing published and started, named, for reading a chaos run's logs afterwards.
    @after_setup_logger.connect(weak=False)
    def _debug_quartz(**_: object) -> None:
        logging.getLogger("celery_quartz").setLevel(logging.DEBUG)


if os.environ.get("CQ_HEALTH_FILE"):
    # A real beat process's own health, readable from outside (there is no HTTP endpoint yet).
    @beat_init.connect(weak=False)
    def _write_health(sender: Any, **_: object) -> None:
        import threading

        from celery_quartz.health import health_check

        path = os.environ["CQ_HEALTH_FILE"]

        def run() -> None:
            while True:
                # A check that raises is written as such (the file must not go stale).
                try:
                    report = health_check(sender.scheduler)
                    shown = {
                        "status": report.status.value,
                        "description": report.description,
                        "data": report.data,
                    }
                except Exception as exc:
                    shown = {"status": "raised", "description": repr(exc), "data": {}}
                text = json.dumps(shown, default=str)
                with open(path + ".tmp", "w") as f:
                    f.write(text)
                os.replace(path + ".tmp", path)
                time.sleep(0.5)

        threading.Thread(target=run, name="health-file", daemon=True).start()


_engines: dict[int, Engine] = {}


def ledger_engine() -> Engine:
    pid = os.getpid()
    if pid not in _engines:
        _engines[pid] = create_engine(os.environ["CQ_LEDGER_URL"])
    return _engines[pid]


def create_ledger(url: str) -> None:
    engine = create_engine(url)
    metadata.create_all(engine)
    engine.dispose()


def ledger_rows(url: str) -> list[Any]:
    """Every row of the ledger in the database at ``url``: one per execution start."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return list(conn.execute(select(ledger)).all())
    finally:
        engine.dispose()


def row_count(url: str, table: Table) -> int:
    """How many rows ``table`` (the ledger, duplicates, recoveries) holds at ``url``."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(table)).scalar_one())
    finally:
        engine.dispose()


def history_rows(url: str, **where: Any) -> list[Any]:
    """The run history of this app's store (scheduler name ``ledger_app``) at ``url``, oldest
    first, the columns given as keyword arguments equal to their values."""
    h = build_tables(DEFAULT_TABLE_PREFIX).history
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return list(
                conn.execute(
                    select(h)
                    .where(h.c.sched_name == "ledger_app", *[h.c[k] == v for k, v in where.items()])
                    .order_by(h.c.event_time, h.c.history_id)
                ).all()
            )
    finally:
        engine.dispose()


def run_status(url: str, kind: str, name: str) -> Any:
    """The run status of the job or trigger ``name`` (``kind`` ``job`` or ``trigger``)."""
    rs = build_tables(DEFAULT_TABLE_PREFIX).run_status
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(
                select(rs).where(
                    rs.c.sched_name == "ledger_app", rs.c.kind == kind, rs.c.key_name == name
                )
            ).one_or_none()
    finally:
        engine.dispose()


def occurrences_owed(
    every_second: Any,
    one_shots: Sequence[Any],
    start: datetime,
    stopped: datetime,
    all_stopped: datetime,
) -> tuple[set[tuple[str, int]], set[tuple[str, int]]]:
    """The occurrences of a failover test's triggers (``every_second`` and ``one_shots``) by
    (trigger name, scheduled ms): those due by two seconds before ``stopped``, which must have
    run, and those that may have run by two seconds after ``all_stopped``."""
    due: set[tuple[str, int]] = set()
    possible: set[tuple[str, int]] = set()
    t: datetime | None = start
    while t is not None and t <= all_stopped + timedelta(seconds=2):
        possible.add(("every-second", to_millis(t)))
        if t <= stopped - timedelta(seconds=2):
            due.add(("every-second", to_millis(t)))
        t = every_second.next_fire_time_after(t)
    for trigger in one_shots:
        assert trigger.start_at is not None
        possible.add((trigger.key.name, to_millis(trigger.start_at)))
        if trigger.start_at <= stopped - timedelta(seconds=2):
            due.add((trigger.key.name, to_millis(trigger.start_at)))
    return due, possible


def prepared_store(url: str) -> SqlStore:
    """The store this app's processes use (scheduler name ``ledger_app``), its schema upgraded,
    with the ledger's tables created in the same database."""
    store = store_at(url, "ledger_app", upgrade_schema=True)
    create_ledger(url)
    return store


def environment(url: str, broker_url: str, **settings: str) -> dict[str, str]:
    """What this app's processes read: the broker, the store and the ledger (in the store's
    database), and ``CQ_*`` settings given as keyword arguments (``CHECKIN_INTERVAL="1"``)."""
    return {
        "CQ_BROKER_URL": broker_url,
        "CQ_STORE_URL": url,
        "CQ_LEDGER_URL": url,
        **{f"CQ_{name}": value for name, value in settings.items()},
    }


def _write(statement: object) -> None:
    """Write to the ledger, riding out a restart or an outage of its database (the chaos runs
    stop it for up to 90 s): the ledger is the tests' source of truth, so its own writes must
    not be lost."""
    deadline = time.monotonic() + 300
    while True:
        try:
            with ledger_engine().begin() as conn:
                conn.execute(statement)  # type: ignore[call-overload]
            return
        except OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _occurrence(ctx: celery_quartz.JobExecutionContext) -> dict[str, Any]:
    """The columns every ledger table keys an execution by: its occurrence (the original
    trigger and scheduled time, in ms) and its firing."""
    trigger, scheduled = ctx.occurrence
    return {
        "trigger_group": trigger.group,
        "trigger_name": trigger.name,
        "scheduled_ms": int(scheduled.timestamp() * 1000),
        "fire_instance_id": ctx.fire_instance_id,
    }


def _mark_ended(fire_instance_id: str) -> None:
    """Record when the ledger row of ``fire_instance_id`` ended."""
    _write(
        update(ledger)
        .where(ledger.c.fire_instance_id == fire_instance_id)
        .values(ended=time.time())
    )


@app.task(name="ledger.record")
def record(sleep: float = 0.0) -> None:
    """One row per execution start of an occurrence; a second start cannot insert."""
    ctx = celery_quartz.current_context() or _unhooked_context()
    assert ctx is not None, "ledger.record runs only as a celery-quartz firing"
    row = _occurrence(ctx)
    logging.getLogger("ledger").info(
        "ledger: %s.%s at %d started as %s",
        row["trigger_group"],
        row["trigger_name"],
        row["scheduled_ms"],
        ctx.fire_instance_id,
    )
    if ctx.recovering:
        _write(insert(recoveries).values(**row, worker=ctx.worker_name, started=time.time()))
    else:
        try:
            _write(
                insert(ledger).values(
                    **row, fired_by=ctx.fired_by, worker=ctx.worker_name, started=time.time()
                )
            )
        except IntegrityError:
            _write(insert(duplicates).values(**row, worker=ctx.worker_name))
    if sleep:
        time.sleep(sleep)
        if not ctx.recovering:
            _mark_ended(ctx.fire_instance_id)


def _unhooked_context() -> celery_quartz.JobExecutionContext | None:
    """A worker without the hooks (``CQ_NO_HOOKS``) still runs the firing: read it from the
    message, as the hooks would have."""
    from celery import current_task

    from celery_quartz.firing import FiringHeader

    header = FiringHeader.of_request(current_task.request)
    if header is None:
        return None
    return celery_quartz.JobExecutionContext.from_header(header, current_task.request.hostname)


@app.task(name="ledger.backfill")
def backfill(sleep: float = 0.0) -> None:
    """Record this execution's occurrence, the backfill slot its context says, and when it
    started and (after ``sleep`` seconds) ended."""
    ctx = celery_quartz.current_context()
    assert ctx is not None, "ledger.backfill runs only as a celery-quartz firing"
    started = time.time()
    if sleep:
        time.sleep(sleep)
    _write(
        insert(backfills).values(
            **_occurrence(ctx),
            backfill_slot_ms=None
            if ctx.backfill_slot is None
            else int(ctx.backfill_slot.timestamp() * 1000),
            worker=ctx.worker_name,
            started=started,
            ended=time.time(),
        )
    )


@app.task(name="ledger.flaky")
def flaky(failures: int = 0) -> None:
    """Record this execution start, then fail unless ``failures`` attempts have failed before."""
    ctx = celery_quartz.current_context()
    assert ctx is not None, "ledger.flaky runs only as a celery-quartz firing"
    _record_attempt(ctx.retry_attempt)
    if ctx.retry_attempt < failures:
        raise RuntimeError(f"ledger.flaky: attempt {ctx.retry_attempt} fails on purpose")


def _record_attempt(number: int) -> None:
    ctx = celery_quartz.current_context()
    assert ctx is not None, "runs only as a celery-quartz firing"
    _write(
        insert(attempts).values(
            **_occurrence(ctx),
            firing_trigger_group=ctx.trigger_key.group,
            retry_attempt=number,
            fired_by=ctx.fired_by,
            started=time.time(),
        )
    )


@app.task(name="ledger.celery_retry", bind=True)
def celery_retry(self: Any, retries: int = 0) -> None:
    """Record this delivery (numbered by Celery's retry count), then ask Celery to retry the
    task until it has been retried ``retries`` times."""
    _record_attempt(self.request.retries)
    if self.request.retries < retries:
        raise self.retry(countdown=0.5, max_retries=retries)


@app.task(name="ledger.refire")
def refire(refires: int = 0) -> None:
    """Record this run (numbered by its refire count), then raise RefireJob until the firing
    has been refired ``refires`` times."""
    ctx = celery_quartz.current_context()
    assert ctx is not None, "ledger.refire runs only as a celery-quartz firing"
    _record_attempt(ctx.refire_count)
    if ctx.refire_count < refires:
        raise RefireJob()


@app.task(name="ledger.count")
def count() -> None:
    """Record the counter this execution finds in its job data, then increment it (a
    ``persist_job_data`` job writes it back at completion)."""
    ctx = celery_quartz.current_context()
    assert ctx is not None, "ledger.count runs only as a celery-quartz firing"
    trigger, scheduled = ctx.occurrence
    found = int(ctx.job_data.get("count", 0))
    _write(
        insert(counts).values(
            trigger_group=trigger.group,
            trigger_name=trigger.name,
            scheduled_ms=int(scheduled.timestamp() * 1000),
            fire_instance_id=ctx.fire_instance_id,
            count=found,
        )
    )
    ctx.job_data["count"] = found + 1


@app.task(name="ledger.noop")
def noop() -> None:
    """A task that records nothing (for beat_schedule import tests)."""


@app.task(name="ledger.report")
def report(rows: int = 0, sleep: float = 0.0) -> None:
    """Report a summary and metrics for the run's history row (``current_context().report``),
    after ``sleep`` seconds."""
    ctx = celery_quartz.current_context()
    assert ctx is not None, "ledger.report runs only as a celery-quartz firing"
    if sleep:
        time.sleep(sleep)
    ctx.report(summary=f"{rows} rows", metrics={"rows": rows})


@app.task(name="ledger.progress")
def progress(steps: int = 4, step_seconds: float = 1.5) -> None:
    """Report progress in ``steps`` steps (``step n of steps``), ``step_seconds`` apart."""
    ctx = celery_quartz.current_context()
    assert ctx is not None, "ledger.progress runs only as a celery-quartz firing"
    for step in range(steps):
        ctx.report_progress(100 * step / steps, f"step {step + 1} of {steps}")
        time.sleep(step_seconds)
    ctx.report_progress(100, "done")


@app.task(name="ledger.overlapping", acks_late=True)
def overlapping(seconds: float = 3.0) -> None:
    """Record the start in the ledger, run ``seconds`` (longer than its trigger's interval),
    checking ``current_context().cancelled`` ten times a second (a threads pool's cooperative
    cancel), and record the end (a prefork run terminated by a revoke never does). Acked at its
    end: a worker of concurrency 1 running it takes no other message meanwhile."""
    ctx = celery_quartz.current_context()
    assert ctx is not None, "ledger.overlapping runs only as a celery-quartz firing"
    _write(
        insert(ledger).values(
            **_occurrence(ctx),
            fired_by=ctx.fired_by,
            worker=ctx.worker_name,
            started=time.time(),
        )
    )
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not ctx.cancelled:
        time.sleep(0.1)
    _mark_ended(ctx.fire_instance_id)


if not os.environ.get("CQ_NO_HOOKS"):
    celery_quartz.install(app)
