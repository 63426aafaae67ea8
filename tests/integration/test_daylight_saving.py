"""Calendar-interval and daily-time-interval triggers across a real daylight-saving change, fired
by real ``celery beat -S celery_quartz.Scheduler`` and worker processes.

A change cannot be waited for, so the test moves the clock instead: the ledger app's test-only
``CQ_CLOCK_OFFSET`` shifts the system clock that every celery-quartz component reads, in the beat
and the worker alike, to a few seconds before each instant of interest around Europe/Berlin's
next spring-forward change (found from the machine's time-zone data; 2027-03-28 01:00 UTC seen
from late 2026). Each phase starts a worker and a beat on that day, waits for the phase's
firings, and stops them; the triggers and their state stay in PostgreSQL from one phase to the
next, as across a real night.

Proved: the fire times the scheduler computes across the change, stored and advanced through
real processes, are the wall-clock instants the docs promise (computed here independently with
``zoneinfo``), each ran once and on time by the shifted clock. Not proved: the run of the system
clock itself across the change (the offset is constant within a phase), nor anything of Celery
that reads real time (a message's ``expires`` is months ahead and never judged).
"""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from datetime import time as time_of_day
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import create_engine, select

from celery_quartz import Job, JobKey, Quartz, TriggerKey
from celery_quartz.clock import to_millis
from celery_quartz.triggers import CalendarIntervalTrigger, DailyTimeIntervalTrigger
from tests.integration import ledger_app
from tests.integration.processes import processes, wait_for

ZONE_NAME = "Europe/Berlin"
ZONE = ZoneInfo(ZONE_NAME)
#: How long before an instant of interest a phase's clock starts (its processes start meanwhile).
LEAD = timedelta(seconds=10)


def next_spring_forward(after: datetime) -> datetime:
    """The first instant after ``after`` at which the zone's UTC offset grows (on a whole hour)."""
    hour = after.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    for _ in range(24 * 400):
        if (
            hour.astimezone(ZONE).utcoffset()
            > (hour - timedelta(hours=1)).astimezone(ZONE).utcoffset()
        ):  # type: ignore[operator]
            return hour
        hour += timedelta(hours=1)
    raise AssertionError(f"{ZONE_NAME} has no spring-forward change within 400 days")


def local(day: date, hour: int, minute: int = 0, second: int = 0) -> datetime:
    """A wall time of the zone (one that exists) as a UTC instant."""
    wall = datetime.combine(day, time_of_day(hour, minute, second), tzinfo=ZONE)
    return wall.astimezone(timezone.utc)


def _ledger(url: str) -> list[Any]:
    engine = create_engine(url)
    led = ledger_app.ledger
    with engine.connect() as conn:
        rows = conn.execute(select(led).where(led.c.trigger_group == "dst")).all()
    engine.dispose()
    return rows


@pytest.mark.slow
def test_calendar_and_daily_time_interval_triggers_fire_at_their_wall_times_across_spring_forward(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    change = next_spring_forward(datetime.now(timezone.utc))
    day = change.astimezone(ZONE).date()  # the day the clocks go forward
    eve = day - timedelta(days=1)
    assert change.astimezone(ZONE).hour == 3  # Berlin: 02:00 CET becomes 03:00 CEST
    key = lambda name: TriggerKey(name, "dst")  # noqa: E731
    daily = {"repeat_interval": 1, "repeat_interval_unit": "DAY", "time_zone": ZONE_NAME}
    every_two_seconds = {
        "repeat_interval": 2,
        "repeat_interval_unit": "SECOND",
        "time_zone": ZONE_NAME,
    }
    triggers = [
        # 09:00 wall time every day, before and after the change.
        CalendarIntervalTrigger(
            key=key("calendar-preserving"),
            start_at=local(eve, 9),
            preserve_hour_of_day_across_daylight_savings=True,
            **daily,
        ),
        # Quartz's default: days stepped on the offset the start had (10:00 after the change).
        CalendarIntervalTrigger(key=key("calendar-plain"), start_at=local(eve, 9), **daily),
        # 09:00:00 to 09:00:04 wall time every day, every two seconds.
        DailyTimeIntervalTrigger(
            key=key("daily-window"),
            start_at=local(eve, 0),
            start_time_of_day=time_of_day(9),
            end_time_of_day=time_of_day(9, 0, 4),
            **every_two_seconds,
        ),
        # 01:59:54 to 03:00:06 wall time on the day of the change only: twelve seconds of real
        # time, through the change on elapsed time.
        DailyTimeIntervalTrigger(
            key=key("daily-through"),
            start_at=local(day, 0),
            end_at=local(day, 12),
            start_time_of_day=time_of_day(1, 59, 54),
            end_time_of_day=time_of_day(3, 0, 6),
            **every_two_seconds,
        ),
        # 02:30:00 to 02:30:02, a wall time the change skips: read with the offset before the
        # gap, so 03:30 CEST.
        DailyTimeIntervalTrigger(
            key=key("daily-in-gap"),
            start_at=local(day, 0),
            end_at=local(day, 12),
            start_time_of_day=time_of_day(2, 30),
            end_time_of_day=time_of_day(2, 30, 2),
            **every_two_seconds,
        ),
    ]
    seconds = lambda *s: [timedelta(seconds=x) for x in s]  # noqa: E731
    in_gap = change + timedelta(minutes=30)  # 02:30 CET, had it existed: 01:30 UTC
    expected = {
        "calendar-preserving": {local(eve, 9), local(day, 9)},
        "calendar-plain": {local(eve, 9), local(eve, 9) + timedelta(days=1)},
        "daily-window": {t + d for t in (local(eve, 9), local(day, 9)) for d in seconds(0, 2, 4)},
        "daily-through": {change + d for d in seconds(-6, -4, -2, 0, 2, 4, 6)},
        "daily-in-gap": {in_gap + d for d in seconds(0, 2)},
    }
    # The instants as the docs state them, in UTC (a check of this test's own arithmetic).
    assert local(day, 9) == local(eve, 9) + timedelta(hours=23)
    assert (local(eve, 9) + timedelta(days=1)).astimezone(ZONE).hour == 10
    assert in_gap.astimezone(ZONE).time() == time_of_day(3, 30)

    store = ledger_app.prepared_store(pg_url)
    quartz = Quartz(ledger_app.app, store=store)
    quartz.schedule_jobs(
        [(Job(key=JobKey(t.key.name, "dst"), task="ledger.record"), [t]) for t in triggers]
    )
    phases = sorted({local(eve, 9), change - timedelta(seconds=6), in_gap, local(day, 9)})
    phases.append(local(eve, 9) + timedelta(days=1))
    offsets: list[tuple[datetime, float]] = []
    env = ledger_app.environment(
        pg_url, redis_url, IDLE_WAIT="0.5", CHECKIN_INTERVAL="1", CHECKIN_THRESHOLD="1"
    )
    with processes(tmp_path, env) as procs:
        for n, first in enumerate(phases):
            due_now = {
                (name, to_millis(t))
                for name, times in expected.items()
                for t in times
                if first <= t < first + timedelta(minutes=1)
            }
            offset = (first - LEAD - datetime.now(timezone.utc)).total_seconds()
            offsets.append((first, offset))
            procs.env["CQ_CLOCK_OFFSET"] = str(offset)
            procs.worker(f"worker-{n}", concurrency=4)
            procs.beat(f"beat-{n}")
            wait_for(
                lambda due_now=due_now: (
                    due_now <= {(r.trigger_name, r.scheduled_ms) for r in _ledger(pg_url)}
                ),
                timeout=90,
                message=f"phase {n} ({first.isoformat()}): {sorted(due_now)}",
            )
            wait_for(lambda: not store.firing_states(), timeout=30, message="nothing in flight")
            for name in (f"beat-{n}", f"worker-{n}"):
                assert procs.stop(name) == 0, procs.log(name)[-4000:]

    rows = _ledger(pg_url)
    ran: dict[str, set[datetime]] = {}
    for r in rows:
        ran.setdefault(r.trigger_name, set()).add(
            datetime.fromtimestamp(r.scheduled_ms / 1000, timezone.utc)
        )
    assert ran == expected
    assert len(rows) == sum(len(times) for times in expected.values())
    assert not ledger_app_duplicates(pg_url)
    # On time by the shifted clock: started within a few seconds of its occurrence.
    for r in rows:
        scheduled = datetime.fromtimestamp(r.scheduled_ms / 1000, timezone.utc)
        offset = next(o for first, o in reversed(offsets) if first <= scheduled)
        lateness = r.started + offset - r.scheduled_ms / 1000
        assert -0.5 < lateness < 5, (r.trigger_name, scheduled, lateness)
    # What is left to fire: the next 09:00 wall time (07:00 UTC), and 08:00 UTC for the plain
    # one; the triggers of the day of the change have ended.
    preserving = quartz.get_trigger(key("calendar-preserving"))
    assert preserving is not None and preserving.next_fire_time == local(day, 9) + timedelta(days=1)
    plain = quartz.get_trigger(key("calendar-plain"))
    assert plain is not None and plain.next_fire_time == local(eve, 9) + timedelta(days=2)
    for name in ("daily-through", "daily-in-gap"):
        assert quartz.get_trigger(key(name)) is None, name
    store.dispose()


def ledger_app_duplicates(url: str) -> list[Any]:
    engine = create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(select(ledger_app.duplicates)).all()
    engine.dispose()
    return rows
