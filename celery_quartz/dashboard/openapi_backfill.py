"""The OpenAPI document's backfill (docs/api.md#backfill): the request's body and the answer's
schema, which :mod:`celery_quartz.dashboard.openapi` adds to its own."""

from __future__ import annotations

from typing import Any

from celery_quartz.dashboard.actions import MAX_BACKFILL_SPACING

_KEY = {"$ref": "#/components/schemas/Key"}
_TIME = {"type": "string", "format": "date-time"}
_COUNT = {"type": "integer", "minimum": 0}

#: ``POST …/triggers/{group}/{name}/backfill``'s body.
BACKFILL_BODY: dict[str, Any] = {
    "type": "object",
    "required": ["from", "to"],
    "additionalProperties": False,
    "properties": {
        "from": {**_TIME, "description": "The range's start, inclusive (UTC without offset)."},
        "to": {**_TIME, "description": "The range's end, exclusive; not in the future."},
        "max_slots": {"type": "integer", "minimum": 1},
        "spacing": {"type": "number", "minimum": 0, "maximum": MAX_BACKFILL_SPACING},
        "include_succeeded": {"type": "boolean"},
        "dry_run": {"type": "boolean"},
    },
}

_SLOT = {
    "type": "object",
    "required": ["slot", "outcome", "fire_at", "firing_trigger"],
    "properties": {
        "slot": _TIME,
        "outcome": {
            "type": "string",
            "enum": ["scheduled", "already_scheduled", "already_succeeded"],
        },
        "fire_at": {"type": ["string", "null"], "format": "date-time"},
        "firing_trigger": {"oneOf": [_KEY, {"type": "null"}]},
    },
}

#: The answer's schema, by name.
BACKFILL_SCHEMAS: dict[str, Any] = {
    "Backfill": {
        "type": "object",
        "required": [
            "trigger",
            "from",
            "to",
            "dry_run",
            "slots_found",
            "scheduled",
            "already_scheduled",
            "already_succeeded",
            "slots",
        ],
        "properties": {
            "trigger": _KEY,
            "from": _TIME,
            "to": _TIME,
            "dry_run": {"type": "boolean"},
            "slots_found": _COUNT,
            "scheduled": _COUNT,
            "already_scheduled": _COUNT,
            "already_succeeded": _COUNT,
            "slots": {"type": "array", "items": _SLOT},
        },
    }
}
