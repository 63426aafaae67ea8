"""A trigger's overlap policy in scheduling files (docs/steering.md#overlap-policy):
``<overlap-policy>`` in XML, ``"OverlapPolicy"`` in JSON and YAML; a bad value named with its
file and line; the JSON and YAML export writing it back (XML's, bound to Quartz.NET's schema,
refuses it and says to export as JSON or YAML), and a round trip through the store."""

from __future__ import annotations

from datetime import timedelta

import pytest

from celery_quartz import Job, JobKey, SimpleTrigger, TriggerKey
from celery_quartz.errors import SchedulingFileError
from celery_quartz.overlap import OverlapPolicy
from celery_quartz.scheduling_files import export_scheduling_data, parse_scheduling_data
from celery_quartz.store import MemoryStore
from tests.unit.conftest import T0

DOCUMENTS = {
    "xml": (
        "<job-scheduling-data>\n<schedule>\n<trigger>\n<simple>\n<name>t</name>\n"
        "<job-name>j</job-name>\n<overlap-policy>{policy}</overlap-policy>\n"
        "<repeat-count>-1</repeat-count>\n<repeat-interval>60000</repeat-interval>\n"
        "</simple>\n</trigger>\n</schedule>\n</job-scheduling-data>\n"
    ),
    "json": (
        '{{"Triggers": [{{"Name": "t", "JobName": "j",\n "OverlapPolicy": "{policy}",\n'
        ' "Simple": {{"RepeatCount": -1, "RepeatInterval": 60000}}}}]}}'
    ),
    "yaml": (
        "Triggers:\n- Name: t\n  JobName: j\n  OverlapPolicy: {policy}\n"
        "  Simple: {{RepeatCount: -1, RepeatInterval: 60000}}\n"
    ),
}


@pytest.fixture(params=list(DOCUMENTS))
def fmt(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _policy_read(fmt: str, policy: str) -> object:
    data = parse_scheduling_data(DOCUMENTS[fmt].format(policy=policy), f"quartz_jobs.{fmt}")
    [definition] = data.triggers
    return definition.trigger.overlap_policy


def test_each_format_reads_the_overlap_policy(fmt: str) -> None:
    assert _policy_read(fmt, "skip") is OverlapPolicy.SKIP
    assert _policy_read(fmt, "cancel_previous") is OverlapPolicy.CANCEL_PREVIOUS


def test_a_trigger_without_one_allows_overlaps(fmt: str) -> None:
    text = DOCUMENTS[fmt].format(policy="x")
    lines = [line for line in text.splitlines(keepends=True) if "verlap" not in line]
    data = parse_scheduling_data("".join(lines), f"quartz_jobs.{fmt}")
    assert data.triggers[0].trigger.overlap_policy is OverlapPolicy.ALLOW


@pytest.mark.parametrize(
    ("fmt", "where"),
    [
        ("xml", "quartz_jobs.xml:7: trigger DEFAULT.t: overlap-policy"),
        (
            "json",
            "quartz_jobs.json at $.Triggers[0].OverlapPolicy: trigger DEFAULT.t: OverlapPolicy",
        ),
        ("yaml", "quartz_jobs.yaml:4: trigger DEFAULT.t: OverlapPolicy"),
    ],
)
def test_an_unknown_policy_is_refused_naming_the_file_the_line_and_the_trigger(
    fmt: str, where: str
) -> None:
    with pytest.raises(SchedulingFileError) as caught:
        _policy_read(fmt, "sometimes")
    assert str(caught.value) == (
        f"{where} 'sometimes' is not one of allow, skip, buffer_one, cancel_previous"
    )


def _stored(policy: str) -> MemoryStore:
    store = MemoryStore(scheduler_name="files")
    trigger = SimpleTrigger(
        key=TriggerKey("t"),
        job_key=JobKey("j"),
        start_at=T0,
        repeat_interval=timedelta(minutes=1),
        repeat_count=-1,
        overlap_policy=policy,
    )
    store.store_jobs_and_triggers([(Job(key=JobKey("j"), task="tasks.work"), [trigger])])
    return store


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_the_export_writes_the_policy_back_and_reads_it_again(fmt: str) -> None:
    store = _stored("buffer_one")
    text = export_scheduling_data(store, fmt)
    assert "OverlapPolicy" in text and "buffer_one" in text
    [definition] = parse_scheduling_data(text, f"export.{fmt}").triggers
    assert definition.trigger.overlap_policy is OverlapPolicy.BUFFER_ONE
    store.dispose()


def test_the_export_leaves_the_default_out(fmt: str) -> None:
    store = _stored("allow")
    assert "verlap" not in export_scheduling_data(store, fmt)
    store.dispose()


def test_the_xml_export_refuses_a_policy_quartz_nets_schema_cannot_hold() -> None:
    store = _stored("skip")
    with pytest.raises(SchedulingFileError, match=r"no <overlap-policy>.*export as json or yaml"):
        export_scheduling_data(store, "xml")
    store.dispose()
