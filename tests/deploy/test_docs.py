"""The documentation site's generated pages: the settings reference is the settings' definition,
and links between repository files are pointed at the pages that hold them."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from celery_quartz.config import Settings

REPO = Path(__file__).resolve().parents[2]


def _hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_hooks", REPO / "tools" / "docs_hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


hooks = _hooks()


def test_the_settings_reference_lists_every_setting_with_its_default_and_meaning() -> None:
    docs = {d.key: d for d in hooks.settings_docs()}
    settings = [f for f in dataclasses.fields(Settings) if not f.metadata.get("internal")]
    assert set(docs) == {f"quartz_{f.name}" for f in settings}
    for field in settings:
        doc = docs[f"quartz_{field.name}"]
        assert doc.text, field.name
        if field.default is not dataclasses.MISSING:
            assert doc.default == repr(field.default)


def test_the_settings_reference_page_is_a_table_row_per_setting() -> None:
    page = hooks.settings_reference()
    assert "| `quartz_instance_id` | `str` | `'AUTO'` |" in page
    assert "| `quartz_misfire_threshold` | `float` | `60.0` |" in page
    assert "explicitly_set" not in page


def test_the_readme_links_to_docs_become_links_between_pages() -> None:
    text, linked = hooks.rewrite_links(
        "[a](docs/time.md#misfires) [b](docker-compose.yml) [c](https://x.org/a.md)", "index.md"
    )
    assert text == "[a](time.md#misfires) [b](source/docker-compose.yml.md) [c](https://x.org/a.md)"
    assert linked == {"docker-compose.yml"}


def test_a_docs_page_link_out_of_docs_points_at_the_mirrored_page() -> None:
    text, _ = hooks.rewrite_links("[r](../bench/RESULTS.md) [m](missing.md)", "clustering.md")
    # A link to nothing is left for the strict build to report.
    assert text == "[r](bench/RESULTS.md) [m](missing.md)"


def test_a_dot_file_gets_a_page_mkdocs_does_not_leave_out() -> None:
    text, linked = hooks.rewrite_links("[e](../.env.example)", "operations.md")
    assert text == "[e](source/_env.example.md)"
    assert linked == {".env.example"}


def test_links_in_code_blocks_are_left_alone() -> None:
    markdown = "```\n[a](docs/time.md)\n```\n"
    assert hooks.rewrite_links(markdown, "index.md")[0] == markdown


def test_the_readme_settings_table_names_every_setting() -> None:
    # The README keeps a short table for readers of the repository; the site's reference is
    # generated. Both must name the same settings.
    readme = (REPO / "README.md").read_text()
    table = readme.split("## Settings", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"^\| `(quartz_\w+)` \|", table, re.M))
    assert named == {d.key for d in hooks.settings_docs()}


def test_rest_roles_in_rendered_docstrings_become_plain_code() -> None:
    html = "Raises :class:<code>ValidationError</code>; see :func:<code>~cq.install</code>"
    assert hooks.on_page_content(html, None, None, None) == (
        "Raises <code>ValidationError</code>; see <code>cq.install</code>"
    )


# -- the Python API reference: every public name has a docstring ----------------------------


def test_every_public_name_the_api_reference_shows_has_a_docstring() -> None:
    assert hooks.undocumented_names() == []


def test_the_reference_check_names_a_public_member_without_a_docstring(tmp_path: Path) -> None:
    package = tmp_path / "refcheck"
    package.mkdir()
    (package / "__init__.py").write_text(
        '"""A package."""\n\n'
        "class Base:\n"
        '    """A base."""\n\n'
        "    def run(self) -> None:\n"
        '        """Run."""\n\n'
        "class Thing(Base):\n"
        '    """A thing."""\n\n'
        "    #: Documented by its comment.\n"
        "    size: int = 0\n"
        "    colour: str = ''\n\n"
        "    def run(self) -> None:  # documented by Base.run\n"
        "        pass\n\n"
        "    def stop(self) -> None:\n"
        "        pass\n\n"
        "    def _private(self) -> None:\n"
        "        pass\n"
    )
    page = "# API\n\n::: refcheck.Thing\n\n::: refcheck.Base\n    options:\n      members: []\n"
    missing = hooks.undocumented_names(page, search_paths=[str(tmp_path)])
    assert missing == ["refcheck.Thing.colour", "refcheck.Thing.stop"]


def test_the_docs_build_fails_naming_an_undocumented_name(monkeypatch: Any) -> None:
    from mkdocs.exceptions import PluginError

    monkeypatch.setattr(hooks, "undocumented_names", lambda: ["celery_quartz.Quartz.get_job"])
    with pytest.raises(PluginError, match=r"no docstring.*celery_quartz\.Quartz\.get_job"):
        hooks.on_pre_build({})
