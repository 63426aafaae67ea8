"""The client's reads of the run history: ``Quartz.history``, ``statistics``, ``job_status``,
``job_statuses`` and ``audit`` answer from the store's read side, with its paging and errors."""

from __future__ import annotations

from datetime import timedelta

import pytest
from celery import Celery

from celery_quartz import Quartz
from celery_quartz.clock import FakeClock
from celery_quartz.errors import ValidationError
from celery_quartz.history import RunResult
from celery_quartz.keys import JobKey, TriggerKey
from celery_quartz.store import MemoryStore
from tests.history_rows import history_row, insert_audit, insert_history, insert_status
from tests.unit.conftest import at


@pytest.fixture
def quartz(app: Celery, store: MemoryStore, clock: FakeClock) -> Quartz:
    clock.set(at(3600))
    insert_history(
        store,
        history_row(at(10), trigger="a", job="billing", duration_ms=2000),
        history_row(at(20), "failed", trigger="a", job="billing"),
        history_row(at(30), "misfired", trigger="b", job="report", trigger_group="etl"),
    )
    insert_status(store, "billing", since=at(0), last_success=at(10), runs=2, failures=1)
    insert_audit(store, at(40), principal="alice")
    return Quartz(app, store=store, clock=clock)


def test_history_by_job_trigger_group_and_result(quartz: Quartz) -> None:
    assert [e.result for e in quartz.history().items] == ["misfired", "failed", "succeeded"]
    assert [e.result for e in quartz.history(job=JobKey("billing")).items] == [
        "failed",
        "succeeded",
    ]
    assert [e.result for e in quartz.history(trigger=TriggerKey("b", "etl")).items] == ["misfired"]
    assert [e.trigger_key.name for e in quartz.history(group="etl").items] == ["b"]
    assert [e.result for e in quartz.history(results=[RunResult.FAILED, "misfired"]).items] == [
        "misfired",
        "failed",
    ]
    page = quartz.history(limit=2)
    assert [e.result for e in quartz.history(after=page.next_after).items] == ["succeeded"]
    with pytest.raises(ValidationError, match="unknown result 'ok'"):
        quartz.history(results=["ok"])


def test_statistics_job_status_and_audit(quartz: Quartz) -> None:
    stats = quartz.statistics(window=timedelta(hours=2))
    assert stats.total.counts == {"failed": 1, "misfired": 1, "succeeded": 1}
    assert quartz.statistics(job=JobKey("report")).total.counts == {"misfired": 1}
    status = quartz.job_status(JobKey("billing"))
    assert status is not None and (status.runs, status.failures) == (2, 1)
    assert quartz.job_status(JobKey("report")) is None
    assert [s.key for s in quartz.job_statuses().items] == [JobKey("billing")]
    (entry,) = quartz.audit(principal="alice").items
    assert entry.event_time == at(40)
    assert quartz.audit(principal="bob").items == []
