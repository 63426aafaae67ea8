"""The schedulers the dashboard is attached to: every scheduler name in the tables of each store
it reads, each with its own store and :class:`~celery_quartz.Quartz` client. Nothing here starts
a scheduler.

With ``quartz_dashboard_stores`` unset, the dashboard reads the app's store, and a scheduler is
addressed by its name. With it set, it reads every store named there (and only those), and a
scheduler is addressed as ``STORE:SCHEDULER``: two stores may each hold a scheduler of the same
name (docs/operations.md#past-one-database)."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field, replace

from celery import Celery

from celery_quartz.client import Quartz
from celery_quartz.clock import Clock, SystemClock
from celery_quartz.config import Settings
from celery_quartz.store import Store, discover_scheduler_names, open_store
from celery_quartz.store.engine import redact_url

logger = logging.getLogger(__name__)

#: Seconds between two discoveries of the scheduler names (a name asked for and not known
#: triggers one sooner, but not more often than every :data:`REDISCOVER_AT_MOST`).
REDISCOVER_AFTER = 30.0
REDISCOVER_AT_MOST = 5.0


@dataclass
class Target:
    """One scheduler name of one store: its store (reads) and its client (every write)."""

    #: How the dashboard, the API and the policy address it: the scheduler's name, or
    #: ``STORE:SCHEDULER`` when several stores are configured.
    name: str
    store: Store
    client: Quartz
    #: The store's name in ``quartz_dashboard_stores`` (None: the app's own store).
    store_name: str | None = None
    scheduler_name: str = ""


@dataclass
class _Source:
    """One store the dashboard reads: its settings, and its scheduler names at the last
    discovery (or why that discovery failed)."""

    name: str | None
    settings: Settings
    schedulers: list[str] = field(default_factory=list)
    error: str | None = None


def target_name(store_name: str | None, scheduler_name: str) -> str:
    """How the scheduler ``scheduler_name`` of the store ``store_name`` is addressed."""
    return scheduler_name if store_name is None else f"{store_name}:{scheduler_name}"


class Targets:
    """Discovers the scheduler names in the tables of each store and opens one store per
    scheduler, lazily. A store that cannot be read is reported (:meth:`unreachable`) and the
    others are served."""

    def __init__(self, app: Celery, settings: Settings, clock: Clock | None = None) -> None:
        self.app = app
        self.settings = settings
        self.clock = clock or SystemClock()
        stores = settings.stores()
        self.several = bool(stores)
        self._sources: dict[str | None, _Source] = (
            {name: _Source(name, store) for name, store in stores.items()}
            if stores
            else {None: _Source(None, settings)}
        )
        self._targets: dict[str, Target] = {}
        self._discovered_at = float("-inf")
        self._lock = threading.Lock()

    def names(self, *, refresh: bool = False) -> list[str]:
        """Every scheduler's address, store by store, from a discovery at most
        :data:`REDISCOVER_AFTER` old."""
        with self._lock:
            age = time.monotonic() - self._discovered_at
            if age > REDISCOVER_AFTER or (refresh and age > REDISCOVER_AT_MOST):
                for source in self._sources.values():
                    self._discover(source)
                self._discovered_at = time.monotonic()
            return [
                target_name(source.name, scheduler)
                for source in self._sources.values()
                for scheduler in source.schedulers
            ]

    def _discover(self, source: _Source) -> None:
        try:
            source.schedulers = discover_scheduler_names(
                source.settings, include_configured=source.name is None
            )
            source.error = None
        except Exception as exc:  # tables not created yet, database down: say so, keep going
            where = redact_url(source.settings.store_url)
            logger.exception("dashboard: discovering the scheduler names at %s failed", where)
            source.error = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
            if not source.schedulers and source.name is None:
                source.schedulers = [source.settings.scheduler_name]

    def unreachable(self) -> dict[str, str]:
        """The configured stores whose last discovery failed, with why (several stores only)."""
        with self._lock:
            return {
                source.name: source.error
                for source in self._sources.values()
                if source.name is not None and source.error is not None
            }

    def locate(self, name: str) -> tuple[str | None, str] | None:
        """(store name, scheduler name) of the address ``name``, or None when it names none."""
        if not self.several:
            return None, name
        store, colon, scheduler = name.partition(":")
        if not colon or store not in self._sources or not scheduler:
            return None
        return store, scheduler

    def get(self, name: str) -> Target | None:
        """The target addressed ``name``, or None when no store holds such a scheduler."""
        located = self.locate(name)
        if located is None:
            return None
        if name not in self.names() and name not in self.names(refresh=True):
            return None
        store_name, scheduler = located
        with self._lock:
            target = self._targets.get(name)
            if target is None:
                settings = replace(self._sources[store_name].settings, scheduler_name=scheduler)
                store = open_store(settings, clock=self.clock)
                client = Quartz(self.app, clock=self.clock, store=store, settings=settings)
                target = self._targets[name] = Target(
                    name, store, client, store_name=store_name, scheduler_name=scheduler
                )
            return target

    def close(self) -> None:
        with self._lock:
            for target in self._targets.values():
                target.store.dispose()
            self._targets.clear()
