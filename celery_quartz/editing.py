"""Editing a stored trigger in place (docs/steering.md#editing-in-place): which details may
change, how each is checked, and what the trigger becomes.

A :class:`TriggerEdit` names the details to change; :meth:`TriggerEdit.apply` makes the edited
trigger from the stored one, or raises :class:`~celery_quartz.errors.InvalidTriggerError`
naming the field at fault. The store applies it inside the transaction that writes it, so the
trigger's counts and fire times are those it holds then.

A change of schedule (cron expression or zone, interval, RRULE) or of calendar moves the next fire
time as Quartz's reschedule does for a trigger starting now: the first fire time of the new
schedule after now (or its first from ``start_at`` when that is later), the calendar applied.
Every other detail leaves the fire times as they are. A firing in flight is not touched.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from celery_quartz.affinity import PreferredNode
from celery_quartz.errors import InvalidTriggerError, ValidationError
from celery_quartz.overlap import OverlapPolicy
from celery_quartz.triggers.base import Trigger

_UNSET: Any = object()

#: The details an edit may change, as :meth:`TriggerEdit.of` accepts them.
EDITABLE = (
    "cron",
    "time_zone",
    "interval",
    "rrule",
    "priority",
    "misfire_instruction",
    "overlap_policy",
    "preferred_node",
    "execution_group",
    "calendar",
    "description",
)
#: The details whose change moves the next fire time.
SCHEDULE_FIELDS = frozenset({"cron", "time_zone", "interval", "rrule", "calendar"})


@dataclass(frozen=True)
class TriggerEdit:
    """The details of a stored trigger to change; a field not given is left as it is.

    ``preferred_node`` is a worker's node name, ``"*"`` (an automatic pin) or None (no pin);
    ``execution_group``, ``calendar`` and ``description`` take None to clear them; ``interval``
    is a timedelta or seconds.
    """

    changes: dict[str, Any]

    @classmethod
    def of(cls, **changes: Any) -> TriggerEdit:
        """An edit of ``changes``; a ValidationError naming an unknown detail, or none at all."""
        unknown = sorted(set(changes) - set(EDITABLE))
        if unknown:
            raise ValidationError(
                f"cannot edit {', '.join(unknown)}: the editable details are {', '.join(EDITABLE)}"
            )
        if not changes:
            raise ValidationError(f"nothing to edit: give one of {', '.join(EDITABLE)}")
        return cls(dict(changes))

    def reschedules(self, stored: Trigger, edited: Trigger) -> bool:
        """Whether the edit of ``stored`` into ``edited`` moves the next fire time: it gives a
        schedule or a calendar that differs from the stored one. (A schedule given as it is
        moves nothing: an occurrence owed stays owed, for its misfire instruction to decide.)"""
        return bool(SCHEDULE_FIELDS & set(self.changes)) and (
            edited.detail() != stored.detail() or edited.calendar_name != stored.calendar_name
        )

    def apply(self, stored: Trigger) -> Trigger:
        """The trigger ``stored`` edited (a copy; ``stored`` is left as it was). Raises
        :class:`InvalidTriggerError` naming the trigger and the field at fault."""
        edited = copy.deepcopy(stored)
        values = self.changes
        where = f"trigger {stored.key}"
        kind_fields = {
            "cron": ("expression", "CRON"),
            "rrule": ("rule", "RRULE"),
            "interval": ("repeat_interval", "SIMPLE"),
        }
        for name, (attribute, kind) in kind_fields.items():
            if name not in values:
                continue
            if stored.kind != kind:
                raise InvalidTriggerError(
                    f"{where}: {name} applies to a {kind} trigger, and this one is {stored.kind}"
                )
            setattr(edited, attribute, _schedule_value(where, name, values[name]))
        if "time_zone" in values:
            if not hasattr(stored, "time_zone"):
                raise InvalidTriggerError(
                    f"{where}: time_zone does not apply to a {stored.kind} trigger"
                )
            zone = values["time_zone"]
            if not isinstance(zone, str) or not zone:
                raise InvalidTriggerError(f"{where}: time_zone must be an IANA zone name")
            edited.time_zone = zone  # type: ignore[attr-defined]
        if "priority" in values:
            edited.priority = values["priority"]
        if "misfire_instruction" in values:
            edited.misfire_instruction = _instruction(where, stored, values["misfire_instruction"])
        if "overlap_policy" in values:
            edited.overlap_policy = OverlapPolicy.parse(values["overlap_policy"], where)
        if "preferred_node" in values:
            try:
                edited.preferred_node = PreferredNode.parse(values["preferred_node"], owner=where)
            except ValidationError as error:
                raise InvalidTriggerError(str(error)) from None
        if "execution_group" in values:
            edited.execution_group = values["execution_group"]
        if "calendar" in values:
            name = values["calendar"]
            if name is not None and (not isinstance(name, str) or not name):
                raise InvalidTriggerError(f"{where}: calendar must be a stored calendar's name")
            edited.calendar_name = name
        if "description" in values:
            edited.description = values["description"]
        # Re-reading a changed expression or rule checks it (and its zone) for this trigger.
        _rebuild(edited, where)
        edited.validate()
        return edited


def _schedule_value(where: str, name: str, value: Any) -> Any:
    if name == "interval":
        refused = InvalidTriggerError(
            f"{where}: interval must be a positive number of seconds, at most "
            f"{timedelta.max.days} days"
        )
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value):
                raise refused
            try:
                value = timedelta(seconds=value)
            except OverflowError:
                raise refused from None
        if not isinstance(value, timedelta) or value <= timedelta(0):
            raise refused
        return value
    if not isinstance(value, str) or not value.strip():
        raise InvalidTriggerError(f"{where}: {name} must be a non-empty expression")
    return value


def _instruction(where: str, stored: Trigger, value: Any) -> int:
    """A misfire instruction by number or by name (``FIRE_ONCE_NOW``, ``smart_policy``)."""
    instructions = type(stored).MisfireInstruction  # type: ignore[attr-defined]
    if isinstance(value, str) and not value.lstrip("-").isdigit():
        try:
            return int(instructions[value.strip().upper()])
        except KeyError:
            names = ", ".join(m.name for m in instructions)
            raise InvalidTriggerError(
                f"{where}: misfire_instruction {value!r} is not one of a {stored.kind} "
                f"trigger's: {names}"
            ) from None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise InvalidTriggerError(
            f"{where}: misfire_instruction must be a name or a number"
        ) from None


def _rebuild(edited: Trigger, where: str) -> None:
    """Run the kind's own checks on the edited fields (a cron expression or a rule is parsed
    again, in its zone)."""
    post_init = getattr(edited, "__post_init__", None)
    if post_init is None:
        return
    try:
        post_init()
    except InvalidTriggerError:
        raise
    except (ValueError, TypeError) as error:
        # A kind's own check may name the trigger already (a cron expression's does): once.
        message = str(error)
        if not message.startswith(f"{where}: "):
            message = f"{where}: {message}"
        raise InvalidTriggerError(message) from None
