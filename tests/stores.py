"""The store as a test opens one: through :func:`celery_quartz.store.open_store`, from settings,
the one way every process opens a store."""

from __future__ import annotations

from typing import Any

from celery_quartz.clock import Clock
from celery_quartz.config import Settings
from celery_quartz.store import SqlStore, open_store


def store_at(
    url: str, scheduler_name: str = "unit", *, clock: Clock | None = None, **options: Any
) -> SqlStore:
    """The store of ``scheduler_name`` on ``url``, reading ``clock``, opened by ``open_store``
    with the other settings at their defaults; ``options`` are ``open_store``'s own
    (``pool_size``, ``pre_ping``, ``upgrade_schema``)."""
    return open_store(
        Settings(store_url=url, scheduler_name=scheduler_name), clock=clock, **options
    )
