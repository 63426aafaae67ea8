"""``quartz_jobs.json``: the scheduling file as JSON, standalone or as the ``Quartz:Schedule``
section of an ``appsettings.json``.

JSON has no line numbers once parsed, so a syntax error names json's own line and column and
every other error names the path within the document (``$.Triggers[2].Cron.Expression``).
Duplicate keys are refused, as are ``NaN`` and ``Infinity``.
"""

from __future__ import annotations

import json
from typing import Any

from celery_quartz.definitions.model import Where
from celery_quartz.errors import ValidationError
from celery_quartz.scheduling_files.tree import Node

#: Deepest nesting read (job data included): far beyond what a schedule needs.
MAX_DEPTH = 64


def read_json(content: str | bytes, file: str) -> Node:
    """The document tree of a JSON scheduling file."""
    if isinstance(content, bytes):
        try:
            content = content.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise Where(file).error(f"not UTF-8: {exc}") from None

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for key, value in items:
            if key in result:
                raise _Duplicate(key)
            result[key] = value
        return result

    def no_constant(name: str) -> Any:
        raise ValidationError(f"{name} is not JSON")

    try:
        value = json.loads(content, object_pairs_hook=pairs, parse_constant=no_constant)
    except _Duplicate as exc:
        raise Where(file).error(f"key {exc.args[0]!r} is given twice in one object") from None
    except json.JSONDecodeError as exc:
        raise Where(file, exc.lineno).error(
            f"not valid JSON: {exc.msg} (column {exc.colno})"
        ) from None
    except (ValueError, RecursionError) as exc:
        raise Where(file).error(f"not valid JSON: {exc}") from None
    path = "$"
    if isinstance(value, dict) and "Quartz" in value:
        # An appsettings.json: the Quartz:Schedule section.
        quartz = value["Quartz"]
        if not isinstance(quartz, dict) or not isinstance(quartz.get("Schedule"), dict):
            raise Where(file, path="$.Quartz").error(
                "an appsettings.json needs a Quartz:Schedule section (an object)"
            )
        value, path = quartz["Schedule"], "$.Quartz.Schedule"
    tree = _wrap(value, file, path, 0)
    if not isinstance(tree, Node):
        raise Where(file, path=path).error(
            f"the document must be an object, got {type(value).__name__}"
        )
    return tree


class _Duplicate(Exception):
    pass


def _wrap(value: Any, file: str, path: str, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise Where(file, path=path).error("the document nests too deep")
    if isinstance(value, dict):
        node = Node({}, Where(file, path=path))
        for key, item in value.items():
            child = f"{path}.{key}"
            node[key] = _wrap(item, file, child, depth + 1)
            node.key_wheres[key] = Where(file, path=child)
        return node
    if isinstance(value, list):
        return [_wrap(item, file, f"{path}[{i}]", depth + 1) for i, item in enumerate(value)]
    return value


def write_json(tree: dict[str, Any]) -> str:
    """The export document as JSON (two-space indent, keys in the schema's order)."""
    return json.dumps(tree, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
