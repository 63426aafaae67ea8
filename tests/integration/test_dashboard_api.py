"""The HTTP API over real PostgreSQL: every action through the client, refusals by the policy,
by the read-only flag and for tasks a caller may not choose, bad input naming its field, and
CSRF on the pages' forms. The store is unchanged after every refusal."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import update

from celery_quartz import Job, JobKey, Quartz, TriggerKey
from celery_quartz.affinity import PreferredNode
from celery_quartz.store import TriggerState
from celery_quartz.triggers import CronTrigger
from tests.integration.dashboard_helpers import (
    ADMIN,
    API,
    ELSEWHERE,
    READER,
    G,
    client,
    csrf_of,
    snapshot,
)
from tests.integration.dashboard_helpers import with_jobs as _setup


def _state(quartz: Quartz, name: str) -> str:
    return quartz.get_trigger_state(TriggerKey(name, G))


#: Every write of the API, with a body that would succeed.
WRITES: list[tuple[str, dict[str, Any] | None]] = [
    (f"{API}/triggers/{G}/hourly/pause", None),
    (f"{API}/triggers/{G}/hourly/resume", None),
    (f"{API}/triggers/{G}/hourly/reset", None),
    (f"{API}/triggers/{G}/hourly/unschedule", None),
    (f"{API}/triggers/{G}/hourly/preferred-node", {"preferred_node": "w1@host"}),
    (f"{API}/jobs/{G}/report/pause", None),
    (f"{API}/jobs/{G}/report/resume", None),
    (f"{API}/jobs/{G}/report/trigger", {"data": {"n": 1}}),
    (f"{API}/jobs/{G}/report/delete", None),
    (f"{API}/trigger-groups/{G}/pause", None),
    (f"{API}/trigger-groups/{G}/resume", None),
    (
        f"{API}/jobs",
        {"job": {"name": "new", "task": "ledger.noop"}, "trigger": {"cron": "0 0 * * * ?"}},
    ),
]


def test_pause_and_resume_a_trigger(pg_url: str) -> None:
    _, quartz = _setup(pg_url)
    api = client(pg_url)
    assert api.post(f"{API}/triggers/{G}/hourly/pause").json() == {"ok": True}
    assert _state(quartz, "hourly") == TriggerState.PAUSED
    assert _state(quartz, "daily") == TriggerState.WAITING
    assert api.post(f"{API}/triggers/{G}/hourly/resume").status_code == 200
    assert _state(quartz, "hourly") == TriggerState.WAITING


def test_pause_and_resume_a_job(pg_url: str) -> None:
    _, quartz = _setup(pg_url)
    api = client(pg_url)
    assert api.post(f"{API}/jobs/{G}/report/pause").status_code == 200
    assert {_state(quartz, n) for n in ("hourly", "daily")} == {TriggerState.PAUSED}
    assert _state(quartz, "nightly") == TriggerState.WAITING
    assert api.post(f"{API}/jobs/{G}/report/resume").status_code == 200
    assert {_state(quartz, n) for n in ("hourly", "daily")} == {TriggerState.WAITING}


def test_pause_and_resume_a_trigger_group(pg_url: str) -> None:
    _, quartz = _setup(pg_url)
    api = client(pg_url)
    assert api.post(f"{API}/trigger-groups/{G}/pause").status_code == 200
    assert quartz.get_paused_trigger_groups() == [G]
    assert _state(quartz, "nightly") == TriggerState.PAUSED
    assert api.get(f"{API}/triggers", params={"paused": "true"}).json()["items"]
    assert api.post(f"{API}/trigger-groups/{G}/resume").status_code == 200
    assert quartz.get_paused_trigger_groups() == []
    assert _state(quartz, "nightly") == TriggerState.WAITING


def test_trigger_a_job_now(pg_url: str) -> None:
    _, quartz = _setup(pg_url)
    answer = client(pg_url).post(f"{API}/jobs/{G}/report/trigger", json={"data": {"n": 1}})
    assert answer.status_code == 200
    key = answer.json()["trigger"]
    trigger = quartz.get_trigger(TriggerKey(key["name"], key["group"]))
    assert trigger is not None and trigger.job_key == JobKey("report", G)
    assert trigger.data == {"n": 1}


def test_reset_a_trigger_from_error_shows_the_reason_first(pg_url: str) -> None:
    store, quartz = _setup(pg_url)
    t = store.tables.triggers
    with store.engine.begin() as conn:
        conn.execute(
            update(t)
            .where(t.c.trigger_name == "daily")
            .values(trigger_state=TriggerState.ERROR, error_reason="task gone")
        )
    api = client(pg_url)
    owed = api.get(f"{API}/owed").json()
    assert [(e["key"]["name"], e["error_reason"]) for e in owed["errors"]] == [
        ("daily", "task gone")
    ]
    assert api.post(f"{API}/triggers/{G}/daily/reset").json() == {"reset": 1}
    assert _state(quartz, "daily") == TriggerState.WAITING
    again = api.post(f"{API}/triggers/{G}/daily/reset")
    assert again.status_code == 409 and "not in ERROR" in again.json()["error"]["message"]


def test_unschedule_a_trigger_and_delete_a_job(pg_url: str) -> None:
    _, quartz = _setup(pg_url)
    api = client(pg_url)
    assert api.post(f"{API}/triggers/{G}/daily/unschedule").json() == {"removed": True}
    assert _state(quartz, "daily") == "NONE"
    assert api.post(f"{API}/jobs/{G}/cleanup/delete").json() == {"removed": True}
    assert quartz.get_job(JobKey("cleanup", G)) is None
    assert _state(quartz, "nightly") == "NONE"
    gone = api.post(f"{API}/jobs/{G}/cleanup/delete")
    assert gone.status_code == 404


def test_change_a_triggers_preferred_node(pg_url: str) -> None:
    _, quartz = _setup(pg_url)
    api = client(pg_url)
    path = f"{API}/triggers/{G}/hourly/preferred-node"

    def pin() -> PreferredNode:
        trigger = quartz.get_trigger(TriggerKey("hourly", G))
        assert trigger is not None
        return trigger.preferred_node

    assert api.post(path, json={"preferred_node": "w1@host"}).status_code == 200
    assert pin() == PreferredNode.for_node("w1@host")
    assert api.post(path, json={"preferred_node": "*"}).status_code == 200
    assert pin() == PreferredNode.AUTO
    assert api.post(path, json={"preferred_node": None}).status_code == 200
    assert pin() == PreferredNode.NONE
    assert api.get(f"{API}/triggers/{G}/hourly").json()["preferred_node"] is None


def test_schedule_a_job_of_a_registered_task(pg_url: str) -> None:
    _, quartz = _setup(pg_url)
    answer = client(pg_url).post(
        f"{API}/jobs",
        json={
            "job": {"name": "new", "group": "api", "task": "ledger.noop", "data": {"k": 1}},
            "trigger": {"name": "every-hour", "group": "api", "cron": "0 0 * * * ?"},
        },
    )
    assert answer.status_code == 200, answer.text
    assert quartz.get_job(JobKey("new", "api")) is not None
    assert quartz.get_trigger_state(TriggerKey("every-hour", "api")) == TriggerState.WAITING


def test_a_trigger_shows_its_next_fire_times(pg_url: str) -> None:
    _setup(pg_url)
    body = client(pg_url).get(f"{API}/triggers/{G}/hourly", params={"fire_times": 3}).json()
    times = [datetime.fromisoformat(t) for t in body["upcoming_fire_times"]]
    assert len(times) == 3
    assert all(b - a == timedelta(hours=1) for a, b in itertools.pairwise(times))
    assert times[0] > datetime.now(timezone.utc)


def test_job_data_under_secret_looking_keys_is_redacted(pg_url: str) -> None:
    _, quartz = _setup(pg_url)
    job = Job(
        key=JobKey("secretive", G),
        task="ledger.noop",
        durable=True,
        data={"db_password": "hunter2", "api_token": "abc", "rows": 10},
    )
    quartz.add_job(job)
    data = client(pg_url).get(f"{API}/jobs/{G}/secretive").json()["data"]
    assert data == {"db_password": "***", "api_token": "***", "rows": 10}


# -- refusals -------------------------------------------------------------------------------


def test_a_wrong_token_is_refused(pg_url: str) -> None:
    store, _ = _setup(pg_url)
    before = snapshot(store)
    api = client(pg_url, token="not-a-token")
    read = api.get(f"{API}/triggers")
    assert read.status_code == 401 and read.json()["error"]["code"] == "invalid_token"
    assert api.post(f"{API}/triggers/{G}/hourly/pause").status_code == 401
    assert snapshot(store) == before


def test_without_a_token_everything_is_refused_unless_anonymous_read(pg_url: str) -> None:
    store, _ = _setup(pg_url)
    before = snapshot(store)
    assert client(pg_url, token=None).get(f"{API}/triggers").status_code == 401
    anonymous = client(pg_url, token=None, dashboard_anonymous_read=True)
    assert anonymous.get(f"{API}/triggers").status_code == 200
    assert anonymous.post(f"{API}/triggers/{G}/hourly/pause").status_code == 401
    assert snapshot(store) == before


def test_with_no_token_configured_every_request_is_refused(pg_url: str) -> None:
    _setup(pg_url)
    api = client(pg_url, token=ADMIN, dashboard_tokens=None)
    assert api.get(f"{API}/triggers").status_code == 401
    assert api.get("/api/v1/schedulers").status_code == 401


@pytest.mark.parametrize(("path", "body"), WRITES)
def test_the_policy_refuses_a_token_its_writes(
    pg_url: str, path: str, body: dict[str, Any] | None
) -> None:
    store, _ = _setup(pg_url)
    before = snapshot(store)
    reader = client(pg_url, token=READER)
    assert reader.get(f"{API}/triggers").status_code == 200
    refused = reader.post(path, json=body)
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"]["code"] == "forbidden"
    assert snapshot(store) == before


def test_the_policy_holds_a_token_to_its_schedulers(pg_url: str) -> None:
    store, _ = _setup(pg_url)
    before = snapshot(store)
    tenant = client(pg_url, token=ELSEWHERE)
    assert tenant.get(f"{API}/triggers").status_code == 403
    assert tenant.post(f"{API}/triggers/{G}/hourly/pause").status_code == 403
    assert tenant.get("/api/v1/schedulers").json()["items"] == []
    assert snapshot(store) == before


ASKED: list[tuple[str | None, str, str]] = []


def only_reads_and_pauses(principal: str | None, scheduler: str, action: str) -> bool:
    """A policy for :func:`test_a_dotted_path_policy_is_asked_on_every_request`."""
    ASKED.append((principal, scheduler, action))
    return principal == "admin" and action in ("read", "pause_trigger")


def test_a_dotted_path_policy_is_asked_on_every_request(pg_url: str) -> None:
    store, quartz = _setup(pg_url)
    ASKED.clear()
    api = client(
        pg_url,
        dashboard_authorization=f"{__name__}:only_reads_and_pauses",
    )
    assert api.get(f"{API}/triggers").status_code == 200
    assert api.post(f"{API}/triggers/{G}/hourly/pause").status_code == 200
    before = snapshot(store)
    assert api.post(f"{API}/triggers/{G}/hourly/resume").status_code == 403
    assert snapshot(store) == before
    assert _state(quartz, "hourly") == TriggerState.PAUSED
    assert ASKED == [
        ("admin", "ledger_app", "read"),
        ("admin", "ledger_app", "pause_trigger"),
        ("admin", "ledger_app", "resume_trigger"),
    ]


@pytest.mark.parametrize(("path", "body"), WRITES)
def test_read_only_refuses_every_write_whatever_the_policy_says(
    pg_url: str, path: str, body: dict[str, Any] | None
) -> None:
    store, _ = _setup(pg_url)
    before = snapshot(store)
    api = client(pg_url, dashboard_read_only=True)
    assert api.get(f"{API}/triggers").status_code == 200
    refused = api.post(path, json=body)
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "read_only"
    assert snapshot(store) == before


def test_scheduling_an_unregistered_task_is_refused_naming_the_field(pg_url: str) -> None:
    store, _ = _setup(pg_url)
    before = snapshot(store)
    refused = client(pg_url).post(
        f"{API}/jobs",
        json={"job": {"name": "evil", "task": "os.system"}, "trigger": {"cron": "0 * * * * ?"}},
    )
    assert refused.status_code == 422
    assert refused.json()["error"]["field"] == "job.task"
    assert snapshot(store) == before


def test_scheduling_a_task_off_the_allow_list_is_refused(pg_url: str) -> None:
    store, _ = _setup(pg_url)
    before = snapshot(store)
    api = client(pg_url, dashboard_allowed_tasks=["ledger.record"])
    refused = api.post(
        f"{API}/jobs",
        json={"job": {"name": "x", "task": "ledger.noop"}, "trigger": {"cron": "0 * * * * ?"}},
    )
    assert refused.status_code == 403
    assert refused.json()["error"]["field"] == "job.task"
    assert snapshot(store) == before
    allowed = api.post(
        f"{API}/jobs",
        json={"job": {"name": "x", "task": "ledger.record"}, "trigger": {"interval": 60}},
    )
    assert allowed.status_code == 200, allowed.text


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        ("get", f"{API}/triggers?limit=0", None, "limit"),
        ("get", f"{API}/triggers?limit=lots", None, "limit"),
        ("get", f"{API}/triggers?after=%%%", None, "after"),
        ("get", f"{API}/triggers?state=SLEEPING", None, "state"),
        ("get", f"{API}/triggers?paused=maybe", None, "paused"),
        ("get", f"{API}/triggers?job_name=report", None, "job_group"),
        ("get", f"{API}/triggers/{G}/hourly?fire_times=1000", None, "fire_times"),
        (
            "post",
            f"{API}/jobs",
            {"job": {"name": "j", "task": "ledger.noop"}, "trigger": {"cron": "61 * * * * ?"}},
            "trigger.cron",
        ),
        (
            "post",
            f"{API}/jobs",
            {"job": {"name": "j", "task": "ledger.noop", "kwarg": {}}, "trigger": {"at": "x"}},
            "job.kwarg",
        ),
        (
            "post",
            f"{API}/jobs",
            {"job": {"name": "j", "task": "ledger.noop"}, "trigger": {"at": "2030-01-01T00:00"}},
            "trigger.at",
        ),
        (
            "post",
            f"{API}/jobs",
            {"job": {"name": "j", "task": "ledger.noop"}, "trigger": {"interval": -5}},
            "trigger.interval",
        ),
        ("post", f"{API}/jobs", {"trigger": {"interval": 5}}, "job"),
        ("post", f"{API}/triggers/{G}/hourly/preferred-node", {"preferred_node": 5}, None),
    ],
)
def test_bad_input_is_refused_naming_the_field_and_changes_nothing(
    pg_url: str, method: str, path: str, body: dict[str, Any] | None, field: str | None
) -> None:
    store, _ = _setup(pg_url)
    before = snapshot(store)
    api = client(pg_url)
    answer = api.get(path) if method == "get" else api.post(path, json=body)
    assert 400 <= answer.status_code < 500, answer.text
    error = answer.json()["error"]
    assert error["field"] == (field or "preferred_node")
    assert error["field"] in error["message"]
    assert snapshot(store) == before


def test_a_body_that_is_not_json_is_refused(pg_url: str) -> None:
    _setup(pg_url)
    answer = client(pg_url).post(
        f"{API}/jobs", content=b"{nope", headers={"Content-Type": "application/json"}
    )
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "bad_json"


def test_the_openapi_document_lists_every_endpoint(pg_url: str) -> None:
    _setup(pg_url)
    document = client(pg_url, token=None).get("/api/v1/openapi.json").json()
    assert document["openapi"].startswith("3.")
    paths = document["paths"]
    for path, _ in WRITES:
        template = path.replace(API, "/api/v1/schedulers/{scheduler}")
        template = template.replace(f"/{G}/hourly/", "/{group}/{name}/")
        template = template.replace(f"/{G}/report/", "/{group}/{name}/")
        template = template.replace(f"trigger-groups/{G}/", "trigger-groups/{group}/")
        assert template in paths, template


# -- the pages' forms -----------------------------------------------------------------------


def _logged_in(url: str, **changes: Any) -> Any:
    pages = client(url, token=None, **changes)
    login = pages.get("/login")
    answer = pages.post(
        "/login",
        data={"token": ADMIN, "csrf_token": csrf_of(login.text), "next": "/"},
        follow_redirects=False,
    )
    assert answer.status_code == 303
    return pages


def test_a_form_post_without_the_csrf_token_is_refused(pg_url: str) -> None:
    store, quartz = _setup(pg_url)
    before = snapshot(store)
    pages = _logged_in(pg_url)
    path = f"/s/ledger_app/triggers/{G}/hourly/pause"
    refused = pages.post(path, data={"back": "/"}, follow_redirects=False)
    assert refused.status_code == 403
    forged = pages.post(path, data={"csrf_token": "0" * 64}, follow_redirects=False)
    assert forged.status_code == 403
    assert snapshot(store) == before
    page = pages.get(f"/s/ledger_app/triggers/{G}/hourly")
    done = pages.post(path, data={"csrf_token": csrf_of(page.text)}, follow_redirects=False)
    assert done.status_code == 303
    assert _state(quartz, "hourly") == TriggerState.PAUSED


def test_a_form_post_is_refused_in_read_only_mode_and_the_page_shows_no_action(
    pg_url: str,
) -> None:
    store, _ = _setup(pg_url)
    before = snapshot(store)
    pages = _logged_in(pg_url, dashboard_read_only=True)
    page = pages.get(f"/s/ledger_app/triggers/{G}/hourly")
    assert page.status_code == 200
    assert "action-pause" not in page.text and 'id="read-only"' in page.text
    refused = pages.post(
        f"/s/ledger_app/triggers/{G}/hourly/pause",
        data={"csrf_token": csrf_of(page.text)},
        follow_redirects=False,
    )
    assert refused.status_code == 403
    assert snapshot(store) == before


def test_behind_a_proxy_every_route_and_link_carries_the_url_prefix(pg_url: str) -> None:
    _setup(pg_url)
    api = client(pg_url, dashboard_url_prefix="/quartz")
    assert api.get(f"/quartz{API}/triggers").status_code == 200
    assert api.get(f"{API}/triggers").status_code == 404
    refused = client(pg_url, token="wrong", dashboard_url_prefix="/quartz").get(f"/quartz{API}")
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_token"
    page = api.get(f"/quartz/s/ledger_app/triggers/{G}/hourly")
    assert page.status_code == 200
    assert f'action="/quartz/s/ledger_app/triggers/{G}/hourly/pause"' in page.text
    assert 'href="/quartz/s/ledger_app/triggers"' in page.text
    anonymous = client(pg_url, token=None, dashboard_url_prefix="/quartz")
    login = anonymous.get("/quartz/s/ledger_app/", follow_redirects=False)
    assert login.status_code == 303 and login.headers["location"].startswith("/quartz/login")


def test_an_unknown_path_or_method_answers_json_under_the_api(pg_url: str) -> None:
    _setup(pg_url)
    api = client(pg_url)
    missing = api.get(f"{API}/no-such-thing/at/all")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    wrong = api.get(f"{API}/triggers/{G}/hourly/pause")
    assert wrong.status_code == 405 and wrong.json()["error"]["code"] == "method_not_allowed"
    unknown = api.get("/api/v1/schedulers/nobody/triggers")
    assert unknown.status_code == 404 and "nobody" in unknown.json()["error"]["message"]


# -- reads that need a particular store -------------------------------------------------------


def _due(name: str, group: str | None) -> Any:
    from celery_quartz import SimpleTrigger

    return SimpleTrigger(
        key=TriggerKey(name, "work"),
        start_at=datetime.now(timezone.utc) - timedelta(seconds=5),
        repeat_count=-1,
        repeat_interval=timedelta(hours=1),
        execution_group=group,
    )


def test_a_group_at_its_ceiling_is_parked_and_its_queue_unserved(pg_url: str) -> None:
    from celery_quartz.config import Settings

    store, quartz = _setup(pg_url)
    limits = {"reindex": {"max_concurrent": 1, "scope": "cluster"}}
    job = Job(key=JobKey("reindexer", "work"), task="ledger.noop")
    quartz.schedule_jobs([(job, [_due("r1", "reindex"), _due("r2", "reindex")])])
    router = Settings(execution_limits=limits).router()
    claim = store.claim(
        "sched-1",
        no_later_than=datetime.now(timezone.utc),
        max_count=10,
        time_window=0,
        router=router,
    )
    assert len(claim.firings) == 1  # the other is held back by the cluster limit of 1
    api = client(pg_url, execution_limits=limits)
    [reindex] = [g for g in api.get(f"{API}/groups").json()["items"] if g["execution_group"]]
    assert reindex == {
        "execution_group": "reindex",
        "queue": "reindex",
        "max_concurrent": 1,
        "scope": "cluster",
        "capacity": 1,
        "in_flight": 1,
        "held_back": 1,
        "parked": True,
        "served": False,
    }
    owed = api.get(f"{API}/owed").json()
    assert [g["execution_group"] for g in owed["parked_groups"]] == ["reindex"]
    assert [u["queue"] for u in owed["unserved"]] == ["reindex"]
    [firing] = api.get(f"{API}/firings").json()["items"]
    assert firing["fire_instance_id"] == claim.firings[0].fire_instance_id
    assert (firing["state"], firing["instance_name"]) == ("FIRED", "sched-1")
    assert api.get(f"{API}/firings", params={"state": "EXECUTING"}).json()["items"] == []


def test_a_firing_without_a_route_of_its_own_shows_the_queue_its_job_routes_to(
    pg_url: str,
) -> None:
    """As the CLI's firings show it: the job's ``queue`` option, decided as the publisher
    decides it (only a grouped or pinned firing has its queue stored)."""
    store, quartz = _setup(pg_url)
    job = Job(key=JobKey("routed", "work"), task="ledger.noop", options={"queue": "reports"})
    quartz.schedule_jobs([(job, [_due("routed", None)])])
    claim = store.claim(
        "sched-1", no_later_than=datetime.now(timezone.utc), max_count=10, time_window=0
    )
    [firing] = client(pg_url).get(f"{API}/firings").json()["items"]
    assert (firing["fire_instance_id"], firing["queue"]) == (
        claim.firings[0].fire_instance_id,
        "reports",
    )


def test_a_non_clustered_leader_is_named_with_its_epoch_and_a_silent_node_is_dead(
    pg_url: str,
) -> None:
    store, _ = _setup(pg_url)
    _, epoch = store.advance_epoch("leader-1")
    store.check_in("leader-1", interval=7.5, clustered=False)
    store.check_in("gone-1", interval=1)
    s = store.tables.scheduler_state
    with store.engine.begin() as conn:
        conn.execute(
            update(s).where(s.c.instance_name == "leader-1").values(status="RUNNING", epoch=epoch)
        )
        conn.execute(update(s).where(s.c.instance_name == "gone-1").values(last_checkin_time=0))
    api = client(pg_url)
    nodes = api.get(f"{API}/nodes").json()
    assert (nodes["leader"], nodes["epoch"]) == ("leader-1", epoch)
    alive = {n["instance_name"]: n["alive"] for n in nodes["nodes"]}
    assert alive == {"leader-1": True, "gone-1": False}
    dead = api.get(f"{API}/owed").json()["dead_nodes"]
    assert [n["instance_name"] for n in dead] == ["gone-1"]


def test_a_triggers_next_fire_times_skip_what_its_calendar_excludes(pg_url: str) -> None:
    from celery_quartz.calendars import WeeklyCalendar

    _, quartz = _setup(pg_url)
    quartz.add_calendar("weekdays", WeeklyCalendar(description="no weekends"))
    job = Job(key=JobKey("daily-report", "work"), task="ledger.noop")
    trigger = CronTrigger(
        key=TriggerKey("daily", "work"), expression="0 0 9 * * ?", calendar_name="weekdays"
    )
    quartz.schedule_job(job, trigger)
    api = client(pg_url)
    body = api.get(f"{API}/triggers/work/daily", params={"fire_times": 10}).json()
    times = [datetime.fromisoformat(t) for t in body["upcoming_fire_times"]]
    assert len(times) == 10 and all(t.weekday() < 5 for t in times)
    [calendar] = api.get(f"{API}/calendars").json()["items"]
    assert (calendar["name"], calendar["type"]) == ("weekdays", "WeeklyCalendar")
    assert calendar["description"] == "no weekends"


def test_the_trigger_page_offers_job_and_group_actions_as_forms(pg_url: str) -> None:
    _, quartz = _setup(pg_url)
    pages = _logged_in(pg_url)
    page = pages.get(f"/s/ledger_app/triggers/{G}/hourly")
    for button in ("action-job-pause", "action-group-pause", "action-job-delete"):
        assert f'id="{button}"' in page.text
    token = csrf_of(page.text)
    back = f"/s/ledger_app/triggers/{G}/hourly"
    done = pages.post(
        f"/s/ledger_app/jobs/{G}/report/pause",
        data={"csrf_token": token, "back": back},
        follow_redirects=False,
    )
    assert done.status_code == 303 and done.headers["location"].startswith(back)
    assert {_state(quartz, n) for n in ("hourly", "daily")} == {TriggerState.PAUSED}
    pages.post(f"/s/ledger_app/groups/{G}/pause", data={"csrf_token": token})
    assert quartz.get_paused_trigger_groups() == [G]
    assert 'id="action-group-resume"' in pages.get(back).text
