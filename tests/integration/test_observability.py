"""Observability with real processes against PostgreSQL and Redis: metrics and spans from a real
beat and a real worker (each configured with an SDK writing JSON lines, read back here), the
health endpoint over HTTP, and a real Flower naming each firing."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, func, select
from sqlalchemy.engine import make_url

from celery_quartz import Job, JobKey, Quartz, SimpleTrigger, TriggerKey
from celery_quartz.triggers import REPEAT_INDEFINITELY
from tests.integration import ledger_app
from tests.integration.otel_files import latest_exports, read_points, read_spans
from tests.integration.processes import APP, processes, wait_for
from tests.services import PostgresServer, free_port


def _get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        body = error.read()
        try:
            return error.code, json.loads(body)
        except ValueError:
            return error.code, body.decode(errors="replace")
    except OSError:
        return 0, None


def _ledger_rows(url: str) -> int:
    engine = create_engine(url)
    with engine.connect() as conn:
        n = conn.execute(select(func.count()).select_from(ledger_app.ledger)).scalar_one()
    engine.dispose()
    return int(n)


def _every_second(store: Any, name: str = "tick") -> None:
    Quartz(ledger_app.app, store=store).schedule_job(
        Job(key=JobKey(name, "obs"), task="ledger.record"),
        SimpleTrigger(
            key=TriggerKey(name, "obs"),
            start_at=datetime.now(timezone.utc) + timedelta(seconds=1),
            repeat_interval=timedelta(seconds=1),
            repeat_count=REPEAT_INDEFINITELY,
        ),
    )


def _attrs(span: dict[str, Any]) -> dict[str, Any]:
    return span.get("attributes") or {}


def test_beat_and_worker_export_the_instruments_and_one_trace_per_firing(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    store = ledger_app.prepared_store(pg_url)
    _every_second(store)
    otel = tmp_path / "otel"
    otel.mkdir()
    health_port = free_port()
    env = ledger_app.environment(
        pg_url, redis_url, OTEL_DIR=str(otel), HEALTH_PORT=str(health_port)
    )
    with processes(tmp_path, env) as procs:
        procs.beat("beat1")
        procs.env.pop("CQ_HEALTH_PORT")
        procs.beat("beat2")  # a second node of the cluster: it must not read the gauges too
        procs.worker("worker1", concurrency=1, extra=["-P", "solo"])
        wait_for(lambda: _ledger_rows(pg_url) >= 3, timeout=60, message="three executions")
        # beat2 may have run those before beat1, slower to start on a loaded machine, listens.
        healthz = f"http://127.0.0.1:{health_port}/healthz"
        wait_for(lambda: _get(healthz)[0] != 0, timeout=30, message="beat1's health endpoint")
        code, body = _get(healthz)
        assert (code, body["status"]) == (200, "healthy"), body
        assert body["data"]["last_acquisition_age"] is not None
        assert body["data"]["overdue"] == 0
        assert _get(f"http://127.0.0.1:{health_port}/livez")[0] == 200
        # The gauges and a few more exports.
        wait_for(
            lambda: "quartz.trigger.count" in read_points(otel),
            timeout=30,
            message="the store gauges",
        )
        time.sleep(3)  # several more collections, on both nodes
        procs.assert_running("beat1", "beat2", "worker1")
        # While both schedulers run, one of them reads the store gauges (the other takes over
        # when it leaves, which the exports after this point would show).
        latest = latest_exports(otel)
        collectors = [pid for pid, names in latest.items() if "quartz.trigger.count" in names]
        assert len(collectors) == 1, latest
    store.dispose()

    spans = read_spans(otel)
    published = {
        _attrs(s)["quartz.fire_instance_id"]: s
        for s in spans
        if s["name"] == "quartz.firing.publish"
    }
    executed = [s for s in spans if s["name"] == "quartz.job.execute"]
    assert len(executed) >= 3
    for span in executed:
        attributes = _attrs(span)
        assert attributes["quartz.job.name"] == "tick"
        assert attributes["quartz.trigger.group"] == "obs"
        assert attributes["quartz.job.task"] == "ledger.record"
        parent = published[attributes["quartz.fire_instance_id"]]
        # One trace from beat's publication to the worker's execution.
        assert span["context"]["trace_id"] == parent["context"]["trace_id"]
        assert span["parent_id"] == parent["context"]["span_id"]
    assert any(s["name"] == "quartz.jobstore.claim" for s in spans)

    points = read_points(otel)
    for name in (
        "quartz.trigger.acquisition.duration",
        "quartz.trigger.acquired",
        "quartz.cluster.checkin.duration",
        "quartz.jobstore.operation.duration",
        "quartz.job.execution.duration",
        "quartz.job.execution.active",
    ):
        assert name in points, name
        for point in points[name]:
            assert point["attributes"]["quartz.scheduler.name"] == "ledger_app"
            assert point["attributes"]["quartz.scheduler.id"]
    beat_pids = {p["_pid"] for p in points["quartz.trigger.acquired"]}
    worker_pids = {p["_pid"] for p in points["quartz.job.execution.duration"]}
    assert beat_pids.isdisjoint(worker_pids)  # execution in the worker, the rest in beat
    assert max(p["count"] for p in points["quartz.job.execution.duration"]) >= 3
    states = {p["attributes"]["quartz.trigger.state"] for p in points["quartz.trigger.count"]}
    assert states & {"WAITING", "ACQUIRED"}
    # Both schedulers measured.
    assert (
        len(
            {p["attributes"]["quartz.scheduler.id"] for p in points["quartz.trigger.acquired"]}
            | {
                p["attributes"]["quartz.scheduler.id"]
                for p in points["quartz.cluster.checkin.duration"]
            }
        )
        == 2
    )


def test_the_health_endpoint_reports_standby_and_goes_with_the_process(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    """A non-clustered replica that is not elected stays in rotation (200, degraded)."""
    ledger_app.prepared_store(pg_url).dispose()
    leader_port, replica_port = free_port(), free_port()
    common = {"CLUSTERED": "0", "ELECTION": "postgresql", "INSTANCE_ID": "the-leader"}
    with processes(tmp_path, ledger_app.environment(pg_url, redis_url, **common)) as procs:
        procs.env["CQ_HEALTH_PORT"] = str(leader_port)
        procs.beat("leader")
        wait_for(
            lambda: (
                _get(f"http://127.0.0.1:{leader_port}/healthz")[0] == 200
                and _get(f"http://127.0.0.1:{leader_port}/healthz")[1]["status"] == "healthy"
            ),
            timeout=30,
            message="the leader to be healthy",
        )
        procs.env["CQ_HEALTH_PORT"] = str(replica_port)
        procs.beat("replica")
        wait_for(
            lambda: _get(f"http://127.0.0.1:{replica_port}/healthz")[0] == 200,
            timeout=30,
            message="the replica's endpoint",
        )
        code, body = _get(f"http://127.0.0.1:{replica_port}/healthz")
        assert (code, body["status"]) == (200, "degraded"), body
        procs.stop("leader")
        # Shut down: the endpoint goes with the process; the replica takes over.
        assert _get(f"http://127.0.0.1:{leader_port}/livez")[0] == 0
        wait_for(
            lambda: _get(f"http://127.0.0.1:{replica_port}/healthz")[1]["status"] == "healthy",
            timeout=30,
            message="the replica to lead",
        )


@pytest.mark.parametrize("sent_events", [False, True], ids=["redis-path", "task-sent-events"])
def test_flower_names_each_firings_job_trigger_and_scheduled_time(
    tmp_path: Path, pg_url: str, redis_url: str, sent_events: bool
) -> None:
    """Beat takes the Redis fast path, with and without task-sent events (which it then sends
    for every firing); Flower lists each firing under its task name, with its identity."""
    store = ledger_app.prepared_store(pg_url)
    _every_second(store, "flowered")
    flower_port = free_port()
    settings = {"QUARTZ_DEBUG": "1", **({"SEND_EVENTS": "1"} if sent_events else {})}
    env = {
        **ledger_app.environment(pg_url, redis_url, **settings),
        "FLOWER_UNAUTHENTICATED_API": "1",
    }
    with processes(tmp_path, env) as procs:
        procs.flower("flower", flower_port)
        procs.worker("worker1", concurrency=1, extra=["-E"])

        def seen_by_flower() -> bool:
            code, body = _get(f"http://127.0.0.1:{flower_port}/api/workers?status=true")
            return code == 200 and any(name.startswith("worker1@") for name in body or {})

        # Flower's event receiver is connected once it has an event from the worker: a
        # task-sent event published before that would not reach it (events are not queued).
        wait_for(seen_by_flower, timeout=60, message="Flower to receive the worker's events")
        procs.beat("beat1")
        url = f"http://127.0.0.1:{flower_port}/api/tasks?taskname=ledger.record"

        def tasks() -> dict[str, Any]:
            code, body = _get(url)
            return body if code == 200 and isinstance(body, dict) else {}

        wait_for(lambda: len(tasks()) >= 3, timeout=60, message="Flower to list three firings")
        store.dispose()
        listed = tasks()
        log = procs.log("beat1")
    # Beat took the Redis fast path, with task-sent events on as well.
    assert re.search(r"published \d+ firing\(s\) \([1-9]\d* straight to Redis\)", log)
    for task in listed.values():
        assert task["name"] == "ledger.record"
        assert "quartz job=obs.flowered trigger=obs.flowered scheduled=" in task["kwargs"], task
    if sent_events:
        assert all(task["sent"] for task in listed.values())


def test_a_worker_without_the_hooks_is_noticed_and_no_occurrence_runs_twice(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    """A worker started without ``celery_quartz.install(app)`` runs each firing but never
    records its start: the firing then looks expired and unstarted. Beat warns about the queue,
    reports degraded health, asks the workers which queues they consume, and drops the expired
    firings of the queue that worker consumes instead of publishing them again (each would run
    a second time)."""
    store = ledger_app.prepared_store(pg_url)
    now = datetime.now(timezone.utc)
    quartz = Quartz(ledger_app.app, store=store)
    # One-shot triggers: their smart policy (fire now) would publish an expired firing again.
    quartz.schedule_jobs(
        [
            (
                Job(key=JobKey(f"once-{i}", "obs"), task="ledger.record"),
                [
                    SimpleTrigger(
                        key=TriggerKey(f"once-{i}", "obs"),
                        start_at=now + timedelta(seconds=2 + i),
                        repeat_count=0,
                        repeat_interval=timedelta(0),
                    )
                ],
            )
            for i in range(5)
        ]
    )
    health_port = free_port()
    env = ledger_app.environment(
        pg_url, redis_url, MISFIRE_THRESHOLD="3", HEALTH_PORT=str(health_port)
    )
    with processes(tmp_path, env) as procs:
        procs.beat("beat1")
        procs.env["CQ_NO_HOOKS"] = "1"
        procs.env.pop("CQ_HEALTH_PORT")
        procs.worker("unhooked", concurrency=1, extra=["-P", "solo"])
        wait_for(lambda: _ledger_rows(pg_url) == 5, timeout=60, message="five executions")
        wait_for(
            lambda: not store.firing_states(), timeout=60, message="the firings to be resolved"
        )
        reports: list[tuple[int, Any]] = []

        def unhooked_reported() -> bool:
            reports.append(_get(f"http://127.0.0.1:{health_port}/healthz"))
            code, body = reports[-1]
            return (
                code == 200
                and isinstance(body, dict)
                and body["status"] == "degraded"
                and body["data"].get("unhooked_queues") == ["celery"]
            )

        # Degraded for that reason; with check-ins every second, the report may first name a
        # late check-in (the misfire scan's broadcast held the loop for up to a second).
        try:
            wait_for(unhooked_reported, timeout=20, message="health to name the queue")
        except AssertionError:
            raise AssertionError(f"last health report: {reports[-1]}") from None
        time.sleep(3)  # a republished firing would have been run by now
        log = procs.log("beat1")
    assert "no worker with the celery-quartz hooks checks in for queue 'celery'" in log
    assert re.search(r"was not started by any worker .*: published again", log) is None
    assert re.search(r"queue 'celery' is consumed by unhooked@\S+ without the celery-quartz", log)
    assert log.count("dropped: misfire: queue 'celery' is consumed by unhooked@") == 5
    engine = create_engine(pg_url)
    with engine.connect() as conn:
        dups = conn.execute(select(func.count()).select_from(ledger_app.duplicates)).scalar_one()
    engine.dispose()
    assert (_ledger_rows(pg_url), dups) == (5, 0)
    store.dispose()


@pytest.mark.slow
def test_a_firing_for_a_queue_only_an_unhooked_worker_consumes_runs_once_whatever_the_read_interval(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    """Issue 27, item 1: with a misfire threshold (8 s) far shorter than the once-a-minute read
    of the workers' check-ins, firings go, straight after that read, to a queue that only a
    worker without the hooks consumes. Before an expired firing is published again, beat asks
    the workers, fresh; it drops the firings instead of running each a second time."""
    store = ledger_app.prepared_store(pg_url)
    quartz = Quartz(ledger_app.app, store=store)

    def once(name: str, delay: float, **options: str) -> None:
        quartz.schedule_job(
            Job(key=JobKey(name, "obs"), task="ledger.record", options=options),
            SimpleTrigger(
                key=TriggerKey(name, "obs"),
                start_at=datetime.now(timezone.utc) + timedelta(seconds=delay),
                repeat_count=0,
                repeat_interval=timedelta(0),
            ),
        )

    once("first", 1)  # to the hooked worker's queue: beat reads the check-ins after it
    env = ledger_app.environment(pg_url, redis_url, MISFIRE_THRESHOLD="8", CHECKIN_THRESHOLD="2")
    with processes(tmp_path, env) as procs:
        procs.worker("hooked", concurrency=1, extra=["-P", "solo"])
        procs.env["CQ_NO_HOOKS"] = "1"
        procs.worker("plain", concurrency=1, queues="unhooked", extra=["-P", "solo"])
        procs.beat("beat1")
        wait_for(lambda: _ledger_rows(pg_url) == 1, timeout=60, message="the first occurrence")
        time.sleep(9)  # the misfire scan that follows has read the check-ins (8 s apart)
        for i in range(3):
            once(f"plain-{i}", 2 + i, queue="unhooked")
        wait_for(lambda: _ledger_rows(pg_url) == 4, timeout=60, message="three more executions")
        wait_for(
            lambda: not store.firing_states(), timeout=60, message="the firings to be resolved"
        )
        time.sleep(3)  # a republished firing would have been run by now
        log = procs.log("beat1")
    assert re.search(r"was not started by any worker .*: published again", log) is None
    assert log.count("dropped: misfire: queue 'unhooked' is consumed by plain@") == 3
    engine = create_engine(pg_url)
    with engine.connect() as conn:
        dups = conn.execute(select(func.count()).select_from(ledger_app.duplicates)).scalar_one()
    engine.dispose()
    assert (_ledger_rows(pg_url), dups) == (4, 0)
    store.dispose()


@pytest.mark.slow
def test_a_queue_no_worker_consumes_yet_is_not_taken_for_an_unhooked_worker(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    """No worker at all consumes the queue when a firing expires (between a worker's death and
    its replacement's check-in, or before the first one starts). Nothing says a worker without
    the hooks ran it, so the firing follows its trigger's instruction (a one-shot's: fire now)
    and is published again; the hooked worker started afterwards runs the occurrence once."""
    store = ledger_app.prepared_store(pg_url)
    quartz = Quartz(ledger_app.app, store=store)
    quartz.schedule_job(
        Job(key=JobKey("gap", "obs"), task="ledger.record"),
        SimpleTrigger(
            key=TriggerKey("gap", "obs"),
            start_at=datetime.now(timezone.utc) + timedelta(seconds=2),
            repeat_count=0,
            repeat_interval=timedelta(0),
        ),
    )
    # The republished message expires the threshold after it is sent: time for a worker to start.
    env = ledger_app.environment(pg_url, redis_url, MISFIRE_THRESHOLD="20")
    with processes(tmp_path, env) as procs:
        procs.beat("beat1")
        wait_for(
            lambda: "was not started by any worker" in procs.log("beat1"),
            timeout=90,
            message="the expired firing to be resolved",
        )
        log = procs.log("beat1")
        assert "no worker with the celery-quartz hooks checks in for queue 'celery'" in log
        assert "dropped: misfire" not in log
        assert re.search(r"firing \S+ of trigger obs\.gap was not started .*: published again", log)
        procs.worker("late", concurrency=1, extra=["-P", "solo"])
        wait_for(lambda: _ledger_rows(pg_url) == 1, timeout=60, message="the occurrence to run")
        wait_for(lambda: not store.firing_states(), timeout=30, message="its completion")
    assert _ledger_rows(pg_url) == 1
    store.dispose()


def test_a_hooked_worker_answers_quartz_health_and_an_unhooked_one_does_not(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    ledger_app.prepared_store(pg_url).dispose()
    env = ledger_app.environment(pg_url, redis_url)
    with processes(tmp_path, env) as procs:
        procs.worker("hooked", concurrency=1, extra=["-P", "solo"])
        procs.env["CQ_NO_HOOKS"] = "1"
        procs.worker("plain", concurrency=1, extra=["-P", "solo"])

        def inspect() -> dict[str, Any]:
            out = subprocess.run(
                [sys.executable, "-m", "celery", "-A", APP, "inspect", "quartz_health", "--json"],
                cwd=tmp_path,
                env={**procs.env, "CQ_NO_HOOKS": ""},
                capture_output=True,
                text=True,
                timeout=30,
            )
            try:
                return dict(json.loads(out.stdout.strip().splitlines()[-1]))
            except (ValueError, IndexError):
                return {}

        def answered() -> dict[str, Any]:
            replies = inspect()
            hooked = [v for k, v in replies.items() if k.startswith("hooked@")]
            return hooked[0] if hooked and hooked[0].get("checking_in") else {}

        wait_for(lambda: answered(), timeout=60, message="the hooked worker's report")
        replies = inspect()
    [hooked] = [v for k, v in replies.items() if k.startswith("hooked@")]
    assert hooked["status"] == "healthy" and hooked["hooks_installed"] is True
    assert "celery" in hooked["queues"]
    # The unhooked worker does not know the command.
    [plain] = [v for k, v in replies.items() if k.startswith("plain@")]
    assert "error" in plain


def _set_connections(postgres: PostgresServer, dbname: str, allowed: bool) -> None:
    """Let this one database be connected to, or not (and end its sessions): the store goes
    down for this test's processes only, not for the shared server."""
    postgres.execute(f'ALTER DATABASE "{dbname}" WITH ALLOW_CONNECTIONS {str(allowed).lower()}')
    if not allowed:
        postgres.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
            [dbname],
        )


def test_the_health_endpoint_is_503_while_the_store_is_down_and_200_once_it_is_back(
    tmp_path: Path, postgres: PostgresServer, pg_url: str, redis_url: str
) -> None:
    ledger_app.prepared_store(pg_url).dispose()
    dbname = make_url(pg_url).database
    assert dbname is not None
    port = free_port()
    env = ledger_app.environment(pg_url, redis_url, HEALTH_PORT=str(port))
    healthz = f"http://127.0.0.1:{port}/healthz"
    with processes(tmp_path, env) as procs:
        procs.beat("beat1")
        wait_for(lambda: _get(healthz)[0] == 200, timeout=30, message="a healthy scheduler")
        assert _get(healthz)[1]["status"] == "healthy"
        _set_connections(postgres, dbname, allowed=False)
        try:
            wait_for(lambda: _get(healthz)[0] == 503, timeout=30, message="503, store down")
            code, body = _get(healthz)
            assert (code, body["status"]) == (503, "unhealthy")
            assert body["description"] == "the store does not answer"
            assert _get(f"http://127.0.0.1:{port}/livez")[0] == 200  # the process is alive
        finally:
            _set_connections(postgres, dbname, allowed=True)
        wait_for(
            lambda: _get(healthz)[1] and _get(healthz)[1].get("status") == "healthy",
            timeout=30,
            message="healthy again",
        )


def test_a_scheduler_shutting_down_answers_503_until_it_exits(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    """A scheduler that waits at shutdown for its firings to finish (quartz_shutdown_wait_for_jobs)
    is out of rotation meanwhile: 503, while /livez still answers."""
    store = ledger_app.prepared_store(pg_url)
    Quartz(ledger_app.app, store=store).schedule_job(
        Job(key=JobKey("slow", "obs"), task="ledger.record", kwargs={"sleep": 8.0}),
        SimpleTrigger(
            key=TriggerKey("slow", "obs"),
            start_at=datetime.now(timezone.utc) + timedelta(seconds=1),
            repeat_count=0,
            repeat_interval=timedelta(0),
        ),
    )
    port = free_port()
    env = ledger_app.environment(pg_url, redis_url, HEALTH_PORT=str(port), SHUTDOWN_WAIT="20")
    healthz = f"http://127.0.0.1:{port}/healthz"
    with processes(tmp_path, env) as procs:
        procs.beat("beat1")
        procs.env.pop("CQ_HEALTH_PORT")
        procs.worker("worker1", concurrency=1, extra=["-P", "solo"])
        wait_for(lambda: _ledger_rows(pg_url) == 1, timeout=30, message="the slow job to start")
        assert _get(healthz)[0] == 200
        procs.procs["beat1"].send_signal(signal.SIGTERM)
        wait_for(lambda: _get(healthz)[0] == 503, timeout=10, message="503 while shutting down")
        code, body = _get(healthz)
        assert (code, body["status"]) == (503, "unhealthy"), body
        assert body["data"]["status"] == "SHUTTING_DOWN", body
        assert _get(f"http://127.0.0.1:{port}/livez")[0] == 200
        procs.procs["beat1"].wait(timeout=30)
        assert _get(f"http://127.0.0.1:{port}/livez")[0] == 0  # gone with the process
    store.dispose()
