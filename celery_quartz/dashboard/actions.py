"""The writes the API and the pages offer, each through the :class:`~celery_quartz.Quartz`
client (never SQL), and the reading of their input: bad input is an :class:`HttpError` naming
the field at fault, raised before anything is written."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from celery import Celery

from celery_quartz.affinity import PreferredNode
from celery_quartz.client import Quartz
from celery_quartz.errors import (
    CalendarInUseError,
    JobNotFoundError,
    ObjectAlreadyExistsError,
    QuartzError,
    TriggerNotFoundError,
    ValidationError,
)
from celery_quartz.job import Job
from celery_quartz.keys import DEFAULT_GROUP, JobKey, TriggerKey
from celery_quartz.triggers import REPEAT_INDEFINITELY, CronTrigger, SimpleTrigger, Trigger
from celery_quartz.triggers.base import TriggerDetailsUpdate


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
    try:
        node = PreferredNode.parse(value)
    except ValidationError as error:
        raise invalid("preferred_node", str(error)) from None
    client.update_trigger_details(key, TriggerDetailsUpdate(preferred_node=node))
    return {"preferred_node": node.node, "preferred_node_auto": node.is_automatic}


def _trigger_now(client: Quartz, key: JobKey, body: Body) -> dict[str, Any]:
    _only(body, {"data"}, "")
    data = body.get("data") or {}
    if not isinstance(data, dict):
        raise invalid("data", "a JSON object")
    trigger = client.trigger_job(key, data)
    return {"trigger": {"group": trigger.key.group, "name": trigger.key.name}}


def _unschedule(client: Quartz, key: TriggerKey, body: Body) -> dict[str, Any]:
    return {"removed": client.unschedule_job(key)}


def _delete_job(client: Quartz, key: JobKey, body: Body) -> dict[str, Any]:
    return {"removed": client.delete_job(key)}


def _done(client_call: Callable[[Quartz, Any], None]) -> Callable[[Quartz, Any, Body], Any]:
    def run(client: Quartz, key: Any, body: Body) -> dict[str, Any]:
        client_call(client, key)
        return {"ok": True}

    return run


#: Actions on one trigger: the path's last part → (the policy's action name, what it does).
TRIGGER_ACTIONS: dict[str, tuple[str, Callable[[Quartz, str, str, Body], Any]]] = {
    "pause": ("pause_trigger", _trigger_action(_done(Quartz.pause_trigger))),
    "resume": ("resume_trigger", _trigger_action(_done(Quartz.resume_trigger))),
    "reset": ("reset_trigger", _trigger_action(_reset)),
    "unschedule": ("unschedule", _trigger_action(_unschedule)),
    "preferred-node": ("repin_trigger", _trigger_action(_repin)),
}
#: Actions on one job.
JOB_ACTIONS: dict[str, tuple[str, Callable[[Quartz, str, str, Body], Any]]] = {
    "pause": ("pause_job", _job_action(_done(Quartz.pause_job))),
    "resume": ("resume_job", _job_action(_done(Quartz.resume_job))),
    "trigger": ("trigger_job", _job_action(_trigger_now)),
    "delete": ("delete_job", _job_action(_delete_job)),
}
#: Actions on a trigger group (which need not hold a trigger yet: a paused group pauses the
#: triggers stored in it later).
GROUP_ACTIONS: dict[str, tuple[str, Callable[[Quartz, str], None]]] = {
    "pause": ("pause_group", Quartz.pause_trigger_group),
    "resume": ("resume_group", Quartz.resume_trigger_group),
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
    "description",
    "data",
}


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
    job = _job(job_spec)
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
    trigger = _trigger(trigger_spec)
    try:
        client.schedule_job(job, trigger, replace=replace)
    except QuartzError as error:
        raise from_quartz_error(error) from None
    return {
        "job": {"group": job.key.group, "name": job.key.name},
        "trigger": {"group": trigger.key.group, "name": trigger.key.name},
        "next_fire_time": None
        if trigger.next_fire_time is None
        else trigger.next_fire_time.isoformat(),
    }


def _job(spec: Body) -> Job:
    _only(spec, _JOB_FIELDS, "job.")
    name = _required(spec, "name", "job.")
    group = _string(spec, "group", "job.") or DEFAULT_GROUP
    task = _required(spec, "task", "job.")
    args = spec.get("args", [])
    if not isinstance(args, list):
        raise invalid("job.args", "a JSON array")
    fields: dict[str, Any] = {}
    for name_ in ("kwargs", "data"):
        value = spec.get(name_, {})
        if not isinstance(value, dict):
            raise invalid(f"job.{name_}", "a JSON object")
        fields[name_] = value
    for flag in ("durable", "requests_recovery", "disallow_concurrent", "persist_job_data"):
        value = spec.get(flag, False)
        if not isinstance(value, bool):
            raise invalid(f"job.{flag}", "true or false")
        fields[flag] = value
    try:
        key = JobKey(name, group)
        return Job(
            key=key,
            task=task,
            args=args,
            description=_string(spec, "description", "job."),
            **fields,
        )
    except ValidationError as error:
        raise invalid("job", str(error)) from None


def _trigger(spec: Body) -> Trigger:
    _only(spec, _TRIGGER_FIELDS, "trigger.")
    kinds = [k for k in ("cron", "interval", "at") if k in spec]
    if len(kinds) != 1:
        raise invalid("trigger", "exactly one of cron, interval or at")
    name = _string(spec, "name", "trigger.")
    group = _string(spec, "group", "trigger.") or DEFAULT_GROUP
    common: dict[str, Any] = {
        "description": _string(spec, "description", "trigger."),
        "calendar_name": _string(spec, "calendar", "trigger."),
        "execution_group": _string(spec, "execution_group", "trigger."),
        "start_at": _time(spec, "start_at"),
        "end_at": _time(spec, "end_at"),
    }
    try:
        common["key"] = TriggerKey(name, group) if name else TriggerKey.generate(group)
    except ValidationError as error:
        raise invalid("trigger.name", str(error)) from None
    if "priority" in spec:
        priority = spec["priority"]
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise invalid("trigger.priority", "an integer")
        common["priority"] = priority
    if "data" in spec:
        if not isinstance(spec["data"], dict):
            raise invalid("trigger.data", "a JSON object")
        common["data"] = spec["data"]
    if "preferred_node" in spec:
        value = spec["preferred_node"]
        if value is not None and not isinstance(value, str):
            raise invalid("trigger.preferred_node", "a worker's node name, '*' or null")
        try:
            common["preferred_node"] = PreferredNode.parse(value)
        except ValidationError as error:
            raise invalid("trigger.preferred_node", str(error)) from None
    kind = kinds[0]
    try:
        if kind == "cron":
            expression = _required(spec, "cron", "trigger.")
            time_zone = _string(spec, "time_zone", "trigger.") or "UTC"
            return CronTrigger(expression=expression, time_zone=time_zone, **common)
        if kind == "interval":
            interval = spec["interval"]
            if (
                isinstance(interval, bool)
                or not isinstance(interval, (int, float))
                or interval <= 0
            ):
                raise invalid("trigger.interval", "a positive number of seconds")
            count = spec.get("repeat_count", REPEAT_INDEFINITELY)
            if isinstance(count, bool) or not isinstance(count, int) or count < REPEAT_INDEFINITELY:
                raise invalid("trigger.repeat_count", "an integer, -1 for indefinitely")
            return SimpleTrigger(
                repeat_interval=timedelta(seconds=interval), repeat_count=count, **common
            )
        if "start_at" in spec:
            raise invalid("trigger.start_at", "not with 'at' (which is the start)")
        common["start_at"] = _time(spec, "at")
        return SimpleTrigger(repeat_count=0, **common)
    except ValidationError as error:
        field = "trigger.cron" if kind == "cron" else "trigger"
        raise invalid(field, str(error)) from None


def _only(spec: Body, allowed: set[str], prefix: str) -> None:
    for name in spec:
        if name not in allowed:
            raise invalid(f"{prefix}{name}", f"unknown field; known: {', '.join(sorted(allowed))}")


def _object(value: Any, field: str) -> Body:
    if not isinstance(value, dict):
        raise invalid(field, "required, a JSON object")
    return value


def _string(spec: Body, name: str, prefix: str, *, required: bool = False) -> str | None:
    value = spec.get(name)
    if value is None:
        if required:
            raise invalid(f"{prefix}{name}", "required")
        return None
    if not isinstance(value, str) or not value.strip():
        raise invalid(f"{prefix}{name}", "a non-empty string")
    return value


def _required(spec: Body, name: str, prefix: str) -> str:
    value = _string(spec, name, prefix, required=True)
    assert value is not None
    return value


def _time(spec: Body, name: str) -> datetime | None:
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
    return parsed
