"""The scheduling loop, step by step: a RAM store, a fake clock and a real Celery app publishing
to kombu's in-memory broker. Messages are read back from the broker's queue."""

from __future__ import annotations

import logging
import re
import uuid
from datetime import datetime, timedelta

import pytest
from celery import Celery
from kombu.message import Message
from sqlalchemy import select
from sqlalchemy.exc import OperationalError

from celery_quartz import Job, JobKey, SimpleTrigger, TriggerKey
from celery_quartz.clock import FakeClock, to_millis
from celery_quartz.config import Settings
from celery_quartz.loop import SchedulingLoop
from celery_quartz.publisher import Publisher
from celery_quartz.store import FiringState, MemoryStore, TriggerState
from celery_quartz.triggers import REPEAT_INDEFINITELY
from tests.unit.conftest import T0, at

A, B = "sched-a", "sched-b"


def settings(**changes: object) -> Settings:
    values: dict[str, object] = {"scheduler_name": "unit", "idle_wait": 1.0}
    values.update(changes)
    return Settings(**values)  # type: ignore[arg-type]


def make_loop(
    store: MemoryStore, app: Celery, clock: FakeClock, instance: str = A, **changes: object
) -> SchedulingLoop:
    return SchedulingLoop(store, Publisher(app), settings(**changes), clock, instance)


def published(app: Celery, queue: str) -> list[Message]:
    """Every message waiting in ``queue`` (taken off it)."""
    messages = []
    with app.connection_for_read() as conn:
        simple = conn.SimpleQueue(queue, no_ack=True)
        while True:
            try:
                messages.append(simple.get(block=False))
            except simple.Empty:
                break
        simple.close()
    return messages


def schedule(store: MemoryStore, *triggers: SimpleTrigger, **job_fields: object) -> None:
    job = Job(key=JobKey("report"), task="tasks.report", **job_fields)  # type: ignore[arg-type]
    for trigger in triggers:
        trigger.job_key = job.key
    store.store_jobs_and_triggers([(job, list(triggers))])


def once(name: str, when: datetime) -> SimpleTrigger:
    return SimpleTrigger(key=TriggerKey(name), start_at=when)


def every(name: str, start: datetime, seconds: float) -> SimpleTrigger:
    return SimpleTrigger(
        key=TriggerKey(name),
        start_at=start,
        repeat_interval=timedelta(seconds=seconds),
        repeat_count=REPEAT_INDEFINITELY,
    )


# -- waiting and publishing --------------------------------------------------------------------


def test_run_once_returns_the_wait_until_the_first_acquired_fire_time(
    store: MemoryStore, app: Celery, clock: FakeClock, queue: str
) -> None:
    schedule(store, once("soon", at(0.4)))
    loop = make_loop(store, app, clock)
    assert loop.run_once() == pytest.approx(0.4)
    assert store.get_trigger_state(TriggerKey("soon")) == TriggerState.ACQUIRED
    assert published(app, queue) == []


def test_run_once_publishes_nothing_before_the_fire_time(
    store: MemoryStore, app: Celery, clock: FakeClock, queue: str
) -> None:
    schedule(store, once("soon", at(0.4)))
    loop = make_loop(store, app, clock)
    loop.run_once()
    clock.set(at(0.399))
    assert loop.run_once() == pytest.approx(0.001)
    assert published(app, queue) == []
    assert list(store.firing_states().values()) == [FiringState.ACQUIRED]


def test_a_due_firing_is_published_with_the_fire_instance_id_as_task_id(
    store: MemoryStore, app: Celery, clock: FakeClock, queue: str
) -> None:
    schedule(store, once("soon", at(0.4)), args=(7,), kwargs={"k": "v"}, data={"d": 1})
    loop = make_loop(store, app, clock)
    loop.run_once()
    clock.set(at(0.4))
    assert loop.run_once() == 0.0
    [message] = published(app, queue)
    [fire_instance_id] = store.firing_states()
    assert (message.headers["id"], message.headers["task"]) == (fire_instance_id, "tasks.report")
    args, kwargs, _ = message.decode()
    assert (args, kwargs) == ([7], {"k": "v"})
    header = message.headers["quartz"]
    assert (header["job"], header["trigger"], header["scheduled_fire_time"]) == (
        ["report", "DEFAULT"],
        ["soon", "DEFAULT"],
        to_millis(at(0.4)),
    )
    assert (
        header["scheduler"],
        header["fire_instance_id"],
        header["fired_by"],
        header["job_data"],
    ) == (
        "unit",
        fire_instance_id,
        A,
        {"d": 1},
    )


def test_a_published_firing_is_recorded_published_with_the_next_claim(
    store: MemoryStore, app: Celery, clock: FakeClock
) -> None:
    schedule(store, once("now", at(0)))
    loop = make_loop(store, app, clock)
    loop.run_once()
    assert list(store.firing_states().values()) == [FiringState.FIRED]
    assert loop.fired_count == 1
    loop.run_once()
    assert list(store.firing_states().values()) == [FiringState.PUBLISHED]


def test_a_due_batch_is_claimed_and_fired_in_one_step(
    store: MemoryStore, app: Celery, clock: FakeClock, queue: str
) -> None:
    schedule(store, once("a", at(0)), once("b", at(0)))
    loop = make_loop(store, app, clock)
    assert loop.run_once() == 0.0
    assert len(published(app, queue)) == 2
    assert sorted(store.firing_states().values()) == [FiringState.FIRED] * 2


def test_shutdown_records_what_was_published_and_publishes_it_only_once(
    store: MemoryStore, app: Celery, clock: FakeClock, queue: str
) -> None:
    schedule(store, once("now", at(0)))
    loop = make_loop(store, app, clock)
    clock.set(at(0.25))
    loop.run_once()
    loop.shutdown()
    assert list(store.firing_states().values()) == [FiringState.PUBLISHED]
    assert len(published(app, queue)) == 1
    f = store.tables.fired_triggers
    with store.engine.connect() as conn:
        assert conn.execute(select(f.c.published_time)).scalar_one() == to_millis(at(0.25))


def test_the_job_s_queue_option_routes_the_message(
    store: MemoryStore, app: Celery, clock: FakeClock
) -> None:
    reports = f"reports-{uuid.uuid4().hex}"
    schedule(store, once("now", at(0)), options={"queue": reports})
    make_loop(store, app, clock).run_once()
    [message] = published(app, reports)
    assert message.headers["task"] == "tasks.report"


def test_a_batch_fires_together_in_fire_time_order(
    store: MemoryStore, app: Celery, clock: FakeClock, queue: str
) -> None:
    schedule(store, once("second", at(0.2)), once("first", at(0.1)), once("later", at(0.9)))
    loop = make_loop(store, app, clock, fire_ahead_window=0.5)
    assert loop.run_once() == pytest.approx(0.1)
    clock.set(at(0.1))
    loop.run_once()
    headers = [m.headers["quartz"] for m in published(app, queue)]
    assert [(h["trigger"][0], h["scheduled_fire_time"]) for h in headers] == [
        ("first", to_millis(at(0.1))),
        ("second", to_millis(at(0.2))),
    ]
    assert store.get_trigger_state(TriggerKey("later")) == TriggerState.WAITING


def test_a_trigger_late_beyond_the_misfire_threshold_fires_now_by_its_instruction(
    store: MemoryStore, app: Celery, clock: FakeClock, queue: str
) -> None:
    schedule(store, once("missed", at(-120)))
    make_loop(store, app, clock).run_once()
    [message] = published(app, queue)
    assert message.headers["quartz"]["scheduled_fire_time"] == to_millis(at(0))


def test_a_trigger_paused_while_its_batch_waits_is_not_published(
    store: MemoryStore, app: Celery, clock: FakeClock, queue: str
) -> None:
    schedule(store, once("soon", at(0.5)))
    loop = make_loop(store, app, clock)
    loop.run_once()
    store.pause_trigger(TriggerKey("soon"))
    clock.set(at(0.5))
    loop.run_once()
    assert published(app, queue) == []
    assert store.firing_states() == {}
    assert store.get_trigger_state(TriggerKey("soon")) == TriggerState.PAUSED


def test_misfires_beyond_one_round_are_handled_in_the_steps_that_follow(
    store: MemoryStore, app: Celery, clock: FakeClock, queue: str
) -> None:
    schedule(store, *(once(f"missed{i}", at(-120 - i)) for i in range(5)))
    loop = make_loop(store, app, clock, max_misfires_per_round=2)
    steps = 0
    while loop.run_once() == 0.0:
        steps += 1
    assert sorted(m.headers["quartz"]["trigger"][0] for m in published(app, queue)) == [
        f"missed{i}" for i in range(5)
    ]
    assert steps == 3


# -- idling and housekeeping -------------------------------------------------------------------


def test_an_idle_loop_sleeps_idle_wait(store: MemoryStore, app: Celery, clock: FakeClock) -> None:
    assert make_loop(store, app, clock, idle_wait=2.0).run_once() == 2.0


def test_an_idle_loop_wakes_for_its_next_check_in(
    store: MemoryStore, app: Celery, clock: FakeClock
) -> None:
    loop = make_loop(store, app, clock, idle_wait=30.0, checkin_interval=5.0)
    assert loop.run_once() == 5.0


def test_a_wake_up_for_housekeeping_alone_does_not_claim(
    store: MemoryStore, app: Celery, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    claims: list[datetime] = []
    claim = store.claim

    def counted(*args: object, **kwargs: object) -> object:
        claims.append(clock.now())
        return claim(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "claim", counted)
    loop = make_loop(store, app, clock, idle_wait=10.0, checkin_interval=4.0)
    for _ in range(4):
        clock.advance(loop.run_once())
    # Wake-ups at 0, 4 and 8 s (check-ins) and at 10 s, when the first claim's idle_wait ran out.
    assert claims == [at(0), at(10)]


def test_claims_released_by_recovering_a_dead_peer_are_claimed_at_once(
    store: MemoryStore, app: Celery, clock: FakeClock
) -> None:
    schedule(store, once("held", at(5)))
    store.check_in(B, interval=2.0)
    store.acquire_next_triggers(B, no_later_than=at(10), max_count=10, time_window=0)
    loop = make_loop(
        store, app, clock, idle_wait=10.0, checkin_interval=2.0, checkin_misfire_threshold=1.0
    )
    clock.advance(loop.run_once())  # nothing to claim (B holds it); wakes for its check-in
    assert clock.now() == at(2)
    clock.advance(loop.run_once())  # B, silent since 0 s, is not judged yet (1 s to go)
    assert clock.now() == at(4)
    # This check-in finds B failed and recovers it; the released trigger is claimed now, not
    # when the first claim's idle wait runs out (10 s).
    assert loop.run_once() == pytest.approx(1.0)
    assert store.get_trigger_state(TriggerKey("held")) == TriggerState.ACQUIRED


def test_a_loop_in_standby_sleeps_idle_wait_after_its_last_claim_ran_out(
    store: MemoryStore, app: Celery, clock: FakeClock
) -> None:
    loop = make_loop(store, app, clock, idle_wait=2.0)
    clock.advance(loop.run_once())  # claimed nothing, at 0 s
    loop.standby()
    clock.advance(3.0)  # the claim's idle_wait ran out at 2 s; the next check-in is at 7.5 s
    assert loop.run_once() == 2.0


def test_a_trigger_beyond_idle_wait_is_not_acquired(
    store: MemoryStore, app: Celery, clock: FakeClock
) -> None:
    schedule(store, once("later", at(1.5)))
    assert make_loop(store, app, clock, idle_wait=1.0).run_once() == 1.0
    assert store.get_trigger_state(TriggerKey("later")) == TriggerState.WAITING


def test_the_loop_checks_in_when_it_starts(
    store: MemoryStore, app: Celery, clock: FakeClock
) -> None:
    make_loop(store, app, clock).run_once()
    [row] = store.check_ins()
    assert (row.instance_name, row.kind, row.last_checkin_millis) == (A, "scheduler", to_millis(T0))


def test_shutdown_releases_the_acquired_batch_and_leaves_the_cluster(
    store: MemoryStore, app: Celery, clock: FakeClock, queue: str
) -> None:
    schedule(store, once("soon", at(0.5)))
    loop = make_loop(store, app, clock)
    loop.run_once()
    loop.shutdown()
    assert store.get_trigger_state(TriggerKey("soon")) == TriggerState.WAITING
    assert store.firing_states() == {}
    assert store.check_ins() == []
    assert published(app, queue) == []


def test_shutdown_logs_its_start_and_its_end_with_how_long_it_took(
    store: MemoryStore, app: Celery, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    # A stop that hangs shows in the log as one without its end.
    loop = make_loop(store, app, clock)
    loop.run_once()
    with caplog.at_level(logging.INFO, logger="celery_quartz"):
        loop.shutdown()
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0] == f"scheduler instance {A} shutting down"
    assert re.fullmatch(rf"scheduler instance {A} shut down in \d+\.\ds", messages[-1])


# -- publishing failures and take-over ---------------------------------------------------------


def test_a_firing_the_broker_refused_stays_fired_and_is_published_on_a_later_step(
    store: MemoryStore,
    app: Celery,
    clock: FakeClock,
    queue: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    schedule(store, once("now", at(0)))
    loop = make_loop(store, app, clock)

    def broker_down(self: Publisher, firings: object) -> None:
        raise ConnectionRefusedError("broker down")

    monkeypatch.setattr(Publisher, "publish", broker_down)
    with caplog.at_level(logging.ERROR, logger="celery_quartz.loop"):
        loop.run_once()
    [fire_instance_id] = store.firing_states()
    assert store.firing_states() == {fire_instance_id: FiringState.FIRED}
    assert "publishing 1 firing(s) failed; will retry" in caplog.text
    monkeypatch.undo()

    clock.advance(0.5)
    loop.run_once()
    [message] = published(app, queue)
    assert message.headers["id"] == fire_instance_id
    assert store.firing_states() == {fire_instance_id: FiringState.PUBLISHED}


def test_a_batch_fired_while_the_store_s_answer_was_lost_is_published_at_the_next_check_in(
    store: MemoryStore,
    app: Celery,
    clock: FakeClock,
    queue: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    schedule(store, once("now", at(0)))
    loop = make_loop(store, app, clock, checkin_interval=5.0)
    claim = store.claim

    def answer_lost(*args: object, **kwargs: object) -> object:
        claim(*args, **kwargs)  # type: ignore[arg-type]
        raise OperationalError("COMMIT", {}, Exception("server closed the connection"))

    monkeypatch.setattr(store, "claim", answer_lost)
    loop.run_once()
    monkeypatch.undo()
    [fire_instance_id] = store.firing_states()
    assert store.firing_states() == {fire_instance_id: FiringState.FIRED}
    assert published(app, queue) == []

    clock.advance(5.0)
    loop.run_once()
    [message] = published(app, queue)
    assert message.headers["id"] == fire_instance_id


def test_a_restarted_instance_publishes_what_its_previous_life_fired(
    store: MemoryStore, app: Celery, clock: FakeClock, queue: str
) -> None:
    schedule(store, once("now", at(0)))
    acquired = store.acquire_next_triggers(A, no_later_than=at(0), max_count=10, time_window=0)
    [fired] = store.fire(A, acquired)  # ... and the process died before publishing
    make_loop(store, app, clock, instance=A).run_once()
    [message] = published(app, queue)
    assert message.headers["id"] == fired.fire_instance_id
    assert store.firing_states() == {fired.fire_instance_id: FiringState.PUBLISHED}


def test_a_dead_peer_s_unpublished_firing_is_published_by_a_survivor(
    store: MemoryStore, app: Celery, clock: FakeClock, queue: str
) -> None:
    schedule(store, once("now", at(0)), once("claimed", at(0.5)))
    store.check_in(B, interval=7.5)
    fired_by_b = store.fire(
        B,
        store.acquire_next_triggers(B, no_later_than=at(0), max_count=10, time_window=0),
    )
    store.acquire_next_triggers(B, no_later_than=at(1), max_count=10, time_window=0)
    clock.set(at(16))  # B checked in at 0 s: 7.5 s interval + 7.5 s threshold have passed
    loop = make_loop(store, app, clock, instance=A)
    loop.run_once()
    clock.advance(7.5)  # A judges its peers when it checks in again
    loop.run_once()
    messages = published(app, queue)
    assert messages[0].headers["id"] == fired_by_b[0].fire_instance_id
    assert messages[0].headers["quartz"]["fired_by"] == A
    # B's other claim was released and fired by A (late, within the misfire threshold).
    assert [m.headers["quartz"]["trigger"][0] for m in messages] == ["now", "claimed"]
    assert [c.instance_name for c in store.check_ins()] == [A]


# -- two instances -----------------------------------------------------------------------------


def test_two_loops_on_one_store_publish_every_occurrence_once(
    store: MemoryStore, app: Celery, clock: FakeClock, queue: str
) -> None:
    schedule(store, *(every(f"t{i}", at(i * 0.1), 1.0) for i in range(5)))
    loops = [
        make_loop(store, app, clock, instance=A, batch_size=2, fire_ahead_window=0.3),
        make_loop(store, app, clock, instance=B, batch_size=2, fire_ahead_window=0.3),
    ]
    while clock.now() < at(10):
        for loop in loops:
            while loop.run_once() == 0.0:
                pass
        clock.advance(0.05)
    occurrences = [
        (m.headers["quartz"]["trigger"][0], m.headers["quartz"]["scheduled_fire_time"])
        for m in published(app, queue)
    ]
    expected = {(f"t{i}", to_millis(at(i * 0.1 + n))) for i in range(5) for n in range(10)}
    assert len(occurrences) == len(set(occurrences))
    assert set(occurrences) >= expected
    assert {m for m in occurrences if m not in expected} <= {
        (f"t{i}", to_millis(at(i * 0.1 + 10))) for i in range(5)
    }
    assert loops[0].fired_count > 0 and loops[1].fired_count > 0


def test_shutdown_releases_a_claim_whose_answer_the_loop_never_took(
    store: MemoryStore, app: Celery, clock: FakeClock
) -> None:
    # A stop signal between the claim's commit and the loop taking its answer.
    schedule(store, once("soon", at(0.5)))
    loop = make_loop(store, app, clock)
    real_claim = store.claim

    def claim_then_stop(*args: object, **kwargs: object) -> object:
        real_claim(*args, **kwargs)  # type: ignore[arg-type]
        raise SystemExit(0)

    store.claim = claim_then_stop  # type: ignore[method-assign]
    with pytest.raises(SystemExit):
        loop.run_once()
    store.claim = real_claim  # type: ignore[method-assign]
    assert store.get_trigger_state(TriggerKey("soon")) == TriggerState.ACQUIRED
    loop.shutdown()
    assert store.get_trigger_state(TriggerKey("soon")) == TriggerState.WAITING
    assert store.firing_states() == {}


def test_shutdown_publishes_what_was_fired_but_not_yet_published(
    store: MemoryStore, app: Celery, clock: FakeClock, queue: str
) -> None:
    schedule(store, once("now", at(0)))
    loop = make_loop(store, app, clock)
    loop.start()
    # A stop signal between the firing's commit and its publication:
    store.claim(A, no_later_than=at(1), max_count=10, time_window=0)
    assert published(app, queue) == []
    loop.shutdown()
    assert len(published(app, queue)) == 1
    assert list(store.firing_states().values()) == [FiringState.PUBLISHED]
