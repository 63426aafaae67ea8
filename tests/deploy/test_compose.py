"""docker-compose.yml: valid against the Compose specification's schema, every variable from
.env.example, no secret written in it, every command and health check a real Celery command with
real options, and the settings each service's environment gives are the ones the topology needs.

Docker is not needed: the schema is the Compose specification's own (vendored by check-jsonschema),
and the commands run here with ``--help`` against the quickstart project the image holds.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from celery.utils.imports import symbol_by_name

from tests.deploy import compose

REPO = compose.REPO
QUICKSTART = REPO / "examples" / "quickstart"
# What the image sets (Dockerfile): the project is on PYTHONPATH.
IMAGE_ENV = {"PYTHONPATH": str(QUICKSTART)}

SERVICES = compose.load()["services"]
APP_SERVICES = {name: s for name, s in SERVICES.items() if s.get("image") == "celery-quartz:local"}
BEATS = {name: s for name, s in APP_SERVICES.items() if s["command"][3:4] == ["beat"]}
WORKERS = {name: s for name, s in APP_SERVICES.items() if s["command"][3:4] == ["worker"]}
DASHBOARD = SERVICES["dashboard"]


def test_the_compose_file_is_valid_against_the_compose_specification() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "check_jsonschema",
            "--builtin-schema",
            "vendor.compose-spec",
            str(compose.COMPOSE_FILE),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_variable_comes_from_env_example_and_each_is_required_or_defaulted() -> None:
    text = compose.COMPOSE_FILE.read_text()
    assert compose.variables(text) <= set(compose.env_example())
    with pytest.raises(compose.UndefinedVariable):
        compose.load({})  # without .env, compose refuses to start rather than run with blanks


def test_no_secret_is_written_in_the_compose_file() -> None:
    raw = compose.COMPOSE_FILE.read_text()
    secrets = re.finditer(r"^\s*(\w*(?:PASSWORD|SECRET|TOKEN|AUTH)\w*):\s*(.*)$", raw, re.M)
    for match in secrets:
        assert match.group(2).startswith("${"), f"{match.group(1)} is written in the file"
    # The store URL's credentials are substituted too.
    for url in re.findall(r"QUARTZ_STORE_URL:\s*(.+)$", raw, re.M):
        assert url.startswith("postgresql+psycopg2://${POSTGRES_USER"), url
        assert ":${POSTGRES_PASSWORD:?" in url, url


def test_postgres_and_redis_have_health_checks_and_named_volumes() -> None:
    volumes = set(compose.load()["volumes"])
    for name in ("postgres", "redis"):
        service = SERVICES[name]
        assert service["healthcheck"]["test"]
        named = {v.split(":", 1)[0] for v in service["volumes"]}
        assert named <= volumes and named, name


def test_the_rabbitmq_profile_adds_a_broker_everything_waits_for_only_when_it_is_on() -> None:
    rabbitmq = SERVICES["rabbitmq"]
    assert rabbitmq["profiles"] == ["rabbitmq"]
    assert rabbitmq["image"].startswith("rabbitmq:3.")  # quorum queues: 3.8 or later
    assert int(rabbitmq["image"].split(":")[1].split(".")[1]) >= 8
    assert rabbitmq["hostname"] == "rabbitmq"  # the node's name, and so its data, stays put
    assert rabbitmq["healthcheck"]["test"][:2] == ["CMD", "rabbitmq-diagnostics"]
    assert {v.split(":", 1)[0] for v in rabbitmq["volumes"]} == {"rabbitmq-data"}
    env = compose.environment(rabbitmq)
    assert env["RABBITMQ_DEFAULT_PASS"] == compose.env_example()["RABBITMQ_PASSWORD"]
    for name, service in {**APP_SERVICES, "flower": SERVICES["flower"]}.items():
        if name in ("schema", "dashboard"):  # they publish nothing
            continue
        assert service["depends_on"]["rabbitmq"] == {
            "condition": "service_healthy",
            "required": False,  # ignored with the profile off
        }, name
    # Redis stays the default broker; .env's BROKER_URL switches every service at once.
    assert "profiles" not in SERVICES["redis"]
    amqp = "amqp://quartz:secret@rabbitmq:5672//"
    switched = compose.load({**compose.env_example(), "BROKER_URL": amqp})["services"]
    for name in APP_SERVICES:
        assert compose.environment(switched[name])["BROKER_URL"] == amqp, name


def test_everything_waits_for_the_one_shot_schema_upgrade() -> None:
    schema = SERVICES["schema"]
    assert schema["command"][3:] == ["quartz", "schema", "upgrade"]
    assert schema["restart"] == "no"
    assert schema["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in [*BEATS, *WORKERS, "dashboard"]:
        depends = SERVICES[name]["depends_on"]
        assert depends["schema"]["condition"] == "service_completed_successfully", name
        assert depends["postgres"]["condition"] == "service_healthy", name
        if name != "dashboard":  # it reads the store and publishes nothing
            assert depends["redis"]["condition"] == "service_healthy", name


# -- the commands --------------------------------------------------------------------------------


def _celery_commands() -> dict[tuple[str, ...], dict[str, str]]:
    """Every distinct Celery command line of the file (services and health checks), with the
    environment of the first service that runs it."""
    commands: dict[tuple[str, ...], dict[str, str]] = {}
    for service in APP_SERVICES.values():
        env = compose.environment(service)
        lines = [service["command"]]
        test = (service.get("healthcheck") or {}).get("test") or []
        if test[:1] == ["CMD"]:
            lines.append(test[1:])
        elif test[:1] == ["CMD-SHELL"]:
            # The first command of the pipeline, with the container's variables expanded.
            first = test[1].split("|", 1)[0]
            first = re.sub(r"\$(\w+)", lambda m, env=env: env.get(m.group(1), "host"), first)
            lines.append(shlex.split(first))
        for line in lines:
            if line[:1] == ["celery"]:
                commands.setdefault(tuple(line), env)
    return commands


COMMANDS = _celery_commands()


def test_the_file_runs_the_commands_the_topology_needs() -> None:
    verbs = {tuple(c[3:5]) for c in COMMANDS}
    assert {("beat", "-S"), ("worker", "-l"), ("flower", "--port=5555")} <= verbs
    assert ("quartz", "schema") in verbs and ("quartz", "dashboard") in verbs
    assert ("inspect", "quartz_health") in verbs
    assert all(c[1:3] == ("-A", "proj") for c in COMMANDS)


@pytest.mark.parametrize("command", sorted(COMMANDS), ids=" ".join)
def test_every_command_and_its_options_exist(command: tuple[str, ...], tmp_path: Path) -> None:
    # Click parses every option before it acts on --help, so a misspelt option or subcommand
    # fails here; the app itself is imported, so does a broken project.
    env = {**os.environ, **COMMANDS[command], **IMAGE_ENV, "QUICKSTART_DIR": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-m", "celery", *command[1:], "--help"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "Usage:" in result.stdout


def test_the_beat_scheduler_named_is_celery_quartz() -> None:
    from celery_quartz.beat import Scheduler

    for name, service in BEATS.items():
        command = service["command"]
        assert symbol_by_name(command[command.index("-S") + 1]) is Scheduler, name


# -- the settings each service's environment gives ---------------------------------------------


@cache
def probed() -> dict[str, dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        return _probe(tmp)


def _probe(tmp: str) -> dict[str, dict[str, Any]]:
    requests = [
        {"name": name, "env": {**compose.environment(service), "QUICKSTART_DIR": tmp}}
        for name, service in APP_SERVICES.items()
    ]
    result = subprocess.run(
        [sys.executable, "-m", "tests.deploy.probe_app"],
        input=json.dumps(requests),
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(QUICKSTART)])},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def test_every_service_environment_gives_valid_settings_on_postgresql_and_redis() -> None:
    for name, info in probed().items():
        assert info["store_url"].startswith("postgresql+psycopg2://"), name
        assert "@postgres:5432/" in info["store_url"], name
        assert info["broker_url"] == "redis://redis:6379/0", name
        assert info["clustered"] is True, name


def test_the_schedulers_form_one_cluster_each_with_its_own_instance_id() -> None:
    info = probed()
    assert len(BEATS) == 3
    ids = [info[name]["instance_id"] for name in BEATS]
    assert len(set(ids)) == 3 and "AUTO" not in ids
    assert len({info[name]["scheduler_name"] for name in BEATS}) == 1
    # The one-shot schema service upgrades the tables; schedulers must not race it.
    assert not any(info[name]["schema_auto_upgrade"] for name in BEATS)


def test_each_scheduler_serves_its_health_endpoint_where_its_health_check_asks() -> None:
    # The check runs inside the scheduler's container: the loopback address, the port its
    # environment gives the project. test_compose_services runs it against a real beat.
    info = probed()
    for name, service in BEATS.items():
        env = compose.environment(service)
        assert info[name]["health_port"] == int(env["QUARTZ_HEALTH_PORT"]), name
        assert info[name]["health_address"] == "127.0.0.1", name
        test = service["healthcheck"]["test"]
        assert test[:3] == ["CMD", "python", "-c"], name
        assert "'http://127.0.0.1:%s/healthz' % os.environ['QUARTZ_HEALTH_PORT']" in test[3], name
    assert all(info[name]["health_port"] is None for name in WORKERS)


def _queues(command: list[str]) -> set[str]:
    return set(command[command.index("-Q") + 1].split(",")) if "-Q" in command else {"celery"}


def test_every_execution_group_and_the_default_queue_have_their_own_worker() -> None:
    info = probed()
    app = next(iter(info.values()))
    needed = {app["default_queue"], *app["group_queues"].values()}
    assert app["group_queues"], "the project defines no execution group"
    served = {queue: name for name, s in WORKERS.items() for queue in _queues(s["command"])}
    assert needed <= set(served)
    # One service per group: a group's worker consumes that group's queue alone.
    for queue in app["group_queues"].values():
        assert _queues(WORKERS[served[queue]]["command"]) == {queue}


def test_the_worker_health_check_asks_the_worker_by_its_node_name_for_its_quartz_health() -> None:
    for name, service in WORKERS.items():
        command, env = service["command"], compose.environment(service)
        node = command[command.index("-n") + 1]
        assert node == f"{env['WORKER_NAME']}@%h", name
        check = service["healthcheck"]["test"][1]
        assert check.startswith("celery -A proj inspect quartz_health "), name
        assert '-d "$WORKER_NAME@$HOSTNAME"' in check, name
        assert check.endswith('--json | grep -qF \'"status": "healthy"\''), name


# -- the dashboard ---------------------------------------------------------------------------------


def _option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_the_dashboard_is_read_only_over_the_same_store() -> None:
    info = probed()
    assert "--read-only" in DASHBOARD["command"]
    assert info["dashboard"]["store_url"] == info["beat-1"]["store_url"]
    assert info["dashboard"]["scheduler_name"] == info["beat-1"]["scheduler_name"]
    # Its one token, from .env, may not write either.
    assert info["dashboard"]["dashboard_token_writes"] == [False]


def test_the_dashboard_is_served_under_a_prefix_on_loopback_for_a_proxy() -> None:
    command, info = DASHBOARD["command"], probed()["dashboard"]
    assert _option(command, "--url-prefix") == "/quartz"
    # Every interface of its container, so that the published port reaches it ...
    assert _option(command, "--address") == "0.0.0.0"
    # ... and the host publishes it on its loopback only, to the port the project listens on.
    (published,) = DASHBOARD["ports"]
    host, host_port, container_port = published.rsplit(":", 2)
    assert host == "127.0.0.1" and host_port == compose.env_example()["DASHBOARD_PORT"]
    assert int(container_port) == info["dashboard_port"]
    assert (
        info["dashboard_forwarded_allow_ips"]
        == compose.env_example()["DASHBOARD_FORWARDED_ALLOW_IPS"]
    )


def test_the_dashboard_health_check_reads_the_api_under_its_prefix_with_its_token() -> None:
    test = DASHBOARD["healthcheck"]["test"]
    assert test[:3] == ["CMD", "python", "-c"]
    assert "/quartz/api/v1/schedulers' % os.environ['QUARTZ_DASHBOARD_PORT']" in test[3]
    assert "'Bearer ' + os.environ['QUARTZ_DASHBOARD_TOKEN']" in test[3]
