"""Triggers using this release's time features survive the store (SQLite) unchanged."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, time, timedelta, timezone

import pytest

from celery_quartz.clock import FakeClock
from celery_quartz.keys import JobKey, TriggerKey
from celery_quartz.store import MemoryStore
from celery_quartz.triggers import (
    CronTrigger,
    DailyTimeIntervalTrigger,
    IntervalUnit,
    RecurrenceTrigger,
    Trigger,
)
from tests.unit.builders import add

UTC = timezone.utc
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def sqlite_store() -> Iterator[MemoryStore]:
    store = MemoryStore(scheduler_name="unit", clock=FakeClock(T0))
    yield store
    store.dispose()


@pytest.mark.parametrize(
    "trigger",
    [
        DailyTimeIntervalTrigger(
            key=TriggerKey("daily"),
            job_key=JobKey("job"),
            start_at=T0,
            start_time_of_day=time(9),
            end_time_of_day=time(17),
            repeat_interval=2,
            repeat_interval_unit=IntervalUnit.HOUR,
            repeat_count=1,
            time_zone="Europe/Berlin",
        ),
        CronTrigger(
            key=TriggerKey("hashed"),
            job_key=JobKey("job"),
            start_at=T0,
            expression="H H/20 H(9-17) 1W,L-2,LW-1 * ?",
            time_zone="Coordinated Universal Time",
        ),
        RecurrenceTrigger(
            key=TriggerKey("rrule"),
            job_key=JobKey("job"),
            start_at=T0,
            rule="FREQ=MONTHLY;BYDAY=-1FR;X-NOTE=x;COUNT=4",
            time_zone="Europe/Berlin",
        ),
    ],
    ids=lambda t: t.kind,
)
def test_a_stored_trigger_reads_back_with_the_same_fire_times(
    sqlite_store: MemoryStore, trigger: Trigger
) -> None:
    add(sqlite_store, trigger)
    stored = sqlite_store.retrieve_trigger(trigger.key)
    assert stored is not None and stored.detail() == trigger.detail()
    after = T0
    for _ in range(6):
        expected = trigger.next_fire_time_after(after)
        assert stored.next_fire_time_after(after) == expected
        if expected is None:
            break
        after = expected + timedelta(seconds=1)
    assert stored.final_fire_time() == trigger.final_fire_time()
