"""The five-field form against croniter, over thousands of generated crontab lines.

croniter is an oracle here for ordinary crontab semantics in UTC (where daylight saving plays no
part); it does not decide anything Quartz decides differently.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

from croniter import croniter

from celery_quartz.cron import CronExpression, CronFormat

UTC = timezone.utc
EXPRESSIONS = 3000
STEPS = 4


def _field(rng: random.Random, lo: int, hi: int) -> str:
    kind = rng.randrange(7)
    a, b = sorted(rng.sample(range(lo, hi + 1), 2))
    if kind == 0:
        return "*"
    if kind == 1:
        return str(a)
    if kind == 2:
        return f"{a}-{b}"
    if kind == 3:
        return f"*/{rng.randint(1, max(1, (hi - lo) // 2))}"
    if kind == 4:
        return f"{a}-{b}/{rng.randint(1, max(1, b - a))}"
    if kind == 5:
        return ",".join(str(v) for v in sorted(rng.sample(range(lo, hi + 1), rng.randint(2, 4))))
    return f"{a}/{rng.randint(1, max(1, hi - a))}"


def _line(rng: random.Random) -> str:
    minute = _field(rng, 0, 59)
    hour = _field(rng, 0, 23)
    month = _field(rng, 1, 12) if rng.random() < 0.3 else "*"
    which = rng.randrange(3)
    dom = _field(rng, 1, 31) if which == 1 else "*"
    if which == 2:
        dow = _field(rng, 0, 6) if rng.random() < 0.8 else rng.choice(["mon-fri", "sun", "7"])
    else:
        dow = "*"
    return f"{minute} {hour} {dom} {month} {dow}"


def test_five_field_form_agrees_with_croniter() -> None:
    rng = random.Random(20261130)
    disagreements = []
    compared = 0
    for _ in range(EXPRESSIONS):
        line = _line(rng)
        start = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=rng.randrange(3 * 365 * 86400))
        ours = CronExpression(line, format=CronFormat.UNIX)
        theirs = croniter(line, start)
        t: datetime | None = start
        for _ in range(STEPS):
            assert t is not None
            expected = theirs.get_next(datetime)
            t = ours.next_valid_time_after(t)
            compared += 1
            if t != expected:
                disagreements.append((line, start, t, expected))
                break
    assert not disagreements[:5], f"{len(disagreements)} of {EXPRESSIONS} lines disagree"
    assert compared >= EXPRESSIONS * STEPS * 0.9
