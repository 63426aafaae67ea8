"""Retry policies: the value object, and a failed occurrence retried as a persisted firing.

The store half runs on the RAM store (and a SQLite file where persistence is the point) with a
fake clock: a firing is claimed, fired, started and completed as failed, as the worker does.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import select

from celery_quartz import RetryPolicy
from celery_quartz.clock import FakeClock, to_millis
from celery_quartz.errors import InvalidTriggerError, RetryPolicyError
from celery_quartz.firing import AcquiredFiring, Firing, FiringHeader
from celery_quartz.keys import RETRYING_JOBS_GROUP, JobKey, TriggerKey
from celery_quartz.store import MemoryStore, SqlStore, TriggerState
from celery_quartz.triggers import SimpleTrigger, Trigger
from tests.stores import store_at
from tests.unit.builders import (
    A,
    B,
    add,
    cron,
    fire_one,
    fire_times,
    one_shot,
    repeating,
    state,
)
from tests.unit.conftest import T0, at

WORKER = "celery@w1"
S = timedelta(seconds=1)
EXPONENTIAL = RetryPolicy.exponential(5, 30 * S, 2, timedelta(minutes=10))

# -- the value object ----------------------------------------------------------------------------


def test_a_fixed_policy_waits_the_same_delay_before_each_retry() -> None:
    policy = RetryPolicy.fixed(3, 45 * S)
    assert [policy.delay_for(n) for n in (1, 2, 3, 4)] == [45 * S, 45 * S, 45 * S, None]


def test_an_exponential_policy_multiplies_its_delay_up_to_the_cap() -> None:
    assert [EXPONENTIAL.delay_for(n) for n in range(1, 7)] == [
        30 * S,
        60 * S,
        120 * S,
        240 * S,
        480 * S,
        None,
    ]
    longer = RetryPolicy.exponential(7, 30 * S, 2, timedelta(minutes=10))
    assert [longer.delay_for(n) for n in (5, 6, 7)] == [480 * S, 600 * S, 600 * S]


def test_an_exponential_policy_without_a_cap_stops_growing_at_a_year() -> None:
    policy = RetryPolicy.exponential(5000, S, 3)
    assert policy.delay_for(4999) == timedelta(days=365)


def test_an_explicit_policy_repeats_its_last_delay_up_to_max_attempts() -> None:
    policy = RetryPolicy.explicit(S, 5 * S, 60 * S, max_attempts=5)
    assert [policy.delay_for(n) for n in range(1, 7)] == [S, 5 * S, 60 * S, 60 * S, 60 * S, None]
    assert RetryPolicy.explicit(S, 2 * S).max_attempts == 2


def test_none_never_retries_and_is_falsy() -> None:
    assert RetryPolicy.NONE.delay_for(1) is None
    assert not RetryPolicy.NONE and RetryPolicy.fixed(1, S)


def test_attempts_count_from_one() -> None:
    with pytest.raises(RetryPolicyError, match="attempt must be an integer from 1"):
        RetryPolicy.fixed(3, S).delay_for(0)


def test_delays_may_be_given_as_seconds() -> None:
    assert RetryPolicy.fixed(2, 1.5) == RetryPolicy.fixed(2, timedelta(milliseconds=1500))


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: RetryPolicy.fixed(0, S), "max_attempts"),
        (lambda: RetryPolicy.fixed(2.0, S), "max_attempts"),
        (lambda: RetryPolicy.fixed(True, S), "max_attempts"),
        (lambda: RetryPolicy.fixed(3, timedelta(0)), "delay"),
        (lambda: RetryPolicy.fixed(3, -S), "delay"),
        (lambda: RetryPolicy.fixed(3, "30s"), "delay"),
        (lambda: RetryPolicy.fixed(3, timedelta(days=400)), "delay"),
        (lambda: RetryPolicy.exponential(3, 0, 2), "initial_delay"),
        (lambda: RetryPolicy.exponential(3, S, 0.5), "factor"),
        (lambda: RetryPolicy.exponential(3, S, float("inf")), "factor"),
        (lambda: RetryPolicy.exponential(3, 10 * S, 2, 5 * S), "max_delay"),
        (lambda: RetryPolicy.explicit(), "at least one delay"),
        (lambda: RetryPolicy.explicit(S, -S), r"delays\[1\]"),
        (lambda: RetryPolicy.explicit(S, S, S, max_attempts=2), "max_attempts"),
    ],
)
def test_invalid_policies_are_refused_naming_the_field(make: Any, field: str) -> None:
    with pytest.raises(RetryPolicyError, match=field):
        make()


def test_only_the_factories_make_a_policy() -> None:
    with pytest.raises(TypeError, match=r"RetryPolicy\.fixed"):
        RetryPolicy(object(), "f", 1, (1000,))


@pytest.mark.parametrize(
    ("policy", "stored"),
    [
        (RetryPolicy.fixed(5, 30 * S), "f:5:30000"),
        (EXPONENTIAL, "e:5:30000:2:600000"),
        (RetryPolicy.exponential(3, S, 1.5), "e:3:1000:1.5"),
        (RetryPolicy.explicit(S, 5 * S, 60 * S), "x:3:1000,5000,60000"),
        (RetryPolicy.NONE, "n"),
    ],
)
def test_the_stored_form_is_compact_and_reads_back(policy: RetryPolicy, stored: str) -> None:
    assert policy.to_string() == stored
    assert RetryPolicy.parse(stored) == policy


def test_none_is_stored_as_n_and_no_policy_as_null() -> None:
    assert RetryPolicy.none() is RetryPolicy.NONE
    assert RetryPolicy.parse("n") is RetryPolicy.NONE
    assert RetryPolicy.parse_optional(None) is None


_delays = st.integers(min_value=1, max_value=10**9).map(lambda ms: timedelta(milliseconds=ms))
_policies = st.one_of(
    st.builds(RetryPolicy.fixed, st.integers(1, 10**6), _delays),
    st.builds(
        lambda n, first, factor, extra: RetryPolicy.exponential(
            n, first, factor, None if extra is None else first + extra
        ),
        st.integers(1, 10**6),
        _delays,
        st.floats(min_value=1, max_value=1000, allow_nan=False),
        st.none() | st.integers(0, 10**9).map(lambda ms: timedelta(milliseconds=ms)),
    ),
    st.lists(_delays, min_size=1, max_size=15).map(lambda ds: RetryPolicy.explicit(*ds)),
)


@given(_policies)
def test_every_policy_reads_back_from_its_stored_form_within_the_column(
    policy: RetryPolicy,
) -> None:
    stored = policy.to_string()
    assert len(stored) <= 200
    assert RetryPolicy.parse(stored) == policy


def test_a_policy_too_long_to_store_is_refused() -> None:
    with pytest.raises(RetryPolicyError, match="at most 200"):
        RetryPolicy.explicit(*[timedelta(days=300, milliseconds=i) for i in range(30)])


@pytest.mark.parametrize("stored", ["", "q:1:1000", "f:1", "f:x:1000", "x:2:", "e:1:1000:0.5"])
def test_a_malformed_stored_policy_is_refused_naming_it(stored: str) -> None:
    with pytest.raises(RetryPolicyError, match="cannot be read"):
        RetryPolicy.parse(stored)


# -- on a trigger, in the store ------------------------------------------------------------------


def test_a_trigger_whose_retry_policy_is_not_a_policy_is_invalid_naming_it() -> None:
    trigger = one_shot("t1", at(0))
    trigger.retry_policy = "f:5:30000"  # type: ignore[assignment]
    with pytest.raises(InvalidTriggerError, match=r"trigger DEFAULT\.t1: retry_policy"):
        trigger.validate()


def _stored_policy(store: SqlStore, name: str) -> str | None:
    t = store.tables.triggers
    with store.transaction() as conn:
        return conn.execute(select(t.c.retry_policy).where(t.c.trigger_name == name)).scalar_one()


def test_the_policy_is_stored_in_the_trigger_row_and_read_back(store: MemoryStore) -> None:
    add(store, _with(EXPONENTIAL, repeating("t1", at(0), 3600)), repeating("t2", at(0), 60))
    assert _stored_policy(store, "t1") == "e:5:30000:2:600000"
    assert _stored_policy(store, "t2") is None
    assert _trigger(store, "t1").retry_policy == EXPONENTIAL
    assert _trigger(store, "t2").retry_policy is None  # none of its own: inherited


def test_rescheduling_keeps_the_policy_of_the_new_trigger(store: MemoryStore) -> None:
    add(store, _with(EXPONENTIAL, repeating("t1", at(0), 3600)))
    store.replace_trigger(TriggerKey("t1"), _with(RetryPolicy.fixed(2, S), one_shot("t2", at(5))))
    assert _trigger(store, "t2").retry_policy == RetryPolicy.fixed(2, S)


# -- a failed firing is retried ------------------------------------------------------------------


def _with(policy: RetryPolicy, trigger: Trigger) -> Trigger:
    trigger.retry_policy = policy
    return trigger


def _trigger(store: SqlStore, name: str, group: str = "DEFAULT") -> Trigger:
    trigger = store.retrieve_trigger(TriggerKey(name, group))
    assert trigger is not None
    return trigger


def _fail(store: SqlStore, fire_id: str) -> None:
    assert store.start_execution(fire_id, WORKER)
    assert store.complete_execution(fire_id, failed=True)


def _retries(store: SqlStore) -> list[Trigger]:
    return [
        t for t in store.get_triggers_of_job(JobKey("job")) if t.key.group == RETRYING_JOBS_GROUP
    ]


def _fire_due(
    store: SqlStore, clock: FakeClock, instance: str = A
) -> tuple[AcquiredFiring, Firing]:
    """Claim and fire the one trigger due now."""
    [claimed] = store.acquire_next_triggers(
        instance, no_later_than=clock.now(), max_count=10, time_window=0
    )
    [firing] = store.fire(instance, [claimed])
    return claimed, firing


def _fail_after(store: SqlStore, clock: FakeClock, fire_id: str, seconds: float) -> None:
    assert store.start_execution(fire_id, WORKER)
    clock.advance(seconds)
    assert store.complete_execution(fire_id, failed=True)


def _fail_retries(store: SqlStore, clock: FakeClock, after: float) -> list[datetime]:
    """Fail every retry ``after`` seconds into it, until none is left; when each one was due."""
    due = []
    while retries := _retries(store):
        [retry] = retries
        assert retry.next_fire_time is not None
        due.append(retry.next_fire_time)
        clock.set(retry.next_fire_time)
        _, firing = _fire_due(store, clock)
        _fail_after(store, clock, firing.fire_instance_id, after)
    return due


def test_a_failure_is_retried_at_now_plus_the_first_delay_as_the_same_occurrence(
    store: MemoryStore, clock: FakeClock
) -> None:
    trigger = _with(EXPONENTIAL, repeating("t1", at(0), 3600))
    trigger.priority = 7
    trigger.data = {"from": "trigger"}
    add(store, trigger)
    fire_id = fire_one(store, "t1")
    clock.set(at(5))
    _fail(store, fire_id)
    [retry] = _retries(store)
    assert (retry.next_fire_time, retry.priority) == (at(35), 7)
    assert store.get_trigger_state(retry.key) == TriggerState.WAITING
    clock.set(at(35))
    claimed, firing = _fire_due(store, clock)
    assert (claimed.retry_attempt, claimed.origin_trigger_key) == (1, TriggerKey("t1"))
    assert (firing.trigger_key, firing.scheduled_millis) == (retry.key, to_millis(at(0)))
    header = FiringHeader.of(firing).fields
    assert (header["retry_attempt"], header["origin_trigger"], header["recovering"]) == (
        1,
        ["t1", "DEFAULT"],
        False,
    )
    assert firing.trigger_data == {"from": "trigger"}


def test_each_failed_retry_is_retried_after_the_next_delay_until_attempts_run_out(
    store: MemoryStore, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    add(store, _with(EXPONENTIAL, repeating("t1", at(0), 86_400)))
    _fail(store, fire_one(store, "t1"))
    with caplog.at_level(logging.INFO, logger="celery_quartz"):
        due = _fail_retries(store, clock, after=2)
    # Each retry fails 2 s after it is due: 30 s, 1 m, 2 m, 4 m, 8 m after each failure.
    assert [(d - T0).total_seconds() for d in due] == [30, 92, 214, 456, 938]
    assert "DEFAULT.t1 (scheduled 2026-03-02T09:00:00+00:00) failed after 5 retries" in caplog.text
    assert state(store, "t1") == TriggerState.WAITING
    assert _trigger(store, "t1").next_fire_time == at(86_400)


def test_the_documented_timeline(store: MemoryStore, clock: FakeClock) -> None:
    """docs/retries.md: every ten minutes, exponential(5, 30 s, 2, 10 min), failing after 5 s."""
    trigger = cron("t1", "0 0/10 * * * ?")
    add(store, _with(EXPONENTIAL, trigger))
    clock.set(at(0))
    _fail_after(store, clock, fire_one(store, "t1"), 5)
    due = _fail_retries(store, clock, after=5)
    assert [str(d - T0) for d in due] == ["0:00:35", "0:01:40", "0:03:45", "0:07:50"]
    assert _trigger(store, "t1").next_fire_time == at(600)


def test_each_retry_carries_its_attempt_number(store: MemoryStore, clock: FakeClock) -> None:
    add(store, _with(RetryPolicy.fixed(3, 10 * S), repeating("t1", at(0), 3600)))
    _fail(store, fire_one(store, "t1"))
    attempts = []
    while retries := _retries(store):
        clock.set(retries[0].next_fire_time)
        claimed, firing = _fire_due(store, clock)
        attempts.append((claimed.retry_attempt, FiringHeader.of(firing).fields["retry_attempt"]))
        _fail(store, firing.fire_instance_id)
    assert attempts == [(1, 1), (2, 2), (3, 3)]


def test_a_retry_that_succeeds_ends_the_retries(store: MemoryStore, clock: FakeClock) -> None:
    add(store, _with(RetryPolicy.fixed(3, 10 * S), repeating("t1", at(0), 3600)))
    _fail(store, fire_one(store, "t1"))
    clock.set(at(10))
    _, firing = _fire_due(store, clock)
    assert store.start_execution(firing.fire_instance_id, WORKER)
    assert store.complete_execution(firing.fire_instance_id)
    assert _retries(store) == []
    assert store.count_rows()["triggers"] == 1


def test_a_failure_under_no_policy_is_not_retried(
    store: MemoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    add(store, repeating("t1", at(0), 3600))
    with caplog.at_level(logging.INFO, logger="celery_quartz"):
        _fail(store, fire_one(store, "t1"))
    assert _retries(store) == []
    assert state(store, "t1") == TriggerState.WAITING
    assert "retry:" not in caplog.text  # no policy: no retry, and nothing to say about one


@pytest.mark.parametrize(
    ("delay", "retried"), [(58.998, True), (58.999, True), (59.0, False), (59.5, False)]
)
def test_a_retry_at_or_within_a_second_of_the_next_occurrence_is_dropped(
    store: MemoryStore, delay: float, retried: bool, caplog: pytest.LogCaptureFixture
) -> None:
    add(store, _with(RetryPolicy.fixed(3, delay), repeating("t1", at(0), 60)))
    with caplog.at_level(logging.INFO, logger="celery_quartz"):
        _fail(store, fire_one(store, "t1"))
    assert len(_retries(store)) == (1 if retried else 0)
    if not retried:
        assert "the next occurrence, 2026-03-02T09:01:00+00:00, wins" in caplog.text
    assert _trigger(store, "t1").next_fire_time == at(60)


@pytest.mark.parametrize(("delay", "retried"), [(40, True), (41, False)])
def test_a_retry_after_the_triggers_end_is_dropped(
    store: MemoryStore,
    clock: FakeClock,
    delay: float,
    retried: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ending = _with(RetryPolicy.fixed(3, delay), repeating("t1", at(0), 50))
    ending.end_at = at(90)
    add(store, ending)
    clock.set(at(50))
    _fire_due(store, clock)  # the occurrence at 0 s, late: the one at 50 s is the last
    _, last = _fire_due(store, clock)
    assert last.scheduled_millis == to_millis(at(50))
    with caplog.at_level(logging.INFO, logger="celery_quartz"):
        _fail(store, last.fire_instance_id)
    assert len(_retries(store)) == (1 if retried else 0)
    dropped = "retry 1 at 2026-03-02T09:01:31+00:00 dropped: it is after the trigger's end"
    assert (dropped in caplog.text) is not retried


def test_a_retry_does_not_count_against_a_simple_triggers_repeats(
    store: MemoryStore, clock: FakeClock
) -> None:
    add(store, _with(RetryPolicy.fixed(1, 10 * S), repeating("t1", at(0), 600, count=2)))
    _fail(store, fire_one(store, "t1"))
    clock.set(at(10))
    _fire_due(store, clock)
    trigger = _trigger(store, "t1")
    assert isinstance(trigger, SimpleTrigger)
    assert (trigger.times_triggered, trigger.repeat_count) == (1, 2)
    assert fire_times(store, clock, "t1") == [at(600), at(1200)]


def test_a_one_shot_trigger_is_retried_to_its_last_attempt(
    store: MemoryStore, clock: FakeClock
) -> None:
    add(store, _with(RetryPolicy.exponential(3, 10 * S), one_shot("t1", at(0))))
    _fail(store, fire_one(store, "t1"))
    # The one-shot trigger is gone once its firing ends; its retries carry its policy on.
    assert store.retrieve_trigger(TriggerKey("t1")) is None
    due = _fail_retries(store, clock, after=0)
    assert [(d - T0).total_seconds() for d in due] == [10, 30, 70]
    assert store.count_rows()["triggers"] == 0 and store.count_rows()["jobs"] == 0


def test_a_retry_is_persisted_and_another_scheduler_fires_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/quartz.db"
    clock = FakeClock(T0)
    first = store_at(url, "s", clock=clock)
    first.create_tables()
    add(first, _with(RetryPolicy.fixed(2, 30 * S), repeating("t1", at(0), 3600)))
    _fail(first, fire_one(first, "t1"))
    first.dispose()  # the scheduler and the worker are gone

    second = store_at(url, "s", clock=clock)
    clock.set(at(30))
    claimed, firing = _fire_due(second, clock, instance=B)
    assert (claimed.trigger.key.group, claimed.retry_attempt, firing.fired_by) == (
        RETRYING_JOBS_GROUP,
        1,
        B,
    )
    assert firing.scheduled_millis == to_millis(at(0))
    second.dispose()


def test_a_retry_firing_recovered_from_a_dead_worker_keeps_its_attempt(
    store: MemoryStore, clock: FakeClock
) -> None:
    add(
        store,
        _with(RetryPolicy.fixed(2, 30 * S), repeating("t1", at(0), 3600)),
        requests_recovery=True,
    )
    _fail(store, fire_one(store, "t1"))
    clock.set(at(30))
    _, retry = _fire_due(store, clock)
    assert store.start_execution(retry.fire_instance_id, WORKER)
    store.recover_worker(WORKER, seen_checkin_millis=None)
    claimed, recovered = _fire_due(store, clock)
    assert (recovered.recovering, recovered.retry_attempt, recovered.origin_trigger_key) == (
        True,
        1,
        TriggerKey("t1"),
    )
    assert recovered.scheduled_millis == to_millis(at(0))
    # Failing the recovered retry goes on to the second attempt.
    _fail(store, recovered.fire_instance_id)
    clock.set(at(60))
    claimed, _ = _fire_due(store, clock)
    assert claimed.retry_attempt == 2


def test_a_stored_delay_past_what_a_timedelta_holds_is_refused_with_our_error() -> None:
    # Found by the fuzz campaign: OverflowError escaped from the parser.
    with pytest.raises(RetryPolicyError, match="cannot be read"):
        RetryPolicy.parse("f:5:30010000000000000000000004")
