"""The run history's roles of the store (docs/history.md), beside :mod:`celery_quartz.store.abc`,
which composes them into what a process holds: :class:`HistoryReader` (the operators' reads of
the history, the statistics, the run status and the audit) and :class:`HistoryKeeper` (the
sweep)."""

from __future__ import annotations

import abc
from datetime import datetime, timedelta

from celery_quartz.history import HistoryRetention
from celery_quartz.keys import JobKey
from celery_quartz.store.views import (
    AuditEntry,
    AuditFilter,
    HistoryCursor,
    HistoryEntry,
    HistoryFilter,
    Page,
    RunStatus,
    Statistics,
    SweepReport,
)


class HistoryReader(abc.ABC):
    """The run history, its statistics, each job's and trigger's run status, and the audit:
    keyset-paged, newest first, filtered in SQL, each page one index range scan whatever the
    tables' size. It never writes."""

    @abc.abstractmethod
    def history(
        self,
        filters: HistoryFilter | None = None,
        *,
        after: HistoryCursor | None = None,
        limit: int = 100,
    ) -> Page[HistoryEntry, HistoryCursor]:
        """History rows by (event time, id), newest first, from after ``after``."""

    @abc.abstractmethod
    def statistics(
        self,
        *,
        job: JobKey | None = None,
        window: timedelta = timedelta(hours=24),
        bucket: timedelta = timedelta(hours=1),
        until: datetime | None = None,
    ) -> Statistics:
        """Counts by result and duration and lateness percentiles in buckets of ``bucket``
        (5 min, 1 h, 6 h or 1 day) over the ``window`` that ends at ``until`` (default: now),
        for ``job`` or the whole scheduler. Includes rows not yet folded by the sweep."""

    @abc.abstractmethod
    def run_status(
        self,
        *,
        kind: str = "job",
        group: str | None = None,
        name: str | None = None,
        after: tuple[str, str] | None = None,
        limit: int = 100,
    ) -> Page[RunStatus, tuple[str, str]]:
        """The run status of jobs (``kind="job"``) or triggers by (group, name), with each
        job's success deadline and whether it is past it; ``name`` (with ``group``) reads one."""

    @abc.abstractmethod
    def overdue_jobs(
        self, deadlines: dict[JobKey, timedelta] | None = None, *, limit: int = 100
    ) -> list[RunStatus]:
        """Jobs past their success deadline now: the deadline stored on the job, or given in
        ``deadlines`` (the settings' mapping for jobs defined elsewhere), oldest due first."""

    @abc.abstractmethod
    def audit(
        self,
        filters: AuditFilter | None = None,
        *,
        after: HistoryCursor | None = None,
        limit: int = 100,
    ) -> Page[AuditEntry, HistoryCursor]:
        """Audit rows by (event time, id), newest first, from after ``after``."""


class HistoryKeeper(abc.ABC):
    """The history's upkeep, run by one node per cluster off the scheduling path."""

    @abc.abstractmethod
    def sweep_history(self, retention: HistoryRetention, *, batch: int = 5000) -> SweepReport:
        """Fold rows not yet folded into the statistics' rollups, then delete rows (history,
        rollups, audit) that ``retention`` no longer keeps, each in bounded batches of at most
        ``batch`` rows; no statement's cost grows with the tables' size."""
