"""Overlap policies with real beat and workers on PostgreSQL and Redis (docs/steering.md#overlap-
policy): a task that runs longer than its trigger's interval, under ``skip`` (two schedulers
racing each skip), ``buffer_one`` (through a pause and a resume) and ``cancel_previous`` (a prefork
run terminated on another worker; a threads run and a solo run cancelled cooperatively)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from itertools import pairwise
from pathlib import Path
from typing import Any

from celery_quartz import Job, JobKey, Quartz, SimpleTrigger, TriggerKey
from celery_quartz.clock import to_millis
from celery_quartz.store import SqlStore
from tests.integration import ledger_app
from tests.integration.processes import Processes, processes, wait_for

GROUP = "overlap"


def _schedule(store: SqlStore, name: str, policy: str, every: float, runs_for: float) -> Quartz:
    quartz = Quartz(ledger_app.app, store=store)
    quartz.schedule_job(
        Job(key=JobKey(name, GROUP), task="ledger.overlapping", kwargs={"seconds": runs_for}),
        SimpleTrigger(
            key=TriggerKey(name, GROUP),
            start_at=datetime.now(timezone.utc) + timedelta(seconds=2),
            repeat_interval=timedelta(seconds=every),
            repeat_count=-1,
            overlap_policy=policy,
        ),
    )
    return quartz


def _runs(url: str, name: str) -> list[Any]:
    return sorted(
        (r for r in ledger_app.ledger_rows(url) if r.trigger_name == name), key=lambda r: r.started
    )


def _stop_firing(quartz: Quartz, name: str) -> None:
    """Pause the trigger and wait for its firings in flight to end."""
    quartz.pause_trigger(TriggerKey(name, GROUP))
    wait_for(lambda: not quartz.store.firing_states(), timeout=30, message="the last run's end")


def _assert_never_overlapped(runs: list[Any]) -> None:
    for before, after in pairwise(runs):
        assert before.ended is not None and after.started >= before.ended, (before, after)


def _env(pg_url: str, redis_url: str) -> dict[str, str]:
    return ledger_app.environment(pg_url, redis_url, IDLE_WAIT="0.2", CHECKIN_INTERVAL="1")


def test_skip_drops_each_overlapping_occurrence_once_with_two_schedulers_racing(
    pg_url: str, redis_url: str, tmp_path: Path
) -> None:
    store = ledger_app.prepared_store(pg_url)
    quartz = _schedule(store, "skip", "skip", every=1, runs_for=2.5)
    with processes(tmp_path, _env(pg_url, redis_url)) as procs:
        procs.beat("beat1")
        procs.beat("beat2")
        procs.worker("w1", concurrency=2)
        wait_for(lambda: len(_runs(pg_url, "skip")) >= 3, timeout=60, message="three runs")
        _stop_firing(quartz, "skip")
        procs.assert_running("beat1", "beat2", "w1")
    runs = _runs(pg_url, "skip")
    _assert_never_overlapped(runs)
    skipped = ledger_app.history_rows(pg_url, trigger_name="skip", result="skipped")
    assert len(skipped) >= 2 * (len(runs) - 1)  # about two per 2.5 s run, every second
    times = [r.scheduled_time for r in skipped]
    assert len(times) == len(set(times)), "an occurrence was skipped twice"
    assert not set(times) & {r.scheduled_ms for r in runs}
    assert all(r.reason.startswith("overlap") and r.instance_name for r in skipped)
    # Not a misfire: nothing else was recorded as not run.
    assert not ledger_app.history_rows(pg_url, trigger_name="skip", result="misfired")


def test_buffer_one_fires_the_held_occurrence_when_the_run_ends_and_keeps_it_through_a_pause(
    pg_url: str, redis_url: str, tmp_path: Path
) -> None:
    store = ledger_app.prepared_store(pg_url)
    quartz = _schedule(store, "buffer", "buffer_one", every=1, runs_for=2.5)
    key = TriggerKey("buffer", GROUP)
    with processes(tmp_path, _env(pg_url, redis_url)) as procs:
        procs.beat("beat1")
        procs.worker("w1", concurrency=2)
        wait_for(lambda: quartz.get_trigger_state(key) == "BLOCKED", timeout=60, message="a hold")
        quartz.pause_trigger(key)
        assert quartz.get_trigger_state(key) == "PAUSED_BLOCKED"
        held = quartz.store.retrieve_trigger(key).next_fire_time  # type: ignore[union-attr]
        wait_for(lambda: quartz.get_trigger_state(key) == "PAUSED", timeout=30, message="release")
        assert quartz.store.retrieve_trigger(key).next_fire_time == held  # type: ignore[union-attr]
        assert held is not None
        quartz.resume_trigger(key)
        wait_for(
            lambda: to_millis(held) in {r.scheduled_ms for r in _runs(pg_url, "buffer")},
            timeout=30,
            message="the held occurrence's run",
        )
        wait_for(lambda: len(_runs(pg_url, "buffer")) >= 4, timeout=60, message="four runs")
        _stop_firing(quartz, "buffer")
        procs.assert_running("beat1", "w1")
    runs = _runs(pg_url, "buffer")
    _assert_never_overlapped(runs)
    resumed = next(i for i, r in enumerate(runs) if r.scheduled_ms == to_millis(held))
    # After the resume, each held occurrence fires as soon as the run before it ends.
    for before, after in pairwise(runs[resumed:]):
        assert after.started - before.ended < 3.0, (before, after)
    skipped = ledger_app.history_rows(pg_url, trigger_name="buffer", result="skipped")
    assert skipped and all(r.reason.startswith("overlap") for r in skipped)


def _cancelled(url: str, name: str) -> list[Any]:
    return ledger_app.history_rows(url, trigger_name=name, result="cancelled")


def _kill_workers(procs: Processes, *names: str) -> None:
    # A worker's warm shutdown would wait for its long run to end.
    for name in names:
        procs.kill(name)


def test_cancel_previous_terminates_the_run_on_another_prefork_worker(
    pg_url: str, redis_url: str, tmp_path: Path
) -> None:
    store = ledger_app.prepared_store(pg_url)
    quartz = _schedule(store, "cancel", "cancel_previous", every=4, runs_for=30)
    with processes(tmp_path, _env(pg_url, redis_url)) as procs:
        procs.beat("beat1")
        procs.worker("w1", concurrency=1)
        procs.worker("w2", concurrency=1)
        wait_for(lambda: _cancelled(pg_url, "cancel"), timeout=60, message="a cancelled run")
        wait_for(lambda: len(_runs(pg_url, "cancel")) >= 2, timeout=30, message="its successor")
        quartz.pause_trigger(TriggerKey("cancel", GROUP))
        procs.assert_running("beat1", "w1", "w2")
        _kill_workers(procs, "w1", "w2")
    first, second = _runs(pg_url, "cancel")[:2]
    (cancelled,) = _cancelled(pg_url, "cancel")[:1]
    assert cancelled.fire_instance_id == first.fire_instance_id
    assert first.ended is None  # terminated: the task never reached its end
    assert second.worker != first.worker
    assert second.started - first.started < 10


def test_cancel_previous_is_cooperative_on_a_threads_pool(
    pg_url: str, redis_url: str, tmp_path: Path
) -> None:
    store = ledger_app.prepared_store(pg_url)
    quartz = _schedule(store, "cooperative", "cancel_previous", every=4, runs_for=30)
    with processes(tmp_path, _env(pg_url, redis_url)) as procs:
        procs.beat("beat1")
        procs.worker("w1", concurrency=2, extra=["-P", "threads"])
        wait_for(lambda: _cancelled(pg_url, "cooperative"), timeout=60, message="a cancel")
        quartz.pause_trigger(TriggerKey("cooperative", GROUP))
        procs.assert_running("beat1", "w1")
        _kill_workers(procs, "w1")
    first = _runs(pg_url, "cooperative")[0]
    (cancelled,) = _cancelled(pg_url, "cooperative")[:1]
    assert cancelled.fire_instance_id == first.fire_instance_id
    # It saw current_context().cancelled and returned early, well before its 30 s.
    assert first.ended is not None and first.ended - first.started < 10


def test_cancel_previous_is_cooperative_on_a_solo_pool_through_the_stores_cancel_request(
    pg_url: str, redis_url: str, tmp_path: Path
) -> None:
    """A solo worker reads no remote-control message while its task runs: the run learns of
    the cancel from the store (the claim's cancel request, read about once a second), returns
    early, is recorded cancelled, and the new firing runs next."""
    store = ledger_app.prepared_store(pg_url)
    quartz = _schedule(store, "solo", "cancel_previous", every=4, runs_for=30)
    with processes(tmp_path, _env(pg_url, redis_url)) as procs:
        procs.beat("beat1")
        procs.worker("w1", concurrency=1, extra=["-P", "solo"])

        def run_cancelled() -> bool:
            started = {r.fire_instance_id for r in _runs(pg_url, "solo")}
            return any(r.fire_instance_id in started for r in _cancelled(pg_url, "solo"))

        wait_for(run_cancelled, timeout=25, message="a run cancelled while it ran")
        wait_for(lambda: len(_runs(pg_url, "solo")) >= 2, timeout=20, message="its successor")
        quartz.pause_trigger(TriggerKey("solo", GROUP))
        procs.assert_running("beat1", "w1")
        _kill_workers(procs, "w1")
    first, second = _runs(pg_url, "solo")[:2]
    (cancelled,) = _cancelled(pg_url, "solo")[:1]
    assert cancelled.fire_instance_id == first.fire_instance_id
    # It saw current_context().cancelled within about a second of the next firing (4 s after
    # it), returned early, well before its 30 s, and the next firing ran after it.
    assert first.ended is not None and first.ended - first.started < 8
    assert second.started >= first.ended


def test_cancel_previous_revokes_a_firing_still_in_the_broker_before_it_starts(
    pg_url: str, redis_url: str, tmp_path: Path
) -> None:
    """One worker of concurrency 1 is busy with another job's run (acked at its end, so it
    takes no other message meanwhile): the trigger's first firing waits in the broker, the next
    occurrence revokes it, and the worker discards it unstarted when it is free."""
    store = ledger_app.prepared_store(pg_url)
    quartz = Quartz(ledger_app.app, store=store)
    now = datetime.now(timezone.utc)
    quartz.schedule_job(
        Job(key=JobKey("blocker", GROUP), task="ledger.overlapping", kwargs={"seconds": 8}),
        SimpleTrigger(key=TriggerKey("blocker", GROUP), start_at=now + timedelta(seconds=2)),
    )
    _schedule(store, "queued", "cancel_previous", every=3, runs_for=30)
    with processes(tmp_path, _env(pg_url, redis_url)) as procs:
        procs.beat("beat1")
        procs.worker("w1", concurrency=1)

        def discarded() -> set[str]:
            started = {r.fire_instance_id for r in ledger_app.ledger_rows(pg_url)}
            return {r.fire_instance_id for r in _cancelled(pg_url, "queued")} - started

        wait_for(discarded, timeout=60, message="a firing revoked in the broker")
        quartz.pause_trigger(TriggerKey("queued", GROUP))
        procs.assert_running("beat1", "w1")
        _kill_workers(procs, "w1")
    first = min(
        ledger_app.history_rows(pg_url, trigger_name="queued"), key=lambda r: r.scheduled_time
    )
    assert first.result == "cancelled"
    assert first.fire_instance_id not in {r.fire_instance_id for r in _runs(pg_url, "queued")}
