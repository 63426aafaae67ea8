"""A minimal celery-quartz project: three beat_schedule entries and one job scheduled from code.

Runs on the embedded default (an SQLite store, Celery's filesystem broker) with no servers. The
environment variables below choose Redis, PostgreSQL and a fixed instance id instead, as
docker-compose.yml does.
"""

import os
from pathlib import Path

from celery import Celery
from celery.schedules import crontab

import celery_quartz
from celery_quartz import filesystem_broker

here = Path(os.environ.get("QUICKSTART_DIR", Path.cwd()))
# The default store, the ledger and the filesystem broker live here, whatever the broker.
(here / "var").mkdir(parents=True, exist_ok=True)
broker = os.environ.get("BROKER_URL", "filesystem://")

app = Celery("proj", broker=broker, include=["proj.tasks"])
if broker.startswith("filesystem"):
    # Messages as files under var/broker, each written whole before a worker can take it.
    filesystem_broker.configure(app, here / "var" / "broker")
app.conf.quartz_store_url = os.environ.get(
    "QUARTZ_STORE_URL", f"sqlite:///{here / 'var' / 'quartz.db'}"
)
# Unique per scheduler process; AUTO generates one (host-pid-milliseconds).
app.conf.quartz_instance_id = os.environ.get("QUARTZ_INSTANCE_ID", "AUTO")
# Off where a one-shot `celery -A proj quartz schema upgrade` runs before the schedulers.
app.conf.quartz_schema_auto_upgrade = os.environ.get("QUARTZ_SCHEMA_AUTO_UPGRADE", "1") == "1"
app.conf.beat_schedule = {
    "refresh-cache": {"task": "proj.tasks.refresh", "schedule": 2.0},
    "nightly": {"task": "proj.tasks.nightly", "schedule": crontab(hour=2, minute=0)},
    "reindex": {
        "task": "proj.tasks.reindex",
        "schedule": 5.0,
        "quartz": {"execution_group": "reindex"},  # published to the Celery queue "reindex"
    },
}
# At most two reindex firings in flight per worker serving the queue "reindex".
app.conf.quartz_execution_limits = {"reindex": 2}
# For the demo: notice a dead scheduler within about 4 s instead of 15.
app.conf.quartz_checkin_interval = float(os.environ.get("QUARTZ_CHECKIN_INTERVAL", 7.5))
app.conf.quartz_checkin_misfire_threshold = float(os.environ.get("QUARTZ_CHECKIN_THRESHOLD", 7.5))

# Set by docker-compose.yml (docs/operations.md): beat's HTTP health endpoint (/healthz), and the
# dashboard's port, its one read-only token and the proxies it trusts. Unset: no health endpoint,
# and a dashboard that refuses every request.
if os.environ.get("QUARTZ_HEALTH_PORT"):
    app.conf.quartz_health_port = int(os.environ["QUARTZ_HEALTH_PORT"])
app.conf.quartz_dashboard_port = int(os.environ.get("QUARTZ_DASHBOARD_PORT", 5566))
if os.environ.get("QUARTZ_DASHBOARD_TOKEN"):
    token = os.environ["QUARTZ_DASHBOARD_TOKEN"]
    app.conf.quartz_dashboard_tokens = {token: {"principal": "ops", "write": False}}
app.conf.quartz_dashboard_forwarded_allow_ips = os.environ.get(
    "QUARTZ_DASHBOARD_FORWARDED_ALLOW_IPS", "127.0.0.1"
)

celery_quartz.install(app)
