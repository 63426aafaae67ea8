"""examples/election runs as documented: two non-clustered schedulers under the PostgreSQL
election, the leader killed, the standby taking over, every occurrence run exactly once."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.integration.processes import REPO


@pytest.mark.slow
def test_the_election_example_fails_over_and_runs_every_occurrence_once(pg_url: str) -> None:
    example = REPO / "examples" / "election"
    result = subprocess.run(
        [sys.executable, "demo.py", "--seconds", "12", "--store-url", pg_url],
        cwd=example,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    leader = re.search(r"^(replica-[ab]) \(pid \d+\) leads", result.stdout, re.M)
    assert leader is not None, result.stdout
    other = "replica-b" if leader.group(1) == "replica-a" else "replica-a"
    took = re.search(rf"^{other} took over ([\d.]+)s later", result.stdout, re.M)
    assert took is not None, result.stdout
    # The server frees a killed session's advisory lock at once: one retry interval (1 s).
    assert float(took.group(1)) <= 3.0
    assert "duplicates           0" in result.stdout
    assert "missing              0" in result.stdout
    assert "OK: every due occurrence ran exactly once across the failover" in result.stdout
