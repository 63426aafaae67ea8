"""Which workers consume the queues a scheduler publishes to, and whether they have the hooks.

A worker started without ``celery_quartz.install(app)`` runs a firing without recording its start,
so the firing looks expired and unstarted; published again, it would run twice. Two sources tell
the workers apart:

- the store's check-in rows: each worker with the hooks checks in with the queues it consumes;
- Celery's ``active_queues`` broadcast: every worker answers with its queues, and one that has no
  check-in row has no hooks.

The store is read at most once a minute to warn about queues that no worker with the hooks
consumes. The broadcast is sent on a thread of its own, never on the loop's (it waits for replies
for up to a second): once a minute while this scheduler publishes, and whenever an expired firing
is to be decided on and no answer fresh enough for it is at hand. :meth:`QueueWatch.read_since`
is the loop's one call: the answer to decide with, or None while the workers are being asked.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from celery_quartz.clock import Clock, to_millis
from celery_quartz.firing import Firing
from celery_quartz.store.views import NodeView

logger = logging.getLogger(__name__)

#: How often the check-in rows are read again, and the workers asked, while nothing is expiring.
READ_INTERVAL_MS = 60_000
#: How long the broadcast asking workers which queues they consume waits for replies (seconds).
BROADCAST_TIMEOUT = 1.0


class ListsNodes(Protocol):
    """What the watch needs of the store: the check-in rows."""

    def list_nodes(self) -> list[NodeView]: ...


class PublishesToQueues(Protocol):
    """What the watch needs of the publisher (:class:`celery_quartz.publisher.Publisher`)."""

    @property
    def app(self) -> Any: ...

    @property
    def queues(self) -> set[str]: ...

    def queue_of(self, firing: Firing) -> str | None: ...


@dataclass(frozen=True)
class ConsumerRead:
    """The workers' answer to one ``active_queues`` broadcast, checked against the check-in rows
    read after it.

    It speaks for any firing whose message expired before :attr:`started`: a worker that took
    such a message was consuming before the broadcast was sent, and answers it unless it died
    meanwhile (then nothing tells, as when no worker consumes the queue at all)."""

    #: When the broadcast was sent (the loop's clock).
    started: datetime
    #: Queue name -> the workers without the hooks that consume it.
    unhooked: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: Queue name -> the workers with the hooks that consume it (for the warnings).
    hooked: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: The broadcast could not be sent: no evidence either way.
    failed: bool = False

    def refusal(self, queue: str | None) -> str | None:
        """Why an expired firing of ``queue`` must not be published again, or None."""
        consumers = self.unhooked.get(queue) if queue is not None else None
        if not consumers:
            return None
        return (
            f"queue {queue!r} is consumed by {', '.join(consumers)} without the celery-quartz "
            "hooks (it may have run the firing unrecorded): not published again"
        )


@dataclass
class _Replies:
    started: datetime
    replies: dict[str, Any] | None = None  # None: the broadcast failed
    error: str | None = None
    done: threading.Event = field(default_factory=threading.Event)


class QueueWatch:
    """Keeps track of which workers, with and without the hooks, consume the queues a
    scheduler publishes to. Used from the scheduling loop's thread only; the broadcast alone
    runs on a thread of its own."""

    def __init__(
        self,
        store: ListsNodes,
        publisher: PublishesToQueues,
        clock: Clock,
        *,
        broadcast_timeout: float = BROADCAST_TIMEOUT,
    ) -> None:
        self.store = store
        self.publisher = publisher
        self.clock = clock
        self.broadcast_timeout = broadcast_timeout
        #: Queues this scheduler publishes to that no live worker with the hooks consumes, as
        #: last read from the check-in rows (health reports them).
        self.unhooked_queues: frozenset[str] = frozenset()
        #: Queues this scheduler publishes to that a worker without the hooks consumes, with
        #: those workers, from the workers' last answer (health reports them).
        self.unhooked_consumers: dict[str, tuple[str, ...]] = {}
        self._read_at: int | None = None
        self._asking: _Replies | None = None
        self._latest: ConsumerRead | None = None
        self._warned: tuple[dict[str, tuple[str, ...]], int] | None = None
        self._broadcast_failure_logged = False

    @property
    def broadcast_pending(self) -> bool:
        """Whether the workers are being asked now."""
        return self._asking is not None and not self._asking.done.is_set()

    def refresh(self) -> None:
        """At most once a minute, once something is published: read which queues live workers
        with the hooks consume, warn about each published queue that none does, and ask the
        workers (in the background) which queues they consume. Also takes in an answer that
        has arrived."""
        self._take_answer()
        published = self.publisher.queues
        if not published:
            return
        now = to_millis(self.clock.now())
        if self._read_at is not None and now - self._read_at < READ_INTERVAL_MS:
            return
        self._read_at = now
        hooked: set[str] = set()
        for node in self.store.list_nodes():
            if node.kind == "worker" and node.alive:
                hooked.update(node.queues or ())
        self.unhooked_queues = frozenset(published - hooked)
        for queue in sorted(self.unhooked_queues):
            logger.warning(
                "no worker with the celery-quartz hooks checks in for queue %r, which this "
                "scheduler publishes to: a worker started without celery_quartz.install(app) "
                "would run its firings unrecorded, so an expired firing of it is published "
                "again only when no such worker consumes the queue",
                queue,
            )
        self._ask()

    def read_since(self, since: datetime) -> ConsumerRead | None:
        """The workers' latest answer to a broadcast sent at or after ``since``, or None while
        they are being asked (they are asked now if no such broadcast is under way)."""
        self._take_answer()
        if self._latest is not None and self._latest.started >= since:
            return self._latest
        self._ask()
        return None

    def refuse(self, read: ConsumerRead) -> Callable[[Firing], str | None] | None:
        """The refusal to pass to the store's resolution of expired firings; None when no
        worker without the hooks consumes any queue."""
        if not read.unhooked:
            return None
        return lambda firing: read.refusal(self.publisher.queue_of(firing))

    def _ask(self) -> None:
        """Ask the workers, unless they are being asked (one broadcast at a time: one begun
        too early for the caller is let finish, and the next call asks again)."""
        if self._asking is not None:
            return
        asking = _Replies(started=self.clock.now())
        self._asking = asking
        threading.Thread(
            target=self._broadcast, args=(asking,), name="quartz-active-queues", daemon=True
        ).start()

    def _broadcast(self, asking: _Replies) -> None:
        try:
            inspect = self.publisher.app.control.inspect(timeout=self.broadcast_timeout)
            asking.replies = inspect.active_queues() or {}
        except Exception as exc:
            asking.error = f"{exc.__class__.__name__}: {exc}"
        finally:
            asking.done.set()

    def _take_answer(self) -> None:
        asking = self._asking
        if asking is None or not asking.done.is_set():
            return
        self._asking = None
        if asking.replies is None:
            read = ConsumerRead(started=asking.started, failed=True)
            if not self._broadcast_failure_logged:
                logger.warning(
                    "could not ask the workers which queues they consume: %s", asking.error
                )
                self._broadcast_failure_logged = True
        else:
            read = self._read(asking.started, asking.replies)
            self._broadcast_failure_logged = False
        self._latest = read
        published = self.publisher.queues
        self.unhooked_consumers = {q: w for q, w in read.unhooked.items() if q in published}
        self._warn(read)

    def _read(self, started: datetime, replies: dict[str, Any]) -> ConsumerRead:
        # Read after the replies, so that a hooked worker that answered has checked in by now
        # (it checks in before it consumes). Any worker row counts, alive or not: its process
        # has the hooks even while its check-ins are late.
        checked_in = {n.instance_name for n in self.store.list_nodes() if n.kind == "worker"}
        unhooked: dict[str, list[str]] = {}
        hooked: dict[str, list[str]] = {}
        for worker, consumed in sorted(replies.items()):
            side = hooked if worker in checked_in else unhooked
            for queue in consumed or ():
                name = queue.get("name") if isinstance(queue, dict) else None
                if isinstance(name, str):
                    side.setdefault(name, []).append(worker)
        return ConsumerRead(
            started=started,
            unhooked={q: tuple(w) for q, w in unhooked.items()},
            hooked={q: tuple(w) for q, w in hooked.items()},
        )

    def _warn(self, read: ConsumerRead) -> None:
        """Warn about each published queue a worker without the hooks consumes: when that
        changes, and again once a minute while it lasts."""
        now = to_millis(self.clock.now())
        if self._warned is not None:
            last, at = self._warned
            if last == self.unhooked_consumers and now - at < READ_INTERVAL_MS:
                return
        self._warned = (dict(self.unhooked_consumers), now)
        for queue, workers in sorted(self.unhooked_consumers.items()):
            beside = read.hooked.get(queue)
            logger.warning(
                "queue %r is consumed by %s without the celery-quartz hooks "
                "(celery_quartz.install(app) not called)%s: its firings run unrecorded; "
                "or by another cluster's worker (its own store), which drops them",
                queue,
                ", ".join(workers),
                f", beside {', '.join(beside)} with them" if beside else "",
            )
