"""A job: what runs when a trigger fires — a registered Celery task and its data."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from celery_quartz.errors import JobDataError, ValidationError
from celery_quartz.keys import MAX_TASK_NAME_LENGTH, JobKey, check_description
from celery_quartz.retry import RetryPolicy

#: Default bound on the encoded size of a job's (or trigger's) data, args, kwargs and options.
DEFAULT_MAX_DATA_BYTES = 64 * 1024


@dataclass(frozen=True, kw_only=True)
class Job:
    """Quartz's JobDetail, naming a Celery task.

    ``args`` and ``kwargs`` are what the task is called with. ``data`` is Quartz's job data map:
    merged with the trigger's data for each firing and read by the task through
    :func:`celery_quartz.current_context`. ``options`` are Celery publish options (``queue``,
    ``priority``, ``routing_key``, …). Everything is JSON; nothing is pickled.
    """

    #: The job's name and group, unique within a scheduler.
    key: JobKey
    #: The registered Celery task a firing calls.
    task: str
    #: Positional arguments the task is called with.
    args: Sequence[Any] = ()
    #: Keyword arguments the task is called with.
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    #: Quartz's job data map: merged with the trigger's data for each firing, read through
    #: :func:`celery_quartz.current_context`.
    data: Mapping[str, Any] = field(default_factory=dict)
    #: Celery publish options (``queue``, ``priority``, ``routing_key``, ``expires``, …); a firing
    #: with an execution group or a pinned worker is routed there instead.
    options: Mapping[str, Any] = field(default_factory=dict)
    #: Free text for operators.
    description: str | None = None
    #: Kept when no trigger refers to it any more.
    durable: bool = False
    #: Run again (as a recovery firing) when the worker executing it dies.
    requests_recovery: bool = False
    #: Never two firings of this job in flight at once, cluster-wide (DisallowConcurrentExecution).
    disallow_concurrent: bool = False
    #: Write the job data the task leaves in its context back to the job
    #: (PersistJobDataAfterExecution).
    persist_job_data: bool = False
    #: The job must succeed at least this often: past it with no success, the job is listed
    #: as owed, degrades ``/healthz`` and shows on the ``quartz.job.overdue`` gauge
    #: (docs/history.md#success-deadlines). None: no deadline.
    require_success_within: timedelta | None = None
    #: How a failed occurrence of this job is run again when its trigger has no retry policy
    #: of its own (see :mod:`celery_quartz.retry`); None: the scheduler's default
    #: (``quartz_default_retry_policy``).
    retry_policy: RetryPolicy | None = None

    def validate(self, max_data_bytes: int = DEFAULT_MAX_DATA_BYTES) -> None:
        """Raise a :class:`ValidationError` naming this job and the field at fault."""
        if not isinstance(self.key, JobKey):
            raise ValidationError(f"job key must be a JobKey, got {self.key!r}")
        if not isinstance(self.task, str) or not self.task:
            raise ValidationError(f"job {self.key}: task must be a Celery task name")
        if len(self.task) > MAX_TASK_NAME_LENGTH:
            raise ValidationError(
                f"job {self.key}: task name is {len(self.task)} characters; "
                f"at most {MAX_TASK_NAME_LENGTH}"
            )
        if isinstance(self.args, (str, bytes)) or not isinstance(self.args, Sequence):
            raise JobDataError(
                f"job {self.key}: args must be a list, got {type(self.args).__name__}"
            )
        encode_json(f"job {self.key}", "args", list(self.args), max_data_bytes)
        for name in ("kwargs", "data", "options"):
            encode_json_object(f"job {self.key}", name, getattr(self, name), max_data_bytes)
        _check_expires(self.key, self.options.get("expires"))
        check_description(f"job {self.key}", self.description)
        check_success_deadline(f"job {self.key}", self.require_success_within)
        if self.retry_policy is not None and not isinstance(self.retry_policy, RetryPolicy):
            raise ValidationError(
                f"job {self.key}: retry_policy must be a RetryPolicy or None, got "
                f"{self.retry_policy!r}"
            )


def check_success_deadline(owner: str, value: Any) -> None:
    """A success deadline: None, or a positive :class:`~datetime.timedelta` of whole
    milliseconds at least (it is stored in milliseconds)."""
    if value is None:
        return
    if not isinstance(value, timedelta):
        raise ValidationError(
            f"{owner}: require_success_within must be a timedelta, got {type(value).__name__}"
        )
    if value < timedelta(milliseconds=1):
        raise ValidationError(f"{owner}: require_success_within must be positive, got {value}")


def _check_expires(key: JobKey, expires: Any) -> None:
    """A job's own message expiry: seconds after publication, or an ISO 8601 instant."""
    if expires is None:
        return
    if isinstance(expires, (int, float)) and not isinstance(expires, bool):
        if expires < 0:
            raise ValidationError(f"job {key}: options expires must not be negative: {expires!r}")
        return
    if isinstance(expires, str):
        try:
            if datetime.fromisoformat(expires).tzinfo is not None:
                return
        except ValueError:
            pass
    raise ValidationError(
        f"job {key}: options expires must be seconds or an aware ISO 8601 instant, got {expires!r}"
    )


def encode_json_object(owner: str, field_name: str, value: Any, max_bytes: int) -> str:
    """Encode a JSON object (string keys, JSON values), or raise :class:`JobDataError`."""
    if not isinstance(value, Mapping):
        raise JobDataError(
            f"{owner}: {field_name} must be a mapping of JSON values, got {type(value).__name__}"
        )
    for key in value:
        if not isinstance(key, str):
            raise JobDataError(f"{owner}: {field_name} key {key!r} is not a string")
    return encode_json(owner, field_name, dict(value), max_bytes)


def encode_json(owner: str, field_name: str, value: Any, max_bytes: int) -> str:
    """Encode strict JSON (no NaN, no objects JSON cannot represent), bounded in size."""
    try:
        encoded = json.dumps(value, separators=(",", ":"), allow_nan=False, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise JobDataError(f"{owner}: {field_name} is not JSON: {exc}") from None
    _reject_lossy(owner, field_name, value)
    size = len(encoded.encode())
    if size > max_bytes:
        raise JobDataError(
            f"{owner}: {field_name} is {size} bytes encoded; the bound is {max_bytes} "
            "(quartz_max_job_data_bytes)"
        )
    return encoded


def _reject_lossy(owner: str, field_name: str, value: Any) -> None:
    # json.dumps accepts tuples and non-str keys silently; a value must read back as it was written.
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for k, v in item.items():
                if not isinstance(k, str):
                    raise JobDataError(f"{owner}: {field_name} has a non-string key {k!r}")
                stack.append(v)
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, float) and not math.isfinite(item):
            raise JobDataError(f"{owner}: {field_name} has a non-finite number {item!r}")
        elif item is not None and not isinstance(item, (str, int, float, bool)):
            raise JobDataError(
                f"{owner}: {field_name} has a {type(item).__name__} value {item!r}; only JSON types"
            )
