"""Pause with a reason: every pause form keeps why, who asked and when; resuming clears it; a
trigger stored into a paused group shows the group's; ``schedule_job(paused=True)`` stores it
paused in the same transaction. On SQLite and PostgreSQL (the ``db`` fixture)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from celery import Celery

from celery_quartz import Job, JobKey, Quartz, SimpleTrigger, TriggerKey
from celery_quartz.audit import current_actor
from celery_quartz.clock import FakeClock
from celery_quartz.errors import TriggerNotFoundError, ValidationError
from celery_quartz.pausing import PauseRecord
from celery_quartz.store import SqlStore, TriggerState
from tests.unit.conftest import T0, at


@pytest.fixture
def quartz(app: Celery, db: SqlStore, clock: FakeClock) -> Quartz:
    return Quartz(app, store=db, clock=clock)


def _every_minute(name: str, group: str = "reports") -> SimpleTrigger:
    return SimpleTrigger(
        key=TriggerKey(name, group),
        start_at=at(60),
        repeat_interval=timedelta(minutes=1),
        repeat_count=-1,
    )


def _schedule(quartz: Quartz, name: str, group: str = "reports", **pause: object) -> TriggerKey:
    trigger = _every_minute(name, group)
    quartz.schedule_job(Job(key=JobKey(name, group), task="tasks.report"), trigger, **pause)  # type: ignore[arg-type]
    return trigger.key


def _pause(quartz: Quartz, key: TriggerKey) -> PauseRecord | None:
    view = quartz.store.trigger_view(key)
    assert view is not None
    return view.pause


def test_a_paused_trigger_keeps_its_reason_who_and_when_and_the_resume_clears_them(
    quartz: Quartz, clock: FakeClock
) -> None:
    key = _schedule(quartz, "nightly")
    clock.advance(5)
    quartz.pause_trigger(key, reason="database migration", requested_by="alice")
    assert quartz.get_trigger_state(key) == TriggerState.PAUSED
    assert _pause(quartz, key) == PauseRecord("database migration", "alice", at(5))
    quartz.resume_trigger(key)
    assert quartz.get_trigger_state(key) == TriggerState.WAITING
    assert _pause(quartz, key) is None


def test_requested_by_defaults_to_the_callers_principal(quartz: Quartz) -> None:
    key = _schedule(quartz, "nightly")
    quartz.pause_trigger(key)
    assert _pause(quartz, key) == PauseRecord(None, current_actor().principal, T0)


def test_pausing_again_keeps_the_latest_record(quartz: Quartz, clock: FakeClock) -> None:
    key = _schedule(quartz, "nightly")
    quartz.pause_trigger(key, reason="first", requested_by="alice")
    clock.advance(60)
    quartz.pause_job(JobKey("nightly", "reports"), reason="second", requested_by="bob")
    assert _pause(quartz, key) == PauseRecord("second", "bob", at(60))


def test_every_pause_form_records_its_reason(quartz: Quartz) -> None:
    a, b, c = (_schedule(quartz, name) for name in ("a", "b", "c"))
    other = _schedule(quartz, "d", group="other")
    quartz.pause_job(JobKey("a", "reports"), reason="job", requested_by="ops")
    quartz.pause_triggers([b, c], reason="keys", requested_by="ops")
    quartz.pause_trigger_group("other", reason="group", requested_by="ops")
    assert [_pause(quartz, k).reason for k in (a, b, c, other)] == ["job", "keys", "keys", "group"]  # type: ignore[union-attr]
    quartz.resume_triggers([b, c])
    assert _pause(quartz, b) is None and _pause(quartz, c) is None
    assert quartz.paused_group_records() == {"other": PauseRecord("group", "ops", T0)}


def test_a_trigger_stored_into_a_paused_group_shows_the_groups_record(
    quartz: Quartz, clock: FakeClock
) -> None:
    quartz.pause_trigger_group("frozen", reason="quarter close", requested_by="finance")
    clock.advance(30)
    key = _schedule(quartz, "later", group="frozen")
    assert quartz.get_trigger_state(key) == TriggerState.PAUSED
    assert _pause(quartz, key) == PauseRecord("quarter close", "finance", T0)
    quartz.resume_trigger_group("frozen")
    assert _pause(quartz, key) is None
    assert quartz.paused_group_records() == {}


def test_pause_all_pauses_every_trigger_and_those_stored_later(quartz: Quartz) -> None:
    a = _schedule(quartz, "a")
    b = _schedule(quartz, "b", group="other")
    quartz.pause_all(reason="incident 42", requested_by="oncall")
    later = _schedule(quartz, "c", group="new-group")
    for key in (a, b, later):
        assert quartz.get_trigger_state(key) == TriggerState.PAUSED
        assert _pause(quartz, key) == PauseRecord("incident 42", "oncall", T0)
    assert quartz.get_paused_trigger_groups() == ["other", "reports"]
    assert quartz.paused_group_records()["*"] == PauseRecord("incident 42", "oncall", T0)
    quartz.resume_all()
    for key in (a, b, later):
        assert quartz.get_trigger_state(key) == TriggerState.WAITING
        assert _pause(quartz, key) is None
    assert quartz.get_paused_trigger_groups() == [] and quartz.paused_group_records() == {}


def test_schedule_job_paused_stores_the_trigger_paused_with_its_reason(quartz: Quartz) -> None:
    key = _schedule(quartz, "held", paused=True, pause_reason="waiting for sign-off")
    assert quartz.get_trigger_state(key) == TriggerState.PAUSED
    assert _pause(quartz, key) == PauseRecord("waiting for sign-off", current_actor().principal, T0)
    quartz.resume_trigger(key)
    assert quartz.get_trigger_state(key) == TriggerState.WAITING


def test_a_waiting_trigger_has_no_record(quartz: Quartz) -> None:
    assert _pause(quartz, _schedule(quartz, "nightly")) is None


@pytest.mark.parametrize(
    ("reason", "requested_by", "message"),
    [
        ("x" * 251, "alice", "pause reason is 251 characters; at most 250"),
        ("bad\x00reason", "alice", "pause reason holds a NUL character"),
        ("fine", " ", "pause requested_by must be a non-empty name"),
        ("fine", "y" * 256, "pause requested_by is 256 characters; at most 255"),
    ],
)
def test_a_bad_pause_is_refused_naming_what_is_wrong_and_changes_nothing(
    quartz: Quartz, reason: str, requested_by: str, message: str
) -> None:
    key = _schedule(quartz, "nightly")
    for call in (
        lambda: quartz.pause_trigger(key, reason=reason, requested_by=requested_by),
        lambda: quartz.pause_all(reason=reason, requested_by=requested_by),
        lambda: quartz.pause_trigger_group("reports", reason=reason, requested_by=requested_by),
    ):
        with pytest.raises(ValidationError, match=message):
            call()
    assert quartz.get_trigger_state(key) == TriggerState.WAITING
    assert quartz.get_paused_trigger_groups() == []


def test_a_pause_reason_without_paused_is_refused(quartz: Quartz) -> None:
    with pytest.raises(ValidationError, match="pause_reason is given, but paused is not set"):
        _schedule(quartz, "nightly", pause_reason="why")
    assert quartz.get_job(JobKey("nightly", "reports")) is None


def test_pausing_a_set_with_a_key_not_stored_pauses_none(quartz: Quartz) -> None:
    key = _schedule(quartz, "a")
    with pytest.raises(TriggerNotFoundError, match=r"reports\.missing"):
        quartz.pause_triggers([key, TriggerKey("missing", "reports")], reason="x")
    assert quartz.get_trigger_state(key) == TriggerState.WAITING
