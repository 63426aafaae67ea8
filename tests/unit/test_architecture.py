"""The package's shape, as docs/architecture.md states it: no import cycle between its modules,
and no module past 800 lines."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "celery_quartz"
MAX_LINES = 800


def _modules() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        if "migrations" in path.relative_to(PACKAGE).parts:
            continue
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        modules[name.removesuffix(".__init__")] = path
    return modules


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that ``path`` imports, lazily (inside a function) or not."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module in modules:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.add(submodule if submodule in modules else node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_itself_back_through_another() -> None:
    modules = _modules()
    graph = {name: _imports(path, modules) - {name} for name, path in modules.items()}
    assert _cycles(graph) == []


def test_the_domain_and_the_store_import_nothing_above_them() -> None:
    modules = _modules()
    above = {
        "celery_quartz.beat",
        "celery_quartz.worker",
        "celery_quartz.client",
        "celery_quartz.cli",
        "celery_quartz.loop",
        "celery_quartz.cluster",
        "celery_quartz.publisher",
        "celery_quartz.health",
    } | {name for name in modules if name.startswith("celery_quartz.dashboard")}
    lower = [name for name in modules if name.startswith("celery_quartz.store")] + [
        "celery_quartz.triggers",
        "celery_quartz.cron",
        "celery_quartz.calendars",
        "celery_quartz.retry",
        "celery_quartz.misfire",
        "celery_quartz.routing",
        "celery_quartz.limits",
    ]
    wrong = {name: _imports(modules[name], modules) & above for name in lower}
    assert {name: found for name, found in wrong.items() if found} == {}


def test_no_module_is_longer_than_800_lines() -> None:
    lengths = {name: len(path.read_text().splitlines()) for name, path in _modules().items()}
    assert {name: n for name, n in lengths.items() if n > MAX_LINES} == {}
