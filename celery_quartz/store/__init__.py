"""Where jobs, triggers and firings live: one interface, SQL tables behind it."""

from celery_quartz.store.memory import MemoryStore
from celery_quartz.store.schema import FiringState, TriggerState, build_tables
from celery_quartz.store.sql import NONE_STATE, CheckIn, SqlStore

__all__ = [
    "NONE_STATE",
    "CheckIn",
    "FiringState",
    "MemoryStore",
    "SqlStore",
    "TriggerState",
    "build_tables",
]
