"""Publishing firings to the broker as ordinary Celery task messages.

Two paths, one message format (Celery's task protocol 2, JSON):

* through Celery (``app.send_task`` inside one kombu producer batch): always correct, whatever
  the broker, the routing or the publish options; about 200 µs of Python per message;
* straight to Redis, one ``LPUSH`` of many values per queue of a batch (pipelined), the envelope
  built here exactly as kombu's Redis transport writes it (a test compares the two field for
  field, and a stock worker runs both).
  Taken only when nothing could tell the difference: the broker is a plain Redis URL, the job's
  options name at most a ``queue`` (and ``expires``) routed the default way (a direct exchange
  whose routing key is the queue's name), and no one listens to Celery's publish signals.
  Everything else goes through Celery. With ``task_send_sent_event`` on, the Redis path sends a
  ``task-sent`` event per firing after the batch, through Celery's event dispatcher, with the
  fields Celery's own would carry.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import socket
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime, timedelta
from json.encoder import encode_basestring_ascii as _encode
from typing import Any

from celery import Celery, signals
from celery.utils.nodenames import worker_direct
from celery.utils.saferepr import saferepr

from celery_quartz.clock import Clock, SystemClock, from_millis
from celery_quartz.firing import HEADER, Firing, FiringHeader, new_ids
from celery_quartz.hooks import PublishHooks, call_safely

logger = logging.getLogger(__name__)

#: Publish options that belong to the firing, not to the job's options.
_RESERVED_OPTIONS = frozenset({"task_id", "headers", "args", "kwargs", "serializer"})
#: Job options that choose where a message goes; a firing's own route replaces them.
_ROUTING_OPTIONS = ("queue", "exchange", "routing_key")
#: Job options the Redis path can honour; any other option sends the firing through Celery.
_REDIS_PATH_OPTIONS = frozenset({"queue", "expires"})
#: The same for a firing routed to its group's queue.
_REDIS_PATH_ROUTED_OPTIONS = frozenset({*_ROUTING_OPTIONS, "expires"})
#: Celery's limits on argsrepr/kwargsrepr (``task_protocol`` 2 defaults).
_REPR_MAXSIZE = 1024
_EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}
#: The base64 body of a message without arguments.
_EMPTY_BODY = base64.b64encode(json.dumps([[], {}, _EMBED]).encode()).decode()


class Publisher:
    """Sends a batch of firings, pipelined: one producer batch, or one Redis pipeline."""

    def __init__(
        self,
        app: Celery,
        batch_size: int = 100,
        clock: Clock | None = None,
        hooks: PublishHooks | None = None,
    ) -> None:
        self.app = app
        self.batch_size = batch_size
        self.clock = clock
        #: Told of every batch (None: nothing is, and nothing is added to the messages).
        self.hooks = hooks
        self._redis: RedisPath | bool | None = False  # False: not decided yet
        #: The queues this publisher has sent firings to (the loop checks that a worker with
        #: the hooks consumes each of them).
        self.queues: set[str] = set()
        # Queue name by (task, queue option), as Celery's router routes it.
        self._routes: dict[tuple[str, str | None], str | None] = {}

    def publish(self, firings: Sequence[Firing]) -> None:
        """Publish every firing; raises (the broker's error) if any could not be handed over.

        The message's task id is the fire instance id, so a firing published twice (a retry after
        an error, a survivor republishing for a dead scheduler) is one firing to the worker guard.
        """
        if not firings:
            return
        if self.hooks is None:
            self._publish(firings, {})
        else:
            # A failing hook (instrumentation) must never keep a firing from being published.
            no_extra: dict[str, dict[str, str]] = {}
            extra = call_safely(self.hooks.before_publish, firings, default=no_extra)
            try:
                self._publish(firings, extra)
            except BaseException as exc:
                self._after_publish(firings, exc)
                raise
            self._after_publish(firings, None)
        self.revoke_replaced(firings)

    def revoke_replaced(self, firings: Sequence[Firing]) -> None:
        """Revoke, with ``terminate=True``, the firings the published ``firings`` replace (their
        trigger's overlap policy ``cancel_previous``): Celery's remote control reaches every
        worker, so a run is cancelled wherever it is, and a message still in the broker is
        discarded when a worker receives it. A pool that cannot terminate (threads, solo) keeps
        running the task, which sees ``current_context().cancelled``. A revoke that cannot be
        sent is logged; the run then goes on to its end."""
        task_ids = [task_id for firing in firings for task_id in firing.revokes]
        if not task_ids:
            return
        try:
            self.app.control.revoke(task_ids, terminate=True)
        except Exception:
            logger.exception("overlap: revoking %s (cancel_previous) failed", ", ".join(task_ids))
            return
        logger.info(
            "overlap: revoked %s with terminate (cancel_previous: replaced by a new firing)",
            ", ".join(task_ids),
        )

    def _sending(self, firing: Firing) -> AbstractContextManager[Any]:
        assert self.hooks is not None
        return call_safely(self.hooks.sending, firing, default=nullcontext())

    def _after_publish(self, firings: Sequence[Firing], error: BaseException | None) -> None:
        assert self.hooks is not None
        call_safely(self.hooks.after_publish, firings, error, default=None)

    def _publish(self, firings: Sequence[Firing], extra: dict[str, dict[str, str]]) -> None:
        if self._redis is False:
            self._redis = RedisPath.for_app(self.app, self.clock)
        fast: list[Firing] = []
        slow: list[Firing] = []
        for firing in firings:
            if isinstance(self._redis, RedisPath) and self._redis.accepts(firing):
                fast.append(firing)
            else:
                slow.append(firing)
        for firing in firings:
            queue = self.queue_of(firing)
            if queue is not None:
                self.queues.add(queue)
        if slow:
            self._publish_through_celery(slow, extra)
        if fast:
            assert isinstance(self._redis, RedisPath)
            self._redis.publish(fast, extra)
        logger.debug("published %d firing(s) (%d straight to Redis)", len(firings), len(fast))

    def queue_of(self, firing: Firing) -> str | None:
        """The name of the queue ``firing`` is sent to (its route, its job's ``queue`` option,
        or Celery's routing of its task); None when Celery's router names none."""
        if firing.node is not None:
            return str(worker_direct(firing.node).name)
        wanted = firing.queue or firing.options.get("queue")
        if isinstance(wanted, str):
            return wanted
        key = (firing.task, None)
        if key not in self._routes:
            queue = self.app.amqp.router.route({}, firing.task).get("queue")
            self._routes[key] = None if queue is None else str(queue.name)
        return self._routes[key]

    def _publish_through_celery(
        self, firings: Sequence[Firing], extra: dict[str, dict[str, str]]
    ) -> None:
        hooks = self.hooks
        with (
            self.app.producer_or_acquire() as producer,
            producer.batch(max_size=self.batch_size),
        ):
            for firing in firings:
                with nullcontext() if hooks is None else self._sending(firing):
                    self.app.send_task(
                        firing.task,
                        args=firing.args,
                        kwargs=firing.kwargs,
                        task_id=firing.task_id,
                        # kwargsrepr as a header: Celery lays custom headers over its own
                        # (as an option it would also land in the message's properties).
                        headers={
                            HEADER: FiringHeader.of(firing).fields,
                            "kwargsrepr": kwargs_repr(firing),
                            **extra.get(firing.fire_instance_id, {}),
                        },
                        serializer="json",
                        producer=producer,
                        **publish_options(firing),
                    )


def publish_options(firing: Firing) -> dict[str, Any]:
    """The job's Celery publish options, with the firing's expiry (the earlier one wins) and
    its route: a grouped or pinned firing's queue replaces the job's own routing options."""
    options = {k: v for k, v in firing.options.items() if k not in _RESERVED_OPTIONS}
    if firing.node is not None or firing.queue is not None:
        for key in _ROUTING_OPTIONS:
            options.pop(key, None)
        options["queue"] = worker_direct(firing.node) if firing.node else firing.queue
    expires = _expires(firing)
    if expires is not None:
        options["expires"] = expires
    return options


def _expires(firing: Firing) -> datetime | None:
    """The message's expiry: the firing's, or the job's own ``expires`` option if earlier.

    A job's own expiry is a number of seconds after publication, or an ISO 8601 instant.
    """
    candidates = []
    if firing.expires_millis is not None:
        candidates.append(from_millis(firing.expires_millis))
    own = firing.options.get("expires")
    if isinstance(own, (int, float)) and not isinstance(own, bool):
        candidates.append(from_millis(firing.fired_millis) + timedelta(seconds=own))
    elif isinstance(own, str):
        candidates.append(datetime.fromisoformat(own))
    return min(candidates) if candidates else None


def _repr(value: Any) -> str:
    """Celery's ``saferepr`` of JSON arguments: the plain ``repr`` unless it is too long."""
    text = repr(value)
    return text if len(text) <= _REPR_MAXSIZE else saferepr(value, _REPR_MAXSIZE)


def kwargs_repr(firing: Firing) -> str:
    """What Flower shows as a firing's keyword arguments: the arguments, then which job and
    trigger it is and the scheduled fire time it serves. The task name is left alone (Flower
    filters by it), and so are the arguments the task receives: only the representation that
    monitors display (``kwargsrepr``) carries the firing's identity.
    """
    identity = (
        f" (quartz job={firing.job_key} trigger={firing.trigger_key} "
        f"scheduled={from_millis(firing.scheduled_millis).isoformat()})"
    )
    return _repr(firing.kwargs) + identity


class RedisPath:
    """Firings pushed to Redis in one pipeline, as the envelope kombu's Redis transport writes."""

    def __init__(self, app: Celery, client: Any, clock: Clock | None = None) -> None:
        self.app = app
        self.client = client
        self.clock = clock or SystemClock()
        # Queue name by (task, queue option); None where the routing is not the default one.
        self._queues: dict[tuple[str, str | None], str | None] = {}
        self._origin = f"gen{os.getpid()}@{socket.gethostname()}"
        self._templates: dict[tuple[str, str, bool, tuple[str, ...]], str] = {}
        self._dispatcher: Any = None

    @classmethod
    def for_app(cls, app: Celery, clock: Clock | None = None) -> RedisPath | None:
        """The Redis path for ``app``, or None when a message might differ from Celery's own."""
        conf = app.conf
        url = conf.broker_write_url or conf.broker_url
        if not isinstance(url, str) or not url.startswith(("redis://", "rediss://")):
            return None
        if ";" in url or (conf.broker_transport_options or {}).get("global_keyprefix"):
            return None
        if conf.task_protocol != 2:
            return None
        if signals.before_task_publish.receivers or signals.after_task_publish.receivers:
            return None
        import redis

        return cls(app, redis.Redis.from_url(url), clock)

    def accepts(self, firing: Firing) -> bool:
        # A worker's own queue is bound to Celery's worker-direct exchange: Celery publishes it.
        if firing.node is not None:
            return False
        # A firing's own route replaces the job's routing options (see publish_options).
        allowed = _REDIS_PATH_OPTIONS if firing.queue is None else _REDIS_PATH_ROUTED_OPTIONS
        return set(firing.options) <= allowed and self._queue(firing) is not None

    def _queue(self, firing: Firing) -> str | None:
        wanted = firing.queue or firing.options.get("queue")
        key = (firing.task, wanted if isinstance(wanted, str) else None)
        if key not in self._queues:
            self._queues[key] = self._default_route(*key)
        return self._queues[key]

    def _default_route(self, task: str, queue_option: str | None) -> str | None:
        options = {"queue": queue_option} if queue_option else {}
        queue = self.app.amqp.router.route(options, task).get("queue")
        if queue is None or queue.exchange is None:
            return None
        if queue.exchange.type != "direct" or queue.routing_key != queue.name:
            return None
        # Declare it once, as kombu does before the first publish to a queue.
        with self.app.connection_for_write() as conn:
            queue.bind(conn.default_channel).declare()
        return str(queue.name)

    def publish(
        self, firings: Sequence[Firing], extra: dict[str, dict[str, str]] | None = None
    ) -> None:
        # One instant for the batch: its messages reach Redis together, at execute().
        now = self.clock.now()
        by_queue: dict[str, list[str]] = {}
        for firing, delivery_tag in zip(firings, new_ids(len(firings)), strict=True):
            queue = self._queue(firing)
            assert queue is not None
            headers = extra.get(firing.fire_instance_id) if extra else None
            by_queue.setdefault(queue, []).append(
                self.envelope(firing, queue, now, delivery_tag, headers)
            )
        # One LPUSH of many values leaves the list as that many LPUSHes of one would, in the
        # same order (each value goes to the head in turn), for one command and one reply.
        pipe = self.client.pipeline(transaction=False)
        for queue, messages in by_queue.items():
            pipe.lpush(queue, *messages)
        pipe.execute()
        if self.app.conf.task_send_sent_event:
            self._send_sent_events(firings)

    def _send_sent_events(self, firings: Sequence[Firing]) -> None:
        """A ``task-sent`` event per firing, as Celery's publishing sends it."""
        if self._dispatcher is None:
            # As Celery's own publishing holds one: publish() sends whatever ``enabled`` says.
            self._dispatcher = self.app.events.Dispatcher(enabled=False)
        dispatcher = self._dispatcher
        with self.app.producer_or_acquire() as producer:
            for firing in firings:
                queue = self._queue(firing)
                expires = _expires(firing)
                task_id = firing.task_id
                dispatcher.publish(
                    "task-sent",
                    {
                        "uuid": task_id,
                        "root_id": task_id,
                        "parent_id": None,
                        "name": firing.task,
                        "args": _repr(firing.args) if firing.args else "()",
                        "kwargs": kwargs_repr(firing),
                        "retries": 0,
                        "eta": None,
                        "expires": None if expires is None else expires.isoformat(),
                        "queue": queue,
                        "exchange": "",
                        "routing_key": queue,
                    },
                    producer,
                )

    def envelope(
        self,
        firing: Firing,
        queue: str,
        now: datetime | None = None,
        delivery_tag: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> str:
        """The JSON kombu's Redis transport stores for this firing's Celery task message, as
        published at ``now`` (the clock's now by default), which the broker TTL counts from.

        Rendered from a template per (task, queue, with or without expiry, extra header
        names): only the firing's own values are encoded, each on its own. ``headers`` are
        extra message headers (a trace context), as ``send_task(headers=...)`` adds them.
        """
        task_id = _encode(firing.task_id)
        expires = _expires(firing)
        args, kwargs = firing.args, firing.kwargs
        values = {
            "id": task_id,
            # Celery shows empty arguments as () and {}.
            "argsrepr": _encode(_repr(args)) if args else '"()"',
            "kwargsrepr": _encode(kwargs_repr(firing)),
            "header": json.dumps(FiringHeader.of(firing).fields),
            "reply_to": _encode(self.app.thread_oid),
            "delivery_tag": _encode(delivery_tag or new_ids(1)[0]),
            "body": _encode(_body(args, kwargs)),
        }
        if expires is None:
            values["expires"] = "null"
        else:
            values["expires"] = _encode(expires.isoformat())
            # The broker TTL Celery derives from ``expires`` (kombu's Redis transport keeps it).
            remaining = max((expires - (now or self.clock.now())).total_seconds(), 0)
            values["expiration"] = f'"{int(remaining * 1000)}"'
        names: tuple[str, ...] = ()
        if headers:
            names = tuple(headers)
            for i, name in enumerate(names):
                values[f"h{i}"] = _encode(headers[name])
        key = (firing.task, queue, expires is not None, names)
        template = self._templates.get(key)
        if template is None:
            template = self._templates[key] = _template(
                firing.task, queue, self._origin, expires is not None, names
            )
        return template.format_map(values)


def _body(args: list[Any], kwargs: dict[str, Any]) -> str:
    if not args and not kwargs:
        return _EMPTY_BODY  # most scheduled tasks take no arguments
    return base64.b64encode(json.dumps([args, kwargs, _EMBED]).encode()).decode()


def _message(
    task: str,
    queue: str,
    origin: str,
    slot: Callable[[str], str],
    with_expiry: bool,
    extra_headers: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The message kombu's Redis transport stores for a Celery task (protocol 2), with
    ``slot(name)`` in place of each value that is the firing's own."""
    task_id = slot("id")
    headers: dict[str, Any] = {
        "lang": "py",
        "task": task,
        "id": task_id,
        "shadow": None,
        "eta": None,
        "expires": slot("expires"),
        "group": None,
        "group_index": None,
        "retries": 0,
        "timelimit": [None, None],
        "root_id": task_id,
        "parent_id": None,
        "argsrepr": slot("argsrepr"),
        "kwargsrepr": slot("kwargsrepr"),
        "origin": origin,
        "ignore_result": None,
        "replaced_task_nesting": 0,
        "stamped_headers": None,
        "stamps": {},
        HEADER: slot("header"),
    }
    for i, name in enumerate(extra_headers):
        headers[name] = slot(f"h{i}")
    properties: dict[str, Any] = {
        "correlation_id": task_id,
        "reply_to": slot("reply_to"),
        "delivery_mode": 2,
    }
    if with_expiry:
        properties["expiration"] = slot("expiration")
    properties.update(
        {
            "delivery_info": {"exchange": "", "routing_key": queue},
            "priority": 0,
            "body_encoding": "base64",
            "delivery_tag": slot("delivery_tag"),
        }
    )
    return {
        "body": slot("body"),
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": headers,
        "properties": properties,
    }


#: A slot's place holder in a template's JSON, as ``json.dumps`` writes it.
_SLOT = re.compile(r'"\\u0000(\w+)\\u0000"')


def _template(
    task: str, queue: str, origin: str, with_expiry: bool, extra_headers: tuple[str, ...] = ()
) -> str:
    """:func:`_message` as JSON, with each slot a ``str.format`` field taking the slot's value
    already encoded as JSON."""
    text = json.dumps(
        _message(task, queue, origin, lambda name: f"\0{name}\0", with_expiry, extra_headers)
    )
    return _SLOT.sub(r"{\1}", text.replace("{", "{{").replace("}", "}}"))
