"""examples/service runs as documented: a three-node cluster on the embedded default (SQLite,
filesystem broker) where reports fire on a Helsinki cron, the re-index never overlaps, the ingest
runs only on its pinned worker and the flaky partner sync succeeds through its retry policy."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.integration.processes import REPO


@pytest.mark.slow
def test_the_service_example_keeps_every_promise() -> None:
    example = REPO / "examples" / "service"
    result = subprocess.run(
        [sys.executable, "demo.py", "--seconds", "16"],
        cwd=example,
        capture_output=True,
        text=True,
        timeout=240,
    )
    out = result.stdout
    assert result.returncode == 0, out[-12000:] + result.stderr[-3000:]
    assert "FAILED" not in out, out
    assert "loaded quartz_jobs.xml: jobs: 3 added" in out
    assert "[ok] no occurrence ran twice across the 3 schedulers" in out
    assert "[ok] more than one scheduler fired" in out
    assert re.search(r"reports\.nightly next fires \d{4}-\d\d-\d\d 02:00 EES?T = ", out), out
    assert re.search(r"\[ok\] every report preview due ran: (\d+) of \1 ", out), out
    assert re.search(r"\[ok\] re-index never overlapped: \d+ runs of 2 indexes", out), out
    ingest = re.search(r"\[ok\] ingest ran only on ingest@files-1: (\d+) of \1 runs", out)
    assert ingest is not None and int(ingest.group(1)) > 0, out
    files = r"\[ok\] every file dropped on files-1 was ingested there: (\d+) of \1"
    assert re.search(files, out), out
    assert "[ok] the flaky partner sync succeeded at retry 2 after 2 failures" in out
    story = r"partner-sync [\d:.]+: attempt 0 failed .*, attempt 1 failed .*, attempt 2 ok "
    assert re.search(story, out), out
    assert "OK: every check passed" in out
