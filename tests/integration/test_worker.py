"""The worker side on a real worker: one execution start per firing, and completion."""

from __future__ import annotations

import os
import signal
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from sqlalchemy import create_engine, func, select

from celery_quartz import Job, JobKey, Quartz, SimpleTrigger, TriggerKey
from celery_quartz.publisher import Publisher
from celery_quartz.retry import RetryPolicy
from celery_quartz.store import SqlStore
from celery_quartz.triggers.simple import REPEAT_INDEFINITELY
from tests.integration import ledger_app
from tests.integration.processes import processes, wait_for


def _ledger_counts(url: str) -> tuple[int, int]:
    engine = create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(select(func.count()).select_from(ledger_app.ledger)).scalar_one()
        dups = conn.execute(select(func.count()).select_from(ledger_app.duplicates)).scalar_one()
    engine.dispose()
    return rows, dups


def test_the_same_firing_published_twice_starts_once(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    store = ledger_app.prepared_store(pg_url)
    now = datetime.now(timezone.utc)
    Quartz(ledger_app.app, store=store).schedule_job(
        Job(key=JobKey("once"), task="ledger.record", kwargs={"sleep": 1.0}),
        SimpleTrigger(
            key=TriggerKey("once"), start_at=now, repeat_count=0, repeat_interval=timedelta(0)
        ),
    )
    acquired = store.acquire_next_triggers(
        "by-hand",
        no_later_than=now + timedelta(seconds=1),
        max_count=10,
        time_window=0,
    )
    firings = store.fire("by-hand", acquired)
    assert len(firings) == 1

    publisher = Publisher(Celery("ledger_app", broker=redis_url, set_as_current=False))
    env = {"CQ_BROKER_URL": redis_url, "CQ_STORE_URL": pg_url, "CQ_LEDGER_URL": pg_url}
    with processes(tmp_path, env) as procs:
        publisher.publish(firings)
        publisher.publish(firings)
        procs.worker("worker1", concurrency=2)
        wait_for(lambda: not store.firing_states(), timeout=30, message="the firing to complete")
        # The second delivery is refused at start; give it time to arrive and be refused.
        wait_for(
            lambda: "not starting it again" in procs.log("worker1"),
            timeout=15,
            message="the duplicate delivery to be refused",
        )
        time.sleep(0.5)
    assert _ledger_counts(pg_url) == (1, 0)
    # The one-shot trigger completed: removed with its non-durable job.
    assert store.count_rows()["triggers"] == 0
    assert store.count_rows()["jobs"] == 0
    store.dispose()


def test_a_failing_task_completes_its_firing_and_is_not_run_again(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    store = ledger_app.prepared_store(pg_url)
    now = datetime.now(timezone.utc)
    # ledger.record with a non-numeric sleep raises TypeError after recording its start.
    Quartz(ledger_app.app, store=store).schedule_job(
        Job(key=JobKey("fails"), task="ledger.record", kwargs={"sleep": "not a number"}),
        SimpleTrigger(
            key=TriggerKey("fails"), start_at=now, repeat_count=0, repeat_interval=timedelta(0)
        ),
    )
    env = {"CQ_BROKER_URL": redis_url, "CQ_STORE_URL": pg_url, "CQ_LEDGER_URL": pg_url}
    with processes(tmp_path, env) as procs:
        procs.worker("worker1", concurrency=2)
        procs.beat("beat1")
        wait_for(lambda: _ledger_counts(pg_url)[0] == 1, timeout=30, message="the task to start")
        wait_for(lambda: not store.firing_states(), timeout=30, message="the firing to complete")
        time.sleep(2)
        assert "TypeError" in procs.log("worker1")
    assert _ledger_counts(pg_url) == (1, 0)
    store.dispose()


def _attempts(url: str) -> list[Any]:
    engine = create_engine(url)
    a = ledger_app.attempts
    with engine.connect() as conn:
        rows = conn.execute(select(a).order_by(a.c.started)).all()
    engine.dispose()
    return rows


@pytest.mark.parametrize(
    ("task", "kwargs"),
    [("ledger.celery_retry", {"retries": 2}), ("ledger.refire", {"refires": 2})],
    ids=["celery-self-retry", "refire-job"],
)
def test_a_celery_retry_and_a_refire_run_the_same_firing_again_on_a_real_worker(
    tmp_path: Path, pg_url: str, redis_url: str, task: str, kwargs: dict[str, int]
) -> None:
    store = ledger_app.prepared_store(pg_url)
    quartz = Quartz(ledger_app.app, store=store)
    quartz.schedule_job(
        Job(key=JobKey("again"), task=task, kwargs=kwargs),
        SimpleTrigger(
            key=TriggerKey("again"),
            start_at=datetime.now(timezone.utc),
            repeat_count=0,
            repeat_interval=timedelta(0),
        ),
    )
    env = ledger_app.environment(pg_url, redis_url)
    with processes(tmp_path, env) as procs:
        procs.worker("worker1", concurrency=2)
        procs.beat("beat1")
        wait_for(lambda: len(_attempts(pg_url)) == 3, timeout=60, message="three runs")
        wait_for(lambda: not store.firing_states(), timeout=30, message="the firing to complete")
        time.sleep(2)  # time for a fourth run, were there one
    rows = _attempts(pg_url)
    # One firing, run three times: its fire instance id throughout, its count going up.
    assert [r.retry_attempt for r in rows] == [0, 1, 2]
    assert len({r.fire_instance_id for r in rows}) == 1
    assert {r.firing_trigger_group for r in rows} == {"DEFAULT"}
    # The one-shot trigger completed once, at the end: removed with its job.
    assert quartz.get_trigger(TriggerKey("again")) is None
    assert quartz.get_job(JobKey("again")) is None
    store.dispose()


def _fire_by_hand(store: SqlStore, redis_url: str, count: int) -> None:
    """Fire every due trigger of the store and publish the firings, as a scheduler would."""
    now = datetime.now(timezone.utc)
    acquired = store.acquire_next_triggers(
        "by-hand", no_later_than=now + timedelta(seconds=1), max_count=100, time_window=0
    )
    firings = store.fire("by-hand", acquired)
    assert len(firings) == count
    Publisher(Celery("ledger_app", broker=redis_url, set_as_current=False)).publish(firings)


def _last_outcomes(store: SqlStore) -> dict[str, tuple[str | None, int | None]]:
    t = store.tables.triggers
    with store.transaction() as conn:
        rows = conn.execute(select(t.c.trigger_name, t.c.last_outcome, t.c.last_finished_time))
        return {r.trigger_name: (r.last_outcome, r.last_finished_time) for r in rows}


@pytest.mark.parametrize("pool", ["prefork", "threads"])
def test_ends_held_for_a_batch_are_recorded_when_the_worker_stops(
    tmp_path: Path, pg_url: str, redis_url: str, pool: str
) -> None:
    """A worker process holds successful ends to record them together, for at most
    ``quartz_worker_completion_delay``; a warm shutdown records what it still holds (a prefork
    pool process when it exits, a threads pool's worker when it stops), each with its own
    finish time. The ends of a ``disallow_concurrent`` job and of a job that requests recovery
    are never held."""
    store = ledger_app.prepared_store(pg_url)
    now = datetime.now(timezone.utc)
    quartz = Quartz(ledger_app.app, store=store)
    plain = [f"plain{i}" for i in range(4)]
    kinds = {
        **{name: {} for name in plain},
        "nonconcurrent": {"disallow_concurrent": True},
        "recoverable": {"requests_recovery": True},
    }
    for name, flags in kinds.items():
        quartz.schedule_job(
            Job(key=JobKey(name), task="ledger.record", **flags),
            SimpleTrigger(
                key=TriggerKey(name),
                start_at=now,
                repeat_count=REPEAT_INDEFINITELY,
                repeat_interval=timedelta(hours=1),
            ),
        )
    env = {
        "CQ_BROKER_URL": redis_url,
        "CQ_STORE_URL": pg_url,
        "CQ_LEDGER_URL": pg_url,
        "CQ_COMPLETION_DELAY": "600",
    }
    with processes(tmp_path, env) as procs:
        procs.worker("worker1", concurrency=2, extra=["-P", pool])
        _fire_by_hand(store, redis_url, len(kinds))
        wait_for(lambda: _ledger_counts(pg_url)[0] == len(kinds), 30, message="every start")
        # Not held: released and recorded at once.
        wait_for(
            lambda: (
                set(store.firing_states().values()) == {"EXECUTING"}
                and len(store.firing_states()) == len(plain)
            ),
            timeout=15,
            message="the two that are never held to be recorded",
        )
        outcomes = _last_outcomes(store)
        assert outcomes["nonconcurrent"][0] == outcomes["recoverable"][0] == "SUCCEEDED"
        time.sleep(1)
        assert len(store.firing_states()) == len(plain), "held ends recorded before the delay"
        assert all(outcomes[name] == (None, None) for name in plain)
        stopping = int(time.time() * 1000)
        assert procs.stop("worker1") == 0
    assert store.firing_states() == {}
    outcomes = _last_outcomes(store)
    for name in plain:
        outcome, finished = outcomes[name]
        assert outcome == "SUCCEEDED"
        assert finished is not None and finished <= stopping, "the finish time is its own"
    assert _ledger_counts(pg_url) == (len(kinds), 0)
    store.dispose()


def test_held_ends_are_recorded_within_the_delay(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    """With the default delay (0.1 s) a held end is recorded soon after the task returns,
    with no more executions to carry it."""
    store = ledger_app.prepared_store(pg_url)
    now = datetime.now(timezone.utc)
    Quartz(ledger_app.app, store=store).schedule_job(
        Job(key=JobKey("one"), task="ledger.record"),
        SimpleTrigger(
            key=TriggerKey("one"),
            start_at=now,
            repeat_count=REPEAT_INDEFINITELY,
            repeat_interval=timedelta(hours=1),
        ),
    )
    env = {"CQ_BROKER_URL": redis_url, "CQ_STORE_URL": pg_url, "CQ_LEDGER_URL": pg_url}
    with processes(tmp_path, env) as procs:
        procs.worker("worker1", concurrency=2)
        _fire_by_hand(store, redis_url, 1)
        wait_for(lambda: _ledger_counts(pg_url)[0] == 1, 30, message="the start")
        wait_for(lambda: not store.firing_states(), timeout=5, message="the end recorded")
        assert _last_outcomes(store)["one"][0] == "SUCCEEDED"
    store.dispose()


def _schedule_hourly(
    store: SqlStore, name: str, *, retry_policy: RetryPolicy | None = None, **job: Any
) -> None:
    """A job ``name`` running ``ledger.record`` (``job`` its options), due now and every hour."""
    Quartz(ledger_app.app, store=store).schedule_job(
        Job(key=JobKey(name), task="ledger.record", **job),
        SimpleTrigger(
            key=TriggerKey(name),
            start_at=datetime.now(timezone.utc),
            repeat_count=REPEAT_INDEFINITELY,
            repeat_interval=timedelta(hours=1),
            retry_policy=retry_policy or RetryPolicy.NONE,
        ),
    )


def _pool_process_running(redis_url: str, fire_instance_id: str) -> int:
    """The pid of the pool process running the firing, as its worker reports it."""
    app = Celery("ledger_app", broker=redis_url, set_as_current=False)
    try:
        for _ in range(10):
            for tasks in (app.control.inspect(timeout=2).active() or {}).values():
                for task in tasks:
                    if task["id"] == fire_instance_id and task.get("worker_pid"):
                        return int(task["worker_pid"])
            time.sleep(0.2)
    finally:
        app.close()
    raise AssertionError(f"no worker reports firing {fire_instance_id} as active")


def test_a_firing_killed_at_its_hard_time_limit_is_ended_by_the_workers_main_process(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    """Celery kills a pool process whose task passes its hard ``time_limit``; the worker's main
    process records the firing as failed (so its ``disallow_concurrent`` job is released at
    once). Before, the SIGTERM Celery sends first went through the task as ``SystemExit`` and
    the pool process recorded a success; killed before it could, the firing stayed EXECUTING
    until the worker restarted."""
    store = ledger_app.prepared_store(pg_url)
    _schedule_hourly(
        store, "slow", kwargs={"sleep": 60}, options={"time_limit": 2}, disallow_concurrent=True
    )
    with processes(tmp_path, ledger_app.environment(pg_url, redis_url)) as procs:
        procs.worker("worker1", concurrency=2)
        _fire_by_hand(store, redis_url, 1)
        wait_for(lambda: _ledger_counts(pg_url)[0] == 1, 30, message="the start")
        assert store.get_trigger_state(TriggerKey("slow")) == "BLOCKED"
        wait_for(lambda: not store.firing_states(), timeout=20, message="the end recorded")
        procs.assert_running("worker1")
        assert "Hard time limit (2" in procs.log("worker1")
    view = store.trigger_view(TriggerKey("slow"))
    assert view is not None and view.last_outcome is not None
    assert (view.last_outcome.succeeded, view.last_outcome.error_type) == (
        False,
        "TimeLimitExceeded",
    )
    assert store.get_trigger_state(TriggerKey("slow")) == "WAITING"
    [row] = ledger_app.history_rows(pg_url)
    assert (row.result, row.error_type) == ("failed", "TimeLimitExceeded")
    store.dispose()


def test_a_pool_process_killed_mid_firing_gets_its_recovery_firing_on_a_live_worker(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    """A pool process killed while it runs a firing (SIGKILL, as the OOM killer sends) is lost
    to Celery (``WorkerLostError``); its worker lives on. The worker's main process resolves the
    firing as a dead worker's execution: the job requests recovery, so a recovery firing runs
    the occurrence again, on the same worker's new pool process."""
    store = ledger_app.prepared_store(pg_url)
    _schedule_hourly(store, "long", kwargs={"sleep": 60}, requests_recovery=True)
    with processes(tmp_path, ledger_app.environment(pg_url, redis_url)) as procs:
        procs.worker("worker1", concurrency=2)
        _fire_by_hand(store, redis_url, 1)
        wait_for(lambda: _ledger_counts(pg_url)[0] == 1, 30, message="the start")
        [fire_id] = store.firing_states()
        os.kill(_pool_process_running(redis_url, fire_id), signal.SIGKILL)
        wait_for(lambda: not store.firing_states(), timeout=20, message="the lost firing resolved")
        procs.assert_running("worker1")
        assert "WorkerLostError" in procs.log("worker1")
        _fire_by_hand(store, redis_url, 1)  # the recovery firing, due now
        wait_for(lambda: _recoveries(pg_url) == 1, timeout=30, message="the recovery firing to run")
        procs.kill("worker1")  # the recovery firing sleeps too
    view = store.trigger_view(TriggerKey("long"))
    assert view is not None and view.last_outcome is not None
    assert view.last_outcome.error_type == "WorkerLostError"
    assert _ledger_counts(pg_url) == (1, 0)
    [row] = ledger_app.history_rows(pg_url)  # the recovery firing was killed with its worker
    assert (row.result, row.error_type, row.trigger_name) == (
        "recovered",
        "WorkerLostError",
        "long",
    )
    store.dispose()


def _recoveries(url: str) -> int:
    engine = create_engine(url)
    with engine.connect() as conn:
        count = conn.execute(select(func.count()).select_from(ledger_app.recoveries)).scalar_one()
    engine.dispose()
    return int(count)


def test_a_firing_revoked_with_terminate_is_closed_as_cancelled(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    """``revoke(terminate=True)`` stops the pool process's task with SIGTERM: not a success,
    and not a failure to retry or a crash to recover; the worker's main process closes the
    firing as cancelled, whatever the job's retry policy and ``requests_recovery`` say."""
    store = ledger_app.prepared_store(pg_url)
    _schedule_hourly(
        store,
        "long",
        kwargs={"sleep": 60},
        requests_recovery=True,
        retry_policy=RetryPolicy.fixed(3, timedelta(seconds=1)),
    )
    with processes(tmp_path, ledger_app.environment(pg_url, redis_url)) as procs:
        procs.worker("worker1", concurrency=2)
        _fire_by_hand(store, redis_url, 1)
        wait_for(lambda: _ledger_counts(pg_url)[0] == 1, 30, message="the start")
        [fire_id] = store.firing_states()
        control = Celery("ledger_app", broker=redis_url, set_as_current=False)
        control.control.revoke(fire_id, terminate=True)
        control.close()
        wait_for(lambda: not store.firing_states(), timeout=20, message="the firing closed")
        time.sleep(2)  # a retry or a recovery firing would be stored by now
        procs.assert_running("worker1")
    view = store.trigger_view(TriggerKey("long"))
    assert view is not None and view.last_outcome is not None
    assert (view.last_outcome.succeeded, view.last_outcome.error_type) == (False, "Terminated")
    assert [t.key for t in store.get_triggers_of_job(JobKey("long"))] == [TriggerKey("long")]
    [row] = ledger_app.history_rows(pg_url)
    assert (row.result, row.error_type, row.fire_instance_id) == (
        "cancelled",
        "Terminated",
        fire_id,
    )
    store.dispose()


def test_a_firing_revoked_before_it_started_is_discarded_and_recorded_as_cancelled(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    """A revoke reaching the worker before the message does: Celery discards the message, and
    the worker's main process ends the firing, unstarted, as cancelled (rather than leaving it
    to expire and be published again under a task id the revoke does not name)."""
    store = ledger_app.prepared_store(pg_url)
    _schedule_hourly(store, "revoked", options={"queue": "later"})
    with processes(tmp_path, ledger_app.environment(pg_url, redis_url)) as procs:
        procs.worker("worker1", concurrency=1, queues="celery")
        control = Celery("ledger_app", broker=redis_url, set_as_current=False)
        try:
            wait_for(lambda: bool(control.control.ping(timeout=1)), 30, message="the worker")
            _fire_by_hand(store, redis_url, 1)
            [fire_id] = store.firing_states()
            control.control.revoke(fire_id)
            control.control.add_consumer("later", reply=True)
        finally:
            control.close()
        wait_for(lambda: not store.firing_states(), timeout=20, message="the firing cancelled")
        procs.assert_running("worker1")
    assert _ledger_counts(pg_url) == (0, 0)
    [row] = ledger_app.history_rows(pg_url)
    assert (row.result, row.fire_instance_id, row.started_time) == ("cancelled", fire_id, None)
    assert row.worker_name is None and row.instance_name == "by-hand"
    store.dispose()


def _pool_processes(redis_url: str) -> list[int]:
    """The pids of the worker's prefork pool processes, as ``celery inspect stats`` shows them."""
    app = Celery("ledger_app", broker=redis_url, set_as_current=False)
    try:
        [stats] = (app.control.inspect(timeout=2).stats() or {}).values()
    finally:
        app.close()
    return [int(pid) for pid in stats["pool"]["processes"]]


def test_successes_held_by_a_killed_pool_process_are_recorded_by_its_worker(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    """Pool processes killed on their own (the OOM killer) while they hold successes for a batch
    lose them; the worker's main process, seeing its pool processes replaced, records those
    firings as succeeded (Celery counts their messages as succeeded) instead of leaving them
    EXECUTING until the worker restarts."""
    store = ledger_app.prepared_store(pg_url)
    plain = [f"plain{i}" for i in range(4)]
    for name in plain:
        _schedule_hourly(store, name)
    env = ledger_app.environment(pg_url, redis_url, COMPLETION_DELAY="600")
    with processes(tmp_path, env) as procs:
        procs.worker("worker1", concurrency=2)
        _fire_by_hand(store, redis_url, len(plain))
        wait_for(lambda: _ledger_counts(pg_url)[0] == len(plain), 30, message="every start")
        time.sleep(1)
        # Held for the batch: still EXECUTING, their ends in the pool processes' memory.
        assert set(store.firing_states().values()) == {"EXECUTING"}
        assert len(store.firing_states()) == len(plain)
        for pid in _pool_processes(redis_url):
            os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not store.firing_states(), timeout=20, message="the ends recorded")
        procs.assert_running("worker1")
        assert "recorded as succeeded" in procs.log("worker1")
    outcomes = _last_outcomes(store)
    assert {outcomes[name][0] for name in plain} == {"SUCCEEDED"}
    assert _ledger_counts(pg_url) == (len(plain), 0)
    store.dispose()
