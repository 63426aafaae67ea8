"""Run a long fuzz campaign: ``python -m tests.fuzz --count 1000000 [--target NAME] [--seed N]``.

Prints, per target, the inputs run, how many parsed and how many were refused with one of our
own errors, the slowest input, and any other exception or slow input (a finding). Exits 1 on a
finding.
"""

from __future__ import annotations

import argparse
import sys
import time

from tests.fuzz.targets import TARGETS, run


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    parser.add_argument("--count", type=int, default=1_000_000, help="inputs per target")
    parser.add_argument("--target", choices=TARGETS, action="append", help="default: all")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    ok = True
    print("| target | inputs | parsed | refused (our error) | findings | slowest | seconds |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for target in args.target or TARGETS:
        began = time.monotonic()
        result = run(target, args.count, args.seed)
        print(
            f"| {target} | {result.inputs:,} | {result.parsed:,} | {result.refused:,} | "
            f"{len(result.failures)} | {result.slowest * 1000:.1f} ms | "
            f"{time.monotonic() - began:.0f} |",
            flush=True,
        )
        for failure in result.failures:
            print("  finding:", failure)
        ok = ok and result.ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
