"""The test services really start, answer, restart, clean up, and fail loudly when absent."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from contextlib import AbstractContextManager as ContextManager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from tests import services
from tests.service_rabbitmq import RabbitMQServer, rabbitmq_server
from tests.service_sentinel import redis_sentinels
from tests.services import (
    PostgresServer,
    RedisServer,
    ServiceBinaryNotFound,
    ServiceError,
    postgres_server,
    redis_server,
)


def _select_one(url: str) -> object:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(sa.text("select 1")).scalar_one()
    finally:
        engine.dispose()


def test_pg_url_answers_select_1_through_psycopg2(pg_url: str) -> None:
    assert pg_url.startswith("postgresql+psycopg2://")
    assert _select_one(pg_url) == 1


def test_pg_url_psycopg3_answers_select_1_through_psycopg3(pg_url_psycopg3: str) -> None:
    assert pg_url_psycopg3.startswith("postgresql+psycopg://")
    assert _select_one(pg_url_psycopg3) == 1


def test_session_database_answers_through_both_drivers(postgres: PostgresServer) -> None:
    assert _select_one(postgres.url()) == 1
    assert _select_one(postgres.url("psycopg3")) == 1


def test_pg_url_is_a_new_empty_database(postgres: PostgresServer, pg_url: str) -> None:
    engine = sa.create_engine(pg_url)
    try:
        with engine.connect() as conn:
            name = conn.execute(sa.text("select current_database()")).scalar_one()
            tables = conn.execute(
                sa.text("select count(*) from pg_tables where schemaname = 'public'")
            ).scalar_one()
    finally:
        engine.dispose()
    assert name != postgres.dbname
    assert pg_url.endswith("/" + name)
    assert tables == 0


def test_postgres_runs_with_the_fast_unsafe_settings(postgres: PostgresServer) -> None:
    conn = postgres.connect()
    try:
        with conn.cursor() as cur:
            settings = {}
            for key in ("fsync", "synchronous_commit", "full_page_writes", "max_connections"):
                cur.execute(f"show {key}")
                settings[key] = cur.fetchone()[0]
    finally:
        conn.close()
    assert (
        settings["fsync"] == settings["synchronous_commit"] == settings["full_page_writes"] == "off"
    )
    assert int(settings["max_connections"]) >= 200


def test_redis_url_answers_ping_set_get(redis_url: str) -> None:
    import redis as redis_py

    client = redis_py.Redis.from_url(redis_url)
    try:
        assert client.ping()
        client.set("k", "v")
        assert client.get("k") == b"v"
    finally:
        client.close()


def test_redis_url_is_an_emptied_database_other_than_0(redis: RedisServer, redis_url: str) -> None:
    db = int(redis_url.rsplit("/", 1)[1])
    assert 1 <= db <= 15
    with redis.client(db) as client:
        assert client.dbsize() == 0


def test_rabbitmq_url_carries_a_message(rabbitmq_url: str) -> None:
    from kombu import Connection

    assert rabbitmq_url.startswith("amqp://guest:guest@127.0.0.1:")
    with Connection(rabbitmq_url) as conn:
        queue = conn.SimpleQueue("probe")
        queue.put({"k": "v"})
        assert queue.get(timeout=5).payload == {"k": "v"}
        queue.close()


def test_each_rabbitmq_url_is_a_virtual_host_of_its_own(rabbitmq: RabbitMQServer) -> None:
    from amqp.exceptions import NotFound
    from kombu import Connection

    first, second = rabbitmq.url(rabbitmq.new_vhost()), rabbitmq.url(rabbitmq.new_vhost())
    assert first != second
    with Connection(first) as conn:
        conn.default_channel.queue_declare("only-here", auto_delete=False)
    with Connection(second) as conn, pytest.raises(NotFound):
        conn.default_channel.queue_declare("only-here", passive=True)


def test_the_rabbitmq_node_answers_its_cli_through_its_own_cookie_and_epmd(
    rabbitmq: RabbitMQServer,
) -> None:
    assert rabbitmq.ctl("eval", "node().").strip().strip("'") == rabbitmq.nodename
    home = rabbitmq.basedir / "home"
    assert (home / ".erlang.cookie").stat().st_mode & 0o777 == 0o400
    data = rabbitmq.ctl("eval", "rabbit_mnesia:dir().")
    assert str(rabbitmq.basedir / "mnesia") in data


@pytest.mark.integration
@pytest.mark.rabbitmq
def test_rabbitmq_and_its_epmd_are_stopped_and_deleted_on_exit() -> None:
    with rabbitmq_server() as rabbit:
        basedir, pid, epmd_port = rabbit.basedir, rabbit.pid, rabbit.epmd_port
        assert _listening(epmd_port)
    assert pid is not None
    assert not basedir.exists()
    assert not _alive(pid)
    assert not _listening(epmd_port)


@pytest.mark.integration
def test_the_sentinels_agree_on_the_master_and_promote_the_replica_when_it_dies() -> None:
    with redis_sentinels() as quorum:
        master, replica = quorum.redis
        assert quorum.master() is master
        assert quorum.url(2).count("sentinel://") == 3 and quorum.url(2).endswith("/2")
        old, new = quorum.kill_master()
        assert (old, new) == (master, replica)
        assert not master.running


@pytest.mark.integration
def test_postgres_restart_keeps_port_and_data() -> None:
    with postgres_server() as pg:
        pg.execute("create table kept (x int)", dbname=pg.dbname)
        pg.execute("insert into kept values (42)", dbname=pg.dbname)
        port, pid = pg.port, pg.pid
        pg.restart()
        assert pg.port == port
        assert pg.pid != pid
        engine = sa.create_engine(pg.url("psycopg"))
        try:
            with engine.connect() as conn:
                assert conn.execute(sa.text("select x from kept")).scalar_one() == 42
        finally:
            engine.dispose()


@pytest.mark.integration
def test_postgres_stop_refuses_connections_until_started_again() -> None:
    with postgres_server() as pg:
        pg.stop()
        assert not pg.running
        with pytest.raises(sa.exc.OperationalError):
            _select_one(pg.url())
        pg.start(keep_port=True)
        assert _select_one(pg.url()) == 1


@pytest.mark.integration
def test_redis_restart_keeps_port_and_forgets_data() -> None:
    with redis_server() as rd:
        with rd.client() as client:
            client.set("k", "v")
        port = rd.port
        rd.restart()
        assert rd.port == port
        with rd.client() as client:
            assert client.ping()
            assert client.get("k") is None  # no persistence: --save '' --appendonly no


@pytest.mark.integration
def test_postgres_is_stopped_and_deleted_even_when_the_body_raises() -> None:
    with pytest.raises(ZeroDivisionError), postgres_server() as pg:
        basedir, pid = pg.basedir, pg.pid
        1 / 0  # noqa: B018
    assert pid is not None
    assert not basedir.exists()
    assert not _alive(pid)


@pytest.mark.integration
def test_redis_is_stopped_and_deleted_on_exit() -> None:
    with redis_server() as rd:
        basedir, pid = rd.basedir, rd.pid
    assert pid is not None
    assert not basedir.exists()
    assert not _alive(pid)


@pytest.mark.integration
@pytest.mark.parametrize("start", [postgres_server, redis_server], ids=["postgres", "redis"])
def test_a_port_taken_before_the_server_binds_it_is_retried_on_another(
    monkeypatch: pytest.MonkeyPatch, start: Callable[[], ContextManager[Any]]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        taken_port = taken.getsockname()[1]
        ports = iter([taken_port])
        real_free_port = services.free_port
        monkeypatch.setattr(
            services, "free_port", lambda host: next(ports, None) or real_free_port(host)
        )
        with start() as server:
            assert server.port != taken_port
            assert server.running


@pytest.mark.integration
def test_a_server_that_cannot_start_raises_with_its_log_tail() -> None:
    with (
        pytest.raises(ServiceError, match="max_connections"),
        postgres_server(settings={"max_connections": "not-a-number"}),
    ):
        pass


def test_missing_postgres_names_the_apt_package(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _hide_binaries(monkeypatch, tmp_path)
    with pytest.raises(ServiceBinaryNotFound) as caught, postgres_server():
        pass
    assert isinstance(caught.value, RuntimeError)
    assert "initdb" in str(caught.value)
    assert "apt-get install -y postgresql" in str(caught.value)


def test_missing_redis_names_the_apt_package(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _hide_binaries(monkeypatch, tmp_path)
    with pytest.raises(ServiceBinaryNotFound) as caught, redis_server():
        pass
    assert isinstance(caught.value, RuntimeError)
    assert "redis-server" in str(caught.value)
    assert "apt-get install -y redis-server" in str(caught.value)


def test_missing_rabbitmq_and_sentinel_name_their_apt_packages(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _hide_binaries(monkeypatch, tmp_path)
    with pytest.raises(ServiceBinaryNotFound, match="apt-get install -y rabbitmq-server"):
        services.find_rabbitmq_sbin()
    with pytest.raises(ServiceBinaryNotFound, match="apt-get install -y redis-sentinel"):
        services.find_redis_sentinel()


def test_debians_root_wrapper_is_not_taken_for_the_rabbitmq_server(tmp_path: Path) -> None:
    """/usr/sbin/rabbitmq-server, run as root, switches to the system node's user and folder."""
    (tmp_path / "rabbitmq-script-wrapper").write_text("#!/bin/sh\n")
    (tmp_path / "rabbitmq-script-wrapper").chmod(0o755)
    for name in ("rabbitmq-server", "rabbitmqctl"):
        (tmp_path / name).symlink_to(tmp_path / "rabbitmq-script-wrapper")
    assert not services._is_rabbitmq_sbin(tmp_path)


def test_missing_apt_packages_lists_all_when_nothing_is_installed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _hide_binaries(monkeypatch, tmp_path)
    assert services.missing_apt_packages() == [
        "postgresql",
        "redis-server",
        "redis-sentinel",
        "rabbitmq-server",
        "chromium",
    ]


def _hide_binaries(monkeypatch: pytest.MonkeyPatch, empty_dir: Path) -> None:
    monkeypatch.setattr(services, "PG_BINDIR_GLOBS", [str(empty_dir / "*")])
    monkeypatch.setattr(services, "REDIS_SEARCH_DIRS", [str(empty_dir)])
    monkeypatch.setattr(services, "CHROMIUM", empty_dir / "chromium")
    monkeypatch.setattr(services, "RABBITMQ_SBIN_GLOBS", [str(empty_dir / "*")])
    monkeypatch.delenv(services.RABBITMQ_SBIN_ENV, raising=False)
    monkeypatch.setenv("PATH", str(empty_dir))
    monkeypatch.delenv(services.PG_BINDIR_ENV, raising=False)
    monkeypatch.delenv(services.REDIS_SERVER_ENV, raising=False)


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie not yet reaped still answers kill(0); look at its state.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False
