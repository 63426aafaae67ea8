"""Job and trigger keys: a (name, group) pair, as in Quartz; and the store's bounds on a key's
parts and on a job's or trigger's description, checked before anything is written."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TypeVar

from celery_quartz.errors import ValidationError

DEFAULT_GROUP = "DEFAULT"
#: Group of the one-off triggers that recover a dead worker's executions (Quartz's name).
RECOVERING_JOBS_GROUP = "RECOVERING_JOBS"
#: Group of the one-off triggers that retry a failed occurrence under its trigger's retry policy.
RETRYING_JOBS_GROUP = "RETRYING_JOBS"
#: Group of the one-off triggers that run a backfill's slots (``Quartz.backfill``).
BACKFILL_JOBS_GROUP = "BACKFILL_JOBS"
#: Group of the jobs and triggers imported from Celery's ``beat_schedule``.
BEAT_SCHEDULE_GROUP = "celery.beat_schedule"
#: Longest name or group the store accepts.
MAX_KEY_LENGTH = 200
#: Longest job or trigger description the store accepts (its columns' width).
MAX_DESCRIPTION_LENGTH = 250
#: The longest Celery task name a job can name (the store's column).
MAX_TASK_NAME_LENGTH = 255


def check_description(
    owner: str, description: object, error: type[ValidationError] = ValidationError
) -> None:
    """Raise ``error`` naming ``owner`` unless ``description`` is None or a string the store
    holds: checked here, so every store refuses the same descriptions (SQLite would keep a
    longer one, PostgreSQL fail the whole transaction)."""
    if description is None:
        return
    if not isinstance(description, str):
        raise error(f"{owner}: description must be a string or None, not {description!r}")
    if len(description) > MAX_DESCRIPTION_LENGTH:
        raise error(
            f"{owner}: description is {len(description)} characters; "
            f"at most {MAX_DESCRIPTION_LENGTH}"
        )


def _check_part(kind: str, what: str, value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(f"{kind} {what} must be a non-empty string, got {value!r}")
    if len(value) > MAX_KEY_LENGTH:
        raise ValidationError(
            f"{kind} {what} {value[:40]!r}... is {len(value)} characters; at most {MAX_KEY_LENGTH}"
        )


_K = TypeVar("_K", "JobKey", "TriggerKey")


def _stored(cls: type[_K], name: str, group: str) -> _K:
    """A key read back from the store: its parts were checked when it was written, and the
    store reads one or two per firing, so they are not checked again."""
    key = object.__new__(cls)
    object.__setattr__(key, "name", name)
    object.__setattr__(key, "group", group)
    return key


@dataclass(frozen=True, order=True)
class JobKey:
    """Identifies a job within a scheduler: ``JobKey("report", "nightly")``."""

    #: The job's name, unique within its group.
    name: str
    #: The job's group (``DEFAULT`` when not given).
    group: str = DEFAULT_GROUP

    def __post_init__(self) -> None:
        _check_part("job key", "name", self.name)
        _check_part("job key", "group", self.group)

    @classmethod
    def stored(cls, name: str, group: str) -> JobKey:
        """The key of a stored job, as the store read it (not checked again)."""
        return _stored(cls, name, group)

    def __str__(self) -> str:
        return f"{self.group}.{self.name}"


@dataclass(frozen=True, order=True)
class TriggerKey:
    """Identifies a trigger within a scheduler: ``TriggerKey("report-2am", "nightly")``."""

    #: The trigger's name, unique within its group.
    name: str
    #: The trigger's group (``DEFAULT`` when not given); pausing a group pauses its triggers.
    group: str = DEFAULT_GROUP

    def __post_init__(self) -> None:
        _check_part("trigger key", "name", self.name)
        _check_part("trigger key", "group", self.group)

    @classmethod
    def stored(cls, name: str, group: str) -> TriggerKey:
        """The key of a stored trigger, as the store read it (not checked again)."""
        return _stored(cls, name, group)

    def __str__(self) -> str:
        return f"{self.group}.{self.name}"

    @classmethod
    def generate(cls, group: str = DEFAULT_GROUP) -> TriggerKey:
        """A unique key, as Quartz's TriggerBuilder gives a trigger built without one."""
        return cls(uuid.uuid4().hex, group)
