"""A trigger's overlap policy on the dashboard, in headless Chromium: shown on the trigger's page,
changed through its Edit form (docs/steering.md#overlap-policy)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from celery_quartz import TriggerKey
from celery_quartz.overlap import OverlapPolicy
from tests.integration.dashboard_helpers import serve
from tests.integration.test_dashboard_browser import _log_in, _schedule, browser

__all__ = ["browser"]  # the fixture, shared with the dashboard's browser tests


def test_the_edit_form_changes_a_triggers_overlap_policy(
    pg_url: str, tmp_path: Path, browser: Any
) -> None:
    quartz = _schedule(pg_url)
    key = TriggerKey("nightly", "reports")
    with serve(pg_url) as base:
        page = browser.new_page()
        _log_in(page, base)
        page.goto(f"{base}/s/ledger_app/triggers/reports/nightly")
        assert page.inner_text("#overlap-policy") == "allow"
        page.click("#edit summary")
        page.select_option("#edit-overlap-policy", "buffer_one")
        page.click("#action-edit")
        page.wait_for_selector("#flash")
        assert page.inner_text("#overlap-policy") == "buffer_one"
        page.screenshot(path=str(tmp_path / "overlap.png"), full_page=True)
    stored = quartz.get_trigger(key)
    assert stored is not None and stored.overlap_policy is OverlapPolicy.BUFFER_ONE
