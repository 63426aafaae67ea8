"""Loads the Celery app once per environment given on stdin and prints what each one configures.

    echo '[{"name": "beat-1", "env": {...}}]' | python -m tests.deploy.probe_app

Run in its own process by test_compose: every environment imports the project afresh, and
``Settings.from_app`` validates the ``quartz_*`` settings as a scheduler would at start.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from typing import Any


def probe(env: dict[str, str], module: str) -> dict[str, Any]:
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        for name in [m for m in sys.modules if m == "proj" or m.startswith("proj.")]:
            del sys.modules[name]
        app = importlib.import_module(module).app
        app.loader.import_default_modules()

        from celery_quartz.config import Settings

        settings = Settings.from_app(app)
        groups = {
            (entry.get("quartz") or {}).get("execution_group")
            for entry in (app.conf.beat_schedule or {}).values()
        } - {None, ""}
        return {
            "instance_id": settings.instance_id,
            "scheduler_name": settings.scheduler_name,
            "store_url": settings.store_url,
            "clustered": settings.clustered,
            "schema_auto_upgrade": settings.schema_auto_upgrade,
            "broker_url": app.conf.broker_url,
            "default_queue": app.conf.task_default_queue or "celery",
            "group_queues": {group: settings.limits.queue_for(group) for group in sorted(groups)},
            "tasks": sorted(app.tasks),
            "health_port": settings.health_port,
            "health_address": settings.health_address,
            "dashboard_port": settings.dashboard_port,
            "dashboard_read_only": settings.dashboard_read_only,
            "dashboard_forwarded_allow_ips": settings.dashboard_forwarded_allow_ips,
            # What each token may do, never the token itself.
            "dashboard_token_writes": [
                spec.get("write", True) if isinstance(spec, dict) else True
                for spec in (settings.dashboard_tokens or {}).values()
            ],
        }
    finally:
        os.environ.clear()
        os.environ.update(saved)


def main() -> None:
    requests = json.load(sys.stdin)
    module = sys.argv[1] if len(sys.argv) > 1 else "proj.celery"
    json.dump({r["name"]: probe(r["env"], module) for r in requests}, sys.stdout)


if __name__ == "__main__":
    main()
