"""A small service on celery-quartz: nightly reports, a re-index one at a time cluster-wide, an
ingest pinned to the worker holding the files, and a flaky upstream call retried with backoff.

Runs on the embedded default (an SQLite store, Celery's filesystem broker under ./var) with no
servers; BROKER_URL and QUARTZ_STORE_URL choose Redis, RabbitMQ or PostgreSQL instead.
"""

import os
from pathlib import Path

from celery import Celery

import celery_quartz
from celery_quartz import filesystem_broker

here = Path(os.environ.get("SERVICE_DIR", Path.cwd()))
# The default store, the ledger and the filesystem broker live here, whatever the broker.
(here / "var").mkdir(parents=True, exist_ok=True)
broker = os.environ.get("BROKER_URL", "filesystem://")

app = Celery("service", broker=broker, include=["proj.tasks"])
if broker.startswith("filesystem"):
    # Messages as files under var/broker, each written whole before a worker can take it.
    filesystem_broker.configure(app, here / "var" / "broker")
app.conf.quartz_store_url = os.environ.get(
    "QUARTZ_STORE_URL", f"sqlite:///{here / 'var' / 'quartz.db'}"
)
# Unique per scheduler process: the demo names each after the machine it stands for.
app.conf.quartz_instance_id = os.environ.get("QUARTZ_INSTANCE_ID", "AUTO")
# No beat_schedule: the jobs come from quartz_jobs.xml and from code (demo.py, schedule_jobs).
app.conf.quartz_import_beat_schedule = False
# Every scheduler loads the file as it starts. The demo has loaded it already (as a deploy step
# running `celery -A proj quartz load quartz_jobs.xml` would): the load is idempotent, so the
# schedulers find it unchanged and write nothing.
app.conf.quartz_scheduling_files = [str(here / "quartz_jobs.xml")]

# Re-indexing takes the search cluster's full attention: one at a time across the whole cluster,
# however many workers consume the queue "reindex" (the group's queue, named after it).
app.conf.quartz_execution_limits = {"reindex": {"max_concurrent": 1, "scope": "cluster"}}

# Node affinity: a pinned firing is published to its worker's own queue (<node name>.dq2).
app.conf.worker_direct = True
# Workers reserve no more messages than they have processes (execution-groups.md).
app.conf.worker_prefetch_multiplier = 1

celery_quartz.install(app)
