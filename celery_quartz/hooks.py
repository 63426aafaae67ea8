"""The typed hooks: the named points where a concern beside the core plugs in.

In dramatiq's style: each class here is a base whose hooks do nothing. A cross-cutting concern
(metrics, tracing, run history, an audit trail) is one class that subclasses the base it needs
and overrides the hooks it cares about; the core calls every hook by name and never asks what a
concern is. A hook that raises is logged and ignored: a concern never fails the work it watches.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from celery import Task

    from celery_quartz.context import JobExecutionContext
    from celery_quartz.firing import Firing, FiringHeader


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
