"""Fuzz targets and their input generators: retry-policy strings, preferred-node strings, and
``beat_schedule`` entries.

Each generator mixes valid inputs, valid inputs mutated (characters changed, dropped, repeated,
fields swapped) and random ones, so most inputs reach deep into the parser rather than failing
on the first character.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from celery import Celery
from celery.schedules import crontab, schedule, solar

from celery_quartz.affinity import PreferredNode
from celery_quartz.beat_schedule import entry_to_job
from celery_quartz.clock import SystemClock
from celery_quartz.errors import QuartzError
from celery_quartz.retry import RetryPolicy

#: The longest one input may take before it counts as a hang.
MAX_SECONDS_PER_INPUT = 1.0

_POLICIES = ["n", "f:5:30000", "e:5:30000:2:600000", "e:3:1000:1.5", "x:4:1000,5000,30000"]
_POLICY_ALPHABET = "fexn:0123456789.,-+eE inaf" + "\u00b2\u0663"
_NODES = ["*", "celery@w1", "worker@host-1", "w", "celery@" + "h" * 60]
_NODE_ALPHABET = "abc@*._-/ \t\n\x00:é\u200b" + "0123456789"


@dataclass
class Result:
    """What a campaign saw: inputs run, parsed, refused with our error, and the failures."""

    target: str
    inputs: int = 0
    parsed: int = 0
    refused: int = 0
    slowest: float = 0.0
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures


def _mutate(rng: random.Random, text: str, alphabet: str) -> str:
    chars = list(text)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(5)
        i = rng.randrange(len(chars) + 1)
        if op == 0 and chars:
            chars[min(i, len(chars) - 1)] = rng.choice(alphabet)
        elif op == 1 and chars:
            del chars[min(i, len(chars) - 1)]
        elif op == 2:
            chars.insert(i, rng.choice(alphabet))
        elif op == 3 and chars:
            j = min(i, len(chars) - 1)
            chars[j:j] = chars[j : j + rng.randint(1, 6)] * rng.randint(1, 30)
        else:
            chars.insert(i, str(rng.choice([0, -1, 10**20, 2**63, 1e308, "nan", "inf"])))
    return "".join(chars)


def retry_policy_input(rng: random.Random) -> str:
    choice = rng.random()
    if choice < 0.6:
        return _mutate(rng, rng.choice(_POLICIES), _POLICY_ALPHABET)
    if choice < 0.8:
        kind = rng.choice("fexnq")
        parts = [str(rng.choice([0, 1, 5, -3, 10**9, 2**70, 1.5, "nan", ""])) for _ in range(4)]
        return kind + ":" + ":".join(parts[: rng.randint(0, 4)])
    return "".join(rng.choice(_POLICY_ALPHABET) for _ in range(rng.randint(0, 40)))


def preferred_node_input(rng: random.Random) -> str | None:
    choice = rng.random()
    if choice < 0.05:
        return None
    if choice < 0.6:
        return _mutate(rng, rng.choice(_NODES), _NODE_ALPHABET)
    return "".join(rng.choice(_NODE_ALPHABET) for _ in range(rng.randint(0, 300)))


def _value(rng: random.Random, depth: int = 0) -> Any:
    pick = rng.randrange(14 if depth < 2 else 9)
    if pick == 0:
        return None
    if pick == 1:
        return rng.choice([0, 1, -1, 30, 0.001, 1e308, -1e-9, 10**30, True, False])
    if pick == 2:
        return rng.choice([math.nan, math.inf, -math.inf])
    if pick == 3:
        return rng.choice(["", "tasks.ping", "tasks.nope", "*", "x" * 300, "\x00", "30"])
    if pick == 4:
        return timedelta(seconds=rng.choice([0, 1, -5, 86400 * 400, 0.0001]))
    if pick == 5:
        return schedule(rng.choice([0.5, 30, 3600, 86400, 0]))
    if pick == 6:
        return _crontab(rng)
    if pick == 7:
        return rng.choice([RetryPolicy.fixed(3, 10), RetryPolicy.NONE, PreferredNode.AUTO])
    if pick == 8:
        return _solar()
    if pick in (9, 10):
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {
        rng.choice(
            ["queue", "priority", "x", "execution_group", "preferred_node", "retry_policy"]
        ): _value(rng, depth + 1)
        for _ in range(rng.randint(0, 3))
    }


def _solar() -> Any:
    """A solar schedule (it needs the ``ephem`` package; without it Celery refuses to build one,
    in the user's own code)."""
    try:
        return solar("sunrise", 60.1, 24.9)
    except Exception:
        return schedule(60)


def _crontab(rng: random.Random) -> crontab:
    """A crontab of random fields (Celery refuses some at construction: the user's own code
    would fail there, before our parser, so those become the default crontab)."""
    try:
        return crontab(**_crontab_fields(rng))
    except Exception:
        return crontab()


def _crontab_fields(rng: random.Random) -> dict[str, Any]:
    spellings = ["*", "*/15", "0", "1-5", "mon-fri", "0,30", "99", "-1", "*/0", "L", "jan", "x"]
    names = ["minute", "hour", "day_of_week", "day_of_month", "month_of_year"]
    return {name: rng.choice(spellings) for name in names if rng.random() < 0.5}


def beat_entry_input(rng: random.Random) -> Any:
    if rng.random() < 0.05:
        return _value(rng)
    entry: dict[str, Any] = {}
    if rng.random() < 0.9:
        entry["task"] = rng.choice(["tasks.ping", "tasks.ping", "tasks.nope", 7, None])
    if rng.random() < 0.9:
        entry["schedule"] = (
            _value(rng)
            if rng.random() < 0.4
            else rng.choice([30, 0.5, timedelta(minutes=5), _crontab(rng), schedule(60)])
        )
    for name in ("args", "kwargs", "options", "relative", "quartz", "unknown"):
        if rng.random() < 0.25:
            entry[name] = _value(rng)
    if rng.random() < 0.3:
        entry["quartz"] = {
            key: rng.choice(
                [_value(rng), preferred_node_input(rng), RetryPolicy.exponential(3, 1, 2)]
            )
            for key in rng.sample(["execution_group", "preferred_node", "retry_policy", "x"], 2)
        }
    return entry


def _ping() -> None:
    return None


def _fuzz_app() -> Celery:
    app = Celery("fuzz", set_as_current=False)
    app.task(name="tasks.ping", shared=False)(_ping)
    return app


def run(target: str, count: int, seed: int = 0) -> Result:
    """Run ``count`` generated inputs through ``target``."""
    rng = random.Random(seed)
    result = Result(target)
    app = _fuzz_app() if target == "beat_schedule" else None
    now = SystemClock().now()

    calls: dict[str, tuple[Callable[[random.Random], Any], Callable[[Any], object]]] = {
        "retry_policy": (retry_policy_input, RetryPolicy.parse),
        "preferred_node": (preferred_node_input, lambda text: PreferredNode.parse(text)),
        "beat_schedule": (
            beat_entry_input,
            lambda entry: entry_to_job(app, "fuzzed", entry, "UTC", now, 65536),
        ),
    }
    generate, parse = calls[target]
    for _ in range(count):
        value = generate(rng)
        began = time.perf_counter()
        try:
            parse(value)
            result.parsed += 1
        except QuartzError:
            result.refused += 1
        except Exception as exc:  # anything else escaping is a finding
            if len(result.failures) < 20:
                result.failures.append(f"{value!r}: {type(exc).__name__}: {exc}")
        elapsed = time.perf_counter() - began
        result.slowest = max(result.slowest, elapsed)
        if elapsed > MAX_SECONDS_PER_INPUT and len(result.failures) < 20:
            result.failures.append(f"{value!r}: took {elapsed:.2f}s")
        result.inputs += 1
    if app is not None:
        app.close()
    return result


TARGETS = ("retry_policy", "preferred_node", "beat_schedule")
