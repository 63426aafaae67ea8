"""The run history's read side (HistoryReader): pages newest first by (event time, id), filters
done in SQL, statistics from the rollups and the rows not yet folded, run statuses with their
success deadlines, and the audit. Rows are written straight into the tables of schema 0006."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from sqlalchemy import insert, update

from celery_quartz.clock import FakeClock, to_millis
from celery_quartz.errors import ValidationError
from celery_quartz.history import histogram_bin
from celery_quartz.keys import JobKey, TriggerKey
from celery_quartz.store import SqlStore
from celery_quartz.store.views import AuditFilter, HistoryFilter
from tests.history_rows import history_row, insert_audit, insert_history, insert_status
from tests.unit.conftest import T0, at


def _all_pages(read, limit: int) -> list:  # type: ignore[no-untyped-def]
    items, after = [], None
    while True:
        page = read(after=after, limit=limit)
        items += page.items
        if page.next_after is None:
            return items
        after = page.next_after


def _set_deadline(store: SqlStore, job: str, deadline: timedelta) -> None:
    from tests.unit.builders import add, repeating

    add(store, repeating(f"{job}-trigger", at(0), 60, job=job), job=job)
    j = store.tables.jobs
    with store.transaction() as conn:
        conn.execute(
            update(j)
            .where(j.c.sched_name == store.scheduler_name, j.c.job_name == job)
            .values(require_success_within=int(deadline.total_seconds() * 1000))
        )


# -- history -----------------------------------------------------------------------------------


def test_history_is_paged_newest_first_by_event_time_then_id(db: SqlStore) -> None:
    # Three rows share an event time: the id orders them, and no page repeats or skips one.
    insert_history(
        db,
        *(history_row(at(10)) for _ in range(3)),
        *(history_row(at(s)) for s in (5, 20, 15, 1)),
    )
    rows = _all_pages(db.history, limit=2)
    assert len(rows) == 7
    assert len({r.history_id for r in rows}) == 7
    keys = [(r.event_time, r.history_id) for r in rows]
    assert keys == sorted(keys, reverse=True)
    assert rows[0].event_time == at(20)


def test_a_page_does_not_shift_when_newer_rows_arrive(db: SqlStore) -> None:
    insert_history(db, *(history_row(at(s)) for s in range(10)))
    first = db.history(limit=4)
    insert_history(db, history_row(at(100)), history_row(at(101)))
    second = db.history(after=first.next_after, limit=4)
    assert [r.event_time for r in second.items] == [at(s) for s in (5, 4, 3, 2)]


def test_history_entries_carry_every_recorded_field(db: SqlStore) -> None:
    insert_history(
        db,
        history_row(
            at(60),
            "failed",
            duration_ms=1500,
            lateness_ms=250,
            error_type="KeyError",
            error_message="'x'",
            worker_name="w1@host",
            instance_name="node-a",
            retry_attempt=2,
            recovering=True,
            summary="partial",
            metrics=json.dumps({"rows": 1200}),
            args=json.dumps([1, 2]),
            kwargs=json.dumps({"a": 1}),
            task_id="celery-id",
            published_time=to_millis(at(57)),
        ),
    )
    (entry,) = db.history().items
    assert entry.result == "failed"
    assert entry.trigger_key == TriggerKey("t1") and entry.job_key == JobKey("job")
    assert (entry.duration, entry.start_lateness) == (1.5, 0.25)
    assert entry.finished_time == at(60) and entry.started_time == at(58.5)
    assert entry.scheduled_fire_time == at(58.25) and entry.published_time == at(57)
    assert (entry.error_type, entry.error_message) == ("KeyError", "'x'")
    assert (entry.worker_name, entry.instance_name) == ("w1@host", "node-a")
    assert (entry.retry_attempt, entry.recovering) == (2, True)
    assert entry.metrics == {"rows": 1200} and entry.summary == "partial"
    assert (entry.args, entry.kwargs, entry.task_id) == ([1, 2], {"a": 1}, "celery-id")


def test_history_filters_by_job_trigger_and_group(db: SqlStore) -> None:
    insert_history(
        db,
        history_row(at(1), trigger="a", job="billing"),
        history_row(at(2), trigger="b", job="billing"),
        history_row(at(3), trigger="c", trigger_group="etl", job="load", job_group="etl"),
        history_row(at(4), trigger="a", job="other"),
    )
    by_job = db.history(HistoryFilter(job=JobKey("billing"))).items
    assert [r.trigger_key.name for r in by_job] == ["b", "a"]
    by_trigger = db.history(HistoryFilter(trigger=TriggerKey("a"))).items
    assert [r.event_time for r in by_trigger] == [at(4), at(1)]
    by_group = db.history(HistoryFilter(group="etl")).items
    assert [r.job_key for r in by_group] == [JobKey("load", "etl")]


def test_history_filters_by_results_and_time(db: SqlStore) -> None:
    results = ["succeeded", "failed", "misfired", "held", "succeeded", "skipped", "expired"]
    insert_history(db, *(history_row(at(i), r) for i, r in enumerate(results)))
    misfires = HistoryFilter(results=frozenset({"misfired", "held", "skipped", "expired"}))
    # Several results: one index range per result, merged; paged like any other filter.
    rows = _all_pages(lambda **kw: db.history(misfires, **kw), limit=1)
    assert [r.result for r in rows] == ["expired", "skipped", "held", "misfired"]
    assert [r.result for r in db.history(HistoryFilter(results=frozenset({"FAILED"}))).items] == [
        "failed"
    ]
    window = HistoryFilter(since=at(2), until=at(5))  # since inclusive, until exclusive
    assert [r.event_time for r in db.history(window).items] == [at(4), at(3), at(2)]
    both = HistoryFilter(job=JobKey("job"), results=frozenset({"succeeded", "held"}))
    assert [r.event_time for r in db.history(both).items] == [at(4), at(3), at(0)]


@pytest.mark.parametrize(
    ("filters", "limit", "after", "named"),
    [
        (HistoryFilter(results=frozenset({"done"})), 10, None, "unknown result 'done'"),
        (HistoryFilter(results=frozenset()), 10, None, "results"),
        (HistoryFilter(since=T0.replace(tzinfo=None)), 10, None, "since"),
        (None, 0, None, "page limit 0"),
        (None, 10, ("x", 1), "page cursor"),
    ],
)
def test_bad_history_reads_name_what_is_wrong(
    store: SqlStore, filters: HistoryFilter | None, limit: int, after: object, named: str
) -> None:
    with pytest.raises(ValidationError, match=named):
        store.history(filters, limit=limit, after=after)  # type: ignore[arg-type]


# -- statistics --------------------------------------------------------------------------------


def test_statistics_count_results_and_read_percentiles_from_the_unfolded_rows(
    db: SqlStore, clock: FakeClock
) -> None:
    store = db
    clock.set(at(3 * 3600))
    # 100 runs of 1..100 s in the hour from at(3600): p50 about 50 s, p95 about 95 s.
    insert_history(
        store,
        *(
            history_row(at(3600 + i * 30), duration_ms=(i + 1) * 1000, lateness_ms=i * 10)
            for i in range(100)
        ),
        history_row(at(3600 + 10), "failed", duration_ms=200_000),
        history_row(at(3600 + 20), "misfired"),
    )
    stats = store.statistics(window=timedelta(hours=3), bucket=timedelta(hours=1))
    assert stats.since == at(3600) and stats.until == at(4 * 3600)
    assert [b.start for b in stats.buckets] == [at(3600), at(7200), at(10800)]
    hour = stats.buckets[0]
    assert hour.counts == {"failed": 1, "misfired": 1, "succeeded": 100}
    assert hour.duration_p50 == pytest.approx(51, rel=0.1)
    assert hour.duration_p95 == pytest.approx(96, rel=0.1)
    assert hour.duration_max == 200.0
    assert hour.lateness_max == 0.99
    assert stats.buckets[1].counts == {} and stats.buckets[1].duration_p50 is None
    assert stats.total.counts == hour.counts and stats.total.start == stats.since


def test_statistics_merge_the_rollups_with_the_tail_and_six_hours_from_hourly_rollups(
    db: SqlStore, clock: FakeClock
) -> None:
    store = db
    noon = 3 * 3600  # T0 is 09:00 UTC; buckets are aligned to the epoch
    clock.set(at(noon + 86400 - 1))
    start = to_millis(at(noon))
    r = store.tables.history_rollups
    hist = {str(histogram_bin(2000)): 3}
    with store.transaction() as conn:
        conn.execute(
            insert(r),
            [
                {
                    "sched_name": store.scheduler_name,
                    "job_group": group,
                    "job_name": name,
                    "bucket_seconds": 3600,
                    "bucket_start": start + hour * 3_600_000,
                    "result": "succeeded",
                    "runs": 3,
                    "duration_max": 2000,
                    "duration_hist": json.dumps(hist),
                }
                for hour in range(24)
                for group, name in (("", ""), ("DEFAULT", "job"))
            ],
        )
    insert_history(store, history_row(at(noon + 7 * 3600), "failed", duration_ms=9000))
    whole = store.statistics(window=timedelta(days=1), bucket=timedelta(hours=6))
    assert [b.counts for b in whole.buckets] == [
        {"succeeded": 18},
        {"failed": 1, "succeeded": 18},
        {"succeeded": 18},
        {"succeeded": 18},
    ]
    assert whole.buckets[1].duration_max == 9.0
    assert whole.total.counts == {"failed": 1, "succeeded": 72}
    assert whole.total.duration_p50 == pytest.approx(2.0, rel=0.1)
    other = store.statistics(job=JobKey("other"), window=timedelta(days=1))
    assert other.total.counts == {}


def test_statistics_refuse_a_bucket_width_they_do_not_keep(store: SqlStore) -> None:
    with pytest.raises(ValidationError, match="statistics bucket"):
        store.statistics(bucket=timedelta(minutes=10))
    with pytest.raises(ValidationError, match="more than 5000"):
        store.statistics(window=timedelta(days=400), bucket=timedelta(minutes=5))
    with pytest.raises(ValidationError, match="statistics window"):
        store.statistics(window=timedelta(0))


# -- run status and success deadlines ----------------------------------------------------------


def test_run_status_pages_jobs_with_their_deadline_and_overdue(
    db: SqlStore, clock: FakeClock
) -> None:
    clock.set(at(10 * 3600))
    _set_deadline(db, "billing", timedelta(hours=2))
    insert_status(db, "billing", since=at(0), last_success=at(3600), runs=5, failures=1)
    insert_status(db, "ok", since=at(0), last_success=at(9 * 3600))
    insert_status(db, "t1", kind="trigger", since=at(0))
    statuses = _all_pages(db.run_status, limit=1)
    assert [s.key for s in statuses] == [JobKey("billing"), JobKey("ok")]
    billing = statuses[0]
    assert billing.require_success_within == timedelta(hours=2) and billing.overdue
    assert (billing.runs, billing.failures, billing.last_success_time) == (5, 1, at(3600))
    assert statuses[1].require_success_within is None and not statuses[1].overdue
    (trigger,) = db.run_status(kind="trigger").items
    assert trigger.key == TriggerKey("t1")
    with pytest.raises(ValidationError, match="kind 'node'"):
        db.run_status(kind="node")


def test_overdue_jobs_by_stored_deadline_and_by_a_given_mapping(
    db: SqlStore, clock: FakeClock
) -> None:
    clock.set(at(100 * 3600))
    _set_deadline(db, "stored", timedelta(hours=26))
    insert_status(db, "stored", since=at(0), last_success=at(50 * 3600))  # due at 76 h
    insert_status(db, "mapped", since=at(0), last_success=at(90 * 3600))  # due at 91 h
    insert_status(db, "never", since=at(80 * 3600))  # no success: from its first run, 81 h
    insert_status(db, "fresh", since=at(0), last_success=at(99 * 3600))
    deadlines = {JobKey(n): timedelta(hours=1) for n in ("mapped", "never", "fresh", "stored")}
    overdue = db.overdue_jobs(deadlines)
    # The stored deadline wins over the mapping's; oldest due first.
    assert [s.key.name for s in overdue] == ["stored", "never", "mapped"]
    assert overdue[0].require_success_within == timedelta(hours=26)
    assert all(s.overdue for s in overdue)
    assert [s.key.name for s in db.overdue_jobs()] == ["stored"]
    with pytest.raises(ValidationError, match=r"success deadline of job DEFAULT\.x"):
        db.overdue_jobs({JobKey("x"): timedelta(0)})


# -- audit -------------------------------------------------------------------------------------


def test_audit_is_paged_newest_first_and_filtered(db: SqlStore) -> None:
    insert_audit(db, at(1), principal="alice", via="cli", changes={"paused": [False, True]})
    insert_audit(db, at(2), principal="bob", via="api", action="resume_trigger")
    insert_audit(db, at(3), principal="alice", via="dashboard", target="DEFAULT.t2")
    insert_audit(db, at(4), principal="beat_schedule", via="beat_schedule")
    entries = _all_pages(db.audit, limit=3)
    assert [e.event_time for e in entries] == [at(4), at(3), at(2), at(1)]
    assert entries[-1].changes == {"paused": [False, True]}
    alice = db.audit(AuditFilter(principal="alice")).items
    assert [e.via for e in alice] == ["dashboard", "cli"]
    assert [e.principal for e in db.audit(AuditFilter(action="resume_trigger")).items] == ["bob"]
    assert [e.event_time for e in db.audit(AuditFilter(since=at(2), until=at(4))).items] == [
        at(3),
        at(2),
    ]
    assert [e.event_time for e in db.audit(AuditFilter(target="DEFAULT.t2")).items] == [at(3)]
    assert db.audit(AuditFilter(via="file")).items == []


def test_one_run_status_is_read_by_its_key(db: SqlStore, clock: FakeClock) -> None:
    insert_status(db, "a", since=at(0), runs=1)
    insert_status(db, "b", since=at(0), runs=2)
    (status,) = db.run_status(group="DEFAULT", name="b").items
    assert status.runs == 2
    assert db.run_status(group="DEFAULT", name="c").items == []
    with pytest.raises(ValidationError, match="give its group"):
        db.run_status(name="b")


def test_a_percentile_is_never_above_the_largest_value(store: SqlStore, clock: FakeClock) -> None:
    # 2900 ms falls in a bin whose middle is above it.
    clock.set(at(3600))
    insert_history(store, history_row(at(60), duration_ms=2900, lateness_ms=220))
    (bucket,) = [b for b in store.statistics(window=timedelta(hours=2)).buckets if b.counts]
    assert bucket.duration_p50 == bucket.duration_p95 == bucket.duration_max == 2.9
    assert bucket.lateness_p95 == 0.22
