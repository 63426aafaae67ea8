"""Fuzzing the scheduling-file readers: mutated copies of a valid file in each format, and random
documents in the model's shape. Every input must either read (and its triggers compute a first
fire time) or raise one of celery-quartz's own errors. Shared by the suite's short run
(tests/unit/test_scheduling_files_fuzz.py) and the long campaign (bench/fuzz_files.py)."""

from __future__ import annotations

import contextlib
import json
import random
from typing import Any

from celery_quartz.errors import QuartzError
from celery_quartz.scheduling_files import parse_scheduling_data
from tests.unit.conftest import T0
from tests.unit.scheduling_file_samples import FULL

FORMATS = ("xml", "json", "yaml")

#: Pieces a mutation splices in: markup, the schema's own words and awkward values.
TOKENS = [
    "<",
    ">",
    "</",
    "/>",
    "&",
    "&amp;",
    "&x;",
    "<!DOCTYPE d [<!ENTITY x 'y'>]>",
    "<![CDATA[",
    "]]>",
    '"',
    "'",
    "{",
    "}",
    "[",
    "]",
    ":",
    ",",
    "-",
    "*",
    "&a",
    "*a",
    "!!python/tuple",
    "\n",
    "\t",
    " ",
    "\x00",
    "\ufeff",
    "\u00e9",
    "true",
    "false",
    "null",
    "NaN",
    "1e999",
    "-1",
    "0",
    "99999999999999999999",
    "2026-02-30T25:61:00Z",
    "PT5M",
    "00:00:10",
    "Europe/Helsinki",
    "Mars/Olympus",
    "0 0 2 * * ?",
    "0 0 2 31 2 ?",
    "L-3",
    "?",
    "_",
    "SmartPolicy",
    "FireNow",
    "DoNothing",
    "Month",
    "Fortnight",
    "RETRYING_JOBS",
    "celery.beat_schedule",
    "<job>",
    "<trigger>",
    "<cron>",
    "<simple>",
    "<entry>",
    "<retry-policy>",
    "<preferred-node>",
    "Cron",
    "Simple",
    "CalendarInterval",
    "RetryPolicy",
    "PreferredNode",
    "ExecutionGroup",
    "JobDataMap",
    "StartTime",
    "Quartz",
]


def mutate(text: str, rng: random.Random, edits: int | None = None) -> str:
    """``text`` with a few random deletions, insertions, duplications and token splices."""
    for _ in range(edits or rng.randint(1, 6)):
        if not text:
            text = rng.choice(TOKENS)
            continue
        i = rng.randrange(len(text))
        j = min(len(text), i + rng.randint(1, 40))
        op = rng.randrange(5)
        if op == 0:
            text = text[:i] + text[j:]
        elif op == 1:
            text = text[:i] + rng.choice(TOKENS) + text[i:]
        elif op == 2:
            text = text[:i] + rng.choice(TOKENS) + text[j:]
        elif op == 3:
            text = text[:i] + text[i:j] * rng.randint(2, 4) + text[i:]
        else:
            text = text[:i] + chr(rng.randrange(0x20, 0x3000)) + text[i + 1 :]
    return text


def random_value(rng: random.Random, depth: int = 0) -> Any:
    """A random JSON value, shaped now and then like the model's mappings."""
    pick = rng.randrange(10 if depth < 4 else 6)
    if pick == 0:
        return None
    if pick == 1:
        return rng.choice([True, False])
    if pick == 2:
        return rng.choice([0, -1, 1, 5, 2**40, -(2**70), 1.5])
    if pick in (3, 4, 5):
        return rng.choice([*TOKENS, "report", "tasks.report", "nightly", "DEFAULT"])
    if pick in (6, 7):
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    keys = ["Name", "Group", "JobName", "JobType", "Durable", "Jobs", "Triggers", "Cron",
            "Simple", "CalendarInterval", "Expression", "RepeatCount", "RepeatInterval",
            "RepeatIntervalUnit", "TimeZone", "StartTime", "EndTime", "PreferredNode",
            "RetryPolicy", "Fixed", "Exponential", "Explicit", "MaxAttempts", "Delay",
            "Delays", "JobDataMap", "PreProcessingCommands", "DeleteJobsInGroup",
            "ProcessingDirectives", "OverwriteExistingData", "MisfireInstruction", "x"]  # fmt: skip
    return {rng.choice(keys): random_value(rng, depth + 1) for _ in range(rng.randint(0, 5))}


def random_document(rng: random.Random) -> str:
    """A JSON document: the full sample with parts replaced by random values."""
    document: Any = json.loads(FULL["json"])
    for _ in range(rng.randint(1, 4)):
        target = document
        path: list[Any] = []
        while isinstance(target, (dict, list)) and target and rng.random() < 0.7:
            key = (
                rng.choice(list(target)) if isinstance(target, dict) else rng.randrange(len(target))
            )
            path.append(key)
            target = target[key]
        if not path:
            document = random_value(rng)
            break
        parent = document
        for key in path[:-1]:
            parent = parent[key]
        parent[path[-1]] = random_value(rng)
    return json.dumps(document)


class Escaped(AssertionError):
    """An input made something other than celery-quartz's own error escape."""


def check(text: str, fmt: str) -> bool:
    """Read ``text``; True if it read, False if it raised our own error; :class:`Escaped`
    (naming the input) for anything else."""
    try:
        data = parse_scheduling_data(text, f"fuzz.{fmt}")
        for definition in data.triggers:
            with contextlib.suppress(QuartzError):
                definition.build(T0).compute_first_fire_time()
        return True
    except QuartzError:
        return False
    except Exception as exc:  # what the fuzzing looks for
        raise Escaped(f"{type(exc).__name__}: {exc} for {fmt} input {text!r}") from exc


def one_case(rng: random.Random) -> tuple[str, str]:
    """A random input: a mutated sample in a random format, or a random JSON document."""
    if rng.random() < 0.25:
        return random_document(rng), "json"
    fmt = rng.choice(FORMATS)
    return mutate(FULL[fmt], rng), fmt
