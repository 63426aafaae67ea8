"""Every relative link of the README and of docs/ points to a file that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# Pages the docs site generates at build time (tools/docs_hooks.py).
GENERATED = {REPO / "docs" / "settings.md"}
# [text](target) outside code: a target with no scheme, up to an optional #anchor.
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.DOTALL | re.MULTILINE)
CODE = re.compile(r"`[^`\n]*`")


def relative_links(page: Path) -> list[str]:
    text = CODE.sub("", FENCE.sub("", page.read_text()))
    targets = (match.group(1) for match in LINK.finditer(text))
    return [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


def test_the_pages_have_relative_links_to_check() -> None:
    assert sum(len(relative_links(page)) for page in PAGES) > 20


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_points_to_an_existing_file(page: Path) -> None:
    broken = [
        target
        for target in relative_links(page)
        if not (page.parent / target.split("#", 1)[0]).exists()
        and (page.parent / target.split("#", 1)[0]).resolve() not in GENERATED
    ]
    assert broken == [], f"{page.relative_to(REPO)}: links to missing files"
