"""Shared fixtures. The servers start on first use, so unit-only runs start none; their logic is in
tests/services.py."""

from __future__ import annotations

import contextlib
import itertools
import os
import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.service_rabbitmq import RabbitMQServer, rabbitmq_server
from tests.service_sentinel import SentinelQuorum, redis_sentinels
from tests.services import (
    PostgresServer,
    RedisServer,
    interrupt_on_sigterm,
    postgres_server,
    redis_server,
)

# Tests using these fixtures get the `integration` marker (`-m "not integration"` leaves them out).
SERVICE_FIXTURES = {
    "postgres",
    "redis",
    "pg_url",
    "pg_url_psycopg3",
    "store_template",
    "pg_store_url",
    "pg_store_url_psycopg3",
    "redis_url",
    "rabbitmq",
    "rabbitmq_url",
    "broker_url",
    "sentinels",
}


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    with postgres_server() as server:
        yield server


@pytest.fixture(scope="session")
def redis() -> Iterator[RedisServer]:
    with redis_server() as server:
        yield server


@pytest.fixture(scope="session")
def rabbitmq() -> Iterator[RabbitMQServer]:
    """One RabbitMQ node per test process (xdist worker), started when a test first needs it."""
    with rabbitmq_server() as server:
        yield server


@pytest.fixture
def sentinels() -> Iterator[SentinelQuorum]:
    """A Redis master, a replica and three Sentinels (quorum 2) of this test's own: a test
    fails its master over, so no other test shares them."""
    with redis_sentinels() as quorum:
        yield quorum


_database_numbers = itertools.count(1)


def _fresh_database(
    postgres: PostgresServer,
    request: pytest.FixtureRequest,
    driver: str,
    template: str | None = None,
) -> Iterator[str]:
    slug = re.sub(r"[^a-z0-9]+", "_", request.node.name.lower())
    name = f"t{next(_database_numbers)}_{slug}"[:63]
    yield postgres.create_database(name, driver, template=template)
    # Disk cleanup only: a test that left the server stopped must not turn into a teardown error.
    with contextlib.suppress(Exception):
        postgres.drop_database(name)


@pytest.fixture
def pg_url(postgres: PostgresServer, request: pytest.FixtureRequest) -> Iterator[str]:
    """SQLAlchemy URL (psycopg2) of a new empty database on the session server."""
    yield from _fresh_database(postgres, request, "psycopg2")


@pytest.fixture
def pg_url_psycopg3(postgres: PostgresServer, request: pytest.FixtureRequest) -> Iterator[str]:
    """SQLAlchemy URL (psycopg 3) of a new empty database on the session server."""
    yield from _fresh_database(postgres, request, "psycopg")


@pytest.fixture(scope="session")
def store_template(postgres: PostgresServer) -> str:
    """The name of a database on the session server holding the store's tables (created as
    ``SqlStore.create_tables`` creates them, default table prefix) and no row: what
    ``pg_store_url`` copies. Copying it takes a third of the time of creating the tables in
    each test's database."""
    from tests.stores import store_at

    name = "store_template"
    store = store_at(postgres.create_database(name), "template")
    try:
        store.create_tables()
    finally:
        store.dispose()  # no connection may stay open on a database being copied
    return name


@pytest.fixture
def pg_store_url(
    postgres: PostgresServer, store_template: str, request: pytest.FixtureRequest
) -> Iterator[str]:
    """SQLAlchemy URL (psycopg2) of a new database holding the store's tables, empty: for a
    store opened with the default table prefix, without ``create_tables``."""
    yield from _fresh_database(postgres, request, "psycopg2", store_template)


@pytest.fixture
def pg_store_url_psycopg3(
    postgres: PostgresServer, store_template: str, request: pytest.FixtureRequest
) -> Iterator[str]:
    """``pg_store_url`` through psycopg 3."""
    yield from _fresh_database(postgres, request, "psycopg", store_template)


_redis_dbs = itertools.cycle(range(1, 16))


@pytest.fixture
def redis_url(redis: RedisServer) -> str:
    """URL of an emptied Redis database, a different number (1..15) from the previous test's."""
    db = next(_redis_dbs)
    redis.flushdb(db)
    return redis.url(db)


@pytest.fixture
def rabbitmq_url(rabbitmq: RabbitMQServer) -> str:
    """URL of a RabbitMQ virtual host no other test used: its queues start empty."""
    return rabbitmq.url(rabbitmq.new_vhost())


@pytest.fixture
def broker_url(request: pytest.FixtureRequest) -> str:
    """The broker of a test that runs on several (``tests/integration/brokers.py``:
    ``on_both_brokers`` parametrizes it with ``"redis"`` and ``"rabbitmq"``); Redis unless
    parametrized."""
    kind = getattr(request, "param", "redis")
    return str(request.getfixturevalue(f"{kind}_url"))


def pytest_configure(config: pytest.Config) -> None:
    interrupt_on_sigterm()  # a CI timeout's SIGTERM still tears the servers down


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if SERVICE_FIXTURES.intersection(fixtures):
            item.add_marker(pytest.mark.integration)
        # `-m "not rabbitmq"` leaves out every test that would boot the RabbitMQ node.
        callspec = getattr(item, "callspec", None)
        on_rabbitmq = callspec is not None and callspec.params.get("broker_url") == "rabbitmq"
        if on_rabbitmq or {"rabbitmq", "rabbitmq_url"}.intersection(fixtures):
            item.add_marker(pytest.mark.rabbitmq)
    # Longest first: the `slow` runs, then the other tests with services, then the rest (each
    # kept in its own order). `make test` hands the tests out one at a time in this order
    # (`--dist load --maxschedchunk 1`), so the long runs start at once, side by side, and the
    # short ones fill in around them instead of trailing a long run at the end.
    items.sort(key=_longest_first)


def _longest_first(item: pytest.Item) -> int:
    if item.get_closest_marker("slow") is not None:
        return 0
    return 1 if item.get_closest_marker("integration") is not None else 2


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[None]:
    # `make test` sets CQ_REQUIRE_SERVICES=1: there an integration test may not skip itself quietly.
    outcome: Any = yield
    report = outcome.get_result()
    if (
        report.skipped
        and not hasattr(report, "wasxfail")
        and os.environ.get("CQ_REQUIRE_SERVICES") == "1"
        and item.get_closest_marker("integration") is not None
    ):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"integration test skipped under CQ_REQUIRE_SERVICES=1: {reason}"
