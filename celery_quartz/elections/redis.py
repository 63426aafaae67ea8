"""Leadership by a Redis lock with renewal (redis-py's :class:`redis.lock.Lock`).

The lock lives ``quartz_election_lock_timeout`` seconds (10) unless renewed; the leader renews
it every third of that and stands down the moment a renewal fails (the lock expired and may be
someone else's, or Redis does not answer). A killed leader's lock is taken over once it
expires. A leader paused longer than the timeout (a stopped container, a long GC pause) wakes up
deposed: the renewal fails, and the fencing epoch refuses whatever it writes before it notices.

The URL may name Redis Sentinels instead of a server, as kombu's Sentinel transport takes them
(``sentinel://host:26379/0;sentinel://host2:26379/0``): the lock then lives on the master the
Sentinels name for ``master_name``, and a failover moves it (a renewal during the switch fails,
the leader stands down, and leads again once the lock is free).
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import unquote, urlsplit

import redis as redis_py
from redis.exceptions import LockError, RedisError

from celery_quartz.elections.base import Election
from celery_quartz.errors import ConfigurationError
from celery_quartz.leadership import SchedulerLeadership

logger = logging.getLogger(__name__)


class RedisLockElection(Election):
    """A Redis lock named for the scheduler, renewed while this process leads."""

    kind = "redis lock election"

    def __init__(
        self,
        url: str,
        leadership: SchedulerLeadership,
        *,
        scheduler_name: str,
        table_prefix: str = "quartz_",
        lock_timeout: float = 10.0,
        retry_interval: float = 1.0,
        master_name: str = "",
        sentinel_kwargs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(leadership, retry_interval=retry_interval, hold_interval=lock_timeout / 3)
        self.lock_timeout = lock_timeout
        self.client = redis_client(
            url,
            master_name=master_name,
            sentinel_kwargs=sentinel_kwargs,
            socket_timeout=max(0.5, lock_timeout / 3),
            socket_connect_timeout=2,
        )
        self.lock = self.client.lock(
            f"celery_quartz:leader:{table_prefix}{scheduler_name}",
            timeout=lock_timeout,
            thread_local=False,
        )

    def try_acquire(self) -> bool:
        return bool(self.lock.acquire(blocking=False))

    def still_held(self) -> bool:
        try:
            self.lock.extend(self.lock_timeout, replace_ttl=True)
        except (LockError, RedisError) as exc:
            logger.warning("%s: renewal failed (%s)", self.kind, exc)
            return False
        return True

    def release(self) -> None:
        try:
            self.lock.release()
        except (LockError, RedisError) as exc:
            logger.debug("%s: release: %s", self.kind, exc)

    def close(self) -> None:
        self.client.close()


def redis_client(
    url: str,
    *,
    master_name: str = "",
    sentinel_kwargs: dict[str, Any] | None = None,
    **options: Any,
) -> redis_py.Redis:
    """A client of the Redis at ``url``: a ``redis://`` (``rediss://``, ``unix://``) URL, or
    ``;``-separated ``sentinel://`` URLs, whose client follows the master the Sentinels name
    ``master_name``. The database and password come from the first Sentinel URL, as kombu reads
    them; ``sentinel_kwargs`` are the Sentinels' own connection options (their password)."""
    if not url.startswith("sentinel://"):
        return redis_py.Redis.from_url(url, **options)
    if not master_name:
        raise ConfigurationError(
            f"the Redis election's URL {_redacted(url)} names Sentinels, but no master name: "
            "set quartz_election_redis_master_name (or broker_transport_options['master_name'])"
        )
    from redis.sentinel import Sentinel

    sentinels: list[tuple[str, int]] = []
    parts = [urlsplit(part.strip()) for part in url.split(";") if part.strip()]
    for part in parts:
        if part.scheme != "sentinel" or not part.hostname:
            raise ConfigurationError(
                f"the Redis election's URL {_redacted(url)}: every ;-separated part must be "
                "sentinel://host:port"
            )
        sentinels.append((part.hostname, part.port or 26379))
    first = parts[0]
    path = first.path.strip("/")
    if path and not path.isdigit():
        raise ConfigurationError(
            f"the Redis election's URL {_redacted(url)}: the database must be a number, "
            f"got {path!r}"
        )
    master_options = dict(options)
    if first.password:
        master_options["password"] = unquote(first.password)
    if first.username:
        master_options["username"] = unquote(first.username)
    sentinel = Sentinel(
        sentinels,
        sentinel_kwargs={
            "socket_timeout": options.get("socket_timeout"),
            "socket_connect_timeout": options.get("socket_connect_timeout"),
            **(sentinel_kwargs or {}),
        },
        **master_options,
    )
    return sentinel.master_for(master_name, db=int(path or 0))


def _redacted(url: str) -> str:
    return ";".join(
        part.replace(f":{p.password}@", ":***@") if (p := urlsplit(part)).password else part
        for part in url.split(";")
    )
