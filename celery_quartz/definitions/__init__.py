"""Definitions: the jobs and triggers a source defines (a scheduling file, Celery's
``beat_schedule``, another scheduler's periodic tasks), and what loading them changes in the store.

Pure domain, no database and no file: :mod:`.model` holds what a source says, :mod:`.plan` decides
what loading it changes over a snapshot of the store, and the store writes that plan in one
transaction (:meth:`~celery_quartz.store.abc.JobStore.apply_scheduling_data`). The store imports
this package; the sources' readers sit above it.
"""

from __future__ import annotations

from celery_quartz.definitions.model import (
    ALL_GROUPS,
    PROTECTED_GROUPS,
    JobDefinition,
    Problems,
    SchedulingData,
    TriggerDefinition,
    Where,
    owned_group,
)
from celery_quartz.definitions.plan import JobChanges, Needs, Plan, Snapshot, needs, plan

__all__ = [
    "ALL_GROUPS",
    "PROTECTED_GROUPS",
    "JobChanges",
    "JobDefinition",
    "Needs",
    "Plan",
    "Problems",
    "SchedulingData",
    "Snapshot",
    "TriggerDefinition",
    "Where",
    "needs",
    "owned_group",
    "plan",
]
