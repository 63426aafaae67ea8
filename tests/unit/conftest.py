"""Shared fixtures of the unit tests: a fake clock and a RAM store reading it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone

import pytest

from celery_quartz.clock import FakeClock
from celery_quartz.store import MemoryStore

#: Where every unit test's fake clock starts.
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def store(clock: FakeClock) -> Iterator[MemoryStore]:
    store = MemoryStore(scheduler_name="unit", clock=clock)
    yield store
    store.dispose()
