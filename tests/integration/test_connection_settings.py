"""Every PostgreSQL connection of the store (and of the election) carries a connect timeout, TCP
keepalives and a TCP user timeout by default, on psycopg2 and psycopg 3, and a value in the URL
wins: read back from the live connection's libpq parameters and from its socket's options in the
kernel."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine

from celery_quartz.elections.postgres import PostgresAdvisoryLockElection
from celery_quartz.leadership import SchedulerLeadership
from celery_quartz.lifecycle import SchedulerStatus
from celery_quartz.store.engine import POSTGRES_CONNECT_DEFAULTS, create_store_engine
from celery_quartz.store.sql import SqlStore

DRIVERS = ["pg_url", "pg_url_psycopg3"]


def _parameters(dbapi_connection: Any) -> dict[str, str]:
    """libpq's conninfo of the live connection (psycopg2's or psycopg 3's)."""
    if hasattr(dbapi_connection, "get_dsn_parameters"):  # psycopg2
        return dict(dbapi_connection.get_dsn_parameters())
    return {  # psycopg 3: every option libpq holds for this connection
        option.keyword.decode(): option.val.decode()
        for option in dbapi_connection.pgconn.info
        if option.val is not None
    }


def _socket_options(dbapi_connection: Any) -> dict[str, int]:
    """What the kernel applies to the connection's TCP socket."""
    with socket.socket(fileno=socket.dup(dbapi_connection.fileno())) as sock:
        return {
            "keepalives": sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
            "keepalives_idle": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
            "keepalives_interval": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
            "keepalives_count": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
            "tcp_user_timeout": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT),
        }


@pytest.fixture
def engines() -> Iterator[list[Engine]]:
    made: list[Engine] = []
    yield made
    for engine in made:
        engine.dispose()


def _live(engine: Engine) -> tuple[dict[str, str], dict[str, int]]:
    with engine.connect() as conn:
        dbapi = conn.connection.dbapi_connection
        return _parameters(dbapi), _socket_options(dbapi)


@pytest.mark.parametrize("fixture", DRIVERS)
def test_a_store_connection_gets_the_timeouts_and_keepalives_by_default(
    fixture: str, request: pytest.FixtureRequest, engines: list[Engine]
) -> None:
    engines.append(create_store_engine(request.getfixturevalue(fixture)))
    parameters, kernel = _live(engines[0])
    for name, value in POSTGRES_CONNECT_DEFAULTS.items():
        assert parameters[name] == str(value), name
    assert kernel == {
        "keepalives": 1,
        "keepalives_idle": 5,
        "keepalives_interval": 2,
        "keepalives_count": 3,
        "tcp_user_timeout": 10_000,
    }


@pytest.mark.parametrize("fixture", DRIVERS)
def test_a_value_in_the_url_wins_over_the_default(
    fixture: str, request: pytest.FixtureRequest, engines: list[Engine]
) -> None:
    url = request.getfixturevalue(fixture)
    engines.append(
        create_store_engine(f"{url}?connect_timeout=17&keepalives_idle=31&tcp_user_timeout=45000")
    )
    parameters, kernel = _live(engines[0])
    assert parameters["connect_timeout"] == "17"
    assert parameters["keepalives_idle"] == "31"
    assert parameters["tcp_user_timeout"] == "45000"
    assert kernel["keepalives_idle"] == 31
    assert kernel["tcp_user_timeout"] == 45_000
    # The ones the URL does not give keep their defaults.
    assert parameters["keepalives_count"] == "3"
    assert kernel["keepalives_interval"] == 2


def test_the_url_can_turn_keepalives_off(pg_url: str, engines: list[Engine]) -> None:
    engines.append(create_store_engine(f"{pg_url}?keepalives=0&tcp_user_timeout=0"))
    parameters, kernel = _live(engines[0])
    assert parameters["keepalives"] == "0"
    assert kernel["keepalives"] == 0
    assert kernel["tcp_user_timeout"] == 0


def test_the_defaults_sit_beside_the_idle_transaction_timeout(
    pg_url_psycopg3: str, engines: list[Engine]
) -> None:
    store = SqlStore(pg_url_psycopg3, scheduler_name="s", idle_transaction_timeout=7)
    engines.append(store.engine)
    parameters, kernel = _live(store.engine)
    assert parameters["connect_timeout"] == "5"
    assert kernel["tcp_user_timeout"] == 10_000
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("SHOW idle_in_transaction_session_timeout").scalar() == "7s"


def test_the_election_connection_gets_the_same_defaults(pg_url: str) -> None:
    class Scheduler:  # what the leadership drives; the election's thread is not started here
        status = SchedulerStatus.CREATED

        def start(self) -> None:
            self.status = SchedulerStatus.RUNNING

        def standby(self) -> None:
            self.status = SchedulerStatus.STANDBY

    election = PostgresAdvisoryLockElection(
        f"{pg_url}?connect_timeout=9",
        SchedulerLeadership(Scheduler()),
        scheduler_name="s",
    )
    try:
        assert election.try_acquire()
        conn = election._connection()
        dbapi = conn.connection.dbapi_connection
        parameters, kernel = _parameters(dbapi), _socket_options(dbapi)
    finally:
        election.close()
    assert parameters["connect_timeout"] == "9"
    assert parameters["tcp_user_timeout"] == "10000"
    assert kernel["keepalives_idle"] == 5
    assert kernel["tcp_user_timeout"] == 10_000


def test_pgconnect_timeout_in_the_environment_wins_over_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sqlalchemy.engine import make_url

    from celery_quartz.store.engine import postgres_connect_args

    url = make_url("postgresql+psycopg2://db/x")
    assert postgres_connect_args(url)["connect_timeout"] == 5
    monkeypatch.setenv("PGCONNECT_TIMEOUT", "12")  # libpq reads it when the URL gives none
    assert "connect_timeout" not in postgres_connect_args(url)
    assert postgres_connect_args(url)["tcp_user_timeout"] == 10_000
