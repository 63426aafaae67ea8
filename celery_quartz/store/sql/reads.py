"""The operators' read side: paged, filtered listings for the CLI, the dashboard, the HTTP API
and metrics (:class:`~celery_quartz.store.abc.StoreReader`)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Engine,
    and_,
    case,
    exists,
    func,
    select,
    tuple_,
)

from celery_quartz.clock import from_millis
from celery_quartz.errors import ValidationError
from celery_quartz.job import Job
from celery_quartz.keys import JobKey, TriggerKey
from celery_quartz.liveness import failed_after
from celery_quartz.routing import (
    Router,
    Unserved,
)
from celery_quartz.store.abc import StoreReader
from celery_quartz.store.schema import (
    PAUSED_STATES,
    FiringState,
    Tables,
    TriggerState,
)
from celery_quartz.store.sql._context import SqlContext
from celery_quartz.store.sql._rows import (
    Rows,
    datetime_or_none,
    job_from_row,
    last_outcome,
    pause_record,
    same_job,
    trigger_from_row,
)
from celery_quartz.store.views import (
    MAX_PAGE,
    FiringFilter,
    FiringView,
    GroupOccupancy,
    JobFilter,
    NodeView,
    OwedTriggers,
    Page,
    Progress,
    StateSummary,
    TriggerFilter,
    TriggerView,
)

logger = logging.getLogger(__name__)


class ReadsSql(StoreReader):
    """The read side over the SQL tables."""

    def __init__(self, sql: SqlContext, rows: Rows) -> None:
        self.sql = sql
        self.rows = rows

    def list_jobs(
        self, filters: JobFilter | None = None, *, after: JobKey | None = None, limit: int = 100
    ) -> Page[Job, JobKey]:
        j = self.sql.tables.jobs
        filters = filters or JobFilter()
        query = select(j).where(self.sql.scoped(j))
        if filters.group is not None:
            query = query.where(j.c.job_group == filters.group)
        if filters.task is not None:
            query = query.where(j.c.task_name == filters.task)
        if after is not None:
            query = query.where(tuple_(j.c.job_group, j.c.job_name) > (after.group, after.name))
        limit = _page_size(limit)
        with self.sql.transaction() as conn:
            rows = conn.execute(query.order_by(j.c.job_group, j.c.job_name).limit(limit + 1)).all()
        jobs = [job_from_row(r) for r in rows[:limit]]
        return Page(jobs, jobs[-1].key if len(rows) > limit else None)

    def list_triggers(
        self,
        filters: TriggerFilter | None = None,
        *,
        after: TriggerKey | None = None,
        limit: int = 100,
    ) -> Page[TriggerView, TriggerKey]:
        t, j = self.sql.tables.triggers, self.sql.tables.jobs
        filters = filters or TriggerFilter()
        query = select(t, j.c.task_name).join(j, same_job(j, t)).where(self.sql.scoped(t))
        if filters.group is not None:
            query = query.where(t.c.trigger_group == filters.group)
        if filters.state is not None:
            query = query.where(t.c.trigger_state == filters.state)
        if filters.execution_group is not None:
            query = query.where(t.c.execution_group == filters.execution_group)
        if filters.preferred_node is not None:
            query = query.where(t.c.preferred_node == filters.preferred_node)
        if filters.task is not None:
            query = query.where(j.c.task_name == filters.task)
        if filters.job is not None:
            query = query.where(
                t.c.job_name == filters.job.name, t.c.job_group == filters.job.group
            )
        if filters.paused is not None:
            paused = t.c.trigger_state.in_([TriggerState.PAUSED, TriggerState.PAUSED_BLOCKED])
            query = query.where(paused if filters.paused else ~paused)
        if after is not None:
            query = query.where(
                tuple_(t.c.trigger_group, t.c.trigger_name) > (after.group, after.name)
            )
        limit = _page_size(limit)
        with self.sql.transaction() as conn:
            rows = conn.execute(
                query.order_by(t.c.trigger_group, t.c.trigger_name).limit(limit + 1)
            ).all()
        views = [self._trigger_view(r) for r in rows[:limit]]
        return Page(views, views[-1].key if len(rows) > limit else None)

    def trigger_view(self, key: TriggerKey) -> TriggerView | None:
        t, j = self.sql.tables.triggers, self.sql.tables.jobs
        with self.sql.transaction() as conn:
            row = conn.execute(
                select(t, j.c.task_name).join(j, same_job(j, t)).where(self.sql.trigger_key(key))
            ).first()
        return None if row is None else self._trigger_view(row)

    def owed_triggers(
        self, *, blocked_for: float, limit: int = 20, count_cap: int = 1000
    ) -> OwedTriggers:
        t, j = self.sql.tables.triggers, self.sql.tables.jobs
        now = self.sql.now()
        # Each condition is a range of the acquisition index (state, next fire time): the lists
        # and the capped counts read only the rows they show or count.
        conditions = {
            "overdue": and_(
                t.c.trigger_state == TriggerState.WAITING,
                t.c.next_fire_time < now - self.sql.misfire_threshold_ms,
            ),
            "blocked": and_(
                t.c.trigger_state == TriggerState.BLOCKED,
                t.c.next_fire_time < now - int(blocked_for * 1000),
            ),
            "errors": t.c.trigger_state == TriggerState.ERROR,
        }
        lists: dict[str, list[TriggerView]] = {}
        counts: dict[str, int] = {}
        with self.sql.transaction() as conn:
            for name, condition in conditions.items():
                rows = conn.execute(
                    select(t, j.c.task_name)
                    .join(j, same_job(j, t))
                    .where(self.sql.scoped(t), condition)
                    # The acquisition index's own order: no sort, even when thousands of
                    # triggers share a fire time.
                    .order_by(t.c.next_fire_time, t.c.priority.desc())
                    .limit(_page_size(limit))
                ).all()
                lists[name] = [self._trigger_view(r) for r in rows]
                capped = (
                    select(t.c.trigger_name)
                    .where(self.sql.scoped(t), condition)
                    .limit(count_cap)
                    .subquery()
                )
                counts[name] = conn.execute(select(func.count()).select_from(capped)).scalar_one()
        return OwedTriggers(
            overdue=lists["overdue"],
            blocked=lists["blocked"],
            errors=lists["errors"],
            overdue_count=counts["overdue"],
            blocked_count=counts["blocked"],
            error_count=counts["errors"],
            count_cap=count_cap,
        )

    def _trigger_view(self, row: Any) -> TriggerView:
        return TriggerView(
            trigger_from_row(row),
            row.trigger_state,
            row.task_name,
            last_outcome=last_outcome(row),
            error_reason=row.error_reason,
            pause=pause_record(row) if row.trigger_state in PAUSED_STATES else None,
        )

    def list_firings(
        self, filters: FiringFilter | None = None, *, after: str | None = None, limit: int = 100
    ) -> Page[FiringView, str]:
        f = self.sql.tables.fired_triggers
        filters = filters or FiringFilter()
        query = select(f).where(self.sql.scoped(f))
        for value, column_ in (
            (filters.state, f.c.state),
            (filters.instance_name, f.c.instance_name),
            (filters.worker_name, f.c.worker_name),
            (filters.execution_group, f.c.execution_group),
        ):
            if value is not None:
                query = query.where(column_ == value)
        if filters.trigger is not None:
            query = query.where(
                f.c.trigger_name == filters.trigger.name,
                f.c.trigger_group == filters.trigger.group,
            )
        if filters.job is not None:
            query = query.where(
                f.c.job_name == filters.job.name, f.c.job_group == filters.job.group
            )
        if after is not None:
            query = query.where(f.c.fire_instance_id > after)
        limit = _page_size(limit)
        with self.sql.transaction() as conn:
            rows = conn.execute(query.order_by(f.c.fire_instance_id).limit(limit + 1)).all()
        views = [_firing_view(r) for r in rows[:limit]]
        return Page(views, views[-1].fire_instance_id if len(rows) > limit else None)

    def list_nodes(self) -> list[NodeView]:
        s = self.sql.tables.scheduler_state
        now = self.sql.now()
        with self.sql.transaction() as conn:
            rows = conn.execute(
                select(s).where(self.sql.scoped(s)).order_by(s.c.kind, s.c.instance_name)
            ).all()
        return [
            NodeView(
                instance_name=r.instance_name,
                kind=r.kind,
                alive=now
                <= failed_after(
                    _CheckInTimes(r.last_checkin_time, r.checkin_interval),
                    now_millis=now,
                    my_last_checkin_millis=None,
                    threshold_millis=self.sql.checkin_misfire_threshold_ms,
                ),
                last_checkin_time=from_millis(r.last_checkin_time),
                checkin_interval=r.checkin_interval / 1000,
                started_time=datetime_or_none(r.started_time),
                clustered=r.clustered,
                hostname=r.hostname,
                pid=r.pid,
                status=r.status,
                epoch=r.epoch,
                queues=None if r.queues is None else json.loads(r.queues),
                concurrency=r.concurrency,
            )
            for r in rows
        ]

    def group_occupancy(self) -> list[GroupOccupancy]:
        t, f = self.sql.tables.triggers, self.sql.tables.fired_triggers
        now = self.sql.now()
        with self.sql.transaction() as conn:
            in_flight: dict[str | None, int] = dict(
                conn.execute(
                    select(f.c.execution_group, func.count())
                    .where(self.sql.scoped(f), f.c.state != FiringState.ACQUIRED)
                    .group_by(f.c.execution_group)
                ).all()
            )
            waiting: dict[str | None, int] = dict(
                conn.execute(
                    select(t.c.execution_group, func.count())
                    .where(
                        self.sql.scoped(t),
                        t.c.trigger_state == TriggerState.WAITING,
                        t.c.next_fire_time <= now,
                    )
                    .group_by(t.c.execution_group)
                ).all()
            )
        groups = sorted(in_flight.keys() | waiting.keys(), key=lambda g: (g is not None, g or ""))
        return [GroupOccupancy(g, in_flight.get(g, 0), waiting.get(g, 0)) for g in groups]

    def calendars(self) -> dict[str, Any]:
        from celery_quartz.calendars import calendar_from_dict

        c = self.sql.tables.calendars
        with self.sql.transaction() as conn:
            rows = conn.execute(
                select(c.c.calendar_name, c.c.calendar)
                .where(self.sql.scoped(c))
                .order_by(c.c.calendar_name)
            ).all()
        return {r.calendar_name: calendar_from_dict(json.loads(r.calendar)) for r in rows}

    def trigger_summary(self) -> dict[str, StateSummary]:
        t = self.sql.tables.triggers
        overdue_before = self.sql.now() - self.sql.misfire_threshold_ms
        overdue = func.sum(case((t.c.next_fire_time < overdue_before, 1), else_=0))
        with self.sql.transaction() as conn:
            rows = conn.execute(
                select(
                    t.c.trigger_state,
                    func.count().label("n"),
                    func.min(t.c.next_fire_time).label("earliest"),
                    overdue.label("overdue"),
                )
                .where(self.sql.scoped(t))
                .group_by(t.c.trigger_state)
            ).all()
        return {
            r.trigger_state: StateSummary(r.n, datetime_or_none(r.earliest), int(r.overdue or 0))
            for r in rows
        }

    def current_epoch(self) -> int:
        locks = self.sql.tables.locks
        with self.sql.transaction() as conn:
            return conn.execute(select(locks.c.epoch).where(self.sql.leader_key())).scalar() or 0

    def count_rows(self) -> dict[str, int]:
        counts = {}
        with self.sql.transaction() as conn:
            for name in (
                "jobs",
                "triggers",
                "fired_triggers",
                "calendars",
                "paused_trigger_groups",
                "backfill_slots",
            ):
                table = getattr(self.sql.tables, name)
                counts[name] = conn.execute(
                    select(func.count()).select_from(table).where(self.sql.scoped(table))
                ).scalar_one()
        return counts

    def firing_states(self) -> dict[str, str]:
        f = self.sql.tables.fired_triggers
        with self.sql.transaction() as conn:
            rows = conn.execute(
                select(f.c.fire_instance_id, f.c.state).where(self.sql.scoped(f))
            ).all()
        return {r.fire_instance_id: r.state for r in rows}

    def unserved(self, router: Router) -> list[Unserved]:
        t = self.sql.tables.triggers
        schedulable = and_(
            self.sql.scoped(t),
            t.c.trigger_state.in_(
                [TriggerState.WAITING, TriggerState.ACQUIRED, TriggerState.BLOCKED]
            ),
        )
        with self.sql.transaction() as conn:
            workers = self.rows.live_workers(conn, router, self.sql.now())
            groups: set[str | None] = set(conn.execute(self._schedulable_groups()).scalars())
            # The ungrouped triggers are judged only under a limit of their own (the router
            # skips them otherwise): no need to look for one.
            if (
                router.limits.limit_for(None) is not None
                and conn.execute(
                    select(t.c.trigger_name)
                    .where(schedulable, t.c.execution_group.is_(None))
                    .limit(1)
                ).first()
            ):
                groups.add(None)
            pins = {
                (r.preferred_node, r.execution_group)
                for r in conn.execute(
                    select(t.c.preferred_node, t.c.execution_group)
                    .where(schedulable, t.c.preferred_node.is_not(None))
                    .distinct()
                )
            }
        return router.unserved(groups, pins, workers)

    def _schedulable_groups(self) -> Any:
        """The execution groups with a schedulable trigger, read as a skip scan of the
        execution-group index (one probe per group, whatever the number of triggers): the
        distinct groups by a recursive "next group after this one", each kept if it has a
        WAITING, ACQUIRED or BLOCKED trigger."""
        t = self.sql.tables.triggers
        step, probe = t.alias("step"), t.alias("probe")
        first = select(func.min(t.c.execution_group).label("name")).where(
            self.sql.scoped(t), t.c.execution_group.is_not(None)
        )
        found = first.cte("execution_groups", recursive=True)
        following = (
            select(func.min(step.c.execution_group))
            .where(self.sql.scoped(step), step.c.execution_group > found.c.name)
            .scalar_subquery()
        )
        found = found.union_all(select(following).where(found.c.name.is_not(None)))
        return select(found.c.name).where(
            found.c.name.is_not(None),
            exists().where(
                self.sql.scoped(probe),
                probe.c.execution_group == found.c.name,
                probe.c.trigger_state.in_(
                    [TriggerState.WAITING, TriggerState.ACQUIRED, TriggerState.BLOCKED]
                ),
            ),
        )


def scheduler_names(engine: Engine, tables: Tables) -> list[str]:
    """Every scheduler name with rows in ``tables`` (jobs, triggers or check-ins), sorted: what
    a tool attached to the store (the dashboard) discovers before opening one store per name.
    The one read not scoped to a scheduler name, so not a method of a store. Each table is read
    by a skip scan of its primary key (``sched_name`` first): one probe per name, whatever the
    number of rows."""
    names: set[str] = set()
    with engine.connect() as conn:
        for table in (tables.jobs, tables.triggers, tables.scheduler_state):
            names.update(conn.execute(_distinct_sched_names(table)).scalars())
    return sorted(names)


def _distinct_sched_names(table: Any) -> Any:
    step = table.alias("step")
    found = select(func.min(table.c.sched_name).label("name")).cte(
        f"names_{table.name}", recursive=True
    )
    following = (
        select(func.min(step.c.sched_name)).where(step.c.sched_name > found.c.name)
    ).scalar_subquery()
    found = found.union_all(select(following).where(found.c.name.is_not(None)))
    return select(found.c.name).where(found.c.name.is_not(None))


@dataclass(frozen=True)
class _CheckInTimes:
    last_checkin_millis: int
    checkin_interval_millis: int


def _page_size(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValidationError(f"page limit {limit!r}: a page holds 1 to {MAX_PAGE} rows")
    return min(limit, MAX_PAGE)


def _firing_view(r: Any) -> FiringView:
    return FiringView(
        fire_instance_id=r.fire_instance_id,
        trigger_key=TriggerKey.stored(r.trigger_name, r.trigger_group),
        job_key=None if r.job_name is None else JobKey.stored(r.job_name, r.job_group),
        state=r.state,
        instance_name=r.instance_name,
        worker_name=r.worker_name,
        scheduled_time=from_millis(r.sched_time),
        fired_time=from_millis(r.fired_time),
        published_time=datetime_or_none(r.published_time),
        started_time=datetime_or_none(r.started_time),
        expires_time=datetime_or_none(r.expires_time),
        priority=r.priority,
        execution_group=r.execution_group,
        queue=r.queue,
        recovering=r.recovering,
        retry_attempt=r.retry_attempt,
        refire_count=r.refire_count,
        progress=None
        if r.progress_time is None
        else Progress(r.progress, r.progress_message, from_millis(r.progress_time)),
    )
