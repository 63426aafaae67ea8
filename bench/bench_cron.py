"""How long CronExpression.next_valid_time_after takes for common expressions.

Prints a table of medians in microseconds, for UTC and for a daylight-saving zone, beside croniter's
``get_next`` for the same five-field expressions measured in the same run (the baseline; one
croniter object per expression, asked from each instant with ``get_next(datetime, start)``).

    .venv/bin/python bench/bench_cron.py [--rounds 7] [--calls 2000]
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import datetime, timedelta, timezone

from croniter import croniter

from celery_quartz.cron import CronExpression, CronFormat

UTC = timezone.utc

#: (label, Quartz expression, the same schedule as a five-field crontab line or None)
CASES = [
    ("every minute", "0 * * * * ?", "* * * * *"),
    ("every 5 minutes", "0 0/5 * * * ?", "*/5 * * * *"),
    ("hourly at :30", "0 30 * * * ?", "30 * * * *"),
    ("daily 02:00", "0 0 2 * * ?", "0 2 * * *"),
    ("weekdays 09:15", "0 15 9 ? * MON-FRI", "15 9 * * 1-5"),
    ("1st of month 00:00", "0 0 0 1 * ?", "0 0 1 * *"),
    ("every 10 seconds", "0/10 * * * * ?", None),
    ("last weekday of month", "0 0 18 LW * ?", None),
    ("second Monday", "0 0 0 ? * MON#2", None),
    ("every 15 min, office hours", "0 */15 9-17 ? * 2-6", "*/15 9-17 * * 1-5"),
]


def _median_us(call, starts: list[datetime], rounds: int) -> float:  # type: ignore[no-untyped-def]
    samples = []
    for _ in range(rounds):
        begin = time.perf_counter()
        for start in starts:
            call(start)
        samples.append((time.perf_counter() - begin) / len(starts) * 1e6)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    base = datetime(2026, 1, 1, tzinfo=UTC)
    # Instants spread over a year, so the day cache and month boundaries are exercised.
    starts = [base + timedelta(seconds=(i * 15_731) % (365 * 86_400)) for i in range(args.calls)]

    header = (
        f"| {'expression':<28} | {'Quartz form':<22} | {'UTC µs':>7} | {'Berlin µs':>9} "
        f"| {'croniter µs':>11} | {'croniter / ours':>15} |"
    )
    print(header)
    print("|" + "|".join("-" * (len(cell)) for cell in header.split("|")[1:-1]) + "|")
    for label, expression, unix in CASES:
        utc_cron = CronExpression(expression)
        berlin_cron = CronExpression(expression, time_zone="Europe/Berlin")
        ours = _median_us(utc_cron.next_valid_time_after, starts, args.rounds)
        zoned = _median_us(berlin_cron.next_valid_time_after, starts, args.rounds)
        if unix is not None:
            assert CronExpression(unix, format=CronFormat.UNIX).next_valid_time_after(
                starts[1]
            ) == utc_cron.next_valid_time_after(starts[1])

            iterator = croniter(unix, base)

            def theirs(start: datetime, it: croniter = iterator) -> datetime:
                return it.get_next(datetime, start)  # type: ignore[no-any-return]

            baseline = _median_us(theirs, starts, args.rounds)
            ratio = f"{baseline / ours:.1f}x"
            baseline_text = f"{baseline:.1f}"
        else:
            ratio = baseline_text = "-"
        print(
            f"| {label:<28} | {expression:<22} | {ours:>7.1f} | {zoned:>9.1f} "
            f"| {baseline_text:>11} | {ratio:>15} |"
        )


if __name__ == "__main__":
    main()
