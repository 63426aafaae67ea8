"""The dashboard in a real browser (Debian's headless Chromium, driven by Playwright): the
overview loads, a trigger is paused through its page and shows PAUSED, and read-only mode shows
no action and refuses a form's POST. Screenshots land in the test's tmp_path (and, with
``CQ_DOCS_SCREENSHOT=path``, the overview is also saved there, as docs/dashboard.png was)."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from celery_quartz import Job, JobKey, Quartz, SimpleTrigger, TriggerKey
from celery_quartz.affinity import PreferredNode
from celery_quartz.calendars import WeeklyCalendar
from celery_quartz.store import TriggerState
from celery_quartz.store.views import AuditFilter
from celery_quartz.triggers import CronTrigger, RecurrenceTrigger
from celery_quartz.triggers.cron import CronMisfireInstruction
from tests.integration import ledger_app
from tests.integration.dashboard_helpers import ADMIN, serve
from tests.integration.processes import processes, wait_for
from tests.services import ServiceBinaryNotFound, find_chromium

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    """A fresh headless Chromium context (the system binary; nothing is downloaded)."""
    try:
        executable = find_chromium()
    except ServiceBinaryNotFound as missing:
        pytest.skip(str(missing))  # a failure under CQ_REQUIRE_SERVICES=1 (tests/conftest.py)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),
            executable_path=str(executable),
            args=CHROMIUM_ARGS,
            headless=True,
            viewport={"width": 1280, "height": 900},
        )
        try:
            yield context
        finally:
            context.close()


def _schedule(url: str) -> Quartz:
    store = ledger_app.prepared_store(url)
    quartz = Quartz(ledger_app.app, store=store)
    now = datetime.now(timezone.utc)
    quartz.schedule_jobs(
        [
            (
                Job(
                    key=JobKey("nightly-report", "reports"),
                    task="ledger.noop",
                    durable=True,
                    data={"recipient": "ops@example.com", "smtp_password": "hunter2"},
                ),
                [
                    CronTrigger(
                        key=TriggerKey("nightly", "reports"),
                        expression="0 0 2 * * ?",
                        time_zone="Europe/Helsinki",
                    )
                ],
            ),
            (
                Job(key=JobKey("heartbeat", "ops"), task="ledger.noop"),
                [
                    SimpleTrigger(
                        key=TriggerKey("every-2s", "ops"),
                        start_at=now,
                        repeat_count=-1,
                        repeat_interval=timedelta(seconds=2),
                        execution_group="reindex",
                    )
                ],
            ),
        ]
    )
    return quartz


def _submit(page: Any, button: str, done: str) -> None:
    """Click a form's ``button`` and wait for the page it redirects to, which says ``done``."""
    page.click(button)
    page.wait_for_url(re.compile(rf"\?done={re.escape(done)}$"))


def _log_in(page: Any, base: str) -> None:
    page.goto(f"{base}/login")
    page.fill("input[name=token]", ADMIN)
    page.click("#login")
    page.wait_for_url(f"{base}/s/ledger_app/")


def test_the_overview_loads_and_a_trigger_is_paused_through_its_page(
    pg_url: str, redis_url: str, tmp_path: Path, browser: Any
) -> None:
    quartz = _schedule(pg_url)
    env = ledger_app.environment(
        pg_url,
        redis_url,
        IDLE_WAIT="0.5",
        CHECKIN_INTERVAL="1",
        CHECKIN_THRESHOLD="1",
        EXECUTION_LIMITS='{"reindex": 1}',
    )
    with processes(tmp_path, env) as procs:
        procs.beat("beat1")
        procs.worker("w1", concurrency=2, queues="celery,reindex")
        wait_for(
            lambda: (
                (quartz.get_trigger(TriggerKey("every-2s", "ops")) or _NONE).times_triggered >= 2
            ),
            timeout=60,
            message="the heartbeat firing",
        )
        with serve(pg_url, execution_limits={"reindex": 1}) as base:
            page = browser.new_page()
            _log_in(page, base)
            page.wait_for_selector("text=What is owed and not happening")
            page.wait_for_selector("text=w1@")  # the worker's check-in, alive
            page.screenshot(path=str(tmp_path / "overview.png"), full_page=True)
            if os.environ.get("CQ_DOCS_SCREENSHOT"):
                page.screenshot(path=os.environ["CQ_DOCS_SCREENSHOT"], full_page=True)

            page.click("text=Triggers")
            page.click("text=reports.nightly")
            assert page.inner_text("#trigger-state") == TriggerState.WAITING
            assert "hunter2" not in page.content()
            page.click("#action-pause")
            page.wait_for_selector("#flash")
            assert page.inner_text("#trigger-state") == TriggerState.PAUSED
            assert page.locator("#action-resume").count() == 1
            page.screenshot(path=str(tmp_path / "paused.png"), full_page=True)

            page.set_viewport_size({"width": 390, "height": 844})  # a phone
            page.reload()
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= 390, f"the page is {width}px wide on a 390px screen"
            page.screenshot(path=str(tmp_path / "narrow.png"), full_page=True)
    assert quartz.get_trigger_state(TriggerKey("nightly", "reports")) == TriggerState.PAUSED


class _NONE:
    times_triggered = 0


def test_read_only_mode_shows_no_action_and_refuses_a_forms_post(
    pg_url: str, tmp_path: Path, browser: Any
) -> None:
    quartz = _schedule(pg_url)
    with serve(pg_url, dashboard_read_only=True) as base:
        page = browser.new_page()
        _log_in(page, base)
        page.goto(f"{base}/s/ledger_app/triggers/reports/nightly")
        assert page.locator("#read-only").count() == 1
        assert page.locator("#actions").count() == 0
        assert page.locator("button:has-text('Pause')").count() == 0
        page.screenshot(path=str(tmp_path / "read-only.png"), full_page=True)
        # The form the page would have had, posted by the page itself with its CSRF token.
        status = page.evaluate(
            """async () => {
                const token = document.querySelector("input[name=csrf_token]").value;
                const body = new URLSearchParams({csrf_token: token});
                const r = await fetch(location.pathname + "/pause", {method: "POST", body});
                return r.status;
            }"""
        )
        assert status == 403
    assert quartz.get_trigger_state(TriggerKey("nightly", "reports")) == TriggerState.WAITING


def test_a_browser_logs_in_to_a_prefixed_dashboard_after_fetching_favicon(
    pg_url: str, browser: Any
) -> None:
    _schedule(pg_url)
    with serve(pg_url, dashboard_url_prefix="/quartz") as base:
        page = browser.new_page()
        page.goto(f"{base}/quartz/login")
        # What Chromium does on its own for a page reached directly: ask the site's root for
        # its icon, with the same cookie jar.
        icon = browser.new_page()
        assert icon.goto(f"{base}/favicon.ico").status == 404
        icon.close()
        page.fill("input[name=token]", ADMIN)
        page.click("#login")
        page.wait_for_load_state()
        assert page.url == f"{base}/quartz/s/ledger_app/", page.inner_text("body")
        page.wait_for_selector("text=What is owed and not happening")


def test_a_page_runs_its_own_script_and_no_other(pg_url: str, browser: Any) -> None:
    quartz = _schedule(pg_url)
    with serve(pg_url) as base:
        page = browser.new_page()
        violations: list[str] = []
        page.on(
            "console", lambda m: violations.append(m.text) if "Content Security" in m.text else None
        )
        _log_in(page, base)
        page.goto(f"{base}/s/ledger_app/triggers/reports/nightly")
        # A script the page did not bring (injected as an attacker's markup would be) is blocked.
        with contextlib.suppress(Exception):
            page.add_script_tag(content="window.injected = true")
        assert page.evaluate("window.injected === undefined")
        assert violations, "the blocked script is reported as a CSP violation"
        # The page's own script (by its nonce) runs: deleting a job asks first.
        asked: list[str] = []

        def dismiss(dialog: Any) -> None:
            asked.append(dialog.message)
            dialog.dismiss()

        page.on("dialog", dismiss)
        page.click("#action-job-delete")
        wait_for(lambda: asked, timeout=10, message="the confirmation")
        assert asked == ["Delete job reports.nightly-report and all its triggers?"]
    assert quartz.get_job(JobKey("nightly-report", "reports")) is not None


def test_a_200_character_name_wraps_on_a_phone(pg_url: str, browser: Any) -> None:
    quartz = _schedule(pg_url)
    name, group = "n" * 200, "g" * 200
    quartz.schedule_job(
        Job(key=JobKey(name, group), task="ledger.noop", durable=True),
        CronTrigger(key=TriggerKey(name, group), expression="0 0 2 * * ?"),
    )
    with serve(pg_url) as base:
        page = browser.new_page()
        _log_in(page, base)
        page.set_viewport_size({"width": 390, "height": 844})
        page.goto(f"{base}/s/ledger_app/triggers/{group}/{name}")
        page.wait_for_selector("#trigger-state")
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, f"the page is {width}px wide on a 390px screen"


# -- the run history's pages (docs/history.md#pages) --------------------------------------------


def _history(store: Any) -> None:
    """A day of runs of three jobs, as the worker and the scheduler record them: successes of
    varied durations, failures, a retry, misfires and held occurrences; and a few audit rows."""
    import random

    from tests.history_rows import history_row, insert_audit, insert_history

    rng = random.Random(28)
    now = datetime.now(timezone.utc)
    rows = []
    for minutes in range(24 * 60, 0, -20):
        when = now - timedelta(minutes=minutes)
        for job, trigger, group, base in (
            ("nightly-report", "nightly", "reports", 4000),
            ("heartbeat", "every-2s", "ops", 300),
        ):
            roll = rng.random()
            result = (
                "failed"
                if roll < 0.06
                else "misfired"
                if roll < 0.09
                else "held"
                if roll < 0.11
                else "retried"
                if roll < 0.13
                else "succeeded"
            )
            extra: dict[str, Any] = {}
            if result == "failed":
                extra = {
                    "error_type": "TimeoutError",
                    "error_message": "the SMTP server did not answer",
                }
            rows.append(
                history_row(
                    when + timedelta(seconds=rng.randint(0, 600)),
                    result,
                    trigger=trigger,
                    trigger_group=group,
                    job=job,
                    job_group=group,
                    duration_ms=None
                    if result in ("misfired", "held")
                    else int(base * rng.lognormvariate(0, 0.5)),
                    lateness_ms=None if result in ("misfired", "held") else rng.randint(5, 400),
                    worker_name=None if result in ("misfired", "held") else "celery@w1",
                    args="[]" if job == "heartbeat" else None,
                    kwargs='{"period": "day"}' if job == "heartbeat" else None,
                    **extra,
                )
            )
    insert_history(store, *rows)
    for minutes, principal, via, action, target, changes in (
        (
            300,
            "admin",
            "dashboard",
            "pause_trigger",
            "reports.nightly",
            {"state": ["WAITING", "PAUSED"]},
        ),
        (
            240,
            "admin",
            "dashboard",
            "resume_trigger",
            "reports.nightly",
            {"state": ["PAUSED", "WAITING"]},
        ),
        (30, "alice", "cli", "store_job", "ops.heartbeat", {"kwargs": [{}, {"period": "day"}]}),
    ):
        insert_audit(
            store,
            now - timedelta(minutes=minutes),
            principal=principal,
            via=via,
            action=action,
            target_kind="trigger" if "trigger" in action else "job",
            target=target,
            changes=changes,
        )


def test_the_history_and_audit_pages_draw_their_chart_and_rows_in_a_browser(
    pg_url: str, tmp_path: Path, browser: Any
) -> None:
    quartz = _schedule(pg_url)
    _history(quartz.store)
    with serve(pg_url) as base:
        page = browser.new_page()
        _log_in(page, base)
        page.click("#nav-history")
        page.wait_for_selector("#history-chart svg")
        chart = page.locator("#history-chart svg")
        assert chart.is_visible()
        box = chart.bounding_box()
        assert box is not None and box["width"] > 300 and box["height"] > 150, box
        bars = page.locator("#history-chart svg rect.bar")
        assert bars.count() >= 24  # a bar per hour at least, more where results mix
        # The bars are drawn: the tallest has a height on the screen.
        heights = bars.evaluate_all("rs => rs.map(r => r.getBoundingClientRect().height)")
        assert max(heights) > 20, heights
        assert page.locator("#history-chart svg polyline").count() >= 2  # p50 and p95
        assert page.locator("tr.run-row").count() == 50  # the first page
        if os.environ.get("CQ_HISTORY_SCREENSHOT"):
            page.set_viewport_size({"width": 1280, "height": 1000})
            page.screenshot(path=os.environ["CQ_HISTORY_SCREENSHOT"], full_page=False)
        page.screenshot(path=str(tmp_path / "history.png"), full_page=True)
        page.set_viewport_size({"width": 390, "height": 844})  # a phone: the chart shrinks
        page.reload()
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, f"the page is {width}px wide on a 390px screen"
        assert page.locator("#history-chart svg").bounding_box()["width"] <= 390
        page.set_viewport_size({"width": 1280, "height": 900})

        # Filtered to the failures of one job: the chart is the job's, the rows its failures.
        page.fill("#history-filters input[name=job]", "nightly-report")
        page.fill("#history-filters input[name=group]", "reports")
        page.select_option("#history-filters select[name=result]", "failed")
        page.click("#history-filters button")
        page.wait_for_selector("text=Runs over time of job reports.nightly-report")
        results = page.locator("tr.run-row").evaluate_all("rs => rs.map(r => r.dataset.result)")
        assert results and set(results) == {"failed"}

        # A trigger's page: its recent runs and a small chart.
        page.goto(f"{base}/s/ledger_app/triggers/ops/every-2s")
        assert page.locator("#runs-chart svg rect.bar").count() > 0
        assert page.locator("#runs-chart svg").is_visible()
        assert page.locator("tr.run-row").count() == 15

        # Run again with the recorded arguments, after the confirmation.
        asked: list[str] = []

        def accept(dialog: Any) -> None:
            asked.append(dialog.message)
            dialog.accept()

        page.on("dialog", accept)
        page.locator("button.run-again").first.click()
        page.wait_for_selector("#flash")
        assert "the arguments recorded on the run" in page.inner_text("#flash")
        assert asked and "with the arguments recorded on this run" in asked[0]

        # The Audit page.
        page.click("#nav-audit")
        page.wait_for_selector("#audit-rows")
        assert page.locator("tr.audit-row").count() >= 3
        assert "pause_trigger" in page.inner_text("#audit-rows")
        page.fill("#audit-filters input[name=principal]", "alice")
        page.click("#audit-filters button")
        page.wait_for_load_state()
        principals = page.locator("tr.audit-row td:nth-child(2)").all_inner_texts()
        assert principals and set(principals) == {"alice"}
        page.screenshot(path=str(tmp_path / "audit.png"), full_page=True)
    manual = [
        t
        for t in quartz.get_triggers_of_job(JobKey("heartbeat", "ops"))
        if t.key.group == "MANUAL_TRIGGER"
    ]
    assert [t.data for t in manual] == [
        {"quartz.run_arguments": {"args": [], "kwargs": {"period": "day"}}}
    ]


def test_each_pause_form_keeps_its_reason_and_the_edit_form_changes_and_clears_details(
    pg_url: str, tmp_path: Path, browser: Any
) -> None:
    quartz = _schedule(pg_url)
    quartz.add_calendar("weekdays", WeeklyCalendar(description="no weekends"))
    key = TriggerKey("nightly", "reports")
    with serve(pg_url) as base:
        page = browser.new_page()
        _log_in(page, base)
        here = f"{base}/s/ledger_app/triggers/reports/nightly"

        # Each pause form of the trigger's page keeps its reason: the trigger's own, its job's
        # and its group's; the latest request's record is the one shown.
        for form, reason in (
            ("", "waiting for the vendor"),
            ("job-", "the job's vendor is down"),
            ("group-", "quarter close"),
        ):
            page.goto(here)
            page.fill(f"#pause-{form}reason", reason)
            kind = {"": "triggers", "job-": "jobs", "group-": "groups"}[form]
            _submit(page, f"#action-{form}pause", f"{kind}+pause")
            shown = page.inner_text("#pause-record")
            assert re.fullmatch(
                rf"Paused: {re.escape(reason)} \(by admin, \d{{4}}-\d\d-\d\d [\d:]{{8}} UTC\)",
                shown,
            ), shown
        assert page.inner_text("#trigger-state") == TriggerState.PAUSED
        assert page.locator("#action-group-resume").count() == 1
        page.goto(f"{base}/s/ledger_app/triggers?paused=true")
        row = page.inner_text("tr[data-key='reports.nightly'] .pause")
        assert row.startswith("Paused: quarter close (by admin, "), row

        # The Edit form: the schedule, priority, misfire instruction, pin, execution group,
        # calendar and description in one edit; then three of them cleared; then the pin
        # cleared through its own form (the same edit).
        page.goto(here)
        page.click("#edit summary")
        for field, value in (
            ("input[name=cron]", "0 30 4 * * ?"),
            ("input[name=priority]", "8"),
            ("input[name=misfire_instruction]", "DO_NOTHING"),
            ("#edit-preferred-node", "celery@reports-1"),
            ("#edit-execution-group", "nightly-batch"),
            ("#edit-calendar", "weekdays"),
            ("#edit-description", "after the ETL"),
        ):
            page.fill(f"#edit-form {field}", value)
        _submit(page, "#action-edit", "triggers+edit")
        page.screenshot(path=str(tmp_path / "edited.png"), full_page=True)
        page.goto(here)
        page.click("#edit summary")
        for name in ("execution-group", "calendar", "description"):
            page.check(f"#edit-clear-{name}")
        _submit(page, "#action-edit", "triggers+edit")
        page.goto(here)
        _submit(page, "#action-unpin", "triggers+edit")
        assert page.inner_text("#trigger-state") == TriggerState.PAUSED
    edited = quartz.get_trigger(key)
    assert isinstance(edited, CronTrigger)
    assert (edited.expression, edited.priority, edited.misfire_instruction) == (
        "0 30 4 * * ?",
        8,
        CronMisfireInstruction.DO_NOTHING,
    )
    assert edited.preferred_node is PreferredNode.NONE
    assert (edited.execution_group, edited.calendar_name, edited.description) == (None, None, None)
    view = quartz.store.trigger_view(key)
    assert view is not None and view.pause is not None
    assert (view.pause.reason, view.pause.requested_by) == ("quarter close", "admin")
    assert quartz.paused_group_records()["reports"].reason == "quarter close"
    audit = quartz.store.audit(AuditFilter(action="update_trigger", target=str(key))).items
    assert {(a.principal, a.via) for a in audit} == {("admin", "dashboard")}
    unpinned, cleared, first = (a.changes for a in audit)  # newest first
    assert first["expression"] == ["0 0 2 * * ?", "0 30 4 * * ?"]
    assert first["priority"] == [5, 8]
    assert first["misfire_instruction"][1] == CronMisfireInstruction.DO_NOTHING
    assert first["preferred_node"] == [None, "celery@reports-1"]
    assert first["execution_group"] == [None, "nightly-batch"]
    assert first["calendar"] == [None, "weekdays"]
    assert first["description"] == [None, "after the ETL"]
    assert cleared == {
        "execution_group": ["nightly-batch", None],
        "calendar": ["weekdays", None],
        "description": ["after the ETL", None],
    }
    assert unpinned == {"preferred_node": ["celery@reports-1", None]}


def _first_at(hour: int, minute: int, zone: str, now: datetime) -> datetime:
    """The first ``hour:minute`` on ``zone``'s wall clock at or after ``now``, in UTC: computed
    without the triggers' code."""
    local = now.astimezone(ZoneInfo(zone))
    first = local.replace(hour=hour, minute=minute, second=0, microsecond=0)
    if first < local:
        first += timedelta(days=1)
    return first.astimezone(timezone.utc)


def test_the_edit_form_changes_a_zone_an_interval_and_a_rule_moving_the_next_fire_time(
    pg_url: str, browser: Any
) -> None:
    quartz = _schedule(pg_url)
    # A daily rule at 06:00 UTC, started a week ago.
    week_ago = datetime.now(timezone.utc) - timedelta(days=7)
    quartz.schedule_job(
        Job(key=JobKey("digest", "reports"), task="ledger.noop", durable=True),
        RecurrenceTrigger(
            key=TriggerKey("digest", "reports"),
            rule="FREQ=DAILY;BYHOUR=6",
            start_at=week_ago.replace(hour=0, minute=0, second=0, microsecond=0),
        ),
    )
    cron, simple, rrule = (
        TriggerKey("nightly", "reports"),
        TriggerKey("every-2s", "ops"),
        TriggerKey("digest", "reports"),
    )
    started = quartz.get_trigger(simple)
    assert started is not None and started.start_at is not None
    start = started.start_at
    # Each edit's field, its value, and the first fire time of the new schedule at or after a
    # moment: the cron expression's 02:00 on Tokyo's clock; the simple trigger's start plus the
    # new hour (the edit comes seconds after it); the new rule's 18:30 UTC.
    cases: list[tuple[TriggerKey, str, str, Callable[[datetime], datetime]]] = [
        (cron, "time_zone", "Asia/Tokyo", lambda now: _first_at(2, 0, "Asia/Tokyo", now)),
        (simple, "interval", "3600", lambda _: start + timedelta(hours=1)),
        (
            rrule,
            "rrule",
            "FREQ=DAILY;BYHOUR=18;BYMINUTE=30",
            lambda now: _first_at(18, 30, "UTC", now),
        ),
    ]
    before = {key: quartz.get_trigger(key) for key, *_ in cases}
    moments: dict[TriggerKey, tuple[datetime, datetime]] = {}
    with serve(pg_url) as base:
        page = browser.new_page()
        _log_in(page, base)
        for key, field, value, _ in cases:
            page.goto(f"{base}/s/ledger_app/triggers/{key.group}/{key.name}")
            page.click("#edit summary")
            page.fill(f"#edit-form input[name={field}]", value)
            since = datetime.now(timezone.utc)
            _submit(page, "#action-edit", "triggers+edit")
            moments[key] = (since, datetime.now(timezone.utc))

    zoned, spaced, ruled = (quartz.get_trigger(key) for key in (cron, simple, rrule))
    assert isinstance(zoned, CronTrigger) and zoned.time_zone == "Asia/Tokyo"
    assert isinstance(spaced, SimpleTrigger) and spaced.repeat_interval == timedelta(hours=1)
    assert isinstance(ruled, RecurrenceTrigger)
    assert ruled.rule == "FREQ=DAILY;BYHOUR=18;BYMINUTE=30"
    for (key, _, _, first), new in zip(cases, (zoned, spaced, ruled), strict=True):
        old = before[key]
        assert old is not None and new is not None
        assert new.next_fire_time in {first(moment) for moment in moments[key]}, key
        assert new.next_fire_time != old.next_fire_time, key
    # One audit row each, the dashboard's, whose diff is exactly the edited detail.
    diffs = {
        "time_zone": ["Europe/Helsinki", "Asia/Tokyo"],
        "repeat_interval_us": [2_000_000, 3_600_000_000],
        "rule": ["FREQ=DAILY;BYHOUR=6", "FREQ=DAILY;BYHOUR=18;BYMINUTE=30"],
    }
    for key, (name, diff) in zip((cron, simple, rrule), diffs.items(), strict=True):
        [row] = quartz.store.audit(AuditFilter(action="update_trigger", target=str(key))).items
        assert (row.principal, row.via, row.changes) == ("admin", "dashboard", {name: diff}), key
