"""The RAM store: the SQL store on a private in-memory SQLite database.

It never touches the cluster's tables: every instance has its own database, gone with the
process. For tests and single-process use; a cluster needs :class:`SqlStore` on a shared database.
"""

from __future__ import annotations

from celery_quartz.clock import Clock
from celery_quartz.job import DEFAULT_MAX_DATA_BYTES
from celery_quartz.misfire import DEFAULT_MISFIRE_THRESHOLD
from celery_quartz.retry import RetryPolicy
from celery_quartz.store.engine import create_store_engine
from celery_quartz.store.sql import SqlStore


class MemoryStore(SqlStore):
    """A store of one process's own, in memory; the tables exist from construction."""

    def __init__(
        self,
        *,
        scheduler_name: str = "memory",
        clock: Clock | None = None,
        max_data_bytes: int = DEFAULT_MAX_DATA_BYTES,
        misfire_threshold: float = DEFAULT_MISFIRE_THRESHOLD,
        record_history: bool = True,
        default_retry_policy: RetryPolicy | None = None,
        pause_when_retries_exhausted: bool = False,
    ) -> None:
        super().__init__(
            scheduler_name=scheduler_name,
            clock=clock,
            max_data_bytes=max_data_bytes,
            engine=create_store_engine("sqlite://"),
            misfire_threshold=misfire_threshold,
            record_history=record_history,
            default_retry_policy=default_retry_policy,
            pause_when_retries_exhausted=pause_when_retries_exhausted,
        )
        self.create_tables()
