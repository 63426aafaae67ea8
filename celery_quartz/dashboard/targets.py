"""The schedulers the dashboard is attached to: every scheduler name in the tables, each with
its own store and :class:`~celery_quartz.Quartz` client. Nothing here starts a scheduler."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, replace

from celery import Celery

from celery_quartz.client import Quartz
from celery_quartz.clock import Clock, SystemClock
from celery_quartz.config import Settings
from celery_quartz.store import Store, discover_scheduler_names, open_store

logger = logging.getLogger(__name__)

#: Seconds between two discoveries of the scheduler names (a name asked for and not known
#: triggers one sooner, but not more often than every :data:`REDISCOVER_AT_MOST`).
REDISCOVER_AFTER = 30.0
REDISCOVER_AT_MOST = 5.0


@dataclass
class Target:
    """One scheduler name: its store (reads) and its client (every write)."""

    name: str
    store: Store
    client: Quartz


class Targets:
    """Discovers the scheduler names in the tables and opens one store per name, lazily."""

    def __init__(self, app: Celery, settings: Settings, clock: Clock | None = None) -> None:
        self.app = app
        self.settings = settings
        self.clock = clock or SystemClock()
        self._targets: dict[str, Target] = {}
        self._names: list[str] = []
        self._discovered_at = float("-inf")
        self._lock = threading.Lock()

    def names(self, *, refresh: bool = False) -> list[str]:
        """The scheduler names, from a discovery at most :data:`REDISCOVER_AFTER` old."""
        with self._lock:
            age = time.monotonic() - self._discovered_at
            if age > REDISCOVER_AFTER or (refresh and age > REDISCOVER_AT_MOST):
                try:
                    self._names = discover_scheduler_names(self.settings)
                except Exception:  # tables not created yet, database down: say so, keep going
                    logger.exception("dashboard: discovering the scheduler names failed")
                    self._names = self._names or [self.settings.scheduler_name]
                self._discovered_at = time.monotonic()
            return list(self._names)

    def get(self, name: str) -> Target | None:
        """The target named ``name``, or None when the tables hold no such scheduler."""
        if name not in self.names() and name not in self.names(refresh=True):
            return None
        with self._lock:
            target = self._targets.get(name)
            if target is None:
                settings = replace(self.settings, scheduler_name=name)
                store = open_store(settings, clock=self.clock)
                client = Quartz(self.app, clock=self.clock, store=store, settings=settings)
                target = self._targets[name] = Target(name, store, client)
            return target

    def close(self) -> None:
        with self._lock:
            for target in self._targets.values():
                target.store.dispose()
            self._targets.clear()
