"""The writes the API and the pages offer, each through the :class:`~celery_quartz.Quartz`
client (never SQL), and the reading of their input: bad input is an :class:`HttpError` naming
the field at fault, raised before anything is written."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

from celery import Celery

from celery_quartz.affinity import PreferredNode
from celery_quartz.backfill import DEFAULT_MAX_SLOTS, BackfillError
from celery_quartz.client import Quartz
from celery_quartz.errors import (
    CalendarInUseError,
    InvalidTriggerError,
    JobNotFoundError,
    ObjectAlreadyExistsError,
    QuartzError,
    TriggerNotFoundError,
    UnknownTimeZoneError,
    ValidationError,
)
from celery_quartz.job import Job, encode_json, encode_json_object
from celery_quartz.keys import (
    DEFAULT_GROUP,
    MAX_DESCRIPTION_LENGTH,
    MAX_KEY_LENGTH,
    JobKey,
    TriggerKey,
)
from celery_quartz.overlap import OverlapPolicy
from celery_quartz.pausing import MAX_PAUSE_REASON
from celery_quartz.presentation import Redactor, parse_time, trigger_edit
from celery_quartz.presentation import backfill as present_backfill
from celery_quartz.store.views import HistoryFilter
from celery_quartz.triggers import REPEAT_INDEFINITELY, CronTrigger, SimpleTrigger, Trigger
from celery_quartz.triggers.base import MAX_PRIORITY, MIN_PRIORITY, TriggerDetailsUpdate

#: The longest spacing of a backfill's firings the API takes (a day), in seconds.
MAX_BACKFILL_SPACING = 86400


class HttpError(Exception):
    """An answer other than success: its HTTP status, a code, a message and the field at
    fault (``job.task``, ``limit``, …) when one is."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field

    def to_json(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field is not None:
            error["field"] = self.field
        return {"error": error}


def invalid(field: str, message: str) -> HttpError:
    return HttpError(422, "invalid", f"{field}: {message}", field)


def check_text(values: Mapping[str, str]) -> None:
    """Refuse a NUL character in a path part or a query parameter, naming it: no stored name
    holds one (PostgreSQL's text cannot)."""
    for name, value in values.items():
        if "\x00" in value:
            raise invalid(name, "must not contain a NUL character")


def from_quartz_error(error: QuartzError) -> HttpError:
    """The HTTP answer to an error of the client."""
    if isinstance(error, (TriggerNotFoundError, JobNotFoundError)):
        return HttpError(404, "not_found", str(error))
    if isinstance(error, (ObjectAlreadyExistsError, CalendarInUseError)):
        return HttpError(409, "conflict", str(error))
    if isinstance(error, ValidationError):
        return HttpError(422, "invalid", str(error))
    return HttpError(400, "refused", str(error))


# -- the actions -------------------------------------------------------------------------------

Body = Mapping[str, Any]
_K = TypeVar("_K", JobKey, TriggerKey)


def _trigger_action(
    do: Callable[[Quartz, TriggerKey, Body], Any],
) -> Callable[[Quartz, str, str, Body], Any]:
    def run(client: Quartz, group: str, name: str, body: Body) -> Any:
        key = TriggerKey(name, group)
        if client.get_trigger_state(key) == "NONE":
            raise HttpError(404, "not_found", f"trigger {key} is not stored")
        return do(client, key, body)

    return run


def _job_action(
    do: Callable[[Quartz, JobKey, Body], Any],
) -> Callable[[Quartz, str, str, Body], Any]:
    def run(client: Quartz, group: str, name: str, body: Body) -> Any:
        key = JobKey(name, group)
        if client.get_job(key) is None:
            raise HttpError(404, "not_found", f"job {key} is not stored")
        return do(client, key, body)

    return run


def _reset(client: Quartz, key: TriggerKey, body: Body) -> dict[str, Any]:
    if client.get_trigger_state(key) != "ERROR":
        raise HttpError(409, "conflict", f"trigger {key} is not in ERROR")
    return {"reset": client.reset_trigger_from_error_state(key)}


def _repin(client: Quartz, key: TriggerKey, body: Body) -> dict[str, Any]:
    _only(body, {"preferred_node"}, "")
    if "preferred_node" not in body:
        raise invalid("preferred_node", "required: a worker's node name, '*' or null")
    value = body["preferred_node"]
    if value is not None and not isinstance(value, str):
        raise invalid("preferred_node", f"a worker's node name, '*' or null, not {value!r}")
    if value is not None:
        check_text({"preferred_node": value})
    try:
        node = PreferredNode.parse(value)
    except ValidationError as error:
        raise invalid("preferred_node", str(error)) from None
    client.update_trigger_details(key, TriggerDetailsUpdate(preferred_node=node))
    return {"preferred_node": node.node, "preferred_node_auto": node.is_automatic}


def _trigger_now(client: Quartz, key: JobKey, body: Body) -> dict[str, Any]:
    _only(body, {"data"}, "")
    data = body.get("data") or {}
    _json_object(data, "data", client.settings.max_job_data_bytes)
    trigger = client.trigger_job(key, data)
    return {"trigger": {"group": trigger.key.group, "name": trigger.key.name}}


def _unschedule(client: Quartz, key: TriggerKey, body: Body) -> dict[str, Any]:
    return {"removed": client.unschedule_job(key)}


def _delete_job(client: Quartz, key: JobKey, body: Body) -> dict[str, Any]:
    return {"removed": client.delete_job(key)}


def _done(client_call: Callable[[Quartz, Any], None]) -> Callable[[Quartz, Any, Body], Any]:
    def run(client: Quartz, key: Any, body: Body) -> dict[str, Any]:
        _only(body, set(), "")
        client_call(client, key)
        return {"ok": True}

    return run


def _paused(client_call: Callable[..., None]) -> Callable[[Quartz, Any, Body], Any]:
    """A pause: the body's optional ``reason`` is kept with the paused triggers; the pause is
    requested by the request's principal."""

    def run(client: Quartz, key: Any, body: Body) -> dict[str, Any]:
        _only(body, {"reason"}, "")
        reason = body.get("reason")
        if reason is not None:
            if not isinstance(reason, str):
                raise invalid("reason", f"text, up to {MAX_PAUSE_REASON} characters")
            if len(reason) > MAX_PAUSE_REASON:
                raise invalid("reason", f"{len(reason)} characters; at most {MAX_PAUSE_REASON}")
            check_text({"reason": reason})
        if key is None:
            client_call(client, reason=reason)
        else:
            client_call(client, key, reason=reason)
        return {"ok": True}

    return run


#: The body of an edit: each editable detail and the JSON types it takes.
_EDIT_FIELDS: dict[str, tuple[type, ...]] = {
    "cron": (str,),
    "time_zone": (str,),
    "interval": (int, float),
    "rrule": (str,),
    "priority": (int,),
    "misfire_instruction": (str, int),
    "overlap_policy": (str,),
    "preferred_node": (str, type(None)),
    "execution_group": (str, type(None)),
    "calendar": (str, type(None)),
    "description": (str, type(None)),
}


def _edit(client: Quartz, key: TriggerKey, body: Body) -> dict[str, Any]:
    """Edit a trigger in place: the body's details (``dry_run``: show, write nothing). A bad
    value is a 422 naming its field."""
    _only(body, {*_EDIT_FIELDS, "dry_run"}, "")
    dry_run = body.get("dry_run", False)
    if not isinstance(dry_run, bool):
        raise invalid("dry_run", "true or false")
    changes = {name: value for name, value in body.items() if name != "dry_run"}
    if not changes:
        raise invalid("body", f"give at least one of {', '.join(_EDIT_FIELDS)}")
    for name, value in changes.items():
        kinds = _EDIT_FIELDS[name]
        if isinstance(value, bool) or not isinstance(value, kinds):
            names = " or ".join("null" if k is type(None) else k.__name__ for k in kinds)
            raise invalid(name, f"must be {names}")
        if isinstance(value, str):
            check_text({name: value})
        if isinstance(value, float) and not math.isfinite(value):
            raise invalid(name, "must be a finite number")
    before = client.store.trigger_view(key)
    if before is None:
        raise HttpError(404, "not_found", f"trigger {key} is not stored")
    try:
        edited = client.update_trigger(key, dry_run=dry_run, **changes)
    except (InvalidTriggerError, ValidationError) as error:
        raise invalid(_field_at_fault(client, key, changes), str(error)) from None
    # The answer shows the trigger's data as the API's reads do: secrets redacted.
    redact = Redactor(client.settings.dashboard_redact_keys)
    return trigger_edit(before, edited, dry_run=dry_run, redact=redact)


def _field_at_fault(client: Quartz, key: TriggerKey, changes: Body) -> str:
    """The first detail of ``changes`` that is refused on its own (a dry run of each)."""
    if len(changes) > 1:
        for name, value in changes.items():
            try:
                client.update_trigger(key, dry_run=True, **{name: value})
            except (InvalidTriggerError, ValidationError):
                return name
    return next(iter(changes))


#: A backfill's body: its fields, and the API's name of each of the request's parts.
_BACKFILL_FIELDS = {"from", "to", "max_slots", "spacing", "include_succeeded", "dry_run"}
_BACKFILL_NAMES = {"start": "from", "end": "to"}


def backfill(client: Quartz, key: TriggerKey, body: Body) -> dict[str, Any]:
    """Run each past slot of ``key`` in [``from``, ``to``) once (docs/steering.md#backfill):
    times in ISO 8601 (UTC without an offset), ``max_slots`` and ``spacing`` (seconds),
    ``include_succeeded`` and ``dry_run`` (count, store nothing). A bad field is a 422 naming
    it; the answer is :func:`celery_quartz.presentation.backfill`'s."""
    _only(body, _BACKFILL_FIELDS, "")
    times = []
    for name in ("from", "to"):
        value = body.get(name)
        if not isinstance(value, str):
            raise invalid(name, "required, an ISO 8601 time")
        check_text({name: value})
        try:
            times.append(parse_time(value.replace("Z", "+00:00")))
        except ValueError as error:
            raise invalid(name, str(error)) from None
    max_slots = body.get("max_slots", DEFAULT_MAX_SLOTS)
    if isinstance(max_slots, bool) or not isinstance(max_slots, int) or max_slots < 1:
        raise invalid("max_slots", "a whole number of 1 or more")
    spacing = body.get("spacing", 0)
    if isinstance(spacing, bool) or not isinstance(spacing, (int, float)):
        raise invalid("spacing", "seconds, a number of 0 or more")
    if not math.isfinite(spacing) or not 0 <= spacing <= MAX_BACKFILL_SPACING:
        raise invalid("spacing", f"seconds, from 0 to {MAX_BACKFILL_SPACING}")
    flags = {name: body.get(name, False) for name in ("include_succeeded", "dry_run")}
    for name, flag in flags.items():
        if not isinstance(flag, bool):
            raise invalid(name, "true or false")
    try:
        result = client.backfill(
            key, times[0], times[1], max_slots, timedelta(seconds=spacing), **flags
        )
    except BackfillError as error:
        field = _BACKFILL_NAMES.get(error.field or "", error.field or "body")
        raise invalid(field, str(error)) from None
    return present_backfill(result)


#: Actions on one trigger: the path's last part → (the policy's action name, what it does).
TRIGGER_ACTIONS: dict[str, tuple[str, Callable[[Quartz, str, str, Body], Any]]] = {
    "pause": ("pause_trigger", _trigger_action(_paused(Quartz.pause_trigger))),
    "resume": ("resume_trigger", _trigger_action(_done(Quartz.resume_trigger))),
    "reset": ("reset_trigger", _trigger_action(_reset)),
    "unschedule": ("unschedule", _trigger_action(_unschedule)),
    "preferred-node": ("repin_trigger", _trigger_action(_repin)),
    "edit": ("edit_trigger", _trigger_action(_edit)),
    "backfill": ("backfill", _trigger_action(backfill)),
}


def run_again(client: Quartz, key: JobKey, body: Mapping[str, Any]) -> dict[str, Any]:
    """Fire ``key`` once now with the arguments recorded on its history row (``history_id``
    and ``event_time``: the row's id, and its time in epoch milliseconds or ISO 8601), or with
    the job's current ones when the row recorded none."""
    unknown = set(body) - {"history_id", "event_time"}
    if unknown:
        raise invalid(sorted(unknown)[0], "not a field of run-again")
    history_id = _whole(body.get("history_id"), "history_id")
    event = body.get("event_time")
    if isinstance(event, str) and not event.strip().lstrip("-").isdigit():
        try:
            when = datetime.fromisoformat(event.replace("Z", "+00:00"))
        except ValueError:
            raise invalid("event_time", f"epoch milliseconds or ISO 8601, not {event!r}") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        event_millis = int(when.timestamp() * 1000)
    else:
        event_millis = _whole(event, "event_time")
    # The row itself: the first one at or before (event time, id), newest first.
    page = client.store.history(
        HistoryFilter(job=key), after=(event_millis, history_id + 1), limit=1
    )
    if not page.items or page.items[0].history_id != history_id:
        raise HttpError(404, "not_found", f"history row {history_id} of job {key} is not stored")
    row = page.items[0]
    recorded = row.args is not None or row.kwargs is not None
    if recorded:
        trigger = client.trigger_job(key, args=row.args, kwargs=row.kwargs)
    else:
        trigger = client.trigger_job(key)
    arguments = "recorded" if recorded else "current"
    return {
        "trigger": {"group": trigger.key.group, "name": trigger.key.name},
        "arguments": arguments,
        "message": f"job {key} runs again with "
        + (
            "the arguments recorded on the run"
            if recorded
            else "its current arguments (the run recorded none)"
        ),
    }


def _whole(value: Any, field: str) -> int:
    if isinstance(value, bool):
        raise invalid(field, f"a whole number, not {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    raise invalid(field, f"a whole number, not {value!r}")


#: Actions on one job.
JOB_ACTIONS: dict[str, tuple[str, Callable[[Quartz, str, str, Body], Any]]] = {
    "pause": ("pause_job", _job_action(_paused(Quartz.pause_job))),
    "resume": ("resume_job", _job_action(_done(Quartz.resume_job))),
    "trigger": ("trigger_job", _job_action(_trigger_now)),
    # Fires the job, as "trigger" does: the same permission.
    "run-again": ("trigger_job", _job_action(run_again)),
    "delete": ("delete_job", _job_action(_delete_job)),
}
#: Actions on a trigger group (which need not hold a trigger yet: a paused group pauses the
#: triggers stored in it later).
GROUP_ACTIONS: dict[str, tuple[str, Callable[[Quartz, str, Body], Any]]] = {
    "pause": ("pause_group", _paused(Quartz.pause_trigger_group)),
    "resume": ("resume_group", _done(Quartz.resume_trigger_group)),
}
#: Actions on every trigger of the scheduler: the path's last part → (action, what it does).
ALL_ACTIONS: dict[str, tuple[str, Callable[[Quartz, Any, Body], Any]]] = {
    "pause-all": ("pause_all", _paused(Quartz.pause_all)),
    "resume-all": ("resume_all", _done(lambda client, _: client.resume_all())),
}


# -- scheduling a job ---------------------------------------------------------------------------

_JOB_FIELDS = {
    "name",
    "group",
    "task",
    "args",
    "kwargs",
    "data",
    "description",
    "durable",
    "requests_recovery",
    "disallow_concurrent",
    "persist_job_data",
}
_TRIGGER_FIELDS = {
    "name",
    "group",
    "cron",
    "time_zone",
    "interval",
    "repeat_count",
    "at",
    "start_at",
    "end_at",
    "priority",
    "calendar",
    "execution_group",
    "preferred_node",
    "overlap_policy",
    "description",
    "data",
}


#: Quartz's repeat count is a 32-bit integer.
MAX_REPEAT_COUNT = 2**31 - 1


def schedule_job(client: Quartz, app: Celery, allowed_tasks: Any, body: Body) -> dict[str, Any]:
    """Store a job and its trigger from the request's JSON (docs/dashboard.md gives the form).

    The task must be registered with the app, and on ``quartz_dashboard_allowed_tasks`` when
    that is set: a caller chooses among the application's tasks, never arbitrary code.
    """
    _only(body, {"job", "trigger", "replace"}, "")
    job_spec = _object(body.get("job"), "job")
    trigger_spec = _object(body.get("trigger"), "trigger")
    replace = body.get("replace", False)
    if not isinstance(replace, bool):
        raise invalid("replace", "true or false")
    max_bytes = client.settings.max_job_data_bytes
    job = _job(job_spec, max_bytes)
    app.loader.import_default_modules()
    if job.task not in app.tasks:
        raise invalid("job.task", f"task {job.task!r} is not registered with the app")
    if allowed_tasks is not None and job.task not in allowed_tasks:
        raise HttpError(
            403,
            "forbidden",
            f"job.task: task {job.task!r} is not on quartz_dashboard_allowed_tasks",
            "job.task",
        )
    trigger, schedule_field = _trigger(trigger_spec, max_bytes)
    _check_fires(trigger, schedule_field, client.clock.now())
    try:
        client.schedule_job(job, trigger, replace=replace)
    except InvalidTriggerError as error:
        # What is left once the fields are checked: the calendar (not stored, or excluding
        # every fire time).
        raise invalid("trigger.calendar", str(error)) from None
    except QuartzError as error:
        raise from_quartz_error(error) from None
    return {
        "job": {"group": job.key.group, "name": job.key.name},
        "trigger": {"group": trigger.key.group, "name": trigger.key.name},
        "next_fire_time": None
        if trigger.next_fire_time is None
        else trigger.next_fire_time.isoformat(),
    }


def _job(spec: Body, max_bytes: int) -> Job:
    _only(spec, _JOB_FIELDS, "job.")
    name = _required(spec, "name", "job.")
    group = _string(spec, "group", "job.") or DEFAULT_GROUP
    task = _required(spec, "task", "job.")
    args = spec.get("args", [])
    if not isinstance(args, list):
        raise invalid("job.args", "a JSON array")
    try:
        encode_json("job", "args", args, max_bytes)
    except ValidationError as error:
        raise invalid("job.args", str(error)) from None
    fields: dict[str, Any] = {}
    for name_ in ("kwargs", "data"):
        value = spec.get(name_, {})
        _json_object(value, f"job.{name_}", max_bytes)
        fields[name_] = value
    for flag in ("durable", "requests_recovery", "disallow_concurrent", "persist_job_data"):
        value = spec.get(flag, False)
        if not isinstance(value, bool):
            raise invalid(f"job.{flag}", "true or false")
        fields[flag] = value
    return Job(
        key=_key(JobKey, name, group, "job."),
        task=task,
        args=args,
        description=_string(spec, "description", "job.", max_length=MAX_DESCRIPTION_LENGTH),
        **fields,
    )


def _trigger(spec: Body, max_bytes: int) -> tuple[Trigger, str]:
    """The trigger of a request, and the field that holds its schedule (``trigger.cron``,
    ``trigger.interval`` or ``trigger.at``)."""
    _only(spec, _TRIGGER_FIELDS, "trigger.")
    kinds = [k for k in ("cron", "interval", "at") if k in spec]
    if len(kinds) != 1:
        raise invalid("trigger", "exactly one of cron, interval or at")
    kind = kinds[0]
    schedule_field = f"trigger.{kind}"
    name = _string(spec, "name", "trigger.")
    group = _string(spec, "group", "trigger.") or DEFAULT_GROUP
    common: dict[str, Any] = {
        "description": _string(spec, "description", "trigger.", max_length=MAX_DESCRIPTION_LENGTH),
        "calendar_name": _string(spec, "calendar", "trigger.", max_length=MAX_KEY_LENGTH),
        "execution_group": _string(spec, "execution_group", "trigger.", max_length=MAX_KEY_LENGTH),
        "start_at": _time(spec, "start_at"),
        "end_at": _time(spec, "end_at"),
    }
    common["key"] = _key(TriggerKey, name, group, "trigger.")
    if "priority" in spec:
        common["priority"] = _integer(spec, "priority", MIN_PRIORITY, MAX_PRIORITY)
    if "data" in spec:
        _json_object(spec["data"], "trigger.data", max_bytes)
        common["data"] = spec["data"]
    if "preferred_node" in spec:
        value = spec["preferred_node"]
        if value is not None and not isinstance(value, str):
            raise invalid("trigger.preferred_node", "a worker's node name, '*' or null")
        if value is not None:
            check_text({"trigger.preferred_node": value})
        try:
            common["preferred_node"] = PreferredNode.parse(value)
        except ValidationError as error:
            raise invalid("trigger.preferred_node", str(error)) from None
    if "overlap_policy" in spec:
        policies = [policy.value for policy in OverlapPolicy]
        if spec["overlap_policy"] not in policies:
            raise invalid("trigger.overlap_policy", f"one of {', '.join(policies)}")
        common["overlap_policy"] = OverlapPolicy(spec["overlap_policy"])
    if kind == "at":
        if "start_at" in spec:
            raise invalid("trigger.start_at", "not with 'at' (which is the start)")
        common["start_at"] = _time(spec, "at")
    start, end = common["start_at"], common["end_at"]
    if start is not None and end is not None and end < start:
        raise invalid("trigger.end_at", f"{spec['end_at']!r} is before the start")
    try:
        if kind == "cron":
            expression = _required(spec, "cron", "trigger.")
            time_zone = _string(spec, "time_zone", "trigger.") or "UTC"
            trigger: Trigger = CronTrigger(expression=expression, time_zone=time_zone, **common)
        elif kind == "interval":
            trigger = SimpleTrigger(
                repeat_interval=_interval(spec["interval"]),
                repeat_count=_integer(
                    spec, "repeat_count", REPEAT_INDEFINITELY, MAX_REPEAT_COUNT, REPEAT_INDEFINITELY
                ),
                **common,
            )
        else:
            trigger = SimpleTrigger(repeat_count=0, **common)
        trigger.validate()
    except UnknownTimeZoneError as error:
        raise invalid("trigger.time_zone", str(error)) from None
    except ValidationError as error:
        raise invalid(schedule_field, str(error)) from None
    return trigger, schedule_field


def _check_fires(trigger: Trigger, schedule_field: str, now: datetime) -> None:
    """Refuse a trigger whose schedule never fires, naming the field that holds the schedule
    (the store refuses it too, but cannot name a field of the request)."""
    probe = copy.deepcopy(trigger)
    if probe.start_at is None:
        probe.start_at = now
    try:
        first = probe.compute_first_fire_time()
    except OverflowError:
        raise invalid(
            schedule_field, "its first fire time is outside the range of times (years 1 to 9999)"
        ) from None
    if first is None:
        raise invalid(schedule_field, "based on its schedule (and its end_at) it will never fire")


def _integer(spec: Body, name: str, low: int, high: int, default: int | None = None) -> int:
    value = spec.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise invalid(f"trigger.{name}", f"an integer from {low} to {high}, not {value!r}")
    return value


def _interval(value: Any) -> timedelta:
    """A repeat interval in seconds: a finite, positive number, at least a microsecond."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        raise invalid("trigger.interval", f"a positive number of seconds, not {value!r}")
    try:
        interval = timedelta(seconds=value)
    except OverflowError:
        raise invalid(
            "trigger.interval", f"at most {timedelta.max.days} days in seconds, not {value!r}"
        ) from None
    if interval <= timedelta(0):
        raise invalid("trigger.interval", f"at least a microsecond, not {value!r}")
    return interval


def _json_object(value: Any, field: str, max_bytes: int) -> None:
    """Refuse what is not a JSON object of JSON values within the size bound (no NaN, no
    Infinity), naming the field."""
    if not isinstance(value, dict):
        raise invalid(field, "a JSON object")
    try:
        encode_json_object(field, "value", value, max_bytes)
    except ValidationError as error:
        raise invalid(field, str(error)) from None


def _only(spec: Body, allowed: set[str], prefix: str) -> None:
    for name in spec:
        if name not in allowed:
            raise invalid(f"{prefix}{name}", f"unknown field; known: {', '.join(sorted(allowed))}")


def _object(value: Any, field: str) -> Body:
    if not isinstance(value, dict):
        raise invalid(field, "required, a JSON object")
    return value


def _string(
    spec: Body, name: str, prefix: str, *, required: bool = False, max_length: int | None = None
) -> str | None:
    value = spec.get(name)
    field = f"{prefix}{name}"
    if value is None:
        if required:
            raise invalid(field, "required")
        return None
    if not isinstance(value, str) or not value.strip():
        raise invalid(field, "a non-empty string")
    check_text({field: value})
    if max_length is not None and len(value) > max_length:
        raise invalid(field, f"at most {max_length} characters, not {len(value)}")
    return value


def _key(kind: type[_K], name: str | None, group: str, prefix: str) -> _K:
    """A job or trigger key (a generated trigger name when ``name`` is None), naming the part
    at fault."""
    try:
        kind("x", group)
    except ValidationError as error:
        raise invalid(f"{prefix}group", str(error)) from None
    if name is None:
        return TriggerKey.generate(group)  # type: ignore[return-value]
    try:
        return kind(name, group)
    except ValidationError as error:
        raise invalid(f"{prefix}name", str(error)) from None


def _required(spec: Body, name: str, prefix: str) -> str:
    value = _string(spec, name, prefix, required=True)
    assert value is not None
    return value


def _time(spec: Body, name: str) -> datetime | None:
    """An ISO 8601 time with its offset, within the range of times Python holds (years 1 to
    9999 in UTC)."""
    value = spec.get(name)
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None:
        raise invalid(
            f"trigger.{name}", f"an ISO 8601 time with its offset (…T09:00:00+00:00), not {value!r}"
        )
    try:
        parsed.astimezone(timezone.utc)
    except OverflowError:
        raise invalid(
            f"trigger.{name}", f"{value!r} is outside the range of times (years 1 to 9999 in UTC)"
        ) from None
    return parsed
