"""The brokers the firing path is tested on. Every integration test runs on Redis; one test per
area (one start per occurrence, recovery, expiry and misfire, execution groups, pins, the worker
hooks) also runs on RabbitMQ, marked ``on_both_brokers``: its ``broker_url`` is then Redis's and
a RabbitMQ virtual host's in turn (``tests/conftest.py``)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

BROKERS = ["redis", "rabbitmq"]

#: Run the test once on each broker (its ``broker_url`` fixture, indirectly parametrized).
on_both_brokers = pytest.mark.parametrize("broker_url", BROKERS, indirect=True)


def is_amqp(broker_url: str) -> bool:
    return broker_url.startswith(("amqp://", "pyamqp://", "amqps://"))


class QueueLength:
    """Reads how many messages wait in a queue (ready, not yet delivered to a worker): a Redis
    list's length, or what a passive declare of a RabbitMQ queue reports (0 for a queue not
    declared yet)."""

    def __init__(self, broker_url: str) -> None:
        self.broker_url = broker_url
        self._redis: Any = None
        self._amqp: Any = None
        if is_amqp(broker_url):
            from kombu import Connection

            self._amqp = Connection(broker_url)
            self._amqp.connect()
        else:
            import redis

            self._redis = redis.Redis.from_url(broker_url)

    def __call__(self, queue: str) -> int:
        if self._redis is not None:
            return int(self._redis.llen(queue))
        from amqp.exceptions import NotFound

        channel = self._amqp.channel()
        try:
            return int(channel.queue_declare(queue, passive=True).message_count)
        except NotFound:
            return 0  # the broker closed the channel
        finally:
            if channel.is_open:
                channel.close()

    def close(self) -> None:
        if self._redis is not None:
            self._redis.close()
        if self._amqp is not None:
            self._amqp.release()


class QueueSampler:
    """Samples the length of a queue while a cluster runs (every 20 ms, in a thread)."""

    def __init__(self, broker_url: str, queue: str) -> None:
        self.length = QueueLength(broker_url)
        self.queue = queue
        self.longest = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.longest = max(self.longest, self.length(self.queue))
            self.samples += 1
            self._stop.wait(0.02)

    def __enter__(self) -> QueueSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.length.close()
