"""``celery -A proj inspect quartz_health``: is this worker's hook installed and checking in?

Answered by each worker (a Celery remote-control command, registered by
``celery_quartz.install(app)``): a worker started without the hooks does not know the command,
and ``inspect`` shows it answering nothing (or an error) for it, which is the answer.
"""

from __future__ import annotations

import time
from typing import Any

from celery.worker.control import inspect_command

from celery_quartz.liveness import DEFAULT_CHECKIN_MISFIRE_THRESHOLD

_registered = False


def worker_health(app: Any, hostname: str | None = None) -> dict[str, Any]:
    """This worker's hook report: ``status`` is ``healthy`` when the hooks are installed and the
    last check-in is recent (its interval plus the check-in misfire threshold), ``unhealthy``
    otherwise."""
    installed = bool(getattr(app, "_celery_quartz_installed", False))
    step = getattr(app, "_celery_quartz_checkin", None)
    last = getattr(step, "last_checkin", None)
    interval = getattr(step, "interval", None) or 0.0
    threshold = app.conf.get("quartz_checkin_misfire_threshold")
    if threshold is None:
        threshold = DEFAULT_CHECKIN_MISFIRE_THRESHOLD
    age = None if last is None else time.time() - last
    checking_in = age is not None and age <= interval + threshold
    report: dict[str, Any] = {
        "status": "healthy" if installed and checking_in else "unhealthy",
        "hooks_installed": installed,
        "checking_in": checking_in,
        "last_checkin_age": None if age is None else round(age, 3),
        "checkin_interval": interval,
        "queues": list(getattr(step, "queues", []) or []),
    }
    if hostname:
        report["node"] = hostname
    return report


def register_health_command() -> None:
    """Register ``quartz_health`` with Celery's remote control (once per process)."""
    global _registered
    if _registered:
        return
    _registered = True

    @inspect_command()
    def quartz_health(state: Any, **kwargs: Any) -> dict[str, Any]:
        """celery-quartz: whether this worker's hooks are installed and checking in."""
        consumer = state.consumer
        return worker_health(consumer.app, getattr(consumer, "hostname", None))
