"""Throwaway PostgreSQL, Redis (and a Redis Sentinel quorum) and RabbitMQ servers started from the
machine's own binaries.

Used by the test suite (``tests/conftest.py``) and by the benchmarks (``from tests.services import
postgres_server``). Each server lives in its own temporary folder on a free port of 127.0.0.1, is
tuned for speed rather than durability, and is stopped and deleted when its context manager exits,
also on errors.

PostgreSQL refuses to run as root; when this process is root the server runs as the ``postgres``
system user (the one the Debian ``postgresql`` package creates).

The RabbitMQ node (``tests/service_rabbitmq.py``) and the Redis Sentinel quorum
(``tests/service_sentinel.py``) live in modules of their own, built on the helpers here; their
binaries are found here, with the others.

A missing binary is an error (:class:`ServiceBinaryNotFound`) naming the apt package to install:
the suite fails rather than skips when a service cannot start.

    python -m tests.services check    # exit 1 and name the apt packages when a binary is missing
    python -m tests.services run      # start both servers, print their URLs, wait for Ctrl-C
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pwd
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from glob import glob
from pathlib import Path
from typing import Any

__all__ = [
    "PostgresServer",
    "RedisServer",
    "ServiceBinaryNotFound",
    "ServiceError",
    "find_postgres_bindir",
    "find_rabbitmq_sbin",
    "find_redis_sentinel",
    "find_redis_server",
    "free_port",
    "interrupt_on_sigterm",
    "missing_apt_packages",
    "multi_host_url",
    "postgres_primary_and_standby",
    "postgres_server",
    "redis_server",
]

POSTGRES_APT_PACKAGE = "postgresql"
REDIS_APT_PACKAGE = "redis-server"

# Where PostgreSQL server binaries live when they are not on PATH (Debian/Ubuntu first). The newest
# version found wins. Tests monkeypatch these lists to simulate a machine without the binaries.
PG_BINDIR_GLOBS: list[str] = [
    "/usr/lib/postgresql/*/bin",
    "/usr/pgsql-*/bin",
    "/usr/local/pgsql/bin",
]
REDIS_SEARCH_DIRS: list[str] = ["/usr/bin", "/usr/local/bin", "/usr/sbin"]

# Explicit overrides, for machines with binaries in unusual places.
PG_BINDIR_ENV = "CQ_PG_BINDIR"
REDIS_SERVER_ENV = "CQ_REDIS_SERVER"

POSTGRES_SYSTEM_USER = "postgres"
START_TIMEOUT = 30.0
STOP_TIMEOUT = 20.0
PORT_ATTEMPTS = 5
LOG_TAIL_LINES = 40

# Durability off (the data is thrown away), enough connections for many scheduler processes.
POSTGRES_SETTINGS: dict[str, str] = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "300",
    "shared_buffers": "128MB",
    "logging_collector": "off",
}


class ServiceError(RuntimeError):
    """A test service could not be found, started or stopped."""


class ServiceBinaryNotFound(ServiceError):
    """A server binary is not installed; the message names the apt package that provides it."""

    def __init__(self, binary: str, package: str, searched: Sequence[str]) -> None:
        self.binary = binary
        self.package = package
        self.searched = list(searched)
        where = ", ".join(self.searched) or "nowhere"
        super().__init__(
            f"{binary} not found (searched: {where}). Install it with "
            f"`apt-get install -y {package}` (or run .ci/run as root, which does that)."
        )


# --------------------------------------------------------------------------- finding binaries


def _version_key(path: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", path))


def _has_pg_server(bindir: Path) -> bool:
    return all(os.access(bindir / name, os.X_OK) for name in ("initdb", "postgres"))


def find_postgres_bindir() -> Path:
    """The folder holding ``initdb`` and ``postgres``, newest version first."""
    searched: list[str] = []
    override = os.environ.get(PG_BINDIR_ENV)
    if override:
        searched.append(f"${PG_BINDIR_ENV}={override}")
        if _has_pg_server(Path(override)):
            return Path(override)
    for pattern in PG_BINDIR_GLOBS:
        searched.append(pattern)
        for candidate in sorted(glob(pattern), key=_version_key, reverse=True):
            if _has_pg_server(Path(candidate)):
                return Path(candidate)
    searched.append("pg_config --bindir")
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True
            ).stdout.strip()
            if out and _has_pg_server(Path(out)):
                return Path(out)
    searched.append("PATH")
    initdb = shutil.which("initdb")
    if initdb:
        # Follow symlinks such as /usr/local/bin/initdb -> /usr/lib/postgresql/15/bin/initdb.
        bindir = Path(initdb).resolve().parent
        if _has_pg_server(bindir):
            return bindir
    raise ServiceBinaryNotFound(
        "PostgreSQL server (initdb, postgres)", POSTGRES_APT_PACKAGE, searched
    )


def find_redis_server() -> Path:
    """The ``redis-server`` binary."""
    searched: list[str] = []
    override = os.environ.get(REDIS_SERVER_ENV)
    if override:
        searched.append(f"${REDIS_SERVER_ENV}={override}")
        if os.access(override, os.X_OK):
            return Path(override)
    searched.append("PATH")
    found = shutil.which("redis-server")
    if found:
        return Path(found)
    for folder in REDIS_SEARCH_DIRS:
        searched.append(folder)
        candidate = Path(folder) / "redis-server"
        if os.access(candidate, os.X_OK):
            return candidate
    raise ServiceBinaryNotFound("redis-server", REDIS_APT_PACKAGE, searched)


# Redis Sentinel: Debian ships it as a package of its own (the servers: tests/service_sentinel.py).
REDIS_SENTINEL_APT_PACKAGE = "redis-sentinel"


def find_redis_sentinel() -> Path:
    """The ``redis-sentinel`` binary (Debian's ``redis-sentinel`` package)."""
    searched = ["PATH"]
    found = shutil.which("redis-sentinel")
    if found:
        return Path(found)
    for folder in REDIS_SEARCH_DIRS:
        searched.append(folder)
        candidate = Path(folder) / "redis-sentinel"
        if os.access(candidate, os.X_OK):
            return candidate
    raise ServiceBinaryNotFound("redis-sentinel", REDIS_SENTINEL_APT_PACKAGE, searched)


# RabbitMQ (the node: tests/service_rabbitmq.py).

#: Folders holding the RabbitMQ server's own scripts (``rabbitmq-server``, ``rabbitmqctl``). Not
#: Debian's /usr/sbin wrappers: run as root, they switch to the ``rabbitmq`` user and the system
#: node's /var/lib/rabbitmq.
RABBITMQ_SBIN_GLOBS: list[str] = [
    "/usr/lib/rabbitmq/bin",
    "/usr/lib/rabbitmq/lib/rabbitmq_server-*/sbin",
    "/usr/local/lib/rabbitmq/sbin",
]
RABBITMQ_SBIN_ENV = "CQ_RABBITMQ_SBIN"
RABBITMQ_APT_PACKAGE = "rabbitmq-server"


def _is_rabbitmq_sbin(folder: Path) -> bool:
    server = folder / "rabbitmq-server"
    return (
        os.access(server, os.X_OK)
        and os.access(folder / "rabbitmqctl", os.X_OK)
        and server.resolve().name != "rabbitmq-script-wrapper"
    )


def find_rabbitmq_sbin() -> Path:
    """The folder holding ``rabbitmq-server`` and ``rabbitmqctl``, newest version first."""
    searched: list[str] = []
    override = os.environ.get(RABBITMQ_SBIN_ENV)
    if override:
        searched.append(f"${RABBITMQ_SBIN_ENV}={override}")
        if _is_rabbitmq_sbin(Path(override)):
            return Path(override)
    for pattern in RABBITMQ_SBIN_GLOBS:
        searched.append(pattern)
        for candidate in sorted(glob(pattern), key=_version_key, reverse=True):
            if _is_rabbitmq_sbin(Path(candidate)):
                return Path(candidate)
    raise ServiceBinaryNotFound(
        "RabbitMQ server (rabbitmq-server, rabbitmqctl)", RABBITMQ_APT_PACKAGE, searched
    )


#: The headless browser of the dashboard's browser tests (Debian's package, never a download).
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_APT_PACKAGE = "chromium"


def find_chromium() -> Path:
    if os.access(CHROMIUM, os.X_OK):
        return CHROMIUM
    raise ServiceBinaryNotFound("chromium", CHROMIUM_APT_PACKAGE, [str(CHROMIUM.parent)])


def missing_apt_packages() -> list[str]:
    """The apt packages whose server binaries (and browser) this machine lacks."""
    missing = []
    for finder, package in (
        (find_postgres_bindir, POSTGRES_APT_PACKAGE),
        (find_redis_server, REDIS_APT_PACKAGE),
        (find_redis_sentinel, REDIS_SENTINEL_APT_PACKAGE),
        (find_rabbitmq_sbin, RABBITMQ_APT_PACKAGE),
        (find_chromium, CHROMIUM_APT_PACKAGE),
    ):
        try:
            finder()
        except ServiceBinaryNotFound:
            missing.append(package)
    return missing


# --------------------------------------------------------------------------- processes


#: Ports handed to the tests' servers come from below the kernel's ephemeral range (32768 and up
#: by default), which outgoing connections and binds to port 0 draw from, and each pytest-xdist
#: worker has a block of its own: a port one test process picked is not handed to another one
#: before its server binds it.
_PORT_BASE = 20_000
_PORT_BLOCK = 1_000
_ports: Iterator[int] | None = None


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free now, from this test process's block (its xdist worker's; a process it
    starts begins elsewhere in the block, by its pid). A port some other program holds is
    skipped; one taken after this check makes the server retry on another."""
    global _ports
    if _ports is None:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # "gw0", "gw1", ...
        index = int(worker[2:]) + 1 if worker[2:].isdigit() else 0
        first = _PORT_BASE + index * _PORT_BLOCK
        offset = os.getpid() % _PORT_BLOCK
        _ports = itertools.cycle(
            [*range(first + offset, first + _PORT_BLOCK), *range(first, first + offset)]
        )
    for _ in range(_PORT_BLOCK):
        port = next(_ports)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    raise ServiceError(f"no free port in {_PORT_BLOCK} tried on {host}")


def _log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    tail = text.splitlines()[-lines:]
    return "\n".join(f"    {line}" for line in tail) or "    (empty log)"


def _run_as_user_kwargs(user: str | None) -> dict[str, Any]:
    """Popen arguments that drop from root to ``user``; none when ``user`` is None.

    subprocess does setgid/setgroups/setuid in the child just before exec, so the Popen pid is the
    server itself and signals reach it directly (a runuser/su wrapper would stand in between).
    """
    if user is None:
        return {}
    entry = pwd.getpwnam(user)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def _postgres_run_user() -> str | None:
    """None when PostgreSQL can run as the current user; the system user to switch to as root."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(POSTGRES_SYSTEM_USER)
    except KeyError:
        raise ServiceError(
            f"running as root, which PostgreSQL refuses, and there is no '{POSTGRES_SYSTEM_USER}' "
            f"system user to run it as; install the {POSTGRES_APT_PACKAGE} package (it creates "
            "the user) or run the tests as an ordinary user"
        ) from None
    return POSTGRES_SYSTEM_USER


def _temp_base(for_other_user: bool) -> str:
    # Unix socket paths are limited to ~107 bytes; another user must be able to reach the folder.
    base = tempfile.gettempdir()
    if len(base) > 60 or (for_other_user and not _others_can_traverse(base)):
        base = "/tmp"
    return base


def _others_can_traverse(path: str) -> bool:
    current = Path(path).resolve()
    return all(os.stat(folder).st_mode & stat.S_IXOTH for folder in (current, *current.parents))


def _stop_process(proc: subprocess.Popen[bytes] | None, first_signal: int, timeout: float) -> None:
    """Signal ``proc``, wait, escalate to SIGKILL after ``timeout``."""
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(first_signal)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(timeout)


_START_MARKER = "--- starting on port"


def _port_clash(log: Path, words: Sequence[str] = ()) -> bool:
    """Whether the latest start attempt recorded in ``log`` failed to bind its port."""
    text = _log_tail(log).rpartition(_START_MARKER)[2].lower()
    clash = ("address already in use", "could not create any tcp/ip sockets", *words)
    return any(word in text for word in clash)


class _Server:
    """Start/stop/restart of one server process on a fixed host, with port-clash retries."""

    name = "server"
    stop_signal = signal.SIGTERM
    # What the server's log says when the port is taken, lower case (beside the defaults).
    port_clash_words: tuple[str, ...] = ()

    def __init__(self, basedir: Path, port: int | None = None) -> None:
        self.host = "127.0.0.1"
        self.basedir = basedir
        self.port = port or free_port(self.host)
        self.log_path = basedir / f"{self.name}.log"
        self._proc: subprocess.Popen[bytes] | None = None

    # Subclasses provide the command line, the Popen user and the readiness probe.
    def _command(self) -> list[str]:
        raise NotImplementedError

    def _popen_kwargs(self) -> dict[str, Any]:
        return {}

    def _ready(self) -> bool:
        raise NotImplementedError

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc and self._proc.poll() is None else None

    @property
    def running(self) -> bool:
        return self.pid is not None

    def start(self, timeout: float = START_TIMEOUT, *, keep_port: bool = False) -> None:
        """Start and wait until the server answers. On a port clash at first start another free
        port is tried; ``keep_port`` (used by restart) retries the same port instead."""
        if self.running:
            raise ServiceError(f"{self.name} already running (pid {self.pid})")
        for attempt in range(1, PORT_ATTEMPTS + 1):
            if self._try_start(timeout):
                return
            if attempt == PORT_ATTEMPTS:
                break
            if keep_port:
                time.sleep(0.5)
            else:
                self.port = free_port(self.host)
        raise ServiceError(
            f"{self.name} could not bind 127.0.0.1:{self.port} after {PORT_ATTEMPTS} attempts; "
            f"log {self.log_path}:\n{_log_tail(self.log_path)}"
        )

    def _try_start(self, timeout: float) -> bool:
        """True when ready, False on a port clash; raises on any other failure."""
        with open(self.log_path, "ab") as log:
            log.write(f"{_START_MARKER} {self.port}\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                self._command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.basedir,
                **self._popen_kwargs(),
            )
        deadline = time.monotonic() + timeout
        while True:
            code = self._proc.poll()
            if code is not None:
                if _port_clash(self.log_path, self.port_clash_words):
                    return False
                raise ServiceError(
                    f"{self.name} exited with status {code} while starting on port {self.port}; "
                    f"log {self.log_path}:\n{_log_tail(self.log_path)}"
                )
            if self._ready():
                return True
            if time.monotonic() > deadline:
                self.stop()
                raise ServiceError(
                    f"{self.name} did not accept connections on 127.0.0.1:{self.port} within "
                    f"{timeout:.0f}s; log {self.log_path}:\n{_log_tail(self.log_path)}"
                )
            time.sleep(0.05)

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Stop the server (idempotent); its data folder stays until the context manager exits."""
        _stop_process(self._proc, self.stop_signal, timeout)
        self._proc = None

    def restart(self, timeout: float = START_TIMEOUT) -> None:
        """Stop and start again on the same port and data."""
        self.stop()
        self.start(timeout, keep_port=True)


# --------------------------------------------------------------------------- PostgreSQL

_DRIVERS = {"psycopg2": "psycopg2", "psycopg": "psycopg", "psycopg3": "psycopg"}


class PostgresServer(_Server):
    """A PostgreSQL cluster in a temporary folder; superuser ``user`` with trust authentication."""

    name = "postgres"
    stop_signal = signal.SIGINT  # PostgreSQL's "fast" shutdown: roll back sessions, stop cleanly

    def __init__(
        self,
        bindir: Path,
        basedir: Path,
        *,
        user: str = "quartz",
        dbname: str = "quartz",
        run_as: str | None = None,
        settings: dict[str, str] | None = None,
    ) -> None:
        super().__init__(basedir)
        self.bindir = bindir
        self.user = user
        self.dbname = dbname
        self.run_as = run_as
        self.datadir = basedir / "data"
        self.socket_dir = basedir
        self.settings = {**POSTGRES_SETTINGS, **(settings or {})}

    def url(self, driver: str = "psycopg2", dbname: str | None = None) -> str:
        """SQLAlchemy URL; ``driver``: ``psycopg2``, or ``psycopg``/``psycopg3`` for psycopg 3."""
        try:
            dialect = _DRIVERS[driver]
        except KeyError:
            raise ValueError(f"unknown driver {driver!r}; use one of {sorted(_DRIVERS)}") from None
        return f"postgresql+{dialect}://{self.user}@{self.host}:{self.port}/{dbname or self.dbname}"

    def dsn(self, dbname: str | None = None) -> str:
        """libpq connection string, for psycopg2.connect / psycopg.connect."""
        return f"host={self.host} port={self.port} user={self.user} dbname={dbname or self.dbname}"

    def connect(self, dbname: str | None = None, *, connect_timeout: int = 5) -> Any:
        """A psycopg2 connection in autocommit mode (close it yourself)."""
        import psycopg2

        conn = psycopg2.connect(self.dsn(dbname), connect_timeout=connect_timeout)
        conn.autocommit = True
        return conn

    def execute(
        self, sql: Any, params: Sequence[Any] | None = None, *, dbname: str = "postgres"
    ) -> None:
        """Run one administrative statement in autocommit mode."""
        conn = self.connect(dbname)
        try:
            with conn.cursor() as cur:
                cur.execute(sql, params)
        finally:
            conn.close()

    def create_database(
        self, name: str, driver: str = "psycopg2", *, template: str | None = None
    ) -> str:
        """Create a database and return its SQLAlchemy URL: empty, or a copy of the database
        ``template`` (which nobody may be connected to meanwhile)."""
        from psycopg2 import sql

        statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template is not None:
            statement += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
        self.execute(statement)
        return self.url(driver, name)

    def drop_database(self, name: str) -> None:
        """Drop a database, disconnecting its sessions first."""
        from psycopg2 import sql

        self.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )

    def initdb(self) -> None:
        command = [
            str(self.bindir / "initdb"),
            "--pgdata", str(self.datadir),
            "--username", self.user,
            "--auth", "trust",
            "--encoding", "UTF8",
            "--no-locale",
            "--no-sync",
        ]  # fmt: skip
        self._run_tool(command, "initdb")

    def base_backup_from(self, primary: PostgresServer) -> None:
        """Fill this server's (empty) data folder with a base backup of ``primary``, set up as
        its streaming standby (``pg_basebackup -R``: ``standby.signal`` and ``primary_conninfo``).
        The standby's ``cluster_name`` setting, if any, is the name it replicates under (what
        the primary's ``synchronous_standby_names`` lists)."""
        command = [
            str(self.bindir / "pg_basebackup"),
            "--pgdata", str(self.datadir),
            "--host", primary.host,
            "--port", str(primary.port),
            "--username", primary.user,
            "--write-recovery-conf",
            "--wal-method", "stream",
            "--checkpoint", "fast",
            "--no-sync",
        ]  # fmt: skip
        self._run_tool(command, "pg_basebackup")

    def promote(self, timeout: float = START_TIMEOUT) -> None:
        """Promote this standby to a primary (``pg_ctl promote``), waiting until it accepts
        writes."""
        command = [
            str(self.bindir / "pg_ctl"), "promote",
            "--pgdata", str(self.datadir),
            "--wait", "--timeout", str(int(timeout)),
        ]  # fmt: skip
        self._run_tool(command, "pg_ctl promote")

    def stop_immediately(self) -> None:
        """PostgreSQL's "immediate" shutdown (SIGQUIT): every backend ends at once, nothing is
        written or rolled back, clients see their connections drop, as when a host dies."""
        _stop_process(self._proc, signal.SIGQUIT, STOP_TIMEOUT)
        self._proc = None

    def require_synchronous_standby(self, name: str, timeout: float = START_TIMEOUT) -> None:
        """Make the standby replicating as ``name`` synchronous (a commit here returns once it
        has the commit's WAL) and wait until it is."""
        self.execute("ALTER SYSTEM SET synchronous_standby_names = %s", (name,))
        self.execute("SELECT pg_reload_conf()")
        deadline = time.monotonic() + timeout
        while True:
            conn = self.connect("postgres")
            try:
                with conn.cursor() as cur:
                    cur.execute(
                        "SELECT sync_state FROM pg_stat_replication WHERE application_name = %s",
                        (name,),
                    )
                    row = cur.fetchone()
            finally:
                conn.close()
            if row is not None and row[0] == "sync":
                return
            if time.monotonic() > deadline:
                raise ServiceError(f"standby {name!r} not synchronous after {timeout:.0f}s")
            time.sleep(0.1)

    def _run_tool(self, command: list[str], what: str) -> None:
        """Run one of the server's tools (initdb, pg_basebackup) as the server's user, its
        output to the server's log; raise naming the tool when it fails."""
        with open(self.log_path, "ab") as log:
            result = subprocess.run(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.basedir,
                timeout=120,
                check=False,
                **self._popen_kwargs(),
            )
        if result.returncode != 0:
            raise ServiceError(
                f"{what} failed with status {result.returncode}; log {self.log_path}:\n"
                f"{_log_tail(self.log_path)}"
            )

    def _command(self) -> list[str]:
        command = [
            str(self.bindir / "postgres"),
            "-D", str(self.datadir),
            "-p", str(self.port),
            "-c", f"listen_addresses={self.host}",
            "-c", f"unix_socket_directories={self.socket_dir}",
        ]  # fmt: skip
        for key, value in self.settings.items():
            command += ["-c", f"{key}={value}"]
        return command

    def _popen_kwargs(self) -> dict[str, Any]:
        return _run_as_user_kwargs(self.run_as)

    def _ready(self) -> bool:
        import psycopg2

        try:
            conn = self.connect("postgres", connect_timeout=2)
        except psycopg2.OperationalError:
            return False
        try:
            with conn.cursor() as cur:
                cur.execute("show data_directory")
                row = cur.fetchone()
        finally:
            conn.close()
        # Another server that took the port first must not pass for ours.
        return row is not None and Path(row[0]) == self.datadir


@contextlib.contextmanager
def postgres_server(
    *,
    user: str = "quartz",
    dbname: str = "quartz",
    settings: dict[str, str] | None = None,
    start_timeout: float = START_TIMEOUT,
) -> Iterator[PostgresServer]:
    """Start a throwaway PostgreSQL holding database ``dbname``; stop and delete it on exit."""
    bindir = find_postgres_bindir()
    run_as = _postgres_run_user()
    basedir = Path(tempfile.mkdtemp(prefix="cq-pg-", dir=_temp_base(run_as is not None)))
    try:
        if run_as is not None:
            entry = pwd.getpwnam(run_as)
            os.chown(basedir, entry.pw_uid, entry.pw_gid)
        server = PostgresServer(
            bindir, basedir, user=user, dbname=dbname, run_as=run_as, settings=settings
        )
        try:
            server.initdb()
            server.start(start_timeout)
            if dbname != "postgres":
                server.create_database(dbname)
            yield server
        finally:
            server.stop()
    finally:
        shutil.rmtree(basedir, ignore_errors=True)


def multi_host_url(
    servers: Sequence[PostgresServer], driver: str = "psycopg2", dbname: str | None = None
) -> str:
    """A SQLAlchemy URL naming every server as a host, with ``target_session_attrs=read-write``:
    libpq tries them in order and keeps the first that accepts writes (the primary)."""
    first = servers[0]
    hosts = "&".join(f"host={server.host}:{server.port}" for server in servers)
    dialect = _DRIVERS[driver]
    return (
        f"postgresql+{dialect}://{first.user}@/{dbname or first.dbname}"
        f"?{hosts}&target_session_attrs=read-write"
    )


@contextlib.contextmanager
def postgres_primary_and_standby(
    *,
    user: str = "quartz",
    dbname: str = "quartz",
    standby_name: str = "standby1",
    start_timeout: float = START_TIMEOUT,
) -> Iterator[tuple[PostgresServer, PostgresServer]]:
    """A throwaway primary holding database ``dbname`` and a hot standby streaming from it
    (a base backup of it), synchronous: a commit on the primary returns once the standby has its
    WAL, so a promoted standby holds every commit a client saw. Both use durable commits
    (``synchronous_commit=on``); stopped and deleted on exit."""
    bindir = find_postgres_bindir()
    run_as = _postgres_run_user()
    basedir = Path(tempfile.mkdtemp(prefix="cq-pgha-", dir=_temp_base(run_as is not None)))
    servers: list[PostgresServer] = []
    try:
        for name in ("primary", "standby"):
            folder = basedir / name
            folder.mkdir()
            if run_as is not None:
                entry = pwd.getpwnam(run_as)
                for path in (basedir, folder):
                    os.chown(path, entry.pw_uid, entry.pw_gid)
            settings = {"synchronous_commit": "on"}
            if name == "standby":
                settings["cluster_name"] = standby_name  # the name it replicates under
            servers.append(
                PostgresServer(
                    bindir, folder, user=user, dbname=dbname, run_as=run_as, settings=settings
                )
            )
        primary, standby = servers
        primary.initdb()
        primary.start(start_timeout)
        if dbname != "postgres":
            primary.create_database(dbname)
        standby.base_backup_from(primary)
        standby.start(start_timeout)
        # Only now: with a synchronous standby named and absent, every commit would wait.
        primary.require_synchronous_standby(standby_name)
        yield primary, standby
    finally:
        for server in reversed(servers):
            server.stop()
        shutil.rmtree(basedir, ignore_errors=True)


# --------------------------------------------------------------------------- Redis


class RedisServer(_Server):
    """A Redis server without persistence in a temporary folder."""

    name = "redis"

    def __init__(self, binary: Path, basedir: Path, *, extra_args: Sequence[str] = ()) -> None:
        super().__init__(basedir)
        self.binary = binary
        self.extra_args = list(extra_args)

    def url(self, db: int = 0) -> str:
        return f"redis://{self.host}:{self.port}/{db}"

    def client(self, db: int = 0) -> Any:
        """A redis-py client (close it yourself)."""
        import redis

        return redis.Redis(host=self.host, port=self.port, db=db, socket_connect_timeout=2)

    def flushdb(self, db: int) -> None:
        with contextlib.closing(self.client(db)) as client:
            client.flushdb()

    def _command(self) -> list[str]:
        return [
            str(self.binary),
            "--port", str(self.port),
            "--bind", self.host,
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self.basedir),
            "--daemonize", "no",
            "--databases", "16",
            *self.extra_args,
        ]  # fmt: skip

    def _ready(self) -> bool:
        # A raw socket with one short timeout: redis-py's retries would wait minutes on a listener
        # that accepts and never answers.
        try:
            with socket.create_connection((self.host, self.port), timeout=1) as sock:
                sock.sendall(b"INFO server\r\n")
                reply = b""
                while b"\r\nprocess_id:" not in reply or not reply.endswith(b"\r\n"):
                    chunk = sock.recv(65536)
                    if not chunk:
                        return False
                    reply += chunk
        except OSError:  # refused, reset or timed out
            return False
        # Another server that took the port first must not pass for ours.
        found = re.search(rb"\r\nprocess_id:(\d+)\r\n", reply)
        return found is not None and self._proc is not None and int(found[1]) == self._proc.pid


@contextlib.contextmanager
def one_server(make: Callable[[Path], Any], prefix: str, start_timeout: float) -> Iterator[Any]:
    """The server ``make`` builds in a new folder (``prefix``), started; stopped and its folder
    deleted on exit (a server run as the user who runs the tests)."""
    basedir = Path(tempfile.mkdtemp(prefix=prefix, dir=_temp_base(False)))
    try:
        server = make(basedir)
        try:
            server.start(start_timeout)
            yield server
        finally:
            server.stop()
    finally:
        shutil.rmtree(basedir, ignore_errors=True)


@contextlib.contextmanager
def redis_server(*, start_timeout: float = START_TIMEOUT) -> Iterator[RedisServer]:
    """Start a throwaway Redis; stop it and delete its folder on exit."""
    binary = find_redis_server()
    with one_server(lambda basedir: RedisServer(binary, basedir), "cq-redis-", start_timeout) as s:
        yield s


def interrupt_on_sigterm() -> None:
    """Make SIGTERM raise KeyboardInterrupt, as Ctrl-C does, so that context managers (and pytest's
    fixture teardown) stop the servers and delete their folders when a CI timeout terminates the
    run. Leaves a handler someone else installed alone."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, interrupt)


# --------------------------------------------------------------------------- command line


def _check() -> int:
    missing = missing_apt_packages()
    if missing:
        print(
            "missing server binaries for the test suite; install them with:\n"
            f"    apt-get install -y {' '.join(missing)}\n"
            "(.ci/run does this when run as root)",
            file=sys.stderr,
        )
        return 1
    print(
        f"PostgreSQL: {find_postgres_bindir()}  Redis: {find_redis_server()}  "
        f"Sentinel: {find_redis_sentinel()}  RabbitMQ: {find_rabbitmq_sbin()}  "
        f"Chromium: {find_chromium()}"
    )
    return 0


def _run() -> int:
    interrupt_on_sigterm()
    with postgres_server() as pg, redis_server() as rd:
        print(
            f"postgres: {pg.url()}\n          {pg.url('psycopg')}\nredis:    {rd.url()}", flush=True
        )
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    commands: dict[str, Callable[[], int]] = {"check": _check, "run": _run}
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 or args[0] not in commands:
        print(f"usage: python -m tests.services {{{'|'.join(commands)}}}", file=sys.stderr)
        return 2
    return commands[args[0]]()


if __name__ == "__main__":
    sys.exit(main())
