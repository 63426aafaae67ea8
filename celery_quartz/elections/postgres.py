"""Leadership by a PostgreSQL advisory lock, held on a dedicated connection to the store's own
database.

The preferred election: it fails with the tables. The lock lives as long as the session, so a
process that dies (or whose connection drops) loses it at once on the server, and the next
contender's attempt takes it; the holder learns of a lost connection at its next check, every
``quartz_election_retry_interval`` seconds, and stands down. TCP keepalives bound how long a
silently broken network path can pass for a live session.

A holder that is frozen (SIGSTOP, a paused VM, a long GC pause) keeps its session open, and so
its lock. The session therefore runs with PostgreSQL's ``idle_session_timeout`` (14 and later) at
``quartz_election_lock_timeout``: the holder's check every retry interval keeps it busy, and a
holder silent for longer is disconnected by the server, which frees the lock for the next
contender. A frozen leader is replaced within the lock timeout plus one retry interval; when it
resumes, its check finds the session gone and it stands down, and the fencing epoch refuses any
write it still attempts.

Caveat (seed 000): PostgreSQL grants advisory locks per server, including on a hot standby, so
after a failover the old and the new primary can both grant one; the fencing epoch, kept in the
tables, is what refuses the loser's writes then.
"""

from __future__ import annotations

import hashlib
import logging

from sqlalchemy import Connection, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from celery_quartz.elections.base import Election
from celery_quartz.errors import ConfigurationError
from celery_quartz.leadership import SchedulerLeadership
from celery_quartz.store.engine import postgres_connect_args

logger = logging.getLogger(__name__)


def advisory_lock_key(scheduler_name: str, table_prefix: str) -> int:
    """A stable signed 64-bit key for the scheduler name under a table prefix."""
    digest = hashlib.blake2b(
        f"celery_quartz:{table_prefix}:{scheduler_name}".encode(), digest_size=8
    ).digest()
    return int.from_bytes(digest, "big", signed=True)


class PostgresAdvisoryLockElection(Election):
    """``pg_try_advisory_lock`` on a connection of its own, checked every ``retry_interval``."""

    kind = "postgresql advisory-lock election"

    def __init__(
        self,
        url: str,
        leadership: SchedulerLeadership,
        *,
        scheduler_name: str,
        table_prefix: str = "quartz_",
        retry_interval: float = 1.0,
        lock_timeout: float = 10.0,
    ) -> None:
        parsed = make_url(url)
        if parsed.get_backend_name() != "postgresql":
            raise ConfigurationError(
                f"quartz_election 'postgresql' needs a PostgreSQL store, not "
                f"{parsed.render_as_string(hide_password=True)!r}"
            )
        if lock_timeout < 2 * retry_interval:
            raise ConfigurationError(
                f"quartz_election_lock_timeout ({lock_timeout} s) must be at least twice "
                f"quartz_election_retry_interval ({retry_interval} s): the leader's session is "
                "disconnected after the lock timeout without a check"
            )
        super().__init__(leadership, retry_interval=retry_interval, hold_interval=retry_interval)
        self.key = advisory_lock_key(scheduler_name, table_prefix)
        self.lock_timeout = lock_timeout
        # Its own engine without a pool: the session that holds the lock is never shared.
        # The store's connection defaults (connect timeout, keepalives, TCP user timeout) apply.
        self._engine = create_engine(
            parsed, poolclass=NullPool, connect_args=postgres_connect_args(parsed)
        )
        self._conn: Connection | None = None

    def _connection(self) -> Connection:
        if self._conn is None:
            conn = self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            try:
                self._bound_idle_session(conn)
            except Exception:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def _bound_idle_session(self, conn: Connection) -> None:
        """Have the server end this session once it is idle past the lock timeout (a frozen
        holder), so its lock is freed; a server before PostgreSQL 14 cannot, and says so."""
        version = int(conn.execute(text("SHOW server_version_num")).scalar() or 0)
        if version < 140000:
            logger.warning(
                "%s: PostgreSQL %d has no idle_session_timeout: a frozen leader keeps the lock "
                "until its session ends (the fencing epoch still refuses its writes)",
                self.kind,
                version,
            )
            return
        conn.execute(
            text("SELECT set_config('idle_session_timeout', :ms, false)"),
            {"ms": f"{int(self.lock_timeout * 1000)}ms"},
        )

    def try_acquire(self) -> bool:
        try:
            won = (
                self._connection()
                .execute(text("SELECT pg_try_advisory_lock(:key)"), {"key": self.key})
                .scalar()
            )
        except Exception:
            self._drop_connection()
            raise
        return bool(won)

    def still_held(self) -> bool:
        # Asks the server whether this very session holds the lock: a reconnect would not.
        try:
            held = (
                self._connection()
                .execute(
                    text(
                        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
                        "AND pid = pg_backend_pid() AND objsubid = 1 "
                        "AND classid = CAST(:hi AS oid) AND objid = CAST(:lo AS oid)"
                    ),
                    {"hi": (self.key >> 32) & 0xFFFFFFFF, "lo": self.key & 0xFFFFFFFF},
                )
                .scalar()
            )
        except Exception:
            self._drop_connection()
            raise
        return bool(held)

    def release(self) -> None:
        if self._conn is None:
            return
        try:
            self._conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": self.key})
        finally:
            self._drop_connection()

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception as exc:
                logger.debug("closing the election connection: %s", exc)

    def close(self) -> None:
        self._drop_connection()
        self._engine.dispose()
