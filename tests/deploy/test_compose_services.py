"""The compose file's services, started here as they would start in their containers: the same
commands and environment, with PostgreSQL and Redis the suite's own. The schema service upgrades
and exits 0; a scheduler and the two workers run the quickstart's firings, each group's on its own
worker; the dashboard reads the same store, read-only, under its prefix; the health checks, run as
Compose would run them, pass (and fail where they should); everything stops cleanly.

Two things differ from the containers: the ports. The scheduler's health endpoint and the
dashboard listen on free ports of this machine (each container has its own, fixed in the file),
given through the same variables the file sets, which the project and the health checks read."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.deploy import compose
from tests.services import free_port

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
    """The service's health check as Compose runs it: CMD-SHELL through ``sh -c``, CMD as is."""
    test = SERVICES[service]["healthcheck"]["test"]
    assert test[0] in ("CMD", "CMD-SHELL"), test
    argv = ["sh", "-c", test[1]] if test[0] == "CMD-SHELL" else test[1:]
    return subprocess.run(
        argv, env=env, cwd=env["QUICKSTART_DIR"], capture_output=True, text=True, timeout=60
    )


def http(url: str, token: str | None = None, method: str = "GET") -> tuple[int, Any]:
    """(status, JSON body) of a request, whatever the status."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    data = b"{}" if method == "POST" else None
    if data is not None:
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=2).close()
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False
    return True


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


@pytest.mark.slow
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
    ports = {
        "beat-1": {"QUARTZ_HEALTH_PORT": str(free_port())},
        "dashboard": {"QUARTZ_DASHBOARD_PORT": str(free_port())},
    }
    try:
        for name in ("beat-1", "worker-default", "worker-reindex", "dashboard"):
            envs[name] = {**container_env(name, tmp_path, pg_url, redis_url), **ports.get(name, {})}
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
        dashboard = f"http://127.0.0.1:{envs['dashboard']['QUARTZ_DASHBOARD_PORT']}"
        wait_for(lambda: answers(f"{dashboard}/quartz/"), 60, "the dashboard to listen")

        for name in procs:
            check = health_check(name, envs[name])
            assert check.returncode == 0, (name, check.stdout, check.stderr)

        # What the scheduler's check read: beat-1's own report, from its /healthz.
        healthz = f"http://127.0.0.1:{envs['beat-1']['QUARTZ_HEALTH_PORT']}/healthz"
        status, report = http(healthz)
        assert status == 200 and report["status"] in ("healthy", "degraded"), report
        assert report["data"]["instance"] == "beat-1" and report["data"]["status"] == "RUNNING"
        # It fails where nothing answers on the port.
        elsewhere = {**envs["beat-1"], "QUARTZ_HEALTH_PORT": str(free_port())}
        assert health_check("beat-1", elsewhere).returncode != 0

        # A worker's check fails for a node that does not answer.
        gone = {**envs["worker-default"], "WORKER_NAME": "gone"}
        assert health_check("worker-default", gone).returncode != 0

        # The dashboard: the store's scheduler behind its prefix, read-only, its token required.
        token = envs["dashboard"]["QUARTZ_DASHBOARD_TOKEN"]
        api = f"{dashboard}/quartz/api/v1"
        status, listing = http(f"{api}/schedulers", token)
        assert status == 200 and listing["read_only"] is True, listing
        assert "proj" in [item["name"] for item in listing["items"]], listing
        status, refused = http(f"{api}/schedulers/proj/trigger-groups/x/pause", token, "POST")
        assert (status, refused["error"]["code"]) == (403, "read_only"), refused
        wrong = {**envs["dashboard"], "QUARTZ_DASHBOARD_TOKEN": "not-the-token"}
        assert health_check("dashboard", wrong).returncode != 0
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes = {name: proc.wait(timeout=60) for name, proc in procs.items()}
    logs = {name: (tmp_path / f"{name}.log").read_text()[-3000:] for name in procs}
    # uvicorn shuts the dashboard down, then raises the SIGTERM it caught again (uvicorn >= 0.29),
    # so a clean stop ends by that signal, after its last log line.
    if codes.get("dashboard") == -signal.SIGTERM and logs["dashboard"].rstrip().endswith(
        f"Finished server process [{procs['dashboard'].pid}]"
    ):
        codes["dashboard"] = 0
    assert codes == dict.fromkeys(procs, 0), logs
