"""Reading docker-compose.yml as Compose would: YAML with merge keys, then variable substitution
from .env.example. Only what the deployment tests need, not a Compose implementation."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"
ENV_EXAMPLE = REPO / ".env.example"

# $$ (a literal $), ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:?error}, ${NAME?error}, $NAME
_VARIABLE = re.compile(
    r"\$(?:(?P<escaped>\$)|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?P<op>:?[-?])?(?P<arg>[^}]*)\}"
    r"|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))"
)


class UndefinedVariable(KeyError):
    pass


def env_example() -> dict[str, str]:
    values: dict[str, str] = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, value = line.partition("=")
            values[name.strip()] = value.strip()
    return values


def variables(text: str) -> set[str]:
    """The names substituted in ``text`` (``$$`` escapes excluded)."""
    return {
        m.group("braced") or m.group("bare")
        for m in _VARIABLE.finditer(text)
        if not m.group("escaped")
    }


def interpolate(value: Any, env: dict[str, str]) -> Any:
    if isinstance(value, dict):
        return {key: interpolate(item, env) for key, item in value.items()}
    if isinstance(value, list):
        return [interpolate(item, env) for item in value]
    if not isinstance(value, str):
        return value

    def substitute(m: re.Match[str]) -> str:
        if m.group("escaped"):
            return "$"
        name = m.group("braced") or m.group("bare")
        op, arg = m.group("op") or "", m.group("arg") or ""
        unset = name not in env or (op.startswith(":") and env[name] == "")
        if not unset:
            return env[name]
        if op.endswith("-"):
            return arg
        raise UndefinedVariable(f"${{{name}}}: {arg or 'not set'}")

    return _VARIABLE.sub(substitute, value)


def load(env: dict[str, str] | None = None) -> dict[str, Any]:
    """The compose file with every variable substituted from ``env`` (default: .env.example)."""
    raw = yaml.safe_load(COMPOSE_FILE.read_text())
    return interpolate(raw, env_example() if env is None else env)


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {key: str(value) for key, value in env.items()}
