"""The election thread every built-in election shares, over a lock held in memory."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from celery_quartz.config import Settings
from celery_quartz.elections.base import Election
from celery_quartz.errors import ConfigurationError
from celery_quartz.leadership import SchedulerLeadership
from celery_quartz.lifecycle import SchedulerStatus


class Scheduler:
    """Records the callbacks' effect."""

    def __init__(self) -> None:
        self.status = SchedulerStatus.CREATED
        self.calls: list[str] = []

    def start(self) -> None:
        self.calls.append("start")
        self.status = SchedulerStatus.RUNNING

    def standby(self) -> None:
        self.calls.append("standby")
        self.status = SchedulerStatus.STANDBY


class MemoryLock(Election):
    kind = "memory election"

    def __init__(self, leadership: SchedulerLeadership, holder: list[object]) -> None:
        super().__init__(leadership, retry_interval=0.01, hold_interval=0.01)
        self.holder = holder
        self.lost = threading.Event()

    def try_acquire(self) -> bool:
        if self.holder:
            return False
        self.holder.append(self)
        return True

    def still_held(self) -> bool:
        return not self.lost.is_set() and self.holder == [self]

    def release(self) -> None:
        if self.holder == [self]:
            self.holder.clear()


def eventually(predicate: object, timeout: float = 2.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.005)
    raise AssertionError("timed out")


def test_winning_the_lock_starts_the_scheduler_and_losing_it_stands_it_down() -> None:
    scheduler = Scheduler()
    election = MemoryLock(SchedulerLeadership(scheduler), [])
    election.start()
    try:
        eventually(lambda: scheduler.status is SchedulerStatus.RUNNING)
        election.lost.set()
        eventually(lambda: scheduler.status is SchedulerStatus.STANDBY)
    finally:
        election.stop()


def test_only_one_of_two_contenders_leads() -> None:
    holder: list[object] = []
    first, second = Scheduler(), Scheduler()
    elections = [MemoryLock(SchedulerLeadership(s), holder) for s in (first, second)]
    for election in elections:
        election.start()
    try:
        eventually(lambda: SchedulerStatus.RUNNING in (first.status, second.status))
        time.sleep(0.1)
        assert [first.status, second.status].count(SchedulerStatus.RUNNING) == 1
    finally:
        for election in elections:
            election.stop()


def test_stopping_gives_the_lock_up_to_the_next_contender() -> None:
    holder: list[object] = []
    first, second = Scheduler(), Scheduler()
    one = MemoryLock(SchedulerLeadership(first), holder)
    one.start()
    eventually(lambda: first.status is SchedulerStatus.RUNNING)
    first.status = SchedulerStatus.SHUTDOWN  # the host shut the scheduler down first
    two = MemoryLock(SchedulerLeadership(second), holder)
    two.start()
    one.stop()
    try:
        eventually(lambda: second.status is SchedulerStatus.RUNNING)
        assert first.calls == ["start"]  # no standby() after shutdown
    finally:
        two.stop()


def test_a_fenced_stand_down_lets_go_and_stays_out_for_a_while() -> None:
    holder: list[object] = []
    scheduler = Scheduler()
    election = MemoryLock(SchedulerLeadership(scheduler), holder)
    election.fenced_backoff = 0.5
    election.start()
    try:
        eventually(lambda: scheduler.status is SchedulerStatus.RUNNING)
        scheduler.status = SchedulerStatus.STANDBY  # the loop stood down by itself
        election.stand_down()
        eventually(lambda: holder == [])
        time.sleep(0.2)
        assert holder == []  # still backing off
        eventually(lambda: scheduler.status is SchedulerStatus.RUNNING)
    finally:
        election.stop()


def test_an_unknown_election_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="quartz_election must be one of"):
        Settings(election="zookeeper").validate()


def test_the_postgresql_election_needs_a_postgresql_store() -> None:
    from celery_quartz.elections.postgres import PostgresAdvisoryLockElection

    with pytest.raises(ConfigurationError, match="needs a PostgreSQL store"):
        PostgresAdvisoryLockElection(
            "sqlite:///x.db", SchedulerLeadership(Scheduler()), scheduler_name="s"
        )


def test_the_postgresql_election_needs_a_lock_timeout_of_two_retry_intervals() -> None:
    from celery_quartz.elections.postgres import PostgresAdvisoryLockElection

    with pytest.raises(ConfigurationError, match="at least twice"):
        PostgresAdvisoryLockElection(
            "postgresql+psycopg2://db/x",
            SchedulerLeadership(Scheduler()),
            scheduler_name="s",
            retry_interval=1.0,
            lock_timeout=1.5,
        )


def _redis_election(app_conf: dict[str, object], **settings: object) -> object:
    from celery import Celery

    from celery_quartz.elections import build_election

    app = Celery("elect", set_as_current=False)
    app.conf.update(app_conf)
    chosen = Settings(clustered=False, election="redis", scheduler_name="s", **settings)  # type: ignore[arg-type]
    return build_election(chosen, app, SchedulerLeadership(Scheduler()))


def test_a_sentinel_url_gives_a_client_of_the_master_the_sentinels_name() -> None:
    election: Any = _redis_election(
        {
            "broker_url": "sentinel://:secret@10.0.0.1:26379/4;sentinel://10.0.0.2:26380/4",
            "broker_transport_options": {"master_name": "mymaster"},
        }
    )
    pool = election.client.connection_pool
    assert pool.service_name == "mymaster"
    assert pool.connection_kwargs["db"] == 4
    assert pool.connection_kwargs["password"] == "secret"
    hosts = [
        (s.connection_pool.connection_kwargs["host"], s.connection_pool.connection_kwargs["port"])
        for s in pool.sentinel_manager.sentinels
    ]
    assert hosts == [("10.0.0.1", 26379), ("10.0.0.2", 26380)]
    election.close()


def test_the_election_master_name_setting_wins_over_the_brokers() -> None:
    election: Any = _redis_election(
        {"broker_transport_options": {"master_name": "broker-master"}},
        election_redis_url="sentinel://10.0.0.1:26379",
        election_redis_master_name="election-master",
    )
    assert election.client.connection_pool.service_name == "election-master"
    assert election.client.connection_pool.connection_kwargs["db"] == 0
    election.close()


def test_a_sentinel_url_without_a_master_name_is_refused_naming_the_setting() -> None:
    with pytest.raises(ConfigurationError, match="quartz_election_redis_master_name") as caught:
        _redis_election({"broker_url": "sentinel://:hunter2@10.0.0.1:26379/0"})
    assert "hunter2" not in str(caught.value)


def test_a_sentinel_url_with_another_scheme_in_its_list_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="sentinel://host:port"):
        _redis_election(
            {"broker_transport_options": {"master_name": "m"}},
            election_redis_url="sentinel://10.0.0.1:26379;redis://10.0.0.2:6379",
        )


def test_a_plain_redis_url_still_gives_a_plain_client() -> None:
    election: Any = _redis_election({"broker_url": "redis://10.0.0.1:6380/3"})
    kwargs = election.client.connection_pool.connection_kwargs
    assert (kwargs["host"], kwargs["port"], kwargs["db"]) == ("10.0.0.1", 6380, 3)
    election.close()
