"""A minimal celery-quartz project: two beat_schedule entries and one job scheduled from code.

Runs on the embedded default (an SQLite store, Celery's filesystem broker) with no servers; set
BROKER_URL and QUARTZ_STORE_URL to use Redis and PostgreSQL instead.
"""

import os
from pathlib import Path

from celery import Celery
from celery.schedules import crontab

import celery_quartz

here = Path(os.environ.get("QUICKSTART_DIR", Path.cwd()))
broker = os.environ.get("BROKER_URL", "filesystem://")

app = Celery("proj", broker=broker, include=["proj.tasks"])
if broker.startswith("filesystem"):
    queue_dir = here / "var" / "broker"
    (queue_dir / "processed").mkdir(parents=True, exist_ok=True)
    app.conf.broker_transport_options = {
        "data_folder_in": str(queue_dir),
        "data_folder_out": str(queue_dir),
        "processed_folder": str(queue_dir / "processed"),
        "polling_interval": 0.1,
    }
app.conf.quartz_store_url = os.environ.get(
    "QUARTZ_STORE_URL", f"sqlite:///{here / 'var' / 'quartz.db'}"
)
app.conf.beat_schedule = {
    "refresh-cache": {"task": "proj.tasks.refresh", "schedule": 2.0},
    "nightly": {"task": "proj.tasks.nightly", "schedule": crontab(hour=2, minute=0)},
}
# For the demo: notice a dead scheduler within about 4 s instead of 15.
app.conf.quartz_checkin_interval = float(os.environ.get("QUARTZ_CHECKIN_INTERVAL", 7.5))
app.conf.quartz_checkin_misfire_threshold = float(os.environ.get("QUARTZ_CHECKIN_THRESHOLD", 7.5))

celery_quartz.install(app)
