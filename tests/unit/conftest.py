"""Shared fixtures of the unit tests: a fake clock, a RAM store reading it, and the SQL store on
each dialect and PostgreSQL driver."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest
from celery import Celery

from celery_quartz.clock import FakeClock
from celery_quartz.store import MemoryStore, SqlStore
from tests.stores import store_at

#: Where every unit test's fake clock starts.
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc)


def at(seconds: float) -> datetime:
    """The instant ``seconds`` after :data:`T0`."""
    return T0 + timedelta(seconds=seconds)


def utc(*fields: int) -> datetime:
    """``datetime(*fields)`` in UTC."""
    return datetime(*fields, tzinfo=timezone.utc)  # type: ignore[misc]


#: The tasks the unit tests' app registers (jobs name them).
TASKS = ("tasks.report", "tasks.cleanup", "tasks.ping", "tasks.work")


@pytest.fixture
def queue() -> str:
    """The app's default queue: kombu's memory transport keeps its queues process-wide, so one
    queue name per test."""
    return f"unit-{uuid.uuid4().hex}"


@pytest.fixture
def app(queue: str) -> Iterator[Celery]:
    """A Celery app named ``t`` on the in-memory broker, with the tasks of :data:`TASKS`."""
    app = Celery("t", broker="memory://", set_as_current=False)
    app.conf.task_default_queue = queue
    for name in TASKS:
        app.task(name=name, shared=False)(_noop)
    yield app
    app.close()


def _noop(*args: object, **kwargs: object) -> None:
    return None


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def store(clock: FakeClock) -> Iterator[MemoryStore]:
    store = MemoryStore(scheduler_name="unit", clock=clock)
    yield store
    store.dispose()


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("pg_store_url", id="pg_url", marks=pytest.mark.integration),
        pytest.param("pg_store_url_psycopg3", id="pg_url_psycopg3", marks=pytest.mark.integration),
    ]
)
def db(request: pytest.FixtureRequest, clock: FakeClock) -> Iterator[SqlStore]:
    """The SQL store on SQLite and on PostgreSQL with each driver, reading the fake clock: the
    statements written per dialect (a batch's JSON insert and advance, the compare-and-swap).
    On PostgreSQL its database is a copy of one holding the tables already (``pg_store_url``)."""
    if request.param == "sqlite":
        sql_store: SqlStore = MemoryStore(scheduler_name="unit", clock=clock)
    else:
        sql_store = store_at(request.getfixturevalue(request.param), "unit", clock=clock)
    yield sql_store
    sql_store.dispose()
