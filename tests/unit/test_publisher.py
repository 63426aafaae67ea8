"""The Redis path's message rendering, and the ids a batch of firings takes (no broker needed;
tests/integration/test_publisher.py compares the messages with Celery's own)."""

from __future__ import annotations

import base64
import json
import uuid
from datetime import datetime, timezone
from typing import Any

import pytest
from celery import Celery

from celery_quartz.clock import FakeClock, from_millis
from celery_quartz.firing import Firing, FiringHeader, new_ids
from celery_quartz.keys import JobKey, TriggerKey
from celery_quartz.publisher import RedisPath

NOW = datetime(2027, 1, 15, 8, 0, tzinfo=timezone.utc)


def test_new_ids_are_distinct_version_4_uuids_in_their_usual_form() -> None:
    ids = new_ids(1000)
    assert len(set(ids)) == 1000
    for text in ids:
        parsed = uuid.UUID(text)
        assert (parsed.version, parsed.variant) == (4, uuid.RFC_4122)
        assert str(parsed) == text
    assert new_ids(0) == []


def _firing(**changes: Any) -> Firing:
    values: dict[str, Any] = {
        "fire_instance_id": str(uuid.uuid4()),
        "scheduler_name": "unit",
        "task": "tasks.report",
        "args": [],
        "kwargs": {},
        "options": {},
        "job_key": JobKey("report"),
        "trigger_key": TriggerKey("nightly"),
        "scheduled_millis": 1_800_000_000_000,
        "fired_millis": 1_800_000_000_005,
        "fired_by": "sched-a",
    }
    values.update(changes)
    return Firing(**values)


def _path() -> RedisPath:
    return RedisPath(Celery("unit", broker="memory://", set_as_current=False), None, FakeClock(NOW))


@pytest.mark.parametrize(
    ("task", "queue", "name"),
    [
        ("tasks.report", "celery", "nightly"),
        # What str.format and JSON give meaning to, in the parts a template holds and in the
        # values it takes.
        ('tasks.{0}"x"', "q{name}}", 'night"{ly}\\'),
    ],
    ids=["plain", "braces-and-quotes"],
)
@pytest.mark.parametrize("expires_millis", [None, 1_800_000_060_005], ids=["no-expiry", "expiry"])
def test_the_envelope_carries_the_firings_own_values(
    task: str, queue: str, name: str, expires_millis: int | None
) -> None:
    path = _path()
    firing = _firing(
        task=task,
        args=[1, "two"],
        kwargs={"k": "{v}"},
        trigger_key=TriggerKey(name),
        expires_millis=expires_millis,
        job_data={"a": [1, 2]},
    )
    message = json.loads(path.envelope(firing, queue, NOW, "tag-1"))
    headers, properties = message["headers"], message["properties"]
    assert headers["task"] == task
    assert headers["id"] == headers["root_id"] == properties["correlation_id"]
    assert headers["id"] == firing.fire_instance_id
    assert headers["quartz"] == json.loads(json.dumps(FiringHeader.of(firing).fields))
    assert headers["argsrepr"] == "[1, 'two']"
    assert headers["kwargsrepr"] == "{'k': '{v}'}" + _identity(firing)
    assert properties["delivery_tag"] == "tag-1"
    assert properties["delivery_info"] == {"exchange": "", "routing_key": queue}
    assert json.loads(base64.b64decode(message["body"]))[:2] == [[1, "two"], {"k": "{v}"}]
    if expires_millis is None:
        assert headers["expires"] is None and "expiration" not in properties
    else:
        assert headers["expires"] == "2027-01-15T08:01:00.005000+00:00"
        assert properties["expiration"] == "60005"


def test_a_firing_published_again_after_an_expiry_has_a_task_id_of_its_own() -> None:
    firing = _firing(expired_count=2)
    message = json.loads(_path().envelope(firing, "celery", NOW, "tag"))
    headers = message["headers"]
    assert headers["id"] == headers["root_id"] == f"{firing.fire_instance_id}.r2"
    assert message["properties"]["correlation_id"] == headers["id"]
    assert headers["quartz"]["fire_instance_id"] == firing.fire_instance_id


def _identity(firing: Firing) -> str:
    """What a firing's kwargsrepr adds for Flower: which job, trigger and fire time it is."""
    return (
        f" (quartz job={firing.job_key} trigger={firing.trigger_key} "
        f"scheduled={from_millis(firing.scheduled_millis).isoformat()})"
    )


def test_a_firing_without_arguments_shows_them_as_celery_does() -> None:
    firing = _firing()
    message = json.loads(_path().envelope(firing, "celery", NOW, "tag"))
    assert message["headers"]["argsrepr"] == "()"
    assert message["headers"]["kwargsrepr"] == "{}" + _identity(firing)
    assert json.loads(base64.b64decode(message["body"]))[:2] == [[], {}]
