"""Job and trigger keys: a (name, group) pair, as in Quartz."""

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
#: Group of the jobs and triggers imported from Celery's ``beat_schedule``.
BEAT_SCHEDULE_GROUP = "celery.beat_schedule"
#: Longest name or group the store accepts.
MAX_KEY_LENGTH = 200


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
