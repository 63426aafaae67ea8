"""What every trigger kind is: its common fields, its state, and the computations the store calls.

A trigger is an entity, not a value: beside its definition (schedule, priority, start and end,
misfire instruction, data) it carries the state the scheduler advances (``next_fire_time``,
``previous_fire_time``, ``times_triggered``). The store persists the common fields as columns and
the kind-specific definition as the JSON object returned by :meth:`Trigger.detail`.

Every method here is pure computation: no database, no clock. Where "now" matters it is passed in.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from enum import Enum, IntEnum
from typing import TYPE_CHECKING, Any, ClassVar, Final

from celery_quartz.affinity import PreferredNode
from celery_quartz.errors import InvalidTriggerError, ValidationError
from celery_quartz.keys import MAX_KEY_LENGTH, JobKey, TriggerKey, check_description
from celery_quartz.overlap import OverlapPolicy
from celery_quartz.retry import RetryPolicy
from celery_quartz.tz import resolve_time_zone

if TYPE_CHECKING:
    from celery_quartz.calendars import Calendar

#: Quartz's default trigger priority; among triggers due at the same instant, higher fires first.
DEFAULT_PRIORITY = 5
#: The range of a priority (the store's 32-bit integer column, Quartz's int).
MIN_PRIORITY, MAX_PRIORITY = -(2**31), 2**31 - 1


class MisfireInstruction(IntEnum):
    """The two misfire instructions every trigger kind understands (Quartz's values).

    Each kind adds its own (``SimpleTrigger.MisfireInstruction`` and so on); the store keeps the
    integer, interpreted by the trigger's kind.
    """

    #: Catch up: the trigger is left out of misfire handling and fires every missed occurrence
    #: as fast as the workers allow.
    IGNORE_MISFIRE_POLICY = -1
    #: The kind's own default (each kind's ``MisfireInstruction`` says which instruction it means).
    SMART_POLICY = 0


class _OverlapPolicyField:
    """A trigger's ``overlap_policy``: a name (any case, ``-`` for ``_``), an
    :class:`~celery_quartz.overlap.OverlapPolicy` or None (``allow``) is read into the enum as it
    is set, at construction (every kind) and at every later assignment; a bad value raises an
    :class:`InvalidTriggerError` naming the trigger and the value, and leaves the trigger as it
    was."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._attribute = f"_{name}"

    def __get__(self, instance: object, owner: type | None = None) -> OverlapPolicy:
        if instance is None:
            return OverlapPolicy.ALLOW  # the dataclass field's default
        policy: OverlapPolicy = instance.__dict__.get(self._attribute, OverlapPolicy.ALLOW)
        return policy

    def __set__(self, instance: object, value: OverlapPolicy | str | None) -> None:
        key = getattr(instance, "key", None)
        instance.__dict__[self._attribute] = OverlapPolicy.parse(value, f"trigger {key}")


#: Every concrete trigger class, by its stored ``kind`` name.
TRIGGER_KINDS: dict[str, type[Trigger]] = {}


@dataclass(kw_only=True, eq=False)
class Trigger(ABC):
    """The part of a trigger that every kind shares."""

    #: Stored in the trigger row; names the class that reads :meth:`detail` back.
    kind: ClassVar[str]
    #: The misfire instructions this kind accepts (its own plus the two shared ones).
    misfire_instructions: ClassVar[frozenset[int]] = frozenset(MisfireInstruction)

    #: The trigger's name and group (a generated unique name when not given).
    key: TriggerKey = field(default_factory=TriggerKey.generate)
    #: The job it fires (set by :meth:`celery_quartz.Quartz.schedule_job` to the job stored with
    #: it).
    job_key: JobKey | None = None
    #: Free text for operators.
    description: str | None = None
    #: Among triggers due at the same instant, the higher fires first (Quartz's default: 5).
    priority: int = DEFAULT_PRIORITY
    #: First instant the trigger may fire; ``None`` means "when it is scheduled" (the client fills
    #: it in from the scheduler's clock before storing).
    start_at: datetime | None = None
    #: The last instant it may fire at; ``None``: no end. A simple or calendar-interval
    #: trigger's end is exclusive, as in Quartz; the other kinds' is inclusive.
    end_at: datetime | None = None
    #: What to do when an occurrence was missed by more than the misfire threshold: a value of
    #: :class:`MisfireInstruction` or of the kind's own ``MisfireInstruction``.
    misfire_instruction: int = MisfireInstruction.SMART_POLICY
    #: Trigger-level job data, merged over the job's data for each firing.
    data: dict[str, Any] = field(default_factory=dict)
    #: The stored calendar (:meth:`celery_quartz.Quartz.add_calendar`) whose excluded times this
    #: trigger skips; ``None``: none.
    calendar_name: str | None = None
    #: The execution group whose limit and queue this trigger's firings are subject to
    #: (see :mod:`celery_quartz.limits`); None: ungrouped.
    execution_group: str | None = None
    #: The Celery worker this trigger's firings prefer (see :mod:`celery_quartz.affinity`).
    preferred_node: PreferredNode = PreferredNode.NONE
    #: How a failed occurrence is run again (see :mod:`celery_quartz.retry`); None: the job's
    #: policy, or the scheduler's default (``quartz_default_retry_policy``).
    retry_policy: RetryPolicy | None = None
    #: Whether an occurrence that fails with no retry left pauses this trigger (the reason is
    #: the exception's message); None: ``quartz_pause_when_retries_exhausted``.
    pause_when_retries_exhausted: bool | None = None
    #: What an occurrence due while this trigger's previous firing is in flight does: ``allow``,
    #: ``skip``, ``buffer_one`` or ``cancel_previous`` (see :mod:`celery_quartz.overlap`). A
    #: name (any case, ``-`` for ``_``) is read into an
    #: :class:`~celery_quartz.overlap.OverlapPolicy` as it is set, by every kind; an unknown one
    #: raises an :class:`InvalidTriggerError` naming the trigger and the value.
    overlap_policy: _OverlapPolicyField = _OverlapPolicyField()

    # State, advanced by the scheduler.
    #: The next instant it fires (UTC), advanced by the scheduler; ``None`` once it will not fire
    #: again.
    next_fire_time: datetime | None = None
    #: The last instant it fired (UTC), or ``None`` before its first firing.
    previous_fire_time: datetime | None = None
    #: How many times it has fired.
    times_triggered: int = 0

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        kind = cls.__dict__.get("kind")
        if isinstance(kind, str):
            TRIGGER_KINDS[kind] = cls

    # -- the schedule ---------------------------------------------------------------------------

    @abstractmethod
    def next_fire_time_after(self, after: datetime) -> datetime | None:
        """The first instant strictly after ``after`` at which this trigger's schedule fires.

        Honours ``start_at`` and ``end_at``; ignores calendars and ``times_triggered``-independent
        state. Aware in, aware (UTC) out; ``None`` when the schedule has no later fire time.
        """

    @abstractmethod
    def final_fire_time(self) -> datetime | None:
        """The last instant this trigger's schedule fires at (ignoring calendars), or ``None``
        when the schedule is unbounded (Quartz's ``FinalFireTimeUtc``)."""

    @abstractmethod
    def detail(self) -> dict[str, Any]:
        """The kind-specific definition as a JSON object (what :meth:`from_detail` reads back)."""

    @classmethod
    @abstractmethod
    def from_detail(cls, detail: dict[str, Any], **common: Any) -> Trigger:
        """Rebuild a trigger from :meth:`detail` and the common fields (keyword arguments)."""

    def _zone(self) -> tzinfo:
        """The zone of the kind's ``time_zone`` field (UTC for a kind without one).

        Raises :class:`InvalidTriggerError` naming this trigger when the zone is unknown.
        """
        try:
            return resolve_time_zone(getattr(self, "time_zone", "UTC"))
        except ValueError as exc:
            raise InvalidTriggerError(f"trigger {self.key}: {exc}") from None

    def validate(self) -> None:
        """Raise :class:`InvalidTriggerError` naming this trigger and the field at fault."""
        if not isinstance(self.priority, int) or isinstance(self.priority, bool):
            raise InvalidTriggerError(f"trigger {self.key}: priority must be an integer")
        if not MIN_PRIORITY <= self.priority <= MAX_PRIORITY:
            raise InvalidTriggerError(
                f"trigger {self.key}: priority {self.priority} is outside "
                f"{MIN_PRIORITY} to {MAX_PRIORITY}"
            )
        for name in ("start_at", "end_at"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, datetime) or value.tzinfo is None):
                raise InvalidTriggerError(f"trigger {self.key}: {name} must be an aware datetime")
        if self.start_at and self.end_at and self.end_at < self.start_at:
            raise InvalidTriggerError(
                f"trigger {self.key}: end_at {self.end_at} is before start_at"
            )
        if self.misfire_instruction not in self.misfire_instructions:
            raise InvalidTriggerError(
                f"trigger {self.key}: misfire instruction {self.misfire_instruction!r} "
                f"is not one of a {self.kind} trigger's"
            )
        if not isinstance(self.data, dict):
            raise InvalidTriggerError(f"trigger {self.key}: data must be a dict")
        if self.execution_group is not None and (
            not isinstance(self.execution_group, str)
            or not self.execution_group.strip()
            or len(self.execution_group) > MAX_KEY_LENGTH
        ):
            raise InvalidTriggerError(
                f"trigger {self.key}: execution_group must be None or a non-empty string of at "
                f"most {MAX_KEY_LENGTH} characters, got {self.execution_group!r}"
            )
        if not isinstance(self.preferred_node, PreferredNode):
            raise InvalidTriggerError(
                f"trigger {self.key}: preferred_node must be a PreferredNode (for_node(name), "
                f"AUTO or NONE), not {self.preferred_node!r}"
            )
        if self.retry_policy is not None and not isinstance(self.retry_policy, RetryPolicy):
            raise InvalidTriggerError(
                f"trigger {self.key}: retry_policy must be a RetryPolicy or None, got "
                f"{self.retry_policy!r}"
            )
        if self.pause_when_retries_exhausted not in (None, True, False):
            raise InvalidTriggerError(
                f"trigger {self.key}: pause_when_retries_exhausted must be True, False or None, "
                f"got {self.pause_when_retries_exhausted!r}"
            )
        check_description(f"trigger {self.key}", self.description, InvalidTriggerError)

    # -- the state machine (Quartz's OperableTrigger) -------------------------------------------

    def compute_first_fire_time(self, calendar: Calendar | None = None) -> datetime | None:
        """Set and return the first fire time at or after ``start_at`` that the calendar allows."""
        if self.start_at is None:
            raise InvalidTriggerError(f"trigger {self.key}: start_at must be set before scheduling")
        first = (
            self.start_at
            if self.fires_at(self.start_at)
            else self.next_fire_time_after(self.start_at)
        )
        self.next_fire_time = self._skip_excluded(first, calendar)
        return self.next_fire_time

    def reschedule_from(self, now: datetime, calendar: Calendar | None = None) -> datetime | None:
        """Set and return the next fire time of an edited schedule, as Quartz's reschedule of
        this trigger starting now: its first fire time from ``start_at`` while that is ahead,
        otherwise the first at or after ``now``; the calendar applied. None: it will not fire
        again."""
        if self.start_at is not None and self.start_at >= now:
            return self.compute_first_fire_time(calendar)
        try:
            first = now if self.fires_at(now) else self.next_fire_time_after(now)
        except OverflowError:  # past the last instant a datetime holds (a huge interval)
            first = None
        self.next_fire_time = self._skip_excluded(first, calendar)
        return self.next_fire_time

    def triggered(self, calendar: Calendar | None = None) -> None:
        """Advance past the fire time that has just fired (Quartz's ``triggered``)."""
        self.times_triggered += 1
        self.previous_fire_time = self.next_fire_time
        if self.next_fire_time is not None:
            self.next_fire_time = self._skip_excluded(
                self.next_fire_time_after(self.next_fire_time), calendar
            )

    def skip_occurrence(self, calendar: Calendar | None = None) -> None:
        """Move past the fire time due without firing it (an overlap policy's skip): the next
        fire time advances as :meth:`triggered` would; the count of firings and the previous
        fire time stay as they are."""
        if self.next_fire_time is not None:
            self.next_fire_time = self._skip_excluded(
                self.next_fire_time_after(self.next_fire_time), calendar
            )

    @abstractmethod
    def update_after_misfire(self, now: datetime, calendar: Calendar | None = None) -> None:
        """Apply this trigger's misfire instruction: set ``next_fire_time`` (``None`` ends it)."""

    def upcoming_fire_times(self, count: int, calendar: Calendar | None = None) -> list[datetime]:
        """The next ``count`` fire times from ``next_fire_time`` on, with ``calendar`` applied
        (fewer when the schedule ends), advancing a copy as firing would; the trigger is left
        as it is."""
        import copy

        probe = copy.deepcopy(self)
        times: list[datetime] = []
        while probe.next_fire_time is not None and len(times) < count:
            times.append(probe.next_fire_time)
            probe.triggered(calendar)
        return times

    def may_fire_again(self) -> bool:
        """Whether the trigger has a next fire time (Quartz's ``GetMayFireAgain``)."""
        return self.next_fire_time is not None

    def fires_at(self, when: datetime) -> bool:
        """Whether ``when`` is one of the schedule's fire times (ignoring calendars)."""
        from datetime import timedelta

        before = when - timedelta(microseconds=1)
        return self.next_fire_time_after(before) == when

    def _skip_excluded(
        self, candidate: datetime | None, calendar: Calendar | None
    ) -> datetime | None:
        # Quartz walks forward until the calendar includes the time; a bound stops a calendar
        # that excludes everything from spinning forever.
        for _ in range(_MAX_CALENDAR_SKIPS):
            if candidate is None or calendar is None or calendar.is_time_included(candidate):
                return candidate
            candidate = self.next_fire_time_after(candidate)
        raise InvalidTriggerError(
            f"trigger {self.key}: calendar {self.calendar_name!r} excludes every fire time tried"
        )


_MAX_CALENDAR_SKIPS = 100_000


class _Unchanged(Enum):
    UNCHANGED = "UNCHANGED"

    def __repr__(self) -> str:
        return "UNCHANGED"


#: A :class:`TriggerDetailsUpdate` field left as it is stored.
UNCHANGED: Final = _Unchanged.UNCHANGED


@dataclass(frozen=True)
class TriggerDetailsUpdate:
    """Details of a stored trigger to change in place, without rescheduling it (Quartz's
    ``TriggerDetailsUpdate``): its fire times, state and counts stay as they are.

    A field left :data:`UNCHANGED` is not written. ``preferred_node=PreferredNode.NONE`` clears
    the pin; ``PreferredNode.AUTO`` makes it an automatic pin that no worker has claimed yet.
    """

    #: The new description (``None`` clears it).
    description: str | _Unchanged | None = UNCHANGED
    #: The new pin: a worker's node name, :data:`PreferredNode.AUTO`, or :data:`PreferredNode.NONE`.
    preferred_node: PreferredNode | _Unchanged = UNCHANGED

    def __post_init__(self) -> None:
        if not isinstance(self.description, _Unchanged):
            check_description("trigger details update", self.description)
        if not isinstance(self.preferred_node, (PreferredNode, _Unchanged)):
            raise ValidationError(
                f"trigger details update: preferred_node must be a PreferredNode, "
                f"not {self.preferred_node!r}"
            )
