"""Editing a trigger in place through the CLI (``edit trigger``) and the HTTP API (``POST
…/triggers/{group}/{name}/edit``) on PostgreSQL (docs/steering.md#editing-in-place): each
editable detail changes the stored row as asked and nothing else, the next fire time is
recomputed where the schedule or the calendar changed, and the audit records the edit as a diff
of exactly that detail. A dry run writes nothing; a bad value is refused naming the detail,
writing nothing. (A firing in flight during an edit: test_edit_in_flight.py.)"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from celery import Celery
from click.testing import CliRunner, Result
from sqlalchemy import select

from celery_quartz import Job, JobKey, Quartz, SimpleTrigger, TriggerKey
from celery_quartz.affinity import PreferredNode
from celery_quartz.audit import os_user
from celery_quartz.calendars import WeeklyCalendar
from celery_quartz.cli import quartz
from celery_quartz.clock import from_millis
from celery_quartz.dashboard import create_app
from celery_quartz.store import SqlStore
from celery_quartz.triggers import CronTrigger, RecurrenceTrigger
from tests.stores import audit_rows, store_at

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

SCHEDULER = "edits"
API = f"/api/v1/schedulers/{SCHEDULER}"
TOKEN = "token-admin"
PRINCIPAL = "ops-admin"
GROUP = "reports"
#: The past instant the simple and recurrence triggers count from: a Friday, 09:15 UTC.
ANCHOR = datetime(2026, 1, 2, 9, 15, tzinfo=timezone.utc)
#: A calendar that excludes the weekday of the cron triggers' next fire time (see ``edits``).
QUIET = "quiet"


@dataclass(frozen=True)
class Edits:
    app: Celery
    store: SqlStore
    client: Quartz
    api: TestClient
    #: The weekday (Monday 0) the ``quiet`` calendar excludes.
    quiet_weekday: int


def _next_at(
    hour: int, minute: int, zone: str = "UTC", skip: frozenset[int] = frozenset()
) -> Callable[[datetime], datetime]:
    """The first ``hour:minute`` on ``zone``'s wall clock at or after a time, on a weekday
    (Monday 0) not in ``skip``, in UTC: computed without the trigger's code."""

    def first(now: datetime) -> datetime:
        local = now.astimezone(ZoneInfo(zone))
        candidate = local.replace(hour=hour, minute=minute, second=0, microsecond=0)
        while candidate < local or candidate.weekday() in skip:
            candidate += timedelta(days=1)
        return candidate.astimezone(timezone.utc)

    return first


def _every(seconds: int) -> Callable[[datetime], datetime]:
    """The first of ``ANCHOR + k * seconds`` at or after a time."""

    def first(now: datetime) -> datetime:
        return ANCHOR + timedelta(
            seconds=seconds * math.ceil((now - ANCHOR) / timedelta(seconds=seconds))
        )

    return first


def _nightly(name: str, **details: Any) -> CronTrigger:
    return CronTrigger(key=TriggerKey(name, GROUP), expression="0 0 2 * * ?", **details)


@pytest.fixture
def edits(pg_url: str) -> Iterator[Edits]:
    """For each surface (``cli``, ``api``): a cron trigger ``<surface>-cron`` (02:00 UTC), a
    simple one ``<surface>-simple`` (hourly from ``ANCHOR``) and a recurrence one
    ``<surface>-rrule`` (daily from ``ANCHOR``), of one durable job; and the ``quiet``
    calendar."""
    app = Celery("edits", set_as_current=False)
    app.conf.quartz_store_url = pg_url
    app.conf.quartz_scheduler_name = SCHEDULER
    app.conf.quartz_dashboard_tokens = {TOKEN: PRINCIPAL}

    def report() -> None: ...

    app.task(name="tasks.report", shared=False)(report)
    store = store_at(pg_url, SCHEDULER)
    store.create_tables()
    client = Quartz(app, store=store)
    quiet_weekday = _next_at(2, 0)(datetime.now(timezone.utc)).weekday()
    # Quartz numbers the days 1 (Sunday) to 7 (Saturday).
    client.add_calendar(QUIET, WeeklyCalendar(excluded_days={(quiet_weekday + 1) % 7 + 1}))
    triggers = []
    for surface in ("cli", "api"):
        triggers += [
            _nightly(f"{surface}-cron"),
            SimpleTrigger(
                key=TriggerKey(f"{surface}-simple", GROUP),
                start_at=ANCHOR,
                repeat_interval=timedelta(hours=1),
                repeat_count=-1,
            ),
            RecurrenceTrigger(
                key=TriggerKey(f"{surface}-rrule", GROUP), rule="FREQ=DAILY", start_at=ANCHOR
            ),
        ]
    client.schedule_jobs(
        [(Job(key=JobKey("report", GROUP), task="tasks.report", durable=True), triggers)]
    )
    with TestClient(create_app(app), headers={"Authorization": f"Bearer {TOKEN}"}) as api:
        yield Edits(app, store, client, api, quiet_weekday)
    store.dispose()
    app.close()


def _cli(app: Celery, *args: str) -> Result:
    return CliRunner().invoke(quartz, list(args), obj=SimpleNamespace(app=app))


def _rows(store: SqlStore) -> dict[str, dict[str, Any]]:
    """Every trigger row, by name, as stored."""
    t = store.tables.triggers
    with store.engine.connect() as conn:
        rows = conn.execute(select(t).where(t.c.sched_name == SCHEDULER)).all()
    return {row.trigger_name: dict(row._mapping) for row in rows}


def _edits_audited(store: SqlStore) -> list[dict[str, Any]]:
    return audit_rows(store, action="update_trigger")


# -- each detail through each surface ------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One editable detail: the trigger kind it is edited on, the CLI's arguments, the API's
    value, the row's columns that change, the audit's diff and, for a change of schedule or
    calendar, the next fire time at or after a given time (given the calendar's weekday)."""

    detail: str
    kind: str
    cli: tuple[str, ...]
    api: Any
    columns: frozenset[str]
    audit: dict[str, list[Any]]
    next_fire: Callable[[datetime, int], datetime] | None = None


DO_NOTHING = int(CronTrigger.MisfireInstruction.DO_NOTHING)
SMART_POLICY = int(CronTrigger.MisfireInstruction.SMART_POLICY)
SCHEDULE = frozenset({"detail", "next_fire_time"})

CASES = [
    Case(
        "cron",
        "cron",
        ("--cron", "0 30 4 * * ?"),
        "0 30 4 * * ?",
        SCHEDULE,
        {"expression": ["0 0 2 * * ?", "0 30 4 * * ?"]},
        lambda now, _: _next_at(4, 30)(now),
    ),
    Case(
        "time_zone",
        "cron",
        ("--tz", "Asia/Tokyo"),
        "Asia/Tokyo",
        SCHEDULE,
        {"time_zone": ["UTC", "Asia/Tokyo"]},
        lambda now, _: _next_at(2, 0, "Asia/Tokyo")(now),
    ),
    Case(
        # The rule's times stay those of its start (09:15 UTC) in any zone.
        "time_zone",
        "rrule",
        ("--tz", "America/New_York"),
        "America/New_York",
        SCHEDULE,
        {"time_zone": ["UTC", "America/New_York"]},
        lambda now, _: _next_at(9, 15)(now),
    ),
    Case(
        "interval",
        "simple",
        ("--interval", "5400"),
        5400,
        SCHEDULE,
        {"repeat_interval_us": [3_600_000_000, 5_400_000_000]},
        lambda now, _: _every(5400)(now),
    ),
    Case(
        "rrule",
        "rrule",
        ("--rrule", "FREQ=WEEKLY;BYDAY=MO"),
        "FREQ=WEEKLY;BYDAY=MO",
        SCHEDULE,
        {"rule": ["FREQ=DAILY", "FREQ=WEEKLY;BYDAY=MO"]},
        lambda now, _: _next_at(9, 15, skip=frozenset({1, 2, 3, 4, 5, 6}))(now),
    ),
    Case("priority", "cron", ("--priority", "8"), 8, frozenset({"priority"}), {"priority": [5, 8]}),
    Case(
        # By name on the CLI, by number through the API.
        "misfire_instruction",
        "cron",
        ("--misfire-instruction", "DO_NOTHING"),
        DO_NOTHING,
        frozenset({"misfire_instr"}),
        {"misfire_instruction": [SMART_POLICY, DO_NOTHING]},
    ),
    Case(
        "overlap_policy",
        "cron",
        ("--overlap-policy", "skip"),
        "skip",
        frozenset({"overlap_policy"}),
        {"overlap_policy": ["allow", "skip"]},
    ),
    Case(
        "preferred_node",
        "cron",
        ("--pin", "worker1@host"),
        "worker1@host",
        frozenset({"preferred_node"}),
        {"preferred_node": [None, "worker1@host"]},
    ),
    Case(
        "preferred_node",
        "cron",
        ("--pin", "*"),
        "*",
        frozenset({"preferred_node_auto"}),
        {"preferred_node_auto": [False, True]},
    ),
    Case(
        "execution_group",
        "cron",
        ("--execution-group", "exports"),
        "exports",
        frozenset({"execution_group"}),
        {"execution_group": [None, "exports"]},
    ),
    Case(
        "calendar",
        "cron",
        ("--calendar", QUIET),
        QUIET,
        frozenset({"calendar_name", "next_fire_time"}),
        {"calendar": [None, QUIET]},
        lambda now, quiet: _next_at(2, 0, skip=frozenset({quiet}))(now),
    ),
    Case(
        "description",
        "cron",
        ("--description", "after the ETL"),
        "after the ETL",
        frozenset({"description"}),
        {"description": [None, "after the ETL"]},
    ),
]
CASE_IDS = [
    "pin-automatic"
    if case.api == "*"
    else f"{case.kind}-zone"
    if case.detail == "time_zone"
    else case.detail.replace("_", "-")
    for case in CASES
]


def _edit(
    edits: Edits, surface: str, name: str, cli: tuple[str, ...], body: dict[str, Any]
) -> None:
    """Edit trigger ``name`` through ``surface``, which must accept it."""
    if surface == "cli":
        done = _cli(edits.app, "edit", "trigger", name, "-g", GROUP, *cli)
        assert done.exit_code == 0, done.output
        assert done.output.startswith(f"trigger {GROUP}.{name}: changed "), done.output
    else:
        answer = edits.api.post(f"{API}/triggers/{GROUP}/{name}/edit", json=body)
        assert answer.status_code == 200, answer.text
        assert answer.json()["dry_run"] is False


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_each_detail_is_edited_recomputing_the_next_fire_time_and_audited_as_its_diff(
    edits: Edits, case: Case
) -> None:
    for surface in ("cli", "api"):
        name = f"{surface}-{case.kind}"
        before = _rows(edits.store)
        audited = len(_edits_audited(edits.store))
        since = datetime.now(timezone.utc)
        _edit(edits, surface, name, case.cli, {case.detail: case.api})
        until = datetime.now(timezone.utc)
        after = _rows(edits.store)
        # Only the edited trigger's row changed, and in it only the detail's columns.
        assert {n for n in after if after[n] != before[n]} == {name}, surface
        changed = {c for c in after[name] if after[name][c] != before[name][c]}
        assert changed == case.columns, surface
        if case.next_fire is not None:
            # As Quartz's reschedule: the first fire time at or after the moment of the edit.
            assert from_millis(after[name]["next_fire_time"]) in {
                case.next_fire(since, edits.quiet_weekday),
                case.next_fire(until, edits.quiet_weekday),
            }, surface
        # The audit: one row, as the surface's principal, whose diff is exactly the detail.
        [row] = _edits_audited(edits.store)[audited:]
        principal = os_user() if surface == "cli" else PRINCIPAL
        assert (row["target_kind"], row["target"]) == ("trigger", f"{GROUP}.{name}")
        assert (row["principal"], row["via"]) == (principal, surface)
        assert row["changes"] == case.audit, surface


def test_clearing_the_pin_execution_group_calendar_and_description(edits: Edits) -> None:
    """``''`` on the CLI and ``null`` through the API clear a detail; clearing the calendar
    recomputes the next fire time without it."""
    details = ("preferred_node", "execution_group", "calendar", "description")
    cli = ("--pin", "", "--execution-group", "", "--calendar", "", "--description", "")
    for surface in ("cli", "api"):
        name = f"{surface}-dressed"
        edits.client.schedule_trigger(
            _nightly(
                name,
                job_key=JobKey("report", GROUP),
                preferred_node=PreferredNode.for_node("worker1@host"),
                execution_group="exports",
                calendar_name=QUIET,
                description="after the ETL",
            )
        )
        before = _rows(edits.store)[name]
        assert from_millis(before["next_fire_time"]).weekday() != edits.quiet_weekday
        audited = len(_edits_audited(edits.store))
        since = datetime.now(timezone.utc)
        _edit(edits, surface, name, cli, dict.fromkeys(details))
        until = datetime.now(timezone.utc)
        after = _rows(edits.store)[name]
        assert {c for c in after if after[c] != before[c]} == {
            "preferred_node",
            "execution_group",
            "calendar_name",
            "description",
            "next_fire_time",
        }, surface
        cleared = ("preferred_node", "execution_group", "calendar_name", "description")
        assert [after[c] for c in cleared] == [None] * 4, surface
        assert from_millis(after["next_fire_time"]) in {
            _next_at(2, 0)(since),
            _next_at(2, 0)(until),
        }, surface
        [row] = _edits_audited(edits.store)[audited:]
        assert row["changes"] == {
            "preferred_node": ["worker1@host", None],
            "execution_group": ["exports", None],
            "calendar": [QUIET, None],
            "description": ["after the ETL", None],
        }, surface


def test_a_schedule_or_calendar_given_as_it_is_moves_nothing(edits: Edits) -> None:
    """The simple and recurrence triggers' next fire time is still ``ANCHOR``, in the past (no
    scheduler ran): an occurrence owed, which the misfire instruction decides. Giving their
    schedule and calendar as they are changes nothing, so it is not dropped."""
    before = _rows(edits.store)
    assert from_millis(before["cli-simple"]["next_fire_time"]) == ANCHOR
    same = ("edit", "trigger", "cli-simple", "-g", GROUP, "--interval", "3600", "--calendar", "")
    done = _cli(edits.app, *same)
    assert done.output == f"trigger {GROUP}.cli-simple: changed 0 detail(s)\n"
    answer = edits.api.post(
        f"{API}/triggers/{GROUP}/api-rrule/edit",
        json={"rrule": "FREQ=DAILY", "time_zone": "UTC", "calendar": None},
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["changed"] == {}
    assert _rows(edits.store) == before
    assert _edits_audited(edits.store) == []


# -- a dry run --------------------------------------------------------------------------------


def test_a_dry_run_shows_the_edit_and_stores_and_audits_nothing(edits: Edits) -> None:
    before = _rows(edits.store)
    args = ("edit", "trigger", "cli-cron", "-g", GROUP, "--cron", "0 30 4 * * ?")
    shown = _cli(edits.app, *args, "--priority", "8", "--dry-run", "--json")
    assert shown.exit_code == 0, shown.output
    answer = json.loads(shown.output)
    assert answer["dry_run"] is True
    assert set(answer["changed"]) == {"schedule", "next_fire_time", "priority"}
    assert answer["changed"]["priority"] == [5, 8]
    plain = _cli(edits.app, *args[:5], "--priority", "8", "--dry-run")
    assert plain.output.splitlines() == [
        f"trigger {GROUP}.cli-cron: would change 1 detail(s)",
        "  priority: 5 -> 8",
    ]
    answered = edits.api.post(
        f"{API}/triggers/{GROUP}/api-simple/edit",
        json={"interval": 5400, "description": "hourly and a half", "dry_run": True},
    )
    assert answered.status_code == 200, answered.text
    body = answered.json()
    assert body["dry_run"] is True
    assert body["trigger"]["schedule"]["repeat_interval_us"] == 5_400_000_000
    assert set(body["changed"]) == {"schedule", "next_fire_time", "description"}
    assert _rows(edits.store) == before
    assert _edits_audited(edits.store) == []


# -- bad values -------------------------------------------------------------------------------

#: A bad value on the CLI, the trigger it is given for, and the one line the CLI answers.
CLI_REFUSALS: list[tuple[str, tuple[str, ...], str]] = [
    (
        "cli-cron",
        ("--cron", "0 0 25 * * ?"),
        # The trigger named once, as scheduling names it.
        "error: trigger reports.cli-cron: cron expression '0 0 25 * * ?': hour field, "
        "token '25': 25 is outside 0-23",
    ),
    (
        "cli-cron",
        ("--tz", "Mars/Olympus"),
        "error: trigger reports.cli-cron: unknown time zone 'Mars/Olympus': give an IANA "
        "name such as 'Europe/Helsinki' or a Windows id such as 'FLE Standard Time'",
    ),
    (
        "cli-simple",
        ("--tz", "Asia/Tokyo"),
        "error: trigger reports.cli-simple: time_zone does not apply to a SIMPLE trigger",
    ),
    *(
        (
            "cli-simple",
            ("--interval", bad),
            "error: trigger reports.cli-simple: interval must be a positive number of seconds, "
            "at most 999999999 days",
        )
        for bad in ("0", "nan", "inf", "1e300")
    ),
    (
        "cli-simple",
        # A duration a datetime holds, but its next fire time is past the year 9999.
        ("--interval", "8e13"),
        "error: trigger reports.cli-simple: based on its edited schedule it will never fire again",
    ),
    (
        "cli-rrule",
        ("--rrule", "FREQ=SOMETIMES"),
        "error: trigger reports.cli-rrule: recurrence rule 'FREQ=SOMETIMES': FREQ must be "
        "one of ['DAILY', 'HOURLY', 'MINUTELY', 'MONTHLY', 'SECONDLY', 'WEEKLY', 'YEARLY']",
    ),
    (
        "cli-cron",
        ("--misfire-instruction", "NEVER"),
        "error: trigger reports.cli-cron: misfire_instruction 'NEVER' is not one of a CRON "
        "trigger's: IGNORE_MISFIRE_POLICY, SMART_POLICY, FIRE_ONCE_NOW, DO_NOTHING",
    ),
    (
        "cli-cron",
        ("--calendar", "missing"),
        "error: trigger reports.cli-cron: calendar 'missing' is not stored",
    ),
    (
        "cli-cron",
        # A good detail beside a bad one is not written either.
        ("--priority", "8", "--execution-group", " "),
        "error: trigger reports.cli-cron: execution_group must be None or a non-empty "
        "string of at most 200 characters, got ' '",
    ),
]


def test_a_bad_value_on_the_cli_is_one_line_naming_it_and_changes_nothing(edits: Edits) -> None:
    before = _rows(edits.store)
    for name, args, message in CLI_REFUSALS:
        refused = _cli(edits.app, "edit", "trigger", name, "-g", GROUP, *args)
        assert (refused.exit_code, refused.output.strip()) == (1, message)
    # Click's own check of an option's type.
    refused = _cli(edits.app, "edit", "trigger", "cli-cron", "-g", GROUP, "--priority", "high")
    assert refused.exit_code == 2
    assert "Invalid value for '--priority': 'high' is not a valid integer" in refused.output
    assert _rows(edits.store) == before
    assert _edits_audited(edits.store) == []


#: A bad body for the API, the trigger it is sent for, the field the 422 names and what its
#: message says after the field's name.
API_REFUSALS: list[tuple[str, dict[str, Any], str, str]] = [
    (
        "api-cron",
        {"cron": "0 0 25 * * ?"},
        "cron",
        "trigger reports.api-cron: cron expression '0 0 25 * * ?': hour field, token "
        "'25': 25 is outside 0-23",
    ),
    (
        "api-cron",
        {"priority": 8, "time_zone": "Mars/Olympus"},
        "time_zone",
        "trigger reports.api-cron: unknown time zone 'Mars/Olympus': give an IANA name such "
        "as 'Europe/Helsinki' or a Windows id such as 'FLE Standard Time'",
    ),
    (
        "api-rrule",
        {"rrule": "FREQ=SOMETIMES"},
        "rrule",
        "trigger reports.api-rrule: recurrence rule 'FREQ=SOMETIMES': FREQ must be one of "
        "['DAILY', 'HOURLY', 'MINUTELY', 'MONTHLY', 'SECONDLY', 'WEEKLY', 'YEARLY']",
    ),
    *(
        (
            "api-simple",
            {"interval": bad},
            "interval",
            "trigger reports.api-simple: interval must be a positive number of seconds, at "
            "most 999999999 days",
        )
        for bad in (-60, 1e300)
    ),
    (
        "api-simple",
        {"interval": 8e13},
        "interval",
        "trigger reports.api-simple: based on its edited schedule it will never fire again",
    ),
    (
        "api-cron",
        {"interval": 60},
        "interval",
        "trigger reports.api-cron: interval applies to a SIMPLE trigger, and this one is CRON",
    ),
    ("api-cron", {"preferred_node": 5}, "preferred_node", "must be str or null"),
    (
        "api-cron",
        {"execution_group": ""},
        "execution_group",
        "trigger reports.api-cron: execution_group must be None or a non-empty string of at "
        "most 200 characters, got ''",
    ),
    (
        "api-cron",
        {"calendar": "missing"},
        "calendar",
        "trigger reports.api-cron: calendar 'missing' is not stored",
    ),
    (
        "api-cron",
        {"description": "x" * 251},
        "description",
        "trigger reports.api-cron: description is 251 characters; at most 250",
    ),
]


def test_a_bad_value_through_the_api_is_a_422_naming_its_field_and_changes_nothing(
    edits: Edits,
) -> None:
    before = _rows(edits.store)
    for name, body, field, message in API_REFUSALS:
        answer = edits.api.post(f"{API}/triggers/{GROUP}/{name}/edit", json=body)
        assert answer.status_code == 422, (body, answer.text)
        assert answer.json()["error"] == {
            "code": "invalid",
            "field": field,
            "message": f"{field}: {message}",
        }
    assert _rows(edits.store) == before
    assert _edits_audited(edits.store) == []
