"""A long fuzz campaign of the scheduling-file readers (XML, JSON, YAML).

    .venv/bin/python bench/fuzz_files.py 100000 [--seed S]

Runs N random inputs (mutated copies of a valid file in each format, and random documents in the
model's shape); each must read or raise one of celery-quartz's own errors. Prints the rate and
how many read; exits 1 and prints the first input that let anything else escape.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.unit.scheduling_file_fuzz import Escaped, check, one_case  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", type=int, help="number of inputs")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: random)")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    rng = random.Random(seed)
    started = time.monotonic()
    read = slowest = 0.0
    for i in range(args.n):
        text, fmt = one_case(rng)
        t0 = time.monotonic()
        try:
            read += check(text, fmt)
        except Escaped as exc:
            print(f"ESCAPED at input {i} (seed {seed}): {exc}")
            return 1
        slowest = max(slowest, time.monotonic() - t0)
        if (i + 1) % 10_000 == 0:
            print(f"{i + 1} inputs, {time.monotonic() - started:.0f} s", flush=True)
    elapsed = time.monotonic() - started
    print(
        f"seed {seed}: {args.n} inputs in {elapsed:.1f} s ({args.n / elapsed:.0f}/s), "
        f"{int(read)} read, {args.n - int(read)} refused with our own errors, "
        f"slowest input {slowest * 1000:.1f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
