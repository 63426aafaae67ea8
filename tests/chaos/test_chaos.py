"""The short chaos run (two minutes of kills and restarts) that ``make test`` includes.

The long run is the same harness: ``python -m tests.chaos --seconds 600``. So are the outages,
here scaled down (a service down 8 s against a 5 s misfire threshold); the recorded ones are
``python -m tests.chaos --outage postgresql --down 90 --misfire-threshold 60`` (and ``redis``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.harness import run_chaos, run_outage
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
    assert report.history_duplicates == report.history_unrun == report.history_missing == []
    assert report.history_succeeded > 0
    assert report.ok


@pytest.mark.slow
@pytest.mark.chaos
@pytest.mark.parametrize("service", ["postgresql", "redis"])
def test_a_service_down_longer_than_the_misfire_threshold_loses_nothing(
    tmp_path: Path, postgres: PostgresServer, redis: RedisServer, service: str
) -> None:
    """Every occurrence ran once or was dropped by a logged misfire decision, nothing is stuck in
    flight, and the schedulers recovered by themselves (none restarted). A worker that exits
    when Redis goes away (Celery's Redis transport can) is started again, as its supervisor
    would; the PostgreSQL outage must not end any worker."""
    report = run_outage(
        tmp_path, postgres, redis, service=service, down=8, misfire_threshold=5, before=5
    )
    print(report.table())
    assert report.died == []
    if service == "postgresql":
        assert report.worker_restarts == []
    assert report.duplicates == 0
    assert report.lost == [], report.table()
    assert report.left_in_flight == 0, report.left_detail
    assert report.after_outage > 0
    assert report.ok
