"""The command the suite starts its beats and workers with is Celery's own, Flower's plugin left
out (``tests/integration/celery_command.py``); ``Processes.flower`` still has Flower."""

from __future__ import annotations

import subprocess
import sys

from tests.integration.processes import REPO


def _commands(*launcher: str) -> set[str]:
    """The subcommands ``--help`` lists."""
    done = subprocess.run(
        [sys.executable, "-m", *launcher, "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    listed = done.stdout.partition("Commands:")[2]
    return {line.split()[0] for line in listed.splitlines() if line.startswith("  ")}


def test_the_suites_command_is_celerys_without_flower() -> None:
    plain = _commands("celery")
    assert {"flower", "quartz", "worker", "beat"} <= plain
    assert _commands("tests.integration.celery_command") == plain - {"flower"}
