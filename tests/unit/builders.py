"""Builders shared by the store, reliability and loop unit tests: triggers, jobs, claims."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from celery_quartz.clock import FakeClock
from celery_quartz.context import JobExecutionContext
from celery_quartz.firing import AcquiredFiring, Firing
from celery_quartz.job import Job
from celery_quartz.keys import JobKey, TriggerKey
from celery_quartz.store import MemoryStore
from celery_quartz.triggers import (
    REPEAT_INDEFINITELY,
    CronTrigger,
    SimpleMisfireInstruction,
    SimpleTrigger,
    Trigger,
)
from tests.unit.conftest import T0, at

A, B, C = "sched-a", "sched-b", "sched-c"
W1 = "celery@w1"
IGNORE = SimpleMisfireInstruction.IGNORE_MISFIRE_POLICY


def one_shot(
    name: str,
    when: datetime,
    *,
    job: str = "job",
    priority: int = 5,
    misfire: int = 0,
    data: dict | None = None,
) -> SimpleTrigger:
    return SimpleTrigger(
        key=TriggerKey(name),
        job_key=JobKey(job),
        start_at=when,
        priority=priority,
        misfire_instruction=misfire,
        data=data or {},
    )


def repeating(
    name: str,
    start: datetime,
    every: float,
    *,
    job: str = "job",
    count: int = REPEAT_INDEFINITELY,
    misfire: int = 0,
) -> SimpleTrigger:
    return SimpleTrigger(
        key=TriggerKey(name),
        job_key=JobKey(job),
        start_at=start,
        repeat_interval=timedelta(seconds=every),
        repeat_count=count,
        misfire_instruction=misfire,
    )


def cron(name: str, expression: str, *, job: str = "job", misfire: int = 0) -> CronTrigger:
    return CronTrigger(
        key=TriggerKey(name),
        job_key=JobKey(job),
        start_at=T0,
        expression=expression,
        misfire_instruction=misfire,
    )


def add(store: MemoryStore, *triggers: Trigger, job: str = "job", **flags: object) -> JobKey:
    """Store a job (task ``tasks.work``) with ``triggers``."""
    key = JobKey(job)
    store.store_jobs_and_triggers([(Job(key=key, task="tasks.work", **flags), list(triggers))])
    return key


def acquire(
    store: MemoryStore,
    instance: str = A,
    *,
    until: datetime | None = None,
    max_count: int = 10,
    window: float = 0.0,
) -> list[AcquiredFiring]:
    return store.acquire_next_triggers(
        instance,
        no_later_than=until or at(1),
        max_count=max_count,
        time_window=window,
    )


def names(acquired: Sequence[AcquiredFiring]) -> list[str]:
    return [a.trigger.key.name for a in acquired]


def state(store: MemoryStore, name: str) -> str:
    return store.get_trigger_state(TriggerKey(name))


def next_fire(store: MemoryStore, name: str) -> datetime | None:
    trigger = store.retrieve_trigger(TriggerKey(name))
    assert trigger is not None
    return trigger.next_fire_time


def fire_one(store: MemoryStore, name: str, *, instance: str = A) -> str:
    """Acquire and fire the trigger ``name`` (due now); return its fire instance id."""
    acquired = acquire(store, instance, until=at(3600), window=3600)
    mine = [a for a in acquired if a.trigger.key.name == name]
    firings = store.fire(instance, mine)
    store.release_acquired(instance, [a for a in acquired if a not in mine])
    assert len(firings) == 1
    return firings[0].fire_instance_id


def fire_times(store: MemoryStore, clock: FakeClock, name: str, most: int = 10) -> list[datetime]:
    """Fire ``name`` at each of its next fire times until it has none; the times it fired at."""
    fired_at = []
    while (due := next_fire(store, name)) is not None and len(fired_at) < most:
        clock.set(due)
        fire_one(store, name)
        fired_at.append(due)
    return fired_at


# -- acquisition -------------------------------------------------------------------------------


def every(
    name: str, seconds: float, policy: str, *, count: int = -1, misfire: int = 0
) -> SimpleTrigger:
    """A trigger from ``at(0)`` every ``seconds`` with the overlap policy ``policy``."""
    trigger = repeating(name, at(0), seconds, count=count, misfire=misfire)
    trigger.overlap_policy = policy
    return trigger


def running(store: MemoryStore, name: str) -> str:
    """Fire ``name`` (due now) and start it on W1: its fire instance id."""
    fire_id = fire_one(store, name)
    store.mark_published(A, [fire_id])
    assert store.start_execution(fire_id, W1)
    return fire_id


def claim(store: MemoryStore, instance: str = A) -> list[Firing]:
    """One claim that fires what is due at once (the loop's usual path)."""
    return store.claim(
        instance, no_later_than=store.clock.now(), max_count=10, time_window=0
    ).firings


def execution_context(fire_id: str = "f1", scheduler: str = "unit") -> JobExecutionContext:
    """The context of firing ``fire_id`` of trigger ``t1`` (job ``job``), due at T0."""
    return JobExecutionContext(
        scheduler_name=scheduler,
        fire_instance_id=fire_id,
        job_key=JobKey("job"),
        trigger_key=TriggerKey("t1"),
        scheduled_fire_time=T0,
        fire_time=T0,
    )
