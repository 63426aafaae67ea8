"""The audit: who made a change (the actor), what changed (the redacted diff), and the row every
JobStore write records in its own transaction (docs/history.md#audit)."""

from __future__ import annotations

import getpass
import threading
from datetime import timedelta
from typing import Any

import pytest
from celery import Celery
from sqlalchemy import event
from sqlalchemy.exc import DBAPIError

from celery_quartz.audit import (
    REDACTED,
    Actor,
    Redaction,
    acting_as,
    current_actor,
    diff,
    os_user,
)
from celery_quartz.calendars import HolidayCalendar
from celery_quartz.client import Quartz
from celery_quartz.clock import FakeClock, to_millis
from celery_quartz.config import Settings
from celery_quartz.definitions import owned_group
from celery_quartz.errors import InvalidTriggerError, ObjectAlreadyExistsError, ValidationError
from celery_quartz.job import Job
from celery_quartz.keys import JobKey, TriggerKey
from celery_quartz.store import MemoryStore, SqlStore, open_store
from celery_quartz.triggers import CronTrigger
from celery_quartz.triggers.base import TriggerDetailsUpdate
from tests.stores import audit_rows
from tests.unit.builders import acquire, add, cron, one_shot
from tests.unit.conftest import T0, at

# -- the diff -------------------------------------------------------------------------------------


def test_diff_keeps_only_the_fields_that_changed() -> None:
    before = {"task": "tasks.a", "durable": False, "description": "x"}
    after = {"task": "tasks.a", "durable": True, "description": "x"}
    assert diff(before, after) == {"durable": [False, True]}


def test_diff_of_an_added_or_removed_object_lists_every_field_against_none() -> None:
    fields = {"task": "tasks.a", "data": {"n": 1}}
    assert diff(None, fields) == {"task": [None, "tasks.a"], "data": [None, {"n": 1}]}
    assert diff(fields, None) == {"task": ["tasks.a", None], "data": [{"n": 1}, None]}


def test_diff_compares_mappings_entry_by_entry() -> None:
    before = {"data": {"rows": 10, "mode": "full", "nested": {"a": 1, "b": 2}}}
    after = {"data": {"rows": 10, "mode": "delta", "nested": {"a": 1, "b": 3}, "new": True}}
    assert diff(before, after) == {
        "data.mode": ["full", "delta"],
        "data.nested.b": [2, 3],
        "data.new": [None, True],
    }


def test_diff_of_identical_definitions_is_empty() -> None:
    fields = {"task": "t", "kwargs": {"password": "s3cret"}, "args": [1, 2]}
    assert diff(fields, dict(fields), Redaction()) == {}


def test_a_changed_secret_shows_as_changed_but_redacted() -> None:
    before = {"kwargs": {"db_password": "old", "user": "ann"}}
    after = {"kwargs": {"db_password": "new", "user": "bob"}}
    assert diff(before, after, Redaction()) == {
        "kwargs.db_password": [REDACTED, REDACTED],
        "kwargs.user": ["ann", "bob"],
    }


def test_secrets_inside_an_added_value_are_redacted_at_any_depth() -> None:
    after = {
        "data": {"api": {"Token": "t0k", "url": "https://x"}, "list": [{"secret": 1}, 2]},
        "args": [{"Authorization": "Bearer x"}],
    }
    assert diff(None, after, Redaction()) == {
        "data": [
            None,
            {"api": {"Token": REDACTED, "url": "https://x"}, "list": [{"secret": REDACTED}, 2]},
        ],
        "args": [None, [{"Authorization": REDACTED}]],
    }


def test_a_secret_added_or_removed_shows_none_on_the_side_it_is_missing() -> None:
    assert diff({"data": {}}, {"data": {"password": "p"}}, Redaction()) == {
        "data.password": [None, REDACTED]
    }
    assert diff({"data": {"password": "p"}}, {"data": {}}, Redaction()) == {
        "data.password": [REDACTED, None]
    }


def test_top_level_field_names_are_never_redacted_only_what_they_hold() -> None:
    # "monkey" matches the default pattern's "key"; a field of the definition is no secret.
    assert diff({"monkey": 1}, {"monkey": 2}, Redaction()) == {"monkey": [1, 2]}


def test_the_redaction_pattern_is_the_settings_one_and_empty_redacts_nothing() -> None:
    after = {"data": {"password": "p", "apikey": "k"}}
    assert diff(None, after, Redaction("apikey")) == {
        "data": [None, {"password": "p", "apikey": REDACTED}]
    }
    assert diff(None, after, Redaction("")) == {"data": [None, after["data"]]}


# -- the actor ------------------------------------------------------------------------------------


def test_the_default_actor_is_the_os_user_through_the_client() -> None:
    assert current_actor() == Actor(getpass.getuser(), "client")


def test_acting_as_sets_the_actor_for_its_block_and_blocks_nest() -> None:
    with acting_as("alice", "api") as outer:
        assert current_actor() == outer == Actor("alice", "api")
        with acting_as("file:jobs.xml", "file"):
            assert current_actor() == Actor("file:jobs.xml", "file")
        assert current_actor() == outer
    assert current_actor().via == "client"


def test_acting_as_is_per_thread() -> None:
    seen: list[Actor] = []
    with acting_as("alice", "api"):
        thread = threading.Thread(target=lambda: seen.append(current_actor()))
        thread.start()
        thread.join()
    assert seen == [Actor(getpass.getuser(), "client")]


def test_an_actor_names_a_known_via_and_a_principal() -> None:
    with pytest.raises(ValidationError, match="via must be one of"), acting_as("alice", "email"):
        pass
    with pytest.raises(ValidationError, match="principal"), acting_as(" ", "api"):
        pass


def test_no_os_user_falls_back_to_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    # A container's uid with no passwd entry and no LOGNAME/USER: getpass raises.
    def no_user() -> str:
        raise OSError("No username set in the environment")

    monkeypatch.setattr(getpass, "getuser", no_user)
    assert os_user() == "unknown"
    assert current_actor() == Actor("unknown", "client")


# -- each JobStore write records its row ------------------------------------------------------


def job(name: str = "job", **fields: Any) -> Job:
    return Job(key=JobKey(name), task="tasks.work", **fields)


def actions(store: SqlStore) -> list[tuple[str, str, str | None]]:
    return [(r["action"], r["target_kind"], r["target"]) for r in audit_rows(store)]


def test_scheduling_a_job_records_the_job_and_its_trigger_as_the_actor_at_the_store_clock(
    store: MemoryStore, clock: FakeClock
) -> None:
    clock.advance(timedelta(seconds=5))
    with acting_as("alice", "api"):
        store.store_jobs_and_triggers([(job(data={"rows": 3}), [one_shot("t", at(60))])])
    rows = audit_rows(store)
    assert [(r["action"], r["target_kind"], r["target"]) for r in rows] == [
        ("schedule_job", "job", "DEFAULT.job"),
        ("schedule_trigger", "trigger", "DEFAULT.t"),
    ]
    assert {(r["principal"], r["via"], r["event_time"]) for r in rows} == {
        ("alice", "api", to_millis(at(5)))
    }
    assert rows[0]["changes"]["task"] == [None, "tasks.work"]
    assert rows[0]["changes"]["data"] == [None, {"rows": 3}]
    assert rows[1]["changes"]["job"] == [None, "DEFAULT.job"]
    assert rows[1]["changes"]["start_at"] == [None, at(60).isoformat()]


def test_replacing_records_only_what_changed_and_an_identical_replace_records_nothing(
    store: MemoryStore,
) -> None:
    trigger = cron("t", "0 0 * * * ?")
    store.store_jobs_and_triggers([(job(data={"rows": 3, "mode": "full"}), [trigger])])
    store.store_jobs_and_triggers(
        [(job(data={"rows": 3, "mode": "full"}), [cron("t", "0 0 * * * ?")])], replace=True
    )
    assert len(audit_rows(store)) == 2
    store.store_jobs_and_triggers(
        [(job(data={"rows": 3, "mode": "delta"}), [cron("t", "0 30 * * * ?")])], replace=True
    )
    replaced = audit_rows(store)[2:]
    assert [(r["action"], r["changes"]) for r in replaced] == [
        ("replace_job", {"data.mode": ["full", "delta"]}),
        ("replace_trigger", {"expression": ["0 0 * * * ?", "0 30 * * * ?"]}),
    ]


def test_secrets_in_job_and_trigger_data_are_stored_redacted(store: MemoryStore) -> None:
    store.store_jobs_and_triggers(
        [
            (
                job(kwargs={"db_password": "hunter2", "table": "t"}, data={"api_token": "abc"}),
                [one_shot("t", at(60), data={"secret": "s"})],
            )
        ]
    )
    rows = audit_rows(store)
    assert rows[0]["changes"]["kwargs"] == [None, {"db_password": REDACTED, "table": "t"}]
    assert rows[0]["changes"]["data"] == [None, {"api_token": REDACTED}]
    assert rows[1]["changes"]["data"] == [None, {"secret": REDACTED}]
    with store.transaction() as conn:
        raw = conn.execute(store.tables.audit.select()).all()
    assert not any(secret in str(raw) for secret in ("hunter2", "abc", '"s"'))


def test_the_store_redacts_with_quartz_dashboard_redact_keys(tmp_path: Any) -> None:
    settings = Settings(
        store_url=f"sqlite:///{tmp_path}/store.db",
        scheduler_name="unit",
        dashboard_redact_keys="^pin$",
    )
    store = open_store(settings)
    store.create_tables()
    try:
        store.store_jobs_and_triggers(
            [(job(kwargs={"pin": 1234, "password": "p"}, durable=True), [])]
        )
        assert audit_rows(store)[0]["changes"]["kwargs"] == [
            None,
            {"pin": REDACTED, "password": "p"},
        ]
    finally:
        store.dispose()


def test_a_write_that_raises_records_nothing(db: SqlStore) -> None:
    add(db, cron("t", "0 0 * * * ?"))
    before = audit_rows(db)
    with pytest.raises(ObjectAlreadyExistsError):
        db.store_jobs_and_triggers([(job(), [cron("t", "0 0 * * * ?")])])
    # The replacing trigger is deleted, then its successor refused: the transaction, audit
    # row included, is rolled back.
    never = one_shot("t2", at(60))
    never.end_at = at(30)
    with pytest.raises(InvalidTriggerError):
        db.replace_trigger(TriggerKey("t"), never)
    assert audit_rows(db) == before
    assert db.get_trigger_state(TriggerKey("t")) == "WAITING"


def test_a_write_whose_audit_row_cannot_be_written_is_not_made(db: SqlStore) -> None:
    add(db, cron("t", "0 0 * * * ?"))
    db.tables.audit.drop(db.engine)  # the audit's INSERT now fails, inside the write's transaction
    with pytest.raises(DBAPIError):
        db.pause_trigger(TriggerKey("t"))
    with pytest.raises(DBAPIError):
        db.remove_job(JobKey("job"))
    assert db.get_trigger_state(TriggerKey("t")) == "WAITING"
    assert db.retrieve_job(JobKey("job")) is not None


def test_removing_a_trigger_records_it_and_the_job_it_leaves_without_trigger(
    store: MemoryStore,
) -> None:
    add(store, cron("t", "0 0 * * * ?"))
    assert store.remove_trigger(TriggerKey("t"))
    removed = audit_rows(store)[2:]
    assert [(r["action"], r["target"]) for r in removed] == [
        ("remove_trigger", "DEFAULT.t"),
        ("remove_job", "DEFAULT.job"),
    ]
    # The definition removed is kept in the row: what it was.
    assert removed[0]["changes"]["expression"] == ["0 0 * * * ?", None]
    assert removed[1]["changes"]["task"] == ["tasks.work", None]
    assert not store.remove_trigger(TriggerKey("t"))
    assert len(audit_rows(store)) == 4


def test_removing_a_job_records_it_and_each_of_its_triggers(db: SqlStore) -> None:
    add(db, cron("a", "0 0 * * * ?"), cron("b", "0 5 * * * ?"))
    assert db.remove_job(JobKey("job"))
    assert sorted(actions(db)[3:]) == [
        ("remove_job", "job", "DEFAULT.job"),
        ("remove_trigger", "trigger", "DEFAULT.a"),
        ("remove_trigger", "trigger", "DEFAULT.b"),
    ]


def test_updating_trigger_details_records_the_fields_that_changed(store: MemoryStore) -> None:
    add(store, cron("t", "0 0 * * * ?"))
    store.update_trigger_details(TriggerKey("t"), TriggerDetailsUpdate(description="nightly"))
    store.update_trigger_details(TriggerKey("t"), TriggerDetailsUpdate(description="nightly"))
    rows = audit_rows(store, action="update_trigger")
    assert [(r["target"], r["changes"]) for r in rows] == [
        ("DEFAULT.t", {"description": [None, "nightly"]})
    ]


def test_rescheduling_records_the_trigger_replaced_and_a_new_key(store: MemoryStore) -> None:
    add(store, cron("t", "0 0 * * * ?"))
    assert store.replace_trigger(TriggerKey("t"), cron("t2", "0 30 * * * ?"))
    (row,) = audit_rows(store, action="replace_trigger")
    assert row["target"] == "DEFAULT.t"
    assert row["changes"] == {
        "expression": ["0 0 * * * ?", "0 30 * * * ?"],
        "key": ["DEFAULT.t", "DEFAULT.t2"],
    }


def test_pausing_and_resuming_a_trigger_records_its_state_once(store: MemoryStore) -> None:
    add(store, cron("t", "0 0 * * * ?"))
    key = TriggerKey("t")
    store.pause_trigger(key)
    store.pause_trigger(key)  # already paused: nothing changes, nothing recorded
    store.resume_trigger(key)
    store.resume_trigger(key)
    assert [(r["action"], r["target"], r["changes"]) for r in audit_rows(store)[2:]] == [
        ("pause_trigger", "DEFAULT.t", {"state": ["WAITING", "PAUSED"]}),
        ("resume_trigger", "DEFAULT.t", {"state": ["PAUSED", "WAITING"]}),
    ]


def test_pausing_an_acquired_trigger_records_acquired_before(db: SqlStore) -> None:
    add(db, one_shot("t", at(0)))
    acquire(db)
    db.pause_trigger(TriggerKey("t"))
    (row,) = audit_rows(db, action="pause_trigger")
    assert row["changes"] == {"state": ["ACQUIRED", "PAUSED"]}


def test_pausing_a_job_records_one_row_on_the_job_with_each_trigger_state(
    store: MemoryStore,
) -> None:
    add(store, cron("a", "0 0 * * * ?"), cron("b", "0 5 * * * ?"))
    store.pause_trigger(TriggerKey("a"))
    store.pause_job(JobKey("job"))
    store.resume_job(JobKey("job"))
    rows = audit_rows(store)[4:]
    assert [(r["action"], r["target_kind"], r["target"], r["changes"]) for r in rows] == [
        ("pause_job", "job", "DEFAULT.job", {"DEFAULT.b": ["WAITING", "PAUSED"]}),
        (
            "resume_job",
            "job",
            "DEFAULT.job",
            {"DEFAULT.a": ["PAUSED", "WAITING"], "DEFAULT.b": ["PAUSED", "WAITING"]},
        ),
    ]


def test_pausing_a_group_records_the_group_flag_and_its_triggers_and_once_only(
    db: SqlStore,
) -> None:
    add(db, cron("t", "0 0 * * * ?"))
    db.pause_trigger_group("DEFAULT")
    db.pause_trigger_group("DEFAULT")
    db.pause_trigger_group("empty")  # no trigger, but the group is now paused
    db.resume_trigger_group("DEFAULT")
    db.resume_trigger_group("never-paused")
    rows = audit_rows(db)[2:]
    assert [(r["action"], r["target_kind"], r["target"], r["changes"]) for r in rows] == [
        (
            "pause_group",
            "group",
            "DEFAULT",
            {"paused": [False, True], "DEFAULT.t": ["WAITING", "PAUSED"]},
        ),
        ("pause_group", "group", "empty", {"paused": [False, True]}),
        (
            "resume_group",
            "group",
            "DEFAULT",
            {"paused": [True, False], "DEFAULT.t": ["PAUSED", "WAITING"]},
        ),
    ]


def test_resetting_a_trigger_from_error_records_it(store: MemoryStore) -> None:
    add(store, one_shot("t", at(0)))
    (claimed,) = acquire(store)
    store.set_trigger_error(claimed, "task not registered")
    assert store.reset_trigger_from_error_state([TriggerKey("t"), TriggerKey("t")]) == 1
    (row,) = audit_rows(store, action="reset_trigger")
    assert (row["target"], row["changes"]) == ("DEFAULT.t", {"state": ["ERROR", "WAITING"]})


def test_calendars_record_store_replace_and_remove(db: SqlStore) -> None:
    db.store_calendar("holidays", HolidayCalendar(excluded_dates=[T0.date()]))
    db.store_calendar(
        "holidays",
        HolidayCalendar(excluded_dates=[T0.date()], description="2026"),
        replace=True,
    )
    assert db.remove_calendar("holidays")
    assert not db.remove_calendar("holidays")
    rows = audit_rows(db)
    assert [(r["action"], r["target_kind"], r["target"]) for r in rows] == [
        ("store_calendar", "calendar", "holidays"),
        ("replace_calendar", "calendar", "holidays"),
        ("remove_calendar", "calendar", "holidays"),
    ]
    assert rows[1]["changes"] == {"description": [None, "2026"]}


# -- loads: one row per job or trigger added, changed or removed, in one statement -------------


def _entries(n: int, expression: str = "0 0 * * * ?") -> dict[str, tuple[Job, CronTrigger, bool]]:
    return {
        f"e{i}": (
            Job(key=JobKey(f"e{i}", "imported"), task="tasks.work"),
            CronTrigger(
                key=TriggerKey(f"e{i}", "imported"),
                job_key=JobKey(f"e{i}", "imported"),
                expression=expression if i == 0 else "0 0 * * * ?",
                start_at=T0,
            ),
            True,
        )
        for i in range(n)
    }


def test_a_load_records_each_change_and_an_unchanged_load_nothing(db: SqlStore) -> None:
    with acting_as("import:redbeat", "import"):
        db.apply_scheduling_data([owned_group("import:redbeat", "imported", _entries(3))], T0)
    assert len(audit_rows(db, action="schedule_job")) == 3
    assert len(audit_rows(db, action="schedule_trigger")) == 3
    assert {(r["principal"], r["via"]) for r in audit_rows(db)} == {("import:redbeat", "import")}
    db.apply_scheduling_data([owned_group("import:redbeat", "imported", _entries(3))], T0)
    assert len(audit_rows(db)) == 6
    # One entry changed, one gone.
    entries = _entries(2, expression="0 15 * * * ?")
    db.apply_scheduling_data([owned_group("import:redbeat", "imported", entries)], T0)
    rows = audit_rows(db)[6:]
    assert sorted((r["action"], r["target"]) for r in rows) == [
        ("remove_job", "imported.e2"),
        ("remove_trigger", "imported.e2"),
        ("replace_trigger", "imported.e0"),
    ]
    (replaced,) = (r for r in rows if r["action"] == "replace_trigger")
    assert replaced["changes"] == {"expression": ["0 0 * * * ?", "0 15 * * * ?"]}


def test_a_load_of_many_writes_its_audit_in_one_statement(db: SqlStore) -> None:
    statements: list[tuple[str, bool]] = []

    def seen(conn: Any, cursor: Any, sql: str, params: Any, context: Any, many: bool) -> None:
        if "audit" in sql:
            statements.append((sql.split()[0], many))

    event.listen(db.engine, "before_cursor_execute", seen)
    db.apply_scheduling_data([owned_group("import:redbeat", "imported", _entries(200))], T0)
    assert [verb for verb, _ in statements] == ["INSERT"]
    assert len(audit_rows(db)) == 400


# -- the client's principal ---------------------------------------------------------------------


def test_the_client_writes_as_the_actor_of_the_moment_or_its_own_principal(
    app: Celery, store: MemoryStore, clock: FakeClock
) -> None:
    client = Quartz(app, store=store, clock=clock)
    client.add_job(job("plain", durable=True))
    with acting_as("alice", "api"):
        client.pause_trigger_group("g")
    service = Quartz(app, store=store, clock=clock, principal="billing-service")
    with acting_as("alice", "api"):
        service.pause_trigger_group("h")
    assert [(r["action"], r["principal"], r["via"]) for r in audit_rows(store)] == [
        ("schedule_job", getpass.getuser(), "client"),
        ("pause_group", "alice", "api"),
        ("pause_group", "billing-service", "client"),
    ]


def test_a_client_refuses_an_empty_principal(app: Celery, store: MemoryStore) -> None:
    with pytest.raises(ValidationError, match="principal"):
        Quartz(app, store=store, principal="")
