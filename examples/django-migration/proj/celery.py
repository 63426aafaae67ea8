"""The Celery project being migrated off django-celery-beat: its tasks stay as they are, and
celery-quartz replaces the scheduler.

Runs on the embedded default (an SQLite store, Celery's filesystem broker) under ./var, with no
servers; ``QUARTZ_STORE_URL`` and ``BROKER_URL`` choose PostgreSQL and Redis instead.
"""

import os
from pathlib import Path

from celery import Celery

import celery_quartz

here = Path(os.environ.get("MIGRATION_DIR", Path(__file__).resolve().parents[1]))
var = here / "var"
var.mkdir(parents=True, exist_ok=True)
broker = os.environ.get("BROKER_URL", "filesystem://")

app = Celery("shop", broker=broker, include=["proj.tasks"])
if broker.startswith("filesystem"):
    # Kombu's filesystem transport, each message written whole before a worker can take it.
    app.conf.broker_transport = "celery_quartz.filesystem_broker:Transport"
    queue_dir = var / "broker"
    (queue_dir / "processed").mkdir(parents=True, exist_ok=True)
    app.conf.broker_transport_options = {
        "data_folder_in": str(queue_dir),
        "data_folder_out": str(queue_dir),
        "processed_folder": str(queue_dir / "processed"),
        "control_folder": str(queue_dir / "control"),
        "polling_interval": 0.1,
    }

# Before: app.conf.beat_scheduler = "django_celery_beat.schedulers:DatabaseScheduler"
app.conf.beat_scheduler = "celery_quartz.Scheduler"
app.conf.quartz_store_url = os.environ.get("QUARTZ_STORE_URL", f"sqlite:///{var / 'quartz.db'}")

celery_quartz.install(app)
