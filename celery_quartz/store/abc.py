"""What a store must do, one interface per role that calls it. Read this module first.

The store records; it does not decide. A decision that is not the single statement settling a
race (a retry dropped because the next occurrence wins, admission against execution-group limits,
what a misfire instruction does to a missed occurrence) is a pure function in its domain module
(:mod:`celery_quartz.retry`, :mod:`celery_quartz.routing`, :mod:`celery_quartz.misfire`); the store
calls it and writes the outcome.

Roles, and who holds each:

* :class:`JobStore` — the client (:class:`celery_quartz.Quartz`), and the loads of definitions (the
  scheduling files, the ``beat_schedule`` import, the importers): jobs, triggers, calendars.
* :class:`PauseStore` — the client's pauses and resumes, each keeping why, who and when.
* :class:`~celery_quartz.store.abc_backfill.BackfillStore` — the client's backfills: past
  occurrences of a trigger run again, each once.
* :class:`SchedulingStore` — the scheduling loop (:mod:`celery_quartz.loop`): claim, fire, record
  publication, release, misfires.
* :class:`ClusterStore` — the cluster manager (:mod:`celery_quartz.cluster`) and the worker's
  check-in: check-in, failure detection, recovery of dead schedulers and workers, fencing.
* :class:`WorkerStore` — the worker hooks (:mod:`celery_quartz.worker`): start, complete, retry,
  persist job data.
* :class:`StoreReader` — operators: the CLI, health, metrics, the dashboard and HTTP API. Paged,
  filtered listings; it never writes.
* :class:`HistoryReader` — the same operators' reads of the run history, the statistics, each
  job's run status and the audit (docs/history.md).
* :class:`HistoryKeeper` — the one node of a cluster that sweeps the history: folds new rows into
  the statistics and deletes what retention no longer keeps.

What a process holds is the roles it uses together: :class:`SchedulerStore` (beat),
:class:`ClientStore` (the client, the CLI, an import), :class:`WorkerNodeStore` (a worker);
:class:`Store` is every role. A store calls the hooks added to it
(:class:`celery_quartz.hooks.StoreHooks`) around each role operation.

Every store is scoped to one scheduler name (several clusters may share the tables) and is
configured once, through its constructor: the misfire threshold, the clock and the bound on JSON
data are never passed per call. Open one with :func:`celery_quartz.store.open_store`.

"Race settled" paragraphs name the race between processes that a method settles in one
transaction. Errors are those of :mod:`celery_quartz.errors`; a method that raises writes nothing.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from celery_quartz.clock import Clock
from celery_quartz.definitions import Plan, SchedulingData
from celery_quartz.editing import TriggerEdit
from celery_quartz.firing import AcquiredFiring, Firing
from celery_quartz.job import Job
from celery_quartz.keys import JobKey, TriggerKey
from celery_quartz.pausing import PauseRecord, PauseRequest
from celery_quartz.routing import Router, Unserved
from celery_quartz.store.abc_backfill import BackfillStore
from celery_quartz.store.abc_history import HistoryKeeper, HistoryReader
from celery_quartz.store.records import (
    CheckIn,
    Claim,
    Fence,
    FinishedExecution,
    FiringOwners,
    LeaderMoveRecovery,
    ProcessLoss,
    ProgressReport,
    StartedExecution,
    WorkerRecovery,
)
from celery_quartz.store.views import (
    FiringFilter,
    FiringOutcome,
    FiringView,
    GroupOccupancy,
    JobFilter,
    NodeView,
    OwedTriggers,
    Page,
    StateSummary,
    TriggerFilter,
    TriggerView,
)
from celery_quartz.triggers.base import Trigger, TriggerDetailsUpdate


class JobStore(abc.ABC):
    """The client's role: what is scheduled (jobs, triggers, calendars) and whether it runs."""

    #: The clock the store reads (stored triggers start now unless told otherwise).
    clock: Clock
    #: The bound on each JSON field of a job, a trigger or a calendar.
    max_data_bytes: int

    @abc.abstractmethod
    def store_jobs_and_triggers(
        self,
        items: Sequence[tuple[Job | None, Sequence[Trigger]]],
        *,
        replace: bool = False,
        paused: PauseRequest | None = None,
    ) -> None:
        """Store jobs and their triggers in one transaction: all of them, or none.

        A job of ``None`` means the triggers refer to jobs already stored. Each trigger gets its
        first fire time (with its calendar) and enters WAITING, PAUSED with its group, or BLOCKED
        while its ``disallow_concurrent`` job has a firing in flight. Raises
        :class:`~celery_quartz.errors.ObjectAlreadyExistsError` when a key exists and ``replace``
        is false, :class:`~celery_quartz.errors.JobNotFoundError` when a trigger names a job that
        is not stored, :class:`~celery_quartz.errors.InvalidTriggerError` for a trigger that is
        invalid, names a calendar not stored, or would never fire. With ``paused``, every
        trigger is stored paused with that record, in the same transaction: nothing fires in
        between.
        """

    @abc.abstractmethod
    def store_calendar(self, name: str, calendar: Any, *, replace: bool = False) -> None:
        """Store a calendar under ``name``. Raises
        :class:`~celery_quartz.errors.ObjectAlreadyExistsError` when one is stored and
        ``replace`` is false. Replacing a calendar does not move fire times already computed."""

    @abc.abstractmethod
    def retrieve_calendar(self, name: str) -> Any | None:
        """The calendar stored under ``name``, or None."""

    @abc.abstractmethod
    def remove_calendar(self, name: str) -> bool:
        """Remove the calendar ``name``; False when none is stored. Raises
        :class:`~celery_quartz.errors.CalendarInUseError` while a trigger refers to it."""

    @abc.abstractmethod
    def retrieve_job(self, key: JobKey) -> Job | None:
        """The job stored under ``key``, or None."""

    @abc.abstractmethod
    def retrieve_trigger(self, key: TriggerKey) -> Trigger | None:
        """The trigger stored under ``key`` with its fire times, or None."""

    @abc.abstractmethod
    def get_trigger_state(self, key: TriggerKey) -> str:
        """The trigger's state (:class:`~celery_quartz.store.schema.TriggerState`), or
        :data:`~celery_quartz.store.records.NONE_STATE` when it is not stored."""

    @abc.abstractmethod
    def get_triggers_of_job(self, key: JobKey) -> list[Trigger]:
        """The triggers of job ``key``, by group and name."""

    @abc.abstractmethod
    def job_keys(self, group: str | None = None) -> list[JobKey]:
        """The keys of the stored jobs (of one group), by group and name."""

    @abc.abstractmethod
    def remove_trigger(self, key: TriggerKey) -> bool:
        """Remove a trigger; a non-durable job left with no trigger goes with it. False when it
        was not stored. A firing of it in flight runs to its end."""

    @abc.abstractmethod
    def remove_job(self, key: JobKey) -> bool:
        """Remove a job and every trigger of it; False when it was not stored."""

    @abc.abstractmethod
    def update_trigger_details(self, key: TriggerKey, details: TriggerDetailsUpdate) -> None:
        """Write the changed details (description, preferred node) of the stored trigger in
        place; its fire times, state and counts are left alone. Raises
        :class:`~celery_quartz.errors.TriggerNotFoundError` naming ``key``.

        Race settled: a re-pin against a worker claiming the automatic pin at a start; whichever
        change comes first wins (the claim is a compare-and-swap)."""

    @abc.abstractmethod
    def replace_trigger(self, key: TriggerKey, new_trigger: Trigger) -> bool:
        """Replace a stored trigger by ``new_trigger`` (same job unless it names another), in
        one transaction. False when ``key`` is not stored."""

    @abc.abstractmethod
    def edit_trigger(self, key: TriggerKey, edit: TriggerEdit, *, dry_run: bool = False) -> Trigger:
        """Change details of the stored trigger ``key`` in place (:mod:`celery_quartz.editing`),
        in one transaction; the edited trigger as stored (with ``dry_run``: as it would be,
        nothing written). Its state, counts and pause are kept; a change of schedule or calendar
        recomputes the next fire time as a reschedule does, and drops a claim on it (the state
        is no longer ACQUIRED when its scheduler fires). Raises
        :class:`~celery_quartz.errors.TriggerNotFoundError`, or
        :class:`~celery_quartz.errors.InvalidTriggerError` naming the field at fault."""

    @abc.abstractmethod
    def apply_scheduling_data(
        self, files: Sequence[SchedulingData], now: datetime, *, dry_run: bool = False
    ) -> Plan:
        """Load definitions (scheduling files, ``beat_schedule``, an importer's group), in
        order: all of their changes or none, and what changed (with ``dry_run``, what would
        change; nothing is written). What changes is decided by
        :func:`celery_quartz.definitions.plan.plan` over the stored jobs and triggers they
        touch; a job or trigger that ends as it is stored is left alone.

        Race settled: several schedulers loading the same definitions as they start together;
        the read, the decision and the write are one transaction under the TRIGGER_ACCESS lock
        row, so the second loader finds every job and trigger unchanged and writes nothing.
        """

    @abc.abstractmethod
    def scheduled_definitions(self) -> tuple[list[Job], list[Trigger]]:
        """Every job and trigger outside the groups celery-quartz keeps itself (recovery, retry,
        ``beat_schedule``), read in one transaction: what an export writes."""

    @abc.abstractmethod
    def reset_trigger_from_error_state(self, keys: Sequence[TriggerKey]) -> int:
        """Return triggers in ERROR to their schedule (WAITING, or PAUSED when their group is
        paused, or BLOCKED while their ``disallow_concurrent`` job runs). The number reset."""


class PauseStore(abc.ABC):
    """The client's pauses: a trigger, a set of triggers, a job's, a group's, everything, each
    keeping its pause record (why, who, when); resuming clears it."""

    @abc.abstractmethod
    def pause_trigger(self, key: TriggerKey, request: PauseRequest | None = None) -> None:
        """Pause a trigger (PAUSED, or PAUSED_BLOCKED while its job's firing runs). A claim on
        it is dropped when its scheduler fires: the state is no longer ACQUIRED. With a
        ``request``, the trigger keeps its reason, who asked and when (every pause below does
        the same; a trigger already paused takes the new record); the resume clears it."""

    @abc.abstractmethod
    def pause_triggers(
        self, keys: Sequence[TriggerKey], request: PauseRequest | None = None
    ) -> None:
        """Pause each of the triggers ``keys`` that is stored, in one transaction."""

    @abc.abstractmethod
    def resume_triggers(self, keys: Sequence[TriggerKey]) -> None:
        """Resume each of the triggers ``keys`` that is paused, in one transaction."""

    @abc.abstractmethod
    def resume_trigger(self, key: TriggerKey) -> None:
        """Resume a paused trigger. One the pause made later than the misfire threshold gets
        its misfire instruction first (Quartz does the same)."""

    @abc.abstractmethod
    def pause_job(self, key: JobKey, request: PauseRequest | None = None) -> None:
        """Pause every trigger of job ``key``."""

    @abc.abstractmethod
    def resume_job(self, key: JobKey) -> None:
        """Resume every trigger of job ``key`` (misfire instructions as in
        :meth:`resume_trigger`)."""

    @abc.abstractmethod
    def pause_trigger_group(self, group: str, request: PauseRequest | None = None) -> None:
        """Pause every trigger of ``group``, and the triggers stored in it later (which take
        the group's record)."""

    @abc.abstractmethod
    def resume_trigger_group(self, group: str) -> None:
        """Resume every trigger of ``group`` (misfire instructions as in
        :meth:`resume_trigger`)."""

    @abc.abstractmethod
    def pause_all(self, request: PauseRequest | None = None) -> None:
        """Pause every trigger group, and every trigger stored later (Quartz's PauseAll)."""

    @abc.abstractmethod
    def resume_all(self) -> None:
        """Resume every trigger, and stop pausing the triggers stored later (ResumeAll)."""

    @abc.abstractmethod
    def paused_trigger_groups(self) -> list[str]:
        """The paused trigger groups, sorted."""

    @abc.abstractmethod
    def paused_group_records(self) -> dict[str, PauseRecord]:
        """Each paused trigger group's record (``"*"``: everything paused by :meth:`pause_all`)."""


class SchedulingStore(abc.ABC):
    """The scheduling loop's role: claim due triggers, fire them, record their publication,
    give claims back, and resolve what is late.

    Firings carry a message expiry of the store's misfire threshold: a firing no worker starts
    by then is resolved by :meth:`resolve_expired_firings`.
    """

    @abc.abstractmethod
    def claim(
        self,
        instance_name: str,
        *,
        no_later_than: datetime,
        max_count: int,
        time_window: float,
        fire_due: bool = True,
        published: Sequence[str | tuple[str, int]] = (),
        task_exists: Callable[[str], bool] | None = None,
        router: Router | None = None,
    ) -> Claim:
        """Claim the next batch of due triggers (Quartz's batch rule), in one transaction.

        When the batch's first trigger is already due and ``fire_due`` is set, the batch is
        fired in the same transaction (:attr:`Claim.firings`): one commit per batch. Otherwise
        it is claimed (:attr:`Claim.acquired`), to be fired by :meth:`fire` once due.
        ``published`` fire instance ids (or (id, instant in ms) pairs) are recorded as
        PUBLISHED in the same transaction. A trigger whose task ``task_exists`` does not know is
        put in ERROR instead (Quartz: the job cannot be run). Triggers later than the misfire
        threshold are left to the misfire handler unless they ignore misfires.

        With a ``router``, each trigger is routed and admitted only within its execution
        group's capacity and its pinned worker's (:mod:`celery_quartz.routing` decides); the
        others stay WAITING and their unserved groups are reported in :attr:`Claim.unserved`.

        Race settled: two schedulers selecting the same due triggers claim disjoint batches,
        and a claim is written only while the trigger is still WAITING. With bounded execution
        limits, two schedulers counting a group's firings in flight at once: the count and the
        claim are one transaction under the ``EXECUTION_LIMITS`` lock row.
        """

    @abc.abstractmethod
    def acquire_next_triggers(
        self,
        instance_name: str,
        *,
        no_later_than: datetime,
        max_count: int,
        time_window: float,
    ) -> list[AcquiredFiring]:
        """Claim up to ``max_count`` due triggers for ``instance_name`` without firing them
        (Quartz's ``AcquireNextTriggers``): :meth:`claim` with ``fire_due`` off."""

    @abc.abstractmethod
    def fire(self, instance_name: str, acquired: Sequence[AcquiredFiring]) -> list[Firing]:
        """Fire claimed triggers: advance each, and turn its fired row into a message to
        publish. Claims that lost their trigger (paused, changed, removed meanwhile) are
        dropped.

        Race settled: a scheduler that was declared dead, and whose claims a survivor took,
        must not fire them; ownership (the fired row of this instance, still ACQUIRED, and the
        trigger still ACQUIRED) is checked under row locks.
        """

    @abc.abstractmethod
    def mark_published(
        self, instance_name: str, published: Sequence[str | tuple[str, int]]
    ) -> None:
        """Record that the broker accepted these firings of ``instance_name`` (FIRED →
        PUBLISHED). A firing handed to another instance meanwhile is left to that instance;
        one a worker already started is left as it is."""

    @abc.abstractmethod
    def release_acquired(
        self,
        instance_name: str,
        acquired: Sequence[AcquiredFiring] | None = None,
        *,
        keep: Sequence[str] = (),
    ) -> int:
        """Give claimed-but-unfired triggers back (ACQUIRED → WAITING), as at shutdown; the
        number released. ``None`` releases every claim of the instance except the fire
        instance ids in ``keep``."""

    @abc.abstractmethod
    def unpublished_firings(self, instance_name: str) -> list[Firing]:
        """Firings this instance fired (or took over) whose publication is not recorded, to
        publish again with the same fire instance id. One whose job was deleted meanwhile is
        removed instead, and what waited on it is released."""

    @abc.abstractmethod
    def in_flight(self, instance_name: str | None = None) -> int:
        """Firings fired and not yet finished (of one scheduler instance, or of all)."""

    @abc.abstractmethod
    def handle_misfires(
        self, *, max_count: int, instance_name: str | None = None, router: Router | None = None
    ) -> tuple[int, bool]:
        """Apply the misfire instruction of up to ``max_count`` triggers later than the misfire
        threshold, earliest first. Returns (handled, more remain). Each occurrence missed is
        recorded in the history, decided by ``instance_name``: ``held`` when ``router`` would
        hold its trigger back now (an execution limit, a pin), otherwise ``misfired``.

        Race settled: two schedulers' misfire handlers picking the same trigger; each trigger is
        handled once, and only while it is still WAITING at the fire time that was late.
        """

    @abc.abstractmethod
    def resolve_expired_firings(
        self,
        instance_name: str,
        *,
        grace: float,
        max_count: int,
        router: Router | None = None,
        refuse: Callable[[Firing], str | None] | None = None,
    ) -> list[Firing]:
        """Resolve firings whose message expired before any worker started it, by the misfire
        instruction of their trigger (:func:`celery_quartz.misfire.expired_firing_outcome`);
        returns those to publish again, now owned by ``instance_name`` with a fresh expiry.
        One that was sent to its pinned worker's own queue goes to its group's queue this time:
        that worker did not start it in time. A firing to publish again for which ``refuse``
        gives a reason is dropped instead, with that reason logged (the loop refuses a queue
        that a worker without the hooks consumes: it may have run the firing without recording
        it).

        ``grace`` (seconds past the expiry) lets a worker that took the message just in time
        mark it EXECUTING first. Race settled: two schedulers resolving the same firing, or a
        worker starting it meanwhile; exactly one outcome holds.
        """

    @abc.abstractmethod
    def count_expired_firings(self, *, grace: float) -> int:
        """How many firings :meth:`resolve_expired_firings` would resolve now (any instance's):
        in flight, never started, their message expired more than ``grace`` seconds ago. The
        loop reads it before asking the workers which queues they consume, which it does only
        when there is something to decide."""

    @abc.abstractmethod
    def set_trigger_error(self, acquired: AcquiredFiring, reason: str) -> None:
        """Put a claimed trigger in ERROR (Quartz: its job cannot be run) and drop the claim."""


class ClusterStore(abc.ABC):
    """The cluster manager's role: check-in, failure detection, recovery, and the fencing
    epoch of a non-clustered leader."""

    #: The fence this store's writes check (a non-clustered leader's epoch); None: unfenced.
    fence: Fence | None

    @abc.abstractmethod
    def check_in(
        self,
        instance_name: str,
        *,
        interval: float,
        kind: str = "scheduler",
        clustered: bool = True,
        hostname: str | None = None,
        pid: int | None = None,
        queues: Sequence[str] | None = None,
        concurrency: int | None = None,
    ) -> bool:
        """Write this process's check-in. False when the row had gone (another instance
        recovered this one, thinking it dead); the row is then written anew.

        With a fence, the write is refused (:class:`~celery_quartz.errors.FencedError`) once
        another leader has been elected: a deposed leader never overwrites the row."""

    @abc.abstractmethod
    def remove_check_in(self, instance_name: str) -> None:
        """Remove the check-in row of ``instance_name`` (a clean shutdown)."""

    @abc.abstractmethod
    def remove_check_in_of_process(
        self, instance_name: str, *, hostname: str | None, pid: int | None
    ) -> None:
        """Remove the check-in row of ``instance_name`` only if this process (host, pid) wrote
        it last: replicas may share a leader's instance id."""

    @abc.abstractmethod
    def check_ins(self, kind: str | None = None) -> list[CheckIn]:
        """The check-in rows (of schedulers or of workers), by instance name."""

    @abc.abstractmethod
    def firing_owners(self) -> FiringOwners:
        """Who holds fired rows in flight: scheduler instances with claims or unpublished
        firings, and workers executing firings. One read for a check-in's recovery pass."""

    @abc.abstractmethod
    def recover_scheduler(
        self, dead: str, *, seen_checkin_millis: int | None, recovered_by: str
    ) -> tuple[int, int] | None:
        """Take over a dead scheduler's work: its claims go back to WAITING, its unpublished
        firings move to ``recovered_by``, which publishes them again with the same fire instance
        id (if the first message did go out, the worker's start guard lets only one run).
        Returns (released, to republish), or None when another survivor did it or the peer
        checked in again.

        Race settled: several survivors see the same dead peer; only the one whose delete of
        the check-in row still matches the check-in time it judged stale recovers.
        """

    @abc.abstractmethod
    def recover_worker(
        self,
        worker_name: str,
        *,
        seen_checkin_millis: int | None,
        defer_nonconcurrent_millis: int = 0,
    ) -> WorkerRecovery | None:
        """Resolve the executions of a dead worker: a job with ``requests_recovery`` gets a
        recovery firing, any other occurrence is closed as interrupted, a
        ``disallow_concurrent`` one is first deferred by ``defer_nonconcurrent_millis``. None
        when another scheduler got there first or the worker checked in again.

        Race settled: several schedulers see the same dead worker; the check-in row must still
        carry the time judged stale, and each execution is resolved by exactly one of them.
        """

    @abc.abstractmethod
    def advance_epoch(self, instance_name: str) -> tuple[int, int]:
        """Take the next fencing epoch for a new leadership of ``instance_name``: (previous,
        new). Race settled: two processes elected at once get different epochs, and the
        earlier one's writes are refused."""

    @abc.abstractmethod
    def recover_leader_move(self, instance_name: str, fence: Fence | None) -> LeaderMoveRecovery:
        """The recovery pass a new non-clustered leader runs (seed 000, steps 1, 3 and 4; step 2,
        every misfire with no limit, is the caller's), in one fenced transaction, adapted to
        Celery, where the firings a scheduler published run on workers that outlive it:

        1. Claims (ACQUIRED fired rows, any instance) are deleted and their triggers go back to
           WAITING; BLOCKED goes to WAITING and PAUSED_BLOCKED to PAUSED for every job that has
           no firing left in flight.
        3. Firings fired but not recorded as published (FIRED) under *this* instance id
           survive: the loop publishes them again with the same fire instance id (the worker's
           start guard runs it once). Under another id they are deleted, ``requests_recovery``
           or not: the instance id decides whether they survive a leader move.
        4. Lingering COMPLETE triggers with nothing in flight are deleted. Published and
           executing firings are left to the workers (and to the misfire handler once their
           message expires).
        """

    @abc.abstractmethod
    def record_status(
        self, instance_name: str, status: str, *, hostname: str | None, pid: int | None
    ) -> None:
        """Write a scheduler's lifecycle status into its check-in row, if this process (host,
        pid) wrote the row last. Fenced like :meth:`check_in`."""

    @abc.abstractmethod
    def ping(self) -> None:
        """Raise unless the store's database answers a query."""


class WorkerStore(abc.ABC):
    """The worker hooks' role: one start per firing, its completion, retries and job data."""

    @abc.abstractmethod
    def start_execution(
        self, fire_instance_id: str, worker_name: str, *, restart_from: str | None = None
    ) -> StartedExecution | None:
        """Mark a firing EXECUTING on ``worker_name``; None when it must not run here.

        Race settled: the same firing delivered twice (a broker redelivery, a republish after a
        scheduler died between publishing and recording, a republish of an expired message):
        only the first start matches. ``restart_from`` names a worker whose own start of this
        firing may or may not have been recorded (its store connection broke); it did not run
        the task, so a row EXECUTING on that worker may be taken over.

        The start of an auto-pinned trigger's firing claims the pin for ``worker_name`` in the
        same transaction: the first worker to start a firing claims it, and a worker starting
        one still claimed by another takes it over (steal on fire: the firing reached this
        worker only because its routing judged the claimant not live). The claim races a re-pin
        or clear made since the firing was acquired, and a claim from another firing of the same
        trigger: whichever change comes first wins. Recovery and retry firings have no pin of
        their own, so their start claims nothing, not even the original trigger's pin.
        """

    @abc.abstractmethod
    def return_to_published(self, fire_instance_id: str, *, refire: bool = False) -> bool:
        """Put an executing firing back in flight for its next delivery (a Celery retry, or
        with ``refire`` a refire-immediately request, which counts ``refire_count`` up)."""

    @abc.abstractmethod
    def complete_execution(
        self,
        fire_instance_id: str,
        *,
        job_data: dict[str, Any] | None = None,
        failed: bool = False,
        outcome: FiringOutcome | None = None,
    ) -> bool:
        """Finish a firing (Quartz's ``triggeredJobComplete``): remove its row and release what
        waited on it; write ``job_data`` back to a job that persists its data; for a ``failed``
        firing, schedule the retry its trigger's policy grants
        (:func:`celery_quartz.retry.decide_retry`). False if the firing was not executing.

        With an ``outcome`` (``outcome.failed`` implies ``failed``), the firing's trigger keeps
        it as its last outcome (:attr:`TriggerView.last_outcome`: start and finish times, the
        exception's type and message, consecutive failures), written by the statement that
        reads the trigger's state for the release: no extra round trip. A trigger removed
        meanwhile keeps nothing.

        Race settled: completion against recovery of the same firing; exactly one of them acts,
        and a crash leaves either the firing in flight or its retry scheduled, never both.
        """

    @abc.abstractmethod
    def complete_executions(self, finished: Sequence[FinishedExecution]) -> int:
        """Record the successful ends of several executions at once (the worker's batch of
        :attr:`StartedExecution.batchable` ones); how many were executing and are now complete.

        Each trigger keeps the latest of its successes as its last outcome, unless an end that
        finished later was recorded first. An execution whose end does release something, when
        it comes to it (its one-shot trigger is COMPLETE), is completed as
        :meth:`complete_execution` completes it. Race settled as there: one that was recovered
        meanwhile is not executing any more, and is left to the recovery.
        """

    @abc.abstractmethod
    def executing_task_ids(self, worker_name: str) -> dict[str, str]:
        """The firings EXECUTING on ``worker_name``, by the Celery task id of their message
        (:attr:`~celery_quartz.firing.Firing.task_id`): task id → fire instance id."""

    @abc.abstractmethod
    def end_lost_execution(
        self,
        fire_instance_id: str,
        worker_name: str,
        outcome: FiringOutcome,
        *,
        loss: ProcessLoss,
    ) -> str | None:
        """End a firing whose pool process stopped while running it on ``worker_name``, as that
        worker's main process reports it, the way ``loss`` says (:class:`ProcessLoss`); what the
        firing held is released at once and ``outcome`` is kept as its trigger's last. Returns
        the result recorded in the history (:class:`~celery_quartz.history.RunResult`'s value):
        ``"recovered"`` or ``"interrupted"`` (crashed), ``"retried"`` or ``"failed"`` (timed
        out), ``"cancelled"`` (terminated); None when the firing is not executing on
        ``worker_name`` (its start was never recorded there, or it has ended).

        Race settled: the end against a recovery of the same firing (its worker judged dead
        meanwhile) and against another worker's start of it: the row is removed only while
        EXECUTING on ``worker_name``, so exactly one of them acts.
        """

    @abc.abstractmethod
    def record_progress(self, reports: Sequence[ProgressReport]) -> int:
        """Keep each report on its firing's row while the firing is EXECUTING (a report that
        comes after the end changes nothing); how many rows took one. One statement."""

    @abc.abstractmethod
    def cancel_requested(self, fire_instance_ids: Sequence[str]) -> set[str]:
        """Those of ``fire_instance_ids`` whose firing a later firing of its trigger replaced
        while in flight (overlap policy ``cancel_previous``; the claim that decided it marked
        them): a worker whose pool cannot terminate a run reads it, so the run sees
        ``current_context().cancelled``. One read; an id with no row is not in the answer."""

    @abc.abstractmethod
    def cancel_firing(self, fire_instance_id: str, worker_name: str) -> bool:
        """End a firing whose message ``worker_name`` discarded unstarted because it was
        revoked: its row removed while it has not started (FIRED or PUBLISHED), what it held
        released, and its occurrence recorded as cancelled. False when it had started or ended.

        Race settled: the cancel against a start of the same firing (a delivery to a worker
        that had not yet learnt of the revoke) and against the resolution of its expiry: the
        row is removed only while not started, by a conditional delete, so exactly one acts.
        """


class StoreReader(abc.ABC):
    """The operators' read side: what the CLI, health, metrics, the dashboard and the HTTP API
    show. Listings are keyset-paged (stable while triggers fire), filtered in SQL, and never
    write."""

    @abc.abstractmethod
    def list_jobs(
        self, filters: JobFilter | None = None, *, after: JobKey | None = None, limit: int = 100
    ) -> Page[Job, JobKey]:
        """Jobs by (group, name), from after ``after``, at most ``limit``."""

    @abc.abstractmethod
    def list_triggers(
        self,
        filters: TriggerFilter | None = None,
        *,
        after: TriggerKey | None = None,
        limit: int = 100,
    ) -> Page[TriggerView, TriggerKey]:
        """Triggers with their state and task by (group, name), from after ``after``, at most
        ``limit``."""

    @abc.abstractmethod
    def trigger_view(self, key: TriggerKey) -> TriggerView | None:
        """The trigger ``key`` as :meth:`list_triggers` shows it, or None when not stored."""

    @abc.abstractmethod
    def owed_triggers(
        self, *, blocked_for: float, limit: int = 20, count_cap: int = 1000
    ) -> OwedTriggers:
        """What is owed and not happening: WAITING triggers due by more than the misfire
        threshold (nobody claims them: no scheduler runs, or their group is held back),
        triggers BLOCKED for more than ``blocked_for`` seconds past their fire time (their job's
        firing runs long), and triggers in ERROR with their reason. At most ``limit`` of each,
        oldest first; counts stop at ``count_cap`` (each list and count is one index range
        scan, whatever the number of triggers stored)."""

    @abc.abstractmethod
    def list_firings(
        self, filters: FiringFilter | None = None, *, after: str | None = None, limit: int = 100
    ) -> Page[FiringView, str]:
        """Fired instances in flight, cluster-wide (Quartz's ``QueryFireInstances``), by fire
        instance id."""

    @abc.abstractmethod
    def list_nodes(self) -> list[NodeView]:
        """Every scheduler and worker check-in with its liveness, judged by the same rule as
        failure detection (:mod:`celery_quartz.liveness`)."""

    @abc.abstractmethod
    def group_occupancy(self) -> list[GroupOccupancy]:
        """Per execution group (None: ungrouped): firings in flight and triggers due but held
        back; one grouped read."""

    @abc.abstractmethod
    def calendars(self) -> dict[str, Any]:
        """Every stored calendar by name."""

    @abc.abstractmethod
    def trigger_summary(self) -> dict[str, StateSummary]:
        """Per trigger state: how many, the earliest next fire time, and how many are overdue
        by more than the misfire threshold; one grouped read (metrics, health)."""

    @abc.abstractmethod
    def unserved(self, router: Router) -> list[Unserved]:
        """The execution groups of the schedulable triggers that no live worker serves, and the
        live pinned workers that do not consume their triggers' queues (or their own)."""

    @abc.abstractmethod
    def current_epoch(self) -> int:
        """The scheduler name's current fencing epoch (0 before any election,
        :meth:`ClusterStore.advance_epoch`)."""

    @abc.abstractmethod
    def count_rows(self) -> dict[str, int]:
        """Rows per table for this scheduler name (diagnostics)."""

    @abc.abstractmethod
    def firing_states(self) -> dict[str, str]:
        """Every fired row: fire instance id → state (diagnostics and tests)."""


class OpenedStore(abc.ABC):
    """A store a process opened, and closes."""

    #: The scheduler name the store is scoped to.
    scheduler_name: str

    @abc.abstractmethod
    def dispose(self) -> None:
        """Close the store's connections."""


class SchedulerStore(
    SchedulingStore, ClusterStore, StoreReader, HistoryReader, HistoryKeeper, OpenedStore
):
    """What a scheduler process holds: the loop's and the cluster manager's roles, the read
    side its health check uses, and the history's sweep (run by one node at a time)."""


class ClientStore(JobStore, PauseStore, BackfillStore, StoreReader, HistoryReader, OpenedStore):
    """What a client holds (:class:`celery_quartz.Quartz`, the CLI, an import): the client's
    role, and the read sides it reports from (the run history's among them)."""


class WorkerNodeStore(WorkerStore, ClusterStore, OpenedStore):
    """What a worker process holds: the worker hooks' role, and the cluster role of its
    check-in."""


class Store(ClientStore, SchedulerStore, WorkerNodeStore):
    """Every role: what :func:`celery_quartz.store.open_store` returns."""

    misfire_threshold_ms: int
