"""The OpenAPI 3.1 document of the HTTP API, served at ``/api/v1/openapi.json``."""

from __future__ import annotations

from typing import Any

from celery_quartz.dashboard.auth import WRITE_ACTIONS

_PAGE = [
    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000}},
    {
        "name": "after",
        "in": "query",
        "description": "The next_after of the previous page (a key, not an offset).",
        "schema": {"type": "string"},
    },
]
_TRIGGER_FILTERS = [
    {"name": n, "in": "query", "schema": {"type": "string"}, "description": d}
    for n, d in (
        ("group", "Trigger group."),
        ("state", "WAITING, ACQUIRED, PAUSED, BLOCKED, PAUSED_BLOCKED, COMPLETE or ERROR."),
        ("execution_group", "Execution group."),
        ("preferred_node", "Pinned worker."),
        ("task", "The job's Celery task."),
        ("paused", "true: PAUSED and PAUSED_BLOCKED; false: every other state."),
        ("job_group", "With job_name: the triggers of one job."),
        ("job_name", "With job_group."),
    )
]
_FIRING_FILTERS = [
    {"name": n, "in": "query", "schema": {"type": "string"}}
    for n in ("state", "instance_name", "worker_name", "execution_group")
]
_KEY = [
    {"name": "group", "in": "path", "required": True, "schema": {"type": "string"}},
    {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}},
]
_ERROR = {
    "description": "An error naming the field at fault, when one is.",
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "properties": {
                    "error": {
                        "type": "object",
                        "properties": {
                            "code": {"type": "string"},
                            "message": {"type": "string"},
                            "field": {"type": "string"},
                        },
                        "required": ["code", "message"],
                    }
                },
            }
        }
    },
}
_SCHEDULE_BODY = {
    "type": "object",
    "required": ["job", "trigger"],
    "properties": {
        "job": {
            "type": "object",
            "required": ["name", "task"],
            "properties": {
                "name": {"type": "string"},
                "group": {"type": "string"},
                "task": {"type": "string", "description": "A registered (and allowed) task."},
                "args": {"type": "array"},
                "kwargs": {"type": "object"},
                "data": {"type": "object"},
                "description": {"type": "string"},
                "durable": {"type": "boolean"},
                "requests_recovery": {"type": "boolean"},
                "disallow_concurrent": {"type": "boolean"},
                "persist_job_data": {"type": "boolean"},
            },
        },
        "trigger": {
            "type": "object",
            "description": "Exactly one of cron, interval (seconds) or at (a time).",
            "properties": {
                "name": {"type": "string"},
                "group": {"type": "string"},
                "cron": {"type": "string"},
                "time_zone": {"type": "string"},
                "interval": {"type": "number"},
                "repeat_count": {"type": "integer"},
                "at": {"type": "string", "format": "date-time"},
                "start_at": {"type": "string", "format": "date-time"},
                "end_at": {"type": "string", "format": "date-time"},
                "priority": {"type": "integer"},
                "calendar": {"type": "string"},
                "execution_group": {"type": "string"},
                "preferred_node": {"type": ["string", "null"]},
                "description": {"type": "string"},
                "data": {"type": "object"},
            },
        },
        "replace": {"type": "boolean"},
    },
}


def _get(summary: str, parameters: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "get": {
            "summary": summary,
            "parameters": parameters or [],
            "responses": {
                "200": {"description": "JSON"},
                "401": _ERROR,
                "403": _ERROR,
                "404": _ERROR,
                "422": _ERROR,
            },
        }
    }


def _post(summary: str, action: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    assert action in WRITE_ACTIONS
    operation: dict[str, Any] = {
        "summary": f"{summary} (policy action: {action})",
        "responses": {
            "200": {"description": "Done"},
            **{code: _ERROR for code in ("400", "401", "403", "404", "409", "415", "422")},
        },
    }
    if body is not None:
        operation["requestBody"] = {"content": {"application/json": {"schema": body}}}
    return {"post": operation}


def openapi_document(prefix: str) -> dict[str, Any]:
    """The API's description; ``prefix`` is the URL prefix it is served under."""
    s = "/api/v1/schedulers/{scheduler}"
    scheduler = [
        {"name": "scheduler", "in": "path", "required": True, "schema": {"type": "string"}}
    ]
    paths: dict[str, Any] = {
        "/api/v1/schedulers": _get("The scheduler names in the store the caller may read"),
        s: _get("Overview: nodes, leader and epoch, groups, what is owed", scheduler),
        f"{s}/nodes": _get("Check-ins with liveness; the non-clustered leader", scheduler),
        f"{s}/groups": _get("Execution groups: limits, occupancy, held back, unserved", scheduler),
        f"{s}/owed": _get("What is owed and not happening", scheduler),
        f"{s}/calendars": _get("Stored calendars", scheduler),
        f"{s}/firings": _get("Fired instances in flight", scheduler + _FIRING_FILTERS + _PAGE),
        f"{s}/triggers": _get("Triggers, keyset-paged", scheduler + _TRIGGER_FILTERS + _PAGE),
        f"{s}/triggers/{{group}}/{{name}}": _get(
            "A trigger, its last outcome and its next fire times (calendar applied)",
            [
                *scheduler,
                *_KEY,
                {
                    "name": "fire_times",
                    "in": "query",
                    "schema": {"type": "integer", "maximum": 100},
                },
            ],
        ),
        f"{s}/jobs": {
            **_get(
                "Jobs, keyset-paged",
                [
                    *scheduler,
                    *(
                        {"name": n, "in": "query", "schema": {"type": "string"}}
                        for n in ("group", "task")
                    ),
                    *_PAGE,
                ],
            ),
            **_post("Schedule a job with one trigger", "schedule_job", _SCHEDULE_BODY),
        },
        f"{s}/jobs/{{group}}/{{name}}": _get("A job and its triggers", scheduler + _KEY),
    }
    for verb, action, summary, body in (
        ("pause", "pause_trigger", "Pause a trigger", None),
        ("resume", "resume_trigger", "Resume a trigger", None),
        ("reset", "reset_trigger", "Return a trigger in ERROR to its schedule", None),
        ("unschedule", "unschedule", "Remove a trigger", None),
        (
            "preferred-node",
            "repin_trigger",
            "Change a trigger's preferred node ('*': automatic, null: none)",
            {"type": "object", "properties": {"preferred_node": {"type": ["string", "null"]}}},
        ),
    ):
        paths[f"{s}/triggers/{{group}}/{{name}}/{verb}"] = _post(summary, action, body)
    for verb, action, summary, body in (
        ("pause", "pause_job", "Pause every trigger of a job", None),
        ("resume", "resume_job", "Resume every trigger of a job", None),
        (
            "trigger",
            "trigger_job",
            "Fire a job now, once",
            {"type": "object", "properties": {"data": {"type": "object"}}},
        ),
        ("delete", "delete_job", "Delete a job and its triggers", None),
    ):
        paths[f"{s}/jobs/{{group}}/{{name}}/{verb}"] = _post(summary, action, body)
    for verb, action in (("pause", "pause_group"), ("resume", "resume_group")):
        paths[f"{s}/trigger-groups/{{group}}/{verb}"] = _post(
            f"{verb.capitalize()} a trigger group", action
        )
    return {
        "openapi": "3.1.0",
        "info": {"title": "celery-quartz", "version": "1"},
        "servers": [{"url": prefix or "/"}],
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
        "paths": paths,
    }
