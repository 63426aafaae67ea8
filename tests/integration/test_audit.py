"""An audit row for every write path, with its principal, on PostgreSQL with real processes:
the client, the CLI, the HTTP API and the dashboard's forms (a real dashboard server), a real
beat's ``beat_schedule`` sync and scheduling files. (The importers' rows are checked in
test_import_redbeat.py and test_import_django_celery_beat.py.)"""

from __future__ import annotations

import getpass
import json
from pathlib import Path

import httpx

from celery_quartz import Job, JobKey, Quartz, TriggerKey
from celery_quartz.audit import REDACTED
from celery_quartz.keys import BEAT_SCHEDULE_GROUP
from celery_quartz.triggers import CronTrigger
from tests.integration import ledger_app
from tests.integration.dashboard_helpers import ADMIN, API, G, client, csrf_of, serve, with_jobs
from tests.integration.processes import processes, wait_for
from tests.stores import audit_rows


def _who(rows: list[dict]) -> set[tuple[str, str]]:
    return {(r["principal"], r["via"]) for r in rows}


def test_a_client_write_is_audited_as_the_os_user_or_the_client_principal(pg_url: str) -> None:
    store = ledger_app.prepared_store(pg_url)
    try:
        Quartz(ledger_app.app, store=store).schedule_job(
            Job(key=JobKey("report", G), task="ledger.noop", kwargs={"password": "hunter2"}),
            CronTrigger(key=TriggerKey("hourly", G), expression="0 0 * * * ?"),
        )
        Quartz(ledger_app.app, store=store, principal="billing").pause_job(JobKey("report", G))
        rows = audit_rows(store)
    finally:
        store.dispose()
    assert [(r["action"], r["principal"], r["via"]) for r in rows] == [
        ("schedule_job", getpass.getuser(), "client"),
        ("schedule_trigger", getpass.getuser(), "client"),
        ("pause_job", "billing", "client"),
    ]
    assert rows[0]["changes"]["kwargs"] == [None, {"password": REDACTED}]


def test_a_cli_write_is_audited_as_the_os_user_through_the_cli(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    store, _ = with_jobs(pg_url)
    before = len(audit_rows(store))
    with processes(tmp_path, ledger_app.environment(pg_url, redis_url)) as procs:
        code, out = procs.command("cli", "quartz", "pause", "trigger", "hourly", "-g", G)
    assert code == 0, out
    rows = audit_rows(store)[before:]
    store.dispose()
    assert [(r["action"], r["target"], r["principal"], r["via"]) for r in rows] == [
        ("pause_trigger", f"{G}.hourly", getpass.getuser(), "cli")
    ]


def test_api_and_dashboard_form_writes_are_audited_as_the_token_s_principal(
    pg_url: str,
) -> None:
    store, _ = with_jobs(pg_url)
    before = len(audit_rows(store))
    with serve(pg_url) as base:
        api = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {ADMIN}"})
        answer = api.post(f"{API}/triggers/{G}/hourly/pause")
        assert answer.status_code == 200, answer.text
        pages = httpx.Client(base_url=base)
        login = pages.get("/login")
        pages.post("/login", data={"token": ADMIN, "csrf_token": csrf_of(login.text), "next": "/"})
        page = pages.get(f"/s/ledger_app/triggers/{G}/daily")
        done = pages.post(
            f"/s/ledger_app/triggers/{G}/daily/pause", data={"csrf_token": csrf_of(page.text)}
        )
        assert done.status_code in (200, 303), done.text
    rows = audit_rows(store)[before:]
    store.dispose()
    assert [(r["action"], r["target"], r["principal"], r["via"]) for r in rows] == [
        ("pause_trigger", f"{G}.hourly", "admin", "api"),
        ("pause_trigger", f"{G}.daily", "admin", "dashboard"),
    ]


def anyone_writes(principal: object, scheduler: str, action: str) -> bool:
    """A policy letting requests without a token write (for the test below)."""
    return True


def test_a_write_no_token_names_is_audited_as_anonymous(pg_url: str) -> None:
    store, _ = with_jobs(pg_url)
    before = len(audit_rows(store))
    api = client(pg_url, token=None, dashboard_authorization=f"{__name__}:anyone_writes")
    assert api.post(f"{API}/triggers/{G}/hourly/pause").status_code == 200
    rows = audit_rows(store)[before:]
    store.dispose()
    assert [(r["action"], r["principal"], r["via"]) for r in rows] == [
        ("pause_trigger", "anonymous", "api")
    ]


FILE = """\
<job-scheduling-data>
  <schedule>
    <job><name>recorder</name><group>files</group><job-type>ledger.noop</job-type></job>
    <trigger>
      <cron>
        <name>nightly</name>
        <group>files</group>
        <job-name>recorder</job-name>
        <job-group>files</job-group>
        <cron-expression>0 0 3 * * ?</cron-expression>
      </cron>
    </trigger>
  </schedule>
</job-scheduling-data>
"""


def test_a_beat_start_audits_its_beat_schedule_sync_and_its_scheduling_files(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    path = tmp_path / "quartz_jobs.xml"
    path.write_text(FILE)
    store = ledger_app.prepared_store(pg_url)
    env = ledger_app.environment(
        pg_url,
        redis_url,
        SCHEDULING_FILES=str(path),
        BEAT_SCHEDULE=json.dumps({"tick": {"task": "ledger.noop", "schedule": 3600}}),
    )
    with processes(tmp_path, env) as procs:
        procs.beat("beat1")
        wait_for(
            lambda: "scheduling files" in procs.log("beat1"),
            timeout=60,
            message="beat to load its scheduling files",
        )
        procs.assert_running("beat1")
        first = audit_rows(store)
        # A second start changes nothing, so records nothing.
        procs.stop("beat1")
        procs.beat("beat2")
        wait_for(
            lambda: "scheduling files" in procs.log("beat2"),
            timeout=60,
            message="the second beat to load its scheduling files",
        )
        again = audit_rows(store)
    store.dispose()
    synced = [r for r in first if r["principal"] == "beat_schedule"]
    loaded = [r for r in first if r["via"] == "file"]
    assert _who(first) == {("beat_schedule", "beat_schedule"), ("file:quartz_jobs.xml", "file")}
    assert {(r["action"], r["target"]) for r in synced} >= {
        ("schedule_job", f"{BEAT_SCHEDULE_GROUP}.tick"),
        ("schedule_trigger", f"{BEAT_SCHEDULE_GROUP}.tick"),
    }
    assert sorted((r["action"], r["target"]) for r in loaded) == [
        ("schedule_job", "files.recorder"),
        ("schedule_trigger", "files.nightly"),
    ]
    assert again == first
