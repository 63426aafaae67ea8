"""The Celery app every benchmark process uses (schedulers, beat peers, the sample worker).

Configured from the environment so that ``celery -A bench.app beat|worker`` subprocesses and the
benchmark's own processes agree:

    BENCH_BROKER_URL      Redis URL of the broker (messages land in the list ``celery``)
    BENCH_STORE_URL       SQLAlchemy URL of celery-quartz's store
    BENCH_RECORD_URL      Redis URL where the sample worker records the task ids it ran
    BENCH_BEAT_ENTRIES    number of ``beat_schedule`` entries (peers scenario), default 0
    BENCH_BEAT_INTERVAL   their interval in seconds, default 1
    BENCH_BEAT_AT         epoch milliseconds: instead, every entry is due once, at that instant
                          (the pipeline scenario's stock beat baseline)
    BENCH_BEAT_RATE       instead, this many entries each due once a second from
    BENCH_BEAT_FIRST      epoch milliseconds, their instants ``1000 / rate`` ms apart (the
                          pipeline's sustained stock baseline; each passes its phase to the task)
    BENCH_REDBEAT_URL     Redis URL for celery-redbeat's keys (peers scenario)
    BENCH_HOOKS           non-empty: install celery-quartz's worker hooks (pipeline scenario)
    BENCH_COMPLETION_DELAY  the hooked worker's ``quartz_worker_completion_delay`` (seconds);
                          unset: the default

The task ``bench.noop`` is the job of every benchmark trigger; run by a worker it adds its task id
(the firing's fire instance id) to the Redis set ``bench:ran`` and counts its runs in
``bench:runs``.
"""

from __future__ import annotations

import math
import os
import threading
import time
from datetime import datetime, timedelta
from typing import Any

from celery import Celery
from celery.schedules import schedstate, schedule

app = Celery("bench", broker=os.environ.get("BENCH_BROKER_URL", "memory://"))
app.conf.update(
    task_default_queue="celery",
    broker_connection_retry_on_startup=True,
    worker_prefetch_multiplier=4,
    worker_hijack_root_logger=False,
    beat_max_loop_interval=5,
    quartz_store_url=os.environ.get("BENCH_STORE_URL", "sqlite:///bench-quartz.db"),
    quartz_scheduler_name="bench",
    # Every benchmark drains a backlog that may be minutes old: never treat it as misfired.
    quartz_misfire_threshold=3600.0,
    redbeat_redis_url=os.environ.get("BENCH_REDBEAT_URL"),
    redbeat_lock_timeout=60,
)
if os.environ.get("BENCH_COMPLETION_DELAY"):
    app.conf.quartz_worker_completion_delay = float(os.environ["BENCH_COMPLETION_DELAY"])
if os.environ.get("BENCH_HISTORY_RETENTION"):
    app.conf.quartz_history_retention = float(os.environ["BENCH_HISTORY_RETENTION"])


class OnceAt(schedule):  # type: ignore[misc]
    """Due once, at ``at`` (epoch seconds): a stock beat entry that fires when a benchmark's
    celery-quartz triggers would, all at one instant."""

    def __init__(self, at: float) -> None:
        super().__init__(run_every=timedelta(hours=1))
        self.at = at

    def is_due(self, last_run_at: datetime) -> schedstate:
        now = time.time()
        if now < self.at:
            return schedstate(False, self.at - now)
        return schedstate(last_run_at.timestamp() < self.at, 3600.0)

    def __reduce__(self) -> tuple[Any, ...]:
        return self.__class__, (self.at,)


class EverySecond(schedule):  # type: ignore[misc]
    """Due once a second at ``phase`` (epoch seconds) plus whole seconds: a stock beat entry that
    fires when a celery-quartz trigger of the sustained scenario would."""

    def __init__(self, phase: float) -> None:
        super().__init__(run_every=timedelta(seconds=1))
        self.phase = phase

    def is_due(self, last_run_at: datetime) -> schedstate:
        now = time.time()
        if now < self.phase:
            return schedstate(False, self.phase - now)
        instant = self.phase + math.floor(now - self.phase)
        return schedstate(last_run_at.timestamp() < instant, instant + 1 - now)

    def __reduce__(self) -> tuple[Any, ...]:
        return self.__class__, (self.phase,)


_entries = int(os.environ.get("BENCH_BEAT_ENTRIES", "0"))
_interval = float(os.environ.get("BENCH_BEAT_INTERVAL", "1"))
_at = os.environ.get("BENCH_BEAT_AT")
app.conf.beat_schedule = {
    f"entry-{i:07d}": {
        "task": "bench.noop",
        "schedule": OnceAt(int(_at) / 1000) if _at else _interval,
    }
    for i in range(_entries)
}
if os.environ.get("BENCH_BEAT_RATE"):
    _rate = int(os.environ["BENCH_BEAT_RATE"])
    _first = int(os.environ["BENCH_BEAT_FIRST"])
    app.conf.beat_schedule = {
        f"entry-{i:07d}": {
            "task": "bench.noop",
            "schedule": EverySecond((_first + i * 1000 // _rate) / 1000),
            "kwargs": {"phase_ms": _first + i * 1000 // _rate},
        }
        for i in range(_rate)
    }

_recorder = None
# One client per process, made once: two threads of a threads-pool worker that each made one
# left the first unreferenced, and its connections were closed under the thread using it (the
# task failed with "I/O operation on closed file", its run unrecorded, and the drain waited).
_recorder_lock = threading.Lock()


@app.task(name="bench.noop", bind=True)
def noop(self, phase_ms: int | None = None) -> None:  # type: ignore[no-untyped-def]
    global _recorder
    url = os.environ.get("BENCH_RECORD_URL")
    if not url:
        return
    recorder = _recorder
    if recorder is None:
        import redis

        with _recorder_lock:
            if _recorder is None:
                _recorder = redis.Redis.from_url(url)
            recorder = _recorder
    pipe = recorder.pipeline(transaction=False)
    pipe.sadd("bench:ran", self.request.id)
    pipe.incr("bench:runs")
    if os.environ.get("BENCH_TIMES"):
        import celery_quartz

        context = celery_quartz.current_context()
        if phase_ms is not None:
            # A stock entry due every second at its phase: against the last such instant (a
            # start over a second late would read as early as the next; the scenario counts
            # the starts per instant, so a beat that falls behind shows as missed ones).
            now_ms = time.time_ns() // 1_000_000
            scheduled_ms = phase_ms + (now_ms - phase_ms) // 1000 * 1000
            pipe.rpush("bench:late", f"{scheduled_ms}:{now_ms - scheduled_ms}")
        elif context is not None:
            # Start lateness: this start against the occurrence's scheduled fire time.
            scheduled_ms = int(context.scheduled_fire_time.timestamp() * 1000)
            fired_ms = int(context.fire_time.timestamp() * 1000)
            late = time.time_ns() // 1_000_000 - scheduled_ms
            pipe.rpush("bench:late", f"{scheduled_ms}:{late}")
            pipe.hset("bench:fired", self.request.id, fired_ms)
    pipe.execute()


if os.environ.get("BENCH_HOOKS"):
    import celery_quartz

    celery_quartz.install(app)

    if os.environ.get("BENCH_TIMES"):
        from celery.signals import task_postrun

        @task_postrun.connect(weak=False)
        def _completed(task_id: str | None = None, **_: object) -> None:
            # Connected after install's own handler: the completion is recorded by now.
            if _recorder is not None and task_id is not None:
                _recorder.hset("bench:completed", task_id, time.time_ns() // 1_000_000)
