"""The five trigger kinds and calendars through real ``celery beat -S celery_quartz.Scheduler`` and
Celery worker processes on PostgreSQL and Redis: each kind fires its occurrences once each, and
a stored calendar removes the fire times it excludes while a trigger without it fires."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from datetime import time as time_of_day
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import create_engine, select

from celery_quartz import Job, JobKey, Quartz, TriggerKey
from celery_quartz.calendars import DailyCalendar, HolidayCalendar
from celery_quartz.clock import to_millis
from celery_quartz.errors import CalendarInUseError
from celery_quartz.triggers import (
    CalendarIntervalTrigger,
    CronTrigger,
    DailyTimeIntervalTrigger,
    RecurrenceTrigger,
    SimpleTrigger,
)
from tests.integration import ledger_app
from tests.integration.brokers import on_both_brokers
from tests.integration.processes import processes, wait_for


def _executed(url: str, group: str) -> list[Any]:
    engine = create_engine(url)
    led = ledger_app.ledger
    with engine.connect() as conn:
        rows = conn.execute(select(led).where(led.c.trigger_group == group)).all()
    engine.dispose()
    return rows


def _even_second(seconds_from_now: float) -> datetime:
    """An even second from now whose next ten seconds stay within one Helsinki day (the
    daily-time-interval kind's five fires must not cross its local midnight)."""
    while True:
        now = datetime.now(timezone.utc).replace(microsecond=0)
        at = now + timedelta(seconds=seconds_from_now)
        at += timedelta(seconds=at.second % 2)
        local = at.astimezone(ZoneInfo("Europe/Helsinki"))
        if (local + timedelta(seconds=10)).date() == local.date():
            return at
        time.sleep(1)


def _env(pg_url: str, redis_url: str) -> dict[str, str]:
    return ledger_app.environment(
        pg_url, redis_url, IDLE_WAIT="0.5", CHECKIN_INTERVAL="1", CHECKIN_THRESHOLD="1"
    )


def _five_kinds(start: datetime) -> list[Any]:
    """Each kind firing every two seconds from ``start``, five times, then done."""
    key = lambda name: TriggerKey(name, "kinds")  # noqa: E731
    return [
        SimpleTrigger(
            key=key("simple"),
            start_at=start,
            repeat_interval=timedelta(seconds=2),
            repeat_count=4,
        ),
        CronTrigger(
            key=key("cron"),
            expression="0/2 * * * * ?",
            start_at=start,
            end_at=start + timedelta(seconds=8),  # inclusive
        ),
        CalendarIntervalTrigger(
            key=key("calendar-interval"),
            start_at=start,
            repeat_interval=2,
            repeat_interval_unit="SECOND",
            end_at=start + timedelta(seconds=9),  # exclusive
        ),
        DailyTimeIntervalTrigger(
            key=key("daily-time-interval"),
            start_at=start,
            # repeat_count counts per day from start_time_of_day (Quartz.NET): the day's
            # window opens at the start's local time of day.
            start_time_of_day=start.astimezone(ZoneInfo("Europe/Helsinki")).time(),
            repeat_interval=2,
            repeat_interval_unit="SECOND",
            repeat_count=4,
            end_at=start + timedelta(seconds=8),  # inclusive; else again tomorrow
            time_zone="Europe/Helsinki",
        ),
        RecurrenceTrigger(
            key=key("recurrence"),
            rule="FREQ=SECONDLY;INTERVAL=2;COUNT=5",
            start_at=start,
            time_zone="Europe/Helsinki",
        ),
    ]


@on_both_brokers
def test_each_of_the_five_trigger_kinds_fires_its_occurrences_once_through_beat_and_worker(
    tmp_path: Path, pg_url: str, broker_url: str
) -> None:
    store = ledger_app.prepared_store(pg_url)
    quartz = Quartz(ledger_app.app, store=store)
    start = _even_second(6)
    triggers = _five_kinds(start)
    quartz.schedule_jobs(
        [(Job(key=JobKey(t.key.name, "kinds"), task="ledger.record"), [t]) for t in triggers]
    )
    due = {
        (t.key.name, to_millis(start + timedelta(seconds=2 * k)))
        for t in triggers
        for k in range(5)
    }
    with processes(tmp_path, _env(pg_url, broker_url)) as procs:
        procs.worker("worker1", concurrency=4)
        procs.beat("beat1")
        procs.beat("beat2")
        wait_for(
            lambda: len(_executed(pg_url, "kinds")) >= len(due),
            timeout=60,
            message="every kind's five occurrences",
        )
        wait_for(lambda: not store.firing_states(), timeout=30, message="nothing in flight")
        time.sleep(2)  # time for a sixth occurrence, were there one
        procs.assert_running("worker1", "beat1", "beat2")
    rows = _executed(pg_url, "kinds")
    assert {(r.trigger_name, r.scheduled_ms) for r in rows} == due
    assert len(rows) == len(due)
    assert _executed(pg_url, "kinds") and not _rows_of(pg_url, ledger_app.duplicates)
    # On time: each started within a few seconds of its occurrence (two loaded cores).
    assert max(r.started - r.scheduled_ms / 1000 for r in rows) < 5
    # Done: every trigger fired its last occurrence and was removed with its job.
    for t in triggers:
        assert quartz.get_trigger(t.key) is None, t.key
    store.dispose()


def _rows_of(url: str, table: Any) -> list[Any]:
    engine = create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(select(table)).all()
    engine.dispose()
    return rows


def test_a_stored_calendar_suppresses_the_firings_it_excludes_while_others_fire(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    store = ledger_app.prepared_store(pg_url)
    quartz = Quartz(ledger_app.app, store=store)
    start = _even_second(4)
    if start.date() != (start + timedelta(seconds=12)).date():
        time.sleep(15)  # the run would cross midnight UTC: start after it instead
        start = _even_second(4)
    today = start.date()
    # A whole day off: today (UTC).
    quartz.add_calendar("holidays", HolidayCalendar([today]))
    gap_from, gap_to = start + timedelta(seconds=2), start + timedelta(seconds=7)
    # A stretch of every day, both ends included: six of the thirteen occurrences.
    quartz.add_calendar("pause", DailyCalendar(gap_from.time(), gap_to.time()))
    assert quartz.get_calendar_names() == ["holidays", "pause"]
    assert isinstance(quartz.get_calendar("pause"), DailyCalendar)

    def every_second(name: str, calendar: str | None, repeat_count: int = 12) -> SimpleTrigger:
        return SimpleTrigger(
            key=TriggerKey(name, "calendars"),
            start_at=start,
            repeat_interval=timedelta(seconds=1),
            repeat_count=repeat_count,
            calendar_name=calendar,
        )

    triggers = [
        # Every second, for ever: the holiday moves its first fire time to tomorrow.
        every_second("on-holiday", "holidays", repeat_count=-1),
        every_second("paused", "pause"),
    ]
    triggers.append(every_second("free", None))
    quartz.schedule_jobs(
        [(Job(key=JobKey(t.key.name, "calendars"), task="ledger.record"), [t]) for t in triggers]
    )
    with pytest.raises(CalendarInUseError):
        quartz.delete_calendar("pause")
    occurrences = [start + timedelta(seconds=k) for k in range(13)]
    with processes(tmp_path, _env(pg_url, redis_url)) as procs:
        procs.worker("worker1", concurrency=4)
        procs.beat("beat1")
        wait_for(
            lambda: len(_executed(pg_url, "calendars")) >= 13 + 13 - 6,
            timeout=60,
            message="the free trigger's and the paused trigger's firings",
        )
        wait_for(lambda: not store.firing_states(), timeout=30, message="nothing in flight")
        time.sleep(2)
    runs: dict[str, set[int]] = {}
    for r in _executed(pg_url, "calendars"):
        runs.setdefault(r.trigger_name, set()).add(r.scheduled_ms)
    every = {to_millis(t) for t in occurrences}
    excluded = {to_millis(t) for t in occurrences if gap_from <= t <= gap_to}
    assert len(excluded) == 6
    assert runs["free"] == every
    assert runs["paused"] == every - excluded
    assert "on-holiday" not in runs
    # The holiday trigger waits for the first fire time after the excluded day.
    waiting = quartz.get_trigger(TriggerKey("on-holiday", "calendars"))
    assert waiting is not None and waiting.next_fire_time is not None
    assert waiting.next_fire_time >= datetime.combine(
        today + timedelta(days=1), time_of_day(0), tzinfo=timezone.utc
    )
    assert not _rows_of(pg_url, ledger_app.duplicates)
    store.dispose()
