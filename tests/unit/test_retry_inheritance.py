"""Retry policies inherited (the trigger's, else its job's, else ``quartz_default_retry_policy``;
``RetryPolicy.none()`` at any level stops the levels after it), and the pause of a trigger whose
occurrence fails with no retry left (``quartz_pause_when_retries_exhausted``, or the trigger's
own ``pause_when_retries_exhausted``). On the RAM store with a fake clock, as in test_retry.py;
unit-tested here, and with real processes in tests/integration/test_retries.py."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from celery_quartz import Job, JobKey, RetryPolicy, TriggerKey
from celery_quartz.clock import FakeClock
from celery_quartz.config import Settings
from celery_quartz.errors import ConfigurationError, InvalidTriggerError, ValidationError
from celery_quartz.keys import BEAT_SCHEDULE_GROUP
from celery_quartz.pausing import RETRIES_EXHAUSTED, PauseRecord
from celery_quartz.store import MemoryStore, TriggerState, open_store
from celery_quartz.store.views import AuditFilter, FiringOutcome
from celery_quartz.triggers import Trigger
from tests.unit.builders import fire_one, repeating, state
from tests.unit.conftest import T0, at
from tests.unit.test_retry import WORKER, _fire_due, _retries

S = timedelta(seconds=1)
JOB_POLICY = RetryPolicy.fixed(2, 10 * S)
TRIGGER_POLICY = RetryPolicy.fixed(1, 5 * S)
DEFAULT_POLICY = RetryPolicy.fixed(3, 20 * S)


def _store(clock: FakeClock, **options: Any) -> MemoryStore:
    return MemoryStore(scheduler_name="unit", clock=clock, **options)


def _add(store: MemoryStore, trigger: Trigger, *, job_policy: RetryPolicy | None = None) -> None:
    job = Job(key=JobKey("job"), task="tasks.work", retry_policy=job_policy)
    store.store_jobs_and_triggers([(job, [trigger])])


def _hourly(policy: RetryPolicy | None = None, **fields: Any) -> Trigger:
    trigger = repeating("t1", at(0), 3600)
    trigger.retry_policy = policy
    for name, value in fields.items():
        setattr(trigger, name, value)
    return trigger


def _fail(store: MemoryStore, fire_id: str, message: str = "boom") -> None:
    assert store.start_execution(fire_id, WORKER)
    outcome = FiringOutcome.of_exception(RuntimeError(message))
    assert store.complete_execution(fire_id, outcome=outcome)


def _first_retry_delay(store: MemoryStore) -> timedelta | None:
    """Fail the occurrence of t1 due at T0; the wait before its retry, or None (no retry)."""
    _fail(store, fire_one(store, "t1"))
    retries = _retries(store)
    if not retries:
        return None
    [retry] = retries
    assert retry.next_fire_time is not None
    return retry.next_fire_time - T0


@pytest.mark.parametrize(
    ("trigger_policy", "job_policy", "default", "delay"),
    [
        # The trigger's own policy wins over its job's and the default.
        (TRIGGER_POLICY, JOB_POLICY, DEFAULT_POLICY, 5 * S),
        # A trigger with none takes its job's, over the default.
        (None, JOB_POLICY, DEFAULT_POLICY, 10 * S),
        # Neither has one: the scheduler's default.
        (None, None, DEFAULT_POLICY, 20 * S),
        # No level has one: no retry.
        (None, None, None, None),
        # none() on the trigger stops its job's and the default.
        (RetryPolicy.none(), JOB_POLICY, DEFAULT_POLICY, None),
        # none() on the job stops the default.
        (None, RetryPolicy.none(), DEFAULT_POLICY, None),
    ],
)
def test_the_policy_is_the_triggers_else_the_jobs_else_the_schedulers_default(
    clock: FakeClock,
    trigger_policy: RetryPolicy | None,
    job_policy: RetryPolicy | None,
    default: RetryPolicy | None,
    delay: timedelta | None,
) -> None:
    store = _store(clock, default_retry_policy=default)
    _add(store, _hourly(trigger_policy), job_policy=job_policy)
    assert _first_retry_delay(store) == delay


def test_an_inherited_policy_runs_to_its_last_attempt(clock: FakeClock) -> None:
    """The retry firing carries the policy that applied: its own failure goes on under it."""
    store = _store(clock)
    _add(store, _hourly(), job_policy=JOB_POLICY)
    _fail(store, fire_one(store, "t1"))
    attempts = []
    while retries := _retries(store):
        [retry] = retries
        assert retry.next_fire_time is not None
        clock.set(retry.next_fire_time)
        claimed, firing = _fire_due(store, clock)
        attempts.append(claimed.retry_attempt)
        _fail(store, firing.fire_instance_id)
    assert attempts == [1, 2]


def test_the_job_and_its_policy_are_stored_and_read_back(clock: FakeClock) -> None:
    store = _store(clock)
    _add(store, _hourly(), job_policy=JOB_POLICY)
    job = store.retrieve_job(JobKey("job"))
    assert job is not None and job.retry_policy == JOB_POLICY
    trigger = store.retrieve_trigger(TriggerKey("t1"))
    assert trigger is not None and trigger.retry_policy is None


def test_a_job_whose_retry_policy_is_not_a_policy_is_refused_naming_it() -> None:
    job = Job(key=JobKey("job"), task="tasks.work", retry_policy="f:1:1000")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match=r"job DEFAULT\.job: retry_policy must be"):
        job.validate()


# -- the scheduler's settings ---------------------------------------------------------------------


def test_the_default_policy_setting_takes_a_policy_or_its_stored_form() -> None:
    assert Settings(default_retry_policy="f:3:20000").retry_default == DEFAULT_POLICY
    assert Settings(default_retry_policy=DEFAULT_POLICY).retry_default == DEFAULT_POLICY
    assert Settings().retry_default is None
    with pytest.raises(ConfigurationError, match="quartz_default_retry_policy"):
        Settings(default_retry_policy="every so often").validate()
    with pytest.raises(ConfigurationError, match="quartz_default_retry_policy"):
        Settings(default_retry_policy=30).validate()
    with pytest.raises(ConfigurationError, match="quartz_pause_when_retries_exhausted"):
        Settings(pause_when_retries_exhausted="yes").validate()  # type: ignore[arg-type]


def test_the_store_opened_from_settings_applies_them(clock: FakeClock, tmp_path: Any) -> None:
    settings = Settings(
        store_url=f"sqlite:///{tmp_path}/s.db",
        default_retry_policy="f:3:20000",
        pause_when_retries_exhausted=True,
        schema_auto_upgrade=True,
    )
    store = open_store(settings, clock=clock, upgrade_schema=True)
    try:
        _add(store, _hourly())  # type: ignore[arg-type]
        assert _first_retry_delay(store) == 20 * S  # type: ignore[arg-type]
        assert store.context.pause_when_retries_exhausted is True
    finally:
        store.dispose()


# -- pausing the trigger whose retries ran out -----------------------------------------------------


def _fail_to_exhaustion(store: MemoryStore, clock: FakeClock, message: str) -> None:
    _fail(store, fire_one(store, "t1"), message)
    while retries := _retries(store):
        [retry] = retries
        assert retry.next_fire_time is not None
        clock.set(retry.next_fire_time)
        _, firing = _fire_due(store, clock)
        _fail(store, firing.fire_instance_id, message)


def test_the_setting_pauses_a_trigger_whose_retries_ran_out_with_the_failures_message(
    clock: FakeClock,
) -> None:
    store = _store(clock, pause_when_retries_exhausted=True)
    _add(store, _hourly(TRIGGER_POLICY))
    _fail(store, fire_one(store, "t1"), "first")
    # A retry is still to come: not paused.
    assert state(store, "t1") == TriggerState.WAITING
    [retry] = _retries(store)
    assert retry.next_fire_time is not None
    clock.set(retry.next_fire_time)
    _, firing = _fire_due(store, clock)
    _fail(store, firing.fire_instance_id, "upstream API answered 503")
    assert state(store, "t1") == TriggerState.PAUSED
    view = store.trigger_view(TriggerKey("t1"))
    assert view is not None
    assert view.pause == PauseRecord("upstream API answered 503", RETRIES_EXHAUSTED, at(5))
    [entry] = store.audit(AuditFilter(principal=RETRIES_EXHAUSTED)).items
    assert (entry.via, entry.action, entry.target) == ("scheduler", "pause_trigger", "DEFAULT.t1")
    assert entry.changes["state"] == ["WAITING", "PAUSED"]
    assert entry.changes["pause_reason"] == [None, "upstream API answered 503"]
    # Resuming clears it, as any pause.
    store.resume_trigger(TriggerKey("t1"))
    assert state(store, "t1") == TriggerState.WAITING


def test_with_no_policy_the_first_failure_has_no_retry_left(clock: FakeClock) -> None:
    store = _store(clock, pause_when_retries_exhausted=True)
    _add(store, _hourly())
    _fail(store, fire_one(store, "t1"), "no retries at all")
    assert state(store, "t1") == TriggerState.PAUSED


@pytest.mark.parametrize(
    ("setting", "own", "paused"),
    [(False, None, False), (True, None, True), (False, True, True), (True, False, False)],
)
def test_the_triggers_own_flag_wins_over_the_setting(
    clock: FakeClock, setting: bool, own: bool | None, paused: bool
) -> None:
    store = _store(clock, pause_when_retries_exhausted=setting)
    _add(store, _hourly(TRIGGER_POLICY, pause_when_retries_exhausted=own))
    _fail_to_exhaustion(store, clock, "boom")
    expected = TriggerState.PAUSED if paused else TriggerState.WAITING
    assert state(store, "t1") == expected


def test_a_retry_dropped_for_the_next_occurrence_does_not_pause(clock: FakeClock) -> None:
    """The policy has attempts left; the next occurrence wins over the retry. Not exhausted."""
    store = _store(clock, pause_when_retries_exhausted=True)
    trigger = repeating("t1", at(0), 60)
    trigger.retry_policy = RetryPolicy.fixed(3, 120 * S)
    _add(store, trigger)
    _fail(store, fire_one(store, "t1"))
    assert _retries(store) == []
    assert state(store, "t1") == TriggerState.WAITING


def test_a_long_message_is_cut_to_the_reasons_bound(clock: FakeClock) -> None:
    store = _store(clock, pause_when_retries_exhausted=True)
    _add(store, _hourly())
    _fail(store, fire_one(store, "t1"), "x" * 1000)
    view = store.trigger_view(TriggerKey("t1"))
    assert view is not None and view.pause is not None
    assert view.pause.reason == "x" * 250


def test_a_trigger_flag_that_is_not_a_boolean_is_refused_naming_it() -> None:
    trigger = _hourly(pause_when_retries_exhausted="yes")
    with pytest.raises(InvalidTriggerError, match="pause_when_retries_exhausted must be"):
        trigger.validate()


# -- from scheduling files and beat_schedule ------------------------------------------------------

_JSON = """{
  "Jobs": [{"Name": "job", "JobType": "tasks.work", "Durable": true,
            "RetryPolicy": {"Fixed": {"MaxAttempts": 2, "Delay": 10000}}}],
  "Triggers": [
    {"Name": "inherits", "JobName": "job", "PauseWhenRetriesExhausted": true,
     "Simple": {"RepeatCount": -1, "RepeatInterval": 3600000}},
    {"Name": "never", "JobName": "job", "RetryPolicy": {"None": {}},
     "PauseWhenRetriesExhausted": false,
     "Simple": {"RepeatCount": -1, "RepeatInterval": 3600000}}
  ]
}"""

_XML = """<?xml version="1.0" encoding="UTF-8"?>
<job-scheduling-data xmlns="http://quartznet.sourceforge.net/JobSchedulingData" version="2.0">
  <schedule>
    <job>
      <name>job</name>
      <job-type>tasks.work</job-type>
      <durable>true</durable>
      <retry-policy><fixed><max-attempts>2</max-attempts><delay>10000</delay></fixed></retry-policy>
    </job>
    <trigger>
      <simple>
        <name>never</name>
        <job-name>job</job-name>
        <retry-policy><none/></retry-policy>
        <pause-when-retries-exhausted>true</pause-when-retries-exhausted>
        <repeat-count>-1</repeat-count>
        <repeat-interval>3600000</repeat-interval>
      </simple>
    </trigger>
  </schedule>
</job-scheduling-data>
"""


def test_a_scheduling_file_sets_the_jobs_policy_none_and_the_pause_flag(
    app: Any, clock: FakeClock, tmp_path: Any
) -> None:
    from celery_quartz.scheduling_files import export_scheduling_data, load_scheduling_files

    store = _store(clock)
    try:
        (tmp_path / "retries.json").write_text(_JSON)
        load_scheduling_files(app, store, [tmp_path / "retries.json"])
        job = store.retrieve_job(JobKey("job"))
        assert job is not None and job.retry_policy == JOB_POLICY
        inherits = store.retrieve_trigger(TriggerKey("inherits"))
        never = store.retrieve_trigger(TriggerKey("never"))
        assert inherits is not None and never is not None
        assert (inherits.retry_policy, inherits.pause_when_retries_exhausted) == (None, True)
        assert (never.retry_policy, never.pause_when_retries_exhausted) == (
            RetryPolicy.none(),
            False,
        )
        exported = export_scheduling_data(store, "json")
        tree = json.loads(exported)
        assert tree["Jobs"][0]["RetryPolicy"] == {"Fixed": {"MaxAttempts": 2, "Delay": 10000}}
        by_name = {t["Name"]: t for t in tree["Triggers"]}
        assert by_name["never"]["RetryPolicy"] == {"None": {}}
        assert by_name["never"]["PauseWhenRetriesExhausted"] is False
        assert "RetryPolicy" not in by_name["inherits"]
        again = _store(clock)
        try:
            (tmp_path / "export.json").write_text(exported)
            load_scheduling_files(app, again, [tmp_path / "export.json"])
            assert export_scheduling_data(again, "json") == exported
        finally:
            again.dispose()
    finally:
        store.dispose()


def test_an_xml_file_reads_none_and_the_pause_flag(
    app: Any, clock: FakeClock, tmp_path: Any
) -> None:
    from celery_quartz.scheduling_files import load_scheduling_files

    store = _store(clock)
    try:
        (tmp_path / "retries.xml").write_text(_XML)
        load_scheduling_files(app, store, [tmp_path / "retries.xml"])
        job = store.retrieve_job(JobKey("job"))
        assert job is not None and job.retry_policy == JOB_POLICY
        never = store.retrieve_trigger(TriggerKey("never"))
        assert never is not None
        assert (never.retry_policy, never.pause_when_retries_exhausted) == (
            RetryPolicy.none(),
            True,
        )
    finally:
        store.dispose()


def _import_entry(app: Any, store: MemoryStore, clock: FakeClock, quartz: dict[str, Any]) -> None:
    from celery_quartz.beat_schedule import import_beat_schedule

    entry = {"task": "tasks.work", "schedule": 60.0, "quartz": quartz}
    import_beat_schedule(app, store, clock, {"report": entry}, max_data_bytes=64 * 1024)


def test_a_beat_schedule_entry_sets_the_pause_flag_and_refuses_a_bad_one(
    app: Any, clock: FakeClock
) -> None:
    store = _store(clock)
    key = TriggerKey("report", BEAT_SCHEDULE_GROUP)
    try:
        _import_entry(app, store, clock, {"pause_when_retries_exhausted": True})
        trigger = store.retrieve_trigger(key)
        assert trigger is not None
        assert (trigger.retry_policy, trigger.pause_when_retries_exhausted) == (None, True)
        with pytest.raises(ValidationError, match="pause_when_retries_exhausted must be True"):
            _import_entry(app, store, clock, {"pause_when_retries_exhausted": "yes"})
        # The refused entry left what was stored as it was.
        kept = store.retrieve_trigger(key)
        assert kept is not None and kept.pause_when_retries_exhausted is True
    finally:
        store.dispose()
