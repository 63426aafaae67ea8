"""Observability beside the core, with the SDK's in-memory reader and exporter: Quartz's beat-side
instruments and store spans from an instrumented store under the real loop, the store gauges and
who collects them, trace context in published messages, the execution instruments and spans on
the worker, and the health endpoint over HTTP."""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from sqlalchemy.exc import OperationalError

from celery_quartz import Job, JobKey, SimpleTrigger, TriggerKey, install
from celery_quartz.clock import FakeClock
from celery_quartz.cluster import ClusterManager
from celery_quartz.config import Settings
from celery_quartz.firing import HEADER, FiringHeader
from celery_quartz.health import HealthStatus, health_check
from celery_quartz.loop import SchedulingLoop
from celery_quartz.observability.gauges import StoreGauges
from celery_quartz.observability.http import HealthServer
from celery_quartz.observability.publishing import PublishTracing
from celery_quartz.observability.store import StoreObservation
from celery_quartz.publisher import Publisher, RedisPath
from celery_quartz.store import MemoryStore, SqlStore
from celery_quartz.worker import runtime_of
from tests.otel import points, sdk, spans
from tests.stores import store_at
from tests.unit.conftest import T0


@pytest.fixture(autouse=True)
def otel() -> None:
    sdk()


@pytest.fixture
def instance() -> str:
    """An instance id of this test's own, to tell its measurements from other tests'."""
    return f"node-{uuid.uuid4().hex[:8]}"


def _settings(**changes: Any) -> Settings:
    return Settings(**{"scheduler_name": "unit", "idle_wait": 1.0, **changes})


def _schedule(store: Any, name: str = "nightly", job: str = "report") -> None:
    j = Job(key=JobKey(job), task="tasks.report")
    trigger = SimpleTrigger(key=TriggerKey(name), job_key=j.key, start_at=T0)
    store.store_jobs_and_triggers([(j, [trigger])])


def _observe(store: SqlStore, clock: FakeClock, instance: str) -> StoreObservation:
    observation = StoreObservation(store.scheduler_name, instance_id=instance, clock=clock)
    store.add_hooks(observation)
    return observation


def _loop(
    store: MemoryStore, app: Celery, clock: FakeClock, instance: str, **changes: Any
) -> tuple[SchedulingLoop, StoreObservation]:
    observation = _observe(store, clock, instance)
    loop = SchedulingLoop(
        store,
        Publisher(app, hooks=PublishTracing(instance)),
        _settings(**changes),
        clock,
        instance,
    )
    return loop, observation


# -- beat: the instruments, from the role interface -------------------------------------------


def test_a_step_records_acquisition_acquired_and_store_operations_with_the_scheduler(
    store: MemoryStore, app: Celery, clock: FakeClock, instance: str
) -> None:
    _schedule(store)
    loop, _ = _loop(store, app, clock, instance)
    loop.run_once()
    mine = {"quartz__scheduler__name": "unit", "quartz__scheduler__id": instance}
    [acquisition] = points("quartz.trigger.acquisition.duration", **mine)
    assert acquisition.count >= 1
    assert sum(p.value for p in points("quartz.trigger.acquired", **mine)) == 1
    [claim] = points(
        "quartz.jobstore.operation.duration", **mine, quartz__jobstore__operation="claim"
    )
    assert claim.count >= 1
    [checkin] = points("quartz.cluster.checkin.duration", **mine)
    assert checkin.count == 1


def test_every_store_operation_is_a_span_named_for_it(
    store: MemoryStore, app: Celery, clock: FakeClock, instance: str
) -> None:
    _schedule(store)
    loop, _ = _loop(store, app, clock, instance)
    loop.run_once()
    mine = [s for s in spans() if (s.attributes or {}).get("quartz.scheduler.id") == instance]
    names = {s.name for s in mine}
    assert {"quartz.jobstore.claim", "quartz.jobstore.check_in"} <= names


def test_a_failing_store_operation_is_timed_with_its_error_and_recorded_on_its_span(
    store: MemoryStore, clock: FakeClock, instance: str
) -> None:
    _observe(store, clock, instance)

    def down() -> None:
        raise OperationalError("SELECT 1", {}, Exception("connection refused"))

    store.cluster.ping = down  # type: ignore[method-assign]
    with pytest.raises(OperationalError):
        store.ping()
    [point] = points(
        "quartz.jobstore.operation.duration",
        quartz__scheduler__id=instance,
        quartz__jobstore__operation="ping",
    )
    assert point.attributes["error.type"] == "OperationalError"


def test_misfires_are_counted_from_the_misfire_handler(
    store: MemoryStore, app: Celery, clock: FakeClock, instance: str
) -> None:
    _schedule(store)
    clock.advance(timedelta(minutes=5))  # far past the misfire threshold
    loop, _ = _loop(store, app, clock, instance)
    loop.run_once()
    counted = points("quartz.trigger.misfire", quartz__scheduler__id=instance)
    assert sum(p.value for p in counted) == 1


def test_the_live_schedulers_are_judged_as_failure_detection_judges_them(
    store: MemoryStore, clock: FakeClock, instance: str
) -> None:
    """Our own silence stretches a peer's (both were paused, say): a peer failure detection
    keeps alive is live for the gauges too."""
    peer = f"peer-{instance}"
    observation = _observe(store, clock, instance)
    manager = ClusterManager(
        store, clock, instance, checkin_interval=7.5, checkin_misfire_threshold=7.5
    )
    manager.check_in()
    store.check_in(peer, interval=7.5)
    clock.advance(timedelta(seconds=20))  # past the peer's 7.5 s interval and 7.5 s threshold
    manager.check_in()
    assert manager.failed_peers() == []
    assert observation.live_schedulers == sorted([instance, peer])


# -- beat: gauges read from the store, by one node -----------------------------------------------


def test_the_gauges_are_read_by_the_first_live_scheduler_only(
    store: MemoryStore, app: Celery, clock: FakeClock, instance: str
) -> None:
    _schedule(store)
    first, second = f"a-{instance}", f"b-{instance}"
    loop_a, observed_a = _loop(store, app, clock, first)
    loop_b, observed_b = _loop(store, app, clock, second)
    loop_a.start()
    loop_b.start()
    store.check_ins()
    assert observed_a.live_schedulers == observed_b.live_schedulers == [first, second]
    gauges_a = StoreGauges(
        store, observed_a.attributes, clock, lambda: observed_a.live_schedulers[0] == first
    )
    gauges_b = StoreGauges(
        store, observed_b.attributes, clock, lambda: observed_b.live_schedulers[0] == second
    )
    counts = points("quartz.trigger.count", quartz__scheduler__id=first)
    assert {p.attributes["quartz.trigger.state"]: p.value for p in counts} == {"WAITING": 1}
    assert points("quartz.trigger.count", quartz__scheduler__id=second) == []
    # One read of the store per collection, shared by every gauge.
    assert (gauges_a.reads, gauges_b.reads) == (1, 0)
    gauges_a.close()
    gauges_b.close()


def test_overdue_and_the_oldest_blocked_or_error_trigger_are_gauged(
    store: MemoryStore, app: Celery, clock: FakeClock, instance: str
) -> None:
    _schedule(store)
    clock.advance(timedelta(minutes=2))
    observed = _observe(store, clock, instance)
    gauges = StoreGauges(store, observed.attributes, clock, lambda: True)
    [overdue] = points("quartz.trigger.overdue", quartz__scheduler__id=instance)
    assert overdue.value == 1
    ages = points("quartz.trigger.oldest_due.age", quartz__scheduler__id=instance)
    assert {p.attributes["quartz.trigger.state"] for p in ages} == {"BLOCKED", "ERROR"}
    gauges.close()


def test_a_job_past_its_success_deadline_is_gauged_until_it_succeeds(
    store: MemoryStore, clock: FakeClock, instance: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqlalchemy import update

    from celery_quartz.clock import to_millis
    from celery_quartz.observability import gauges as gauges_module
    from tests.history_rows import insert_status

    monkeypatch.setattr(gauges_module, "_SNAPSHOT_TTL", 0.0)  # a new read per collection
    job = Job(key=JobKey("billing", "finance"), task="tasks.report", durable=True)
    store.store_jobs_and_triggers([(job, [])])
    insert_status(store, "billing", group="finance", since=T0, last_success=T0)
    clock.set(T0 + timedelta(hours=3))
    observed = _observe(store, clock, instance)
    deadlines = {job.key: timedelta(hours=2)}  # quartz_require_success_within
    gauges = StoreGauges(
        store, observed.attributes, clock, lambda: True, deadlines=lambda: deadlines
    )
    who = {"quartz__job__group": "finance", "quartz__job__name": "billing"}
    [overdue] = points("quartz.job.overdue", quartz__scheduler__id=instance, **who)
    [since] = points("quartz.job.since_success", quartz__scheduler__id=instance, **who)
    assert (overdue.value, since.value) == (1, 3 * 3600)
    s = store.tables.run_status
    with store.transaction() as conn:
        conn.execute(update(s).values(last_success_time=to_millis(clock.now())))
    assert points("quartz.job.overdue", quartz__scheduler__id=instance, **who) == []
    gauges.close()


def _group_gauges(instance: str, group: str) -> dict[str, float]:
    """The execution-group gauges of ``group`` measured by ``instance``, by gauge name."""
    found = {}
    for name in ("in_flight", "due_waiting", "limit"):
        measured = points(
            f"quartz.execution_group.{name}",
            quartz__scheduler__id=instance,
            quartz__execution_group=group,
        )
        if measured:
            [point] = measured
            found[name] = point.value
    return found


def test_an_idle_configured_execution_group_is_gauged_at_zero_with_its_limit(
    store: MemoryStore, clock: FakeClock, instance: str
) -> None:
    observed = _observe(store, clock, instance)
    gauges = StoreGauges(
        store,
        observed.attributes,
        clock,
        lambda: True,
        limit_for=lambda group: 2 if group == "reports" else None,
        groups=lambda: ["reports"],
    )
    # No trigger of the group is stored, none is in flight: the group is idle, not gone.
    assert _group_gauges(instance, "reports") == {"in_flight": 0, "due_waiting": 0, "limit": 2}
    gauges.close()


def test_an_execution_group_seen_before_stays_gauged_at_zero_once_idle(
    store: MemoryStore, clock: FakeClock, instance: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from celery_quartz.observability import gauges as gauges_module

    monkeypatch.setattr(gauges_module, "_SNAPSHOT_TTL", 0.0)  # a new read per collection
    job = Job(key=JobKey("report"), task="tasks.report")
    trigger = SimpleTrigger(
        key=TriggerKey("adhoc"), job_key=job.key, start_at=T0, execution_group="adhoc"
    )
    store.store_jobs_and_triggers([(job, [trigger])])
    observed = _observe(store, clock, instance)
    gauges = StoreGauges(store, observed.attributes, clock, lambda: True)
    assert _group_gauges(instance, "adhoc") == {"in_flight": 0, "due_waiting": 1}
    store.remove_trigger(TriggerKey("adhoc"))
    assert _group_gauges(instance, "adhoc") == {"in_flight": 0, "due_waiting": 0}
    gauges.close()


def test_beat_gauges_a_configured_execution_group_while_it_is_idle(
    tmp_path: Path, instance: str
) -> None:
    from celery_quartz.beat import Scheduler

    app = Celery("gauged", set_as_current=False)
    app.conf.quartz_store_url = f"sqlite:///{tmp_path / 'quartz.db'}"
    app.conf.quartz_auto_start = False
    app.conf.quartz_instance_id = instance
    app.conf.quartz_execution_limits = {"reports": 2}
    beat = Scheduler(app, lazy=False)
    try:
        beat.start()
        assert beat.loop is not None
        beat.loop.run_once()  # checks in: the only live scheduler collects the gauges
        # Nothing of the group is stored or in flight.
        assert _group_gauges(instance, "reports") == {"in_flight": 0, "due_waiting": 0, "limit": 2}
    finally:
        beat.close()
        app.close()


# -- traces: a span per published firing, its context in the message ------------------------------


def test_a_published_firing_carries_its_span_as_w3c_trace_context(
    store: MemoryStore, app: Celery, clock: FakeClock, queue: str, instance: str
) -> None:
    _schedule(store)
    loop, _ = _loop(store, app, clock, instance)
    loop.run_once()
    [span] = [
        s
        for s in spans("quartz.firing.publish")
        if (s.attributes or {}).get("quartz.scheduler.id") == instance
    ]
    assert span.attributes is not None
    assert span.attributes["quartz.job.name"] == "report"
    assert span.attributes["quartz.trigger.name"] == "nightly"
    assert span.attributes["quartz.job.task"] == "tasks.report"
    with app.connection_for_read() as conn:
        message = conn.SimpleQueue(queue, no_ack=True).get(block=False)
    trace_id = format(span.context.trace_id, "032x")
    assert message.headers["traceparent"].split("-")[1] == trace_id
    assert span.attributes["quartz.fire_instance_id"] == message.headers["id"]


def test_the_redis_path_renders_trace_headers_as_celery_adds_them(
    store: MemoryStore, clock: FakeClock, instance: str
) -> None:
    from tests.unit.test_publisher import _firing, _path

    path: RedisPath = _path()
    firing = _firing()
    carrier = {"traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01"}
    message = json.loads(path.envelope(firing, "celery", T0, "tag", carrier))
    assert message["headers"]["traceparent"] == carrier["traceparent"]
    plain = json.loads(path.envelope(firing, "celery", T0, "tag"))
    assert "traceparent" not in plain["headers"]
    del message["headers"]["traceparent"]
    assert message == plain


# -- the worker: execution instruments and spans ------------------------------------------------


@pytest.fixture
def worker_app(tmp_path: Path, clock: FakeClock) -> Iterator[tuple[Celery, SqlStore]]:
    store = store_at(f"sqlite:///{tmp_path}/quartz.db", "t", clock=clock)
    store.create_tables()
    app = Celery("t", set_as_current=False)
    app.conf.quartz_store_url = str(store.engine.url)

    @app.task(name="tasks.report", shared=False)
    def report(*args: Any, **kwargs: Any) -> str:
        if kwargs.get("fail"):
            raise RuntimeError("the job failed")
        return "done"

    install(app)
    app.finalize()
    yield app, store
    runtime = runtime_of(app)
    assert runtime is not None
    runtime.close()
    store.dispose()
    app.close()


def _fire(store: SqlStore, instance: str, **job_fields: Any) -> Any:
    job = Job(key=JobKey("report"), task="tasks.report", **job_fields)
    trigger = SimpleTrigger(key=TriggerKey("nightly"), job_key=job.key, start_at=T0)
    store.store_jobs_and_triggers([(job, [trigger])])
    acquired = store.acquire_next_triggers(instance, no_later_than=T0, max_count=1, time_window=0)
    [firing] = store.fire(instance, acquired)
    return firing


def _deliver(app: Celery, firing: Any, headers: dict[str, Any] | None = None) -> Any:
    return app.tasks[firing.task].apply(
        args=firing.args,
        kwargs=firing.kwargs,
        task_id=firing.fire_instance_id,
        headers={HEADER: FiringHeader.of(firing).fields, **(headers or {})},
        throw=False,
    )


def test_an_execution_is_timed_counted_and_traced_under_the_published_span(
    worker_app: tuple[Celery, SqlStore], instance: str
) -> None:
    app, store = worker_app
    firing = _fire(store, instance)
    parent = "00-" + "c" * 32 + "-" + "d" * 16 + "-01"
    _deliver(app, firing, {"traceparent": parent})
    [duration] = points("quartz.job.execution.duration", quartz__scheduler__id=instance)
    assert duration.count == 1 and "error.type" not in duration.attributes
    assert duration.attributes["quartz.job.result"] == "succeeded"
    assert (duration.attributes["quartz.job.group"], duration.attributes["quartz.job.name"]) == (
        "DEFAULT",
        "report",
    )
    [active] = points("quartz.job.execution.active", quartz__scheduler__id=instance)
    assert active.value == 0
    [span] = [
        s
        for s in spans("quartz.job.execute")
        if (s.attributes or {}).get("quartz.fire_instance_id") == firing.fire_instance_id
    ]
    assert format(span.context.trace_id, "032x") == "c" * 32
    assert span.parent is not None and format(span.parent.span_id, "016x") == "d" * 16


def test_a_failed_execution_is_tagged_with_its_error_type_and_records_the_exception(
    worker_app: tuple[Celery, SqlStore], instance: str
) -> None:
    app, store = worker_app
    firing = _fire(store, instance, kwargs={"fail": True})
    _deliver(app, firing)
    [duration] = points("quartz.job.execution.duration", quartz__scheduler__id=instance)
    assert duration.attributes["error.type"] == "RuntimeError"
    assert duration.attributes["quartz.job.result"] == "failed"
    [span] = [
        s
        for s in spans("quartz.job.execute")
        if (s.attributes or {}).get("quartz.fire_instance_id") == firing.fire_instance_id
    ]
    assert [e.name for e in span.events] == ["exception"]


def test_a_refused_start_is_a_veto_span(worker_app: tuple[Celery, SqlStore], instance: str) -> None:
    app, store = worker_app
    firing = _fire(store, instance)
    _deliver(app, firing)
    assert _deliver(app, firing).state == "IGNORED"
    [veto] = [
        s
        for s in spans("quartz.job.veto")
        if (s.attributes or {}).get("quartz.fire_instance_id") == firing.fire_instance_id
    ]
    assert veto.attributes is not None
    assert veto.attributes["quartz.veto.reason"] == "already executing or complete"


# -- health over HTTP ----------------------------------------------------------------------------


def _get(port: int, path: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.fixture
def served(
    store: MemoryStore, app: Celery, clock: FakeClock, instance: str
) -> Iterator[tuple[SchedulingLoop, int]]:
    loop, _ = _loop(store, app, clock, instance)
    server = HealthServer(lambda: health_check(loop), "127.0.0.1", 0).start()
    yield loop, server.port
    server.stop()


def test_the_endpoint_answers_200_while_running_and_gives_the_report(
    served: tuple[SchedulingLoop, int],
) -> None:
    loop, port = served
    loop.run_once()
    code, body = _get(port, "/healthz")
    assert (code, body["status"]) == (200, "healthy")
    assert body["data"]["overdue"] == 0
    assert body["data"]["last_acquisition_age"] is not None


def test_a_standby_replica_stays_in_rotation(served: tuple[SchedulingLoop, int]) -> None:
    loop, port = served
    loop.start()
    loop.standby()
    code, body = _get(port, "/healthz")
    assert (code, body["status"]) == (200, "degraded")


def test_a_store_that_does_not_answer_is_503(
    served: tuple[SchedulingLoop, int], store: MemoryStore
) -> None:
    loop, port = served
    loop.start()

    def down() -> None:
        raise OperationalError("SELECT 1", {}, Exception("connection refused"))

    store.cluster.ping = down  # type: ignore[method-assign]
    code, body = _get(port, "/healthz")
    assert (code, body["status"]) == (503, "unhealthy")
    assert _get(port, "/livez")[0] == 200


def test_a_shut_down_scheduler_is_503(served: tuple[SchedulingLoop, int]) -> None:
    loop, port = served
    loop.start()
    loop.shutdown()
    assert _get(port, "/healthz")[0] == 503
    assert _get(port, "/livez") == (200, {"status": "alive"})


def test_overdue_triggers_past_the_threshold_make_the_report_degraded(
    store: MemoryStore, app: Celery, clock: FakeClock, instance: str
) -> None:
    _schedule(store, "a")
    _schedule(store, "b", job="other")
    loop, _ = _loop(store, app, clock, instance, health_overdue_threshold=1)
    loop.start()
    clock.advance(timedelta(minutes=5))
    loop.cluster.check_in()
    report = health_check(loop)
    assert report.status is HealthStatus.DEGRADED
    assert report.data["overdue"] == 2


# -- with opentelemetry-instrumentation-celery: one trace, no duplicate -------------------------


def test_with_the_celery_instrumentation_our_spans_join_its_trace(
    worker_app: tuple[Celery, SqlStore], instance: str
) -> None:
    """Beat's loop publishes through the instrumented Celery path; an in-process worker (a real
    consumer, so the message's headers reach the request as Celery delivers them) runs it."""
    from celery.contrib.testing.worker import start_worker
    from opentelemetry.instrumentation.celery import CeleryInstrumentor

    hooked, worker_store = worker_app
    hooked.conf.broker_url = "memory://"
    hooked.conf.task_default_queue = queue = f"unit-{uuid.uuid4().hex}"
    now = datetime.now(timezone.utc)
    clock = FakeClock(now)
    observed = store_at(str(worker_store.engine.url), "t", clock=clock)
    _observe(observed, clock, instance)
    job = Job(key=JobKey("report"), task="tasks.report")
    trigger = SimpleTrigger(key=TriggerKey("nightly"), job_key=job.key, start_at=now)
    worker_store.store_jobs_and_triggers([(job, [trigger])])
    loop = SchedulingLoop(
        observed,
        Publisher(hooked, hooks=PublishTracing(instance)),
        _settings(scheduler_name="t"),
        clock,
        instance,
    )
    instrumentor = CeleryInstrumentor()
    instrumentor.instrument()
    # start_worker sets up Celery's logging: the root logger at ERROR, its handlers replaced.
    # Put them back, or every later test in this process loses its warnings to caplog.
    root = logging.getLogger()
    root_level, root_handlers = root.level, root.handlers[:]
    try:
        with start_worker(hooked, pool="solo", perform_ping_check=False, queues=[queue]):
            loop.run_once()
            deadline = time.monotonic() + 20
            while worker_store.firing_states() and time.monotonic() < deadline:
                time.sleep(0.1)
    finally:
        instrumentor.uninstrument()
        observed.dispose()
        root.setLevel(root_level)
        root.handlers[:] = root_handlers
    assert worker_store.firing_states() == {}
    [publish] = [
        s
        for s in spans("quartz.firing.publish")
        if (s.attributes or {}).get("quartz.scheduler.id") == instance
    ]
    in_trace = [s for s in spans() if s.context.trace_id == publish.context.trace_id]
    names = sorted(s.name for s in in_trace if not s.name.startswith("quartz.jobstore"))
    # Theirs: a publish span (a child of ours) and a run span; ours: the publish and the
    # execution, a child of their run span. One of each, in one trace.
    assert names == sorted(
        [
            "quartz.firing.publish",
            "apply_async/tasks.report",
            "run/tasks.report",
            "quartz.job.execute",
        ]
    )
    by_name = {s.name: s for s in in_trace}
    assert by_name["apply_async/tasks.report"].parent.span_id == publish.context.span_id
    run = by_name["run/tasks.report"]
    assert by_name["quartz.job.execute"].parent.span_id == run.context.span_id


def test_a_failing_publish_hook_does_not_keep_a_firing_from_the_broker(
    store: MemoryStore, app: Celery, clock: FakeClock, queue: str, instance: str
) -> None:
    class Broken:
        def before_publish(self, firings: Any) -> dict[str, dict[str, str]]:
            raise RuntimeError("instrumentation bug")

        def sending(self, firing: Any) -> Any:
            raise RuntimeError("instrumentation bug")

        def after_publish(self, firings: Any, error: Any) -> None:
            raise RuntimeError("instrumentation bug")

    _schedule(store)
    loop = SchedulingLoop(store, Publisher(app, hooks=Broken()), _settings(), clock, instance)
    loop.run_once()
    assert loop.fired_count == 1


_WITHOUT_SDK = """
import sys, tempfile
from datetime import datetime, timezone
from celery import Celery
from celery_quartz import Job, JobKey, SimpleTrigger, TriggerKey, install
from celery_quartz.firing import HEADER, FiringHeader
from celery_quartz.observability import execution, sdk_configured
from celery_quartz.config import Settings
from celery_quartz.store import open_store

calls = []
execution.ExecutionInstrumentation._start = lambda *a: calls.append("start")
execution.ExecutionInstrumentation._veto = lambda *a: calls.append("veto")
url = f"sqlite:///{tempfile.mkdtemp()}/quartz.db"
store = open_store(Settings(store_url=url, scheduler_name="t"))
store.create_tables()
app = Celery("t", set_as_current=False)
app.conf.quartz_store_url = url
def report():
    return "done"
app.task(name="tasks.report", shared=False)(report)
install(app)
app.finalize()
now = datetime.now(timezone.utc)
job = Job(key=JobKey("report"), task="tasks.report")
store.store_jobs_and_triggers([(job, [SimpleTrigger(key=TriggerKey("t"), job_key=job.key,
                                                     start_at=now)])])
acquired = store.acquire_next_triggers("a", no_later_than=now, max_count=1, time_window=0)
[firing] = store.fire("a", acquired)
for _ in range(2):  # the second delivery is refused
    app.tasks["tasks.report"].apply(task_id=firing.fire_instance_id,
                                    headers={HEADER: FiringHeader.of(firing).fields},
                                    throw=False)
assert not sdk_configured()
assert store.firing_states() == {}, store.firing_states()
print(calls)
"""


def test_without_an_sdk_the_worker_instrumentation_does_nothing(tmp_path: Path) -> None:
    """In a process with no OpenTelemetry SDK (a fresh interpreter: this one has one), a firing
    runs and a duplicate is refused without the middleware starting a span or a measurement."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", _WITHOUT_SDK],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
