"""The election thread every built-in election shares, over a lock held in memory."""

from __future__ import annotations

import threading
import time

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
