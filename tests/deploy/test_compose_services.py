"""The compose file's services, started here as they would start in their containers: the same
commands and environment, with PostgreSQL and Redis the suite's own. The schema service upgrades
and exits 0; a scheduler and the two workers run the quickstart's firings, each group's on its own
worker; the health checks, run as Compose would run them, pass; everything stops cleanly."""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from tests.deploy import compose

QUICKSTART = compose.REPO / "examples" / "quickstart"
SERVICES = compose.load()["services"]
VENV_BIN = str(Path(sys.executable).parent)


def container_env(service: str, tmp: Path, pg_url: str, redis_url: str) -> dict[str, str]:
    env = compose.environment(SERVICES[service])
    assert env["QUARTZ_STORE_URL"].startswith("postgresql+psycopg2://")
    env["QUARTZ_STORE_URL"] = pg_url
    env["BROKER_URL"] = redis_url
    return {
        **os.environ,
        **env,
        # What the image and the container provide: the project on PYTHONPATH, a HOSTNAME.
        "PYTHONPATH": str(QUICKSTART),
        "HOSTNAME": socket.gethostname(),
        "QUICKSTART_DIR": str(tmp),
        "PATH": VENV_BIN + os.pathsep + os.environ.get("PATH", ""),
    }


def health_check(service: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    test = SERVICES[service]["healthcheck"]["test"]
    assert test[0] == "CMD-SHELL", test
    return subprocess.run(
        ["sh", "-c", test[1]], env=env, cwd=env["QUICKSTART_DIR"], capture_output=True, text=True
    )


def wait_for(predicate, timeout: float, message: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {message}")


def executions(ledger: Path) -> set[tuple[str, str]]:
    """(task, worker node) of every execution the quickstart's tasks recorded."""
    if not ledger.exists():
        return set()
    with sqlite3.connect(ledger, timeout=30) as db:
        try:
            rows = db.execute("SELECT trigger_name, worker FROM ledger").fetchall()
        except sqlite3.OperationalError:  # the table is not created yet
            return set()
    return {(name, worker) for name, worker in rows}


def test_the_services_start_run_their_firings_pass_their_health_checks_and_stop(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    host = socket.gethostname()
    schema_env = container_env("schema", tmp_path, pg_url, redis_url)
    schema = subprocess.run(
        SERVICES["schema"]["command"],
        env=schema_env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert schema.returncode == 0, schema.stderr[-3000:]
    assert "empty ->" in schema.stdout

    procs: dict[str, subprocess.Popen[bytes]] = {}
    envs = {}
    try:
        for name in ("beat-1", "worker-default", "worker-reindex"):
            envs[name] = container_env(name, tmp_path, pg_url, redis_url)
            log = (tmp_path / f"{name}.log").open("wb")
            procs[name] = subprocess.Popen(
                SERVICES[name]["command"],
                env=envs[name],
                cwd=tmp_path,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        # Firings of the default queue on the default worker, of the group on the group's.
        wanted = {("refresh-cache", f"default@{host}"), ("reindex", f"reindex@{host}")}
        ledger = tmp_path / "var" / "ledger.db"
        wait_for(lambda: wanted <= executions(ledger), 90, "both workers to run firings")
        assert {w for n, w in executions(ledger) if n == "reindex"} == {f"reindex@{host}"}

        for name in procs:
            check = health_check(name, envs[name])
            assert check.returncode == 0, (name, check.stdout, check.stderr)
        # The scheduler's check fails for an instance that is not checked in.
        other = {**envs["beat-1"], "QUARTZ_INSTANCE_ID": "beat-9"}
        assert health_check("beat-1", other).returncode != 0
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes = {name: proc.wait(timeout=60) for name, proc in procs.items()}
    logs = {name: (tmp_path / f"{name}.log").read_text()[-3000:] for name in procs}
    assert codes == dict.fromkeys(procs, 0), logs
