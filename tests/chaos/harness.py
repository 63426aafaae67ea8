"""The chaos run: three schedulers and two workers on PostgreSQL and Redis (or RabbitMQ), processes
killed with SIGKILL every few seconds (and started again; a worker's pool process alone, which
Celery replaces), PostgreSQL restarted once and the broker once, a mix of jobs; then a ledger
written by the tasks is checked.

Checked at the end:

* no occurrence started twice, except recovery firings (marked ``recovering``);
* no occurrence lost: every occurrence of the must-run triggers (IgnoreMisfires) due before the
  chaos ended was started, or was dropped by an explicit, logged misfire decision (a message that
  expired unstarted twice);
* no fired row left in flight once the schedulers have stopped and the workers drained;
* the executions of the disallow_concurrent job that ran to their end never overlapped;
* the run history agrees with the ledger: one ``succeeded`` row per occurrence that ran to its
  end (unless its execution was interrupted; a recovery firing that ran it again has the row),
  none for an occurrence no task started, never two for one occurrence;
* how many recoveries, interruptions, republished and dropped firings happened.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import os
import random
import re
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, select

from celery_quartz import (
    CronMisfireInstruction,
    CronTrigger,
    Job,
    JobKey,
    Quartz,
    SimpleMisfireInstruction,
    SimpleTrigger,
    TriggerKey,
)
from celery_quartz.clock import to_millis
from celery_quartz.store import SqlStore
from celery_quartz.store.schema import build_tables
from celery_quartz.table_prefix import DEFAULT_TABLE_PREFIX
from tests.integration import ledger_app
from tests.integration.processes import Processes, wait_for
from tests.service_rabbitmq import RabbitMQServer
from tests.services import PostgresServer, RedisServer

IGNORE = SimpleMisfireInstruction.IGNORE_MISFIRE_POLICY
GROUP = "chaos"
SCHEDULERS = ("beat1", "beat2", "beat3")
WORKERS = ("worker1", "worker2")
#: A victim that is one of the worker's prefork pool processes, the worker living on.
POOL_PROCESSES = tuple(f"{name} pool process" for name in WORKERS)


@dataclass
class ChaosReport:
    seconds: float
    kills: list[str] = field(default_factory=list)
    due: int = 0
    executed: int = 0
    duplicates: int = 0
    lost: list[tuple[str, int]] = field(default_factory=list)
    recoveries: int = 0
    interrupted: int = 0
    republished: int = 0
    dropped: int = 0
    left_in_flight: int = 0
    overlaps: int = 0
    left_detail: list[str] = field(default_factory=list)
    #: Occurrences still owed at the end: due, but at or after their trigger's next fire time.
    owed: int = 0
    #: The broker of the run (restarted once, as PostgreSQL is).
    broker: str = "Redis"
    #: The run history against the ledger: ``succeeded`` rows per occurrence (more than one is
    #: a duplicate), for occurrences no task started, and occurrences that ran to their end
    #: (neither interrupted nor recovered) with no ``succeeded`` row.
    history_succeeded: int = 0
    history_duplicates: list[tuple[str, int]] = field(default_factory=list)
    history_unrun: list[tuple[str, int]] = field(default_factory=list)
    history_missing: list[tuple[str, int]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (
            self.duplicates == 0
            and not self.lost
            and self.left_in_flight == 0
            and self.overlaps == 0
            and self.executed > 0
            and not self.history_duplicates
            and not self.history_unrun
            and not self.history_missing
        )

    def _lost_by_trigger(self) -> str:
        counts: dict[str, int] = {}
        for name, _ in self.lost:
            counts[name] = counts.get(name, 0) + 1
        return ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))

    def table(self) -> str:
        kills = ", ".join(f"{k} {self.kills.count(k)}" for k in sorted(set(self.kills)))
        rows = [
            ("chaos phase", f"{self.seconds:.0f} s"),
            ("processes killed (SIGKILL)", f"{len(self.kills)} ({kills})"),
            (f"restarts of PostgreSQL / {self.broker}", "1 / 1"),
            ("must-run occurrences due", str(self.due)),
            ("  started (interrupted ones included)", str(self.executed)),
            ("  dropped by a logged misfire decision", str(self.dropped)),
            ("  lost", f"{len(self.lost)} {self._lost_by_trigger()}".rstrip()),
            ("  still owed by triggers catching up", str(self.owed)),
            ("occurrences started twice (not recovery)", str(self.duplicates)),
            ("recovery firings run (requests_recovery)", str(self.recoveries)),
            ("executions closed as interrupted", str(self.interrupted)),
            ("expired messages published again", str(self.republished)),
            ("fired rows left in flight", str(self.left_in_flight)),
            ("overlapping disallow_concurrent runs", str(self.overlaps)),
            ("history: succeeded rows", str(self.history_succeeded)),
            ("  occurrences with two or more", _listed(self.history_duplicates)),
            ("  for an occurrence that did not run", _listed(self.history_unrun)),
            ("  missing for one that ran to its end", _listed(self.history_missing)),
            ("verdict", "OK" if self.ok else "FAILED"),
        ]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def _listed(occurrences: list[tuple[str, int]]) -> str:
    shown = ", ".join(f"{name}@{when}" for name, when in occurrences[:5])
    return f"{len(occurrences)} {shown}".rstrip()


def _simple(name: str, start: datetime, every: float) -> SimpleTrigger:
    return SimpleTrigger(
        key=TriggerKey(name, GROUP),
        start_at=start,
        repeat_interval=timedelta(seconds=every),
        repeat_count=-1,
        misfire_instruction=IGNORE,
    )


def _schedule(quartz: Quartz, start: datetime) -> list[SimpleTrigger]:
    """The job mix; returns the must-run triggers (every occurrence must start)."""
    plain = [_simple(f"plain-{i}", start, 1.0) for i in range(6)]
    recoverable = [_simple(f"recoverable-{i}", start, 4.0) for i in range(3)]
    exclusive = [_simple(f"exclusive-{i}", start, 3.0) for i in range(2)]
    long = [_simple("long", start, 10.0)]
    skipping = CronTrigger(
        key=TriggerKey("cron-skip", GROUP),
        expression="* * * * * ?",
        start_at=start,
        misfire_instruction=CronMisfireInstruction.DO_NOTHING,
    )
    quartz.schedule_jobs(
        [
            (Job(key=JobKey("plain", GROUP), task="ledger.record", kwargs={"sleep": 0.05}), plain),
            (
                Job(
                    key=JobKey("recoverable", GROUP),
                    task="ledger.record",
                    kwargs={"sleep": 2.0},
                    requests_recovery=True,
                ),
                recoverable,
            ),
            (
                Job(
                    key=JobKey("exclusive", GROUP),
                    task="ledger.record",
                    kwargs={"sleep": 0.5},
                    disallow_concurrent=True,
                ),
                exclusive,
            ),
            (Job(key=JobKey("long", GROUP), task="ledger.record", kwargs={"sleep": 4.0}), long),
            (Job(key=JobKey("cron-skip", GROUP), task="ledger.record"), [skipping]),
        ]
    )
    return [*plain, *recoverable, *exclusive, *long]


def _broker_url(broker: RedisServer | RabbitMQServer) -> str:
    """An empty place on the broker: Redis's database 0 flushed, or a new RabbitMQ vhost."""
    if isinstance(broker, RabbitMQServer):
        return broker.url(broker.new_vhost())
    broker.flushdb(0)
    return broker.url(0)


def _prepare(
    postgres: PostgresServer, broker: RedisServer | RabbitMQServer, database: str, **settings: str
) -> tuple[str, SqlStore, list[SimpleTrigger], dict[str, str]]:
    """A fresh database with the store, the ledger and the job mix (starting in 5 s); the
    processes' environment with ``CQ_*`` ``settings``. (url, store, must-run triggers, env)"""
    url = postgres.create_database(database)
    broker_url = _broker_url(broker)
    store = ledger_app.prepared_store(url)
    must_run = _schedule(
        Quartz(ledger_app.app, store=store), datetime.now(timezone.utc) + timedelta(seconds=5)
    )
    env = {
        "CQ_BROKER_URL": broker_url,
        "CQ_STORE_URL": url,
        "CQ_LEDGER_URL": url,
        "CQ_CHECKIN_INTERVAL": "1",
        "CQ_CHECKIN_THRESHOLD": "1",
        **{f"CQ_{name}": value for name, value in settings.items()},
    }
    return url, store, must_run, env


def _drain(procs: Processes, store: SqlStore, report: ChaosReport, timeout: float) -> None:
    """Stop the schedulers, let the workers finish what is in flight, and count what is left."""
    for name in SCHEDULERS:
        procs.stop(name)
    with contextlib.suppress(AssertionError):  # what is left is counted below
        wait_for(lambda: not store.firing_states(), timeout=timeout, message="in-flight firings")
    left = store.firing_states()
    report.left_in_flight = len(left)
    if left:
        f = store.tables.fired_triggers
        with store.engine.connect() as conn:
            report.left_detail = [
                f"{r.trigger_name} {r.state} by {r.instance_name} on {r.worker_name} "
                f"sched {r.sched_time} expires {r.expires_time} expired {r.expired_count}"
                for r in conn.execute(select(f))
            ]


def run_chaos(
    workdir: Path,
    postgres: PostgresServer,
    broker: RedisServer | RabbitMQServer,
    *,
    seconds: float = 120.0,
    seed: int = 1,
    settle: float = 30.0,
) -> ChaosReport:
    """The chaos run on ``broker`` (Redis or RabbitMQ), which is restarted once, as PostgreSQL
    is (a restarted Redis forgets its queues; RabbitMQ keeps its durable ones)."""
    rng = random.Random(seed)
    url, store, must_run, env = _prepare(
        postgres,
        broker,
        f"chaos_{int(time.time())}_{seed}",
        MISFIRE_THRESHOLD="10",
        QUARTZ_DEBUG="1",
    )
    report = ChaosReport(
        seconds=seconds, broker="RabbitMQ" if isinstance(broker, RabbitMQServer) else "Redis"
    )
    procs = Processes(workdir, env)
    try:
        for name in WORKERS:
            procs.worker(name, concurrency=4)
        for name in SCHEDULERS:
            procs.beat(name)
        time.sleep(5)
        began = time.monotonic()
        restarted_pg = restarted_broker = False
        while (elapsed := time.monotonic() - began) < seconds:
            if not restarted_pg and elapsed > seconds * 0.35:
                postgres.restart()
                restarted_pg = True
            elif not restarted_broker and elapsed > seconds * 0.65:
                broker.restart()
                restarted_broker = True
            elif (victim := rng.choice(SCHEDULERS + WORKERS + POOL_PROCESSES)) in POOL_PROCESSES:
                worker = victim.split()[0]
                pool = _children(procs.procs[worker].pid)
                if pool:
                    os.kill(rng.choice(pool), signal.SIGKILL)
                    report.kills.append(victim)
            else:
                procs.kill(victim)
                report.kills.append(victim)
                time.sleep(rng.uniform(0.5, 1.5))
                if victim in WORKERS:
                    procs.worker(victim, concurrency=4)
                else:
                    procs.beat(victim)
            time.sleep(rng.uniform(2.0, 5.0))
        chaos_ended = datetime.now(timezone.utc)
        time.sleep(settle)  # everyone alive: recoveries, expiries and republishing finish
        _drain(procs, store, report, timeout=60)
        # A broker restart longer than the misfire threshold (a RabbitMQ node boots in seconds)
        # leaves disallow_concurrent triggers catching up one occurrence at a time: owed.
        owed_from = _owed_from(store, must_run)
    finally:
        procs.stop_all()
    logs = "\n".join(procs.log(n) for n in (*SCHEDULERS, *WORKERS))
    _check(report, url, must_run, chaos_ended, logs, owed_from)
    store.dispose()
    return report


def _owed_from(store: SqlStore, must_run: list[SimpleTrigger]) -> dict[str, int]:
    """Each must-run trigger's stored next fire time (ms): its occurrences from there on are
    owed, not lost (``_check``)."""
    owed_from = {}
    for trigger in must_run:
        stored = store.retrieve_trigger(trigger.key)
        if stored is not None and stored.next_fire_time is not None:
            owed_from[trigger.key.name] = to_millis(stored.next_fire_time)
    return owed_from


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (a prefork worker's pool processes)."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                children.append(int(stat.parent.name))
    return sorted(children)


@dataclass
class OutageReport(ChaosReport):
    """A run with one service down for longer than the misfire threshold."""

    service: str = ""
    down: float = 0.0
    misfire_threshold: float = 0.0
    #: Schedulers that died (none may: they ride the outage out).
    died: list[str] = field(default_factory=list)
    #: Workers that exited and were started again, as a process supervisor would (Celery's
    #: Redis transport can end a worker when the broker goes away: docs/reliability.md).
    worker_restarts: list[str] = field(default_factory=list)
    #: Must-run occurrences due after the service came back that started.
    after_outage: int = 0

    @property
    def ok(self) -> bool:
        return super().ok and not self.died and self.after_outage > 0

    def table(self) -> str:
        rows = [
            ("service down", f"{self.service}, {self.down:.0f} s"),
            ("misfire threshold", f"{self.misfire_threshold:.0f} s"),
            ("must-run occurrences due", str(self.due)),
            ("  started", str(self.executed)),
            ("  dropped by a logged misfire decision", str(self.dropped)),
            ("  lost", f"{len(self.lost)} {self._lost_by_trigger()}".rstrip()),
            ("  started after the service came back", str(self.after_outage)),
            ("  still owed by triggers catching up", str(self.owed)),
            ("occurrences started twice (not recovery)", str(self.duplicates)),
            ("expired messages published again", str(self.republished)),
            ("fired rows left in flight", str(self.left_in_flight)),
            ("schedulers that died", ", ".join(self.died) or "none"),
            ("workers restarted by a supervisor", ", ".join(self.worker_restarts) or "none"),
            ("verdict", "OK" if self.ok else "FAILED"),
        ]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def run_outage(
    workdir: Path,
    postgres: PostgresServer,
    redis: RedisServer,
    *,
    service: str,
    down: float,
    misfire_threshold: float,
    before: float = 10.0,
    after: float | None = None,
) -> OutageReport:
    """Three schedulers and two workers; ``service`` ("postgresql" or "redis") stopped for
    ``down`` seconds, then started again on the same port; nobody is restarted by hand.

    Afterwards every must-run occurrence due has run, or was dropped by a logged misfire decision
    its instruction allows, nothing is left in flight, every process is still alive, and
    occurrences due after the outage ran (the processes recovered by themselves). ``after``
    (default: the misfire threshold plus 20 s) is how long everyone runs once it is back; then
    the triggers are paused and the schedulers run on until nothing is in flight (a firing
    published again after its first expiry may expire a second time, its message stuck where a
    broken broker connection left it, and is resolved only then).
    """
    if service not in ("postgresql", "redis"):
        raise ValueError(f"service is postgresql or redis, not {service!r}")
    url, store, must_run, env = _prepare(
        postgres,
        redis,
        f"outage_{service}_{int(time.time())}",
        MISFIRE_THRESHOLD=str(misfire_threshold),
    )
    report = OutageReport(seconds=down, service=service, down=down)
    report.misfire_threshold = misfire_threshold
    server: PostgresServer | RedisServer = postgres if service == "postgresql" else redis
    procs = Processes(workdir, env)
    try:
        for name in WORKERS:
            procs.worker(name, concurrency=4)
        for name in SCHEDULERS:
            procs.beat(name)
        # The outage must meet running nodes, not ones still starting (a loaded machine can take
        # seconds to start them): every scheduler's loop and every worker up, then ``before``.
        _wait_started(procs, WORKERS, SCHEDULERS, timeout=60)
        time.sleep(before)
        server.stop()
        _supervise(procs, down, report)
        server.start(keep_port=True)
        back = datetime.now(timezone.utc)
        _supervise(procs, misfire_threshold + 20 if after is None else after, report)
        chaos_ended = datetime.now(timezone.utc)
        # No new firings from here; the schedulers keep running until every firing in flight
        # ended or was resolved (one published again during the outage may expire once more).
        Quartz(ledger_app.app, store=store).pause_trigger_group(GROUP)
        _supervise(procs, 0, report, until_idle=store, timeout=3 * misfire_threshold + 30)
        report.died = [n for n in SCHEDULERS if procs.procs[n].poll() is not None]
        _drain(procs, store, report, timeout=90)
        owed_from = _owed_from(store, must_run)
    finally:
        procs.stop_all()
    logs = "\n".join(procs.log(n) for n in (*SCHEDULERS, *WORKERS))
    _check(report, url, must_run, chaos_ended, logs, owed_from)
    engine = create_engine(url)
    with engine.connect() as conn:
        started_after = {
            (r.trigger_name, r.scheduled_ms)
            for r in conn.execute(select(ledger_app.ledger))
            if r.scheduled_ms >= to_millis(back)
        }
    engine.dispose()
    report.after_outage = len(started_after)
    store.dispose()
    return report


def _wait_started(
    procs: Processes, workers: Sequence[str], schedulers: Sequence[str], timeout: float
) -> None:
    """Until each worker says it is ready and each scheduler's loop has started (their logs)."""
    wanted = {**{n: " ready." for n in workers}, **{n: " started (" for n in schedulers}}

    def all_started() -> bool:
        for name in wanted:
            procs.assert_running(name)
        return all(line in procs.log(name) for name, line in wanted.items())

    wait_for(all_started, timeout=timeout, message=f"{', '.join(wanted)} started")


def _supervise(
    procs: Processes,
    seconds: float,
    report: OutageReport,
    *,
    until_idle: SqlStore | None = None,
    timeout: float = 0.0,
) -> None:
    """Wait ``seconds`` (or, with ``until_idle``, until that store has no firing in flight, at
    most ``timeout``), starting again any worker that exits, as systemd or Kubernetes would."""
    until = time.monotonic() + (timeout if until_idle is not None else seconds)
    while time.monotonic() < until:
        if until_idle is not None and not until_idle.firing_states():
            return
        for name in WORKERS:
            if procs.procs[name].poll() is not None:
                report.worker_restarts.append(name)
                procs.worker(name, concurrency=4)
        time.sleep(0.5)


_DROPPED = re.compile(r"of trigger chaos\.(\S+) \(scheduled (\S+)\) dropped")
# Started on a worker that was then killed, before the task wrote its ledger row.
_INTERRUPTED = re.compile(r"of trigger chaos\.(\S+) \(scheduled (\S+)\); closed as interrupted")


def _check(
    report: ChaosReport,
    url: str,
    must_run: list[SimpleTrigger],
    until: datetime,
    logs: str,
    owed_from: dict[str, int] | None = None,
) -> None:
    """``owed_from``: each must-run trigger's stored next fire time (ms) at the end. Occurrences
    from there on are still owed (a trigger catching up after an outage, one at a time for a
    disallow_concurrent job), not lost: they fire once the scheduler moves on."""
    engine = create_engine(url)
    with engine.connect() as conn:
        started = conn.execute(select(ledger_app.ledger)).all()
        report.duplicates = len(conn.execute(select(ledger_app.duplicates)).all())
        recovered = conn.execute(select(ledger_app.recoveries)).all()
        report.recoveries = len(recovered)
        h = build_tables(DEFAULT_TABLE_PREFIX).history
        succeeded = conn.execute(
            select(h.c.trigger_name, h.c.scheduled_time).where(
                h.c.sched_name == "ledger_app",
                h.c.trigger_group == GROUP,
                h.c.result == "succeeded",
            )
        ).all()
    engine.dispose()
    executed = {(r.trigger_name, r.scheduled_ms) for r in (*started, *recovered)}
    dropped = {
        (name, to_millis(datetime.fromisoformat(when))) for name, when in _DROPPED.findall(logs)
    }
    due: set[tuple[str, int]] = set()
    for trigger in must_run:
        t = trigger.start_at
        owed = (owed_from or {}).get(trigger.key.name)
        while t is not None and t <= until:
            if owed is not None and to_millis(t) >= owed:
                report.owed += 1
            else:
                due.add((trigger.key.name, to_millis(t)))
            t = trigger.next_fire_time_after(t)
    interrupted = {
        (name, to_millis(datetime.fromisoformat(when))) for name, when in _INTERRUPTED.findall(logs)
    }
    report.due = len(due)
    report.executed = len(due & (executed | interrupted))
    report.dropped = len(due & dropped)
    report.lost = sorted(due - executed - interrupted - dropped)
    report.interrupted = len(interrupted)
    report.republished = logs.count("published again")
    runs = sorted(
        (r.started, r.ended)
        for r in started
        if r.trigger_name.startswith("exclusive-") and r.ended is not None
    )
    report.overlaps = sum(1 for a, b in itertools.pairwise(runs) if b[0] < a[1])
    _check_history(report, started, recovered, interrupted, succeeded)


def _check_history(
    report: ChaosReport,
    started: Sequence[Any],
    recovered: Sequence[Any],
    interrupted: set[tuple[str, int]],
    succeeded: Sequence[Any],
) -> None:
    """One ``succeeded`` history row per occurrence that ran, none for one that did not. An
    occurrence whose execution was interrupted (its worker or pool process killed) has none
    unless a recovery firing ran it again, which then has the one."""
    rows = collections.Counter((r.trigger_name, r.scheduled_time) for r in succeeded)
    report.history_succeeded = sum(rows.values())
    report.history_duplicates = sorted(k for k, n in rows.items() if n > 1)
    ran = {(r.trigger_name, r.scheduled_ms) for r in (*started, *recovered)}
    report.history_unrun = sorted(set(rows) - ran)
    ended = {(r.trigger_name, r.scheduled_ms) for r in started if r.ended is not None}
    again = {(r.trigger_name, r.scheduled_ms) for r in recovered}
    report.history_missing = sorted(ended - interrupted - again - set(rows))
