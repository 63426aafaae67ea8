"""What a task can know about the firing it runs: Quartz's IJobExecutionContext."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from celery_quartz.clock import from_millis
from celery_quartz.firing import HEADER
from celery_quartz.keys import JobKey, TriggerKey


@dataclass
class JobExecutionContext:
    """The firing a task is running. Read it with :func:`current_context`."""

    #: The scheduler name (``quartz_scheduler_name``) of the store the firing belongs to.
    scheduler_name: str
    #: The firing's id; also its Celery task id (suffixed ``.r<n>`` when published again).
    fire_instance_id: str
    #: The job that fired.
    job_key: JobKey
    #: The trigger that fired (for a recovery or retry firing, its one-shot trigger).
    trigger_key: TriggerKey
    #: The occurrence: when the trigger was scheduled to fire (for a recovery or retry firing,
    #: the original occurrence's).
    scheduled_fire_time: datetime
    #: When the scheduler fired it (published the message).
    fire_time: datetime
    #: The scheduler instance that published the message.
    fired_by: str = ""
    #: The job's own data. For a job with ``persist_job_data``, what the task leaves here is
    #: written back to the job when the firing completes (Quartz's JobDetail.JobDataMap).
    job_data: dict[str, Any] = field(default_factory=dict)
    #: The trigger's data.
    trigger_data: dict[str, Any] = field(default_factory=dict)
    #: A recovery firing: the worker that ran the original died mid-job.
    recovering: bool = False
    #: For a recovery or retry firing, the trigger of the original occurrence.
    recovering_trigger_key: TriggerKey | None = None
    #: For a firing of the trigger's retry policy, which retry it is (1 for the first); 0 on
    #: the first run.
    retry_attempt: int = 0
    #: How many times the task asked to run this firing again at once (``RefireJob``,
    #: Quartz's refire-immediately).
    refire_count: int = 0
    #: The Celery worker running it (its node name), when known.
    worker_name: str | None = None

    @property
    def merged_job_data(self) -> dict[str, Any]:
        """Job data with the trigger's data over it (Quartz's MergedJobDataMap); a copy."""
        return {**self.job_data, **self.trigger_data}

    @property
    def occurrence(self) -> tuple[TriggerKey, datetime]:
        """(trigger, scheduled fire time) of the occurrence this firing runs, recovery or not."""
        return (self.recovering_trigger_key or self.trigger_key, self.scheduled_fire_time)

    @classmethod
    def from_header(
        cls, header: dict[str, Any], worker_name: str | None = None
    ) -> JobExecutionContext:
        """The context of a firing, from the header its message carries (and the worker's node
        name)."""
        origin = header.get("origin_trigger")
        return cls(
            scheduler_name=header["scheduler"],
            fire_instance_id=header["fire_instance_id"],
            job_key=JobKey(*header["job"]),
            trigger_key=TriggerKey(*header["trigger"]),
            scheduled_fire_time=from_millis(header["scheduled_fire_time"]),
            fire_time=from_millis(header["fire_time"]),
            fired_by=str(header.get("fired_by", "")),
            job_data=dict(header.get("job_data") or {}),
            trigger_data=dict(header.get("trigger_data") or {}),
            recovering=bool(header.get("recovering", False)),
            recovering_trigger_key=TriggerKey(*origin) if origin else None,
            retry_attempt=int(header.get("retry_attempt", 0)),
            refire_count=int(header.get("refire_count", 0)),
            worker_name=worker_name,
        )


def firing_header(request: Any) -> dict[str, Any] | None:
    """The firing header of a Celery task request, if the message came from celery-quartz."""
    header = getattr(request, HEADER, None)
    if header is None:
        header = (getattr(request, "headers", None) or {}).get(HEADER)
    return header if isinstance(header, dict) else None


def current_context() -> JobExecutionContext | None:
    """The firing the current task runs; ``None`` outside a task or for a message not ours."""
    from celery import current_task

    if current_task is None:
        return None
    request = current_task.request
    context = getattr(request, "quartz_context", None)
    if isinstance(context, JobExecutionContext):
        return context
    header = firing_header(request)
    return None if header is None else JobExecutionContext.from_header(header, request.hostname)
