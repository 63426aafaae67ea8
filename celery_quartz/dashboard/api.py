"""The HTTP API, JSON, versioned under ``/api/v1`` (docs/dashboard.md lists every endpoint;
``/api/v1/openapi.json`` describes them). Reads page by key (the cursor is the last key of a
page, so a page does not shift while triggers fire); every write goes through the
:class:`~celery_quartz.Quartz` client of the scheduler named in the path."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from celery_quartz import presentation
from celery_quartz.dashboard import history_api, present
from celery_quartz.dashboard.actions import (
    ALL_ACTIONS,
    GROUP_ACTIONS,
    JOB_ACTIONS,
    TRIGGER_ACTIONS,
    HttpError,
    check_text,
    from_quartz_error,
    invalid,
    schedule_job,
)
from celery_quartz.dashboard.app import Dashboard
from celery_quartz.dashboard.auth import READ
from celery_quartz.dashboard.openapi import openapi_document
from celery_quartz.dashboard.targets import Target
from celery_quartz.errors import QuartzError, ValidationError
from celery_quartz.keys import JobKey, TriggerKey
from celery_quartz.store import TriggerState
from celery_quartz.store.views import MAX_PAGE, FiringFilter, JobFilter, TriggerFilter

API = "/api/v1"
#: The deepest nesting of arrays and objects a request body may have.
MAX_JSON_DEPTH = 32
#: The most fire times a trigger's page computes.
MAX_FIRE_TIMES = 100
TRIGGER_STATES = frozenset(
    v for k, v in vars(TriggerState).items() if k.isupper() and v != TriggerState.EXECUTING
)


# -- query parameters -----------------------------------------------------------------------


def limit_of(params: Mapping[str, str], default: int = 100) -> int:
    text = params.get("limit")
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_PAGE:
        raise invalid("limit", f"a whole number from 1 to {MAX_PAGE}, not {text!r}")
    return value


def encode_cursor(key: JobKey | TriggerKey | None) -> str | None:
    """A page's cursor: the last key, encoded (a key's parts may hold any character)."""
    if key is None:
        return None
    raw = json.dumps([key.group, key.name], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(params: Mapping[str, str]) -> tuple[str, str] | None:
    text = params.get("after")
    if not text:
        return None
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        group, name = json.loads(raw)
        if isinstance(group, str) and isinstance(name, str) and "\x00" not in group + name:
            return group, name
    except (binascii.Error, ValueError, TypeError):
        pass
    raise invalid("after", "not a cursor this API returned (next_after of a page)")


def _flag(params: Mapping[str, str], name: str) -> bool | None:
    text = params.get(name)
    if text is None or text == "":
        return None
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise invalid(name, f"true or false, not {text!r}")


def _text(params: Mapping[str, str], name: str) -> str | None:
    value = params.get(name)
    return value if value else None


def trigger_filter(params: Mapping[str, str]) -> TriggerFilter:
    state = _text(params, "state")
    if state is not None and state not in TRIGGER_STATES:
        raise invalid("state", f"one of {', '.join(sorted(TRIGGER_STATES))}, not {state!r}")
    job_name, job_group = _text(params, "job_name"), _text(params, "job_group")
    if (job_name is None) != (job_group is None):
        raise invalid("job_name" if job_name is None else "job_group", "give both or neither")
    return TriggerFilter(
        group=_text(params, "group"),
        state=state,
        execution_group=_text(params, "execution_group"),
        preferred_node=_text(params, "preferred_node"),
        task=_text(params, "task"),
        paused=_flag(params, "paused"),
        job=None if job_name is None else JobKey.stored(job_name, job_group or ""),
    )


# -- reads, as functions of (dashboard, target, query parameters) ---------------------------


def read_triggers(d: Dashboard, t: Target, params: Mapping[str, str]) -> dict[str, Any]:
    after = decode_cursor(params)
    page = t.store.list_triggers(
        trigger_filter(params),
        after=None if after is None else TriggerKey.stored(after[1], after[0]),
        limit=limit_of(params),
    )
    return {
        "items": [presentation.trigger(v, d.redact) for v in page.items],
        "next_after": encode_cursor(page.next_after),
    }


def read_trigger(
    d: Dashboard, t: Target, group: str, name: str, params: Mapping[str, str]
) -> dict[str, Any]:
    view = t.store.trigger_view(TriggerKey.stored(name, group))
    if view is None:
        raise HttpError(404, "not_found", f"trigger {group}.{name} is not stored")
    text = params.get("fire_times", "10")
    try:
        count = int(text)
    except ValueError:
        count = -1
    if not 0 <= count <= MAX_FIRE_TIMES:
        raise invalid("fire_times", f"a whole number from 0 to {MAX_FIRE_TIMES}, not {text!r}")
    trigger = view.trigger
    calendar = None
    if trigger.calendar_name is not None:
        calendar = t.store.retrieve_calendar(trigger.calendar_name)
    try:
        times = trigger.upcoming_fire_times(count, calendar)
    except ValidationError as error:  # a calendar that excludes every time tried
        raise HttpError(409, "conflict", str(error)) from None
    return {
        **presentation.trigger(view, d.redact),
        "upcoming_fire_times": [presentation.iso(x) for x in times],
        "paused_group": trigger.key.group in t.client.get_paused_trigger_groups(),
    }


def read_jobs(d: Dashboard, t: Target, params: Mapping[str, str]) -> dict[str, Any]:
    after = decode_cursor(params)
    page = t.store.list_jobs(
        JobFilter(group=_text(params, "group"), task=_text(params, "task")),
        after=None if after is None else JobKey.stored(after[1], after[0]),
        limit=limit_of(params),
    )
    return {
        "items": [presentation.job(j, d.redact) for j in page.items],
        "next_after": encode_cursor(page.next_after),
    }


def read_job(
    d: Dashboard, t: Target, group: str, name: str, params: Mapping[str, str]
) -> dict[str, Any]:
    key = JobKey.stored(name, group)
    job = t.store.retrieve_job(key)
    if job is None:
        raise HttpError(404, "not_found", f"job {group}.{name} is not stored")
    triggers = [
        presentation.trigger(v, d.redact)
        for v in t.store.list_triggers(TriggerFilter(job=key), limit=MAX_PAGE).items
    ]
    return {**presentation.job(job, d.redact), "triggers": triggers}


def read_firings(d: Dashboard, t: Target, params: Mapping[str, str]) -> dict[str, Any]:
    page = t.store.list_firings(
        FiringFilter(
            state=_text(params, "state"),
            instance_name=_text(params, "instance_name"),
            worker_name=_text(params, "worker_name"),
            execution_group=_text(params, "execution_group"),
        ),
        after=_text(params, "after"),
        limit=limit_of(params),
    )
    views = presentation.with_queues(page.items, t.store, d.queue_of)
    return {"items": [presentation.firing(f) for f in views], "next_after": page.next_after}


def read_overview(d: Dashboard, t: Target, params: Mapping[str, str]) -> dict[str, Any]:
    return {
        "scheduler": t.name,
        "read_only": d.settings.dashboard_read_only,
        **present.overview(t.store, d.settings, d.default_queue, d.redact),
        "paused_trigger_groups": t.client.get_paused_trigger_groups(),
    }


def read_calendars(d: Dashboard, t: Target, params: Mapping[str, str]) -> dict[str, Any]:
    return {
        "items": [
            {
                "name": name,
                "type": type(c).__name__,
                "description": c.description,
                "definition": c.to_dict(),
            }
            for name, c in t.store.calendars().items()
        ]
    }


# -- plumbing ---------------------------------------------------------------------------------


Handler = Callable[[Request], Awaitable[Response]]


def _reader(d: Dashboard, work: Callable[..., Any], *path: str) -> Handler:
    """A GET endpoint: authorize ``read``, then run ``work`` in a thread (the store blocks)."""

    async def endpoint(request: Request) -> Response:
        scheduler = request.path_params["scheduler"]
        target = await run_in_threadpool(d.require, request, scheduler, READ, cookie=False)
        params = request_text(request)
        args = [request.path_params[p] for p in path]
        return JSONResponse(await run_in_threadpool(work, d, target, *args, params))

    return endpoint


def _writer(d: Dashboard, action: str, work: Callable[..., Any], *path: str) -> Handler:
    """A POST (or DELETE) endpoint: authorize ``action``, read the JSON body, then act."""

    async def endpoint(request: Request) -> Response:
        scheduler = request.path_params["scheduler"]
        target = await run_in_threadpool(d.require, request, scheduler, action, cookie=False)
        request_text(request)
        body = await json_object(request)
        args = [request.path_params[p] for p in path]
        try:
            result = await run_in_threadpool(
                d.acting(request, "api", work, cookie=False), target.client, *args, body
            )
        except QuartzError as error:
            raise from_quartz_error(error) from None
        return JSONResponse(result)

    return endpoint


def on_everything(work: Callable[..., Any]) -> Callable[..., Any]:
    """An action on every trigger of the scheduler: no key in its path."""

    def run(client: Any, body: dict[str, Any]) -> Any:
        return work(client, None, body)

    return run


def request_text(request: Request) -> dict[str, str]:
    """The request's query parameters, once neither they nor its path parts hold a NUL."""
    check_text(request.path_params)
    params = dict(request.query_params)
    check_text(params)
    return params


async def json_object(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw.strip():
        return {}
    if "json" not in request.headers.get("content-type", "application/json"):
        raise HttpError(415, "unsupported_media_type", "send the body as application/json")
    too_deep = HttpError(
        400, "bad_json", f"the body nests arrays and objects deeper than {MAX_JSON_DEPTH} levels"
    )
    try:
        body = json.loads(raw)
    except RecursionError:
        raise too_deep from None
    except ValueError as error:
        raise HttpError(400, "bad_json", f"the body is not JSON: {error}") from None
    if _depth(body) > MAX_JSON_DEPTH:
        raise too_deep
    if not isinstance(body, dict):
        raise invalid("body", "a JSON object")
    return body


def _depth(value: Any) -> int:
    """How deep arrays and objects nest in ``value`` (counted without recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth)
            stack.extend(
                (v, depth + 1) for v in (item.values() if isinstance(item, dict) else item)
            )
    return deepest


def _nodes(d: Dashboard, t: Target, params: Mapping[str, str]) -> dict[str, Any]:
    return present.nodes(t.store)


def _groups(d: Dashboard, t: Target, params: Mapping[str, str]) -> dict[str, Any]:
    return {
        "items": present.groups(t.store, d.settings, d.default_queue),
        "unserved": present.unserved(t.store, d.settings, d.default_queue),
    }


def _owed(d: Dashboard, t: Target, params: Mapping[str, str]) -> dict[str, Any]:
    return present.owed(t.store, d.settings, d.default_queue, d.redact)


def routes(d: Dashboard) -> list[BaseRoute]:
    s = f"{API}/schedulers/{{scheduler}}"

    async def schedulers(request: Request) -> Response:
        principal, presented = await run_in_threadpool(d.principal, request, cookie=False)
        if presented and principal is None:
            raise HttpError(401, "invalid_token", "the token is not valid")
        names = await run_in_threadpool(d.readable, request, cookie=False)
        if not names and principal is None:
            raise HttpError(401, "unauthenticated", "a bearer token is required")
        items = await run_in_threadpool(d.clusters, names)
        return JSONResponse(
            {
                "items": items,
                "unreachable": d.targets.unreachable(),
                "read_only": d.settings.dashboard_read_only,
            }
        )

    async def openapi(request: Request) -> Response:
        return JSONResponse(openapi_document(d.prefix))

    def schedule(client: Any, body: dict[str, Any]) -> dict[str, Any]:
        return schedule_job(client, d.app, d.settings.dashboard_allowed_tasks, body)

    table: list[BaseRoute] = [
        Route(f"{API}/openapi.json", openapi),
        Route(f"{API}/schedulers", schedulers),
        Route(s, _reader(d, read_overview)),
        Route(f"{s}/nodes", _reader(d, _nodes)),
        Route(f"{s}/groups", _reader(d, _groups)),
        Route(f"{s}/owed", _reader(d, _owed)),
        Route(f"{s}/calendars", _reader(d, read_calendars)),
        Route(f"{s}/history", _reader(d, history_api.read_history)),
        Route(f"{s}/history/misfires", _reader(d, history_api.read_misfires)),
        Route(f"{s}/stats", _reader(d, history_api.read_stats)),
        Route(f"{s}/job-status", _reader(d, history_api.read_job_status)),
        Route(f"{s}/audit", _reader(d, history_api.read_audit)),
        Route(f"{s}/firings", _reader(d, read_firings)),
        Route(f"{s}/triggers", _reader(d, read_triggers)),
        Route(f"{s}/triggers/{{group}}/{{name}}", _reader(d, read_trigger, "group", "name")),
        Route(f"{s}/jobs", _reader(d, read_jobs), methods=["GET"]),
        Route(f"{s}/jobs", _writer(d, "schedule_job", schedule), methods=["POST"]),
        Route(f"{s}/jobs/{{group}}/{{name}}", _reader(d, read_job, "group", "name")),
    ]
    for verb, (action, work) in TRIGGER_ACTIONS.items():
        path = f"{s}/triggers/{{group}}/{{name}}/{verb}"
        table.append(Route(path, _writer(d, action, work, "group", "name"), methods=["POST"]))
    for verb, (action, work) in JOB_ACTIONS.items():
        path = f"{s}/jobs/{{group}}/{{name}}/{verb}"
        table.append(Route(path, _writer(d, action, work, "group", "name"), methods=["POST"]))
    for verb, (action, on_group) in GROUP_ACTIONS.items():
        path = f"{s}/trigger-groups/{{group}}/{verb}"
        table.append(Route(path, _writer(d, action, on_group, "group"), methods=["POST"]))
    for verb, (action, on_all) in ALL_ACTIONS.items():
        writer = _writer(d, action, on_everything(on_all))
        table.append(Route(f"{s}/{verb}", writer, methods=["POST"]))
    return table
