"""One execution start per firing, and the end of every firing a task runs: the start guard
around each task's ``before_start``, and the completion at ``task_postrun``."""

from __future__ import annotations

import logging
from typing import Any

from celery import Task
from celery.exceptions import Ignore
from celery.states import FAILURE, RETRY, SUCCESS
from sqlalchemy.exc import DBAPIError

from celery_quartz.context import (
    JobExecutionContext,
    RunningFiring,
    running_firing,
    set_running_firing,
)
from celery_quartz.errors import RefireJob
from celery_quartz.firing import HEADER, FiringHeader
from celery_quartz.hooks import call_safely
from celery_quartz.store import WorkerStore
from celery_quartz.store.views import FiringOutcome
from celery_quartz.worker.ends import persist
from celery_quartz.worker.runtime import WorkerRuntime

logger = logging.getLogger(__name__)

#: Set on a task class whose ``before_start`` is guarded.
_GUARDED = "_celery_quartz_guarded"

#: Header of a firing re-delivered after a start whose recording is uncertain: names the worker.
_UNCERTAIN_START = "quartz_uncertain_start"


class ExecutionGuard:
    """Guards each firing's start (once, by a conditional update of its row) and records its
    end (see :mod:`celery_quartz.worker`); tells the runtime's execution hooks of both."""

    def __init__(self, runtime: WorkerRuntime) -> None:
        self.runtime = runtime

    def guard_tasks(self) -> None:
        """Guard the ``before_start`` of every task class the app has (calling the task's own)."""
        for task in list(self.runtime.app.tasks.values()):
            _guard_class(type(task), self)

    def before_start(self, task: Task, task_id: str) -> None:
        request = task.request
        header = FiringHeader.of_request(request)
        if header is None:
            return
        running = running_firing(request)
        if running is not None and running.task_id == task_id:
            return  # a second guard of the same start (a guarded class's guarded subclass)
        # The message's task id is the fire instance id, suffixed once the firing has been
        # published again after an expiry (:attr:`celery_quartz.firing.Firing.task_id`).
        fire_id = header.fire_instance_id
        worker = request.hostname or "unknown"
        uncertain = _custom_headers(request).get(_UNCERTAIN_START)
        try:
            started = self.runtime.store(header.scheduler_name).start_execution(
                fire_id, worker, restart_from=uncertain
            )
        except DBAPIError:
            # The store did not answer (a restart, a blip): deliver the same firing again shortly
            # rather than run it unrecorded or lose it. Whether this start was recorded before
            # the connection broke is unknown; the next delivery may take over from this worker.
            logger.warning("firing %s: the store did not answer; retrying in 1 s", fire_id)
            headers = {**_custom_headers(request), HEADER: header.fields, _UNCERTAIN_START: worker}
            self._tell_refused(task, header, "the store did not answer; held back")
            raise task.retry(countdown=1, max_retries=None, headers=headers) from None
        if started is None:
            logger.info(
                "firing %s of trigger %s is already executing or complete: not starting it again",
                fire_id,
                header.trigger_key,
            )
            self._tell_refused(task, header, "already executing or complete")
            raise Ignore()
        context = JobExecutionContext.from_header(header, worker, task_id)
        context.progress_sink = self.runtime.report_progress
        set_running_firing(request, RunningFiring(task_id, header, context, started.batchable))
        self.runtime.watch_cancel(context)
        for hooks in self.runtime.execution_hooks:
            call_safely(hooks.after_start, task, context, default=None)

    def on_postrun(
        self,
        sender: Any = None,
        task_id: str | None = None,
        task: Task | None = None,
        state: str | None = None,
        retval: Any = None,
        **_: Any,
    ) -> None:
        """Celery's ``task_postrun``: record the end of the firing the task ran."""
        if task is None or task.app is not self.runtime.app:
            return
        request = task.request
        running = running_firing(request)
        if task_id is None or running is None or running.task_id != task_id:
            return
        set_running_firing(request, None)
        context = running.context
        self.runtime.forget_progress(context.fire_instance_id)
        self.runtime.forget_cancel(context.fire_instance_id)
        self._tell_end(task, context, state, retval)
        if state is None:
            # No outcome: a SystemExit or KeyboardInterrupt went through the task, this process
            # being stopped under it (the SIGTERM of a hard time limit or of a revoke with
            # terminate, a cold shutdown). Its end is not a success: it is left to the worker's
            # main process (:class:`~celery_quartz.worker.ends.LostEnds`), or to the recovery
            # of a dead worker.
            return
        store = self.runtime.store(context.scheduler_name)
        fire_id = context.fire_instance_id
        if state == RETRY:
            persist(lambda: store.return_to_published(fire_id), f"firing {fire_id}")
        elif isinstance(retval, RefireJob):
            self._refire(task, store, running)
        else:
            job_data = context.job_data if running.header.persist_job_data else None
            # A run revoked while it ran (a threads or solo pool cannot terminate it: the
            # revoke, or the store's cancel request, turned context.cancelled true) is
            # cancelled, however it ended. Only an exception counts as a failure: Ignore and
            # Reject end as IGNORED/REJECTED.
            cancelled = context.cancelled
            failed = state == FAILURE and not cancelled
            if not failed and not cancelled and job_data is None and running.batchable:
                batch = self.runtime.batch
                if batch.delay > 0:
                    batch.add(context.scheduler_name, fire_id, context.summary, context.metrics)
                    return
            # Kept on the trigger as its last outcome, and in the history with what the task
            # reported, in the completion's own transaction.
            summary, metrics = context.summary, context.metrics
            outcome = (
                FiringOutcome.of_exception(retval, summary=summary, metrics=metrics)
                if failed and isinstance(retval, BaseException)
                else FiringOutcome(
                    failed=failed, summary=summary, metrics=metrics, cancelled=cancelled
                )
            )
            persist(
                lambda: store.complete_execution(
                    fire_id, job_data=job_data, failed=failed, outcome=outcome
                ),
                f"firing {fire_id}",
            )

    def _refire(self, task: Task, store: WorkerStore, running: RunningFiring) -> None:
        """Run the same firing again at once, with ``refire_count`` one higher (the same
        message task id: its message ran, so no worker has it revoked)."""
        fire_id = running.context.fire_instance_id
        if not persist(
            lambda: store.return_to_published(fire_id, refire=True), f"firing {fire_id}"
        ):
            return
        request = task.request
        header = running.header.refired()
        delivery = request.delivery_info or {}
        task.apply_async(
            args=request.args,
            kwargs=request.kwargs,
            task_id=running.task_id,
            headers={HEADER: header.fields},
            serializer="json",
            exchange=delivery.get("exchange"),
            routing_key=delivery.get("routing_key"),
        )
        logger.info("firing %s refired (refire count %d)", fire_id, header.refire_count)

    def _tell_refused(self, task: Task, header: FiringHeader, reason: str) -> None:
        for hooks in self.runtime.execution_hooks:
            call_safely(hooks.after_start_refused, task, header, reason, default=None)

    def _tell_end(
        self, task: Task, context: JobExecutionContext, state: str | None, retval: Any
    ) -> None:
        for hooks in self.runtime.execution_hooks:
            if state == RETRY or isinstance(retval, RefireJob):
                call_safely(hooks.after_retry, task, context, default=None)
            elif state == FAILURE and isinstance(retval, BaseException):
                call_safely(hooks.after_failure, task, context, retval, default=None)
            elif state == SUCCESS:
                call_safely(hooks.after_success, task, context, retval, default=None)
            call_safely(hooks.after_end, task, context, state, retval, default=None)


def _custom_headers(request: Any) -> dict[str, Any]:
    headers = getattr(request, "headers", None)
    return dict(headers) if isinstance(headers, dict) else {}


def _guard_class(cls: type[Task], guard: ExecutionGuard) -> None:
    if cls.__dict__.get(_GUARDED):
        return
    original = cls.before_start

    def before_start(self: Task, task_id: str, args: Any, kwargs: Any) -> None:
        guard.before_start(self, task_id)
        original(self, task_id, args, kwargs)

    cls.before_start = before_start
    setattr(cls, _GUARDED, True)
