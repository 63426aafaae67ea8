"""What the scenario scripts share: services, seeding, scheduler processes, message checks, tables.

Nothing here is timed by itself; each ``bench_*.py`` script decides what to measure.
"""

from __future__ import annotations

import contextlib
import cProfile
import json
import multiprocessing as mp
import os
import pstats
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

SCHEDULER_NAME = "bench"
QUEUE = "celery"
TASK = "bench.noop"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# --------------------------------------------------------------------------- services


#: PostgreSQL settings that let a scenario read per-statement times (``pg_stat_statements``).
PG_STAT_STATEMENTS = {
    "shared_preload_libraries": "pg_stat_statements",
    "pg_stat_statements.track": "all",
}


@contextlib.contextmanager
def services(pg_settings: dict[str, str] | None = None) -> Iterator[tuple[Any, Any]]:
    """A throwaway PostgreSQL and Redis (tests.services), stopped and deleted on exit."""
    from tests.services import interrupt_on_sigterm, postgres_server, redis_server

    interrupt_on_sigterm()
    with postgres_server(settings=pg_settings) as pg, redis_server() as rd:
        yield pg, rd


def process_cpu_s(pid: int | None) -> float:
    """CPU seconds (user + system) of a service process, its children alive now, and those of
    its children that have ended (a PostgreSQL backend's time reaches the postmaster's
    ``cutime`` when it exits and is reaped); 0.0 without a pid. Linux ``/proc`` only.

    Read before and after a run: the difference is what the service spent on it, provided its
    connections were closed (their backends reaped) before the second reading.
    """
    if pid is None:
        return 0.0
    tick = os.sysconf("SC_CLK_TCK")

    def fields(p: int) -> list[str]:
        text = Path(f"/proc/{p}/stat").read_text()
        return text[text.rindex(")") + 2 :].split()  # after "pid (comm) "

    own = fields(pid)
    # utime, stime, cutime, cstime are fields 14-17 of stat (1-based), 12-15 after "(comm)".
    total = sum(int(v) for v in own[11:15])
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            total += sum(int(v) for v in fields(int(child))[11:13])
    return total / tick


_db_counter = 0


def fresh_store(pg: Any) -> tuple[str, str]:
    """A new database with the store's tables (Alembic head); (psycopg2 URL, libpq dsn)."""
    from sqlalchemy import create_engine

    from celery_quartz.store import migrate

    global _db_counter
    _db_counter += 1
    name = f"bench{_db_counter}_{os.getpid()}"
    url = pg.create_database(name)
    engine = create_engine(url)
    try:
        migrate.upgrade(engine)
    finally:
        engine.dispose()
    return url, pg.dsn(name)


# --------------------------------------------------------------------------- seeding


@dataclass
class TriggerSet:
    """``count`` jobs of task ``bench.noop``, each with one simple trigger repeating forever.

    Trigger ``i`` starts at ``first_ms + i * step_ms`` and repeats every ``interval_s`` seconds.
    """

    group: str
    count: int
    first_ms: int
    interval_s: float
    step_ms: float = 0.0
    #: The triggers' execution group (their firings go to the queue of that name).
    execution_group: str | None = None


def seed(url: str, dsn: str, sets: Sequence[TriggerSet]) -> float:
    """Store the trigger sets; returns the seconds it took.

    The first job and trigger of each set are scheduled through the client
    (:meth:`celery_quartz.Quartz.schedule_job`); every other row is a copy of the rows the client
    stored, with only the keys and the start/next fire time changed, loaded with PostgreSQL COPY.
    """
    import psycopg
    from sqlalchemy import select

    from bench.app import app
    from celery_quartz import Job, JobKey, Quartz, SimpleTrigger, TriggerKey
    from celery_quartz.clock import from_millis
    from celery_quartz.config import Settings
    from celery_quartz.store.sql import SqlStore
    from celery_quartz.triggers import REPEAT_INDEFINITELY

    started = time.perf_counter()
    store = SqlStore(url, scheduler_name=SCHEDULER_NAME)
    client = Quartz(
        app,
        store=store,
        settings=Settings(store_url=url, scheduler_name=SCHEDULER_NAME, schema_auto_upgrade=False),
    )
    jobs, triggers = store.tables.jobs, store.tables.triggers
    job_cols = [c.name for c in jobs.columns]
    trig_cols = [c.name for c in triggers.columns]
    templates = []
    for s in sets:
        name = f"{s.group}-{0:07d}"
        client.schedule_job(
            Job(key=JobKey(name, s.group), task=TASK),
            SimpleTrigger(
                key=TriggerKey(name, s.group),
                start_at=from_millis(s.first_ms),
                repeat_interval=timedelta(seconds=s.interval_s),
                repeat_count=REPEAT_INDEFINITELY,
                execution_group=s.execution_group,
            ),
        )
        with store.transaction() as conn:
            job_row = conn.execute(select(jobs).where(jobs.c.job_group == s.group)).one()._asdict()
            trig_row = (
                conn.execute(select(triggers).where(triggers.c.trigger_group == s.group))
                .one()
                ._asdict()
            )
        # What reset() restores relies on this being the client's first state.
        assert trig_row["next_fire_time"] == trig_row["start_time"] == s.first_ms, trig_row
        assert trig_row["prev_fire_time"] is None and trig_row["times_triggered"] == 0
        assert trig_row["trigger_state"] == "WAITING"
        templates.append((s, job_row, trig_row))
    store.dispose()
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        for s, job_row, trig_row in templates:
            with cur.copy(f"COPY {jobs.name} ({', '.join(job_cols)}) FROM STDIN") as copy:
                for i in range(1, s.count):
                    row = dict(job_row, job_name=f"{s.group}-{i:07d}")
                    copy.write_row([row[c] for c in job_cols])
            with cur.copy(f"COPY {triggers.name} ({', '.join(trig_cols)}) FROM STDIN") as copy:
                for i in range(1, s.count):
                    name = f"{s.group}-{i:07d}"
                    at = s.first_ms + int(i * s.step_ms)
                    row = dict(
                        trig_row,
                        trigger_name=name,
                        job_name=name,
                        start_time=at,
                        next_fire_time=at,
                    )
                    copy.write_row([row[c] for c in trig_cols])
        conn.commit()
    vacuum(dsn)
    return time.perf_counter() - started


def drop_index(dsn: str, name: str) -> None:
    """Drop index ``name`` of the store's tables (to measure what it costs)."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(name)))


def vacuum(dsn: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")


def reset(dsn: str, group: str | None = None) -> None:
    """Put triggers back in the state the client stored them in; forget every firing."""
    import psycopg

    where = "sched_name = %s" + (" AND trigger_group = %s" if group else "")
    params = [SCHEDULER_NAME] + ([group] if group else [])
    with psycopg.connect(dsn) as conn:
        conn.execute("TRUNCATE quartz_fired_triggers")
        conn.execute(
            "UPDATE quartz_triggers SET next_fire_time = start_time, prev_fire_time = NULL, "
            f"times_triggered = 0, trigger_state = 'WAITING' WHERE {where}",
            params,
        )
        conn.commit()
    vacuum(dsn)


def query(dsn: str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(dsn) as conn:
        return conn.execute(sql, params).fetchall()


# --------------------------------------------------------------------------- scheduler nodes


@dataclass
class NodeConfig:
    name: str
    store_url: str
    broker_url: str
    #: "tight": call run_once again at once (sleep at most 5 ms when it asks to wait);
    #: "beat": sleep what run_once returns, as ``celery beat`` does.
    mode: str = "tight"
    batch_size: int = 100
    idle_wait: float = 1.0
    fire_ahead_window: float = 0.0
    profile_path: str | None = None
    #: Seconds between metric collections of an OpenTelemetry SDK configured in the node (an
    #: exporter that discards what it is given), with the store instrumented and the store
    #: gauges registered as ``celery beat`` wires them; None: no SDK, store not instrumented.
    metrics_interval: float | None = None


@dataclass
class NodeResult:
    name: str
    fired: int
    cpu_s: float
    wall_s: float
    statements: int
    transactions: int
    error: str | None = None


def _node_main(cfg: NodeConfig, ready: Any, go: Any, stop: Any, counter: Any, out: Any) -> None:
    try:
        _node_run(cfg, ready, go, stop, counter, out)
    except BaseException as exc:  # report, never hang the parent
        import traceback

        out.put(NodeResult(cfg.name, -1, 0, 0, 0, 0, error=traceback.format_exc()))
        ready.set()
        raise SystemExit(1) from exc


def _node_run(cfg: NodeConfig, ready: Any, go: Any, stop: Any, counter: Any, out: Any) -> None:
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    os.environ["BENCH_BROKER_URL"] = cfg.broker_url
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us through `stop`
    from sqlalchemy import event

    from bench.app import app
    from celery_quartz.clock import SystemClock
    from celery_quartz.config import Settings
    from celery_quartz.loop import SchedulingLoop
    from celery_quartz.publisher import Publisher
    from celery_quartz.store import open_store

    clock = SystemClock()
    settings = Settings(
        store_url=cfg.store_url,
        scheduler_name=SCHEDULER_NAME,
        instance_id=cfg.name,
        batch_size=cfg.batch_size,
        idle_wait=cfg.idle_wait,
        fire_ahead_window=cfg.fire_ahead_window,
        misfire_threshold=3600.0,
        schema_auto_upgrade=False,
        import_beat_schedule=False,
    )
    # As celery beat builds it: the loop retries failed steps itself, no pre-ping.
    store = open_store(settings, clock=clock, pre_ping=False)
    counts = {"statements": 0, "transactions": 0}

    @event.listens_for(store.engine, "before_cursor_execute")
    def _count_statement(*_: Any) -> None:
        counts["statements"] += 1

    @event.listens_for(store.engine, "commit")
    def _count_commit(*_: Any) -> None:
        counts["transactions"] += 1

    publisher = Publisher(app, batch_size=cfg.batch_size)
    loop_store: Any = store
    gauges = None
    if cfg.metrics_interval is not None:
        loop_store, gauges = _observed(store, clock, cfg)
    loop = SchedulingLoop(loop_store, publisher, settings, clock, cfg.name)
    loop.start()
    with app.producer_or_acquire() as producer:  # open the broker connection before timing
        producer.channel.client.ping()
    ready.set()
    go.wait()
    counts["statements"] = counts["transactions"] = 0
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu0 = usage.ru_utime + usage.ru_stime
    wall0 = time.perf_counter()
    profiler = cProfile.Profile() if cfg.profile_path else None
    if profiler:
        profiler.enable()
    tight = cfg.mode == "tight"
    while not stop.is_set():
        wait = loop.run_once()
        counter.value = loop.fired_count
        if wait > 0:
            stop.wait(min(wait, 0.005) if tight else wait)
    if profiler:
        profiler.disable()
        profiler.dump_stats(cfg.profile_path)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    result = NodeResult(
        cfg.name,
        loop.fired_count,
        usage.ru_utime + usage.ru_stime - cpu0,
        time.perf_counter() - wall0,
        counts["statements"],
        counts["transactions"],
    )
    loop.shutdown()
    if gauges is not None:
        gauges.close()
    store.dispose()
    out.put(result)


def _observed(store: Any, clock: Any, cfg: NodeConfig) -> tuple[Any, Any]:
    """``store`` observed and the store gauges registered as ``celery beat`` does, under an
    SDK whose reader collects every ``cfg.metrics_interval`` seconds and discards the result."""
    from opentelemetry import metrics
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import (
        MetricExporter,
        MetricExportResult,
        PeriodicExportingMetricReader,
    )

    from celery_quartz.observability.gauges import StoreGauges
    from celery_quartz.observability.store import StoreObservation

    class Discard(MetricExporter):
        def export(self, metrics_data: Any, timeout_millis: float = 0, **_: Any) -> Any:
            return MetricExportResult.SUCCESS

        def force_flush(self, timeout_millis: float = 0) -> bool:
            return True

        def shutdown(self, timeout_millis: float = 0, **_: Any) -> None:
            pass

    assert cfg.metrics_interval is not None
    reader = PeriodicExportingMetricReader(
        Discard(), export_interval_millis=cfg.metrics_interval * 1000
    )
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    observation = StoreObservation(store.scheduler_name, instance_id=cfg.name, clock=clock)
    store.add_hooks(observation)
    gauges = StoreGauges(
        store,
        observation.attributes,
        clock,
        is_collector=lambda: observation.live_schedulers[:1] == [cfg.name],
    )
    return store, gauges


class Nodes:
    """Scheduler processes (each a real SchedulingLoop), started ready, released together."""

    def __init__(self, configs: Sequence[NodeConfig]) -> None:
        ctx = mp.get_context("spawn")
        self.go = ctx.Event()
        self.stop_event = ctx.Event()
        self.out = ctx.Queue()
        self.counters = [ctx.Value("q", 0, lock=False) for _ in configs]
        self.readies = [ctx.Event() for _ in configs]
        self.procs = [
            ctx.Process(
                target=_node_main,
                args=(cfg, ready, self.go, self.stop_event, counter, self.out),
                daemon=True,
            )
            for cfg, ready, counter in zip(configs, self.readies, self.counters, strict=True)
        ]
        self.results: list[NodeResult] = []

    def start(self, timeout: float = 120) -> None:
        for proc in self.procs:
            proc.start()
        deadline = time.monotonic() + timeout
        for ready in self.readies:
            if not ready.wait(max(0.1, deadline - time.monotonic())):
                raise RuntimeError("a scheduler node did not get ready")
        if not self.out.empty():
            raise RuntimeError(self.out.get().error)

    def release(self) -> None:
        self.go.set()

    def fired(self) -> int:
        return sum(c.value for c in self.counters)

    def stop(self, timeout: float = 60) -> list[NodeResult]:
        self.stop_event.set()
        results = [self.out.get(timeout=timeout) for _ in self.procs]
        for proc in self.procs:
            proc.join(timeout)
        errors = [r.error for r in results if r.error]
        if errors:
            raise RuntimeError("scheduler node failed:\n" + "\n".join(errors))
        self.results = sorted(results, key=lambda r: r.name)
        return self.results

    def kill(self) -> None:
        for proc in self.procs:
            if proc.is_alive():
                proc.kill()
                proc.join(5)


@contextlib.contextmanager
def nodes(configs: Sequence[NodeConfig]) -> Iterator[Nodes]:
    group = Nodes(configs)
    try:
        group.start()
        yield group
    finally:
        group.kill()


# --------------------------------------------------------------------------- broker messages


@dataclass
class MessageCheck:
    messages: int
    occurrences: int
    duplicates: int
    without_header: int
    task_ids: list[str] = field(default_factory=list)


def check_messages(redis_client: Any, queue: str = QUEUE, chunk: int = 10_000) -> MessageCheck:
    """Read every message in the queue's Redis list; count them per occurrence.

    An occurrence is (trigger key, scheduled fire time), taken from the ``quartz`` header of the
    kombu JSON envelope; a second message for the same occurrence is a duplicate.
    """
    total = redis_client.llen(queue)
    per_occurrence: Counter[tuple[str, str, int]] = Counter()
    without = 0
    for start in range(0, total, chunk):
        for raw in redis_client.lrange(queue, start, start + chunk - 1):
            headers = json.loads(raw)["headers"]
            quartz = headers.get("quartz")
            if not quartz:
                without += 1
                continue
            group_name = tuple(quartz["trigger"])
            per_occurrence[(*group_name, quartz["scheduled_fire_time"])] += 1
    duplicates = sum(n - 1 for n in per_occurrence.values() if n > 1)
    return MessageCheck(total, len(per_occurrence), duplicates, without)


def verify_with_worker(
    redis_server: Any, broker_url: str, sample: int = 200, queue: str = QUEUE
) -> tuple[int, int]:
    """Keep ``sample`` messages in the queue and let a stock Celery worker consume them.

    Returns (messages sampled, of them run by the worker). The worker is ``celery -A bench.app
    worker`` with no celery-quartz hooks installed: it only accepts the message as an ordinary
    Celery task message for ``bench.noop``, which records its task id in Redis.
    """
    client = redis_server.client(0)
    client.ltrim(queue, 0, sample - 1)
    ids = {json.loads(raw)["headers"]["id"] for raw in client.lrange(queue, 0, -1)}
    record_url = redis_server.url(1)
    recorder = redis_server.client(1)
    recorder.delete("bench:ran")
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "BENCH_BROKER_URL": broker_url,
        "BENCH_RECORD_URL": record_url,
    }
    with tempfile.TemporaryDirectory(prefix="cq-bench-worker-") as tmp:
        log_path = Path(tmp) / "worker.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "bench.app", "worker", "-c", "2",
                 "-l", "warning", "-n", "bench-worker@%h", "--without-mingle", "--without-gossip",
                 "-Q", queue],
                cwd=tmp, env=env, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
            try:
                deadline = time.monotonic() + 90
                while time.monotonic() < deadline and recorder.scard("bench:ran") < len(ids):
                    if proc.poll() is not None:
                        raise RuntimeError(f"worker exited:\n{log_path.read_text()[-3000:]}")
                    time.sleep(0.2)
            finally:
                stop_process(proc)
        ran = {m.decode() for m in recorder.smembers("bench:ran")}
    client.close()
    recorder.close()
    return len(ids), len(ids & ran)


def stop_process(proc: subprocess.Popen[Any], timeout: float = 30) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# --------------------------------------------------------------------------- reporting


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub-flavoured Markdown table, columns padded to their widest cell."""
    cells = [[str(h) for h in headers]] + [[_fmt(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for n, row in enumerate(cells):
        padded = [
            c.ljust(w) if n == 0 or not _numeric(c) else c.rjust(w)
            for c, w in zip(row, widths, strict=True)
        ]
        lines.append("| " + " | ".join(padded) + " |")
        if n == 0:
            lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        if value != value:
            return "-"
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.2f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def _numeric(cell: str) -> bool:
    return cell[:1].isdigit() or (cell[:1] == "-" and cell[1:2].isdigit())


def reset_statement_stats(dsn: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        conn.execute("SELECT pg_stat_statements_reset()")


def statement_stats(dsn: str, firings: int, top: int = 12) -> str:
    """The statements that took the most database time since the last reset, per firing: their
    execution, and beside it their planning (0 unless ``pg_stat_statements.track_planning`` is
    on; parsing is in neither)."""
    rows = query(
        dsn,
        "SELECT calls, total_exec_time, total_plan_time, rows, "
        "regexp_replace(query, '\\s+', ' ', 'g') "
        "FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database "
        "WHERE datname = current_database()) ORDER BY total_exec_time DESC LIMIT %s",
        [top],
    )
    total = sum(r[1] for r in rows)
    return table(
        ["calls", "total ms", "µs/firing", "share", "planning µs/firing", "rows", "statement"],
        [
            (c, t, t * 1000 / firings, f"{t / total:.0%}", p * 1000 / firings, n, q[:110])
            for c, t, p, n, q in rows
        ],
    )


def print_profile(paths: Sequence[str], top: int = 30) -> None:
    """Merged cProfile of the scheduler processes, top functions by cumulative time."""
    existing = [p for p in paths if os.path.exists(p)]
    if not existing:
        return
    stats = pstats.Stats(*existing)
    stats.sort_stats("cumulative").print_stats(top)


def machine_summary() -> str:
    """One line naming the machine, for the top of a scenario's output."""
    model = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{model}, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}"
