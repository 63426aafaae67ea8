"""Real processes die and nothing is lost: a scheduler killed holding claims, a worker killed
mid-job, a message no worker ever takes."""

from __future__ import annotations

import re
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import redis as redis_client
from sqlalchemy import create_engine, select

from celery_quartz import (
    CronTrigger,
    Job,
    JobKey,
    Quartz,
    SimpleMisfireInstruction,
    SimpleTrigger,
    TriggerKey,
)
from celery_quartz.clock import to_millis
from celery_quartz.store import FiringState, SqlStore
from tests.integration import ledger_app
from tests.integration.brokers import on_both_brokers
from tests.integration.processes import processes, wait_for

CHECKIN = {"CQ_CHECKIN_INTERVAL": "1", "CQ_CHECKIN_THRESHOLD": "1"}


def _setup(url: str) -> tuple[SqlStore, Quartz]:
    store = ledger_app.prepared_store(url)
    return store, Quartz(ledger_app.app, store=store)


def _rows(url: str, table: object) -> list:  # type: ignore[type-arg]
    engine = create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(select(table)).all()  # type: ignore[call-overload]
    engine.dispose()
    return rows


def _one_shot(name: str, at: datetime) -> SimpleTrigger:
    return SimpleTrigger(
        key=TriggerKey(name, "recovery"), start_at=at, repeat_count=0, repeat_interval=timedelta(0)
    )


def test_claims_of_a_killed_scheduler_fire_on_a_survivor_within_the_detection_window(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    store, quartz = _setup(pg_url)
    due = datetime.now(timezone.utc) + timedelta(seconds=6)
    quartz.schedule_jobs(
        [
            (Job(key=JobKey(f"j{i}", "recovery"), task="ledger.record"), [_one_shot(f"t{i}", due)])
            for i in range(5)
        ]
    )
    # A long idle wait: a scheduler claims triggers up to 10 s ahead, then waits for them.
    env = {
        "CQ_BROKER_URL": redis_url,
        "CQ_STORE_URL": pg_url,
        "CQ_LEDGER_URL": pg_url,
        "CQ_IDLE_WAIT": "10",
        **CHECKIN,
    }
    with processes(tmp_path, env) as procs:
        procs.worker("worker1")
        procs.beat("beat1")
        procs.beat("beat2")

        def claimed_by() -> set[str]:
            engine = store.engine
            f = store.tables.fired_triggers
            with engine.connect() as conn:
                return {
                    r.instance_name
                    for r in conn.execute(
                        select(f.c.instance_name).where(f.c.state == FiringState.ACQUIRED)
                    )
                }

        wait_for(lambda: len(claimed_by()) > 0, timeout=20, message="a scheduler to claim")
        [owner] = claimed_by()
        owner_pid = int(owner.split("-")[-2])
        victim = next(n for n, p in procs.procs.items() if p.pid == owner_pid)
        survivor = "beat2" if victim == "beat1" else "beat1"
        procs.kill(victim)
        wait_for(
            lambda: len(_rows(pg_url, ledger_app.ledger)) == 5,
            timeout=30,
            message="the five claimed triggers to run",
        )
        procs.assert_running(survivor, "worker1")
        assert "recovered scheduler instance" in procs.log(survivor)
    rows = _rows(pg_url, ledger_app.ledger)
    assert {r.fired_by for r in rows} != {owner}
    # Detection: at most two check-in intervals plus the threshold after the kill, and the kill
    # came before the fire time; allow 2 s for process scheduling on a loaded machine.
    lateness = [r.started - due.timestamp() for r in rows]
    assert max(lateness) < 3 + 2, lateness
    assert _rows(pg_url, ledger_app.duplicates) == []
    store.dispose()


@on_both_brokers
def test_a_killed_workers_recoverable_job_runs_again_marked_recovering_and_a_plain_one_does_not(
    tmp_path: Path, pg_url: str, broker_url: str
) -> None:
    store, quartz = _setup(pg_url)
    now = datetime.now(timezone.utc)
    quartz.schedule_jobs(
        [
            (
                Job(
                    key=JobKey("recoverable"),
                    task="ledger.record",
                    kwargs={"sleep": 8},
                    requests_recovery=True,
                ),
                [_one_shot("recoverable", now)],
            ),
            (
                Job(key=JobKey("plain"), task="ledger.record", kwargs={"sleep": 8}),
                [_one_shot("plain", now)],
            ),
        ]
    )
    env = {"CQ_BROKER_URL": broker_url, "CQ_STORE_URL": pg_url, "CQ_LEDGER_URL": pg_url, **CHECKIN}
    with processes(tmp_path, env) as procs:
        procs.worker("worker1", concurrency=2)
        procs.beat("beat1")
        wait_for(
            lambda: len(_rows(pg_url, ledger_app.ledger)) == 2,
            timeout=30,
            message="both jobs to start on worker1",
        )
        procs.kill("worker1")
        procs.worker("worker2", concurrency=2)
        wait_for(
            lambda: len(_rows(pg_url, ledger_app.recoveries)) == 1,
            timeout=30,
            message="the recoverable job to run again",
        )
        wait_for(lambda: not store.firing_states(), timeout=30, message="nothing left in flight")
        time.sleep(1)
        beat_log = procs.log("beat1")
    [recovered] = _rows(pg_url, ledger_app.recoveries)
    assert (recovered.trigger_name, recovered.worker.split("@")[0]) == ("recoverable", "worker2")
    assert "closed as interrupted" in beat_log and "plain" in beat_log
    assert re.search(r"recovery firing \S+ scheduled", beat_log)
    assert len(_rows(pg_url, ledger_app.ledger)) == 2  # the plain job did not run again
    # The history: the killed executions (recorded by the scheduler that recovered them), and
    # the recovery firing's run under the original trigger.
    history = ledger_app.history_rows(pg_url)
    assert sorted((r.trigger_name, r.result, r.recovering) for r in history) == [
        ("plain", "interrupted", False),
        ("recoverable", "recovered", False),
        ("recoverable", "succeeded", True),
    ]
    assert {r.worker_name.split("@")[0] for r in history if not r.recovering} == {"worker1"}
    assert ledger_app.run_status(pg_url, "job", "plain").consecutive_failures == 1
    recoverable = ledger_app.run_status(pg_url, "trigger", "recoverable")
    assert (recoverable.runs, recoverable.last_result) == (2, "succeeded")
    store.dispose()


@on_both_brokers
def test_a_message_no_worker_consumes_ends_as_a_misfire_with_no_fired_row_left(
    tmp_path: Path, pg_url: str, broker_url: str
) -> None:
    store, quartz = _setup(pg_url)
    nobody = {"queue": "nobody-consumes-this"}
    env = {
        "CQ_BROKER_URL": broker_url,
        "CQ_STORE_URL": pg_url,
        "CQ_LEDGER_URL": pg_url,
        "CQ_MISFIRE_THRESHOLD": "2",
        **CHECKIN,
    }
    with processes(tmp_path, env) as procs:
        procs.beat("beat1")
        # Due once the scheduler runs: a trigger due while it still starts up on a loaded
        # machine would misfire (threshold 2 s) before it ever fired.
        wait_for(
            lambda: len(store.check_ins(kind="scheduler")) == 1,
            timeout=60,
            message="the scheduler to check in",
        )
        now = datetime.now(timezone.utc)
        quartz.schedule_jobs(
            [
                # SmartPolicy of a one-shot simple trigger is FireNow: published again once,
                # then dropped when that message expires too.
                (
                    Job(key=JobKey("fire-now"), task="ledger.record", options=nobody),
                    [_one_shot("fire-now", now)],
                ),
                # RescheduleNextWithRemainingCount skips a missed occurrence: dropped at once.
                (
                    Job(key=JobKey("skipper"), task="ledger.record", options=nobody),
                    [
                        SimpleTrigger(
                            key=TriggerKey("skipper", "recovery"),
                            start_at=now,
                            repeat_count=1,
                            repeat_interval=timedelta(hours=1),
                            misfire_instruction=SimpleMisfireInstruction.RESCHEDULE_NEXT_WITH_REMAINING_COUNT,
                        )
                    ],
                ),
            ]
        )
        wait_for(lambda: len(store.firing_states()) == 2, timeout=20, message="both to fire")
        wait_for(
            lambda: not store.firing_states(),
            timeout=60,
            message="the unconsumed firings to be resolved",
        )
        log = procs.log("beat1")
    # No worker consumes its queue: warned about, but no evidence of a worker without the hooks,
    # so the trigger's instruction decides (once), then the second expiry.
    assert "checks in for queue 'nobody-consumes-this'" in log
    assert re.search(
        r"firing \S+ of trigger recovery\.fire-now was not started .*published again", log
    )
    assert re.search(
        r"fire-now \(scheduled \S+\) dropped: misfire: it expired again after being published "
        r"again",
        log,
    )
    assert re.search(
        r"skipper \(scheduled \S+\) dropped: misfire: no worker started it .* skips", log
    )
    assert store.count_rows()["fired_triggers"] == 0
    # Each expiry is in the history, decided by the scheduler.
    expired = ledger_app.history_rows(pg_url, result="expired")
    reasons = [r.reason for r in expired]
    assert sorted((r.trigger_name, "dropped" in r.reason) for r in expired) == [
        ("fire-now", False),
        ("fire-now", True),
        ("skipper", True),
    ], reasons
    assert all(r.instance_name and r.fire_instance_id for r in expired)
    assert ledger_app.run_status(pg_url, "job", "skipper") is None  # not a run
    # The one-shot is done; the skipper waits for its next (and last) occurrence.
    assert quartz.get_trigger(TriggerKey("fire-now", "recovery")) is None
    assert quartz.get_trigger_state(TriggerKey("skipper", "recovery")) == "WAITING"
    store.dispose()


@pytest.mark.slow
def test_a_killed_workers_disallow_concurrent_recovery_is_deferred_then_runs_once(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    store, quartz = _setup(pg_url)
    quartz.schedule_job(
        Job(
            key=JobKey("exclusive"),
            task="ledger.record",
            kwargs={"sleep": 20},
            requests_recovery=True,
            disallow_concurrent=True,
        ),
        _one_shot("exclusive", datetime.now(timezone.utc)),
    )
    # Check-in every 2 s, threshold 1 s: the deferral is 2 x 2 + 1 = 5 s from detection.
    env = ledger_app.environment(pg_url, redis_url, CHECKIN_INTERVAL="2", CHECKIN_THRESHOLD="1")
    with processes(tmp_path, env) as procs:
        procs.worker("worker1", concurrency=2)
        procs.beat("beat1")
        wait_for(
            lambda: len(_rows(pg_url, ledger_app.ledger)) == 1,
            timeout=30,
            message="the job to start on worker1",
        )
        procs.kill("worker1")
        killed = time.time()
        procs.worker("worker2", concurrency=2)
        wait_for(
            lambda: "deferred 5.0s" in procs.log("beat1"),
            timeout=30,
            message="the recovery to be deferred",
        )
        # Deferred: still in flight, not yet run again.
        assert [s for _, s in store.firing_states().items()] == [FiringState.EXECUTING]
        assert _rows(pg_url, ledger_app.recoveries) == []
        wait_for(
            lambda: len(_rows(pg_url, ledger_app.recoveries)) == 1,
            timeout=60,
            message="the deferred recovery to run",
        )
        time.sleep(4)  # time for a second recovery, were there one
        beat_log = procs.log("beat1")
    [recovered] = _rows(pg_url, ledger_app.recoveries)
    assert (recovered.trigger_name, recovered.worker.split("@")[0]) == ("exclusive", "worker2")
    # Detection needs the check-in to be older than interval + threshold (at least 1 s after the
    # kill, as the last check-in came at most 2 s before it); the deferral adds 5 s to that.
    assert recovered.started - killed >= 1 + 5 - 0.5, recovered.started - killed
    assert re.search(r"recovery firing \S+ scheduled", beat_log)
    assert beat_log.count("deferred 5.0s") == 1
    assert len(_rows(pg_url, ledger_app.ledger)) == 1
    assert _rows(pg_url, ledger_app.duplicates) == []
    wait_for(lambda: not store.firing_states(), timeout=60, message="the recovery to complete")
    store.dispose()


def test_a_prefetched_firing_lost_with_its_worker_runs_after_its_cron_trigger_ended(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    """Two cron triggers of two occurrences each, two seconds apart. worker1 (one process,
    prefetch one) is busy with another job and holds one first firing prefetched when it is
    killed; worker2 then runs the other firings, the last occurrences included, so both
    triggers complete and their last firings end while the prefetched one is still in flight.
    That one expires unstarted and is resolved by its completed trigger's instruction
    (SmartPolicy: published again once) and runs: no occurrence is lost for want of its trigger
    (the trigger used to be removed with its last firing, and the expired one dropped)."""
    store, quartz = _setup(pg_url)
    env = ledger_app.environment(
        pg_url, redis_url, MISFIRE_THRESHOLD="5", CHECKIN_INTERVAL="1", CHECKIN_THRESHOLD="1"
    )
    broker = redis_client.Redis.from_url(redis_url)
    with processes(tmp_path, env) as procs:
        procs.worker("worker1", concurrency=1)
        procs.beat("beat1")
        # Scheduled once both run: due during a slow start-up, they would misfire (5 s) first.
        wait_for(
            lambda: len(store.check_ins()) == 2, timeout=60, message="beat and worker check-ins"
        )
        # worker1's one process is taken by a long job first.
        quartz.schedule_job(
            Job(key=JobKey("blocker", "busy"), task="ledger.record", kwargs={"sleep": 60}),
            SimpleTrigger(
                key=TriggerKey("blocker", "busy"),
                start_at=datetime.now(timezone.utc),
                repeat_count=0,
                repeat_interval=timedelta(0),
            ),
        )
        wait_for(
            lambda: len(_rows(pg_url, ledger_app.ledger)) == 1,
            timeout=30,
            message="worker1 to start the long job",
        )
        start = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(seconds=2)
        start += timedelta(seconds=start.second % 2)  # an even second: "0/2" matches it
        triggers = [
            CronTrigger(
                key=TriggerKey(name, "ending"),
                expression="0/2 * * * * ?",
                start_at=start,
                end_at=start + timedelta(seconds=2),
            )
            for name in ("a", "b")
        ]
        quartz.schedule_jobs(
            [(Job(key=JobKey(t.key.name, "ending"), task="ledger.record"), [t]) for t in triggers]
        )
        due = {
            (t.key.name, to_millis(start + timedelta(seconds=s))) for t in triggers for s in (0, 2)
        }
        # One first firing is delivered to worker1 and held unacknowledged; the other waits.
        wait_for(lambda: broker.hlen("unacked") == 1, timeout=30, message="a prefetched message")
        procs.kill("worker1")
        procs.worker("worker2", concurrency=4)
        wait_for(
            lambda: len(_ending_rows(pg_url)) == len(due),
            timeout=90,
            message="every occurrence to start",
        )
        wait_for(lambda: not store.firing_states(), timeout=60, message="nothing in flight")
        time.sleep(2)
        beat_log = procs.log("beat1")
    broker.close()
    rows = _ending_rows(pg_url)
    assert {(r.trigger_name, r.scheduled_ms) for r in rows} == due
    assert len(rows) == len(due)
    assert _rows(pg_url, ledger_app.duplicates) == []
    # The prefetched firing expired unstarted, after its trigger's last firing had ended, and
    # was published again by that trigger's instruction.
    # (The other first firing, waiting in Redis, may have expired too before worker2 was up.)
    republished = re.findall(
        r"firing \S+ of trigger ending\.\w+ was not started by any worker .*published again",
        beat_log,
    )
    assert republished, beat_log[-4000:]
    assert "dropped" not in beat_log
    # Nothing stuck: the completed triggers and their jobs are gone once their firings ended.
    assert store.count_rows()["fired_triggers"] == 0
    for t in triggers:
        assert quartz.get_trigger(t.key) is None
    store.dispose()


def _ending_rows(url: str) -> list:  # type: ignore[type-arg]
    return [r for r in _rows(url, ledger_app.ledger) if r.trigger_group == "ending"]
