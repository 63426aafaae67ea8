"""celery-quartz with clustering off, under the built-in PostgreSQL election.

Every replica runs the same command, ``celery -A proj beat -S celery_quartz.Scheduler``. One of
them holds a PostgreSQL advisory lock on the store's database and schedules; the others are built
and wait (CREATED, no check-in) until the lock is free, then take over. QUARTZ_STORE_URL must name
a PostgreSQL database. The broker is Celery's filesystem transport under var/ (no server), or
BROKER_URL=redis://…
"""

import os
from pathlib import Path

from celery import Celery

import celery_quartz
from celery_quartz import filesystem_broker

here = Path(os.environ.get("ELECTION_DIR", Path.cwd()))
(here / "var").mkdir(parents=True, exist_ok=True)
broker = os.environ.get("BROKER_URL", "filesystem://")
store_url = os.environ.get("QUARTZ_STORE_URL", "")
if not store_url.startswith("postgresql"):
    raise RuntimeError(
        f"QUARTZ_STORE_URL must name a PostgreSQL database (the election is an advisory lock "
        f"on it), got {store_url!r}"
    )

app = Celery("election", broker=broker, include=["proj.tasks"])
if broker.startswith("filesystem"):
    # Messages as files under var/broker, each written whole before a worker can take it.
    filesystem_broker.configure(app, here / "var" / "broker")
app.conf.quartz_store_url = store_url
app.conf.quartz_clustered = False
app.conf.quartz_election = "postgresql"
# The same fixed id on every replica: it names the leader, of which there is one, so a new leader
# publishes what the previous one fired but did not record as published (docs/leadership.md).
app.conf.quartz_instance_id = "election-leader"
# A leader stopping on purpose waits for its firings before the election lets go of the lock.
app.conf.quartz_shutdown_wait_for_jobs = True
app.conf.beat_schedule = {"tick": {"task": "proj.tasks.tick", "schedule": 1.0}}

celery_quartz.install(app)
