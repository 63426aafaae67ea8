"""The README's demo runs on the embedded default (SQLite, filesystem broker) and reports every
due occurrence executed exactly once, with a scheduler killed halfway."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.integration.processes import REPO


@pytest.mark.slow
def test_the_quickstart_demo_fires_every_occurrence_once() -> None:
    demo = REPO / "examples" / "quickstart"
    result = subprocess.run(
        [sys.executable, "demo.py", "--seconds", "12"],
        cwd=demo,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "duplicates           0" in result.stdout
    assert "missing              0" in result.stdout
    assert "OK: every due occurrence ran exactly once" in result.stdout
