"""``quartz_jobs.yaml``: the JSON document's model written as YAML (PyYAML, the ``yaml`` extra).

Read with PyYAML's safe loader (no Python objects, no tags beyond YAML's own), keeping the line
of every mapping and key so errors name it. Duplicate keys are refused; dates that YAML reads
as timestamps are accepted where a date and time is expected.
"""

from __future__ import annotations

from typing import Any

from celery_quartz.definitions.model import Where
from celery_quartz.errors import SchedulingFileError
from celery_quartz.scheduling_files.tree import Node

#: Deepest nesting read, as for JSON.
MAX_DEPTH = 64


def _yaml() -> Any:
    try:
        import yaml
    except ImportError:  # pragma: no cover - the extra is installed in development
        raise SchedulingFileError(
            "reading or writing YAML needs PyYAML: pip install 'celery-quartz[yaml]'"
        ) from None
    return yaml


def read_yaml(content: str | bytes, file: str) -> Node:
    """The document tree of a YAML scheduling file."""
    yaml = _yaml()
    try:
        # libyaml's composer when PyYAML has it: the same nodes and marks, several times faster.
        node = yaml.compose(content, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise Where(file, line).error(f"not valid YAML: {exc.problem or exc}") from None
    except (yaml.YAMLError, ValueError, RecursionError) as exc:
        raise Where(file).error(f"not valid YAML: {exc}") from None
    if node is None:
        raise Where(file).error("the document is empty")
    tree = _convert(yaml, yaml.SafeLoader(""), node, file, 0, set())
    if not isinstance(tree, Node):
        raise Where(file, node.start_mark.line + 1).error("the document must be a mapping")
    if "Quartz" in tree and isinstance(tree["Quartz"], Node):
        schedule = tree["Quartz"].get("Schedule")
        if not isinstance(schedule, Node):
            raise tree.at("Quartz").error("a Quartz section needs a Schedule mapping")
        return schedule
    return tree


def _convert(yaml: Any, loader: Any, node: Any, file: str, depth: int, seen: set[int]) -> Any:
    where = Where(file, node.start_mark.line + 1)
    if depth > MAX_DEPTH:
        raise where.error("the document nests too deep")
    if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
        # An alias is the same node met again; expanding aliases of aliases is how a small
        # file becomes an enormous document, so a scheduling file has none.
        if id(node) in seen:
            raise where.error("anchors and aliases (&, *) are not allowed in a scheduling file")
        seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        result = Node({}, where)
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise Where(file, key_node.start_mark.line + 1).error("a key must be a scalar")
            key = _scalar(yaml, loader, key_node, file)
            if not isinstance(key, str):
                key = str(key)
            if key in result:
                raise Where(file, key_node.start_mark.line + 1).error(
                    f"key {key!r} is given twice in one mapping"
                )
            result[key] = _convert(yaml, loader, value_node, file, depth + 1, seen)
            result.key_wheres[key] = Where(file, key_node.start_mark.line + 1)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [_convert(yaml, loader, item, file, depth + 1, seen) for item in node.value]
    return _scalar(yaml, loader, node, file)


def _scalar(yaml: Any, loader: Any, node: Any, file: str) -> Any:
    try:
        return loader.construct_object(node)
    except (yaml.YAMLError, ValueError, OverflowError) as exc:
        raise Where(file, node.start_mark.line + 1).error(f"not a YAML value: {exc}") from None


def write_yaml(tree: dict[str, Any]) -> str:
    """The export document as YAML (block style, keys in the schema's order)."""
    yaml = _yaml()
    text: str = yaml.safe_dump(
        tree, sort_keys=False, allow_unicode=True, default_flow_style=False, width=100
    )
    return text
