"""The Redis path writes exactly the message Celery's own publishing writes."""

from __future__ import annotations

import contextlib
import json
import uuid
from typing import Any

import pytest
from celery import Celery

from celery_quartz.firing import Firing
from celery_quartz.keys import JobKey, TriggerKey
from celery_quartz.publisher import Publisher, RedisPath
from tests.services import RedisServer


def _firing(**options: Any) -> Firing:
    return Firing(
        fire_instance_id=str(uuid.uuid4()),
        scheduler_name="unit",
        task="tasks.report",
        args=[1, "two"],
        kwargs={"period": "week"},
        options=dict(options),
        job_key=JobKey("report"),
        trigger_key=TriggerKey("nightly"),
        scheduled_millis=1_800_000_000_000,
        fired_millis=1_800_000_000_005,
        fired_by="sched-a",
        job_data={"a": 1},
        expires_millis=1_800_000_060_005,
    )


def _stored(redis: RedisServer, db: int, queue: str) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in redis.client(db).lrange(queue, 0, -1)]


def _comparable(message: dict[str, Any]) -> dict[str, Any]:
    """The message less what differs between any two publishes: its delivery tag, and its TTL
    (milliseconds left at the instant of publishing)."""
    message = json.loads(json.dumps(message))
    del message["properties"]["delivery_tag"]
    if "expiration" in message["properties"]:
        message["properties"]["expiration"] = int(message["properties"]["expiration"]) // 10_000
    return message


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [([1, "two"], {"period": "week"}), ([], {}), (["x" * 2000], {"k": list(range(500))})],
    ids=["arguments", "none", "long"],
)
def test_the_redis_path_writes_what_celery_writes(
    redis: RedisServer, redis_url: str, args: list[Any], kwargs: dict[str, Any]
) -> None:
    db = int(redis_url.rsplit("/", 1)[1])
    app = Celery("unit", broker=redis_url, set_as_current=False)
    firing = _firing(queue="reports", expires=30)
    firing.args, firing.kwargs = args, kwargs
    path = RedisPath.for_app(app)
    assert path is not None and path.accepts(firing)
    path.publish([firing])
    publisher = Publisher(app)
    publisher._redis = None  # through Celery's own publishing
    publisher.publish([firing])
    slow, fast = _stored(redis, db, "reports")  # LPUSH: the latest first
    assert _comparable(fast) == _comparable(slow)
    assert fast["headers"]["expires"] == "2027-01-15T08:00:30.005000+00:00"  # fired + 30 s


def test_a_firing_without_expiry_is_written_as_celery_writes_it(
    redis: RedisServer, redis_url: str
) -> None:
    db = int(redis_url.rsplit("/", 1)[1])
    app = Celery("unit", broker=redis_url, set_as_current=False)
    firing = _firing(queue="plain")
    firing.expires_millis = None
    path = RedisPath.for_app(app)
    assert path is not None and path.accepts(firing)
    path.publish([firing])
    publisher = Publisher(app)
    publisher._redis = None
    publisher.publish([firing])
    slow, fast = _stored(redis, db, "plain")
    assert "expiration" not in fast["properties"] and fast["headers"]["expires"] is None
    assert _comparable(fast) == _comparable(slow)


def test_a_batch_is_queued_in_firing_order_whatever_its_queues(
    redis: RedisServer, redis_url: str
) -> None:
    db = int(redis_url.rsplit("/", 1)[1])
    app = Celery("unit", broker=redis_url, set_as_current=False)
    path = RedisPath.for_app(app)
    assert path is not None
    firings = [_firing(queue=q) for q in ("one", "two", "one", "one", "two")]
    path.publish(firings)

    def consumed(queue: str) -> list[str]:  # as a worker takes them: from the tail (BRPOP)
        return [m["headers"]["id"] for m in reversed(_stored(redis, db, queue))]

    ids = [f.fire_instance_id for f in firings]
    assert consumed("one") == [ids[0], ids[2], ids[3]]
    assert consumed("two") == [ids[1], ids[4]]


def test_options_the_redis_path_cannot_honour_go_through_celery(redis_url: str) -> None:
    app = Celery("unit", broker=redis_url, set_as_current=False)
    path = RedisPath.for_app(app)
    assert path is not None
    assert path.accepts(_firing())
    assert not path.accepts(_firing(priority=9))
    assert not path.accepts(_firing(routing_key="elsewhere"))


def test_a_broker_that_is_not_plain_redis_takes_celerys_path() -> None:
    assert RedisPath.for_app(Celery("unit", broker="memory://", set_as_current=False)) is None
    app = Celery("unit", broker="redis://localhost/0", set_as_current=False)
    app.conf.broker_transport_options = {"global_keyprefix": "x:"}
    assert RedisPath.for_app(app) is None


@pytest.mark.parametrize(
    "url",
    [
        "amqp://guest:guest@localhost:5672//",
        "pyamqp://localhost//",
        "sentinel://localhost:26379/0;sentinel://localhost:26380/0",
        "redis://localhost:6379/0;redis://localhost:6380/0",  # failover URLs
    ],
)
def test_rabbitmq_and_sentinel_brokers_take_celerys_path(url: str) -> None:
    """The Redis path is for one plain Redis: RabbitMQ and Redis behind Sentinel (whose master
    moves) always publish through Celery (docs/operations.md, "Which path a broker takes")."""
    app = Celery("unit", broker=url, set_as_current=False)
    app.conf.broker_transport_options = {"master_name": "mymaster"}
    assert RedisPath.for_app(app) is None


class _TraceHeaders:
    """Publisher hooks adding a fixed trace context, as the tracing hooks do."""

    carrier = {"traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01", "tracestate": "k=v"}

    def before_publish(self, firings: Any) -> dict[str, dict[str, str]]:
        return {f.fire_instance_id: dict(self.carrier) for f in firings}

    def sending(self, firing: Any) -> Any:
        return contextlib.nullcontext()

    def after_publish(self, firings: Any, error: Any) -> None:
        pass


def test_trace_headers_are_written_by_the_redis_path_as_celery_writes_them(
    redis: RedisServer, redis_url: str
) -> None:
    db = int(redis_url.rsplit("/", 1)[1])
    app = Celery("unit", broker=redis_url, set_as_current=False)
    firing = _firing(queue="traced")
    fast_publisher = Publisher(app, hooks=_TraceHeaders())
    fast_publisher.publish([firing])
    slow_publisher = Publisher(app, hooks=_TraceHeaders())
    slow_publisher._redis = None
    slow_publisher.publish([firing])
    slow, fast = _stored(redis, db, "traced")
    assert fast["headers"]["traceparent"] == _TraceHeaders.carrier["traceparent"]
    assert _comparable(fast) == _comparable(slow)
