"""The Celery project being migrated off django-celery-beat: its tasks stay as they are, and
celery-quartz replaces the scheduler.

Runs on the embedded default (an SQLite store, Celery's filesystem broker) under ./var, with no
servers; ``QUARTZ_STORE_URL`` and ``BROKER_URL`` choose PostgreSQL and Redis instead.
"""

import os
from pathlib import Path

from celery import Celery

import celery_quartz
from celery_quartz import filesystem_broker

here = Path(os.environ.get("MIGRATION_DIR", Path(__file__).resolve().parents[1]))
var = here / "var"
var.mkdir(parents=True, exist_ok=True)
broker = os.environ.get("BROKER_URL", "filesystem://")

app = Celery("shop", broker=broker, include=["proj.tasks"])
if broker.startswith("filesystem"):
    # Messages as files under var/broker, each written whole before a worker can take it.
    filesystem_broker.configure(app, var / "broker")

# Before: app.conf.beat_scheduler = "django_celery_beat.schedulers:DatabaseScheduler"
app.conf.beat_scheduler = "celery_quartz.Scheduler"
app.conf.quartz_store_url = os.environ.get("QUARTZ_STORE_URL", f"sqlite:///{var / 'quartz.db'}")

celery_quartz.install(app)
