"""The worker-side guard, run in-process: Celery's eager ``apply`` goes through the same tracer
(``before_start``, ``task_postrun``) as a worker. The store is a SQLite file, since the hooks open
their own store from ``quartz_store_url``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from celery.exceptions import Ignore

from celery_quartz import (
    Job,
    JobKey,
    RetryPolicy,
    SimpleTrigger,
    TriggerKey,
    current_context,
    install,
)
from celery_quartz.clock import FakeClock
from celery_quartz.context import JobExecutionContext
from celery_quartz.errors import RefireJob
from celery_quartz.firing import HEADER, Firing, FiringHeader
from celery_quartz.keys import RETRYING_JOBS_GROUP
from celery_quartz.store import FiringState, SqlStore, TriggerState
from celery_quartz.worker import WorkerRuntime, runtime_of
from celery_quartz.worker import ends as worker_ends
from tests.stores import store_at
from tests.unit.conftest import T0


@pytest.fixture
def file_store(tmp_path: Path, clock: FakeClock) -> Iterator[SqlStore]:
    store = store_at(f"sqlite:///{tmp_path}/quartz.db", "t", clock=clock)
    store.create_tables()
    yield store
    store.dispose()


@pytest.fixture
def contexts() -> list[JobExecutionContext | None]:
    return []


@pytest.fixture
def app(file_store: SqlStore, contexts: list) -> Iterator[Celery]:
    app = Celery("t", set_as_current=False)
    app.conf.quartz_store_url = str(file_store.engine.url)

    @app.task(name="tasks.report", shared=False)
    def report(*args: Any, **kwargs: Any) -> str:
        context = current_context()
        contexts.append(context)
        if context is not None and kwargs.get("count"):
            context.job_data["count"] = context.job_data.get("count", 0) + 1
        if kwargs.get("fail"):
            raise RuntimeError("the job failed")
        if kwargs.get("ignore"):
            raise Ignore()
        return "done"

    @app.task(name="tasks.flaky", shared=False)
    def flaky() -> str:
        context = current_context()
        contexts.append(context)
        if context is not None and context.refire_count == 0:
            raise RefireJob("not yet")
        return "done"

    install(app)
    app.finalize()
    yield app
    _uninstall(app)


def _runtime(app: Celery) -> WorkerRuntime:
    runtime = runtime_of(app)
    assert runtime is not None
    return runtime


def _uninstall(app: Celery) -> None:
    _runtime(app).close()
    app.close()


def fired(
    store: SqlStore,
    *,
    repeat_count: int = -1,
    retry_policy: RetryPolicy = RetryPolicy.NONE,
    **job_fields: Any,
) -> Firing:
    """A firing of job ``report`` as the scheduler leaves it: FIRED, about to be published."""
    job = Job(key=JobKey("report"), task="tasks.report", **job_fields)
    trigger = SimpleTrigger(
        key=TriggerKey("every-minute"),
        job_key=job.key,
        start_at=T0,
        repeat_interval=timedelta(minutes=1),
        repeat_count=repeat_count,
        data={"from": "trigger"},
        retry_policy=retry_policy,
    )
    store.store_jobs_and_triggers([(job, [trigger])])
    acquired = store.acquire_next_triggers("sched-a", no_later_than=T0, max_count=1, time_window=0)
    [firing] = store.fire("sched-a", acquired)
    return firing


def deliver(app: Celery, firing: Firing) -> Any:
    """Run the firing's message as a worker would."""
    return app.tasks[firing.task].apply(
        args=firing.args,
        kwargs=firing.kwargs,
        task_id=firing.task_id,
        headers={HEADER: FiringHeader.of(firing).fields},
        throw=False,
    )


def test_a_firing_runs_and_its_completion_removes_it(
    app: Celery, file_store: SqlStore, contexts: list
) -> None:
    firing = fired(file_store)
    result = deliver(app, firing)
    assert (result.state, result.result) == ("SUCCESS", "done")
    assert len(contexts) == 1
    assert file_store.firing_states() == {}
    assert file_store.get_trigger_state(TriggerKey("every-minute")) == TriggerState.WAITING


def test_a_firing_published_again_after_its_expiry_runs_under_a_task_id_of_its_own(
    app: Celery, file_store: SqlStore, clock: FakeClock, contexts: list
) -> None:
    """A worker that discarded the expired message keeps its task id revoked; the copy sent
    again has its own (suffixed) task id, and the worker finds the firing by the header."""
    firing = fired(file_store, repeat_count=0)
    file_store.mark_published("sched-a", [firing.fire_instance_id])
    clock.set(T0 + timedelta(seconds=120))
    [again] = file_store.resolve_expired_firings("sched-b", grace=8.5, max_count=10)
    assert (again.fire_instance_id, again.expired_count) == (firing.fire_instance_id, 1)
    assert again.task_id == f"{firing.fire_instance_id}.r1" != firing.task_id
    result = deliver(app, again)
    assert (result.state, result.id) == ("SUCCESS", again.task_id)
    assert [c.fire_instance_id for c in contexts] == [firing.fire_instance_id]
    assert file_store.firing_states() == {}
    # The first message, delivered late under the plain id, does not run the occurrence again.
    assert deliver(app, firing).state == "IGNORED"
    assert len(contexts) == 1


def test_the_task_reads_its_firing_from_the_context(
    app: Celery, file_store: SqlStore, contexts: list
) -> None:
    firing = fired(file_store, data={"from": "job", "job_only": 1})
    deliver(app, firing)
    [context] = contexts
    assert context is not None
    assert (context.scheduler_name, context.fire_instance_id, context.fired_by) == (
        "t",
        firing.fire_instance_id,
        "sched-a",
    )
    assert (context.job_key, context.trigger_key, context.scheduled_fire_time) == (
        JobKey("report"),
        TriggerKey("every-minute"),
        T0,
    )
    assert context.merged_job_data == {"from": "trigger", "job_only": 1}
    assert context.job_data == {"from": "job", "job_only": 1}
    assert context.worker_name is not None and context.recovering is False


def test_a_second_delivery_of_a_completed_firing_does_not_run(
    app: Celery, file_store: SqlStore, contexts: list
) -> None:
    firing = fired(file_store)
    deliver(app, firing)
    result = deliver(app, firing)
    assert result.state == "IGNORED"
    assert len(contexts) == 1


def test_a_delivery_of_a_firing_executing_elsewhere_does_not_run(
    app: Celery, file_store: SqlStore, contexts: list
) -> None:
    firing = fired(file_store)
    assert file_store.start_execution(firing.fire_instance_id, "other@host")
    result = deliver(app, firing)
    assert result.state == "IGNORED"
    assert contexts == []
    assert file_store.firing_states() == {firing.fire_instance_id: FiringState.EXECUTING}


def test_a_failed_job_still_completes_its_firing(
    app: Celery, file_store: SqlStore, contexts: list
) -> None:
    firing = fired(file_store, kwargs={"fail": True})
    result = deliver(app, firing)
    assert result.state == "FAILURE"
    assert file_store.firing_states() == {}


def test_the_worker_reports_each_outcome_to_its_trigger(app: Celery, file_store: SqlStore) -> None:
    firing = fired(file_store, kwargs={"fail": True})
    deliver(app, firing)
    view = file_store.trigger_view(TriggerKey("every-minute"))
    assert view is not None and view.last_outcome is not None
    outcome = view.last_outcome
    assert not outcome.succeeded and outcome.consecutive_failures == 1
    assert (outcome.error_type, outcome.error_message) == ("RuntimeError", "the job failed")
    assert outcome.started_time is not None and outcome.duration is not None


def _retry_triggers(store: SqlStore) -> list[TriggerKey]:
    return [
        t.key
        for t in store.get_triggers_of_job(JobKey("report"))
        if t.key.group == RETRYING_JOBS_GROUP
    ]


def test_a_failed_job_is_retried_under_its_triggers_policy(
    app: Celery, file_store: SqlStore
) -> None:
    # One-shot: the worker's store reads the real clock, long after the fake T0 schedule.
    policy = RetryPolicy.fixed(2, 20)
    firing = fired(file_store, repeat_count=0, retry_policy=policy, kwargs={"fail": True})
    before = datetime.now(timezone.utc)
    assert deliver(app, firing).state == "FAILURE"
    after = datetime.now(timezone.utc)
    assert file_store.firing_states() == {}
    [retry] = _retry_triggers(file_store)
    retry_trigger = file_store.retrieve_trigger(retry)
    assert retry_trigger is not None and retry_trigger.next_fire_time is not None
    delay = timedelta(seconds=20)
    assert before + delay - timedelta(milliseconds=1) <= retry_trigger.next_fire_time
    assert retry_trigger.next_fire_time <= after + delay


@pytest.mark.parametrize("outcome", [{}, {"ignore": True}])
def test_a_job_that_succeeds_or_ignores_its_firing_is_not_retried(
    app: Celery, file_store: SqlStore, outcome: dict[str, bool]
) -> None:
    firing = fired(file_store, retry_policy=RetryPolicy.fixed(2, 20), kwargs=outcome)
    assert deliver(app, firing).state in ("SUCCESS", "IGNORED")
    assert file_store.firing_states() == {}
    assert _retry_triggers(file_store) == []


def test_a_job_that_persists_its_data_keeps_what_the_task_left(
    app: Celery, file_store: SqlStore
) -> None:
    firing = fired(file_store, kwargs={"count": True}, data={"count": 41}, persist_job_data=True)
    deliver(app, firing)
    job = file_store.retrieve_job(JobKey("report"))
    assert job is not None and job.data["count"] == 42


def test_a_message_that_is_not_a_firing_runs_untouched(
    app: Celery, file_store: SqlStore, contexts: list
) -> None:
    result = app.tasks["tasks.report"].apply(task_id="plain-task", throw=False)
    assert result.state == "SUCCESS"
    assert contexts == [None]
    assert file_store.firing_states() == {}


def test_install_is_idempotent(app: Celery) -> None:
    runtime = runtime_of(app)
    install(app)
    assert runtime is not None and runtime_of(app) is runtime


def test_a_task_that_asks_to_refire_runs_the_same_firing_again_with_its_count_up(
    app: Celery, file_store: SqlStore, contexts: list
) -> None:
    app.conf.broker_url = "memory://"
    app.conf.task_default_queue = "refire-test"
    firing = fired(file_store)
    firing.task = "tasks.flaky"
    assert deliver(app, firing).state == "FAILURE"
    assert file_store.firing_states() == {firing.fire_instance_id: FiringState.PUBLISHED}
    with app.connection_for_read() as conn:
        queue = conn.SimpleQueue("refire-test", no_ack=True)
        message = queue.get(timeout=2)
        queue.close()
    header = message.headers[HEADER]
    assert (message.headers["id"], header["refire_count"]) == (firing.fire_instance_id, 1)
    refired = Firing(**{**firing.__dict__, "refire_count": 1})
    assert deliver(app, refired).state == "SUCCESS"
    assert [c.refire_count for c in contexts] == [0, 1]
    assert file_store.firing_states() == {}


@pytest.fixture
def completion_delay() -> float:
    """``quartz_worker_completion_delay`` of :func:`pg_app`, unless a test overrides it."""
    return 600.0


@pytest.fixture
def pg_app(
    pg_url: str, clock: FakeClock, completion_delay: float
) -> Iterator[tuple[Celery, SqlStore]]:
    """The hooks on PostgreSQL, where a success's end may be held for a batch: ends are held
    600 s unless a test sets ``completion_delay``."""
    store = store_at(pg_url, "t", clock=clock)
    store.create_tables()
    app = Celery("t", set_as_current=False)
    app.conf.quartz_store_url = pg_url
    app.conf.quartz_worker_completion_delay = completion_delay

    @app.task(name="tasks.report", shared=False)
    def report(*args: Any, **kwargs: Any) -> str:
        if kwargs.get("fail"):
            raise RuntimeError("the job failed")
        return "done"

    install(app)
    app.finalize()
    yield app, store
    _uninstall(app)
    store.dispose()


def test_on_postgresql_a_success_is_held_and_recorded_with_the_processs_other_ends(
    pg_app: tuple[Celery, SqlStore],
) -> None:
    app, store = pg_app
    firing = fired(store)
    assert deliver(app, firing).state == "SUCCESS"
    assert store.firing_states() == {firing.fire_instance_id: FiringState.EXECUTING}
    _runtime(app).record_waiting_ends()
    assert store.firing_states() == {}
    [trigger] = store.list_triggers().items
    assert trigger.last_outcome is not None and trigger.last_outcome.succeeded


def test_a_failure_and_a_job_data_write_back_are_never_held(
    pg_app: tuple[Celery, SqlStore],
) -> None:
    app, store = pg_app
    failing = fired(store, kwargs={"fail": True})
    assert deliver(app, failing).state == "FAILURE"
    assert store.firing_states() == {}
    store.remove_job(JobKey("report"))
    persisting = fired(store, persist_job_data=True)
    assert deliver(app, persisting).state == "SUCCESS"
    assert store.firing_states() == {}


@pytest.mark.parametrize("completion_delay", [0.0])
def test_with_a_zero_delay_a_success_is_never_held(
    pg_app: tuple[Celery, SqlStore], completion_delay: float
) -> None:
    app, store = pg_app
    plain = fired(store)
    assert deliver(app, plain).state == "SUCCESS"
    assert store.firing_states() == {}


def test_held_ends_are_recorded_after_the_delay_or_at_once_when_the_batch_is_full(
    file_store: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    firing = fired(file_store)
    assert file_store.start_execution(firing.fire_instance_id, "celery@w1")
    timed = worker_ends.CompletionBatch(lambda name: file_store, 0.05, file_store.clock)
    timed.add("t", firing.fire_instance_id)
    deadline = time.monotonic() + 5
    while file_store.firing_states() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert file_store.firing_states() == {}

    monkeypatch.setattr(worker_ends, "_BATCH_SIZE", 2)
    full = worker_ends.CompletionBatch(lambda name: file_store, 600, file_store.clock)
    ids = []
    for minute in (1, 2):
        file_store.clock.set(T0 + timedelta(minutes=minute))  # type: ignore[attr-defined]
        acquired = file_store.acquire_next_triggers(
            "sched-a", no_later_than=T0 + timedelta(minutes=minute), max_count=1, time_window=0
        )
        [next_firing] = file_store.fire("sched-a", acquired)
        assert file_store.start_execution(next_firing.fire_instance_id, "celery@w1")
        ids.append(next_firing.fire_instance_id)
    full.add("t", ids[0])
    assert set(file_store.firing_states()) == {ids[0], ids[1]}
    full.add("t", ids[1])  # the second fills the batch: both recorded before add returns
    assert file_store.firing_states() == {}


def test_held_ends_whose_recording_fails_are_kept_for_the_next_attempt(
    file_store: SqlStore,
) -> None:
    """Not only a store that does not answer (retried in place): any error leaves the ends
    held, and the next attempt records them."""
    firing = fired(file_store)
    assert file_store.start_execution(firing.fire_instance_id, "celery@w1")
    failures = [RuntimeError("the pool is exhausted")]

    def store(name: str) -> SqlStore:
        if failures:
            raise failures.pop()
        return file_store

    batch = worker_ends.CompletionBatch(store, 600, file_store.clock)
    batch.add("t", firing.fire_instance_id)
    with pytest.raises(RuntimeError, match="exhausted"):
        batch.flush()
    assert set(file_store.firing_states()) == {firing.fire_instance_id}
    batch.flush()
    assert file_store.firing_states() == {}
