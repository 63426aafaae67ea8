"""What the store writes by batch, on each dialect and driver: a claimed batch's fired rows and
trigger advances (one statement each; on PostgreSQL one JSON parameter per batch), publication
recorded per instance, and many jobs and triggers stored in a few statements."""

from __future__ import annotations

import dataclasses

import pytest
from sqlalchemy import event, select

from celery_quartz import Job, JobKey, TriggerKey
from celery_quartz.clock import to_millis
from celery_quartz.errors import JobNotFoundError, ObjectAlreadyExistsError
from celery_quartz.store import FiringState, SqlStore, TriggerState
from celery_quartz.triggers import Trigger
from tests.unit.builders import A, B, add, repeating
from tests.unit.conftest import at

#: Key parts a JSON parameter must carry through unchanged.
AWKWARD = ['quote"d', "back\\slash", "naïve ünïcode ☃", "{braces}", "it's", "tab\there"]


def test_a_batch_of_awkward_names_is_fired_and_advanced_exactly(db: SqlStore) -> None:
    for i, name in enumerate(AWKWARD):
        add(db, repeating(name, at(i), 60, job=f"job {name}"), job=f"job {name}")
    claim = db.claim(
        A,
        no_later_than=at(10),
        max_count=10,
        time_window=10.0,
    )
    assert sorted(f.trigger_key.name for f in claim.firings) == sorted(AWKWARD)

    f, t = db.tables.fired_triggers, db.tables.triggers
    with db.transaction() as conn:
        fired = {
            r.trigger_name: r
            for r in conn.execute(select(f).where(f.c.sched_name == db.scheduler_name))
        }
        triggers = {
            r.trigger_name: r
            for r in conn.execute(select(t).where(t.c.sched_name == db.scheduler_name))
        }
    assert set(fired) == set(triggers) == set(AWKWARD)
    for i, name in enumerate(AWKWARD):
        row = fired[name]
        assert (row.job_name, row.state, row.instance_name) == (f"job {name}", "FIRED", A)
        assert row.sched_time == to_millis(at(i))
        advanced = triggers[name]
        assert advanced.trigger_state == TriggerState.WAITING
        assert advanced.prev_fire_time == to_millis(at(i))
        assert advanced.next_fire_time == to_millis(at(i + 60))
        assert advanced.times_triggered == 1


def test_publication_is_recorded_for_the_instance_that_fired(db: SqlStore) -> None:
    add(db, repeating("t1", at(0), 60), repeating("t2", at(0), 60))
    claim = db.claim(A, no_later_than=at(1), max_count=10, time_window=0.0)
    ids = [firing.fire_instance_id for firing in claim.firings]
    assert len(ids) == 2
    db.mark_published(B, ids)
    assert set(db.firing_states().values()) == {FiringState.FIRED}
    db.mark_published(A, [(ids[0], 1234), ids[1]])
    assert db.firing_states() == dict.fromkeys(ids, FiringState.PUBLISHED)
    f = db.tables.fired_triggers
    with db.transaction() as conn:
        times = {r.fire_instance_id: r.published_time for r in conn.execute(select(f))}
    assert times[ids[0]] == 1234 and times[ids[1]] == to_millis(db.clock.now())


# -- storing jobs and triggers by batch -----------------------------------------------------------


def _entries(count: int, *, job_prefix: str = "job") -> list[tuple[Job, list[Trigger]]]:
    return [
        (
            Job(key=JobKey(f"{job_prefix}-{i}", "imported"), task="tasks.work"),
            [
                dataclasses.replace(
                    repeating(f"t-{i}", at(i % 60), 60),
                    key=TriggerKey(f"t-{i}", "imported"),
                    job_key=JobKey(f"{job_prefix}-{i}", "imported"),
                )
            ],
        )
        for i in range(count)
    ]


def test_many_jobs_and_triggers_are_stored_in_a_few_statements(db: SqlStore) -> None:
    statements: list[str] = []
    event.listen(db.engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    db.store_jobs_and_triggers(_entries(1_200))  # more keys than one select reads
    assert len(statements) <= 20, statements
    assert len(db.job_keys("imported")) == 1_200
    assert db.get_trigger_state(TriggerKey("t-1199", "imported")) == TriggerState.WAITING


def test_a_key_given_twice_or_already_stored_stores_nothing(db: SqlStore) -> None:
    entries = _entries(3)
    with pytest.raises(ObjectAlreadyExistsError, match="t-1"):
        db.store_jobs_and_triggers([*entries, (None, entries[1][1])])
    assert db.job_keys("imported") == []
    db.store_jobs_and_triggers(entries[1:])
    # The error names the first key given that is stored.
    with pytest.raises(ObjectAlreadyExistsError, match=r"job imported\.job-1 already"):
        db.store_jobs_and_triggers(entries)
    assert len(db.job_keys("imported")) == 2
    db.store_jobs_and_triggers(entries, replace=True)
    assert len(db.job_keys("imported")) == 3


def test_a_trigger_may_name_a_job_given_later_in_the_same_batch(db: SqlStore) -> None:
    [(job, [trigger])] = _entries(1)
    db.store_jobs_and_triggers([(None, [trigger]), (job, [])])
    assert db.get_trigger_state(trigger.key) == TriggerState.WAITING


def test_a_trigger_of_a_job_neither_stored_nor_given_stores_nothing(db: SqlStore) -> None:
    [(job, [trigger])] = _entries(1)
    orphan = dataclasses.replace(trigger, key=TriggerKey("orphan"), job_key=JobKey("missing"))
    with pytest.raises(JobNotFoundError, match="missing"):
        db.store_jobs_and_triggers([(job, [trigger, orphan])])
    assert db.job_keys("imported") == []
    assert db.get_trigger_state(trigger.key) == "NONE"


def test_stored_triggers_start_paused_or_blocked_as_their_group_and_job_say(
    db: SqlStore,
) -> None:
    add(
        db,
        repeating("running", at(0), 60, job="exclusive"),
        job="exclusive",
        disallow_concurrent=True,
    )
    claim = db.claim(A, no_later_than=at(1), max_count=10, time_window=0.0)
    assert len(claim.firings) == 1  # a firing of "exclusive" in flight
    db.pause_trigger_group("quiet")
    db.store_jobs_and_triggers(
        [
            (None, [repeating("later", at(5), 60, job="exclusive")]),
            (
                Job(key=JobKey("calm"), task="tasks.work"),
                [
                    dataclasses.replace(
                        repeating("hushed", at(5), 60, job="calm"),
                        key=TriggerKey("hushed", "quiet"),
                    )
                ],
            ),
        ]
    )
    assert db.get_trigger_state(TriggerKey("later")) == TriggerState.BLOCKED
    assert db.get_trigger_state(TriggerKey("hushed", "quiet")) == TriggerState.PAUSED
