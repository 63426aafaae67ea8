"""Failed occurrences retried under their trigger's retry policy, with real PostgreSQL, Redis,
Celery worker and scheduler processes: at the policy's instants, to exhaustion, and through the
death of the scheduler that was to fire the retry."""

from __future__ import annotations

import itertools
import re
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, select

from celery_quartz import Job, JobKey, Quartz, RetryPolicy, SimpleTrigger, TriggerKey
from celery_quartz.keys import RETRYING_JOBS_GROUP
from celery_quartz.store import SqlStore
from tests.integration import ledger_app
from tests.integration.processes import processes, wait_for

#: How much later than its delay a retry may start: the scheduler's idle wait (0.5 s), the
#: broker, and two cores shared with other test runs.
LATENESS = 1.5


def _soon(seconds: float) -> datetime:
    """An instant ``seconds`` from now, to the millisecond (as the store keeps it)."""
    at = datetime.now(timezone.utc) + timedelta(seconds=seconds)
    return at.replace(microsecond=at.microsecond // 1000 * 1000)


def _setup(url: str) -> tuple[SqlStore, Quartz]:
    store = ledger_app.prepared_store(url)
    return store, Quartz(ledger_app.app, store=store)


def _env(pg_url: str, redis_url: str) -> dict[str, str]:
    return ledger_app.environment(
        pg_url, redis_url, IDLE_WAIT="0.5", CHECKIN_INTERVAL="1", CHECKIN_THRESHOLD="1"
    )


def _attempts(url: str, name: str) -> list[Any]:
    engine = create_engine(url)
    a = ledger_app.attempts
    with engine.connect() as conn:
        rows = conn.execute(select(a).where(a.c.trigger_name == name).order_by(a.c.started)).all()
    engine.dispose()
    return rows


def _settle(store: SqlStore, url: str, name: str, count: int, message: str) -> None:
    """Wait for ``count`` attempts of ``name`` to start, and for nothing to be left in flight."""
    wait_for(lambda: len(_attempts(url, name)) == count, timeout=60, message=message)
    wait_for(lambda: not store.firing_states(), timeout=20, message="nothing in flight")


def _flaky(name: str, failures: int, policy: RetryPolicy, start: datetime) -> tuple[Job, Any]:
    """A job failing its first ``failures`` attempts, on an hourly trigger (no next occurrence
    near enough to drop a retry)."""
    job = Job(key=JobKey(name, "retries"), task="ledger.flaky", kwargs={"failures": failures})
    trigger = SimpleTrigger(
        key=TriggerKey(name, "retries"),
        start_at=start,
        repeat_count=-1,
        repeat_interval=timedelta(hours=1),
        retry_policy=policy,
    )
    return job, [trigger]


def _retry_triggers(store: SqlStore) -> list[Any]:
    t = store.tables.triggers
    with store.engine.connect() as conn:
        return conn.execute(
            select(t.c.trigger_name, t.c.trigger_state).where(
                t.c.trigger_group == RETRYING_JOBS_GROUP
            )
        ).all()


def test_a_failing_job_is_retried_at_the_policys_instants_until_it_succeeds_or_runs_out(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    store, quartz = _setup(pg_url)
    start = _soon(3)
    quartz.schedule_jobs(
        [
            # Always fails: 1 s, 2 s, 4 s, then no more.
            _flaky("always", 99, RetryPolicy.exponential(3, 1, 2), start),
            # Fails twice, then succeeds on its second retry.
            _flaky("twice", 2, RetryPolicy.fixed(5, 1), start),
        ]
    )
    with processes(tmp_path, _env(pg_url, redis_url)) as procs:
        procs.worker("worker1", concurrency=2)
        procs.beat("beat1")
        _settle(store, pg_url, "always", 4, "the first attempt and three retries")
        time.sleep(3)  # long enough for a fourth retry (8 s) to be scheduled, were there one
        procs.assert_running("worker1", "beat1")
        # The worker records a failure and decides its retry, in one transaction.
        worker_log = procs.log("worker1")
    always = _attempts(pg_url, "always")
    assert [r.retry_attempt for r in always] == [0, 1, 2, 3]
    # Every attempt runs the same occurrence (context.scheduled_fire_time is the original's).
    assert {(r.trigger_group, r.scheduled_ms) for r in always} == {
        ("retries", int(start.timestamp() * 1000))
    }
    assert [r.firing_trigger_group for r in always] == ["retries"] + [RETRYING_JOBS_GROUP] * 3
    gaps = [later.started - earlier.started for earlier, later in itertools.pairwise(always)]
    for gap, delay in zip(gaps, [1, 2, 4], strict=True):
        assert delay - 0.05 <= gap <= delay + LATENESS, gaps
    assert gaps == sorted(gaps)
    assert "retries.always (scheduled" in worker_log
    assert "failed after 3 retries, all its policy allows" in worker_log

    twice = _attempts(pg_url, "twice")
    assert [r.retry_attempt for r in twice] == [0, 1, 2]
    # Neither retries nor running out of them take the trigger off its schedule.
    for name in ("always", "twice"):
        key = TriggerKey(name, "retries")
        assert quartz.get_trigger_state(key) == "WAITING"
        trigger = quartz.get_trigger(key)
        assert trigger is not None and trigger.next_fire_time == start + timedelta(hours=1)
        assert trigger.times_triggered == 1
    assert _retry_triggers(store) == []
    # The history, each attempt under the original trigger; the status counts the occurrence's
    # last failure once (a retried attempt is not a failure).
    history = ledger_app.history_rows(pg_url, trigger_group="retries")
    assert [(r.retry_attempt, r.result) for r in history if r.trigger_name == "always"] == [
        (0, "retried"),
        (1, "retried"),
        (2, "retried"),
        (3, "failed"),
    ]
    assert [(r.retry_attempt, r.result) for r in history if r.trigger_name == "twice"] == [
        (0, "retried"),
        (1, "retried"),
        (2, "succeeded"),
    ]
    assert {r.error_type for r in history if r.result != "succeeded"} == {"RuntimeError"}
    always = ledger_app.run_status(pg_url, "trigger", "always")
    assert (always.runs, always.failures, always.consecutive_failures) == (4, 1, 1)
    twice = ledger_app.run_status(pg_url, "trigger", "twice")
    assert (twice.runs, twice.failures, twice.last_result) == (3, 0, "succeeded")
    store.dispose()


def test_a_retry_survives_the_death_of_the_scheduler_that_was_to_fire_it(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    store, quartz = _setup(pg_url)
    start = _soon(2)
    quartz.schedule_jobs([_flaky("orphan", 1, RetryPolicy.fixed(3, 6), start)])
    with processes(tmp_path, _env(pg_url, redis_url)) as procs:
        procs.worker("worker1", concurrency=2)
        procs.beat("beat1")
        wait_for(
            lambda: len(_retry_triggers(store)) == 1,
            timeout=30,
            message="the failure to schedule its retry",
        )
        procs.kill("beat1")
        assert len(_attempts(pg_url, "orphan")) == 1
        procs.beat("beat2")
        _settle(store, pg_url, "orphan", 2, "the retry to run on the new scheduler")
        time.sleep(2)
        procs.assert_running("worker1", "beat2")
        worker_log = procs.log("worker1")
    first, retry = _attempts(pg_url, "orphan")
    assert (first.retry_attempt, retry.retry_attempt) == (0, 1)
    assert retry.fired_by != first.fired_by  # beat2 fired it; beat1 was dead
    assert retry.scheduled_ms == first.scheduled_ms
    assert 6 - 0.05 <= retry.started - first.started <= 6 + LATENESS + 2  # + detection, if claimed
    assert re.search(r"retry 1 of 3 scheduled at \S+ \(RETRYING_JOBS\.retry_", worker_log)
    assert _retry_triggers(store) == []
    store.dispose()


def test_an_explicit_policy_retries_at_its_listed_delays_and_the_last_one_repeats(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    store, quartz = _setup(pg_url)
    start = _soon(3)
    # 1 s, then 2 s, and 2 s again: three retries, then no more.
    policy = RetryPolicy.explicit(1, 2, max_attempts=3)
    quartz.schedule_jobs([_flaky("explicit", 99, policy, start)])
    assert quartz.get_trigger(TriggerKey("explicit", "retries")).retry_policy == policy  # type: ignore[union-attr]
    with processes(tmp_path, _env(pg_url, redis_url)) as procs:
        procs.worker("worker1", concurrency=2)
        procs.beat("beat1")
        _settle(store, pg_url, "explicit", 4, "the first attempt and three retries")
        time.sleep(3)  # long enough for a fourth retry (2 s), were there one
        procs.assert_running("worker1", "beat1")
        worker_log = procs.log("worker1")
    rows = _attempts(pg_url, "explicit")
    assert [r.retry_attempt for r in rows] == [0, 1, 2, 3]
    assert {r.scheduled_ms for r in rows} == {int(start.timestamp() * 1000)}
    gaps = [later.started - earlier.started for earlier, later in itertools.pairwise(rows)]
    for gap, delay in zip(gaps, [1, 2, 2], strict=True):
        assert delay - 0.05 <= gap <= delay + LATENESS, gaps
    assert "failed after 3 retries, all its policy allows" in worker_log
    assert _retry_triggers(store) == []
    store.dispose()


def test_policies_are_inherited_from_the_job_and_the_default_and_exhaustion_pauses(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    """Three always-failing jobs on triggers with no policy of their own: one whose job has a
    policy (one retry), one whose job says none (the default stops there), one taking the
    scheduler's default (two retries). Running out of retries pauses each trigger
    (``quartz_pause_when_retries_exhausted``), the failure's message as the reason; a trigger
    that says otherwise keeps its schedule."""
    store, quartz = _setup(pg_url)
    start = _soon(3)
    jobs = []
    for name, job_policy in (
        ("from_job", RetryPolicy.fixed(1, 1)),
        ("job_says_none", RetryPolicy.none()),
        ("from_default", None),
        ("keeps_going", None),
    ):
        job, [trigger] = _flaky(name, 99, RetryPolicy.none(), start)
        trigger.retry_policy = None
        trigger.pause_when_retries_exhausted = False if name == "keeps_going" else None
        jobs.append((replace(job, retry_policy=job_policy), [trigger]))
    quartz.schedule_jobs(jobs)
    env = _env(pg_url, redis_url)
    env |= ledger_app.environment(
        pg_url, redis_url, DEFAULT_RETRY_POLICY="f:2:1000", PAUSE_WHEN_RETRIES_EXHAUSTED="1"
    )
    with processes(tmp_path, env) as procs:
        procs.worker("worker1", concurrency=2)
        procs.beat("beat1")
        for name, count in (("from_job", 2), ("job_says_none", 1), ("from_default", 3)):
            _settle(store, pg_url, name, count, f"{name}: {count} attempts")
        _settle(store, pg_url, "keeps_going", 3, "keeps_going: 3 attempts")
        wait_for(
            lambda: quartz.get_trigger_state(TriggerKey("from_default", "retries")) == "PAUSED",
            timeout=20,
            message="from_default paused",
        )
        time.sleep(2)  # long enough for one more retry (1 s), were there one
        procs.assert_running("worker1", "beat1")
    for name, retries in (
        ("from_job", [0, 1]),
        ("job_says_none", [0]),
        ("from_default", [0, 1, 2]),
        ("keeps_going", [0, 1, 2]),
    ):
        assert [r.retry_attempt for r in _attempts(pg_url, name)] == retries, name
    for name, last_attempt in (("from_job", 1), ("job_says_none", 0), ("from_default", 2)):
        key = TriggerKey(name, "retries")
        assert quartz.get_trigger_state(key) == "PAUSED", name
        view = store.trigger_view(key)
        assert view is not None and view.pause is not None
        # The reason is the last failure's message.
        assert view.pause.reason == f"ledger.flaky: attempt {last_attempt} fails on purpose"
        assert view.pause.requested_by == "celery-quartz:retries-exhausted"
    assert quartz.get_trigger_state(TriggerKey("keeps_going", "retries")) == "WAITING"
    paused = [
        e.target
        for e in quartz.audit(principal="celery-quartz:retries-exhausted").items
        if e.action == "pause_trigger"
    ]
    assert sorted(paused) == [f"retries.{n}" for n in ("from_default", "from_job", "job_says_none")]
    assert _retry_triggers(store) == []
    store.dispose()


def test_a_persist_job_data_jobs_data_carries_from_one_firing_to_the_next(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    store, quartz = _setup(pg_url)
    start = _soon(3)
    quartz.schedule_job(
        Job(
            key=JobKey("counter", "data"),
            task="ledger.count",
            data={"count": 10},
            persist_job_data=True,
            disallow_concurrent=True,
            durable=True,
        ),
        SimpleTrigger(
            key=TriggerKey("counter", "data"),
            start_at=start,
            repeat_interval=timedelta(seconds=1),
            repeat_count=4,
        ),
    )
    with processes(tmp_path, _env(pg_url, redis_url)) as procs:
        procs.worker("worker1", concurrency=2)
        procs.beat("beat1")
        wait_for(lambda: len(_counts(pg_url)) == 5, timeout=60, message="five firings")
        wait_for(lambda: not store.firing_states(), timeout=20, message="nothing in flight")
    rows = _counts(pg_url)
    assert [r.scheduled_ms for r in rows] == [
        int((start + timedelta(seconds=k)).timestamp() * 1000) for k in range(5)
    ]
    # Each firing found what the one before left: 10, 11, ... and the job keeps the last.
    assert [r.count for r in rows] == [10, 11, 12, 13, 14]
    job = quartz.get_job(JobKey("counter", "data"))
    assert job is not None and dict(job.data) == {"count": 15}
    store.dispose()


def _counts(url: str) -> list[Any]:
    engine = create_engine(url)
    c = ledger_app.counts
    with engine.connect() as conn:
        rows = conn.execute(select(c).order_by(c.c.scheduled_ms)).all()
    engine.dispose()
    return rows
