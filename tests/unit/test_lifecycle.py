"""The scheduler's lifecycle (CREATED, RUNNING, STANDBY, SHUTTING_DOWN, SHUTDOWN), the two
leadership callbacks, the clustering guard, inside beat and for a loop used directly."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from celery import Celery

from celery_quartz import SchedulerStatus
from celery_quartz.clock import FakeClock
from celery_quartz.config import Settings
from celery_quartz.errors import ConfigurationError, SchedulerStateError
from celery_quartz.leadership import SchedulerLeadership
from celery_quartz.loop import SchedulingLoop
from celery_quartz.publisher import Publisher
from celery_quartz.store import MemoryStore
from tests.unit.builders import A, add, one_shot, repeating, state
from tests.unit.conftest import at


def make_loop(
    store: MemoryStore,
    app: Celery,
    clock: FakeClock,
    *,
    explicitly_set: tuple = (),
    **changes: object,
) -> SchedulingLoop:
    values: dict[str, object] = {"scheduler_name": "unit", "idle_wait": 1.0}
    values.update(changes)
    settings = Settings(**values, explicitly_set=frozenset(explicitly_set))  # type: ignore[arg-type]
    return SchedulingLoop(store, Publisher(app), settings, clock, A)


# -- transitions ---------------------------------------------------------------------------------


def test_a_new_scheduler_is_created(store: MemoryStore, app: Celery, clock: FakeClock) -> None:
    assert make_loop(store, app, clock).status is SchedulerStatus.CREATED


def test_start_runs_the_scheduler(store: MemoryStore, app: Celery, clock: FakeClock) -> None:
    loop = make_loop(store, app, clock)
    loop.start()
    assert loop.status is SchedulerStatus.RUNNING


def test_start_is_idempotent_and_only_the_first_runs_start_up_recovery(
    store: MemoryStore, app: Celery, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = make_loop(store, app, clock)
    calls = []
    monkeypatch.setattr(loop.cluster, "refuse_mixed_modes", lambda: calls.append(1))
    loop.start()
    loop.start()
    loop.standby()
    loop.start()
    assert loop.status is SchedulerStatus.RUNNING
    assert calls == [1]


def test_standby_stops_acquiring(store: MemoryStore, app: Celery, clock: FakeClock) -> None:
    add(store, one_shot("t1", at(0)))
    loop = make_loop(store, app, clock)
    loop.start()
    loop.standby()
    loop.run_once()
    assert loop.status is SchedulerStatus.STANDBY
    assert state(store, "t1") == "WAITING"
    assert loop.fired_count == 0


def test_start_resumes_from_standby(store: MemoryStore, app: Celery, clock: FakeClock) -> None:
    add(store, one_shot("t1", at(0)))
    loop = make_loop(store, app, clock)
    loop.start()
    loop.standby()
    loop.run_once()
    loop.start()
    loop.run_once()
    assert loop.fired_count == 1


def test_standby_keeps_an_acquired_batch_and_fires_it(
    store: MemoryStore, app: Celery, clock: FakeClock
) -> None:
    add(store, one_shot("t1", at(0.5)))
    loop = make_loop(store, app, clock)
    loop.start()
    assert loop.run_once() == pytest.approx(0.5)  # acquired, waiting for the fire time
    loop.standby()
    assert state(store, "t1") == "ACQUIRED"
    clock.advance(0.5)
    loop.run_once()
    assert loop.fired_count == 1


def test_standby_does_not_stop_the_misfire_handler(
    store: MemoryStore, app: Celery, clock: FakeClock
) -> None:
    add(store, repeating("late", at(0), 10))
    loop = make_loop(store, app, clock)
    loop.start()
    loop.standby()
    clock.advance(600)  # ten minutes late: past the 60 s threshold
    loop.run_once()
    trigger = store.retrieve_trigger(one_shot("late", at(0)).key)
    assert trigger is not None and trigger.next_fire_time is not None
    assert trigger.next_fire_time >= at(600)
    assert loop.fired_count == 0


def test_a_never_started_scheduler_stands_down_to_created(
    store: MemoryStore, app: Celery, clock: FakeClock
) -> None:
    loop = make_loop(store, app, clock)
    loop.standby()
    assert loop.status is SchedulerStatus.CREATED


def test_shutdown_is_terminal(store: MemoryStore, app: Celery, clock: FakeClock) -> None:
    loop = make_loop(store, app, clock)
    loop.start()
    loop.shutdown()
    assert loop.status is SchedulerStatus.SHUTDOWN


def test_a_never_started_scheduler_shuts_down(
    store: MemoryStore, app: Celery, clock: FakeClock
) -> None:
    loop = make_loop(store, app, clock)
    loop.shutdown()
    assert loop.status is SchedulerStatus.SHUTDOWN


def test_start_after_shutdown_raises(store: MemoryStore, app: Celery, clock: FakeClock) -> None:
    loop = make_loop(store, app, clock)
    loop.start()
    loop.shutdown()
    with pytest.raises(SchedulerStateError, match="cannot be restarted after shutdown"):
        loop.start()


def test_standby_after_shutdown_raises(store: MemoryStore, app: Celery, clock: FakeClock) -> None:
    loop = make_loop(store, app, clock)
    loop.start()
    loop.shutdown()
    with pytest.raises(SchedulerStateError, match="has been shut down"):
        loop.standby()


def test_shutdown_releases_the_acquired_batch_standby_does_not(
    store: MemoryStore, app: Celery, clock: FakeClock
) -> None:
    add(store, one_shot("t1", at(0.5)))
    loop = make_loop(store, app, clock)
    loop.start()
    loop.run_once()
    loop.standby()
    assert state(store, "t1") == "ACQUIRED"
    loop.shutdown()
    assert state(store, "t1") == "WAITING"


def test_with_auto_start_off_a_step_does_nothing(
    store: MemoryStore, app: Celery, clock: FakeClock
) -> None:
    add(store, one_shot("t1", at(0)))
    loop = make_loop(store, app, clock, auto_start=False)
    assert loop.run_once() == 1.0
    assert loop.status is SchedulerStatus.CREATED
    assert state(store, "t1") == "WAITING"
    assert store.check_ins() == []  # inert: not even a check-in


def test_with_auto_start_on_the_first_step_starts(
    store: MemoryStore, app: Celery, clock: FakeClock
) -> None:
    loop = make_loop(store, app, clock)
    loop.run_once()
    assert loop.status is SchedulerStatus.RUNNING


def test_the_status_is_written_to_the_check_in_row(
    store: MemoryStore, app: Celery, clock: FakeClock
) -> None:
    loop = make_loop(store, app, clock, clustered=False)
    loop.start()
    loop.standby()
    s = store.tables.scheduler_state
    with store.transaction() as conn:
        assert conn.execute(s.select()).one().status == "STANDBY"


# -- the two callbacks ---------------------------------------------------------------------------


def test_started_leading_starts_and_stopped_leading_stands_down(
    store: MemoryStore, app: Celery, clock: FakeClock
) -> None:
    loop = make_loop(store, app, clock, auto_start=False, clustered=False)
    leadership = SchedulerLeadership(loop)
    leadership.on_started_leading()
    assert loop.status is SchedulerStatus.RUNNING
    leadership.on_stopped_leading()
    assert loop.status is SchedulerStatus.STANDBY
    leadership.on_started_leading()
    assert loop.status is SchedulerStatus.RUNNING


def test_losing_leadership_after_shutdown_is_ordinary(
    store: MemoryStore, app: Celery, clock: FakeClock
) -> None:
    loop = make_loop(store, app, clock, clustered=False)
    leadership = SchedulerLeadership(loop)
    leadership.on_started_leading()
    loop.shutdown()
    leadership.on_stopped_leading()  # does not raise
    assert loop.status is SchedulerStatus.SHUTDOWN


# -- the clustering guard ------------------------------------------------------------------------


def test_cluster_only_settings_with_clustering_off_are_refused_at_start(
    store: MemoryStore, app: Celery, clock: FakeClock
) -> None:
    loop = make_loop(
        store,
        app,
        clock,
        clustered=False,
        checkin_misfire_threshold=3.0,
        explicitly_set=("clustered", "checkin_misfire_threshold"),
    )
    with pytest.raises(ConfigurationError, match="quartz_checkin_misfire_threshold configure"):
        loop.start()
    assert loop.status is SchedulerStatus.CREATED


def test_an_election_with_clustering_on_is_refused_at_start(
    store: MemoryStore, app: Celery, clock: FakeClock
) -> None:
    loop = make_loop(
        store, app, clock, clustered=True, election="redis", explicitly_set=("election",)
    )
    with pytest.raises(ConfigurationError, match="quartz_clustered is True"):
        loop.start()


def test_the_guard_is_per_scheduler(store: MemoryStore, app: Celery, clock: FakeClock) -> None:
    clustered = make_loop(
        store,
        app,
        clock,
        checkin_misfire_threshold=3.0,
        explicitly_set=("checkin_misfire_threshold",),
    )
    sibling_store = MemoryStore(scheduler_name="solo", clock=clock)
    sibling = SchedulingLoop(
        sibling_store,
        Publisher(app),
        Settings(scheduler_name="solo", clustered=False, explicitly_set=frozenset({"clustered"})),
        clock,
        "solo-1",
    )
    clustered.start()
    sibling.start()
    assert (clustered.status, sibling.status) == (SchedulerStatus.RUNNING,) * 2
    sibling_store.dispose()


def test_settings_remember_which_keys_the_app_set(app: Celery) -> None:
    app.conf.quartz_clustered = False
    app.conf.quartz_checkin_misfire_threshold = 2.0
    settings = Settings.from_app(app)
    assert {"clustered", "checkin_misfire_threshold"} <= settings.explicitly_set
    assert "idle_wait" not in settings.explicitly_set


def test_a_generated_instance_id_of_a_non_clustered_scheduler_is_warned_about(
    store: MemoryStore, app: Celery, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    loop = make_loop(store, app, clock, clustered=False)  # instance_id AUTO in its settings
    with caplog.at_level(logging.WARNING, logger="celery_quartz.lifecycle"):
        loop.start()
    assert "generated instance id" in caplog.text


def test_a_fixed_instance_id_is_not_warned_about(
    store: MemoryStore, app: Celery, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    loop = make_loop(store, app, clock, clustered=False, instance_id="leader")
    with caplog.at_level(logging.WARNING, logger="celery_quartz.lifecycle"):
        loop.start()
    assert "generated instance id" not in caplog.text


# -- inside celery beat --------------------------------------------------------------------------


def beat_scheduler(tmp_path: Path, app: Celery, **conf: object) -> object:
    from celery_quartz.beat import Scheduler

    app.conf.quartz_store_url = f"sqlite:///{tmp_path / 'quartz.db'}"
    app.conf.update(conf)
    return Scheduler(app, lazy=False)


def test_beat_with_auto_start_off_builds_the_loop_and_ticks_do_nothing(
    tmp_path: Path, app: Celery
) -> None:
    scheduler = beat_scheduler(tmp_path, app, quartz_auto_start=False, quartz_clustered=False)
    try:
        assert scheduler.loop is not None  # type: ignore[attr-defined]
        assert scheduler.tick() == 1.0  # type: ignore[attr-defined]
        assert scheduler.status is SchedulerStatus.CREATED  # type: ignore[attr-defined]
        SchedulerLeadership(scheduler).on_started_leading()  # type: ignore[arg-type]
        assert scheduler.status is SchedulerStatus.RUNNING  # type: ignore[attr-defined]
        SchedulerLeadership(scheduler).on_stopped_leading()  # type: ignore[arg-type]
        assert scheduler.status is SchedulerStatus.STANDBY  # type: ignore[attr-defined]
    finally:
        scheduler.close()  # type: ignore[attr-defined]
    assert scheduler.status is SchedulerStatus.SHUTDOWN  # type: ignore[attr-defined]


def test_beat_starts_by_itself_with_auto_start_on(tmp_path: Path, app: Celery) -> None:
    scheduler = beat_scheduler(tmp_path, app)
    try:
        assert scheduler.status is SchedulerStatus.RUNNING  # type: ignore[attr-defined]
    finally:
        scheduler.close()  # type: ignore[attr-defined]


def test_beat_refuses_a_mixed_clustering_configuration(tmp_path: Path, app: Celery) -> None:
    with pytest.raises(ConfigurationError, match="quartz_clustered is False"):
        beat_scheduler(tmp_path, app, quartz_clustered=False, quartz_checkin_misfire_threshold=1.0)


def test_a_signal_closing_beat_mid_step_defers_the_shutdown_until_the_step_unwinds(
    tmp_path: Path, app: Celery
) -> None:
    # celery beat's SIGTERM handler calls close() and raises SystemExit wherever the step was:
    # shutting down there would wait on the interrupted step's own transaction.
    scheduler = beat_scheduler(tmp_path, app)
    loop = scheduler.loop  # type: ignore[attr-defined]
    check_in = loop.cluster.check_in

    def interrupted() -> None:
        with loop.store.transaction():
            scheduler.close()  # type: ignore[attr-defined]
            assert loop.status is SchedulerStatus.RUNNING
            raise SystemExit

    loop.cluster.check_in = interrupted
    loop.cluster.next_check_in = None  # the next step checks in
    with pytest.raises(SystemExit):
        scheduler.tick()  # type: ignore[attr-defined]
    loop.cluster.check_in = check_in
    scheduler.close()  # type: ignore[attr-defined]  # what beat's `finally: sync()` does
    assert scheduler.status is SchedulerStatus.SHUTDOWN  # type: ignore[attr-defined]
