"""The history's sweep (HistoryKeeper): rows folded into the rollups without changing the
statistics, deleted by age per result, by cap per trigger and per scheduler, old rollups and
audit rows deleted, in bounded batches, by one node at a time; the run status outlives it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select

from celery_quartz.clock import FakeClock
from celery_quartz.errors import ValidationError
from celery_quartz.history import HistoryRetention, RunResult
from celery_quartz.keys import JobKey, TriggerKey
from celery_quartz.store import SqlStore
from celery_quartz.store.sql.sweep import SWEEP_LOCK
from celery_quartz.store.views import HistoryFilter
from tests.history_rows import history_row, insert_audit, insert_history, insert_status
from tests.stores import store_at
from tests.unit.conftest import at

DAY = 86400
KEEP_ALL = HistoryRetention(max_age=timedelta(days=3650), max_rows=None)


def _sweep_all(store: SqlStore, retention: HistoryRetention, batch: int = 5000) -> dict[str, int]:
    totals: dict[str, int] = {}
    for _ in range(1000):
        report = store.sweep_history(retention, batch=batch)
        for name in ("folded", "deleted_by_age", "deleted_by_cap", "rollups_deleted"):
            totals[name] = totals.get(name, 0) + getattr(report, name)
        totals["audit_deleted"] = totals.get("audit_deleted", 0) + report.audit_deleted
        if not report.more:
            return totals
    raise AssertionError("the sweep never finished")


def _rows(store: SqlStore, **where: object) -> int:
    h = store.tables.history
    query = select(func.count()).select_from(h).where(h.c.sched_name == store.scheduler_name)
    for name, value in where.items():
        query = query.where(h.c[name] == value)
    with store.transaction() as conn:
        return int(conn.execute(query).scalar_one())


def _counted(store: SqlStore, kind: str, name: str, group: str = "DEFAULT") -> int:
    rs = store.tables.run_status
    with store.transaction() as conn:
        value = conn.execute(
            select(rs.c.history_rows).where(
                rs.c.sched_name == store.scheduler_name,
                rs.c.kind == kind,
                rs.c.key_group == group,
                rs.c.key_name == name,
            )
        ).scalar()
    return int(value or 0)


def test_folding_keeps_the_statistics_and_clears_unfolded(db: SqlStore, clock: FakeClock) -> None:
    clock.set(at(2 * DAY))
    insert_history(
        db,
        *(
            history_row(at(DAY + i * 97), r, trigger=f"t{i % 3}", duration_ms=100 * (i + 1))
            for i, r in enumerate(["succeeded", "failed", "misfired", "succeeded"] * 30)
        ),
        history_row(at(DAY + 5), "held", job=None, trigger="orphan"),
    )
    windows = [
        dict(window=timedelta(days=2), bucket=timedelta(hours=1)),
        dict(window=timedelta(days=2), bucket=timedelta(hours=6)),
        dict(window=timedelta(days=2), bucket=timedelta(days=1)),
        dict(window=timedelta(hours=24), bucket=timedelta(minutes=5)),
        dict(job=JobKey("job"), window=timedelta(days=2), bucket=timedelta(hours=6)),
    ]
    before = [db.statistics(**w) for w in windows]  # type: ignore[arg-type]
    assert _sweep_all(db, KEEP_ALL, batch=50)["folded"] == 121
    assert _rows(db, unfolded=True) == 0 and _rows(db) == 121
    after = [db.statistics(**w) for w in windows]  # type: ignore[arg-type]
    assert after == before
    assert before[0].total.counts == {"failed": 30, "held": 1, "misfired": 30, "succeeded": 60}
    # The sweep keeps each trigger's count of stored rows, and the scheduler's.
    assert [_counted(db, "trigger", f"t{i}") for i in range(3)] == [40, 40, 40]
    assert _counted(db, "trigger", "orphan") == 1
    assert _counted(db, "history", "", group="") == 121


def test_rows_are_deleted_by_age_with_a_longer_age_per_result(
    db: SqlStore, clock: FakeClock
) -> None:
    clock.set(at(40 * DAY))
    insert_history(
        db,
        history_row(at(40 * DAY - 8 * DAY), "succeeded"),  # past the week
        history_row(at(40 * DAY - 6 * DAY), "succeeded"),
        history_row(at(40 * DAY - 8 * DAY), "misfired"),
        history_row(at(40 * DAY - 20 * DAY), "failed"),  # failures are kept 30 days
        history_row(at(40 * DAY - 31 * DAY), "failed"),
    )
    retention = HistoryRetention(
        max_age=timedelta(days=7), max_age_by_result={RunResult.FAILED: timedelta(days=30)}
    )
    totals = _sweep_all(db, retention)
    assert (totals["folded"], totals["deleted_by_age"]) == (5, 3)
    kept = db.history().items
    assert [(r.result, r.event_time) for r in kept] == [
        ("succeeded", at(34 * DAY)),
        ("failed", at(20 * DAY)),
    ]
    assert _counted(db, "trigger", "t1") == 2 and _counted(db, "history", "", group="") == 2


def test_rows_not_folded_yet_are_not_deleted(db: SqlStore, clock: FakeClock) -> None:
    clock.set(at(30 * DAY))
    insert_history(db, *(history_row(at(i)) for i in range(5)))
    # One row folded per pass: the age sweep of that pass deletes only what was folded.
    report = db.sweep_history(HistoryRetention(max_age=timedelta(days=1)), batch=1)
    assert (report.folded, report.deleted_by_age, report.more) == (1, 1, True)
    assert _rows(db) == 4 and _rows(db, unfolded=True) == 4


def test_each_trigger_keeps_at_most_its_cap_newest_first(db: SqlStore, clock: FakeClock) -> None:
    clock.set(at(DAY))
    insert_history(
        db,
        *(history_row(at(i), trigger="busy") for i in range(25)),
        *(history_row(at(i), trigger="quiet") for i in range(3)),
    )
    retention = HistoryRetention(max_rows_per_trigger=10, max_rows=None)
    totals = _sweep_all(db, retention, batch=4)
    assert totals["deleted_by_cap"] == 15
    busy = db.history(HistoryFilter(trigger=TriggerKey("busy"))).items
    assert [r.event_time for r in busy] == [at(i) for i in range(24, 14, -1)]
    assert _rows(db, trigger_name="quiet") == 3
    assert _counted(db, "trigger", "busy") == 10


def test_the_scheduler_keeps_at_most_its_cap_oldest_deleted_first(
    db: SqlStore, clock: FakeClock
) -> None:
    clock.set(at(DAY))
    insert_history(db, *(history_row(at(i), trigger=f"t{i % 4}") for i in range(30)))
    totals = _sweep_all(db, HistoryRetention(max_rows=12), batch=5)
    assert totals["deleted_by_cap"] == 18
    assert [r.event_time for r in db.history().items] == [at(i) for i in range(29, 17, -1)]
    assert _counted(db, "history", "", group="") == 12
    assert sum(_counted(db, "trigger", f"t{i}") for i in range(4)) == 12


def test_the_run_status_outlives_the_sweep(db: SqlStore, clock: FakeClock) -> None:
    clock.set(at(30 * DAY))
    insert_status(
        db, "job", since=at(0), last_success=at(DAY), last_run=at(2 * DAY), runs=7, failures=2
    )
    insert_status(db, "t1", kind="trigger", since=at(0), last_success=at(DAY), runs=7)
    insert_history(db, *(history_row(at(i * 3600)) for i in range(10)))
    _sweep_all(db, HistoryRetention(max_age=timedelta(days=7)))
    assert db.history().items == []
    (job,) = db.run_status().items
    assert (job.runs, job.failures, job.last_success_time, job.last_run_time) == (
        7,
        2,
        at(DAY),
        at(2 * DAY),
    )
    (trigger,) = db.run_status(kind="trigger").items
    assert trigger.runs == 7 and trigger.since == at(0)


def test_old_rollups_are_deleted_by_their_width(db: SqlStore, clock: FakeClock) -> None:
    clock.set(at(DAY))
    insert_history(db, history_row(at(10)), history_row(at(20)))
    _sweep_all(db, KEEP_ALL)
    r = db.tables.history_rollups
    query = select(r.c.bucket_seconds, func.count()).group_by(r.c.bucket_seconds)
    with db.transaction() as conn:
        assert dict(conn.execute(query).all()) == {300: 2, 3600: 2, 86400: 2}
    clock.set(at(3 * DAY))  # five-minute rollups are kept two days
    assert _sweep_all(db, KEEP_ALL)["rollups_deleted"] == 2
    clock.set(at(40 * DAY))  # hourly ones 35 days
    assert _sweep_all(db, KEEP_ALL)["rollups_deleted"] == 2
    clock.set(at(500 * DAY))  # daily ones 400 days
    assert _sweep_all(db, KEEP_ALL)["rollups_deleted"] == 2


def test_the_audit_is_kept_for_its_own_age(db: SqlStore, clock: FakeClock) -> None:
    clock.set(at(100 * DAY))
    for day in (1, 50, 95):
        insert_audit(db, at(day * DAY))
    retention = HistoryRetention(audit_max_age=timedelta(days=30))
    assert _sweep_all(db, retention, batch=1)["audit_deleted"] == 2
    assert [e.event_time for e in db.audit().items] == [at(95 * DAY)]


def test_a_bad_batch_is_refused(store: SqlStore) -> None:
    with pytest.raises(ValidationError, match="sweep batch 0"):
        store.sweep_history(KEEP_ALL, batch=0)


@pytest.mark.integration
def test_one_node_sweeps_at_a_time(pg_url: str, clock: FakeClock) -> None:
    """While a node's batch holds the sweep's lock row, another node's sweep does nothing."""
    one = store_at(pg_url, "sweep-lock", clock=clock)
    two = store_at(pg_url, "sweep-lock", clock=clock)
    try:
        one.create_tables()
        clock.set(at(DAY))
        insert_history(one, *(history_row(at(i)) for i in range(5)))
        one.sweep_history(KEEP_ALL, batch=1)  # creates the lock row, folds one
        locks = one.tables.locks
        with one.transaction() as conn:
            conn.execute(
                select(locks.c.lock_name)
                .where(locks.c.sched_name == "sweep-lock", locks.c.lock_name == SWEEP_LOCK)
                .with_for_update()
            ).one()
            report = two.sweep_history(KEEP_ALL)
        assert (report.folded, report.more) == (0, False)
        assert _rows(one, unfolded=True) == 4
        assert two.sweep_history(KEEP_ALL).folded == 4
    finally:
        one.dispose()
        two.dispose()


@pytest.mark.integration
def test_the_sweep_gives_way_to_a_writer_holding_a_run_status(
    pg_url: str, clock: FakeClock
) -> None:
    """A worker's transaction holding its trigger's status row: the sweep's batch waits less than
    the deadlock detector would, gives up, and folds at its next pass."""
    store = store_at(pg_url, "sweep-wait", clock=clock)
    try:
        store.create_tables()
        clock.set(at(DAY))
        insert_status(store, "t1", kind="trigger", since=at(0))
        insert_history(store, *(history_row(at(i)) for i in range(3)))
        rs = store.tables.run_status
        with store.transaction() as conn:
            conn.execute(
                select(rs.c.kind)
                .where(rs.c.sched_name == "sweep-wait", rs.c.key_name == "t1")
                .with_for_update()
            ).one()
            report = store.sweep_history(KEEP_ALL)
            assert (report.folded, report.more) == (0, True)
        assert _rows(store, unfolded=True) == 3
        assert store.sweep_history(KEEP_ALL).folded == 3
        assert _counted(store, "trigger", "t1") == 3
    finally:
        store.dispose()
