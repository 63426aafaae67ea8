"""The run history's write side (docs/history.md): a history row per finished execution, written
in the transaction that ends the firing (PostgreSQL's batch of successes in its one statement),
a row per occurrence that did not run where that is decided, and each job's and trigger's run
status folded in with the row. Each path on SQLite, and on PostgreSQL where it differs."""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select

from celery_quartz.clock import FakeClock, to_millis
from celery_quartz.config import Settings
from celery_quartz.context import JobExecutionContext
from celery_quartz.errors import ConfigurationError
from celery_quartz.history import MAX_ERROR_MESSAGE_CHARS, MAX_METRICS_BYTES, MAX_SUMMARY_CHARS
from celery_quartz.keys import RECOVERING_JOBS_GROUP, JobKey, TriggerKey
from celery_quartz.limits import ExecutionLimits, ExecutionLimitScope
from celery_quartz.retry import RetryPolicy
from celery_quartz.routing import Router
from celery_quartz.store import MemoryStore, SqlStore
from celery_quartz.store.records import FinishedExecution, ProcessLoss
from celery_quartz.store.views import FiringOutcome
from celery_quartz.triggers import CronMisfireInstruction, SimpleMisfireInstruction
from tests.unit.builders import A, B, acquire, add, cron, fire_one, one_shot, repeating
from tests.unit.conftest import T0, at

W1 = "celery@w1"


def history(db: SqlStore) -> list[Any]:
    h = db.tables.history
    with db.transaction() as conn:
        return list(conn.execute(select(h).order_by(h.c.history_id)).all())


def results(db: SqlStore) -> list[tuple[str, str, str]]:
    return [(r.result, r.trigger_group, r.trigger_name) for r in history(db)]


def status(db: SqlStore, kind: str, name: str) -> Any:
    rs = db.tables.run_status
    with db.transaction() as conn:
        return conn.execute(
            select(rs).where(rs.c.kind == kind, rs.c.key_name == name)
        ).one_or_none()


def executing(db: SqlStore, name: str, worker: str = W1) -> str:
    fire_id = fire_one(db, name)
    db.mark_published(A, [fire_id])
    assert db.start_execution(fire_id, worker)
    return fire_id


def ms(seconds: float) -> int:
    return to_millis(at(seconds))


# -- runs ----------------------------------------------------------------------------------


def test_a_success_is_recorded_with_its_firing_occurrence_and_times(
    db: SqlStore, clock: FakeClock
) -> None:
    add(db, repeating("t1", at(0), 60), args=[1, "a"], kwargs={"k": 2})
    clock.set(at(0.5))
    fire_id = fire_one(db, "t1")
    db.mark_published(A, [fire_id])
    clock.set(at(2))
    assert db.start_execution(fire_id, W1)
    clock.set(at(5))
    assert db.complete_execution(fire_id, outcome=FiringOutcome(summary="ok", metrics='{"n":1}'))
    [row] = history(db)
    assert (row.result, row.trigger_name, row.job_name, row.fire_instance_id) == (
        "succeeded",
        "t1",
        "job",
        fire_id,
    )
    assert (row.task_name, row.task_id, row.worker_name, row.instance_name) == (
        "tasks.work",
        fire_id,
        W1,
        A,
    )
    assert (row.scheduled_time, row.published_time, row.started_time, row.finished_time) == (
        ms(0),
        ms(0.5),
        ms(2),
        ms(5),
    )
    assert (row.event_time, row.duration_ms, row.lateness_ms) == (ms(5), 3000, 2000)
    assert (row.retry_attempt, row.recovering, row.reason, row.unfolded) == (0, False, None, True)
    assert (row.summary, row.metrics) == ("ok", '{"n":1}')
    assert (json.loads(row.args), json.loads(row.kwargs)) == ([1, "a"], {"k": 2})


def test_a_batch_of_successes_is_recorded_with_what_each_reported(
    db: SqlStore, clock: FakeClock
) -> None:
    """On PostgreSQL the rows and the statuses are more CTEs of the batch's one statement."""
    add(db, repeating("t1", at(0), 60), repeating("t2", at(0), 60))
    first, second = executing(db, "t1"), executing(db, "t2")
    clock.set(at(3))
    ends = [
        FinishedExecution(second, ms(3), summary="two"),
        FinishedExecution(first, ms(2), metrics='{"rows":1200}'),
    ]
    assert db.complete_executions(ends) == 2
    rows = {r.trigger_name: r for r in history(db)}
    assert {n: (r.result, r.finished_time, r.summary, r.metrics) for n, r in rows.items()} == {
        "t1": ("succeeded", ms(2), None, '{"rows":1200}'),
        "t2": ("succeeded", ms(3), "two", None),
    }
    assert rows["t1"].task_name == "tasks.work" and rows["t1"].instance_name == A
    assert rows["t1"].duration_ms == ms(2) - rows["t1"].started_time
    job = status(db, "job", "job")
    assert (job.runs, job.failures, job.last_result, job.last_success_time) == (
        2,
        0,
        "succeeded",
        ms(3),
    )
    assert status(db, "trigger", "t1").runs == 1


def test_a_failure_without_a_retry_is_failed_with_its_exception_bounded(
    db: SqlStore, clock: FakeClock
) -> None:
    add(db, repeating("t1", at(0), 60))
    fire_id = executing(db, "t1")
    clock.set(at(1))
    outcome = FiringOutcome.of_exception(ValueError("x" * 5000))
    assert db.complete_execution(fire_id, failed=True, outcome=outcome)
    [row] = history(db)
    assert (row.result, row.error_type) == ("failed", "ValueError")
    assert row.error_message == "x" * MAX_ERROR_MESSAGE_CHARS
    trigger = status(db, "trigger", "t1")
    assert (trigger.runs, trigger.failures, trigger.consecutive_failures) == (1, 1, 1)
    assert trigger.last_success_time is None


def test_a_failure_whose_retry_is_scheduled_is_retried_and_the_retry_counts_for_the_trigger(
    db: SqlStore, clock: FakeClock
) -> None:
    trigger = repeating("t1", at(0), 3600)
    trigger.retry_policy = RetryPolicy.fixed(3, timedelta(seconds=30))
    add(db, trigger)
    fire_id = executing(db, "t1")
    clock.set(at(1))
    assert db.complete_execution(fire_id, failed=True, outcome=FiringOutcome(True, "E", "m"))
    clock.set(at(31))
    retry = executing(db, f"retry_{fire_id}")
    clock.set(at(32))
    assert db.complete_execution(retry)
    assert [(r.result, r.trigger_name, r.retry_attempt) for r in history(db)] == [
        ("retried", "t1", 0),
        ("succeeded", "t1", 1),
    ]
    last = history(db)[-1]
    assert (last.scheduled_time, last.lateness_ms) == (ms(0), 31000)
    assert status(db, "trigger", f"retry_{fire_id}") is None
    t1 = status(db, "trigger", "t1")
    assert (t1.runs, t1.failures, t1.consecutive_failures, t1.last_result) == (
        2,
        0,
        0,
        "succeeded",
    )


def test_a_dead_workers_execution_is_recovered_and_its_recovery_run_is_recovering(
    db: SqlStore, clock: FakeClock
) -> None:
    add(db, one_shot("t1", at(0)), requests_recovery=True)
    fire_id = executing(db, "t1")
    clock.set(at(20))
    result = db.recover_worker(W1, seen_checkin_millis=None)
    assert result is not None and result.recovered == 1
    recovery = executing(db, f"recover_{fire_id}", worker="celery@w2")
    clock.set(at(25))
    assert db.complete_execution(recovery)
    assert [(r.result, r.trigger_name, r.recovering, r.worker_name) for r in history(db)] == [
        ("recovered", "t1", False, W1),
        ("succeeded", "t1", True, "celery@w2"),
    ]
    assert history(db)[0].finished_time == ms(20)
    assert RECOVERING_JOBS_GROUP not in {r.trigger_group for r in history(db)}


def test_a_dead_workers_execution_without_recovery_is_interrupted_and_counts_as_a_failure(
    db: SqlStore,
) -> None:
    add(db, repeating("t1", at(0), 60))
    executing(db, "t1")
    db.recover_worker(W1, seen_checkin_millis=None)
    assert results(db) == [("interrupted", "DEFAULT", "t1")]
    job = status(db, "job", "job")
    assert (job.runs, job.failures, job.consecutive_failures) == (1, 1, 1)


@pytest.mark.parametrize(
    ("loss", "result"),
    [
        (ProcessLoss.TERMINATED, "cancelled"),
        (ProcessLoss.TIMED_OUT, "failed"),
        (ProcessLoss.CRASHED, "interrupted"),
    ],
)
def test_a_lost_pool_process_ends_its_firing_with_the_result_its_loss_means(
    store: MemoryStore, loss: ProcessLoss, result: str
) -> None:
    add(store, repeating("t1", at(0), 60))
    fire_id = executing(store, "t1")
    outcome = FiringOutcome(True, "Terminated", "signal 15")
    assert store.end_lost_execution(fire_id, W1, outcome, loss=loss) == result
    [row] = history(store)
    assert (row.result, row.error_type, row.error_message) == (result, "Terminated", "signal 15")


def test_a_firing_revoked_before_it_started_is_removed_and_cancelled_once(
    db: SqlStore, clock: FakeClock
) -> None:
    add(db, repeating("t1", at(0), 60), repeating("t2", at(0), 60))
    fire_id = fire_one(db, "t1")
    db.mark_published(A, [fire_id])
    clock.set(at(1))
    assert db.cancel_firing(fire_id, W1)
    assert not db.cancel_firing(fire_id, W1)
    started = executing(db, "t2")
    assert not db.cancel_firing(started, W1)  # a revoke without terminate leaves it running
    assert db.firing_states() == {started: "EXECUTING"}
    [row] = history(db)
    assert (row.result, row.fire_instance_id, row.started_time, row.duration_ms) == (
        "cancelled",
        fire_id,
        None,
        None,
    )
    view = db.trigger_view(TriggerKey("t1"))
    assert view is not None and view.last_outcome is None  # it never ran
    assert status(db, "trigger", "t1").runs == 1


def test_a_success_resets_the_failures_in_a_row_a_cancel_leaves_them(
    store: MemoryStore, clock: FakeClock
) -> None:
    add(store, repeating("t1", at(0), 1))
    ends = [
        lambda f: store.complete_execution(f, failed=True),
        lambda f: store.end_lost_execution(f, W1, FiringOutcome(True), loss=ProcessLoss.CRASHED),
        lambda f: store.end_lost_execution(f, W1, FiringOutcome(True), loss=ProcessLoss.TERMINATED),
    ]
    for second, end in enumerate(ends):
        clock.set(at(second))
        end(executing(store, "t1"))
    job = status(store, "job", "job")
    assert (job.runs, job.failures, job.consecutive_failures, job.last_result) == (
        3,
        2,
        2,
        "cancelled",
    )
    clock.set(at(3))
    store.complete_execution(executing(store, "t1"))
    job = status(store, "job", "job")
    assert (job.runs, job.consecutive_failures, job.last_success_time, job.since_time) == (
        4,
        0,
        ms(3),
        ms(0),
    )


def test_arguments_over_their_bound_are_not_kept(store: MemoryStore) -> None:
    add(store, repeating("t1", at(0), 60), args=["x" * 5000])
    store.complete_execution(executing(store, "t1"))
    [row] = history(store)
    assert (row.args, row.kwargs) == (None, "{}")


def test_with_history_off_no_row_and_no_status_is_written(clock: FakeClock) -> None:
    store = MemoryStore(scheduler_name="unit", clock=clock, record_history=False)
    try:
        add(store, repeating("t1", at(0), 60), cron("c1", "0 * * * * ?"))
        store.complete_execution(executing(store, "t1"))
        clock.set(at(3600))
        store.handle_misfires(max_count=10, instance_name=B)
        assert history(store) == []
        assert status(store, "job", "job") is None
    finally:
        store.dispose()


@pytest.mark.integration
def test_with_history_off_postgresqls_batch_writes_no_row(pg_url: str, clock: FakeClock) -> None:
    from celery_quartz.store import open_store

    db = open_store(
        Settings(store_url=pg_url, scheduler_name="unit-off", history_retention=0), clock=clock
    )
    db.create_tables()
    try:
        add(db, repeating("t1", at(0), 60))
        fire_id = executing(db, "t1")
        assert db.complete_executions([FinishedExecution(fire_id, ms(1))]) == 1
        h = db.tables.history
        with db.transaction() as conn:
            assert conn.execute(select(h).where(h.c.sched_name == "unit-off")).all() == []
    finally:
        db.dispose()


# -- what did not run ------------------------------------------------------------------------


def test_a_misfire_is_recorded_with_the_instruction_applied_and_its_deciding_instance(
    db: SqlStore, clock: FakeClock
) -> None:
    add(db, cron("c1", "0 * * * * ?", misfire=CronMisfireInstruction.DO_NOTHING))
    clock.set(at(61))
    assert db.handle_misfires(max_count=10, instance_name=B) == (1, False)
    [row] = history(db)
    assert (row.result, row.trigger_name, row.job_name, row.instance_name) == (
        "misfired",
        "c1",
        "job",
        B,
    )
    assert (row.scheduled_time, row.event_time, row.fire_instance_id) == (ms(0), ms(61), None)
    assert "61.0s late" in row.reason and "DO_NOTHING" in row.reason
    assert status(db, "trigger", "c1") is None  # not a run


def test_a_trigger_held_back_by_its_full_group_is_recorded_once_as_held(
    store: MemoryStore, clock: FakeClock
) -> None:
    """Held past the misfire threshold: one row when its misfire instruction is applied, not
    one per claim that held it back."""
    held = cron("c1", "0 * * * * ?", misfire=CronMisfireInstruction.DO_NOTHING)
    held.execution_group = "g"
    add(store, held)
    router = Router(ExecutionLimits().for_group("g", 0, scope=ExecutionLimitScope.CLUSTER))
    for second in (0, 10, 30):
        clock.set(at(second))
        claim = store.claim(
            A, no_later_than=at(second + 1), max_count=10, time_window=0.0, router=router
        )
        assert claim.firings == []
    assert history(store) == []
    clock.set(at(61))
    store.handle_misfires(max_count=10, instance_name=A, router=router)
    [row] = history(store)
    assert (row.result, row.instance_name) == ("held", A)
    assert row.reason.startswith("held back by execution group 'g' at its execution limit")
    assert "DO_NOTHING" in row.reason


def test_a_late_trigger_of_a_group_with_room_is_misfired_not_held(
    store: MemoryStore, clock: FakeClock
) -> None:
    late = cron("c1", "0 * * * * ?", misfire=CronMisfireInstruction.DO_NOTHING)
    late.execution_group = "g"
    add(store, late)
    router = Router(ExecutionLimits().for_group("g", 5, scope=ExecutionLimitScope.CLUSTER))
    clock.set(at(61))
    store.handle_misfires(max_count=10, instance_name=A, router=router)
    assert [r.result for r in history(store)] == ["misfired"]


def test_a_trigger_held_back_by_disallow_concurrent_is_held_when_its_job_is_released(
    store: MemoryStore, clock: FakeClock
) -> None:
    add(
        store,
        repeating("long", at(0), 3600),
        repeating(
            "other",
            at(1),
            3600,
            misfire=SimpleMisfireInstruction.RESCHEDULE_NEXT_WITH_REMAINING_COUNT,
        ),
        disallow_concurrent=True,
    )
    fire_id = executing(store, "long")
    clock.set(at(120))
    assert store.complete_execution(fire_id)
    rows = history(store)
    assert [(r.result, r.trigger_name) for r in rows] == [("succeeded", "long"), ("held", "other")]
    assert "disallow_concurrent: a firing of job DEFAULT.job was running" in rows[1].reason
    assert (rows[1].instance_name, rows[1].scheduled_time) == (W1, ms(1))


def test_an_expired_firing_published_again_and_one_dropped_are_each_recorded(
    store: MemoryStore, clock: FakeClock
) -> None:
    add(store, cron("again", "0 0 * * * ?", misfire=CronMisfireInstruction.FIRE_ONCE_NOW))
    add(
        store,
        cron("drop", "0 0 * * * ?", misfire=CronMisfireInstruction.DO_NOTHING),
        job="other",
    )
    claimed = acquire(store, until=at(3600), window=3600)
    firings = store.fire(A, claimed)
    store.mark_published(A, [f.fire_instance_id for f in firings])
    clock.set(at(70))
    store.resolve_expired_firings(B, grace=8.5, max_count=20)
    rows = {r.trigger_name: r for r in history(store)}
    assert {n: r.result for n, r in rows.items()} == {"again": "expired", "drop": "expired"}
    assert "published again" in rows["again"].reason
    assert "dropped" in rows["drop"].reason
    assert rows["drop"].instance_name == B and rows["drop"].fire_instance_id is not None
    assert rows["drop"].task_name == "tasks.work"


# -- what a task reports ---------------------------------------------------------------------


def context() -> JobExecutionContext:
    return JobExecutionContext("unit", "f1", JobKey("job"), TriggerKey("t1"), T0, T0)


def test_a_report_within_its_bounds_is_kept_as_json() -> None:
    ctx = context()
    ctx.report(summary="1200 rows", metrics={"rows": 1200})
    assert (ctx.summary, json.loads(ctx.metrics or "")) == ("1200 rows", {"rows": 1200})


def test_a_report_over_its_bound_is_dropped_with_a_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ctx = context()
    with caplog.at_level(logging.WARNING, logger="celery_quartz.context"):
        ctx.report(summary="s" * (MAX_SUMMARY_CHARS + 1), metrics={"x": "y" * MAX_METRICS_BYTES})
    assert (ctx.summary, ctx.metrics) == (None, None)
    assert "summary reported" in caplog.text and "metrics reported" in caplog.text


def test_metrics_that_are_not_json_are_refused() -> None:
    with pytest.raises(TypeError, match="JSON"):
        context().report(metrics={"when": object()})


# -- the setting -----------------------------------------------------------------------------


def test_history_retention_takes_seconds_or_a_timedelta_and_zero_records_nothing() -> None:
    assert Settings(history_retention=timedelta(days=2)).history_retention == 172800.0
    assert Settings().records_history
    assert not Settings(history_retention=0).records_history
    with pytest.raises(ConfigurationError, match="quartz_history_retention"):
        Settings(history_retention=-1).validate()
