"""Editing a stored trigger in place (``Quartz.update_trigger``): each editable detail, the next
fire time recomputed as a reschedule does, the state, counts and pause kept, a claim dropped,
and bad values refused with the same errors as scheduling, writing nothing. On SQLite and
PostgreSQL (the ``db`` fixture)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from celery import Celery

from celery_quartz import Job, JobKey, Quartz, SimpleTrigger, TriggerKey
from celery_quartz.affinity import PreferredNode
from celery_quartz.calendars import WeeklyCalendar
from celery_quartz.clock import FakeClock
from celery_quartz.errors import InvalidTriggerError, TriggerNotFoundError, ValidationError
from celery_quartz.store import SqlStore, TriggerState
from celery_quartz.triggers import CronTrigger, RecurrenceTrigger
from tests.unit.conftest import T0, at, utc

KEY = TriggerKey("nightly", "reports")


@pytest.fixture
def quartz(app: Celery, db: SqlStore, clock: FakeClock) -> Quartz:
    return Quartz(app, store=db, clock=clock)


def _cron(quartz: Quartz, expression: str = "0 0 2 * * ?") -> None:
    quartz.schedule_job(
        Job(key=JobKey("nightly", "reports"), task="tasks.report"),
        CronTrigger(key=KEY, expression=expression, start_at=T0, description="the report"),
    )


def _snapshot(quartz: Quartz) -> dict[str, object]:
    with quartz.store.transaction() as conn:  # type: ignore[attr-defined]
        t = quartz.store.tables.triggers  # type: ignore[attr-defined]
        from sqlalchemy import select

        return dict(conn.execute(select(t).where(t.c.trigger_name == KEY.name)).one()._mapping)


def test_a_new_cron_expression_and_zone_move_the_next_fire_time(quartz: Quartz) -> None:
    _cron(quartz)
    assert quartz.get_trigger(KEY).next_fire_time == utc(2026, 3, 3, 2)  # type: ignore[union-attr]
    edited = quartz.update_trigger(KEY, cron="0 30 6 * * ?", time_zone="Europe/Helsinki")
    stored = quartz.get_trigger(KEY)
    assert isinstance(stored, CronTrigger)
    assert (stored.expression, stored.time_zone) == ("0 30 6 * * ?", "Europe/Helsinki")
    # 06:30 in Helsinki (UTC+2 in March) is 04:30 UTC; T0 is 09:00 UTC, so tomorrow.
    assert stored.next_fire_time == edited.next_fire_time == utc(2026, 3, 3, 4, 30)
    assert stored.description == "the report"


def test_the_counts_and_the_last_fire_time_stay(quartz: Quartz, clock: FakeClock) -> None:
    quartz.schedule_job(
        Job(key=JobKey("nightly", "reports"), task="tasks.report"),
        SimpleTrigger(key=KEY, start_at=T0, repeat_interval=timedelta(minutes=10), repeat_count=-1),
    )
    with quartz.store.transaction() as conn:  # type: ignore[attr-defined]
        t = quartz.store.tables.triggers  # type: ignore[attr-defined]
        conn.execute(
            t.update().values(times_triggered=7, prev_fire_time=int(at(3600).timestamp() * 1000))
        )
    clock.advance(3600 + 5)
    quartz.update_trigger(KEY, interval=900)
    stored = quartz.get_trigger(KEY)
    assert isinstance(stored, SimpleTrigger)
    assert stored.repeat_interval == timedelta(minutes=15)
    assert stored.times_triggered == 7
    assert stored.previous_fire_time == at(3600)
    # The schedule's anchor stays: the first fire time at or after now of T0 + k * 15 min.
    assert stored.next_fire_time == at(3600 + 900)


def test_details_that_are_not_the_schedule_leave_the_fire_times(quartz: Quartz) -> None:
    _cron(quartz)
    before = _snapshot(quartz)
    quartz.update_trigger(
        KEY,
        priority=9,
        misfire_instruction="DO_NOTHING",
        preferred_node="worker@a",
        execution_group="reports",
        description="new words",
    )
    after = _snapshot(quartz)
    changed = {k for k in after if after[k] != before[k]}
    assert changed == {
        "priority",
        "misfire_instr",
        "preferred_node",
        "execution_group",
        "description",
    }
    stored = quartz.get_trigger(KEY)
    assert stored is not None
    assert stored.preferred_node == PreferredNode.for_node("worker@a")
    assert stored.misfire_instruction == CronTrigger.MisfireInstruction.DO_NOTHING


def test_a_calendar_applies_at_once(quartz: Quartz) -> None:
    _cron(quartz)  # T0 is a Monday; the next 02:00 is a Tuesday (3)
    quartz.add_calendar("no-tuesdays", WeeklyCalendar(excluded_days={3}))
    quartz.update_trigger(KEY, calendar="no-tuesdays")
    assert quartz.get_trigger(KEY).next_fire_time == utc(2026, 3, 4, 2)  # type: ignore[union-attr]


def test_an_rrule_is_edited_on_a_recurrence_trigger(quartz: Quartz) -> None:
    quartz.schedule_job(
        Job(key=JobKey("nightly", "reports"), task="tasks.report"),
        RecurrenceTrigger(key=KEY, rule="FREQ=DAILY", start_at=T0),
    )
    quartz.update_trigger(KEY, rrule="FREQ=WEEKLY;BYDAY=FR")
    assert quartz.get_trigger(KEY).next_fire_time == utc(2026, 3, 6, 9)  # type: ignore[union-attr]


def test_a_schedule_given_as_it_is_keeps_an_owed_occurrence(
    quartz: Quartz, clock: FakeClock
) -> None:
    _cron(quartz)
    clock.advance(86400)  # the 02:00 of the next day is past and owed: a misfire to decide
    owed = utc(2026, 3, 3, 2)
    quartz.update_trigger(KEY, cron="0 0 2 * * ?", time_zone="UTC", calendar=None)
    assert quartz.get_trigger(KEY).next_fire_time == owed  # type: ignore[union-attr]
    quartz.update_trigger(KEY, cron="0 0 3 * * ?")
    assert quartz.get_trigger(KEY).next_fire_time == utc(2026, 3, 4, 3)  # type: ignore[union-attr]


def test_a_paused_trigger_stays_paused_with_its_record(quartz: Quartz) -> None:
    _cron(quartz)
    quartz.pause_trigger(KEY, reason="hold", requested_by="ops")
    quartz.update_trigger(KEY, cron="0 0 3 * * ?")
    assert quartz.get_trigger_state(KEY) == TriggerState.PAUSED
    view = quartz.store.trigger_view(KEY)
    assert view is not None and view.pause is not None and view.pause.reason == "hold"


def test_a_claimed_trigger_goes_back_to_waiting_when_its_schedule_changes(
    quartz: Quartz, db: SqlStore, clock: FakeClock
) -> None:
    _cron(quartz, "0 * * * * ?")
    clock.advance(60)
    acquired = db.acquire_next_triggers(
        "sched-1", no_later_than=at(120), max_count=10, time_window=0
    )
    assert [a.trigger.key for a in acquired] == [KEY]
    quartz.update_trigger(KEY, cron="0 0 * * * ?")
    assert quartz.get_trigger_state(KEY) == TriggerState.WAITING
    # The scheduler's claim is dropped when it fires: the trigger is no longer ACQUIRED.
    assert db.fire("sched-1", acquired) == []
    assert quartz.get_trigger(KEY).next_fire_time == at(3600)  # type: ignore[union-attr]


def test_dry_run_shows_the_edit_and_writes_nothing(quartz: Quartz) -> None:
    _cron(quartz)
    before = _snapshot(quartz)
    shown = quartz.update_trigger(KEY, cron="0 0 5 * * ?", dry_run=True)
    assert shown.next_fire_time == utc(2026, 3, 3, 5)
    assert _snapshot(quartz) == before


@pytest.mark.parametrize(
    ("changes", "error", "message"),
    [
        # The trigger named once, as scheduling names it.
        (
            {"cron": "0 0 25 * * ?"},
            InvalidTriggerError,
            r"^trigger reports\.nightly: cron expression '0 0 25 \* \* \?': hour field",
        ),
        ({"time_zone": "Mars/Olympus"}, InvalidTriggerError, "Mars/Olympus"),
        ({"interval": 60}, InvalidTriggerError, "interval applies to a SIMPLE trigger"),
        ({"priority": 2**31}, InvalidTriggerError, "priority 2147483648 is outside"),
        ({"misfire_instruction": "NEVER"}, InvalidTriggerError, "misfire_instruction 'NEVER'"),
        ({"calendar": "missing"}, InvalidTriggerError, "calendar 'missing' is not stored"),
        ({"preferred_node": "x" * 300}, InvalidTriggerError, "trigger reports.nightly"),
        ({"colour": "red"}, ValidationError, "cannot edit colour"),
        ({}, ValidationError, "nothing to edit"),
        ({"cron": "0 0 0 1 1 ? 2020"}, InvalidTriggerError, "will never fire again"),
    ],
)
def test_bad_values_are_refused_naming_the_detail_and_write_nothing(
    quartz: Quartz, changes: dict[str, object], error: type[Exception], message: str
) -> None:
    _cron(quartz)
    before = _snapshot(quartz)
    with pytest.raises(error, match=message):
        quartz.update_trigger(KEY, **changes)
    assert _snapshot(quartz) == before


def test_an_edit_of_a_trigger_not_stored_names_it(quartz: Quartz) -> None:
    with pytest.raises(TriggerNotFoundError, match=r"reports\.ghost"):
        quartz.update_trigger(TriggerKey("ghost", "reports"), priority=1)
