"""Backfill (``Quartz.backfill``): the slots are the trigger's own fire times in the range, its
calendar applied; each runs once as a one-shot firing standing for the occurrence; a slot
scheduled before or already succeeded is not scheduled again; bad requests are refused before
anything is stored; one audit row. On SQLite and PostgreSQL (the ``db`` fixture)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from celery import Celery
from sqlalchemy import func, select

from celery_quartz import Job, JobKey, Quartz, SimpleTrigger, TriggerKey
from celery_quartz.affinity import PreferredNode
from celery_quartz.backfill import BackfillError, SlotOutcome
from celery_quartz.calendars import WeeklyCalendar
from celery_quartz.clock import FakeClock, to_millis
from celery_quartz.context import JobExecutionContext
from celery_quartz.errors import TriggerNotFoundError, ValidationError
from celery_quartz.firing import BACKFILL_SLOT, FiringHeader
from celery_quartz.keys import BACKFILL_JOBS_GROUP
from celery_quartz.retry import RetryPolicy
from celery_quartz.store import SqlStore, TriggerState
from celery_quartz.store.records import FinishedExecution
from celery_quartz.triggers import CronTrigger
from tests.stores import audit_rows
from tests.unit.conftest import T0, at, utc

KEY = TriggerKey("nightly", "reports")
JOB = JobKey("nightly", "reports")
W1 = "worker@one"


@pytest.fixture
def quartz(app: Celery, db: SqlStore, clock: FakeClock) -> Quartz:
    return Quartz(app, store=db, clock=clock)


def _every_minute(quartz: Quartz, **job: Any) -> None:
    """A trigger firing every minute from T0 (the clock is moved past the range later)."""
    quartz.schedule_job(
        Job(key=JOB, task="tasks.report", **job),
        SimpleTrigger(key=KEY, start_at=T0, repeat_interval=timedelta(minutes=1), repeat_count=-1),
    )


def _firings(store: SqlStore) -> list[Any]:
    """The backfill's one-shot trigger rows, by slot."""
    t = store.tables.triggers
    with store.transaction() as conn:
        return list(
            conn.execute(
                select(t)
                .where(t.c.trigger_group == BACKFILL_JOBS_GROUP)
                .order_by(t.c.origin_sched_time)
            ).all()
        )


def _count(store: SqlStore, table: Any) -> int:
    with store.transaction() as conn:
        return int(conn.execute(select(func.count()).select_from(table)).scalar_one())


def _nothing_stored(store: SqlStore) -> None:
    assert _firings(store) == []
    assert _count(store, store.tables.backfill_slots) == 0
    assert audit_rows(store, action="backfill") == []


def _run(store: SqlStore, clock: FakeClock, *, failed: bool = False) -> list[Any]:
    """Claim, fire, start and end every trigger due now (as a scheduler and a worker do);
    the firings."""
    acquired = store.acquire_next_triggers(
        "sched-a", no_later_than=clock.now(), max_count=100, time_window=0
    )
    firings = store.fire("sched-a", acquired)
    for firing in firings:
        assert store.start_execution(firing.fire_instance_id, W1)
        assert store.complete_execution(firing.fire_instance_id, failed=failed)
    return firings


def ms(when: datetime) -> int:
    return to_millis(when)


# -- the slots ---------------------------------------------------------------------------------


def test_the_slots_are_the_fire_times_in_the_range_within_its_start_with_its_calendar(
    quartz: Quartz, clock: FakeClock
) -> None:
    # Daily at 02:00 from Friday 20 February; weekends excluded by its calendar.
    quartz.add_calendar("weekdays", WeeklyCalendar())
    quartz.schedule_job(
        Job(key=JOB, task="tasks.report"),
        CronTrigger(
            key=KEY,
            expression="0 0 2 * * ?",
            start_at=utc(2026, 2, 20),
            calendar_name="weekdays",
        ),
    )
    before = quartz.get_trigger(KEY)
    result = quartz.backfill(KEY, utc(2026, 2, 10), utc(2026, 2, 27, 2))
    days = [20, 23, 24, 25, 26]  # not the 21st, 22nd (weekend) nor the 27th (the end is open)
    assert [s.slot for s in result.slots] == [utc(2026, 2, d, 2) for d in days]
    assert (result.slots_found, result.scheduled) == (5, 5)
    assert (result.already_scheduled, result.already_succeeded) == (0, 0)
    assert [s.outcome for s in result.slots] == [SlotOutcome.SCHEDULED] * 5
    assert [r.origin_sched_time for r in _firings(quartz.store)] == [  # type: ignore[arg-type]
        ms(utc(2026, 2, d, 2)) for d in days
    ]
    # The trigger itself is left as it was: its schedule, counts and state.
    after = quartz.get_trigger(KEY)
    assert after is not None and before is not None
    assert (after.next_fire_time, after.times_triggered) == (
        before.next_fire_time,
        before.times_triggered,
    )
    assert quartz.get_trigger_state(KEY) == TriggerState.WAITING


def test_the_slots_stop_at_the_triggers_end(quartz: Quartz, clock: FakeClock) -> None:
    quartz.schedule_job(
        Job(key=JOB, task="tasks.report"),
        SimpleTrigger(key=KEY, start_at=T0, repeat_interval=timedelta(minutes=1), repeat_count=2),
    )
    clock.set(at(3600))
    result = quartz.backfill(KEY, T0 - timedelta(hours=1), at(3600))
    assert [s.slot for s in result.slots] == [T0, at(60), at(120)]


def test_each_firing_keeps_the_triggers_priority_retry_policy_pin_and_group(
    quartz: Quartz, clock: FakeClock
) -> None:
    policy = RetryPolicy.fixed(2, timedelta(seconds=5))
    quartz.schedule_job(
        Job(key=JOB, task="tasks.report"),
        SimpleTrigger(
            key=KEY,
            start_at=T0,
            repeat_interval=timedelta(minutes=1),
            repeat_count=-1,
            priority=8,
            retry_policy=policy,
            preferred_node=PreferredNode.for_node(W1),
            execution_group="reports",
            data={"region": "eu"},
        ),
    )
    clock.set(at(150))
    result = quartz.backfill(KEY, T0, at(60))
    (slot,) = result.slots
    assert slot.firing_trigger is not None
    firing = quartz.get_trigger(slot.firing_trigger)
    assert firing is not None
    assert (firing.priority, firing.retry_policy, firing.execution_group) == (8, policy, "reports")
    assert firing.preferred_node == PreferredNode.for_node(W1)
    assert firing.data == {"region": "eu", BACKFILL_SLOT: ms(T0)}
    assert firing.job_key == JOB


def test_its_firing_carries_the_slot_to_the_tasks_context(
    quartz: Quartz, db: SqlStore, clock: FakeClock
) -> None:
    _every_minute(quartz)
    (own,) = _run(db, clock)  # a firing of the trigger's own schedule carries no slot
    assert JobExecutionContext.from_header(FiringHeader.of(own)).backfill_slot is None
    db.pause_trigger(KEY)
    clock.set(at(150))
    quartz.backfill(KEY, at(60), at(120))
    acquired = db.acquire_next_triggers(
        "sched-a", no_later_than=clock.now(), max_count=100, time_window=0
    )
    (backfilled,) = db.fire("sched-a", acquired)
    assert backfilled.trigger_key.group == BACKFILL_JOBS_GROUP
    assert (backfilled.backfill_slot_millis, backfilled.scheduled_millis) == (ms(at(60)),) * 2
    assert backfilled.origin_trigger_key == KEY
    assert BACKFILL_SLOT not in backfilled.trigger_data
    context = JobExecutionContext.from_header(FiringHeader.of(backfilled))
    assert context.backfill_slot == at(60)
    assert context.occurrence == (KEY, at(60))


def test_a_backfill_firing_is_the_triggers_occurrence_in_its_history(
    quartz: Quartz, db: SqlStore, clock: FakeClock
) -> None:
    _every_minute(quartz)
    clock.set(at(30))
    _run(db, clock)  # the trigger's own T0 occurrence
    db.pause_trigger(KEY)
    clock.set(at(300))
    result = quartz.backfill(KEY, at(60), at(180))
    assert result.scheduled == 2
    _run(db, clock)
    rows = quartz.history(trigger=KEY).items
    assert sorted((r.scheduled_fire_time, r.result) for r in rows) == [  # type: ignore[type-var]
        (T0, "succeeded"),
        (at(60), "succeeded"),
        (at(120), "succeeded"),
    ]
    assert _firings(db) == []  # each one-shot trigger is gone once its firing ended


def test_a_backfill_runs_start_lateness_counts_from_when_its_firing_was_due(
    quartz: Quartz, db: SqlStore, clock: FakeClock
) -> None:
    """Not from the slot, days ago: a backfill does not skew the lateness statistics. One run
    ended alone, the other in a batch (PostgreSQL's one-statement path)."""
    _every_minute(quartz)
    db.pause_trigger(KEY)
    clock.set(at(3600))
    quartz.backfill(KEY, T0, at(120))
    acquired = db.acquire_next_triggers(
        "sched-a", no_later_than=clock.now(), max_count=100, time_window=0
    )
    alone, batched = db.fire("sched-a", acquired)
    clock.set(at(3605))
    for firing in (alone, batched):
        assert db.start_execution(firing.fire_instance_id, W1)
    assert db.complete_execution(alone.fire_instance_id)
    assert db.complete_executions([FinishedExecution(batched.fire_instance_id, ms(at(3606)))])
    rows = quartz.history(trigger=KEY).items
    assert sorted((r.scheduled_fire_time, r.start_lateness) for r in rows) == [  # type: ignore[type-var]
        (T0, 5.0),
        (at(60), 5.0),
    ]


def test_spacing_puts_the_firings_apart_the_first_at_once(quartz: Quartz, clock: FakeClock) -> None:
    _every_minute(quartz)
    clock.set(at(600))
    result = quartz.backfill(KEY, T0, at(180), spacing=timedelta(seconds=30))
    assert [s.fire_at for s in result.slots] == [at(600), at(630), at(660)]
    assert [r.next_fire_time for r in _firings(quartz.store)] == [  # type: ignore[arg-type]
        ms(at(600)),
        ms(at(630)),
        ms(at(660)),
    ]


# -- refused -----------------------------------------------------------------------------------


def test_more_slots_than_max_slots_refuse_the_whole_backfill_storing_nothing(
    quartz: Quartz, db: SqlStore, clock: FakeClock
) -> None:
    _every_minute(quartz)
    clock.set(at(3600))
    with pytest.raises(BackfillError, match=r"holds 60 slots, over max_slots=10"):
        quartz.backfill(KEY, T0, at(3600), max_slots=10)
    _nothing_stored(db)
    assert quartz.backfill(KEY, T0, at(3600), max_slots=60).scheduled == 60


@pytest.mark.parametrize(
    ("start", "end", "options", "message"),
    [
        (at(0), at(7200), {}, "is in the future"),
        (at(60), at(60), {}, "must be before end"),
        (at(120), at(60), {}, "must be before end"),
        (T0.replace(tzinfo=None), at(60), {}, "has no time zone"),
        (at(0), at(60), {"max_slots": 0}, "max_slots must be a positive integer"),
        (at(0), at(60), {"spacing": timedelta(seconds=-1)}, "spacing must be"),
    ],
)
def test_a_bad_request_is_refused_naming_what_is_wrong(
    quartz: Quartz,
    db: SqlStore,
    clock: FakeClock,
    start: datetime,
    end: datetime,
    options: dict[str, Any],
    message: str,
) -> None:
    _every_minute(quartz)
    clock.set(at(3600))
    with pytest.raises(ValidationError, match=message):
        quartz.backfill(KEY, start, end, **options)
    _nothing_stored(db)


def test_an_unknown_trigger_is_refused(quartz: Quartz, clock: FakeClock) -> None:
    clock.set(at(3600))
    with pytest.raises(TriggerNotFoundError, match=r"reports\.nightly"):
        quartz.backfill(KEY, T0, at(60))


def test_a_backfills_own_firing_is_not_backfilled(quartz: Quartz, clock: FakeClock) -> None:
    _every_minute(quartz)
    clock.set(at(3600))
    (slot,) = quartz.backfill(KEY, T0, at(60)).slots
    assert slot.firing_trigger is not None
    with pytest.raises(BackfillError, match=r"backfill the trigger it runs, reports\.nightly"):
        quartz.backfill(slot.firing_trigger, T0, at(60))


# -- idempotent --------------------------------------------------------------------------------


def test_a_dry_run_stores_nothing_and_says_what_would_be_done(
    quartz: Quartz, db: SqlStore, clock: FakeClock
) -> None:
    _every_minute(quartz)
    clock.set(at(600))
    dry = quartz.backfill(KEY, T0, at(180), spacing=timedelta(seconds=10), dry_run=True)
    assert dry.dry_run
    assert (dry.slots_found, dry.scheduled) == (3, 3)
    assert [s.fire_at for s in dry.slots] == [at(600), at(610), at(620)]
    assert [s.firing_trigger for s in dry.slots] == [None] * 3
    _nothing_stored(db)
    quartz.backfill(KEY, T0, at(60))
    again = quartz.backfill(KEY, T0, at(180), dry_run=True)
    assert [s.outcome for s in again.slots] == [
        SlotOutcome.ALREADY_SCHEDULED,
        SlotOutcome.SCHEDULED,
        SlotOutcome.SCHEDULED,
    ]
    assert len(_firings(db)) == 1


def test_a_slot_backfilled_before_is_not_scheduled_again(
    quartz: Quartz, db: SqlStore, clock: FakeClock
) -> None:
    _every_minute(quartz)
    clock.set(at(600))
    assert quartz.backfill(KEY, at(60), at(180)).scheduled == 2
    second = quartz.backfill(KEY, T0, at(240))
    assert (second.slots_found, second.scheduled, second.already_scheduled) == (4, 2, 2)
    assert [s.outcome for s in second.slots] == [
        SlotOutcome.SCHEDULED,
        SlotOutcome.ALREADY_SCHEDULED,
        SlotOutcome.ALREADY_SCHEDULED,
        SlotOutcome.SCHEDULED,
    ]
    assert sorted(r.origin_sched_time for r in _firings(db)) == [
        ms(at(s)) for s in (0, 60, 120, 180)
    ]
    # Even once its firing has run and its one-shot trigger is gone.
    _run(db, clock)
    assert quartz.backfill(KEY, T0, at(240)).already_scheduled == 4
    assert _firings(db) == []


def test_a_slot_in_flight_or_waiting_for_its_retry_is_already_scheduled(
    quartz: Quartz, db: SqlStore, clock: FakeClock
) -> None:
    quartz.schedule_job(
        Job(key=JOB, task="tasks.report"),
        SimpleTrigger(
            key=KEY,
            start_at=T0,
            repeat_interval=timedelta(minutes=1),
            repeat_count=-1,
            retry_policy=RetryPolicy.fixed(1, timedelta(seconds=10)),
        ),
    )
    _run(db, clock, failed=True)  # T0 failed: its retry waits
    clock.set(at(60))
    acquired = db.acquire_next_triggers(
        "sched-a", no_later_than=clock.now(), max_count=100, time_window=0
    )
    fired = db.fire("sched-a", acquired)  # the retry of T0, and the occurrence at(60)
    assert sorted(f.scheduled_millis for f in fired) == [ms(T0), ms(at(60))]
    for firing in fired:
        assert db.start_execution(firing.fire_instance_id, W1)  # both running
    db.pause_trigger(KEY)
    clock.set(at(600))
    result = quartz.backfill(KEY, T0, at(180))
    assert [(s.slot, s.outcome) for s in result.slots] == [
        (T0, SlotOutcome.ALREADY_SCHEDULED),
        (at(60), SlotOutcome.ALREADY_SCHEDULED),
        (at(120), SlotOutcome.SCHEDULED),
    ]
    # Only the slot it scheduled is kept as scheduled by a backfill: the others, should their
    # runs fail, are backfilled by a later request.
    assert _count(db, db.tables.backfill_slots) == 1


def test_a_slot_that_already_succeeded_is_skipped_unless_included(
    quartz: Quartz, db: SqlStore, clock: FakeClock
) -> None:
    _every_minute(quartz)
    clock.set(at(0))
    _run(db, clock)  # T0: succeeded
    clock.set(at(60))
    _run(db, clock, failed=True)  # at(60): failed
    clock.set(at(120))
    _run(db, clock)  # at(120): succeeded
    db.pause_trigger(KEY)
    clock.set(at(600))
    result = quartz.backfill(KEY, T0, at(240))
    assert [(s.slot, s.outcome) for s in result.slots] == [
        (T0, SlotOutcome.ALREADY_SUCCEEDED),
        (at(60), SlotOutcome.SCHEDULED),
        (at(120), SlotOutcome.ALREADY_SUCCEEDED),
        (at(180), SlotOutcome.SCHEDULED),
    ]
    assert (result.scheduled, result.already_succeeded) == (2, 2)
    included = quartz.backfill(KEY, T0, at(240), include_succeeded=True)
    assert [s.outcome for s in included.slots] == [
        SlotOutcome.SCHEDULED,
        SlotOutcome.ALREADY_SCHEDULED,
        SlotOutcome.SCHEDULED,
        SlotOutcome.ALREADY_SCHEDULED,
    ]
    assert sorted(r.origin_sched_time for r in _firings(db)) == [
        ms(at(s)) for s in (0, 60, 120, 180)
    ]


# -- disallow_concurrent, audit ----------------------------------------------------------------


def test_the_firings_of_a_disallow_concurrent_job_run_one_at_a_time(
    quartz: Quartz, db: SqlStore, clock: FakeClock
) -> None:
    _every_minute(quartz, disallow_concurrent=True)
    db.pause_trigger(KEY)
    clock.set(at(600))
    quartz.backfill(KEY, T0, at(180))
    acquired = db.acquire_next_triggers(
        "sched-a", no_later_than=clock.now(), max_count=100, time_window=0
    )
    (first,) = db.fire("sched-a", acquired)
    assert db.start_execution(first.fire_instance_id, W1)
    # The others wait while it runs.
    assert (
        db.acquire_next_triggers("sched-a", no_later_than=clock.now(), max_count=100, time_window=0)
        == []
    )
    assert db.complete_execution(first.fire_instance_id)
    ran = [first.backfill_slot_millis]
    while firings := _run(db, clock):
        assert len(firings) == 1
        ran.extend(f.backfill_slot_millis for f in firings)
    assert sorted(ran) == [ms(at(s)) for s in (0, 60, 120)]  # type: ignore[type-var]


def test_the_audit_records_one_backfill_with_its_range_and_counts(
    app: Celery, db: SqlStore, clock: FakeClock
) -> None:
    quartz = Quartz(app, store=db, clock=clock, principal="ops")
    _every_minute(quartz)
    clock.set(at(600))
    quartz.backfill(KEY, at(60), at(120))
    quartz.backfill(KEY, T0, at(180), dry_run=True)  # not recorded: nothing was stored
    quartz.backfill(KEY, T0, at(180), spacing=timedelta(seconds=2))
    rows = audit_rows(db, action="backfill")
    assert [(r["principal"], r["via"], r["target_kind"], r["target"]) for r in rows] == [
        ("ops", "client", "trigger", "reports.nightly")
    ] * 2
    assert {name: after for name, (_before, after) in rows[1]["changes"].items()} == {
        "from": T0.isoformat(),
        "to": at(180).isoformat(),
        "max_slots": 1000,
        "spacing": 2.0,
        "include_succeeded": False,
        "slots_found": 3,
        "scheduled": 2,
        "already_scheduled": 1,
        "already_succeeded": 0,
    }
    # Each slot's one-shot trigger is not audited on its own: one row per backfill.
    assert [r for r in audit_rows(db) if BACKFILL_JOBS_GROUP in (r["target"] or "")] == []
