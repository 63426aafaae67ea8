"""Where jobs, triggers and firings live: one interface per role (:mod:`celery_quartz.store.abc`),
SQL tables behind it (:mod:`celery_quartz.store.sql`), opened by :func:`open_store`."""

from celery_quartz.store.abc import (
    ClientStore,
    ClusterStore,
    JobStore,
    SchedulerStore,
    SchedulingStore,
    Store,
    StoreReader,
    WorkerNodeStore,
    WorkerStore,
)
from celery_quartz.store.factory import check_worker_schema, discover_scheduler_names, open_store
from celery_quartz.store.memory import MemoryStore
from celery_quartz.store.records import NONE_STATE, CheckIn
from celery_quartz.store.schema import FiringState, TriggerState, build_tables
from celery_quartz.store.sql import SqlStore

__all__ = [
    "NONE_STATE",
    "CheckIn",
    "ClientStore",
    "ClusterStore",
    "FiringState",
    "JobStore",
    "MemoryStore",
    "SchedulerStore",
    "SchedulingStore",
    "SqlStore",
    "Store",
    "StoreReader",
    "TriggerState",
    "WorkerNodeStore",
    "WorkerStore",
    "build_tables",
    "check_worker_schema",
    "discover_scheduler_names",
    "open_store",
]
