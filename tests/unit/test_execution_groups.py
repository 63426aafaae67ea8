"""Execution groups: limits, routing to queues, admission at acquisition (held work misfires)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from celery_quartz import PreferredNode, TriggerDetailsUpdate
from celery_quartz.clock import FakeClock, to_millis
from celery_quartz.errors import ConfigurationError, InvalidTriggerError
from celery_quartz.firing import Firing
from celery_quartz.keys import JobKey, TriggerKey
from celery_quartz.limits import ExecutionLimits, ExecutionLimitScope
from celery_quartz.publisher import RedisPath, publish_options
from celery_quartz.routing import Hold, LiveWorker, Route, Router, Unserved, direct_queue
from celery_quartz.store import MemoryStore
from celery_quartz.store.schema import TriggerState
from celery_quartz.triggers import CronMisfireInstruction, SimpleMisfireInstruction
from tests.unit.builders import A, B, add, cron, names, one_shot, state
from tests.unit.conftest import at

CLUSTER = ExecutionLimitScope.CLUSTER


def grouped(name: str, group: str | None, seconds: float = 0.0, **kw: object):  # type: ignore[no-untyped-def]
    trigger = one_shot(name, at(seconds), **kw)  # type: ignore[arg-type]
    trigger.execution_group = group
    return trigger


def claim(store: MemoryStore, router: Router, *, instance: str = A, max_count: int = 10):  # type: ignore[no-untyped-def]
    return store.claim(
        instance,
        no_later_than=store.clock.now() + timedelta(seconds=1),
        max_count=max_count,
        time_window=0.0,
        router=router,
    )


def worker(
    store: MemoryStore, name: str, queues: list[str], concurrency: int, *, direct: bool = True
) -> None:
    store.check_in(
        name,
        interval=7.5,
        kind="worker",
        queues=[*queues, *([direct_queue(name)] if direct else [])],
        concurrency=concurrency,
    )


def pin(store: MemoryStore, name: str, node: str) -> None:
    details = TriggerDetailsUpdate(preferred_node=PreferredNode.for_node(node))
    store.update_trigger_details(TriggerKey(name), details)


def finish(store: MemoryStore, fire_instance_id: str) -> None:
    assert store.start_execution(fire_instance_id, "celery@w1")
    assert store.complete_execution(fire_instance_id)


# -- the limits ---------------------------------------------------------------------------------


def test_a_group_without_an_entry_takes_the_other_groups_limit() -> None:
    limits = ExecutionLimits().for_group("reindex", 2).for_other_groups(8)
    assert limits.limit_for("reindex").max_concurrent == 2  # type: ignore[union-attr]
    assert limits.limit_for("reports").max_concurrent == 8  # type: ignore[union-attr]
    assert limits.limit_for(None) is None  # ungrouped: no entry, unlimited


def test_none_means_unlimited_even_under_an_other_groups_limit() -> None:
    limits = ExecutionLimits().for_group("free", None).for_other_groups(1)
    assert limits.limit_for("free") is None
    assert limits.bounded


def test_a_group_is_published_to_its_own_queue_unless_one_is_configured() -> None:
    limits = ExecutionLimits().for_group("reindex", 2, queue="reindex-q")
    assert limits.queue_for("reindex") == "reindex-q"
    assert limits.queue_for("reports") == "reports"


def test_the_mapping_form_reads_every_entry() -> None:
    limits = ExecutionLimits.coerce(
        {"reindex": 2, "billing": {"max_concurrent": 1, "scope": "cluster"}, "*": 8, "": 4}
    )
    assert limits.limit_for("billing").scope is CLUSTER  # type: ignore[union-attr]
    assert limits.limit_for("other").max_concurrent == 8  # type: ignore[union-attr]
    assert limits.limit_for(None).max_concurrent == 4  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ({"reindex": -1}, "reindex"),
        ({"reindex": True}, "reindex"),
        ({"reindex": "2"}, "reindex"),
        ({"reindex": {"max_concurrent": 2, "scope": "galaxy"}}, "galaxy"),
        ({"reindex": {"max_concurrent": 2, "limit": 3}}, "limit"),
        ({"*": {"max_concurrent": 2, "queue": "q"}}, "'*'"),
        ([("reindex", 2)], "mapping"),
    ],
)
def test_a_bad_limit_is_refused_naming_what_is_wrong(value: object, named: str) -> None:
    with pytest.raises(ConfigurationError, match=named):
        ExecutionLimits.coerce(value)


def test_a_trigger_refuses_an_empty_execution_group() -> None:
    trigger = grouped("t", "  ")
    with pytest.raises(InvalidTriggerError, match="execution_group"):
        trigger.validate()


# -- admission (pure) ---------------------------------------------------------------------------


def live(name: str, queues: list[str], concurrency: int, direct: bool = True) -> LiveWorker:
    own = [direct_queue(name)] if direct else []
    return LiveWorker(name, frozenset([*queues, *own]), concurrency)


def test_a_cluster_scoped_group_is_capped_at_its_limit_whatever_the_workers() -> None:
    router = Router(ExecutionLimits().for_group("g", 2, scope=CLUSTER))
    workers = {w.name: w for w in [live("w1", ["g"], 8), live("w2", ["g"], 8)]}
    admission = router.admission(workers, {"g": 1}, {})
    assert admission.admit("g", None) == Route("g")
    assert isinstance(admission.admit("g", None), Hold)


def test_a_node_scoped_groups_capacity_is_each_serving_worker_up_to_the_limit() -> None:
    router = Router(ExecutionLimits().for_group("g", 2))
    workers = {
        w.name: w
        for w in [live("w1", ["g"], 8), live("w2", ["g", "celery"], 1), live("w3", ["x"], 8)]
    }
    assert router.admission(workers, {}, {}).capacity("g") == 3  # min(8,2) + min(1,2)


def test_a_limited_group_no_live_worker_serves_is_held_and_reported_unserved() -> None:
    router = Router(ExecutionLimits().for_group("g", 2))
    hold = router.admission({}, {}, {}).admit("g", None)
    assert isinstance(hold, Hold)
    assert hold.unserved == Unserved("g", "g")


def test_a_limit_of_zero_forbids_the_group_without_calling_it_unserved() -> None:
    router = Router(ExecutionLimits().for_group("g", 0, scope=CLUSTER))
    hold = router.admission({}, {}, {}).admit("g", None)
    assert isinstance(hold, Hold) and hold.unserved is None


def test_a_firing_pinned_to_a_live_worker_goes_to_its_own_queue() -> None:
    router = Router()
    admission = router.admission({"w1": live("w1", ["g"], 4)}, {}, {})
    assert admission.admit("g", "w1") == Route("w1.dq2", "w1")


def test_a_firing_pinned_to_a_worker_that_is_not_live_goes_to_the_group_queue() -> None:
    admission = Router().admission({"w1": live("w1", ["g"], 4)}, {}, {})
    assert admission.admit("g", "w9") == Route("g")
    assert admission.admit(None, "w9") == Route()


def test_a_saturated_pinned_worker_keeps_its_pin_and_the_firing_waits() -> None:
    admission = Router().admission({"w1": live("w1", ["g"], 2)}, {}, {"w1.dq2": 1})
    assert admission.admit("g", "w1") == Route("w1.dq2", "w1")
    hold = admission.admit("g", "w1")
    assert isinstance(hold, Hold) and hold.node == "w1" and hold.unserved is None


def test_a_pinned_worker_not_consuming_the_group_queue_holds_and_reports_it() -> None:
    admission = Router().admission({"w1": live("w1", ["other"], 2)}, {}, {})
    hold = admission.admit("g", "w1")
    assert isinstance(hold, Hold)
    assert hold.unserved == Unserved("g", "g", "w1")


def test_a_pinned_worker_without_its_own_queue_is_reported() -> None:
    admission = Router().admission({"w1": live("w1", ["g"], 2, direct=False)}, {}, {})
    hold = admission.admit("g", "w1")
    assert isinstance(hold, Hold) and hold.unserved == Unserved("g", "w1.dq2", "w1")


# -- acquisition against the store -------------------------------------------------------------


def test_a_capped_group_acquires_up_to_its_limit_and_the_rest_stay_waiting(
    store: MemoryStore,
) -> None:
    add(store, *[grouped(f"t{i}", "g") for i in range(5)])
    router = Router(ExecutionLimits().for_group("g", 2, scope=CLUSTER))
    firings = claim(store, router).firings
    assert len(firings) == 2
    assert [state(store, f"t{i}") for i in range(5)].count(TriggerState.WAITING) == 3
    assert claim(store, router).firings == []  # two in flight: nothing more
    finish(store, firings[0].fire_instance_id)
    assert len(claim(store, router).firings) == 1


def test_claims_held_ahead_count_against_the_limit(store: MemoryStore, clock: FakeClock) -> None:
    add(store, *[grouped(f"t{i}", "g", seconds=0.5) for i in range(3)])
    router = Router(ExecutionLimits().for_group("g", 1, scope=CLUSTER))
    assert len(claim(store, router).acquired) == 1
    assert claim(store, router, instance=B).acquired == []


def test_a_full_group_does_not_starve_the_triggers_behind_it(store: MemoryStore) -> None:
    add(store, *[grouped(f"g{i}", "g") for i in range(6)], grouped("free", None, seconds=0.2))
    router = Router(ExecutionLimits().for_group("g", 0, scope=CLUSTER))
    result = claim(store, router, max_count=3)
    assert names(result.acquired) == ["free"]


def test_a_held_trigger_keeps_its_fire_time_and_misfires_by_its_instruction(
    store: MemoryStore, clock: FakeClock
) -> None:
    held = cron("c1", "0 * * * * ?", misfire=CronMisfireInstruction.DO_NOTHING)
    held.execution_group = "g"
    add(store, held)
    router = Router(ExecutionLimits().for_group("g", 0, scope=CLUSTER))
    clock.set(at(0))
    assert claim(store, router).firings == []
    assert (state(store, "c1"), store.retrieve_trigger(TriggerKey("c1")).next_fire_time) == (  # type: ignore[union-attr]
        TriggerState.WAITING,
        at(0),
    )
    clock.set(at(61))
    handled, _ = store.handle_misfires(max_count=10)
    assert handled == 1
    assert store.retrieve_trigger(TriggerKey("c1")).next_fire_time == at(120)  # type: ignore[union-attr]


def test_a_node_scoped_group_is_capped_by_the_live_workers_serving_it(
    store: MemoryStore, clock: FakeClock
) -> None:
    add(store, *[grouped(f"t{i}", "g") for i in range(9)])
    router = Router(ExecutionLimits().for_group("g", 2))
    unserved = claim(store, router)
    assert (unserved.firings, unserved.unserved) == ([], [Unserved("g", "g")])  # no worker yet
    worker(store, "celery@w1", ["g"], 8)
    worker(store, "celery@w2", ["g"], 8)
    assert len(claim(store, router).firings) == 4
    clock.advance(timedelta(seconds=16))  # w1 and w2 stop checking in: no capacity left
    worker(store, "celery@w3", ["g"], 1)
    assert claim(store, router).firings == []  # 4 in flight, capacity now 1


def test_a_grouped_firing_is_routed_to_its_group_queue_and_recorded(store: MemoryStore) -> None:
    add(store, grouped("t", "reindex"))
    router = Router(ExecutionLimits().for_group("reindex", None, queue="reindex-q"))
    [firing] = claim(store, router).firings
    assert (firing.queue, firing.node) == ("reindex-q", None)
    [again] = store.unpublished_firings(A)
    assert (again.queue, again.node) == ("reindex-q", None)


def test_a_pinned_firing_goes_to_its_live_workers_own_queue(store: MemoryStore) -> None:
    add(store, grouped("t", "g"), grouped("u", "g"))
    pin(store, "t", "celery@w1")
    pin(store, "u", "celery@gone")
    worker(store, "celery@w1", ["g"], 4)
    firings = {f.trigger_key.name: f for f in claim(store, Router()).firings}
    assert (firings["t"].queue, firings["t"].node) == ("celery@w1.dq2", "celery@w1")
    assert (firings["u"].queue, firings["u"].node) == ("g", None)
    [again] = [f for f in store.unpublished_firings(A) if f.trigger_key.name == "t"]
    assert again.node == "celery@w1"


def test_an_expired_firing_sent_to_a_pinned_worker_is_published_again_to_its_group(
    store: MemoryStore, clock: FakeClock
) -> None:
    trigger = grouped("t", "g", misfire=SimpleMisfireInstruction.FIRE_NOW)
    add(store, trigger)
    pin(store, "t", "celery@w1")
    worker(store, "celery@w1", ["g"], 4)
    [firing] = claim(store, Router()).firings
    assert firing.node == "celery@w1"
    clock.set(at(200))
    [again] = store.resolve_expired_firings(B, grace=1.0, max_count=10)
    assert (again.queue, again.node) == ("g", None)


def test_unserved_lists_groups_no_live_worker_consumes(store: MemoryStore) -> None:
    add(store, grouped("t", "reindex"), grouped("u", None))
    router = Router()
    assert store.unserved(router) == [Unserved("reindex", "reindex")]
    worker(store, "celery@w1", ["reindex"], 2)
    assert store.unserved(router) == []
    pin(store, "t", "celery@w2")
    worker(store, "celery@w2", ["celery"], 2)
    assert store.unserved(router) == [Unserved("reindex", "reindex", "celery@w2")]


# -- publishing the route ----------------------------------------------------------------------


def firing(**route: object) -> Firing:
    return Firing(
        fire_instance_id="f1",
        scheduler_name="unit",
        task="tasks.work",
        args=[],
        kwargs={},
        options={"queue": "jobs", "routing_key": "jobs.x", "priority": 3},
        job_key=JobKey("job"),
        trigger_key=TriggerKey("t"),
        scheduled_millis=to_millis(at(0)),
        fired_millis=to_millis(at(0)),
        **route,  # type: ignore[arg-type]
    )


def test_a_group_queue_replaces_the_jobs_own_routing() -> None:
    options = publish_options(firing(queue="reindex"))
    assert options == {"queue": "reindex", "priority": 3}


def test_a_pinned_firing_is_published_to_celerys_worker_direct_queue() -> None:
    queue = publish_options(firing(queue="celery@w1.dq2", node="celery@w1"))["queue"]
    assert (queue.name, queue.exchange.name, queue.routing_key) == (
        "celery@w1.dq2",
        "C.dq2",
        "celery@w1",
    )


def test_the_redis_path_leaves_a_pinned_firing_to_celery() -> None:
    path = RedisPath.__new__(RedisPath)
    assert not path.accepts(firing(queue="celery@w1.dq2", node="celery@w1"))


def test_an_unlimited_group_is_routed_without_reading_workers_or_counting(
    store: MemoryStore,
) -> None:
    from sqlalchemy import event

    add(store, grouped("t", "reports"))
    statements: list[str] = []
    event.listen(store.engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    [firing] = claim(store, Router(ExecutionLimits().for_group("reports", None))).firings
    assert firing.queue == "reports"
    assert not [s for s in statements if "scheduler_state" in s or "count(" in s.lower()]
