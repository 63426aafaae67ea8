"""The quick start as the README shows it is the file that runs, and it runs with any broker."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "examples" / "quickstart"
APP_FILE = QUICKSTART / "proj" / "celery.py"


def test_the_readme_shows_the_quickstart_app_file_as_it_is() -> None:
    readme = (REPO / "README.md").read_text()
    section = readme.split("## A minimal project", 1)[1]
    shown = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert shown is not None, "README.md: no python block under 'A minimal project'"
    assert shown.group(1) == APP_FILE.read_text()


def test_no_broker_files_are_committed_in_the_examples() -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "examples"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    assert tracked, "git ls-files found nothing under examples/"
    assert [path for path in tracked if path.endswith(".exchange")] == []


def test_the_default_store_opens_when_the_broker_is_redis(tmp_path: Path) -> None:
    # The SQLite store's folder used to be created only for the filesystem broker: with Redis,
    # beat and the worker failed with "unable to open database file". The schema command opens
    # the store the same way and needs no broker connection.
    env = {
        **os.environ,
        "PYTHONPATH": str(QUICKSTART),
        "QUICKSTART_DIR": str(tmp_path),
        "BROKER_URL": "redis://127.0.0.1:1/0",
    }
    env.pop("QUARTZ_STORE_URL", None)
    result = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "proj", "quartz", "schema", "upgrade"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "var" / "quartz.db").is_file()
    assert not (tmp_path / "control").exists()
