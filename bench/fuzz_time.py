"""A long fuzzing campaign for the time parsers: Quartz cron, crontab (the Unix flag) and RRULE.

Every generated input must either parse or raise an error of our own hierarchy
(``celery_quartz.errors.QuartzError``); a parsed one must then answer its time questions (next
fire time, and for cron the time before and ``is_satisfied_by``) without any other exception.
The slowest inputs are reported, so a pathological one shows up.

    .venv/bin/python bench/fuzz_time.py 1000000 --kind cron [--seed 1] [--slow 0.5]

``--kind`` is ``cron``, ``unix``, ``rrule`` or ``all`` (N inputs of each). Exit status 1 when an
input raised anything else.
"""

from __future__ import annotations

import argparse
import heapq
import logging
import random
import signal
import sys
import time
import traceback
from datetime import datetime, timedelta, timezone

from celery_quartz.cron import CronExpression, CronFormat
from celery_quartz.errors import QuartzError
from celery_quartz.triggers import RecurrenceTrigger

UTC = timezone.utc
ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata",
         "America/Santiago", "Pacific/Apia", "Coordinated Universal Time",
         "FLE Standard Time"]  # fmt: skip

_ATOMS = [*"0123456789", "*", "?", "/", "-", ",", "L", "W", "#", "H", "(", ")", "LW", "L-", "W-",
          "H(", "H/", "JAN", "MON", "THU", "FRI", "DEC", "SUN", "60", "99", "31", "2300", "1970",
          "C", "@", "x", "\u00b2", "\u0663", "\t"]  # fmt: skip
_GOOD_FIELDS = [
    ["0", "*/5", "H", "H/15", "H(0-29)", "0-59/7", "H(10-20)/3", "5,10,H"],
    ["0", "*/10", "H", "H/20", "H(0-29)", "30", "0,30", "H(5-9)"],
    ["*", "2", "H", "H/6", "H(9-17)", "9-17", "22-2", "H(0-3)/2"],
    [
        "?",
        "L",
        "LW",
        "L-3",
        "LW-2",
        "L-2W",
        "L-1,L-2",
        "6,15,L",
        "31W",
        "30W,4W",
        "1W,15W,LW-30",
        "L-30W-30",
        "15W",
        "1-31/3",
        "*",
    ],
    ["*", "1-12", "JAN-MAR", "2", "*/3", "FEB", "NOV-FEB"],
    ["?", "*", "MON-FRI", "6L", "2#5", "L", "MON/2", "1-7/3", "SUN,SAT"],
    ["", "2026", "2026-2030", "*", "1970/50", "2199"],
]


def gen_cron(rng: random.Random, unix: bool) -> str:
    """A cron-like line: a plausible one, a mutated one, or atom soup."""
    roll = rng.random()
    if roll < 0.5:
        fields = [rng.choice(choices) for choices in _GOOD_FIELDS]
        if rng.random() < 0.85:  # exactly one day field '?', as a valid line has
            if rng.random() < 0.5:
                fields[3] = "?"
                fields[5] = rng.choice(_GOOD_FIELDS[5][1:])
            else:
                fields[3] = rng.choice(_GOOD_FIELDS[3][1:])
                fields[5] = "?"
        if unix:
            fields = fields[1:6]
        text = " ".join(f for f in fields if f)
        if rng.random() < 0.5:
            text = _mutate(rng, text)
        return text
    n_fields = rng.choice([5, 5, 6, 6, 7, rng.randint(0, 9)])
    return " ".join(
        "".join(rng.choice(_ATOMS) for _ in range(rng.randint(1, 5))) for _ in range(n_fields)
    )


_RRULE_PARTS = {
    "FREQ": ["SECONDLY", "MINUTELY", "HOURLY", "DAILY", "WEEKLY", "MONTHLY", "YEARLY", "SOMETIMES"],
    "INTERVAL": ["1", "2", "3", "0", "-1", "1000", "x"],
    "COUNT": ["1", "5", "100", "0", "-3", "1e3"],
    "UNTIL": ["20270101T000000Z", "20270101T000000", "20270101", "99991231T235959Z",
              "19700101T000000Z", "2027"],
    "BYSECOND": ["0", "30", "59", "60", "0,15,30,45", "-1"],
    "BYMINUTE": ["0", "30", "59", "60", "0,20,40"],
    "BYHOUR": ["0", "9", "23", "24", "9,17"],
    "BYDAY": ["MO", "MO,WE,FR", "1MO", "-1FR", "2TU", "+3TH", "53MO", "54MO", "-53SU", "6MO",
              "0MO", "XX", "+MO", "1"],
    "BYMONTHDAY": ["1", "15", "31", "-1", "-31", "0", "32", "1,15,-1"],
    "BYYEARDAY": ["1", "366", "-1", "367", "0", "100,200"],
    "BYWEEKNO": ["1", "20", "53", "-1", "54", "0"],
    "BYMONTH": ["1", "2", "12", "13", "0", "1,7"],
    "BYSETPOS": ["1", "-1", "2", "366", "0", "367"],
    "WKST": ["MO", "SU", "XX"],
    "X-NAME": ["nightly", "a=b"],
    "X-OWNER": ["ops"],
}  # fmt: skip


def gen_rrule(rng: random.Random) -> str:
    names = list(_RRULE_PARTS)
    parts = []
    if rng.random() < 0.95:
        parts.append(f"FREQ={rng.choice(_RRULE_PARTS['FREQ'])}")
    for name in rng.sample(names, rng.randint(0, 4)):
        parts.append(f"{name}={rng.choice(_RRULE_PARTS[name])}")
    rng.shuffle(parts)
    text = ";".join(parts)
    if rng.random() < 0.2:
        text = _mutate(rng, text)
    if rng.random() < 0.05:
        text = "RRULE:" + text
    return text


def _mutate(rng: random.Random, text: str) -> str:
    chars = list(text)
    for _ in range(rng.randint(1, 3)):
        op = rng.random()
        i = rng.randint(0, len(chars))
        if op < 0.4 or not chars:
            chars.insert(i, rng.choice("0123456789LWH#-/,;=?*() "))
        elif op < 0.7:
            del chars[min(i, len(chars) - 1)]
        else:
            chars[min(i, len(chars) - 1)] = rng.choice("0123456789LWH#-/,;=?*")
    return "".join(chars)


def _instant(rng: random.Random) -> datetime:
    base = datetime(1990, 1, 1, tzinfo=UTC)
    return base + timedelta(
        seconds=rng.randint(0, 80 * 365 * 86_400), microseconds=rng.randint(0, 999_999)
    )


def exercise_cron(text: str, unix: bool, zone: str, at: datetime) -> str:
    """Parse and query one cron input; returns 'parsed' or 'refused'."""
    form = CronFormat.UNIX if unix else CronFormat.QUARTZ
    try:
        cron = CronExpression(text, time_zone=zone, format=form, hash_key="DEFAULT.fuzz")
    except QuartzError:
        return "refused"
    following = cron.next_valid_time_after(at)
    assert following is None or following > at, (text, at, following)
    if following is not None:
        assert cron.is_satisfied_by(following), (text, following)
    before = cron.time_before(at)
    assert before is None or before < at, (text, at, before)
    CronExpression(cron.expression, time_zone=zone, hash_key="DEFAULT.fuzz")
    return "parsed"


def exercise_rrule(text: str, zone: str, at: datetime) -> str:
    try:
        trigger = RecurrenceTrigger(rule=text, start_at=at - timedelta(days=400), time_zone=zone)
        trigger.validate()
    except QuartzError:
        return "refused"
    try:
        following = trigger.next_fire_time_after(at)
        assert following is None or following > at, (text, at, following)
        if following is not None:
            trigger.next_fire_time_after(following)
    except QuartzError:
        return "refused at computing"
    return "parsed"


class _Hang(BaseException):
    """Raised by the alarm when one input runs past the per-input limit."""


def _alarm(signum: int, frame: object) -> None:
    raise _Hang


def campaign(kind: str, n: int, seed: int, slow: float, limit: float = 10.0) -> int:
    rng = random.Random(f"{kind}-{seed}")
    counts: dict[str, int] = {}
    failures: list[tuple[str, str]] = []
    slowest: list[tuple[float, str]] = []
    begin = time.perf_counter()
    for _ in range(n):
        zone = rng.choice(ZONES)
        at = _instant(rng)
        text = gen_rrule(rng) if kind == "rrule" else gen_cron(rng, kind == "unix")
        started = time.perf_counter()
        signal.setitimer(signal.ITIMER_REAL, limit)
        try:
            if kind == "rrule":
                outcome = exercise_rrule(text, zone, at)
            else:
                outcome = exercise_cron(text, kind == "unix", zone, at)
        except _Hang:
            outcome = "FAILED"
            if len(failures) < 20:
                failures.append((f"{text!r} zone={zone} at={at.isoformat()}", f"over {limit} s"))
        except Exception:  # the point of the campaign: anything not ours is a finding
            outcome = "FAILED"
            if len(failures) < 20:
                failures.append(
                    (f"{text!r} zone={zone} at={at.isoformat()}", traceback.format_exc(limit=3))
                )
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        took = time.perf_counter() - started
        counts[outcome] = counts.get(outcome, 0) + 1
        heapq.heappush(slowest, (took, f"{text!r} zone={zone} at={at.isoformat()}"))
        if len(slowest) > 5:
            heapq.heappop(slowest)
    elapsed = time.perf_counter() - begin
    print(
        f"{kind}: {n} inputs in {elapsed:.0f} s, "
        + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    )
    for took, text in sorted(slowest, reverse=True):
        flag = "  SLOW" if took > slow else ""
        print(f"  slowest {took * 1000:.1f} ms: {text}{flag}")
    for text, trace in failures:
        print(f"  FAILED: {text}\n{trace}")
    return counts.get("FAILED", 0)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("n", type=int, help="inputs per kind")
    parser.add_argument("--kind", choices=["cron", "unix", "rrule", "all"], default="all")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--slow", type=float, default=0.5, help="seconds per input reported as slow"
    )
    parser.add_argument("--limit", type=float, default=10.0, help="seconds before an input fails")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # the MON/2 warning, once per parse
    signal.signal(signal.SIGALRM, _alarm)
    kinds = ["cron", "unix", "rrule"] if args.kind == "all" else [args.kind]
    failed = sum(campaign(kind, args.n, args.seed, args.slow, args.limit) for kind in kinds)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
