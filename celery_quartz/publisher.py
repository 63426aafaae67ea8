"""Publishing firings to the broker as ordinary Celery task messages."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from celery import Celery

from celery_quartz.clock import from_millis
from celery_quartz.firing import HEADER, Firing

logger = logging.getLogger(__name__)

#: Publish options that belong to the firing, not to the job's options.
_RESERVED_OPTIONS = frozenset({"task_id", "headers", "args", "kwargs", "serializer"})


class Publisher:
    """Sends a batch of firings through one producer, pipelined where the transport allows."""

    def __init__(self, app: Celery, batch_size: int = 100) -> None:
        self.app = app
        self.batch_size = batch_size

    def publish(self, firings: Sequence[Firing]) -> None:
        """Publish every firing; raises (the broker's error) if any could not be handed over.

        The message's task id is the fire instance id, so a firing published twice (a retry after
        an error, a survivor republishing for a dead scheduler) is one firing to the worker guard.
        """
        if not firings:
            return
        with (
            self.app.producer_or_acquire() as producer,
            producer.batch(max_size=self.batch_size),
        ):
            for firing in firings:
                self.app.send_task(
                    firing.task,
                    args=firing.args,
                    kwargs=firing.kwargs,
                    task_id=firing.fire_instance_id,
                    headers={HEADER: firing.header()},
                    serializer="json",
                    producer=producer,
                    **publish_options(firing),
                )
        logger.debug("published %d firing(s)", len(firings))


def publish_options(firing: Firing) -> dict[str, Any]:
    """The job's Celery publish options, with the firing's expiry (the earlier one wins)."""
    options = {k: v for k, v in firing.options.items() if k not in _RESERVED_OPTIONS}
    if firing.expires_millis is not None:
        expires = from_millis(firing.expires_millis)
        if "expires" not in options:
            options["expires"] = expires
        elif isinstance(options["expires"], (int, float)):
            # A job's own expiry is seconds after publication; keep whichever comes first.
            own = from_millis(firing.fired_millis) + timedelta(seconds=options["expires"])
            options["expires"] = min(own, expires)
    return options
