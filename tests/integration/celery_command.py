"""``python -m celery`` as on a machine where Flower is not installed: the suite's beats,
workers and ``celery quartz`` commands run through this (``tests/integration/processes.py``).

Celery's umbrella command loads every ``celery.commands`` plugin when it starts, whichever
command it runs. The test environment has Flower installed, for the one test that starts Flower,
and importing Flower's plugin (Tornado, redis-py, Prometheus' client) cost each process about
0.18 CPU-seconds on a 2-core test machine: about 60 of the suite's 850 CPU-seconds, for a
subcommand no beat or worker uses. Leaving out that one plugin is the only difference: the
command, its options and every other plugin (``celery quartz`` among them) are Celery's own.
Should Celery find its plugins some other way, Flower's is loaded as before and nothing else
changes.
"""

from __future__ import annotations

import importlib.metadata as metadata
from typing import Any

_entry_points = metadata.entry_points


def _without_flower(**params: Any) -> Any:
    found = _entry_points(**params)
    if params.get("group") == "celery.commands":
        return metadata.EntryPoints(point for point in found if point.name != "flower")
    return found


if __name__ == "__main__":
    metadata.entry_points = _without_flower  # type: ignore[assignment]

    from celery.__main__ import main

    main()
