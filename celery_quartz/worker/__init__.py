"""Worker side: one execution start per firing, and completion of every firing.

``celery_quartz.install(app)`` (one line, in the module that creates the app) wraps every task's
``before_start`` with a guard and listens to ``task_postrun``:

* at start, the firing's row goes FIRED/PUBLISHED → EXECUTING with this worker's node name, by a
  conditional update; a second delivery of the same firing matches nothing and is dropped
  (``Ignore``) before the task body runs;
* at the end (success or failure), the row is removed and what waited on it is released; a task
  that asked Celery to retry it keeps its firing in flight for the next delivery; a failure is
  handed to the trigger's retry policy in the same transaction (see :mod:`celery_quartz.retry`).
  A success whose end releases nothing is recorded with the process's other such ends, at most
  ``quartz_worker_completion_delay`` seconds later;
* a pool process stopped while running a firing (its hard time limit, the OOM killer, a revoke
  with ``terminate=True``) cannot record the end: the worker's main process does, when Celery
  reports it.

Messages that did not come from celery-quartz pass through untouched. The parts, each a module:

* :mod:`~celery_quartz.worker.runtime`: :class:`WorkerRuntime`, what the parts share (the
  settings, read once; one store per scheduler name; the clock; the execution hooks);
* :mod:`~celery_quartz.worker.guard`: the start guard and the completion;
* :mod:`~celery_quartz.worker.ends`: the successes held for a batch, and the lost ends;
* :mod:`~celery_quartz.worker.checkin`: the worker's check-in bootstep, and ``quartz_health``;
* :mod:`~celery_quartz.worker.progress`: the progress running tasks report, written off their path;
* :mod:`~celery_quartz.worker.cancels`: the cancel requests (``cancel_previous``) read from the
  store for the runs a pool cannot terminate (solo, threads);
* this module: :func:`install`, which wires them into Celery.
"""

from __future__ import annotations

import atexit

from celery import Celery
from celery.signals import (
    task_failure,
    task_postrun,
    task_received,
    task_revoked,
    worker_init,
    worker_process_init,
    worker_process_shutdown,
    worker_shutdown,
)

from celery_quartz.observability.execution import ExecutionInstrumentation
from celery_quartz.worker.checkin import WorkerCheckIn, register_health_command
from celery_quartz.worker.guard import ExecutionGuard
from celery_quartz.worker.runtime import WorkerRuntime, runtime_of

__all__ = ["WorkerCheckIn", "WorkerRuntime", "install", "runtime_of"]


def install(app: Celery) -> None:
    """Install the worker-side hooks on ``app``; idempotent. Call it where the app is created."""
    if runtime_of(app) is not None:
        return
    runtime = WorkerRuntime(app)
    runtime.execution_hooks.append(ExecutionInstrumentation())
    register_health_command()
    guard = ExecutionGuard(runtime)
    app.on_after_finalize.connect(lambda sender, **_: guard.guard_tasks(), weak=False)
    if app.finalized:
        guard.guard_tasks()
    runtime.connect(task_postrun, guard.on_postrun)
    lost = runtime.lost_ends
    runtime.connect(task_received, lost.on_received)
    runtime.connect(task_failure, lost.on_failure)
    runtime.connect(task_revoked, lost.on_revoked)
    runtime.connect(worker_init, runtime.in_worker_process)
    runtime.connect(worker_process_init, runtime.in_pool_process)
    # Before the check-in's own receiver (connected when the worker starts): the ends still
    # waiting are recorded before the worker's check-in row is removed.
    runtime.connect(worker_process_shutdown, runtime.record_waiting_ends)
    runtime.connect(worker_shutdown, runtime.record_waiting_ends)
    runtime.connect(worker_shutdown, lost.record_lost_ends)
    atexit.register(runtime.record_waiting_ends)
    app.steps["worker"].add(WorkerCheckIn)
