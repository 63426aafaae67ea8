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


def audit_rows(store: SqlStore, **where: Any) -> list[dict[str, Any]]:
    """The audit rows of ``store``'s scheduler name, oldest first, by a plain SELECT (the
    columns as stored; ``changes`` decoded): every row, or those whose columns equal
    ``where``'s values (``action="pause_trigger"``)."""
    import json

    from sqlalchemy import select

    a = store.tables.audit
    query = select(a).where(
        a.c.sched_name == store.scheduler_name, *(a.c[k] == v for k, v in where.items())
    )
    with store.transaction() as conn:
        rows = conn.execute(query.order_by(a.c.audit_id)).all()
    return [
        {**row._asdict(), "changes": None if row.changes is None else json.loads(row.changes)}
        for row in rows
    ]
