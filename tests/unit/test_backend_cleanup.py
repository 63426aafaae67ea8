"""Stock beat's default entry, ``celery.backend_cleanup``, is stored by the ``beat_schedule``
import exactly when Celery's own beat would install it: ``result_expires`` set and a result
backend that does not expire results by itself (no result backend at all included)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import Celery

from celery_quartz.beat import Scheduler
from celery_quartz.keys import BEAT_SCHEDULE_GROUP
from celery_quartz.triggers import CronTrigger


@pytest.fixture
def beat_app(tmp_path: Path, app: Celery) -> Iterator[Celery]:
    app.conf.quartz_store_url = f"sqlite:///{tmp_path / 'quartz.db'}"
    app.conf.quartz_auto_start = False
    yield app


def _stored_entries(app: Celery) -> dict[str, object]:
    beat = Scheduler(app, lazy=False)
    try:
        assert beat.loop is not None
        store = beat.loop.store
        return {
            key.name: store.get_triggers_of_job(key) for key in store.job_keys(BEAT_SCHEDULE_GROUP)
        }
    finally:
        beat.close()


@pytest.mark.parametrize(
    ("backend", "expires", "installed"),
    [
        (None, 86400, True),  # no result backend: Celery's disabled backend, which cannot expire
        ("db+sqlite://", 86400, True),  # the database backend needs cleaning up
        ("redis://127.0.0.1:1/0", 86400, False),  # Redis expires results itself
        ("rpc://", 86400, False),
        (None, None, False),  # results never expire: nothing to clean up
    ],
)
def test_backend_cleanup_is_stored_when_stock_beat_would_install_it(
    beat_app: Celery, backend: str | None, expires: int | None, installed: bool
) -> None:
    if backend is not None:
        beat_app.conf.result_backend = backend
    beat_app.conf.result_expires = expires
    entries = _stored_entries(beat_app)
    assert ("celery.backend_cleanup" in entries) is installed
    if installed:
        [trigger] = entries["celery.backend_cleanup"]  # type: ignore[misc]
        assert isinstance(trigger, CronTrigger)
        assert trigger.expression == "0 0 4 * * ?"  # stock beat's crontab('0', '4', '*')


def test_a_users_own_backend_cleanup_entry_wins_over_stock_beats(beat_app: Celery) -> None:
    beat_app.conf.beat_schedule = {
        "celery.backend_cleanup": {"task": "celery.backend_cleanup", "schedule": 3600.0}
    }
    [trigger] = _stored_entries(beat_app)["celery.backend_cleanup"]  # type: ignore[misc]
    assert not isinstance(trigger, CronTrigger)
