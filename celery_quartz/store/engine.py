"""Engines for the store's databases: PostgreSQL (psycopg2 or psycopg 3) and SQLite."""

from __future__ import annotations

import os
import re
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool, StaticPool

from celery_quartz.errors import ConfigurationError

SUPPORTED_BACKENDS = ("postgresql", "sqlite")
# The password of a URL that does not parse: from "scheme://user:" to the last "@".
_USERINFO_PASSWORD = re.compile(r"^([^:/?#]+://[^:/?#@]*:)(.*)@", re.DOTALL)
# libpq also reads a password from the query (?password=...).
_QUERY_PASSWORD = re.compile(r"([?&]password=)[^&]*", re.IGNORECASE)


def redact_url(url: object) -> str:
    """``url`` as it may be printed or logged: its password, in the user part or a ``password``
    query parameter, replaced by ``***``, whether or not the URL parses."""
    text = str(url)
    try:
        text = make_url(text).render_as_string(hide_password=True)
    except Exception:  # a malformed URL (a bad port, a stray character) keeps no secret either
        text = _USERINFO_PASSWORD.sub(r"\1***@", text, count=1)
    return _QUERY_PASSWORD.sub(r"\1***", text)


def _url_password(url: str) -> str | None:
    found = _USERINFO_PASSWORD.match(url)
    return found.group(2) if found and found.group(2) else None


#: libpq connection parameters every PostgreSQL engine of the store (and the election's) gets
#: unless its URL's query string gives them. libpq's own defaults wait on a dead server for as
#: long as the operating system's TCP does (minutes): after a failover, or a primary that stopped
#: answering, a process would hang on a connection instead of moving on to the next host of a
#: multi-host URL. ``connect_timeout`` bounds each host's connection attempt (seconds);
#: keepalives find an idle connection whose peer is gone (5 s idle, then 3 probes 2 s apart);
#: ``tcp_user_timeout`` (milliseconds) drops a connection whose sent data stays unacknowledged
#: that long (a statement sent to a host that vanished). None of them ends a slow query: the
#: server's kernel acknowledges what it receives while the query runs.
POSTGRES_CONNECT_DEFAULTS: dict[str, int] = {
    "connect_timeout": 5,
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 3,
    "tcp_user_timeout": 10_000,
}

# libpq reads these variables when a parameter is not given: one set there wins over our default.
_LIBPQ_ENVIRONMENT = {"connect_timeout": "PGCONNECT_TIMEOUT"}


def postgres_connect_args(url: Any, connect_args: dict[str, Any] | None = None) -> dict[str, Any]:
    """``connect_args`` with :data:`POSTGRES_CONNECT_DEFAULTS` added for every parameter that
    neither they, the URL's query string (``url``, a SQLAlchemy URL), nor libpq's environment
    variable for it (``PGCONNECT_TIMEOUT``) already set."""
    merged = dict(connect_args or {})
    for name, value in POSTGRES_CONNECT_DEFAULTS.items():
        env = _LIBPQ_ENVIRONMENT.get(name)
        if name in merged or name in url.query or (env and os.environ.get(env)):
            continue
        merged[name] = value
    return merged


def create_store_engine(
    url: str, *, idle_transaction_timeout: float | None = None, **kwargs: Any
) -> Engine:
    """An engine for ``url`` set up for the store's transactions.

    On PostgreSQL every connection gets :data:`POSTGRES_CONNECT_DEFAULTS` (connect timeout,
    keepalives, TCP user timeout) unless the URL's query string sets them
    (``?connect_timeout=10&tcp_user_timeout=30000``).

    ``idle_transaction_timeout`` (seconds, PostgreSQL): the server ends a session of the engine
    that sits inside a transaction, waiting on its client, for that long (its
    ``idle_in_transaction_session_timeout``), and with it the row locks it holds.

    SQLite has no row locks: every transaction starts with ``BEGIN IMMEDIATE``, so the write lock
    is taken at the start and two processes never race between a read and the write it decides
    (the race ``FOR UPDATE SKIP LOCKED`` settles on PostgreSQL). WAL lets readers run beside it.
    """
    try:
        parsed = make_url(url)
    except Exception as exc:  # sqlalchemy raises ArgumentError with a terse message
        reason, password = str(exc), _url_password(str(url))
        if password:
            reason = reason.replace(password, "***")
        raise ConfigurationError(
            f"quartz_store_url {redact_url(url)!r} is not a SQLAlchemy URL: {reason}"
        ) from None
    backend = parsed.get_backend_name()
    if backend not in SUPPORTED_BACKENDS:
        raise ConfigurationError(
            f"quartz_store_url {redact_url(url)!r}: "
            f"backend {backend!r} "
            f"is not supported (use one of {', '.join(SUPPORTED_BACKENDS)})"
        )
    if backend == "sqlite":
        kwargs.pop("pool_pre_ping", None)  # no pool to ping: a connection per transaction
        kwargs.pop("pool_size", None)  # nor connections kept
        return _sqlite_engine(parsed, **kwargs)
    kwargs.setdefault("pool_pre_ping", True)
    # Timeouts and keepalives (psycopg2 and psycopg 3 alike); a value in the URL wins.
    connect_args = postgres_connect_args(parsed, kwargs.pop("connect_args", None))
    if idle_transaction_timeout is not None:
        # libpq's startup options, after any the URL gives.
        given = connect_args.get("options") or parsed.query.get("options") or ""
        setting = f"-c idle_in_transaction_session_timeout={int(idle_transaction_timeout * 1000)}"
        connect_args["options"] = f"{given} {setting}".strip()
    kwargs["connect_args"] = connect_args
    if parsed.get_driver_name() == "psycopg2":
        # Batched UPDATEs (one per fired batch) in pages, not one round trip per row; psycopg 3
        # pipelines executemany by itself.
        kwargs.setdefault("executemany_mode", "values_plus_batch")
    return create_engine(parsed, **kwargs)


def _sqlite_engine(url: Any, **kwargs: Any) -> Engine:
    memory = url.database in (None, "", ":memory:")
    if memory:
        # One private database per engine: every connection must be the same one.
        kwargs.setdefault("poolclass", StaticPool)
    else:
        # No connection kept open between transactions: a process that forks (a Celery prefork
        # worker) must not hand an open SQLite connection, and its locks, to its children.
        kwargs.setdefault("poolclass", NullPool)
    kwargs.setdefault("connect_args", {"check_same_thread": False, "timeout": 30})
    engine = create_engine(url, **kwargs)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # The driver must not begin transactions itself; the "begin" hook below does.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        if not memory:
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine
