"""One mode per set of tables, with real ``celery beat`` processes: a clustered scheduler joining a
live non-clustered one refuses to start, and so does a non-clustered one joining a live cluster;
each says why and names the live instance."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.integration import ledger_app
from tests.integration.processes import processes, wait_for

CLUSTERED = {"CLUSTERED": "1"}
NON_CLUSTERED = {"CLUSTERED": "0", "INSTANCE_ID": "the-leader"}


@pytest.mark.parametrize(
    ("first", "second", "refusal"),
    [
        (
            NON_CLUSTERED,
            CLUSTERED,
            "this clustered instance .* refuses to start: non-clustered instance\\(s\\) the-leader "
            "are live on the same tables",
        ),
        (
            CLUSTERED,
            NON_CLUSTERED,
            "this non-clustered instance the-leader refuses to start: clustered instance\\(s\\) "
            "\\S+ are live on the same tables",
        ),
    ],
    ids=["clustered-joins-non-clustered", "non-clustered-joins-clustered"],
)
def test_a_scheduler_of_the_other_mode_refuses_to_start_beside_a_live_one(
    tmp_path: Path,
    pg_url: str,
    redis_url: str,
    first: dict[str, str],
    second: dict[str, str],
    refusal: str,
) -> None:
    store = ledger_app.prepared_store(pg_url)
    base = ledger_app.environment(pg_url, redis_url, CHECKIN_INTERVAL="1")
    first_env = {**base, **{f"CQ_{k}": v for k, v in first.items()}}
    second_env = {**base, **{f"CQ_{k}": v for k, v in second.items()}}
    with processes(tmp_path, first_env) as procs:
        procs.beat("first")
        wait_for(
            lambda: len(store.check_ins(kind="scheduler")) == 1,
            timeout=60,
            message="the first scheduler to check in",
        )
        procs.env = {**procs.env, **second_env}
        joiner = procs.beat("second")
        try:
            code = joiner.wait(timeout=90)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                "the second scheduler did not refuse to start:\n" + procs.log("second")[-4000:]
            ) from None
        log = procs.log("second")
        assert code != 0, log[-4000:]

        assert re.search(refusal, log), log[-4000:]
        assert "Give one of them another quartz_scheduler_name" in log
        # The first one is untouched: still running, still the only one checked in.
        procs.assert_running("first")
        [row] = store.check_ins(kind="scheduler")
        assert row.clustered == (first["CLUSTERED"] == "1")
    store.dispose()
