"""The SQL store: every decision two processes could race on is one transaction.

PostgreSQL settles races with row locks (``FOR UPDATE SKIP LOCKED`` when acquiring) and
conditional updates; SQLite with a write lock taken at ``BEGIN IMMEDIATE`` (see
:mod:`celery_quartz.store.engine`). Nothing here holds a lock while waiting for a fire time: an
acquisition is a committed state change (WAITING → ACQUIRED) plus a fired-trigger row naming the
scheduler instance that owns it.

One module per role of :mod:`celery_quartz.store.abc`, over shared plumbing:

* ``_base`` — engine, tables, transactions, lock rows, the fence, row conversions;
* ``_rows`` — pure helpers over rows and columns;
* ``_definitions`` — storing and removing jobs and triggers, a late trigger's misfire outcome;
* ``_firings`` — what a firing's end releases, recovery and retry firings;
* ``jobs`` (client), ``acquisition`` and ``misfires`` (scheduling loop), ``cluster`` (cluster
  manager), ``worker`` (worker hooks), ``reads`` (operators).

:class:`SqlStore` is all of them on one engine.
"""

from __future__ import annotations

from celery_quartz.store.abc import Store
from celery_quartz.store.records import NONE_STATE
from celery_quartz.store.sql._rows import in_acquisition_order
from celery_quartz.store.sql.acquisition import AcquisitionSql
from celery_quartz.store.sql.cluster import ClusterSql
from celery_quartz.store.sql.jobs import JobsSql
from celery_quartz.store.sql.misfires import MisfiresSql
from celery_quartz.store.sql.reads import ReadsSql
from celery_quartz.store.sql.worker import WorkerSql

__all__ = ["NONE_STATE", "SqlStore", "in_acquisition_order"]


class SqlStore(JobsSql, AcquisitionSql, MisfiresSql, ClusterSql, WorkerSql, ReadsSql, Store):
    """Jobs, triggers and firings of one scheduler name, in SQL tables under one prefix: every
    role of :mod:`celery_quartz.store.abc` on one engine."""
