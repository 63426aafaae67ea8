"""Leadership by a Redis lock with renewal (redis-py's :class:`redis.lock.Lock`).

The lock lives ``quartz_election_lock_timeout`` seconds (10) unless renewed; the leader renews
it every third of that and stands down the moment a renewal fails (the lock expired and may be
someone else's, or Redis does not answer). A killed leader's lock is taken over once it
expires. A leader paused longer than the timeout (a stopped container, a long GC pause) wakes up
deposed: the renewal fails, and the fencing epoch refuses whatever it writes before it notices.
"""

from __future__ import annotations

import logging

import redis as redis_py
from redis.exceptions import LockError, RedisError

from celery_quartz.elections.base import Election
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
    ) -> None:
        super().__init__(leadership, retry_interval=retry_interval, hold_interval=lock_timeout / 3)
        self.lock_timeout = lock_timeout
        self.client = redis_py.Redis.from_url(
            url, socket_timeout=max(0.5, lock_timeout / 3), socket_connect_timeout=2
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
