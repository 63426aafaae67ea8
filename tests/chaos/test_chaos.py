"""The short chaos runs that ``make test`` includes: 50 s of kills and restarts on Redis, 45 s on
RabbitMQ (the two-minute run on several seeds, and the ten-minute one, are in bench/RESULTS.md).

The long run is the same harness: ``python -m tests.chaos --seconds 600`` (``--broker
rabbitmq``). So are the outages,
here scaled down (a service down 8 s against a 5 s misfire threshold); the recorded ones are
``python -m tests.chaos --outage postgresql --down 90 --misfire-threshold 60`` (and ``redis``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.harness import run_chaos, run_outage
from tests.service_rabbitmq import RabbitMQServer
from tests.services import PostgresServer, RedisServer


@pytest.mark.slow
@pytest.mark.chaos
def test_50_seconds_of_kills_and_restarts_lose_nothing_and_start_nothing_twice(
    tmp_path: Path, postgres: PostgresServer, redis: RedisServer
) -> None:
    report = run_chaos(tmp_path, postgres, redis, seconds=50, seed=7)
    print(report.table())
    assert report.duplicates == 0
    assert report.lost == [], report.table()
    assert report.left_in_flight == 0
    assert report.overlaps == 0
    assert report.executed > 300
    assert len(report.kills) >= 8
    assert report.history_duplicates == report.history_unrun == report.history_missing == []
    assert report.history_succeeded > 0
    assert report.ok


@pytest.mark.slow
@pytest.mark.chaos
def test_45_seconds_of_kills_and_restarts_on_rabbitmq_lose_nothing_and_start_nothing_twice(
    tmp_path: Path, postgres: PostgresServer, rabbitmq: RabbitMQServer
) -> None:
    """The same harness on RabbitMQ, shorter: the beats, workers and pool processes killed,
    PostgreSQL restarted, and the RabbitMQ node restarted (its durable queues kept)."""
    report = run_chaos(tmp_path, postgres, rabbitmq, seconds=45, seed=8)
    print(report.table())
    assert report.duplicates == 0
    assert report.lost == [], report.table()
    assert report.left_in_flight == 0, report.left_detail
    assert report.overlaps == 0
    assert report.executed > 150
    assert len(report.kills) >= 5
    # Seed 8 kills beats first, then workers and pool processes.
    assert any(k.startswith("beat") for k in report.kills), report.kills
    assert any(k.startswith("worker") for k in report.kills), report.kills
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
