"""The client's reads of the run history, its statistics, each job's status and the audit
(docs/history.md#reading-history): :class:`HistoryReads`, which :class:`~celery_quartz.Quartz`
inherits."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from celery_quartz.history import RunResult
from celery_quartz.keys import JobKey, TriggerKey
from celery_quartz.store import ClientStore
from celery_quartz.store.views import (
    AuditEntry,
    AuditFilter,
    HistoryCursor,
    HistoryEntry,
    HistoryFilter,
    Page,
    RunStatus,
    Statistics,
)


class HistoryReads:
    """What ran and what did not, how each job is doing, and who changed what: reads through
    the store's read side, keyset-paged like the other listings."""

    #: The store every read goes through (set by :class:`~celery_quartz.Quartz`).
    store: ClientStore

    def history(
        self,
        *,
        job: JobKey | None = None,
        trigger: TriggerKey | None = None,
        group: str | None = None,
        results: Iterable[str | RunResult] | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        after: HistoryCursor | None = None,
        limit: int = 100,
    ) -> Page[HistoryEntry, HistoryCursor]:
        """Finished executions and occurrences not run, newest first: of ``job``, of
        ``trigger`` (its retries and recoveries included), or of the triggers of ``group``;
        with one of ``results``; from ``since`` (inclusive) to ``until`` (exclusive). Pass a
        page's ``next_after`` as ``after`` for the next page."""
        names = None
        if results is not None:  # checked by the store (ValidationError naming the result)
            names = frozenset(r.value if isinstance(r, RunResult) else r for r in results)
        return self.store.history(
            HistoryFilter(
                job=job, trigger=trigger, group=group, results=names, since=since, until=until
            ),
            after=after,
            limit=limit,
        )

    def statistics(
        self,
        *,
        job: JobKey | None = None,
        window: timedelta = timedelta(hours=24),
        bucket: timedelta = timedelta(hours=1),
        until: datetime | None = None,
    ) -> Statistics:
        """Counts by result and duration and start-lateness percentiles in buckets of
        ``bucket`` (5 minutes, 1 hour, 6 hours or 1 day) over ``window``, for ``job`` or the
        whole scheduler, including what the sweep has not folded yet."""
        return self.store.statistics(job=job, window=window, bucket=bucket, until=until)

    def job_status(self, key: JobKey) -> RunStatus | None:
        """The job's runs in short (last run and success, failures in a row, counts), its
        success deadline and whether it is past it; None before its first recorded run."""
        page = self.store.run_status(kind="job", group=key.group, name=key.name, limit=1)
        return page.items[0] if page.items else None

    def job_statuses(
        self, *, group: str | None = None, after: tuple[str, str] | None = None, limit: int = 100
    ) -> Page[RunStatus, tuple[str, str]]:
        """Every job's :meth:`job_status`, by group and name, keyset-paged."""
        return self.store.run_status(kind="job", group=group, after=after, limit=limit)

    def audit(
        self,
        *,
        principal: str | None = None,
        via: str | None = None,
        action: str | None = None,
        target: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        after: HistoryCursor | None = None,
        limit: int = 100,
    ) -> Page[AuditEntry, HistoryCursor]:
        """Changes to the schedule, newest first: who, through what, which action, on what
        (``target``: ``GROUP.NAME``), what changed."""
        return self.store.audit(
            AuditFilter(
                principal=principal,
                via=via,
                action=action,
                target=target,
                since=since,
                until=until,
            ),
            after=after,
            limit=limit,
        )
