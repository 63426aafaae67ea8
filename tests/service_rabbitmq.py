"""A throwaway RabbitMQ node started from the machine's own server scripts (Debian's
``rabbitmq-server`` package: /usr/lib/rabbitmq/bin), with everything of its own: node name, AMQP,
distribution and epmd ports, Erlang cookie, database, logs, configuration and plugins file, so it
never meets the machine's system node. Found by :func:`tests.services.find_rabbitmq_sbin`."""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import shutil
import subprocess
from collections.abc import Iterator
from glob import glob
from pathlib import Path
from typing import Any

from tests.services import (
    STOP_TIMEOUT,
    ServiceError,
    _Server,
    find_rabbitmq_sbin,
    free_port,
    one_server,
)

__all__ = ["RABBITMQ_START_TIMEOUT", "RabbitMQServer", "rabbitmq_server"]

#: RabbitMQ boots an Erlang VM and its database: seconds on an idle machine, more under load.
RABBITMQ_START_TIMEOUT = 90.0
#: Virtual hosts made per ``rabbitmqctl eval`` (:meth:`RabbitMQServer.new_vhost`).
VHOST_BATCH = 16


_rabbitmq_nodes = itertools.count(1)


class RabbitMQServer(_Server):
    """A RabbitMQ node of its own: node name, AMQP, distribution and epmd ports, Erlang cookie
    (``HOME``), database, logs, configuration and plugins file (none enabled) all in its folder,
    guest/guest on 127.0.0.1 only. Its epmd (Erlang's port mapper, started by the node as a
    daemon on its own port) is stopped with it."""

    name = "rabbitmq"
    port_clash_words = ("eaddrinuse",)

    def __init__(self, sbin: Path, basedir: Path) -> None:
        super().__init__(basedir)
        self.sbin = sbin
        self.nodename = f"cq{os.getpid()}n{next(_rabbitmq_nodes)}@localhost"
        self.dist_port = free_port(self.host)
        self.epmd_port = free_port(self.host)
        self._vhosts: list[str] = []
        self._vhosts_made = 0
        home = basedir / "home"
        home.mkdir(exist_ok=True)
        cookie = home / ".erlang.cookie"
        cookie.write_text(os.urandom(16).hex())
        cookie.chmod(0o400)
        (basedir / "enabled_plugins").write_text("[].\n")
        (basedir / "rabbitmq-env.conf").write_text("")  # not /etc/rabbitmq's
        # Throwaway data: no disk alarm on a nearly full CI disk, no memory alarm under load.
        (basedir / "rabbitmq.conf").write_text(
            "disk_free_limit.absolute = 1MB\n"
            "vm_memory_high_watermark.relative = 0.9\n"
            "log.console = true\n"
            "log.console.level = info\n"
            "log.file = false\n"
        )

    def url(self, vhost: str = "/") -> str:
        path = "" if vhost == "/" else vhost
        return f"amqp://guest:guest@{self.host}:{self.port}/{path}"

    def environment(self) -> dict[str, str]:
        """What ``rabbitmq-server`` and the CLI tools need to find this node and no other."""
        base = self.basedir
        return {
            **os.environ,
            "HOME": str(base / "home"),
            "RABBITMQ_NODENAME": self.nodename,
            "RABBITMQ_NODE_IP_ADDRESS": self.host,
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "ERL_EPMD_PORT": str(self.epmd_port),
            "ERL_EPMD_ADDRESS": self.host,
            "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
            "RABBITMQ_LOG_BASE": str(base / "log"),
            "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(base / "advanced.config"),
            "RABBITMQ_CONF_ENV_FILE": str(base / "rabbitmq-env.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "enabled_plugins"),
            "RABBITMQ_PID_FILE": str(base / "rabbitmq.pid"),
        }

    def ctl(self, *args: str, tool: str = "rabbitmqctl", timeout: float = 60) -> str:
        """Run a CLI tool (``rabbitmqctl``, ``rabbitmq-diagnostics``) against this node; its
        output. Slow (each call boots an Erlang VM): the tests talk AMQP where they can."""
        result = subprocess.run(
            [str(self.sbin / tool), "-q", "-n", self.nodename, *args],
            env=self.environment(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if result.returncode:
            raise ServiceError(f"{tool} {' '.join(args)}: {result.stderr or result.stdout}")
        return result.stdout

    def new_vhost(self) -> str:
        """A virtual host no test used before, guest allowed everything on it: a test's queues
        apart from every other's (as each Redis test has its own database). Made in batches, one
        ``rabbitmqctl eval`` each: a CLI call boots an Erlang VM, seconds under load."""
        if not self._vhosts:
            start = self._vhosts_made + 1
            self._vhosts_made += VHOST_BATCH
            names = [f"t{n}" for n in range(start, self._vhosts_made + 1)]
            binaries = ", ".join(f'<<"{name}">>' for name in names)
            self.ctl(
                "eval",
                '[begin rabbit_vhost:add(V, <<"cq-tests">>), '
                "rabbit_auth_backend_internal:set_permissions("
                '<<"guest">>, V, <<".*">>, <<".*">>, <<".*">>, <<"cq-tests">>) end '
                f"|| V <- [{binaries}]], ok.",
            )
            self._vhosts.extend(names)
        return self._vhosts.pop(0)

    def connection(self, timeout: float = 2.0) -> Any:
        """A connected py-amqp connection (close it yourself)."""
        import amqp

        conn = amqp.Connection(f"{self.host}:{self.port}", connect_timeout=timeout)
        conn.connect()
        return conn

    def _command(self) -> list[str]:
        return [str(self.sbin / "rabbitmq-server")]

    def _popen_kwargs(self) -> dict[str, Any]:
        return {"env": self.environment()}

    def _ready(self) -> bool:
        try:
            conn = self.connection(timeout=1)
        except Exception:  # refused, reset, timed out or the broker not yet accepting logins
            return False
        try:
            # Another node that took the port first must not pass for ours. The cluster's name is
            # the node's, with the machine's full host name.
            name = str(conn.server_properties.get("cluster_name", ""))
            return name.partition("@")[0] == self.nodename.partition("@")[0]
        finally:
            conn.collect()

    def restart(self, timeout: float = RABBITMQ_START_TIMEOUT) -> None:
        """Stop and start again on the same ports and data (durable queues and vhosts kept)."""
        super().restart(timeout)

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM (RabbitMQ stops gently on it, as ``rabbitmqctl stop`` does, without booting
        a CLI VM), SIGKILL after ``timeout``; then this node's epmd."""
        super().stop(timeout)
        epmd = shutil.which("epmd") or next(iter(glob("/usr/lib/erlang/erts-*/bin/epmd")), None)
        if epmd:
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                subprocess.run(
                    [epmd, "-port", str(self.epmd_port), "-kill"],
                    capture_output=True,
                    timeout=10,
                    check=False,
                )


@contextlib.contextmanager
def rabbitmq_server(*, start_timeout: float = RABBITMQ_START_TIMEOUT) -> Iterator[RabbitMQServer]:
    """Start a throwaway RabbitMQ node; stop it (and its epmd) and delete its folder on exit."""
    sbin = find_rabbitmq_sbin()
    make = functools.partial(RabbitMQServer, sbin)
    with one_server(make, "cq-rabbitmq-", start_timeout) as server:
        yield server
