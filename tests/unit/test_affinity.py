"""Node affinity (issue 5): the preferred node of a trigger, its storage, the auto-pin claim at a
worker's start, its reset when the worker is confirmed dead, and re-pinning in place."""

from __future__ import annotations

import copy
import dataclasses
import re

import pytest
from celery import Celery
from sqlalchemy import select

from celery_quartz import PreferredNode, Quartz, TriggerDetailsUpdate
from celery_quartz.clock import FakeClock
from celery_quartz.cluster import ClusterManager
from celery_quartz.errors import InvalidTriggerError, TriggerNotFoundError, ValidationError
from celery_quartz.keys import RECOVERING_JOBS_GROUP, TriggerKey
from celery_quartz.store import MemoryStore, SqlStore, TriggerState
from celery_quartz.triggers import Trigger
from tests.unit.builders import acquire, add, fire_one, repeating, state
from tests.unit.conftest import at

W1, W2 = "celery@w1", "celery@w2"


# -- the value ---------------------------------------------------------------------------------


def test_none_is_unpinned() -> None:
    pin = PreferredNode.NONE
    assert (pin.node, pin.is_automatic, pin.is_none) == (None, False, True)


def test_auto_is_an_unclaimed_automatic_pin() -> None:
    pin = PreferredNode.AUTO
    assert (pin.node, pin.is_automatic, pin.is_none) == (None, True, False)


def test_a_named_pin_answers_its_node_and_is_not_automatic() -> None:
    pin = PreferredNode.for_node(W1)
    assert (pin.node, pin.is_automatic, pin.is_none) == (W1, False, False)


def test_a_claimed_auto_pin_answers_the_claiming_worker_and_stays_automatic() -> None:
    pin = PreferredNode.AUTO.claimed_by(W1)
    assert (pin.node, pin.is_automatic, pin.is_none) == (W1, True, False)
    assert pin != PreferredNode.for_node(W1)


def test_only_an_automatic_pin_is_claimed() -> None:
    with pytest.raises(ValidationError, match=re.escape("PreferredNode.for_node('celery@w1')")):
        PreferredNode.for_node(W1).claimed_by(W2)


@pytest.mark.parametrize("name", ["*-west", "auto:thing", "_x", "**", "x" * 255])
def test_names_that_only_look_like_markers_are_accepted_verbatim(name: str) -> None:
    assert PreferredNode.for_node(name).node == name


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("*", "preferred node '*' is reserved"),
        ("_", "preferred node '_' is reserved"),
        ("", "preferred node '': the node name is empty"),
        (None, "preferred node None"),
        (7, "preferred node 7: a node name is a string"),
        ("n" * 256, "is 256 characters; at most 255"),
    ],
)
def test_for_node_refuses_markers_empty_non_strings_and_long_names(
    name: object, message: str
) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        PreferredNode.for_node(name)  # type: ignore[arg-type]


def test_the_constructor_refuses_what_for_node_refuses() -> None:
    with pytest.raises(ValidationError, match="reserved"):
        PreferredNode("*", True)


def test_pins_are_equal_by_value_and_hashable() -> None:
    assert PreferredNode.for_node(W1) == PreferredNode.for_node(W1)
    assert PreferredNode.for_node(W1) != PreferredNode.for_node(W2)
    assert PreferredNode.AUTO != PreferredNode.NONE
    assert len({PreferredNode.for_node(W1), PreferredNode.for_node(W1), PreferredNode.AUTO}) == 2


def test_a_pin_is_immutable() -> None:
    pin = PreferredNode.for_node(W1)
    with pytest.raises(AttributeError):
        pin.node = W2  # type: ignore[misc]


def test_repr_reads_as_the_code_that_builds_it() -> None:
    assert repr(PreferredNode.NONE) == "PreferredNode.NONE"
    assert repr(PreferredNode.AUTO) == "PreferredNode.AUTO"
    assert repr(PreferredNode.AUTO.claimed_by(W1)) == "PreferredNode.AUTO.claimed_by('celery@w1')"
    assert repr(PreferredNode.for_node(W1)) == "PreferredNode.for_node('celery@w1')"


@pytest.mark.parametrize(
    ("text", "pin"),
    [
        ("*", PreferredNode.AUTO),
        (None, PreferredNode.NONE),
        ("", PreferredNode.NONE),
        (W1, PreferredNode.for_node(W1)),
        ("*-west", PreferredNode.for_node("*-west")),
    ],
)
def test_parse_reads_the_file_spelling(text: str | None, pin: PreferredNode) -> None:
    assert PreferredNode.parse(text) == pin


def test_parse_refuses_a_reserved_name_naming_the_owner() -> None:
    with pytest.raises(
        ValidationError, match=re.escape("trigger DEFAULT.nightly: preferred node '_'")
    ):
        PreferredNode.parse("_", owner="trigger DEFAULT.nightly")


@pytest.mark.parametrize(
    ("pin", "columns"),
    [
        (PreferredNode.NONE, (None, False)),
        (PreferredNode.AUTO, (None, True)),
        (PreferredNode.AUTO.claimed_by(W1), (W1, True)),
        (PreferredNode.for_node(W1), (W1, False)),
    ],
)
def test_the_storage_form_has_no_marker_and_round_trips(
    pin: PreferredNode, columns: tuple[str | None, bool]
) -> None:
    assert pin.to_columns() == columns
    assert PreferredNode.from_columns(*columns) == pin


def test_a_stored_name_is_read_back_unchecked() -> None:
    pin = PreferredNode.from_columns("_", False)
    assert (pin.node, pin.is_automatic) == ("_", False)
    assert pin == PreferredNode.from_columns("_", False)


def test_unpinned_and_unclaimed_rows_read_back_as_the_singletons() -> None:
    assert PreferredNode.from_columns(None, False) is PreferredNode.NONE
    assert PreferredNode.from_columns(None, True) is PreferredNode.AUTO


# -- the store (`db`: SQLite, and PostgreSQL on both drivers: the batch's JSON insert and advance,
# and the compare-and-swap) -----------------------------------------------------------------


def pinned(name: str, pin: PreferredNode, *, job: str = "job") -> Trigger:
    return dataclasses.replace(repeating(name, at(0), 10, job=job), preferred_node=pin)


def pin_of(store: SqlStore, name: str) -> PreferredNode:
    trigger = store.retrieve_trigger(TriggerKey(name))
    assert trigger is not None
    return trigger.preferred_node


def fired_pins(store: SqlStore) -> dict[str, PreferredNode]:
    """Fire instance id → the pin its fired row recorded."""
    f = store.tables.fired_triggers
    with store.transaction() as conn:
        rows = conn.execute(
            select(f.c.fire_instance_id, f.c.preferred_node, f.c.preferred_node_auto)
        )
        return {
            r.fire_instance_id: PreferredNode.from_columns(r.preferred_node, r.preferred_node_auto)
            for r in rows
        }


def started(store: SqlStore, name: str, worker: str) -> str:
    """Fire ``name`` and start it on ``worker``; its fire instance id."""
    fire_id = fire_one(store, name)
    assert store.start_execution(fire_id, worker)
    return fire_id


EVERY_FORM = [
    PreferredNode.NONE,
    PreferredNode.AUTO,
    PreferredNode.AUTO.claimed_by(W1),
    PreferredNode.for_node(W1),
    PreferredNode.for_node("auto:thing"),
]


def test_every_form_of_pin_is_stored_and_read_back(db: SqlStore) -> None:
    add(db, *(pinned(f"t{i}", pin) for i, pin in enumerate(EVERY_FORM)))
    assert [pin_of(db, f"t{i}") for i in range(len(EVERY_FORM))] == EVERY_FORM


def test_a_claim_records_the_pin_it_saw_on_its_fired_row(db: SqlStore) -> None:
    add(db, *(pinned(f"t{i}", pin) for i, pin in enumerate(EVERY_FORM)))
    claimed = acquire(db, until=at(0))
    assert {a.fire_instance_id: a.trigger.preferred_node for a in claimed} == fired_pins(db)
    assert sorted(fired_pins(db).values(), key=repr) == sorted(EVERY_FORM, key=repr)


def test_a_batch_fired_at_once_records_the_pin_it_saw(db: SqlStore) -> None:
    add(db, pinned("named", PreferredNode.for_node(W1)), pinned("auto", PreferredNode.AUTO))
    claim = db.claim("sched-a", no_later_than=at(0), max_count=10, time_window=0)
    recorded = fired_pins(db)
    assert {f.trigger_key.name: recorded[f.fire_instance_id] for f in claim.firings} == {
        "named": PreferredNode.for_node(W1),
        "auto": PreferredNode.AUTO,
    }


def test_the_first_worker_to_start_a_firing_claims_an_auto_pin(db: SqlStore) -> None:
    add(db, pinned("t1", PreferredNode.AUTO))
    started(db, "t1", W1)
    assert pin_of(db, "t1") == PreferredNode.AUTO.claimed_by(W1)


def test_a_claim_does_not_change_the_schedule(db: SqlStore) -> None:
    add(db, pinned("t1", PreferredNode.AUTO))
    fire_id = fire_one(db, "t1")
    before = db.retrieve_trigger(TriggerKey("t1"))
    db.start_execution(fire_id, W1)
    after = db.retrieve_trigger(TriggerKey("t1"))
    assert before is not None and after is not None
    assert (after.next_fire_time, after.times_triggered) == (before.next_fire_time, 1)
    assert state(db, "t1") == TriggerState.WAITING


@pytest.mark.parametrize(
    "change", [PreferredNode.for_node(W2), PreferredNode.NONE], ids=["re-pin", "clear"]
)
def test_a_change_made_after_acquisition_wins_over_the_claim(
    db: SqlStore, change: PreferredNode
) -> None:
    add(db, pinned("t1", PreferredNode.AUTO))
    fire_id = fire_one(db, "t1")
    db.update_trigger_details(TriggerKey("t1"), TriggerDetailsUpdate(preferred_node=change))
    assert db.start_execution(fire_id, W1)
    assert pin_of(db, "t1") == change


def test_a_claim_from_another_firing_of_the_trigger_wins_over_a_later_start(
    db: SqlStore, clock: FakeClock
) -> None:
    add(db, pinned("t1", PreferredNode.AUTO))
    first = fire_one(db, "t1")
    clock.set(at(10))
    second = fire_one(db, "t1")
    assert fired_pins(db)[second] == PreferredNode.AUTO
    db.start_execution(first, W1)
    db.start_execution(second, W2)
    assert pin_of(db, "t1") == PreferredNode.AUTO.claimed_by(W1)


def test_a_worker_starting_a_firing_claimed_by_a_stale_worker_takes_the_pin_over(
    db: SqlStore,
) -> None:
    add(db, pinned("t1", PreferredNode.AUTO.claimed_by(W1)))
    started(db, "t1", W2)
    assert pin_of(db, "t1") == PreferredNode.AUTO.claimed_by(W2)


def test_the_claiming_worker_starting_its_own_firing_keeps_the_pin(db: SqlStore) -> None:
    add(db, pinned("t1", PreferredNode.AUTO.claimed_by(W1)))
    started(db, "t1", W1)
    assert pin_of(db, "t1") == PreferredNode.AUTO.claimed_by(W1)


def test_a_named_pin_is_never_moved_by_a_start_elsewhere(db: SqlStore) -> None:
    add(db, pinned("t1", PreferredNode.for_node(W1)))
    started(db, "t1", W2)
    assert pin_of(db, "t1") == PreferredNode.for_node(W1)


def test_an_unpinned_trigger_stays_unpinned_when_started(db: SqlStore) -> None:
    add(db, pinned("t1", PreferredNode.NONE))
    started(db, "t1", W1)
    assert pin_of(db, "t1") == PreferredNode.NONE


def test_a_recovery_firing_claims_nothing_for_the_original_trigger(db: SqlStore) -> None:
    add(db, pinned("t1", PreferredNode.AUTO), requests_recovery=True)
    db.start_execution(fire_one(db, "t1"), W1)
    db.update_trigger_details(
        TriggerKey("t1"), TriggerDetailsUpdate(preferred_node=PreferredNode.AUTO)
    )
    db.recover_worker(W1, seen_checkin_millis=None)
    [recovery] = acquire(db, until=at(0))
    assert recovery.trigger.key.group == RECOVERING_JOBS_GROUP
    assert recovery.trigger.preferred_node == PreferredNode.NONE
    [firing] = db.fire("sched-a", [recovery])
    assert db.start_execution(firing.fire_instance_id, W2)
    assert pin_of(db, "t1") == PreferredNode.AUTO


# -- recovery of a dead worker -----------------------------------------------------------------


def claims_of_two_workers(store: SqlStore) -> int:
    """Pins claimed by W1 and W2, named and unclaimed, with W1 checked in; its check-in time."""
    add(
        store,
        pinned("auto-w1", PreferredNode.AUTO.claimed_by(W1)),
        pinned("auto-w2", PreferredNode.AUTO.claimed_by(W2)),
        pinned("named-w1", PreferredNode.for_node(W1)),
        pinned("unclaimed", PreferredNode.AUTO),
    )
    store.check_in(W1, interval=7.5, kind="worker")
    return store.check_ins("worker")[0].last_checkin_millis


def pins(store: SqlStore) -> dict[str, PreferredNode]:
    return {t: pin_of(store, t) for t in ("auto-w1", "auto-w2", "named-w1", "unclaimed")}


def test_recovery_of_a_dead_worker_resets_only_its_auto_claimed_pins(db: SqlStore) -> None:
    seen = claims_of_two_workers(db)
    result = db.recover_worker(W1, seen_checkin_millis=seen)
    assert result is not None and result.pins_reset == 1
    assert pins(db) == {
        "auto-w1": PreferredNode.AUTO,
        "auto-w2": PreferredNode.AUTO.claimed_by(W2),
        "named-w1": PreferredNode.for_node(W1),
        "unclaimed": PreferredNode.AUTO,
    }


def test_a_worker_restarting_under_its_name_keeps_its_pins(db: SqlStore) -> None:
    claims_of_two_workers(db)
    before = pins(db)
    result = db.recover_worker(W1, seen_checkin_millis=None)
    assert result is not None and result.pins_reset == 0
    assert pins(db) == before


def test_a_worker_that_checked_in_again_keeps_its_pins(db: SqlStore, clock: FakeClock) -> None:
    seen = claims_of_two_workers(db)
    clock.set(at(5))
    db.check_in(W1, interval=7.5, kind="worker")
    assert db.recover_worker(W1, seen_checkin_millis=seen) is None
    assert pin_of(db, "auto-w1") == PreferredNode.AUTO.claimed_by(W1)


def test_a_dead_worker_keeps_its_claims_while_its_recovery_is_deferred(
    db: SqlStore, clock: FakeClock
) -> None:
    seen = claims_of_two_workers(db)
    add(db, pinned("nc", PreferredNode.AUTO, job="nc"), job="nc", disallow_concurrent=True)
    started(db, "nc", W1)
    deferred = db.recover_worker(W1, seen_checkin_millis=seen, defer_nonconcurrent_millis=1000)
    assert deferred is not None and (deferred.deferred, deferred.pins_reset) == (1, 0)
    assert pin_of(db, "nc") == PreferredNode.AUTO.claimed_by(W1)
    clock.set(at(2))
    done = db.recover_worker(W1, seen_checkin_millis=seen, defer_nonconcurrent_millis=1000)
    assert done is not None and done.pins_reset == 2
    assert (pin_of(db, "nc"), pin_of(db, "auto-w1")) == (PreferredNode.AUTO, PreferredNode.AUTO)


def test_the_cluster_manager_resets_the_pins_of_a_worker_silent_past_the_window(
    db: SqlStore, clock: FakeClock
) -> None:
    claims_of_two_workers(db)
    manager = ClusterManager(
        db, clock, "sched-b", checkin_interval=7.5, checkin_misfire_threshold=7.5
    )
    manager.check_in()
    clock.set(at(15))
    manager.recover_failed_workers()
    assert pin_of(db, "auto-w1") == PreferredNode.AUTO.claimed_by(W1)
    clock.set(at(15.001))
    manager.recover_failed_workers()
    assert pin_of(db, "auto-w1") == PreferredNode.AUTO


# -- re-pinning and rebuilding -----------------------------------------------------------------


def test_update_trigger_details_re_pins_without_rescheduling(db: SqlStore) -> None:
    add(db, pinned("t1", PreferredNode.AUTO.claimed_by(W1)))
    fire_one(db, "t1")
    before = db.retrieve_trigger(TriggerKey("t1"))
    db.update_trigger_details(
        TriggerKey("t1"),
        TriggerDetailsUpdate(preferred_node=PreferredNode.for_node(W2), description="moved"),
    )
    after = db.retrieve_trigger(TriggerKey("t1"))
    assert before is not None and after is not None
    assert (after.preferred_node, after.description) == (PreferredNode.for_node(W2), "moved")
    assert (after.next_fire_time, after.previous_fire_time, after.times_triggered) == (
        before.next_fire_time,
        before.previous_fire_time,
        1,
    )
    assert state(db, "t1") == TriggerState.WAITING


@pytest.mark.parametrize("to", [PreferredNode.NONE, PreferredNode.AUTO], ids=["none", "auto"])
def test_re_pinning_a_claimed_auto_pin_clears_the_claim(db: SqlStore, to: PreferredNode) -> None:
    add(db, pinned("t1", PreferredNode.AUTO.claimed_by(W1)))
    db.update_trigger_details(TriggerKey("t1"), TriggerDetailsUpdate(preferred_node=to))
    assert pin_of(db, "t1") == to


def test_an_update_leaves_unchanged_fields_alone(db: SqlStore) -> None:
    add(db, dataclasses.replace(pinned("t1", PreferredNode.for_node(W1)), description="kept"))
    db.update_trigger_details(TriggerKey("t1"), TriggerDetailsUpdate(description="new"))
    assert pin_of(db, "t1") == PreferredNode.for_node(W1)
    db.update_trigger_details(
        TriggerKey("t1"), TriggerDetailsUpdate(preferred_node=PreferredNode.NONE)
    )
    trigger = db.retrieve_trigger(TriggerKey("t1"))
    assert trigger is not None and trigger.description == "new"


def test_updating_a_trigger_that_is_not_stored_names_it(db: SqlStore) -> None:
    for update in (TriggerDetailsUpdate(preferred_node=PreferredNode.AUTO), TriggerDetailsUpdate()):
        with pytest.raises(TriggerNotFoundError, match=re.escape("trigger DEFAULT.ghost")):
            db.update_trigger_details(TriggerKey("ghost"), update)


def test_a_rebuilt_trigger_keeps_its_pin_and_auto_flag(db: SqlStore) -> None:
    add(db, pinned("t1", PreferredNode.AUTO.claimed_by(W1)))
    stored = db.retrieve_trigger(TriggerKey("t1"))
    assert stored is not None
    for rebuilt in (dataclasses.replace(stored, description="updated"), copy.copy(stored)):
        assert rebuilt.preferred_node == PreferredNode.AUTO.claimed_by(W1)
    assert db.replace_trigger(TriggerKey("t1"), dataclasses.replace(stored, description="updated"))
    assert pin_of(db, "t1") == PreferredNode.AUTO.claimed_by(W1)


def test_rescheduling_stores_the_pin_the_new_trigger_carries(db: SqlStore) -> None:
    add(db, pinned("t1", PreferredNode.AUTO.claimed_by(W1)))
    assert db.replace_trigger(TriggerKey("t1"), pinned("t1", PreferredNode.for_node(W2)))
    assert pin_of(db, "t1") == PreferredNode.for_node(W2)


# -- refusals ------------------------------------------------------------------------------------


def test_a_trigger_refuses_a_pin_that_is_not_a_preferred_node_naming_the_trigger(
    store: MemoryStore,
) -> None:
    trigger = dataclasses.replace(repeating("t1", at(0), 10), preferred_node=W1)  # type: ignore[arg-type]
    with pytest.raises(InvalidTriggerError, match=re.escape("trigger DEFAULT.t1: preferred_node")):
        add(store, trigger)
    assert store.count_rows()["triggers"] == 0


def test_a_details_update_refuses_a_pin_that_is_not_a_preferred_node() -> None:
    with pytest.raises(
        ValidationError, match=re.escape("preferred_node must be a PreferredNode, not 'celery@w1'")
    ):
        TriggerDetailsUpdate(preferred_node=W1)  # type: ignore[arg-type]


def test_the_client_re_pins_and_names_a_missing_trigger(
    store: MemoryStore, clock: FakeClock
) -> None:
    app = Celery("t", set_as_current=False)
    quartz = Quartz(app, store=store, clock=clock)
    add(store, pinned("t1", PreferredNode.NONE))
    quartz.update_trigger_details(
        TriggerKey("t1"), TriggerDetailsUpdate(preferred_node=PreferredNode.AUTO)
    )
    assert pin_of(store, "t1") == PreferredNode.AUTO
    before = store.count_rows()
    with pytest.raises(
        TriggerNotFoundError, match=re.escape("trigger DEFAULT.ghost is not stored")
    ):
        quartz.update_trigger_details(TriggerKey("ghost"), TriggerDetailsUpdate(description="x"))
    assert store.count_rows() == before
    app.close()
