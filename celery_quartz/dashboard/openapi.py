"""The OpenAPI 3.1 document of the HTTP API, served at ``/api/v1/openapi.json``: every
operation with its parameters, its request body, every status it answers with, and the shape
of each answer (the suite runs Schemathesis against it: an answer outside it fails)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from celery_quartz.dashboard.actions import MAX_DESCRIPTION_LENGTH, MAX_REPEAT_COUNT
from celery_quartz.dashboard.auth import WRITE_ACTIONS
from celery_quartz.dashboard.openapi_backfill import BACKFILL_BODY, BACKFILL_SCHEMAS
from celery_quartz.keys import MAX_KEY_LENGTH
from celery_quartz.overlap import OverlapPolicy
from celery_quartz.pausing import MAX_PAUSE_REASON
from celery_quartz.store.views import MAX_PAGE
from celery_quartz.triggers.base import MAX_PRIORITY, MIN_PRIORITY


def _nullable(kind: str, **more: Any) -> dict[str, Any]:
    return {"type": [kind, "null"], **more}


def _object(properties: dict[str, Any], **more: Any) -> dict[str, Any]:
    """An object with every one of ``properties`` required."""
    return {"type": "object", "properties": properties, "required": list(properties), **more}


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _list(name: str) -> dict[str, Any]:
    return {"type": "array", "items": _ref(name)}


_TIME = _nullable("string", format="date-time")
_STRING = {"type": "string"}
_OVERLAP_POLICIES = [policy.value for policy in OverlapPolicy]
_INTEGER = {"type": "integer"}
_BOOLEAN = {"type": "boolean"}
_JSON_OBJECT = {"type": "object"}

#: The shapes of the answers, as components.
SCHEMAS: dict[str, Any] = {
    "Error": _object(
        {
            "error": {
                "type": "object",
                "properties": {"code": _STRING, "message": _STRING, "field": _STRING},
                "required": ["code", "message"],
            }
        }
    ),
    "Key": _object({"group": _STRING, "name": _STRING}),
    "Outcome": _object(
        {
            "started_time": _TIME,
            "finished_time": _TIME,
            "succeeded": _nullable("boolean"),
            "error_type": _nullable("string"),
            "error_message": _nullable("string"),
            "duration": _nullable("number"),
            "consecutive_failures": _nullable("integer"),
        }
    ),
    "Trigger": _object(
        {
            "key": _ref("Key"),
            "job": {"oneOf": [_ref("Key"), {"type": "null"}]},
            "kind": _STRING,
            "state": _STRING,
            "task": _nullable("string"),
            "description": _nullable("string"),
            "priority": _INTEGER,
            "next_fire_time": _TIME,
            "previous_fire_time": _TIME,
            "start_time": _TIME,
            "end_time": _TIME,
            "times_triggered": _INTEGER,
            "calendar": _nullable("string"),
            "misfire_instruction": _INTEGER,
            "execution_group": _nullable("string"),
            "preferred_node": _nullable("string"),
            "preferred_node_auto": _BOOLEAN,
            "retry_policy": _nullable("string"),
            "overlap_policy": {"enum": _OVERLAP_POLICIES},
            "pause_when_retries_exhausted": _nullable("boolean"),
            "schedule": _JSON_OBJECT,
            "data": _JSON_OBJECT,
            "last_outcome": {"oneOf": [_ref("Outcome"), {"type": "null"}]},
            "error_reason": _nullable("string"),
            "pause": {"oneOf": [_ref("Pause"), {"type": "null"}]},
        }
    ),
    "Pause": _object(
        {"reason": _nullable("string"), "requested_by": _nullable("string"), "paused_at": _TIME}
    ),
    "TriggerEdit": _object(
        {
            "trigger": _ref("Trigger"),
            "changed": {"type": "object", "additionalProperties": {"type": "array"}},
            "dry_run": _BOOLEAN,
        }
    ),
    "TriggerPage": _object(
        {"items": _list("Trigger"), "next_after": _nullable("string")},
    ),
    "TriggerDetail": {
        "allOf": [
            _ref("Trigger"),
            _object(
                {
                    "upcoming_fire_times": {
                        "type": "array",
                        "items": {"type": "string", "format": "date-time"},
                    },
                    "paused_group": _BOOLEAN,
                }
            ),
        ]
    },
    "Job": _object(
        {
            "key": _ref("Key"),
            "task": _STRING,
            "description": _nullable("string"),
            "args": {"type": "array"},
            "kwargs": _JSON_OBJECT,
            "data": _JSON_OBJECT,
            "options": _JSON_OBJECT,
            "durable": _BOOLEAN,
            "requests_recovery": _BOOLEAN,
            "disallow_concurrent": _BOOLEAN,
            "persist_job_data": _BOOLEAN,
            # Seconds (docs/history.md#success-deadlines); null: no deadline of its own.
            "require_success_within": _nullable("number"),
            # Stored form ("n": none); null: the scheduler's default applies.
            "retry_policy": _nullable("string"),
        }
    ),
    "JobPage": _object({"items": _list("Job"), "next_after": _nullable("string")}),
    "JobDetail": {"allOf": [_ref("Job"), _object({"triggers": _list("Trigger")})]},
    "Firing": _object(
        {
            "fire_instance_id": _STRING,
            "trigger": _ref("Key"),
            "job": {"oneOf": [_ref("Key"), {"type": "null"}]},
            "state": _STRING,
            "instance_name": _STRING,
            "worker_name": _nullable("string"),
            "scheduled_time": _TIME,
            "fired_time": _TIME,
            "published_time": _TIME,
            "started_time": _TIME,
            "expires_time": _TIME,
            "priority": _INTEGER,
            "execution_group": _nullable("string"),
            "queue": _nullable("string"),
            "recovering": _BOOLEAN,
            "retry_attempt": _INTEGER,
            "refire_count": _INTEGER,
            "progress": {
                "oneOf": [
                    _object(
                        {
                            "percent": {"type": "number"},
                            "message": _nullable("string"),
                            "updated_at": _TIME,
                        }
                    ),
                    {"type": "null"},
                ]
            },
        }
    ),
    "FiringPage": _object({"items": _list("Firing"), "next_after": _nullable("string")}),
    "Node": _object(
        {
            "instance_name": _STRING,
            "kind": _STRING,
            "alive": _BOOLEAN,
            "last_checkin_time": _TIME,
            "checkin_interval": {"type": "number"},
            "started_time": _TIME,
            "clustered": _BOOLEAN,
            "hostname": _nullable("string"),
            "pid": _nullable("integer"),
            "status": _nullable("string"),
            "epoch": _nullable("integer"),
            "queues": {"type": ["array", "null"], "items": _STRING},
            "concurrency": _nullable("integer"),
        }
    ),
    "Nodes": _object({"nodes": _list("Node"), "leader": _nullable("string"), "epoch": _INTEGER}),
    "Group": _object(
        {
            "execution_group": _nullable("string"),
            "queue": _STRING,
            "max_concurrent": _nullable("integer"),
            "scope": _nullable("string"),
            "capacity": _nullable("integer"),
            "in_flight": _INTEGER,
            "held_back": _INTEGER,
            "parked": _BOOLEAN,
            "served": _nullable("boolean"),
        }
    ),
    "Unserved": _object(
        {
            "execution_group": _nullable("string"),
            "queue": _STRING,
            "node": _nullable("string"),
            "why": _STRING,
        }
    ),
    "Groups": _object({"items": _list("Group"), "unserved": _list("Unserved")}),
    "Owed": _object(
        {
            "overdue": _list("Trigger"),
            "overdue_count": _INTEGER,
            "blocked": _list("Trigger"),
            "blocked_count": _INTEGER,
            "errors": _list("Trigger"),
            "error_count": _INTEGER,
            "count_cap": _INTEGER,
            "parked_groups": _list("Group"),
            "dead_nodes": _list("Node"),
            "unserved": _list("Unserved"),
            "overdue_jobs": _list("OverdueJob"),
        }
    ),
    "OverdueJob": _object(
        {
            "key": _ref("Key"),
            "require_success_within": {"type": "number"},
            "last_success_time": _TIME,
            "last_run_time": _TIME,
            "last_result": _nullable("string"),
            "consecutive_failures": _INTEGER,
            "due_time": _TIME,
        }
    ),
    "RanAgain": _object(
        {
            "trigger": _ref("Key"),
            "arguments": {"enum": ["recorded", "current"]},
            "message": _STRING,
        }
    ),
    "Overview": {
        "allOf": [
            _ref("Nodes"),
            _object(
                {
                    "scheduler": _STRING,
                    "read_only": _BOOLEAN,
                    "groups": _list("Group"),
                    "owed": _ref("Owed"),
                    "paused_trigger_groups": {"type": "array", "items": _STRING},
                }
            ),
        ]
    },
    "Calendars": _object(
        {
            "items": {
                "type": "array",
                "items": _object(
                    {
                        "name": _STRING,
                        "type": _STRING,
                        "description": _nullable("string"),
                        "definition": _JSON_OBJECT,
                    }
                ),
            }
        }
    ),
    "Schedulers": _object(
        {
            "items": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "name": _STRING,
                        "store": _nullable("string"),
                        "scheduler": _STRING,
                        "nodes": {
                            "type": ["array", "null"],
                            "items": _object(
                                {"instance_name": _STRING, "kind": _STRING, "alive": _BOOLEAN}
                            ),
                        },
                        "error": _STRING,
                    },
                    "required": ["name", "store", "scheduler", "nodes"],
                },
            },
            "unreachable": {"type": "object", "additionalProperties": _STRING},
            "read_only": _BOOLEAN,
        }
    ),
    "Ok": _object({"ok": {"const": True}}),
    "Reset": _object({"reset": _INTEGER}),
    "Removed": _object({"removed": _BOOLEAN}),
    "Pin": _object({"preferred_node": _nullable("string"), "preferred_node_auto": _BOOLEAN}),
    "Fired": _object({"trigger": _ref("Key")}),
    "Scheduled": _object({"job": _ref("Key"), "trigger": _ref("Key"), "next_fire_time": _TIME}),
}

_NUMBER = _nullable("number")
_KEY_OR_NULL = {"oneOf": [_ref("Key"), {"type": "null"}]}
_PAGE_OF = {"next_after": _nullable("string")}
_BUCKET = _object(
    {
        "start": _TIME,
        "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
        **{
            f"{what}_{stat}": _NUMBER
            for what in ("duration", "start_lateness")
            for stat in ("p50", "p95", "max")
        },
    }
)
SCHEMAS.update(
    {
        "HistoryEntry": _object(
            {
                "history_id": _INTEGER,
                "event_time": _TIME,
                "result": _STRING,
                "fire_instance_id": _nullable("string"),
                "job": _KEY_OR_NULL,
                "trigger": _ref("Key"),
                "task_name": _nullable("string"),
                "task_id": _nullable("string"),
                "scheduled_fire_time": _TIME,
                "published_time": _TIME,
                "started_time": _TIME,
                "finished_time": _TIME,
                "duration": _NUMBER,
                "start_lateness": _NUMBER,
                "error_type": _nullable("string"),
                "error_message": _nullable("string"),
                "worker": _nullable("string"),
                "scheduler_instance": _nullable("string"),
                "retry_attempt": _INTEGER,
                "recovering": _BOOLEAN,
                "reason": _nullable("string"),
                "summary": _nullable("string"),
                "metrics": _nullable("object"),
                "args": _nullable("array"),
                "kwargs": _nullable("object"),
            }
        ),
        "HistoryPage": _object({"items": _list("HistoryEntry"), **_PAGE_OF}),
        "StatisticsBucket": _BUCKET,
        "Statistics": _object(
            {
                "job": _KEY_OR_NULL,
                "since": _TIME,
                "until": _TIME,
                "bucket": {"type": "number"},
                "buckets": _list("StatisticsBucket"),
                "total": _ref("StatisticsBucket"),
            }
        ),
        "RunStatus": _object(
            {
                "kind": _STRING,
                "key": _ref("Key"),
                "since": _TIME,
                "last_run_time": _TIME,
                "last_result": _nullable("string"),
                "last_success_time": _TIME,
                "consecutive_failures": _INTEGER,
                "runs": _INTEGER,
                "failures": _INTEGER,
                "require_success_within": _NUMBER,
                "overdue": _BOOLEAN,
            }
        ),
        "RunStatusPage": _object({"items": _list("RunStatus"), **_PAGE_OF}),
        "AuditEntry": _object(
            {
                "audit_id": _INTEGER,
                "event_time": _TIME,
                "principal": _STRING,
                "via": _STRING,
                "action": _STRING,
                "target_kind": _STRING,
                "target": _nullable("string"),
                "changes": {"type": ["object", "array", "null"]},
            }
        ),
        "AuditPage": _object({"items": _list("AuditEntry"), **_PAGE_OF}),
    }
)

_PAGE = [
    {
        "name": "limit",
        "in": "query",
        "schema": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE},
    },
    {
        "name": "after",
        "in": "query",
        "description": "The next_after of the previous page (a key, not an offset).",
        "schema": _STRING,
    },
]
_TRIGGER_FILTERS = [
    {"name": n, "in": "query", "schema": _STRING, "description": d}
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
    {"name": n, "in": "query", "schema": _STRING}
    for n in ("state", "instance_name", "worker_name", "execution_group")
]
_SCHEDULER = [{"name": "scheduler", "in": "path", "required": True, "schema": _STRING}]
_GROUP = [{"name": "group", "in": "path", "required": True, "schema": _STRING}]
_KEY = [*_GROUP, {"name": "name", "in": "path", "required": True, "schema": _STRING}]


def _error() -> dict[str, Any]:
    return {
        "description": "A refusal, naming the field at fault when there is one.",
        "content": {"application/json": {"schema": _ref("Error")}},
    }


def _answer(schema: str) -> dict[str, Any]:
    return {"description": "OK", "content": {"application/json": {"schema": _ref(schema)}}}


_KEY_PART = {"type": "string", "minLength": 1, "maxLength": MAX_KEY_LENGTH}
_DESCRIPTION = {"type": "string", "minLength": 1, "maxLength": MAX_DESCRIPTION_LENGTH}
_TIME_IN = {"type": "string", "format": "date-time"}
_SCHEDULE_BODY = {
    "type": "object",
    "required": ["job", "trigger"],
    "additionalProperties": False,
    "properties": {
        "job": {
            "type": "object",
            "required": ["name", "task"],
            "additionalProperties": False,
            "properties": {
                "name": _KEY_PART,
                "group": _KEY_PART,
                "task": {"type": "string", "description": "A registered (and allowed) task."},
                "args": {"type": "array"},
                "kwargs": _JSON_OBJECT,
                "data": _JSON_OBJECT,
                "description": _DESCRIPTION,
                "durable": _BOOLEAN,
                "requests_recovery": _BOOLEAN,
                "disallow_concurrent": _BOOLEAN,
                "persist_job_data": _BOOLEAN,
            },
        },
        "trigger": {
            "type": "object",
            "description": "Exactly one of cron, interval (seconds) or at (a time).",
            "additionalProperties": False,
            "oneOf": [{"required": ["cron"]}, {"required": ["interval"]}, {"required": ["at"]}],
            "properties": {
                "name": _KEY_PART,
                "group": _KEY_PART,
                "cron": {"type": "string", "minLength": 1},
                "time_zone": {"type": "string", "minLength": 1},
                "interval": {
                    "type": "number",
                    "exclusiveMinimum": 0,
                    "maximum": int(timedelta.max.total_seconds()),
                },
                "repeat_count": {"type": "integer", "minimum": -1, "maximum": MAX_REPEAT_COUNT},
                "at": _TIME_IN,
                "start_at": _TIME_IN,
                "end_at": _TIME_IN,
                "priority": {"type": "integer", "minimum": MIN_PRIORITY, "maximum": MAX_PRIORITY},
                "calendar": _KEY_PART,
                "execution_group": _KEY_PART,
                "preferred_node": _nullable("string"),
                "overlap_policy": {"enum": _OVERLAP_POLICIES},
                "description": _DESCRIPTION,
                "data": _JSON_OBJECT,
            },
        },
        "replace": _BOOLEAN,
    },
}


def _get(summary: str, answer: str, parameters: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "get": {
            "summary": summary,
            "parameters": parameters,
            "responses": {
                "200": _answer(answer),
                **{code: _error() for code in ("401", "403", "404", "422")},
            },
        }
    }


def _query(*names: tuple[str, str], **schemas: Any) -> list[dict[str, Any]]:
    """Query parameters (name, description), strings unless ``schemas`` says otherwise."""
    return [
        {"name": n, "in": "query", "description": text, "schema": schemas.get(n, _STRING)}
        for n, text in names
    ]


_HISTORY_FILTERS = _query(
    ("job_group", "With job_name: one job's rows."),
    ("job_name", "With job_group."),
    ("trigger_group", "With trigger_name: one trigger's rows (its retries and recoveries)."),
    ("trigger_name", "With trigger_group."),
    ("group", "Only the triggers of this group."),
    ("result", "Result names, comma-separated (succeeded, failed, misfired, ...)."),
    ("since", "From this time (ISO 8601; UTC without an offset), inclusive."),
    ("until", "Up to this time, exclusive."),
)


def _history_get(summary: str, answer: str, parameters: list[dict[str, Any]]) -> dict[str, Any]:
    """A read of the run history: a bad query parameter is a 400 naming it."""
    operation = _get(summary, answer, parameters)
    operation["get"]["responses"]["400"] = _error()
    return operation


def history_paths(s: str) -> dict[str, Any]:
    """The run history's reads (docs/api.md#the-run-history)."""
    return {
        f"{s}/history": _history_get(
            "Finished executions and occurrences not run, newest first",
            "HistoryPage",
            _SCHEDULER + _HISTORY_FILTERS + _PAGE,
        ),
        f"{s}/history/misfires": _history_get(
            "Occurrences owed and not run (misfired, expired, held, skipped), newest first",
            "HistoryPage",
            _SCHEDULER + _HISTORY_FILTERS + _PAGE,
        ),
        f"{s}/stats": _history_get(
            "Runs by result, duration and start-lateness percentiles, by bucket",
            "Statistics",
            _SCHEDULER
            + _query(
                ("job_group", "With job_name: one job's; else the whole scheduler's."),
                ("job_name", "With job_group."),
                ("window", "How far back: 90m, 24h, 7d, 30d (default 24h)."),
                ("bucket", "5m, 1h, 6h or 1d (default 1h)."),
                ("until", "The window's end (default now), rounded up to its bucket's end."),
                bucket={"type": "string", "enum": ["5m", "1h", "6h", "1d"]},
            ),
        ),
        f"{s}/job-status": _history_get(
            "Each job's runs in short, its success deadline and whether it is past it",
            "RunStatusPage",
            _SCHEDULER
            + _query(
                ("group", "Only the jobs of this group."),
                ("name", "With group: one job."),
                ("overdue", "true: only the jobs past their success deadline."),
                overdue={"type": "string", "enum": ["true", "false"]},
            )
            + _PAGE,
        ),
        f"{s}/audit": _history_get(
            "Changes to the schedule: who, through what, which action, on what",
            "AuditPage",
            _SCHEDULER
            + _query(
                ("principal", "Only this principal's changes."),
                ("via", "client, cli, api, dashboard, file, import, beat_schedule, scheduler."),
                ("action", "Only this action."),
                ("target", "Only changes to this target (GROUP.NAME)."),
                ("since", "From this time (ISO 8601), inclusive."),
                ("until", "Up to this time, exclusive."),
            )
            + _PAGE,
        ),
    }


def _post(
    summary: str,
    action: str,
    answer: str,
    parameters: list[dict[str, Any]],
    body: dict[str, Any] | None = None,
) -> dict[str, Any]:
    assert action in WRITE_ACTIONS
    operation: dict[str, Any] = {
        "summary": f"{summary} (policy action: {action})",
        "parameters": parameters,
        "responses": {
            "200": _answer(answer),
            **{code: _error() for code in ("400", "401", "403", "404", "409", "413", "415", "422")},
        },
    }
    if body is not None:
        operation["requestBody"] = {"content": {"application/json": {"schema": body}}}
    return {"post": operation}


_BACKFILL = "Run each past slot of a trigger in [from, to) once (dry_run: count, store nothing)"
SCHEMAS.update(BACKFILL_SCHEMAS)


def openapi_document(prefix: str) -> dict[str, Any]:
    """The API's description; ``prefix`` is the URL prefix it is served under."""
    s = "/api/v1/schedulers/{scheduler}"
    paths: dict[str, Any] = {
        "/api/v1/schedulers": _get(
            "The schedulers the caller may read, one row per cluster with its nodes, and the "
            "configured stores that do not answer",
            "Schedulers",
            [],
        ),
        s: _get("Overview: nodes, leader and epoch, groups, what is owed", "Overview", _SCHEDULER),
        f"{s}/nodes": _get(
            "Check-ins with liveness; the non-clustered leader", "Nodes", _SCHEDULER
        ),
        f"{s}/groups": _get(
            "Execution groups: limits, occupancy, held back, unserved", "Groups", _SCHEDULER
        ),
        f"{s}/owed": _get("What is owed and not happening", "Owed", _SCHEDULER),
        f"{s}/calendars": _get("Stored calendars", "Calendars", _SCHEDULER),
        f"{s}/firings": _get(
            "Fired instances in flight", "FiringPage", _SCHEDULER + _FIRING_FILTERS + _PAGE
        ),
        f"{s}/triggers": _get(
            "Triggers, keyset-paged", "TriggerPage", _SCHEDULER + _TRIGGER_FILTERS + _PAGE
        ),
        f"{s}/triggers/{{group}}/{{name}}": _get(
            "A trigger, its last outcome and its next fire times (calendar applied)",
            "TriggerDetail",
            [
                *_SCHEDULER,
                *_KEY,
                {
                    "name": "fire_times",
                    "in": "query",
                    "schema": {"type": "integer", "minimum": 0, "maximum": 100},
                },
            ],
        ),
        f"{s}/jobs": {
            **_get(
                "Jobs, keyset-paged",
                "JobPage",
                [
                    *_SCHEDULER,
                    *({"name": n, "in": "query", "schema": _STRING} for n in ("group", "task")),
                    *_PAGE,
                ],
            ),
            **_post(
                "Schedule a job with one trigger",
                "schedule_job",
                "Scheduled",
                _SCHEDULER,
                _SCHEDULE_BODY,
            ),
        },
        f"{s}/jobs/{{group}}/{{name}}": _get(
            "A job and its triggers", "JobDetail", _SCHEDULER + _KEY
        ),
    }
    paths.update(history_paths(s))
    repin = _object({"preferred_node": _nullable("string")}, additionalProperties=False)
    reason = {
        "type": "object",
        "properties": {"reason": {"type": "string", "maxLength": MAX_PAUSE_REASON}},
        "additionalProperties": False,
    }
    edit = {
        "type": "object",
        "properties": {
            "cron": _STRING,
            "time_zone": _STRING,
            "interval": {"type": "number", "exclusiveMinimum": 0},
            "rrule": _STRING,
            "priority": _INTEGER,
            "misfire_instruction": {"type": ["string", "integer"]},
            "overlap_policy": _STRING,
            "preferred_node": _nullable("string"),
            "execution_group": _nullable("string"),
            "calendar": _nullable("string"),
            "description": _nullable("string"),
            "dry_run": _BOOLEAN,
        },
        "additionalProperties": False,
    }
    for verb, action, summary, answer, body in (
        ("pause", "pause_trigger", "Pause a trigger, keeping the reason given", "Ok", reason),
        ("resume", "resume_trigger", "Resume a trigger", "Ok", None),
        ("reset", "reset_trigger", "Return a trigger in ERROR to its schedule", "Reset", None),
        ("unschedule", "unschedule", "Remove a trigger", "Removed", None),
        (
            "preferred-node",
            "repin_trigger",
            "Change a trigger's preferred node ('*': automatic, null: none)",
            "Pin",
            repin,
        ),
        (
            "edit",
            "edit_trigger",
            "Edit a trigger's details in place (dry_run: show, write nothing)",
            "TriggerEdit",
            edit,
        ),
        ("backfill", "backfill", _BACKFILL, "Backfill", BACKFILL_BODY),
    ):
        paths[f"{s}/triggers/{{group}}/{{name}}/{verb}"] = _post(
            summary, action, answer, _SCHEDULER + _KEY, body
        )
    for verb, action, summary, answer, body in (
        ("pause", "pause_job", "Pause every trigger of a job", "Ok", reason),
        ("resume", "resume_job", "Resume every trigger of a job", "Ok", None),
        (
            "trigger",
            "trigger_job",
            "Fire a job now, once",
            "Fired",
            {"type": "object", "properties": {"data": _JSON_OBJECT}, "additionalProperties": False},
        ),
        ("delete", "delete_job", "Delete a job and its triggers", "Removed", None),
        (
            "run-again",
            "trigger_job",
            "Fire a job now, once, with the arguments recorded on one of its history rows (the "
            "job's current ones when the row recorded none)",
            "RanAgain",
            {
                "type": "object",
                "properties": {
                    "history_id": _INTEGER,
                    "event_time": {"oneOf": [_INTEGER, {"type": "string", "format": "date-time"}]},
                },
                "required": ["history_id", "event_time"],
                "additionalProperties": False,
            },
        ),
    ):
        paths[f"{s}/jobs/{{group}}/{{name}}/{verb}"] = _post(
            summary, action, answer, _SCHEDULER + _KEY, body
        )
    for verb, action in (("pause", "pause_group"), ("resume", "resume_group")):
        paths[f"{s}/trigger-groups/{{group}}/{verb}"] = _post(
            f"{verb.capitalize()} a trigger group",
            action,
            "Ok",
            _SCHEDULER + _GROUP,
            reason if verb == "pause" else None,
        )
    paths[f"{s}/pause-all"] = _post(
        "Pause every trigger, and those stored later", "pause_all", "Ok", _SCHEDULER, reason
    )
    paths[f"{s}/resume-all"] = _post("Resume every trigger", "resume_all", "Ok", _SCHEDULER)
    paths["/api/v1/openapi.json"] = {
        "get": {
            "summary": "This document (served without a token)",
            "security": [],
            "responses": {
                "200": {"description": "OpenAPI 3.1", "content": {"application/json": {}}}
            },
        }
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "celery-quartz", "version": "1"},
        "servers": [{"url": prefix or "/"}],
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": SCHEMAS,
        },
        "security": [{"bearer": []}],
        "paths": paths,
    }
