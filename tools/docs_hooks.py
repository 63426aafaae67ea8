"""MkDocs hooks (mkdocs.yml ``hooks:``): pages made at build time, so they cannot drift.

- ``settings.md``: the settings reference, generated from the one definition of the settings,
  :class:`celery_quartz.config.Settings` (each field, its type, its default, its ``#:`` comment).
- ``index.md``: the repository's README.md; ``bench/README.md`` and ``bench/RESULTS.md`` as is.
- ``source/<path>.md``: a repository file that a page links to (``../docker-compose.yml``),
  shown as code.

The build fails when a public name the Python API reference (``docs/api.md``) shows has no
docstring (:func:`undocumented_names`): mkdocstrings would leave it out without a word. A ``#:``
comment above an attribute is its docstring (:class:`CommentDocstrings`, a griffe extension that
mkdocs.yml gives mkdocstrings), as it is for Sphinx.

Links between repository files are rewritten to the pages that hold them, so README.md and
docs/*.md keep links that work on the repository host and in the site. A link to a file that
does not exist is left as it is, and ``mkdocs build --strict`` fails on it.
"""

from __future__ import annotations

import ast
import dataclasses
import posixpath
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "celery_quartz" / "config.py"

#: Repository Markdown files published as pages, by their path in the site.
MIRRORED = {
    "README.md": "index.md",
    "bench/README.md": "bench/README.md",
    "bench/RESULTS.md": "bench/RESULTS.md",
}
SETTINGS_PAGE = "settings.md"
SOURCE_DIR = "source"
_LINK = re.compile(r"(\]\()([^)\s#]+)(#[^)\s]*)?(\))")
_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*:")
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.DOTALL | re.MULTILINE)


# -- the settings reference ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SettingDoc:
    key: str
    type: str
    default: str
    note: str  # a comment on the field's own line: what the default means
    text: str


def _inline(text: str) -> str:
    """reST inline markup of the comments (``code``, :role:`target`) as Markdown code."""
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", text)
    return text.replace("``", "`")


def settings_docs() -> list[SettingDoc]:
    """Every ``quartz_*`` setting, from the ``Settings`` dataclass and its source's comments.

    Fields marked ``internal`` in their metadata are bookkeeping, not settings (``repr=False``
    only keeps a secret out of the settings' repr). A setting without a ``#:`` comment is an
    error: the reference must say what each one means.
    """
    from celery_quartz.config import Settings

    source = CONFIG.read_text()
    lines = source.splitlines()
    cls = next(
        node
        for node in ast.parse(source).body
        if isinstance(node, ast.ClassDef) and node.name == "Settings"
    )
    declared: dict[str, ast.AnnAssign] = {
        node.target.id: node
        for node in cls.body
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
    }
    docs = []
    for field in dataclasses.fields(Settings):
        if field.metadata.get("internal"):
            continue
        node = declared[field.name]
        comment: list[str] = []
        number = node.lineno - 2  # the line above, 0-based
        while number >= 0 and lines[number].strip().startswith("#:"):
            comment.insert(0, lines[number].strip()[2:].strip())
            number -= 1
        if not comment:
            raise ValueError(f"celery_quartz/config.py: Settings.{field.name} has no #: comment")
        own_line = lines[node.lineno - 1]
        note = own_line.split("#", 1)[1].strip() if "#" in own_line else ""
        missing = field.default is dataclasses.MISSING
        default = "(computed)" if missing else repr(field.default)
        docs.append(
            SettingDoc(
                key=f"quartz_{field.name}",
                type=ast.unparse(node.annotation),
                default=default,
                note=_inline(note),
                text=_inline(" ".join(comment)),
            )
        )
    return docs


def settings_reference() -> str:
    rows = [
        f"| `{d.key}` | `{d.type}` | `{d.default}`{' (' + d.note + ')' if d.note else ''} "
        f"| {d.text} |"
        for d in settings_docs()
    ]
    return "\n".join(
        [
            "# Settings reference",
            "",
            "Every `quartz_*` setting, read from Celery's `app.conf` beside Celery's own.",
            "This page is generated when the site is built, from the settings' one definition",
            "(`celery_quartz.config.Settings`): the names, types, defaults and descriptions",
            "below are that class's. Values are checked when a scheduler, worker or client",
            "starts, and a bad one is refused naming the setting.",
            "",
            "```python",
            'app.conf.quartz_store_url = "postgresql+psycopg2://db/proj"',
            'app.conf.quartz_instance_id = os.environ.get("QUARTZ_INSTANCE_ID", "AUTO")',
            "```",
            "",
            "| setting | type | default | meaning |",
            "| --- | --- | --- | --- |",
            *rows,
            "",
        ]
    )


# -- links between repository files ---------------------------------------------------------


def _repo_path(src_uri: str) -> str:
    """The repository path of the file a site page was made from."""
    for repo_path, site_path in MIRRORED.items():
        if site_path == src_uri:
            return repo_path
    return posixpath.join("docs", src_uri)


def _site_path(repo_path: str) -> str | None:
    """The site page holding a repository file, or None when the file does not exist."""
    if repo_path in MIRRORED:
        return MIRRORED[repo_path]
    if repo_path.startswith("docs/"):
        return repo_path[len("docs/") :]
    if (REPO / repo_path).is_file():
        return _source_page_path(repo_path)
    return None


def _source_page_path(repo_path: str) -> str:
    # MkDocs leaves out files whose name starts with a dot: .env.example is shown as _env.example.
    parts = [f"_{part[1:]}" if part.startswith(".") else part for part in repo_path.split("/")]
    return f"{SOURCE_DIR}/{'/'.join(parts)}.md"


def rewrite_links(markdown: str, src_uri: str) -> tuple[str, set[str]]:
    """``markdown`` of the page ``src_uri`` with its links to repository files pointed at the
    pages holding them; also the repository files (outside docs/) it links to."""
    here = posixpath.dirname(_repo_path(src_uri))
    linked: set[str] = set()

    def rewrite(match: re.Match[str]) -> str:
        target = match.group(2)
        if _SCHEME.match(target) or target.startswith("/"):
            return match.group(0)
        repo_path = posixpath.normpath(posixpath.join(here, target))
        site_path = _site_path(repo_path)
        if site_path is None or repo_path.startswith(".."):
            return match.group(0)  # broken: strict mode reports it
        if site_path.startswith(SOURCE_DIR + "/"):
            linked.add(repo_path)
        relative = posixpath.relpath(site_path, posixpath.dirname(src_uri) or ".")
        return f"{match.group(1)}{relative}{match.group(3) or ''}{match.group(4)}"

    # Fenced code is left alone: a link-like text in a code block is not a link.
    pieces, last = [], 0
    for fence in _FENCE.finditer(markdown):
        pieces.append(_LINK.sub(rewrite, markdown[last : fence.start()]))
        pieces.append(fence.group(0))
        last = fence.end()
    pieces.append(_LINK.sub(rewrite, markdown[last:]))
    return "".join(pieces), linked


def source_page(repo_path: str) -> str:
    language = {".yml": "yaml", ".yaml": "yaml", ".py": "python", ".toml": "toml"}.get(
        Path(repo_path).suffix, ""
    )
    if Path(repo_path).name == "Dockerfile":
        language = "dockerfile"
    text = (REPO / repo_path).read_text()
    return f"# `{repo_path}`\n\n````{language}\n{text}````\n"


# -- the Python API reference: every public name documented ---------------------------------

API_PAGE = REPO / "docs" / "api.md"
_DIRECTIVE = re.compile(r"^::: (\S+)((?:\n {4}.*)*)", re.MULTILINE)
_MEMBERS = re.compile(r"^\s+members:\s*\[(.*)\]", re.MULTILINE)

try:
    import griffe
except ImportError:  # the docs extra is not installed: nothing here is used
    griffe = None  # type: ignore[assignment]


class CommentDocstrings(griffe.Extension if griffe else object):  # type: ignore[misc]
    """A griffe extension: the ``#:`` comment lines right above an attribute (the package's way
    to document a dataclass field, an enum member or a constant) are its docstring; a member
    that overrides a documented one of a base class (a trigger kind's ``detail``) has the base's
    docstring, as Sphinx's ``autodoc_inherit_docstrings`` gives it: the contract is said once."""

    def on_package(self, *, pkg: Any, **kwargs: Any) -> None:
        for cls in _classes(pkg):
            for name, member in cls.members.items():
                if member.is_alias or member.docstring is not None:
                    continue
                for base in _bases(cls):
                    inherited = base.members.get(name)
                    if inherited is not None and not inherited.is_alias and inherited.docstring:
                        member.docstring = griffe.Docstring(
                            inherited.docstring.value, parent=member
                        )
                        break

    def on_attribute_instance(self, *, attr: Any, **kwargs: Any) -> None:
        if attr.docstring is not None or not attr.lineno or attr.filepath is None:
            return
        if attr.filepath not in attr.lines_collection:
            return
        lines = attr.lines_collection[attr.filepath]
        comment: list[str] = []
        number = attr.lineno - 2  # the line above, 0-based
        while number >= 0 and lines[number].strip().startswith("#:"):
            comment.insert(0, lines[number].strip()[2:].strip())
            number -= 1
        if comment:
            attr.docstring = griffe.Docstring(
                "\n".join(comment), lineno=number + 2, endlineno=attr.lineno - 1, parent=attr
            )


def _classes(obj: Any) -> Iterator[Any]:
    for member in obj.members.values():
        if member.is_alias:
            continue
        if member.is_class:
            yield member
        if member.is_class or member.is_module:
            yield from _classes(member)


def _bases(cls: Any) -> list[Any]:
    try:
        return list(cls.mro())
    except Exception:  # a base outside the package (enum.Enum, celery's Scheduler)
        return []


def undocumented_names(page: str | None = None, search_paths: Sequence[str] = ()) -> list[str]:
    """Every public name the API reference shows that has no docstring: each ``:::`` object of
    ``page`` (docs/api.md by default) and each public member mkdocstrings lists under it (those
    defined there, only those of ``members:`` when the directive names them)."""
    if griffe is None:
        raise RuntimeError("the API reference check needs griffe (pip install -e '.[docs]')")
    page = API_PAGE.read_text() if page is None else page
    loader = griffe.GriffeLoader(
        search_paths=[*search_paths, str(REPO)],
        extensions=griffe.load_extensions(CommentDocstrings),
    )
    missing: list[str] = []

    def walk(obj: Any, path: str, members: list[str] | None = None) -> None:
        if not obj.docstring:
            missing.append(path)
        if not (obj.is_class or obj.is_module):
            return
        for name, member in obj.members.items():
            if name.startswith("_") or member.is_alias:
                continue  # private, or imported from elsewhere (documented where it is defined)
            if members is None or name in members:
                walk(member, f"{path}.{name}")

    packages: dict[str, Any] = {}
    for identifier, options in _DIRECTIVE.findall(page):
        package, _, rest = identifier.partition(".")
        if package not in packages:
            packages[package] = loader.load(package)
        obj = packages[package]
        if rest:
            obj = obj[rest]
        if obj.is_alias:
            obj = obj.final_target
        listed = _MEMBERS.search(options)
        members = [m.strip() for m in listed.group(1).split(",")] if listed else None
        walk(obj, identifier, members)
    return missing


# -- the hooks ------------------------------------------------------------------------------


def on_pre_build(config: Any) -> None:
    from mkdocs.exceptions import PluginError

    missing = undocumented_names()
    if missing:
        raise PluginError(
            f"{API_PAGE.relative_to(REPO)}: {len(missing)} public name(s) have no docstring, "
            f"so the API reference would leave them out: {', '.join(missing)}"
        )


def _all_repo_links(config: Any) -> set[str]:
    pages = {posixpath.join("docs", p.name): p for p in (REPO / "docs").glob("*.md")}
    linked: set[str] = set()
    for repo_path in [*pages, *MIRRORED]:
        site_path = _site_path(repo_path) or repo_path
        _, found = rewrite_links((REPO / repo_path).read_text(), site_path)
        linked |= found
    return linked


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File, InclusionLevel

    def add(src_uri: str, content: str, in_nav: bool = True) -> None:
        # Source pages are reached by links only; every other page must be in the nav (strict
        # mode reports one that is not).
        inclusion = InclusionLevel.UNDEFINED if in_nav else InclusionLevel.NOT_IN_NAV
        files.append(File.generated(config, src_uri, content=content, inclusion=inclusion))

    add(SETTINGS_PAGE, settings_reference())
    for repo_path, site_path in MIRRORED.items():
        add(site_path, (REPO / repo_path).read_text())
    for repo_path in sorted(_all_repo_links(config)):
        add(_source_page_path(repo_path), source_page(repo_path), in_nav=False)
    return files


_ROLE_HTML = re.compile(r":(?:class|func|meth|mod|attr|exc|data|obj):(<code>)~?")


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    # Docstrings use reST roles (:class:`X`); rendered as Markdown they read ":class:X".
    return _ROLE_HTML.sub(r"\1", html)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if page.file.src_uri.startswith(SOURCE_DIR + "/") or page.file.src_uri == SETTINGS_PAGE:
        return markdown
    return rewrite_links(markdown, page.file.src_uri)[0]
