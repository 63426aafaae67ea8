"""The worker's role: start, complete, retry, persist job data
(:class:`~celery_quartz.store.abc.WorkerStore`)."""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Row,
    and_,
    delete,
    or_,
    update,
)

from celery_quartz.job import encode_json_object
from celery_quartz.keys import JobKey, TriggerKey
from celery_quartz.store.abc import WorkerStore
from celery_quartz.store.schema import (
    FiringState,
)
from celery_quartz.store.sql._firings import FiringsSql
from celery_quartz.store.views import FiringOutcome

logger = logging.getLogger(__name__)


class WorkerSql(FiringsSql, WorkerStore):
    def start_execution(
        self, fire_instance_id: str, worker_name: str, *, restart_from: str | None = None
    ) -> bool:
        """Mark a firing EXECUTING on ``worker_name``; False when it must not run here.

        Race settled: the same firing delivered twice (a broker redelivery, a republish after a
        scheduler died between publishing and recording, a republish of an expired message).
        Only the first conditional update from FIRED/PUBLISHED matches; every later delivery
        finds EXECUTING, or no row once complete.

        ``restart_from`` names a worker whose own start of this firing may or may not have been
        recorded (its store connection broke); it did not run the task, so a row EXECUTING on
        that worker may be taken over.

        A start of an auto-pinned trigger's firing claims the pin for ``worker_name`` in the same
        transaction (:meth:`_claim_auto_pin`).
        """
        f = self.tables.fired_triggers
        startable: ColumnElement[bool] = f.c.state.in_([FiringState.FIRED, FiringState.PUBLISHED])
        if restart_from is not None:
            startable = or_(
                startable,
                and_(f.c.state == FiringState.EXECUTING, f.c.worker_name == restart_from),
            )
        with self.transaction() as conn:
            started = conn.execute(
                update(f)
                .where(
                    self._scoped(f),
                    f.c.fire_instance_id == fire_instance_id,
                    startable,
                )
                .values(
                    state=FiringState.EXECUTING, worker_name=worker_name, started_time=self._now()
                )
                .returning(
                    f.c.trigger_name,
                    f.c.trigger_group,
                    f.c.preferred_node,
                    f.c.preferred_node_auto,
                )
            ).first()
            if (
                started is not None
                and started.preferred_node_auto
                and started.preferred_node != worker_name
            ):
                self._claim_auto_pin(conn, started, worker_name)
        return started is not None

    def _claim_auto_pin(self, conn: Connection, fired: Row[Any], worker_name: str) -> None:
        """Write ``worker_name`` into the auto pin of the trigger of ``fired``: the first worker to
        start a firing claims it, and a worker starting one still claimed by another takes it
        over (steal on fire). The firing reached this worker only because its routing judged the
        seen claimant not live (a live one gets its firings on its own queue).

        Race settled: the claim against a re-pin or clear made since the firing was acquired, and
        against a claim from another firing of the same trigger. The update is a compare-and-swap
        against the pin the fired row recorded at acquisition, so whichever change came first
        wins and this one matches nothing.

        Recovery and retry firings are one-shot triggers with no pin of their own, so their start
        claims nothing, not even the original trigger's pin: the next firing of that trigger
        claims it.
        """
        t = self.tables.triggers
        key = TriggerKey(fired.trigger_name, fired.trigger_group)
        claimed = conn.execute(
            update(t)
            .where(
                self._trigger_key_clause(key),
                t.c.preferred_node_auto.is_(True),
                t.c.preferred_node.is_not_distinct_from(fired.preferred_node),
            )
            .values(preferred_node=worker_name)
        ).rowcount
        if claimed:
            logger.info(
                "trigger %s: automatic pin claimed by worker %s%s",
                key,
                worker_name,
                "" if fired.preferred_node is None else f" (from {fired.preferred_node})",
            )
        else:
            logger.debug(
                "trigger %s: worker %s did not claim its automatic pin: the pin changed since "
                "the firing was acquired",
                key,
                worker_name,
            )

    def return_to_published(self, fire_instance_id: str, *, refire: bool = False) -> bool:
        """Put an executing firing back in flight, for the same firing's next delivery.

        For a Celery retry (``self.retry()``), or with ``refire`` for a refire-immediately request
        (:class:`celery_quartz.errors.RefireJob`), which also counts ``refire_count`` up.
        """
        f = self.tables.fired_triggers
        values: dict[str, Any] = {"state": FiringState.PUBLISHED, "worker_name": None}
        if refire:
            values["refire_count"] = f.c.refire_count + 1
        with self.transaction() as conn:
            return bool(
                conn.execute(
                    update(f)
                    .where(
                        self._scoped(f),
                        f.c.fire_instance_id == fire_instance_id,
                        f.c.state == FiringState.EXECUTING,
                    )
                    .values(values)
                ).rowcount
            )

    def complete_execution(
        self,
        fire_instance_id: str,
        *,
        job_data: dict[str, Any] | None = None,
        failed: bool = False,
        outcome: FiringOutcome | None = None,
    ) -> bool:
        """Finish a firing: remove its row and release what waited on it (Quartz's
        ``triggeredJobComplete``). ``job_data`` is written back to a job that persists its data.
        A ``failed`` firing also gets its retry, when its trigger's retry policy grants one
        (:meth:`_schedule_retry_firing`). Returns False if the firing was not executing (already
        done, or recovered). An ``outcome`` is kept on the trigger as its last one, by the
        release's own read of the trigger (:meth:`_release_after_firing`).

        Race settled: completion against recovery of the same firing; the delete is conditional on
        EXECUTING, so exactly one of them acts. The retry is written in the same transaction, so a
        crash leaves either the firing in flight or the retry scheduled, never both or neither.
        """
        f, j = self.tables.fired_triggers, self.tables.jobs
        failed = failed or (outcome is not None and outcome.failed)
        with self.transaction() as conn:
            row = conn.execute(
                delete(f)
                .where(
                    self._scoped(f),
                    f.c.fire_instance_id == fire_instance_id,
                    f.c.state == FiringState.EXECUTING,
                )
                .returning(f)
            ).first()
            if row is None:
                return False
            if job_data is not None:
                job_key = JobKey(row.job_name, row.job_group)
                encoded = encode_json_object(
                    f"job {job_key}", "data", job_data, self.max_data_bytes
                )
                conn.execute(
                    update(j)
                    .where(self._job_key_clause(job_key), j.c.is_update_data.is_(True))
                    .values(job_data=encoded)
                )
            if failed:
                # Before the release: a finished one-shot trigger is removed there, and the retry
                # reads its policy and data (and keeps a non-durable job alive).
                self._schedule_retry_firing(conn, row, self._now())
            self._release_after_firing(conn, row, outcome)
        return True
