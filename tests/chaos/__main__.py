"""Run the chaos suite on its own: ``python -m tests.chaos --seconds 600 [--seed N]
[--broker rabbitmq]``, or one service's outage:
``python -m tests.chaos --outage postgresql --down 90 --misfire-threshold 60``.

Starts its own PostgreSQL and Redis or RabbitMQ (as the tests do), prints the report table,
exits 1 if any check failed. Logs of every process are kept in the printed work folder.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from pathlib import Path

from tests.chaos.harness import ChaosReport, run_chaos, run_outage
from tests.service_rabbitmq import rabbitmq_server
from tests.services import postgres_server, redis_server


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    parser.add_argument("--seconds", type=float, default=120.0, help="length of the chaos phase")
    parser.add_argument("--seed", type=int, default=1, help="random seed of the kill schedule")
    parser.add_argument(
        "--outage", choices=["postgresql", "redis"], help="instead: stop this service once"
    )
    parser.add_argument("--down", type=float, default=90.0, help="seconds the service is down")
    parser.add_argument("--misfire-threshold", type=float, default=60.0)
    parser.add_argument(
        "--broker", choices=["redis", "rabbitmq"], default="redis", help="the chaos run's broker"
    )
    args = parser.parse_args()
    if args.outage and args.broker != "redis":
        parser.error("--outage runs on Redis only")
    workdir = Path(tempfile.mkdtemp(prefix="celery-quartz-chaos-"))
    print(f"logs in {workdir}", flush=True)
    report: ChaosReport
    broker = rabbitmq_server() if args.broker == "rabbitmq" else contextlib.nullcontext()
    with postgres_server() as postgres, redis_server() as redis, broker as rabbitmq:
        if args.outage:
            report = run_outage(
                workdir,
                postgres,
                redis,
                service=args.outage,
                down=args.down,
                misfire_threshold=args.misfire_threshold,
            )
        else:
            report = run_chaos(
                workdir, postgres, rabbitmq or redis, seconds=args.seconds, seed=args.seed
            )
    print(report.table())
    if report.lost:
        print("lost:", report.lost[:20])
    for line in report.left_detail[:20]:
        print("left in flight:", line)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
