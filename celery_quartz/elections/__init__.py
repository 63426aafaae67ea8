"""Built-in leader elections for a non-clustered scheduler, one module each.

* :mod:`~celery_quartz.elections.postgres`: an advisory lock on the store's own database
  (preferred: it fails with the tables).
* :mod:`~celery_quartz.elections.redis`: a Redis lock with renewal.

A Kubernetes Lease (or any other election) needs no module: call the two callbacks of
:class:`celery_quartz.leadership.SchedulerLeadership` (docs/leadership.md).
"""

from __future__ import annotations

from typing import Any

from celery_quartz.config import Settings
from celery_quartz.elections.base import Election
from celery_quartz.errors import ConfigurationError
from celery_quartz.leadership import SchedulerLeadership

__all__ = ["Election", "build_election"]


def build_election(settings: Settings, app: Any, leadership: SchedulerLeadership) -> Election:
    """The election ``quartz_election`` names, for ``leadership``."""
    if settings.election == "postgresql":
        from celery_quartz.elections.postgres import PostgresAdvisoryLockElection

        return PostgresAdvisoryLockElection(
            settings.store_url,
            leadership,
            scheduler_name=settings.scheduler_name,
            table_prefix=settings.table_prefix,
            retry_interval=settings.election_retry_interval,
            lock_timeout=settings.election_lock_timeout,
        )
    if settings.election == "redis":
        from celery_quartz.elections.redis import RedisLockElection

        url = settings.election_redis_url or app.conf.broker_url
        # A Sentinel URL's master name and Sentinel options: the setting, else the broker's
        # (the usual case: the election on the broker's own Sentinels).
        transport = app.conf.broker_transport_options or {}
        return RedisLockElection(
            url,
            leadership,
            scheduler_name=settings.scheduler_name,
            table_prefix=settings.table_prefix,
            lock_timeout=settings.election_lock_timeout,
            retry_interval=settings.election_retry_interval,
            master_name=settings.election_redis_master_name or transport.get("master_name", ""),
            sentinel_kwargs=transport.get("sentinel_kwargs"),
        )
    raise ConfigurationError(
        f"scheduler {settings.scheduler_name!r}: quartz_election {settings.election!r} is not an "
        f"election (use postgresql or redis)"
    )
