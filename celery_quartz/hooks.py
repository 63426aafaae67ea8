"""The typed hooks: the named points where a concern beside the core plugs in.

In dramatiq's style: each class here is a base whose hooks do nothing. A cross-cutting concern
(metrics, tracing, run history, an audit trail) is one class that subclasses the base it needs
and overrides the hooks it cares about; the core calls every hook by name and never asks what a
concern is. A hook that raises is logged and ignored: a concern never fails the work it watches.

* :class:`StoreHooks`: around each role operation of a store
  (:meth:`celery_quartz.store.SqlStore.add_hooks`);
* :class:`ExecutionHooks`: a firing's execution on a worker;
* :class:`PublishHooks`: a batch of firings handed to the broker.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from celery import Task

    from celery_quartz.context import JobExecutionContext
    from celery_quartz.firing import Firing, FiringHeader

logger = logging.getLogger(__name__)

_T = TypeVar("_T")


def call_safely(hook: Callable[..., _T], *args: Any, default: _T, **kwargs: Any) -> _T:
    """Call one hook; one that raises is logged (naming it) and ``default`` is returned, so
    that the work it watches goes on."""
    try:
        return hook(*args, **kwargs)
    except Exception:
        logger.exception("hook %s failed; going on without it", getattr(hook, "__qualname__", hook))
        return default


# -- store operations


@dataclass(frozen=True)
class StoreOperation:
    """One call of a store role operation, as the hooks around it see it."""

    #: The role method's name (``claim``, ``check_in``, ``complete_execution``, …).
    name: str
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]


class StoreHooks:
    """Around every role operation of a store (the methods of the role interfaces in
    :mod:`celery_quartz.store.abc`), in the calling thread. Implemented by
    :class:`~celery_quartz.observability.store.StoreObservation`.

    Each hook of a store is called before the operation in the order they were added, and after
    it in the reverse order, whether it returned or raised.
    """

    def before_store_operation(self, operation: StoreOperation) -> Any:
        """Called before ``operation`` runs; what it returns is handed to
        :meth:`after_store_operation` (a start time, a span)."""
        return None

    def after_store_operation(
        self,
        operation: StoreOperation,
        before: Any,
        *,
        result: Any = None,
        exception: BaseException | None = None,
    ) -> None:
        """Called once ``operation`` returned ``result``, or raised ``exception``; ``before``
        is what :meth:`before_store_operation` returned (None if it raised)."""


# -- executions and publishing


class ExecutionHooks:
    """A firing's execution on a worker (:mod:`celery_quartz.worker`), in the process that runs
    its task: the start, then one end. Implemented by
    :class:`~celery_quartz.observability.execution.ExecutionInstrumentation`.

    The end hooks are called once the task has returned or raised, before its end is recorded
    in the store: the specific one (success, failure or retry), then :meth:`after_end`.
    """

    def after_start(self, task: Task, context: JobExecutionContext) -> None:
        """The firing's start is recorded: its task runs now, in this process."""

    def after_start_refused(self, task: Task, header: FiringHeader, reason: str) -> None:
        """A start was refused and the task does not run (Quartz's veto): the firing is already
        executing or complete (a second delivery), or the store did not answer and the message
        is delivered again shortly."""

    def after_success(self, task: Task, context: JobExecutionContext, result: Any) -> None:
        """The task returned ``result``."""

    def after_failure(
        self, task: Task, context: JobExecutionContext, exception: BaseException
    ) -> None:
        """The task raised ``exception`` (the trigger's retry policy decides what follows)."""

    def after_retry(self, task: Task, context: JobExecutionContext) -> None:
        """The firing stays in flight for another delivery: the task called Celery's
        ``self.retry()``, or raised :class:`~celery_quartz.errors.RefireJob`."""

    def after_end(
        self, task: Task, context: JobExecutionContext, state: str | None, result: Any
    ) -> None:
        """Any end, after the specific hook: ``state`` is Celery's (``SUCCESS``, ``FAILURE``,
        ``RETRY``, ``IGNORED``, ``REJECTED``) and ``result`` the return value or the exception.
        ``state`` None: the process was stopped under the task (a hard time limit, a revoke
        with ``terminate``, a cold shutdown), and the end is left to the worker's main process
        or to the recovery of a dead worker."""


class PublishHooks:
    """A batch of firings handed to the broker (:class:`~celery_quartz.publisher.Publisher`), on
    the Celery path and the Redis path alike. Implemented by
    :class:`~celery_quartz.observability.publishing.PublishTracing`."""

    def before_publish(self, firings: Sequence[Firing]) -> dict[str, dict[str, str]]:
        """Extra message headers by fire instance id (string values only)."""
        return {}

    def sending(self, firing: Firing) -> AbstractContextManager[Any]:
        """Held around one firing's ``send_task`` (the Celery path)."""
        return nullcontext()

    def after_publish(self, firings: Sequence[Firing], error: BaseException | None) -> None:
        """The batch was handed over, or ``error`` was raised."""
