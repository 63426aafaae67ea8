"""The package's shape, as docs/architecture.md states it: no import cycle between its modules,
no module past 800 lines and no class past 400, and light modules that stay light when
imported."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "celery_quartz"
MAX_LINES = 800
MAX_CLASS_LINES = 400


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


#: The layers, from the bottom up, as docs/architecture.md draws them: every module of the
#: package is in one, by the longest prefix of its name listed here. A module imports only from
#: its own layer and those below it.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        # Decides, with no database: among it the definitions the store loads and the settings
        # it is opened from.
        "domain",
        (
            "affinity",
            "audit",
            "backfill",
            "calendars",
            "celery_schedules",
            "clock",
            "config",
            "context",
            "cron",
            "definitions",
            "editing",
            "errors",
            "firing",
            "history",
            "hooks",
            "job",
            "keys",
            "limits",
            "liveness",
            "misfire",
            "overlap",
            "pausing",
            "retry",
            "routing",
            "table_prefix",
            "triggers",
            "tz",
        ),
    ),
    ("store", ("store",)),
    (
        "engine",
        (
            "cluster",
            "consumers",
            "elections",
            "health",
            "history_sweep",
            "leadership",
            "lifecycle",
            "loop",
            "observability",
            # The store's views as JSON, shared by the CLI and the dashboard (below both).
            "presentation",
            "publisher",
        ),
    ),
    (
        # Plug into Celery or face the user: what reads files, sources and Celery's configuration.
        "adapters",
        (
            "",  # the package root, which exports the public names lazily
            "beat",
            "beat_schedule",
            "cli",
            "cli_backfill",
            "cli_history",
            "cli_ops",
            "client",
            "client_backfill",
            "client_history",
            "dashboard",
            "filesystem_broker",
            "importers",
            "scheduling_files",
            "worker",
        ),
    ),
]


def _layer(module: str) -> int | None:
    """The index in :data:`LAYERS` of ``module``'s layer (None: in none)."""
    relative = module.removeprefix("celery_quartz").removeprefix(".")
    best: tuple[int, int] | None = None
    for index, (_name, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            within = relative == prefix or (prefix and relative.startswith(f"{prefix}."))
            if within and (best is None or len(prefix) > best[0]):
                best = (len(prefix), index)
    return None if best is None else best[1]


def test_every_module_is_in_a_layer() -> None:
    assert [name for name in _modules() if _layer(name) is None] == []


def test_no_module_imports_a_layer_above_its_own() -> None:
    """The store imports neither the scheduling files' adapter nor the engine, the settings
    import no store, the domain imports neither: imports point down."""
    modules = _modules()
    upward = {
        name: sorted(
            f"{other} ({LAYERS[_layer(other) or 0][0]})"
            for other in _imports(path, modules)
            if (_layer(other) or 0) > (_layer(name) or 0)
        )
        for name, path in modules.items()
    }
    assert {name: found for name, found in upward.items() if found} == {}


def test_no_module_is_longer_than_800_lines() -> None:
    lengths = {name: len(path.read_text().splitlines()) for name, path in _modules().items()}
    assert {name: n for name, n in lengths.items() if n > MAX_LINES} == {}


def test_no_class_is_longer_than_400_lines() -> None:
    """A role is an object one can hold in one's head: a class past 400 lines holds two."""
    lengths = {
        f"{name}.{node.name}": node.end_lineno - node.lineno + 1
        for name, path in _modules().items()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef) and node.end_lineno is not None
    }
    assert {name: n for name, n in lengths.items() if n > MAX_CLASS_LINES} == {}


def test_the_sql_stores_roles_are_composed_not_inherited() -> None:
    """Each role of the SQL store is an object of its own: no class there inherits another of
    them (only the role interfaces), and none calls another object's private helpers
    (``self.ends._x``): what two roles share is public on a shared object."""
    sql = {
        name: path
        for name, path in _modules().items()
        if name.startswith("celery_quartz.store.sql")
    }
    trees = {name: ast.parse(path.read_text()) for name, path in sql.items()}
    classes = {
        node.name
        for tree in trees.values()
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
    }
    inherited = {
        f"{name}.{node.name}({base.id})"
        for name, tree in trees.items()
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        for base in node.bases
        if isinstance(base, ast.Name) and base.id in classes
    }
    borrowed = {
        f"{name}:{node.lineno}: self.{node.value.attr}.{node.attr}"
        for name, tree in trees.items()
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and isinstance(node.value, ast.Attribute)
        and isinstance(node.value.value, ast.Name)
        and node.value.value.id == "self"
    }
    assert (inherited, borrowed) == (set(), set())


@pytest.mark.parametrize("module", ["celery_quartz.cron", "celery_quartz.triggers"])
def test_importing_the_time_model_loads_neither_the_store_nor_celerys_worker(module: str) -> None:
    """The package root exports its public names lazily: a light module stays light."""
    probe = (
        f"import sys, {module}\n"
        "heavy = ('sqlalchemy', 'celery', 'celery.worker', 'celery_quartz.store', "
        "'celery_quartz.client', 'celery_quartz.worker')\n"
        "print(','.join(m for m in heavy if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""


def test_the_public_names_are_importable_from_the_package_root() -> None:
    import celery_quartz

    missing = [name for name in celery_quartz.__all__ if getattr(celery_quartz, name, None) is None]
    assert missing == []
    assert set(celery_quartz.__all__) <= set(dir(celery_quartz))


def _calls(tree: ast.AST) -> list[ast.Call]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)]


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return node.id if isinstance(node, ast.Name) else ""


def test_time_is_read_from_the_clock_alone() -> None:
    """STYLE: every component reads ``clock.now()``; only ``clock.py`` reads the machine's
    clock for a time (durations from ``time.monotonic`` are not times, nor is the uniquifier of
    a generated instance id)."""
    wall = {"time.time", "datetime.now", "datetime.utcnow", "date.today"}
    found = {
        name: sorted({_dotted(call.func) for call in _calls(ast.parse(path.read_text()))} & wall)
        for name, path in _modules().items()
        if name != "celery_quartz.clock"
    }
    assert {name: calls for name, calls in found.items() if calls} == {}


def test_only_the_firing_header_knows_the_headers_keys() -> None:
    """The worker, the context, the publisher and observability read and write a firing's
    message header through ``firing.FiringHeader``: none of them names one of its keys."""
    from celery_quartz.firing import Firing, FiringHeader
    from celery_quartz.keys import JobKey, TriggerKey

    firing = Firing(
        fire_instance_id="f",
        scheduler_name="s",
        task="t",
        args=[],
        kwargs={},
        options={},
        job_key=JobKey("j"),
        trigger_key=TriggerKey("t"),
        scheduled_millis=0,
        fired_millis=0,
        persist_job_data=True,
        origin_trigger_key=TriggerKey("o"),
    )
    keys = set(FiringHeader.of(firing).fields)
    modules = _modules()
    readers = [
        name
        for name in modules
        if name.startswith(("celery_quartz.worker", "celery_quartz.observability"))
        or name in ("celery_quartz.context", "celery_quartz.publisher")
    ]
    named: dict[str, set[str]] = {}
    for name in readers:
        for node in ast.walk(ast.parse(modules[name].read_text())):
            if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
                key = node.slice.value
            elif isinstance(node, ast.Call) and _dotted(node.func).endswith(".get") and node.args:
                key = getattr(node.args[0], "value", None)
            else:
                continue
            if key in keys:
                named.setdefault(name, set()).add(key)
    assert named == {}
