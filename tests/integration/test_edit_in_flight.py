"""An edit does not disturb a firing in flight (docs/steering.md#editing-in-place), with a real
beat and worker on PostgreSQL and Redis: a trigger's interval and priority are edited while one
of its firings executes; that firing runs to its end under the details it was fired with and is
recorded as succeeded, and the firings after it follow the new schedule and priority."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import select

from celery_quartz import Job, JobKey, Quartz, SimpleTrigger, TriggerKey
from celery_quartz.clock import to_millis
from celery_quartz.store import SqlStore
from tests.integration import ledger_app
from tests.integration.processes import processes, wait_for

KEY = TriggerKey("edited", "editing")
#: How long each run of the trigger's task lasts, in seconds.
RUNS_FOR = 3.0


def _runs(url: str) -> list[Any]:
    return sorted(
        (r for r in ledger_app.ledger_rows(url) if r.trigger_name == KEY.name),
        key=lambda r: r.scheduled_ms,
    )


def _fired(store: SqlStore) -> dict[str, dict[str, Any]]:
    """The trigger's firings in flight, by fire instance id, as stored."""
    f = store.tables.fired_triggers
    with store.engine.connect() as conn:
        rows = conn.execute(select(f).where(f.c.trigger_name == KEY.name)).all()
    return {row.fire_instance_id: dict(row._mapping) for row in rows}


def test_an_edit_leaves_a_firing_in_flight_to_its_end_and_later_firings_follow_it(
    pg_url: str, redis_url: str, tmp_path: Path
) -> None:
    store = ledger_app.prepared_store(pg_url)
    quartz = Quartz(ledger_app.app, store=store)
    start = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(seconds=1)
    quartz.schedule_job(
        Job(
            key=JobKey("edited", "editing"), task="ledger.overlapping", kwargs={"seconds": RUNS_FOR}
        ),
        # Every ten minutes: nothing but the first occurrence fires before the edit.
        SimpleTrigger(
            key=KEY, start_at=start, repeat_interval=timedelta(minutes=10), repeat_count=-1
        ),
    )
    # The priority of every firing seen in flight, by fire instance id.
    priorities: dict[str, int] = {}

    def runs_seen(count: int) -> bool:
        # The runs first: a run in the ledger is still in flight when its firing is read.
        runs = _runs(pg_url)
        priorities.update({i: row["priority"] for i, row in _fired(store).items()})
        return len(runs) >= count

    env = ledger_app.environment(pg_url, redis_url, IDLE_WAIT="0.2", CHECKIN_INTERVAL="1")
    with processes(tmp_path, env) as procs:
        procs.beat("beat1")
        procs.worker("w1", concurrency=2)
        wait_for(
            lambda: (
                [row["state"] for row in _fired(store).values()] == ["EXECUTING"]
                and len(_runs(pg_url)) == 1
            ),
            timeout=30,
            message="the first firing executing",
        )
        in_flight = _fired(store)
        edited_at = datetime.now(timezone.utc)
        quartz.update_trigger(KEY, interval=2, priority=8)
        # The firing in flight is left as it was fired: its row, its state, its priority.
        assert _fired(store) == in_flight
        [(first_id, first)] = in_flight.items()
        assert (first["priority"], first["sched_time"]) == (5, to_millis(start))
        wait_for(lambda: runs_seen(3), timeout=30, message="two runs after the edit")
        quartz.pause_trigger(KEY)
        wait_for(
            lambda: runs_seen(0) and not _fired(store), timeout=30, message="the last run's end"
        )
        procs.assert_running("beat1", "w1")
        # Nothing runs any more: the worker's warm shutdown (seconds) would wait for nothing.
        procs.kill("w1")
    first_run, *later = _runs(pg_url)
    # The first firing ran its whole length, to its end, and is recorded as succeeded.
    assert first_run.fire_instance_id == first_id
    assert first_run.scheduled_ms == to_millis(start)
    assert first_run.ended is not None and first_run.ended - first_run.started >= RUNS_FOR
    assert first_run.started < edited_at.timestamp() < first_run.ended
    [history] = ledger_app.history_rows(pg_url, fire_instance_id=first_id)
    assert (history.result, history.scheduled_time) == ("succeeded", to_millis(start))
    # The later firings: on the new schedule (every 2 s from the trigger's start, from the
    # edit on), at the new priority, each succeeded.
    edit_ms = to_millis(edited_at)
    for run in later:
        offset = run.scheduled_ms - to_millis(start)
        assert offset % 2000 == 0 and run.scheduled_ms >= edit_ms, (run, edit_ms)
        assert priorities[run.fire_instance_id] == 8
    succeeded = ledger_app.history_rows(pg_url, trigger_name=KEY.name, result="succeeded")
    assert {r.fire_instance_id for r in succeeded} == {
        r.fire_instance_id for r in [first_run, *later]
    }
    store.dispose()
