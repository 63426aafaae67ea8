"""The short chaos run (two minutes of kills and restarts) that ``make test`` includes.

The long run is the same harness: ``python -m tests.chaos --seconds 600``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.harness import run_chaos
from tests.services import PostgresServer, RedisServer


@pytest.mark.slow
@pytest.mark.chaos
def test_two_minutes_of_kills_and_restarts_lose_nothing_and_start_nothing_twice(
    tmp_path: Path, postgres: PostgresServer, redis: RedisServer
) -> None:
    report = run_chaos(tmp_path, postgres, redis, seconds=120, seed=7)
    print(report.table())
    assert report.duplicates == 0
    assert report.lost == [], report.table()
    assert report.left_in_flight == 0
    assert report.overlaps == 0
    assert report.executed > 500
    assert len(report.kills) >= 15
    assert report.ok
