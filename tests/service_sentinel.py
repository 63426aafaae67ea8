"""A throwaway Redis master, its replicas and the Sentinels watching them, started from the
machine's own ``redis-server`` and ``redis-sentinel`` (Debian's ``redis-sentinel`` package), each
on a free port in a temporary folder; a failover by a killed master or ``SENTINEL FAILOVER``."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.services import (
    START_TIMEOUT,
    RedisServer,
    ServiceError,
    _log_tail,
    _temp_base,
    find_redis_sentinel,
    find_redis_server,
)

__all__ = ["RedisSentinel", "SentinelQuorum", "redis_sentinels"]


class RedisSentinel(RedisServer):
    """One Sentinel watching ``master_name``; its configuration file (which Sentinel rewrites)
    in its own folder. Failure detection is quick for tests: a master silent 1 s is down."""

    name = "sentinel"

    def __init__(
        self,
        binary: Path,
        basedir: Path,
        *,
        master_name: str,
        master: tuple[str, int],
        quorum: int,
    ) -> None:
        super().__init__(binary, basedir)
        self.master_name = master_name
        self.master = master
        self.quorum = quorum

    def _command(self) -> list[str]:
        host, port = self.master
        config = self.basedir / "sentinel.conf"
        config.write_text(
            f"port {self.port}\n"
            f"bind {self.host}\n"
            f"dir {self.basedir}\n"
            "daemonize no\n"
            f"sentinel monitor {self.master_name} {host} {port} {self.quorum}\n"
            f"sentinel down-after-milliseconds {self.master_name} 1000\n"
            f"sentinel failover-timeout {self.master_name} 3000\n"
            f"sentinel parallel-syncs {self.master_name} 1\n"
        )
        return [str(self.binary), str(config)]


class SentinelQuorum:
    """A Redis master, its replicas and the Sentinels watching them (:func:`redis_sentinels`)."""

    def __init__(
        self,
        master_name: str,
        redis: list[RedisServer],
        sentinels: list[RedisSentinel],
        quorum: int,
    ) -> None:
        self.master_name = master_name
        self.redis = redis
        self.sentinels = sentinels
        self.quorum = quorum

    def url(self, db: int = 0) -> str:
        """kombu's Sentinel URL: every Sentinel, ``;``-separated (the database on each)."""
        return ";".join(f"sentinel://{s.host}:{s.port}/{db}" for s in self.sentinels)

    def transport_options(self) -> dict[str, Any]:
        return {"master_name": self.master_name}

    def sentinel_client(self, index: int = 0) -> Any:
        return self.sentinels[index].client()

    def master_address(self) -> tuple[str, int]:
        """The master as the first Sentinel that answers names it."""
        for sentinel in self.sentinels:
            if not sentinel.running:
                continue
            with contextlib.suppress(OSError, Exception), sentinel.client() as client:
                host, port = client.sentinel_get_master_addr_by_name(self.master_name)
                return host.decode() if isinstance(host, bytes) else str(host), int(port)
        raise ServiceError(f"no Sentinel answers for {self.master_name}")

    def master(self) -> RedisServer:
        host, port = self.master_address()
        return next(r for r in self.redis if (r.host, r.port) == (host, port))

    def wait_settled(self, timeout: float = 30.0) -> None:
        """Until every running Sentinel names the same master, knows each replica and the other
        Sentinels, and the master has its replicas attached: a failover can then be decided."""
        deadline = time.monotonic() + timeout
        want_replicas = len([r for r in self.redis if r.running]) - 1
        last = "nothing asked yet"
        while time.monotonic() < deadline:
            try:
                last = self._settled(want_replicas)
            except Exception as exc:  # a Sentinel or server not answering yet
                last = repr(exc)
            if last == "":
                return
            time.sleep(0.2)
        raise ServiceError(f"Sentinels of {self.master_name} not settled in {timeout}s: {last}")

    def _settled(self, want_replicas: int) -> str:
        masters = set()
        for sentinel in self.sentinels:
            if not sentinel.running:
                continue
            with sentinel.client() as client:
                state = client.sentinel_master(self.master_name)
                masters.add((state["ip"], int(state["port"])))
                if "s_down" in state["flags"] or "failover" in state["flags"]:
                    return f"sentinel {sentinel.port}: master flags {state['flags']}"
                if int(state["num-slaves"]) < want_replicas:
                    return f"sentinel {sentinel.port}: {state['num-slaves']} replicas known"
                others = sum(s.running for s in self.sentinels) - 1
                if int(state["num-other-sentinels"]) < others:
                    return f"sentinel {sentinel.port}: {state['num-other-sentinels']} others"
        if len(masters) != 1:
            return f"sentinels disagree on the master: {masters}"
        host, port = masters.pop()
        master = next(r for r in self.redis if (r.host, r.port) == (host, port))
        with master.client() as client:
            info = client.info("replication")
        if info["role"] != "master" or int(info["connected_slaves"]) < want_replicas:
            return f"master {port}: {info['role']}, {info['connected_slaves']} replicas"
        for replica in self.redis:
            if replica is master or not replica.running:
                continue
            with replica.client() as client:
                info = client.info("replication")
            if info.get("master_link_status") != "up" or int(info.get("master_port", 0)) != port:
                return f"replica {replica.port}: link {info.get('master_link_status')}"
        return ""

    def failover(self, timeout: float = 30.0) -> tuple[RedisServer, RedisServer]:
        """``SENTINEL FAILOVER``: a replica promoted, the master demoted to a replica of it.
        Returns (old master, new master) once the Sentinels name the new one and the old one
        serves as its replica. (Between the two, the old master still takes writes that its
        demotion then throws away: Sentinel's failover is not free of loss.)"""
        old = self.master()
        with self.sentinel_client() as client:
            client.execute_command("SENTINEL", "FAILOVER", self.master_name)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(ServiceError, StopIteration, OSError, Exception):
                new = self.master()
                if new is not old and self._role(old) == "slave" and self._role(new) == "master":
                    return old, new
            time.sleep(0.1)
        raise ServiceError(f"no failover of {self.master_name} within {timeout}s")

    def kill_master(self, timeout: float = 60.0) -> tuple[RedisServer, RedisServer]:
        """SIGKILL the master (its unreplicated writes die with it) and wait until the Sentinels
        agree it is down (1 s of silence), promote a replica, and name it. Returns (old master,
        new master); the old one stays down."""
        old = self.master()
        assert old._proc is not None
        old._proc.kill()
        old.stop()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(ServiceError, StopIteration, OSError, Exception):
                new = self.master()
                if new is not old and self._role(new) == "master":
                    return old, new
            time.sleep(0.1)
        # A Sentinel whose timer ran late by more than 2 s (a loaded machine) sits in TILT mode
        # for 30 s and decides nothing: the timeout leaves room for it. Its log says so.
        logs = "\n".join(f"{s.log_path}:\n{_log_tail(s.log_path, 15)}" for s in self.sentinels)
        raise ServiceError(
            f"no failover of {self.master_name} within {timeout}s of the kill; logs:\n{logs}"
        )

    @staticmethod
    def _role(server: RedisServer) -> str:
        with server.client() as client:
            return str(client.info("replication")["role"])


@contextlib.contextmanager
def redis_sentinels(
    *,
    master_name: str = "cqmaster",
    replicas: int = 1,
    sentinels: int = 3,
    quorum: int = 2,
    start_timeout: float = START_TIMEOUT,
) -> Iterator[SentinelQuorum]:
    """A throwaway Redis master with ``replicas`` replicas and ``sentinels`` Sentinels agreeing
    with ``quorum`` votes, settled (every Sentinel knows every other and every replica); all
    stopped and their folders deleted on exit."""
    binary = find_redis_server()
    sentinel_binary = find_redis_sentinel()
    basedir = Path(tempfile.mkdtemp(prefix="cq-sentinel-", dir=_temp_base(False)))
    started: list[RedisServer] = []
    try:
        master_dir = basedir / "master"
        master_dir.mkdir()
        master = RedisServer(binary, master_dir)
        started.append(master)
        master.start(start_timeout)
        servers = [master]
        for i in range(replicas):
            folder = basedir / f"replica{i}"
            folder.mkdir()
            replica = RedisServer(
                binary, folder, extra_args=["--replicaof", master.host, str(master.port)]
            )
            started.append(replica)
            replica.start(start_timeout)
            servers.append(replica)
        watchers = []
        for i in range(sentinels):
            folder = basedir / f"sentinel{i}"
            folder.mkdir()
            sentinel = RedisSentinel(
                sentinel_binary,
                folder,
                master_name=master_name,
                master=(master.host, master.port),
                quorum=quorum,
            )
            started.append(sentinel)
            sentinel.start(start_timeout)
            watchers.append(sentinel)
        group = SentinelQuorum(master_name, servers, watchers, quorum)
        group.wait_settled()
        yield group
    finally:
        for server in reversed(started):
            server.stop()
        shutil.rmtree(basedir, ignore_errors=True)
