"""Progress a running task reports (``current_context().report_progress``): checked, never
blocking, written at most once a second per firing and only on change, kept only while the
firing executes, and shown by the read side, the CLI's JSON and the API's. The store's statement
runs on SQLite and PostgreSQL (the ``db`` fixture)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timezone

import pytest

from celery_quartz import presentation
from celery_quartz.clock import FakeClock
from celery_quartz.context import MAX_PROGRESS_MESSAGE
from celery_quartz.store import FiringState, SqlStore
from celery_quartz.store.records import ProgressReport
from celery_quartz.worker.progress import MIN_INTERVAL, ProgressWriter
from tests.unit.builders import A, add, execution_context, repeating
from tests.unit.conftest import T0, at

W1 = "celery@w1"


def _executing(db: SqlStore, name: str = "t1") -> str:
    add(db, repeating(name, at(0), 60))
    claim = db.claim(A, no_later_than=at(1), max_count=10, time_window=0.0)
    fire_id = claim.firings[0].fire_instance_id
    db.mark_published(A, [fire_id])
    assert db.start_execution(fire_id, W1)
    return fire_id


# -- the context ------------------------------------------------------------------------------


@pytest.mark.parametrize("percent", [-1, 100.5, math.nan, "50", True, None])
def test_a_percent_that_is_not_0_to_100_is_refused(percent: object) -> None:
    with pytest.raises(ValueError, match="report_progress: percent must be"):
        execution_context().report_progress(percent)  # type: ignore[arg-type]


def test_a_report_goes_to_the_sink_with_its_message_cut_to_the_bound() -> None:
    seen: list[tuple[str, float, str | None]] = []
    context = execution_context()
    context.progress_sink = lambda ctx, percent, message: seen.append(
        (ctx.fire_instance_id, percent, message)
    )
    context.report_progress(42, "x" * 300)
    context.report_progress(100)
    assert seen == [("f1", 42.0, "x" * MAX_PROGRESS_MESSAGE), ("f1", 100.0, None)]


def test_outside_a_worker_with_the_hooks_a_report_goes_nowhere() -> None:
    execution_context().report_progress(10, "fine")  # no sink: nothing to do, nothing raised


# -- the writer -------------------------------------------------------------------------------


class _Recording:
    """A store that records what the writer asks it to write (the writer's pacing alone)."""

    def __init__(self) -> None:
        self.calls: list[list[ProgressReport]] = []

    def record_progress(self, reports: Sequence[ProgressReport]) -> int:
        self.calls.append(list(reports))
        return len(reports)


def test_the_writer_writes_each_firing_at_most_once_a_second_and_only_on_change() -> None:
    store = _Recording()
    writer = ProgressWriter(lambda name: store, FakeClock(T0))  # type: ignore[arg-type,return-value]
    a, b = execution_context("a"), execution_context("b")
    writer.offer(a, 10, "start")
    writer.offer(b, 50, None)
    assert writer.write_due(now=100.0) == 2
    writer.offer(a, 20, "later")  # changed, but written less than a second ago
    assert writer.write_due(now=100.5) == 0
    assert writer.write_due(now=100.0 + MIN_INTERVAL) == 1  # a's change; b is unchanged
    writer.offer(b, 50, None)  # the same report again: nothing to write
    assert writer.write_due(now=110.0) == 0
    writer.forget("a")
    writer.offer(b, 60, None)
    assert writer.write_due(now=120.0) == 1
    assert [[(r.fire_instance_id, r.percent, r.message) for r in call] for call in store.calls] == [
        [("a", 10.0, "start"), ("b", 50.0, None)],
        [("a", 20.0, "later")],
        [("b", 60.0, None)],
    ]


def test_a_store_that_refuses_loses_nothing_but_that_write() -> None:
    class Failing(_Recording):
        fail = True

        def record_progress(self, reports: Sequence[ProgressReport]) -> int:
            if self.fail:
                raise RuntimeError("database down")
            return super().record_progress(reports)

    store = Failing()
    writer = ProgressWriter(lambda name: store, FakeClock(T0))  # type: ignore[arg-type,return-value]
    writer.offer(execution_context("a"), 30, None)
    assert writer.write_due(now=1.0) == 0
    store.fail = False
    assert writer.write_due(now=1.1) == 1  # written at the next round, not a second later


# -- the store and the read side ----------------------------------------------------------------


def test_progress_is_kept_while_the_firing_executes_and_shown_by_the_read_side(
    db: SqlStore, clock: FakeClock
) -> None:
    fire_id = _executing(db)
    assert db.record_progress([ProgressReport(fire_id, 42.5, "copying", 1_000)]) == 1
    (view,) = db.list_firings().items
    assert view.progress is not None
    assert (view.progress.percent, view.progress.message) == (42.5, "copying")
    assert view.progress.updated_at == datetime(1970, 1, 1, 0, 0, 1, tzinfo=timezone.utc)
    shown = presentation.firing(view)["progress"]
    assert shown == {
        "percent": 42.5,
        "message": "copying",
        "updated_at": "1970-01-01T00:00:01+00:00",
    }


def test_a_report_for_a_firing_not_executing_changes_nothing(db: SqlStore) -> None:
    add(db, repeating("t1", at(0), 60))
    claim = db.claim(A, no_later_than=at(1), max_count=10, time_window=0.0)
    fire_id = claim.firings[0].fire_instance_id  # FIRED, not started
    assert db.record_progress([ProgressReport(fire_id, 10, None, 1)]) == 0
    assert db.record_progress([ProgressReport("gone", 10, None, 1)]) == 0
    assert db.firing_states() == {fire_id: FiringState.FIRED}
    (view,) = db.list_firings().items
    assert view.progress is None
