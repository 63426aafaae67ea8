"""Exceptions raised by celery-quartz.

Every error names the object at fault (a job, a trigger, a field, an expression) so that the
message alone tells an operator what to fix.
"""

from __future__ import annotations

from collections.abc import Sequence


class QuartzError(Exception):
    """Base class of every exception celery-quartz raises on purpose."""


class ConfigurationError(QuartzError, ValueError):
    """A ``quartz_*`` setting is missing or has a value we cannot use."""


class ValidationError(QuartzError, ValueError):
    """An object given to the scheduler is not valid; the message names the object and field."""


class CronSyntaxError(ValidationError):
    """A cron expression cannot be parsed; the message names the field and the offending token."""


class NaiveDatetimeError(ValidationError):
    """A datetime without a time zone where an instant is needed (every time celery-quartz takes
    is aware); the message names what it was given to."""


class UnknownTimeZoneError(ValidationError):
    """A time zone name is neither an IANA name, a Windows id nor an alias of UTC."""


class InvalidTriggerError(ValidationError):
    """A trigger's definition is inconsistent (for example an end before its start)."""


class RetryPolicyError(ValidationError):
    """A retry policy's field is out of range, or a stored policy string cannot be read."""


class JobDataError(ValidationError):
    """Job data is not a JSON object of JSON values, or is larger than the configured bound."""


class UnknownTaskError(ValidationError):
    """A job names a Celery task that the application has not registered."""


class SchedulingFileError(ValidationError):
    """A scheduling file (``quartz_jobs.xml``, ``.json``, ``.yaml``) cannot be read or loaded.

    The message starts with the place at fault: ``file:line`` for XML and YAML, ``file at
    $.Path[2]`` for JSON, followed by the job or trigger it defines. ``file``, ``line`` and
    ``path`` hold the same parts for programs. When a load finds several errors, one error
    reports them all: its message lists each on its own line, and ``errors`` holds each.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str = "",
        line: int | None = None,
        path: str | None = None,
        errors: Sequence[SchedulingFileError] = (),
    ) -> None:
        super().__init__(message)
        #: The file at fault, as it was given.
        self.file = file
        #: The line at fault (XML and YAML), or ``None``.
        self.line = line
        #: The JSON path at fault (``$.Path[2]``), or ``None``.
        self.path = path
        #: Every error found (just this one unless several were found together).
        self.errors: tuple[SchedulingFileError, ...] = tuple(errors) or (self,)


class ObjectAlreadyExistsError(QuartzError):
    """A job or trigger with this key is already stored."""


class JobNotFoundError(QuartzError, LookupError):
    """No job with this key is stored."""


class TriggerNotFoundError(QuartzError, LookupError):
    """No trigger with this key is stored."""


class CalendarInUseError(QuartzError):
    """A calendar cannot be removed while a trigger refers to it."""


class JobPersistenceError(QuartzError):
    """The store cannot complete an operation (schema missing or too old, database refused)."""


class SchemaVersionError(JobPersistenceError):
    """The store's tables are missing or at a schema revision older than this version needs, and
    this process may not upgrade them (``quartz_schema_auto_upgrade`` is off)."""


class SchedulerStateError(QuartzError):
    """The scheduler is not in a state that allows the requested operation."""


class FencedError(SchedulerStateError):
    """A non-clustered scheduler's write was refused: another leader has taken the fencing epoch
    since this one was elected (this process was deposed while paused or partitioned)."""


class RefireJob(QuartzError):
    """Raised by a task to run the same firing again at once (Quartz's refire-immediately).

    The firing stays in flight, its ``refire_count`` goes up by one, and the same message is
    published again; the occurrence is not counted as missed or completed.
    """
