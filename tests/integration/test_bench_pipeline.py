"""``bench/bench_pipeline.py`` runs from a checkout with one command, at a size small enough for
the suite: its own PostgreSQL and Redis, the worker-overhead (with the run history on and off)
and sustained scenarios with their tables, and every run's correctness check passing (each
message or occurrence started once, none missed, no fired row left). It asserts no speed. The
end-to-end scenario is left out: its stock ``celery beat`` baseline alone takes longer than the
rest together (about 35 s of 85 s here).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_bench_pipeline_runs_and_every_run_checks_out() -> None:
    command = [
        sys.executable,
        str(REPO / "bench" / "bench_pipeline.py"),
        "--scenarios=overhead,sustained",
        "--pools=prefork:2",
        "--firings=200",
        "--repeats=1",
        "--rates=20",
        "--stock-rates=",
        "--warmup=1",
        "--duration=3",
        "--timeout=120",
        "--history=on,off",
    ]
    done = subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, timeout=600, check=False
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    assert "correctness: every run OK" in done.stdout, output[-6000:]
    # A table per scenario: the ratio against the stock worker of the same run, the rate held.
    headings = (
        "hooked / stock",
        "on / off, median of rounds (goal ≥ 0.95)",
        "highest rate held with p99 <= 100 ms",
    )
    for heading in headings:
        assert heading in done.stdout, f"{heading!r} missing:\n{done.stdout[-6000:]}"
