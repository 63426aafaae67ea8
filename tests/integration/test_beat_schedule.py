"""Three real beat processes loading the same ``beat_schedule`` at once store it once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from celery_quartz.keys import BEAT_SCHEDULE_GROUP
from celery_quartz.store import SqlStore
from tests.integration.processes import processes, wait_for

ENTRIES = {f"entry-{n}": {"task": "ledger.noop", "schedule": 30 + n} for n in range(20)}
# Stock beat adds this entry when the result backend cannot expire results itself; so do we.
EXPECTED = sorted([*ENTRIES, "celery.backend_cleanup"])


def _three_beats_at_once(tmp_path: Path, store_url: str, broker_url: str) -> None:
    env = {
        "CQ_BROKER_URL": broker_url,
        "CQ_STORE_URL": store_url,
        "CQ_LEDGER_URL": store_url,
        "CQ_BEAT_SCHEDULE": json.dumps(ENTRIES),
    }
    with processes(tmp_path, env) as procs:
        names = ["beat1", "beat2", "beat3"]
        for name in names:
            procs.beat(name)
        wait_for(
            lambda: all("beat_schedule:" in procs.log(n) for n in names),
            timeout=60,
            message="all three schedulers to import beat_schedule",
        )
        procs.assert_running(*names)
        logs = [procs.log(n) for n in names]
    # Exactly one of them added the entries; the others found them unchanged.
    assert sum(f"beat_schedule: {len(EXPECTED)} added" in log for log in logs) == 1, logs
    assert (
        sum(f"0 added, 0 updated, 0 removed, {len(EXPECTED)} unchanged" in log for log in logs) == 2
    )
    store = SqlStore(store_url, scheduler_name="ledger_app")
    jobs = store.job_keys(BEAT_SCHEDULE_GROUP)
    assert sorted(k.name for k in jobs) == EXPECTED
    for key in jobs:
        assert [t.key.name for t in store.get_triggers_of_job(key)] == [key.name]
    assert store.count_rows()["triggers"] == len(EXPECTED)
    store.dispose()


@pytest.mark.slow
def test_three_schedulers_importing_at_once_on_postgres_store_each_entry_once(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    _three_beats_at_once(tmp_path, pg_url, redis_url)


@pytest.mark.slow
def test_three_schedulers_importing_at_once_on_sqlite_store_each_entry_once(
    tmp_path: Path, redis_url: str
) -> None:
    _three_beats_at_once(tmp_path, f"sqlite:///{tmp_path / 'quartz.db'}", redis_url)
