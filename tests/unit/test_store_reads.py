"""The operators' read side added for the dashboard: a trigger's last outcome kept by the
completion, the reason of an ERROR, what is owed and not happening, upcoming fire times with a
calendar, and the scheduler names in the tables."""

from __future__ import annotations

from datetime import timedelta

from celery_quartz.calendars import WeeklyCalendar
from celery_quartz.clock import FakeClock
from celery_quartz.keys import TriggerKey
from celery_quartz.limits import ExecutionLimits
from celery_quartz.store import MemoryStore, SqlStore, TriggerState
from celery_quartz.store.sql.reads import scheduler_names
from celery_quartz.store.views import FiringOutcome
from tests.unit.builders import add, fire_one, one_shot, repeating
from tests.unit.conftest import at


def _run(store: SqlStore, clock: FakeClock, name: str, outcome: FiringOutcome | None) -> None:
    fire_id = fire_one(store, name)
    store.start_execution(fire_id, "w1@host")
    clock.advance(timedelta(seconds=2))
    assert store.complete_execution(fire_id, outcome=outcome)


def test_a_completion_keeps_the_outcome_on_its_trigger(db: SqlStore, clock: FakeClock) -> None:
    add(db, repeating("t1", at(0), 10))
    view = db.trigger_view(TriggerKey("t1"))
    assert view is not None and view.last_outcome is None
    _run(db, clock, "t1", FiringOutcome.of_exception(KeyError("boom")))
    clock.advance(timedelta(seconds=10))
    _run(db, clock, "t1", FiringOutcome.of_exception(ValueError("bad input")))
    view = db.trigger_view(TriggerKey("t1"))
    assert view is not None and view.last_outcome is not None
    outcome = view.last_outcome
    assert not outcome.succeeded
    assert (outcome.error_type, outcome.error_message) == ("ValueError", "bad input")
    assert outcome.consecutive_failures == 2
    assert outcome.duration == 2.0
    clock.advance(timedelta(seconds=10))
    _run(db, clock, "t1", FiringOutcome())
    outcome = db.list_triggers().items[0].last_outcome
    assert outcome is not None and outcome.succeeded and outcome.consecutive_failures == 0
    assert outcome.error_type is None


def test_a_completion_without_an_outcome_keeps_none(store: MemoryStore, clock: FakeClock) -> None:
    add(store, repeating("t1", at(0), 10))
    _run(store, clock, "t1", None)
    view = store.trigger_view(TriggerKey("t1"))
    assert view is not None and view.last_outcome is None


def test_a_finished_one_shot_trigger_is_removed_with_its_outcome(
    store: MemoryStore, clock: FakeClock
) -> None:
    add(store, one_shot("once", at(0)), durable=True)
    _run(store, clock, "once", FiringOutcome.of_exception(RuntimeError("x")))
    assert store.trigger_view(TriggerKey("once")) is None


def test_owed_lists_overdue_blocked_and_error_triggers(
    store: MemoryStore, clock: FakeClock
) -> None:
    add(store, repeating("late", at(0), 3600))
    add(store, repeating("fine", at(3000), 3600), job="other")
    clock.advance(timedelta(seconds=120))  # "late" is due by more than the 60 s threshold
    owed = store.owed_triggers(blocked_for=60)
    assert [v.key.name for v in owed.overdue] == ["late"]
    assert (owed.overdue_count, owed.blocked_count, owed.error_count) == (1, 0, 0)
    capped = store.owed_triggers(blocked_for=60, count_cap=1)
    assert capped.overdue_count == 1 and capped.count_cap == 1


def test_an_error_keeps_its_reason_until_reset(store: MemoryStore, clock: FakeClock) -> None:
    add(store, repeating("t1", at(0), 10))
    claim = store.claim(
        "i1",
        no_later_than=clock.now(),
        max_count=1,
        time_window=0,
        fire_due=False,
        task_exists=lambda task: False,
    )
    assert not claim.acquired
    owed = store.owed_triggers(blocked_for=60)
    assert [v.key.name for v in owed.errors] == ["t1"]
    assert owed.errors[0].state == TriggerState.ERROR
    assert "is not registered" in (owed.errors[0].error_reason or "")
    store.reset_trigger_from_error_state([TriggerKey("t1")])
    view = store.trigger_view(TriggerKey("t1"))
    assert view is not None and view.error_reason is None


def test_upcoming_fire_times_skip_what_the_calendar_excludes(store: MemoryStore) -> None:
    trigger = repeating("t1", at(0), 86400)
    calendar = WeeklyCalendar()  # Saturdays and Sundays excluded
    trigger.compute_first_fire_time(calendar)
    times = trigger.upcoming_fire_times(7, calendar)
    assert len(times) == 7
    assert all(t.weekday() < 5 for t in times)
    assert trigger.upcoming_fire_times(3) == [times[0] + timedelta(days=i) for i in range(3)]


def test_scheduler_names_are_read_from_every_table(db: SqlStore, clock: FakeClock) -> None:
    assert scheduler_names(db.engine, db.tables) == []
    add(db, repeating("t1", at(0), 10))
    for name in ("alpha", "zeta"):
        SqlStore(scheduler_name=name, clock=clock, engine=db.engine).check_in("n", interval=7.5)
    assert scheduler_names(db.engine, db.tables) == ["alpha", "unit", "zeta"]


def test_unserved_reads_each_group_with_a_schedulable_trigger_once(db: SqlStore) -> None:
    from celery_quartz.routing import Router, Unserved
    from tests.unit.test_execution_groups import grouped, worker

    add(
        db,
        grouped("a1", "alpha"),
        grouped("a2", "alpha"),
        grouped("b1", "beta"),
        grouped("z1", "zeta"),
        grouped("n1", None),
    )
    db.pause_trigger(TriggerKey("z1"))  # a paused group's queue is not owed a worker
    limited = Router(ExecutionLimits.coerce({"": 2}))
    assert db.unserved(limited) == [
        Unserved(None, "celery"),
        Unserved("alpha", "alpha"),
        Unserved("beta", "beta"),
    ]
    worker(db, "celery@w1", ["alpha", "celery"], 2)
    assert db.unserved(Router()) == [Unserved("beta", "beta")]
