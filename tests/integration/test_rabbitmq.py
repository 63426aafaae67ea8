"""RabbitMQ's own queue kinds under the firing path (the suite's throwaway node): a quorum queue
(``x-queue-type: quorum``, which Celery detects and answers with per-consumer QoS), and message
priorities on a classic queue declared with ``x-max-priority``."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from amqp.exceptions import PreconditionFailed
from celery import Celery
from kombu import Connection

from celery_quartz import Job, JobKey, Quartz, SimpleTrigger, TriggerKey
from celery_quartz.clock import to_millis
from celery_quartz.publisher import Publisher
from celery_quartz.store import SqlStore
from tests.integration import ledger_app
from tests.integration.processes import processes, wait_for

GROUP = "rabbitmq"


def _app(broker_url: str, queue_arguments: dict[str, object]) -> Celery:
    """The ledger app's publishing side with the default queue declared as its workers do."""
    app = Celery("ledger_app", broker=broker_url, set_as_current=False)
    from kombu import Exchange, Queue

    app.conf.task_queues = [
        Queue("celery", Exchange("celery"), routing_key="celery", queue_arguments=queue_arguments)
    ]
    return app


def _started(url: str) -> list[tuple[str, int, float]]:
    return sorted(
        ((r.trigger_name, r.scheduled_ms, r.started) for r in ledger_app.ledger_rows(url)),
        key=lambda row: row[2],
    )


@pytest.mark.slow
def test_a_quorum_queue_carries_every_occurrence_once_under_per_consumer_qos(
    tmp_path: Path, pg_url: str, rabbitmq_url: str
) -> None:
    store = ledger_app.prepared_store(pg_url)
    start = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(seconds=6)
    trigger = SimpleTrigger(
        key=TriggerKey("every-second", GROUP),
        start_at=start,
        repeat_interval=timedelta(seconds=1),
        repeat_count=7,
    )
    Quartz(ledger_app.app, store=store).schedule_job(
        Job(key=JobKey("tick", GROUP), task="ledger.record"), trigger
    )
    quorum = {"x-queue-type": "quorum"}
    env = ledger_app.environment(
        pg_url, rabbitmq_url, TASK_QUEUE_ARGUMENTS=json.dumps(quorum), CHECKIN_THRESHOLD="2"
    )
    with processes(tmp_path, env) as procs:
        procs.worker("worker1", concurrency=2)
        procs.beat("beat1")
        wait_for(lambda: len(_started(pg_url)) >= 8, timeout=60, message="eight occurrences")
        wait_for(lambda: not store.firing_states(), timeout=30, message="nothing in flight")
        time.sleep(1.5)  # a ninth start, were there one
        procs.assert_running("worker1", "beat1")
        worker_log = procs.log("worker1")
    due = {("every-second", to_millis(start + timedelta(seconds=k))) for k in range(8)}
    assert {(name, scheduled) for name, scheduled, _ in _started(pg_url)} == due
    assert len(_started(pg_url)) == 8
    assert ledger_app.row_count(pg_url, ledger_app.duplicates) == 0
    # Celery saw the quorum queue and switched to per-consumer QoS (quorum queues refuse global).
    assert "Global QoS is disabled" in worker_log
    # The broker holds `celery` as a quorum queue: declaring it classic is refused.
    with Connection(rabbitmq_url) as conn, pytest.raises(PreconditionFailed, match="x-queue-type"):
        conn.default_channel.queue_declare("celery", durable=True, auto_delete=False, arguments={})
    store.dispose()


def test_a_higher_priority_firing_is_consumed_first_from_a_queue_with_max_priority(
    tmp_path: Path, pg_url: str, rabbitmq_url: str
) -> None:
    """Three firings published low, middle, high, before any worker runs; a worker of one
    process with a prefetch of one then takes them highest first (the job's Celery ``priority``
    option is the message's priority)."""
    store = ledger_app.prepared_store(pg_url)
    now = datetime.now(timezone.utc)
    levels = {"low": 1, "middle": 5, "high": 9}
    Quartz(ledger_app.app, store=store).schedule_jobs(
        [
            (
                Job(key=JobKey(name, GROUP), task="ledger.record", options={"priority": level}),
                [SimpleTrigger(key=TriggerKey(name, GROUP), start_at=now, repeat_count=0)],
            )
            for name, level in levels.items()
        ]
    )
    firings = store.fire(
        "by-hand",
        store.acquire_next_triggers(
            "by-hand", no_later_than=now + timedelta(seconds=1), max_count=10, time_window=0
        ),
    )
    by_name = {firing.trigger_key.name: firing for firing in firings}
    assert set(by_name) == set(levels)
    priority = {"x-max-priority": 10}
    publisher = Publisher(_app(rabbitmq_url, priority))
    for name in ("low", "middle", "high"):  # the order a FIFO queue would run them in
        publisher.publish([by_name[name]])
    env = ledger_app.environment(pg_url, rabbitmq_url, TASK_QUEUE_ARGUMENTS=json.dumps(priority))
    with processes(tmp_path, env) as procs:
        procs.worker("worker1", concurrency=1)
        wait_for(lambda: len(_started(pg_url)) == 3, timeout=60, message="all three to run")
        wait_for(lambda: not store.firing_states(), timeout=30, message="nothing in flight")
    assert [name for name, *_ in _started(pg_url)] == ["high", "middle", "low"]
    _assert_store_empty(store)


def _assert_store_empty(store: SqlStore) -> None:
    rows = store.count_rows()
    assert rows["triggers"] == rows["jobs"] == rows["fired_triggers"] == 0
    store.dispose()
