"""Reading scheduling files: every element of job_scheduling_data_2_0 (and the 4.x trigger
elements) in XML, JSON and YAML, and the errors, each naming the file, the line or path, and the
job or trigger at fault."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from celery_quartz import JobKey, PreferredNode, RetryPolicy, TriggerKey
from celery_quartz.definitions import SchedulingData
from celery_quartz.errors import SchedulingFileError
from celery_quartz.scheduling_files import parse_scheduling_data
from celery_quartz.scheduling_files.export import job_tree, trigger_tree
from celery_quartz.triggers import (
    CalendarIntervalTrigger,
    CronMisfireInstruction,
    CronTrigger,
    IntervalUnit,
    SimpleMisfireInstruction,
    SimpleTrigger,
)
from tests.unit.conftest import T0
from tests.unit.scheduling_file_samples import FULL, FULL_JSON, FULL_XML, FULL_YAML

UTC = timezone.utc
EXTENSION = {"xml": "xml", "json": "json", "yaml": "yaml"}


def parse(text: str, fmt: str, name: str = "quartz_jobs") -> SchedulingData:
    return parse_scheduling_data(text, f"{name}.{EXTENSION[fmt]}")


def describe(data: SchedulingData) -> dict[str, Any]:
    """What a file says, comparable across formats (start times resolved at T0)."""
    return {
        "deletes": (
            data.delete_job_groups,
            data.delete_trigger_groups,
            data.delete_jobs,
            data.delete_triggers,
        ),
        "directives": (data.overwrite_existing_data, data.ignore_duplicates),
        "jobs": [job_tree(d.job) for d in data.jobs],
        "triggers": [
            (trigger_tree(d.build(T0)), d.explicit_start, d.start_in_seconds) for d in data.triggers
        ],
    }


@pytest.fixture(params=["xml", "json", "yaml"])
def fmt(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def full(fmt: str) -> SchedulingData:
    return parse(FULL[fmt], fmt)


def trigger(data: SchedulingData, name: str) -> Any:
    return next(d for d in data.triggers if d.trigger.key.name == name)


# -- every element, in every format ------------------------------------------------------------


def test_the_three_formats_say_the_same_thing() -> None:
    xml, json_, yaml = (describe(parse(FULL[f], f)) for f in ("xml", "json", "yaml"))
    assert xml == json_
    assert xml == yaml


def test_pre_processing_commands_are_read(fmt: str) -> None:
    data = full(fmt)
    assert data.delete_job_groups == ["old-jobs"]
    assert data.delete_trigger_groups == ["old-triggers"]
    assert data.delete_jobs == [JobKey("gone", "legacy")]
    assert data.delete_triggers == [TriggerKey("gone-trigger")]


def test_processing_directives_are_read_and_default_to_overwrite(fmt: str) -> None:
    data = full(fmt)
    assert (data.overwrite_existing_data, data.ignore_duplicates) == (True, False)
    bare = {"xml": "<job-scheduling-data/>", "json": "{}", "yaml": "Jobs: []"}[fmt]
    defaults = parse(bare, fmt)
    assert (defaults.overwrite_existing_data, defaults.ignore_duplicates) == (True, False)


def test_a_job_has_every_field(fmt: str) -> None:
    job = full(fmt).jobs[0].job
    assert job.key == JobKey("report", "nightly")
    assert job.description == "The nightly report"
    assert job.task == "tasks.report"
    assert job.durable and job.requests_recovery
    assert job.data == {"recipients": "ops@example.com", "format": "pdf"}
    assert job.disallow_concurrent and job.persist_job_data
    assert list(job.args) == [2026, "march"]
    assert job.kwargs == {"full": True}
    assert job.options == {"queue": "batch"}


def test_a_job_defaults_to_the_default_group_not_durable_no_recovery(fmt: str) -> None:
    job = full(fmt).jobs[1].job
    assert job.key == JobKey("ping", "DEFAULT")
    assert not job.durable and not job.requests_recovery and job.data == {}


def test_a_simple_trigger_has_every_field(fmt: str) -> None:
    definition = trigger(full(fmt), "every-ten-seconds")
    t = definition.trigger
    assert isinstance(t, SimpleTrigger)
    assert t.key == TriggerKey("every-ten-seconds", "pings")
    assert t.job_key == JobKey("ping")
    assert t.description == "Ping ten times"
    assert t.priority == 7
    assert t.data == {"source": "simple"}
    assert definition.start_at == datetime(2026, 3, 2, 10, tzinfo=UTC)
    assert t.end_at == datetime(2026, 3, 3, 8, tzinfo=UTC)
    assert t.misfire_instruction == SimpleMisfireInstruction.RESCHEDULE_NEXT_WITH_REMAINING_COUNT
    assert (t.repeat_count, t.repeat_interval) == (10, timedelta(seconds=10))
    assert t.preferred_node is PreferredNode.NONE and t.execution_group is None
    assert t.retry_policy is None


def test_a_cron_trigger_has_every_field_and_the_4x_elements(fmt: str) -> None:
    definition = trigger(full(fmt), "nightly")
    t = definition.trigger
    assert isinstance(t, CronTrigger)
    assert (t.expression, t.time_zone) == ("0 0 2 * * ?", "Europe/Helsinki")
    assert t.misfire_instruction == CronMisfireInstruction.DO_NOTHING
    assert t.retry_policy == RetryPolicy.exponential(
        5, timedelta(seconds=30), 2, timedelta(minutes=10)
    )
    assert t.preferred_node == PreferredNode.for_node("celery@reports-1")
    assert t.execution_group == "reports"
    assert not definition.explicit_start and definition.start_in_seconds == 60
    assert definition.build(T0).start_at == T0 + timedelta(seconds=60)


def test_a_calendar_interval_trigger_has_every_field(fmt: str) -> None:
    definition = trigger(full(fmt), "monthly")
    t = definition.trigger
    assert isinstance(t, CalendarIntervalTrigger)
    assert (t.repeat_interval, t.repeat_interval_unit) == (1, IntervalUnit.MONTH)
    assert t.time_zone == "America/New_York"
    assert t.preserve_hour_of_day_across_daylight_savings
    assert t.skip_day_if_hour_does_not_exist
    assert t.misfire_instruction == CronMisfireInstruction.FIRE_ONCE_NOW
    assert t.retry_policy == RetryPolicy.fixed(3, timedelta(seconds=1))
    assert t.preferred_node is PreferredNode.AUTO
    # A start time without an offset is read in the trigger's own time zone.
    expected = datetime(2026, 3, 31, 9, tzinfo=ZoneInfo("America/New_York"))
    assert definition.start_at == expected


def test_an_explicit_retry_policy_and_the_defaults_of_a_cron_trigger(fmt: str) -> None:
    t = trigger(full(fmt), "hourly").trigger
    assert t.retry_policy == RetryPolicy.explicit(
        timedelta(seconds=1), timedelta(seconds=5), max_attempts=4
    )
    assert t.time_zone == "UTC"  # never the machine's zone
    assert t.priority == 5 and t.job_key == JobKey("ping")


def test_a_calendar_name_is_kept(fmt: str) -> None:
    text = {
        "xml": "<job-scheduling-data><schedule><trigger><cron><name>t</name>"
        "<job-name>j</job-name><calendar-name>holidays</calendar-name>"
        "<cron-expression>0 0 2 * * ?</cron-expression></cron></trigger></schedule>"
        "</job-scheduling-data>",
        "json": '{"Triggers": [{"Name": "t", "JobName": "j", "CalendarName": "holidays",'
        ' "Cron": {"Expression": "0 0 2 * * ?"}}]}',
        "yaml": "Triggers:\n- {Name: t, JobName: j, CalendarName: holidays,"
        " Cron: {Expression: '0 0 2 * * ?'}}\n",
    }[fmt]
    assert parse(text, fmt).triggers[0].trigger.calendar_name == "holidays"


def test_json_reads_the_quartz_schedule_section_of_appsettings() -> None:
    text = '{"Logging": {}, "Quartz": {"Schedule": ' + FULL_JSON + "}}"
    assert describe(parse(text, "json", "appsettings")) == describe(parse(FULL_JSON, "json"))


def test_yaml_reads_a_quartz_schedule_section_too() -> None:
    text = "Quartz:\n  Schedule:\n" + "".join(f"    {line}\n" for line in FULL_YAML.splitlines())
    assert describe(parse(text, "yaml")) == describe(parse(FULL_YAML, "yaml"))


def test_the_java_namespace_and_no_namespace_are_read_too() -> None:
    java = FULL_XML.replace(
        "http://quartznet.sourceforge.net/JobSchedulingData",
        "http://www.quartz-scheduler.org/xml/JobSchedulingData",
    )
    bare = FULL_XML.replace(' xmlns="http://quartznet.sourceforge.net/JobSchedulingData"', "")
    assert describe(parse(java, "xml")) == describe(parse(FULL_XML, "xml"))
    assert describe(parse(bare, "xml")) == describe(parse(FULL_XML, "xml"))


def test_several_schedule_elements_are_read_in_order() -> None:
    text = (
        "<job-scheduling-data>"
        "<schedule><job><name>a</name><job-type>t</job-type></job></schedule>"
        "<schedule><job><name>b</name><job-type>t</job-type></job></schedule>"
        "</job-scheduling-data>"
    )
    assert [d.job.key.name for d in parse(text, "xml").jobs] == ["a", "b"]


def test_the_format_is_detected_from_the_content_without_an_extension() -> None:
    for text in FULL.values():
        data = parse_scheduling_data(text, "schedule")
        assert len(data.triggers) == 4


# -- errors: each names the file, the line (or JSON path) and the object ------------------------


def error_of(text: str, fmt: str, name: str = "quartz_jobs") -> SchedulingFileError:
    with pytest.raises(SchedulingFileError) as caught:
        parse(text, fmt, name)
    return caught.value


def xml_trigger(*inner: str, kind: str = "cron") -> str:
    body = "\n".join(inner)
    return (
        "<job-scheduling-data>\n<schedule>\n<trigger>\n"
        f"<{kind}>\n<name>nightly</name>\n<job-name>report</job-name>\n{body}\n</{kind}>\n"
        "</trigger>\n</schedule>\n</job-scheduling-data>\n"
    )


@pytest.mark.parametrize(
    ("inner", "line", "fragment"),
    [
        (["<bogus>1</bogus>"], 7, "unknown element <bogus>"),
        (
            ["<cron-expression>0 0 2 * * ?</cron-expression>", "<priority>3</priority>"],
            8,
            "out of place",
        ),
        (["<cron-expression>0 0 25 * * ?</cron-expression>"], 7, "hour"),
        (
            [
                "<preferred-node>_</preferred-node>",
                "<cron-expression>* * * * * ?</cron-expression>",
            ],
            7,
            "reserved",
        ),
        (
            [
                "<misfire-instruction>FireNow</misfire-instruction>",
                "<cron-expression>* * * * * ?</cron-expression>",
            ],
            7,
            "FireNow",
        ),
        (
            [
                "<start-time>2026-03-02T10:00:00Z</start-time>",
                "<start-time-seconds-in-future>5</start-time-seconds-in-future>",
                "<cron-expression>* * * * * ?</cron-expression>",
            ],
            8,
            "not both",
        ),
        (
            ["<end-time>yesterday</end-time>", "<cron-expression>* * * * * ?</cron-expression>"],
            7,
            "ISO 8601",
        ),
        (
            [
                "<start-time-seconds-in-future>1099511627776</start-time-seconds-in-future>",
                "<cron-expression>* * * * * ?</cron-expression>",
            ],
            7,
            "hundred years",
        ),
        (
            [
                "<start-time>9999-12-31T23:59:59Z</start-time>",
                "<cron-expression>* * * * * ?</cron-expression>",
            ],
            7,
            "outside the years 1970 to 2299",
        ),
        (
            ["<cron-expression>* * * * * ?</cron-expression>", "<time-zone>Mars/Base</time-zone>"],
            8,
            "Mars/Base",
        ),
        (
            [
                "<retry-policy><fixed><max-attempts>0</max-attempts><delay>5</delay></fixed>"
                "</retry-policy>",
                "<cron-expression>* * * * * ?</cron-expression>",
            ],
            7,
            "max-attempts",
        ),
    ],
)
def test_an_xml_trigger_error_names_file_line_and_trigger(
    inner: list[str], line: int, fragment: str
) -> None:
    error = error_of(xml_trigger(*inner), "xml")
    message = str(error)
    assert message.startswith(f"quartz_jobs.xml:{line}: "), message
    assert "trigger DEFAULT.nightly" in message
    assert fragment in message
    assert (error.file, error.line) == ("quartz_jobs.xml", line)


def test_a_reserved_node_name_is_refused_in_every_format() -> None:
    texts = {
        "xml": xml_trigger(
            "<preferred-node>_</preferred-node>", "<cron-expression>* * * * * ?</cron-expression>"
        ),
        "json": '{"Triggers": [{"Name": "nightly", "JobName": "report", "PreferredNode": "_",'
        ' "Cron": {"Expression": "* * * * * ?"}}]}',
        "yaml": "Triggers:\n- Name: nightly\n  JobName: report\n  PreferredNode: _\n"
        "  Cron: {Expression: '* * * * * ?'}\n",
    }
    for fmt, text in texts.items():
        message = str(error_of(text, fmt))
        assert "trigger DEFAULT.nightly" in message and "reserved" in message, message


def test_a_job_error_names_the_job_and_its_line() -> None:
    text = (
        "<job-scheduling-data>\n<schedule>\n<job>\n<name>report</name>\n"
        "<group>nightly</group>\n<durable>true</durable>\n</job>\n</schedule>\n"
        "</job-scheduling-data>\n"
    )
    message = str(error_of(text, "xml"))
    assert message.startswith("quartz_jobs.xml:3: job nightly.report: job-type is required")


def test_job_data_that_is_too_large_names_the_job() -> None:
    text = '{"Jobs": [{"Name": "big", "JobType": "t", "Durable": true, "JobDataMap": {"x": "'
    text += "a" * 70_000 + '"}}]}'
    message = str(error_of(text, "json"))
    assert "quartz_jobs.json at $.Jobs[0]" in message and "job DEFAULT.big" in message


def test_a_job_or_trigger_defined_twice_is_read_twice_for_the_directives_to_decide(
    fmt: str,
) -> None:
    texts = {
        "xml": "<job-scheduling-data><schedule>"
        + "<job><name>a</name><job-type>t</job-type></job>" * 2
        + "<trigger><cron><name>t</name><job-name>a</job-name>"
        "<cron-expression>0 0 2 * * ?</cron-expression></cron></trigger>"
        * 2
        + "</schedule></job-scheduling-data>",
        "json": '{"Jobs": [{"Name": "a", "JobType": "t"}, {"Name": "a", "JobType": "t"}],'
        ' "Triggers": [{"Name": "t", "JobName": "a", "Cron": {"Expression": "0 0 2 * * ?"}},'
        ' {"Name": "t", "JobName": "a", "Cron": {"Expression": "0 0 2 * * ?"}}]}',
        "yaml": "Jobs:\n- {Name: a, JobType: t}\n- {Name: a, JobType: t}\nTriggers:\n"
        + "- {Name: t, JobName: a, Cron: {Expression: 0 0 2 * * ?}}\n" * 2,
    }
    data = parse(texts[fmt], fmt)
    assert [d.job.key for d in data.jobs] == [JobKey("a")] * 2
    assert [d.trigger.key for d in data.triggers] == [TriggerKey("t")] * 2


def test_malformed_xml_names_the_line() -> None:
    message = str(error_of("<job-scheduling-data>\n<schedule>\n</job-scheduling-data>", "xml"))
    assert re.match(r"quartz_jobs\.xml:3: not well-formed XML", message), message


@pytest.mark.parametrize(
    "doctype",
    [
        # external entity (XXE)
        '<!DOCTYPE d [<!ENTITY x SYSTEM "file:///etc/passwd">]>',
        # entity expansion ("billion laughs")
        '<!DOCTYPE d [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>',
        '<!DOCTYPE job-scheduling-data SYSTEM "http://example.com/quartz.dtd">',
    ],
)
def test_a_document_type_declaration_is_refused(doctype: str) -> None:
    text = f'<?xml version="1.0"?>\n{doctype}\n<job-scheduling-data>&x;</job-scheduling-data>'
    message = str(error_of(text, "xml"))
    assert message.startswith("quartz_jobs.xml:2: ") and "DTD" in message, message


def test_an_element_of_another_namespace_is_refused() -> None:
    text = '<job-scheduling-data xmlns="urn:other"/>'
    assert "namespace" in str(error_of(text, "xml"))


def test_invalid_json_names_the_line() -> None:
    message = str(error_of('{\n  "Jobs": [\n    {"Name": }\n  ]\n}', "json"))
    assert message.startswith("quartz_jobs.json:3: not valid JSON"), message


def test_a_json_error_names_the_path_and_the_trigger() -> None:
    text = (
        '{"Triggers": [{"Name": "t", "JobName": "j", "Simple": {"RepeatCount": -2,'
        ' "RepeatInterval": 1000}}]}'
    )
    message = str(error_of(text, "json"))
    assert message.startswith("quartz_jobs.json at $.Triggers[0].Simple.RepeatCount: "), message
    assert "trigger DEFAULT.t" in message


def test_json_duplicate_keys_and_nan_are_refused() -> None:
    assert "given twice" in str(error_of('{"Jobs": [], "Jobs": []}', "json"))
    assert "not valid JSON" in str(error_of('{"Jobs": NaN}', "json"))


def test_a_yaml_error_names_the_line_and_the_trigger() -> None:
    text = "Triggers:\n  - Name: t\n    JobName: j\n    Cron:\n      Expression: 0 0 2 * * ?\n"
    text += "      Bogus: 1\n"
    message = str(error_of(text, "yaml"))
    assert message.startswith("quartz_jobs.yaml:6: trigger DEFAULT.t: Cron: unknown field 'Bogus'")


def test_yaml_syntax_errors_name_the_line() -> None:
    message = str(error_of("Jobs:\n  - Name: a\n    JobType: [t\n", "yaml"))
    assert re.match(r"quartz_jobs\.yaml:\d+: not valid YAML", message), message


def test_yaml_aliases_are_refused() -> None:
    text = "a: &x [1, 2]\nb: *x\n"
    assert "aliases" in str(error_of(text, "yaml"))


def test_yaml_python_tags_are_refused() -> None:
    text = "Jobs:\n- Name: !!python/object/apply:os.system ['true']\n"
    assert "quartz_jobs.yaml:2" in str(error_of(text, "yaml"))


def test_an_unquoted_star_pin_in_yaml_is_an_alias_error_naming_the_line() -> None:
    text = "Triggers:\n- Name: t\n  JobName: j\n  PreferredNode: *\n  Cron: {Expression: x}\n"
    assert str(error_of(text, "yaml")).startswith("quartz_jobs.yaml:4: ")


def test_a_trigger_in_a_group_celery_quartz_keeps_is_refused(fmt: str) -> None:
    texts = {
        "xml": xml_trigger(
            "<group>RETRYING_JOBS</group>".replace("group", "job-group"),
            "<cron-expression>* * * * * ?</cron-expression>",
        ),
        "json": '{"Triggers": [{"Name": "t", "Group": "celery.beat_schedule", "JobName": "j",'
        ' "Cron": {"Expression": "* * * * * ?"}}]}',
        "yaml": "Triggers:\n- {Name: t, JobName: j, JobGroup: RECOVERING_JOBS,"
        " Cron: {Expression: '* * * * * ?'}}\n",
    }
    assert "kept by celery-quartz itself" in str(error_of(texts[fmt], fmt))


def test_a_trigger_needs_exactly_one_schedule(fmt: str) -> None:
    texts = {
        "xml": "<job-scheduling-data><schedule><trigger></trigger></schedule>"
        "</job-scheduling-data>",
        "json": '{"Triggers": [{"Name": "t", "JobName": "j", "Cron": {"Expression": "x"},'
        ' "Simple": {}}]}',
        "yaml": "Triggers:\n- {Name: t, JobName: j}\n",
    }
    message = str(error_of(texts[fmt], fmt))
    assert "exactly one" in message


def test_durations_read_milliseconds_and_time_spans() -> None:
    text = (
        '{"Triggers": [{"Name": "t", "JobName": "j", "Simple": {"RepeatCount": -1,'
        ' "RepeatInterval": "1.02:03:04.5"}}]}'
    )
    t = parse(text, "json").triggers[0].trigger
    assert t.repeat_interval == timedelta(days=1, hours=2, minutes=3, seconds=4.5)


# -- as Quartz.NET reads job_scheduling_data_2_0 -------------------------------------------------


def test_every_pre_processing_commands_element_is_read() -> None:
    text = (
        "<job-scheduling-data>\n"
        "<pre-processing-commands><delete-jobs-in-group>a</delete-jobs-in-group>"
        "<delete-job><name>x</name></delete-job></pre-processing-commands>\n"
        "<processing-directives/>\n"
        "<pre-processing-commands><delete-trigger><name>y</name></delete-trigger>"
        "<delete-jobs-in-group>b</delete-jobs-in-group></pre-processing-commands>\n"
        "</job-scheduling-data>"
    )
    data = parse(text, "xml")
    assert data.delete_job_groups == ["a", "b"]
    assert data.delete_jobs == [JobKey("x")]
    assert data.delete_triggers == [TriggerKey("y")]


@pytest.mark.parametrize("value", [True, False])
def test_the_schedule_relative_to_replaced_trigger_directive_is_read(fmt: str, value: bool) -> None:
    word = "true" if value else "false"
    text = {
        "xml": "<job-scheduling-data><processing-directives>"
        "<overwrite-existing-data>true</overwrite-existing-data>"
        f"<schedule-trigger-relative-to-replaced-trigger>{word}"
        "</schedule-trigger-relative-to-replaced-trigger>"
        "</processing-directives></job-scheduling-data>",
        "json": '{"ProcessingDirectives": {"ScheduleTriggerRelativeToReplacedTrigger": '
        + word
        + "}}",
        "yaml": f"ProcessingDirectives:\n  ScheduleTriggerRelativeToReplacedTrigger: {word}\n",
    }[fmt]
    assert parse(text, fmt).schedule_trigger_relative_to_replaced_trigger is value
    assert not parse(bare_document(fmt), fmt).schedule_trigger_relative_to_replaced_trigger


def bare_document(fmt: str) -> str:
    return {"xml": "<job-scheduling-data/>", "json": "{}", "yaml": "Jobs: []"}[fmt]


def xml_job_data(*values: str) -> str:
    entries = "".join(
        f"<entry><key>k{i}</key><value>{value}</value></entry>" for i, value in enumerate(values)
    )
    return (
        "<job-scheduling-data><schedule><job><name>a</name><job-type>t</job-type>"
        f"<durable>true</durable><recover>false</recover><job-data-map>{entries}</job-data-map>"
        "</job></schedule></job-scheduling-data>"
    )


def test_an_empty_job_data_value_is_null_as_in_quartz() -> None:
    job = parse(xml_job_data("", "  \n "), "xml").jobs[0].job
    assert job.data == {"k0": None, "k1": None}


def test_a_job_data_value_is_trimmed_as_in_quartz() -> None:
    job = parse(xml_job_data("  ops@example.com\n"), "xml").jobs[0].job
    assert job.data == {"k0": "ops@example.com"}


BROKEN = {
    "xml": """\
<job-scheduling-data>
  <schedule>
    <job><name>a</name><durable>maybe</durable></job>
    <trigger><cron><name>t1</name><job-name>a</job-name>
      <cron-expression>0 0 25 * * ?</cron-expression></cron></trigger>
    <trigger><simple><name>t2</name><job-name>a</job-name>
      <repeat-count>-2</repeat-count><repeat-interval>1000</repeat-interval></simple></trigger>
  </schedule>
</job-scheduling-data>
""",
    "json": """\
{"Jobs": [{"Name": "a", "Durable": "maybe"}],
 "Triggers": [
  {"Name": "t1", "JobName": "a", "Cron": {"Expression": "0 0 25 * * ?"}},
  {"Name": "t2", "JobName": "a", "Simple": {"RepeatCount": -2, "RepeatInterval": 1000}}]}
""",
    "yaml": """\
Jobs:
  - {Name: a, Durable: maybe}
Triggers:
  - {Name: t1, JobName: a, Cron: {Expression: 0 0 25 * * ?}}
  - {Name: t2, JobName: a, Simple: {RepeatCount: -2, RepeatInterval: 1000}}
""",
}


def test_every_error_in_a_file_is_reported(fmt: str) -> None:
    error = error_of(BROKEN[fmt], fmt)
    messages = [str(each) for each in error.errors]
    assert len(messages) == 4, messages
    assert str(error).startswith(f"4 errors in quartz_jobs.{fmt}\n")
    assert str(error).splitlines()[1:] == messages
    expected = [
        ("job DEFAULT.a", "must be true or false"),
        ("job DEFAULT.a", "job-type is required" if fmt == "xml" else "JobType is required"),
        ("trigger DEFAULT.t1", "hour"),
        ("trigger DEFAULT.t2", "at least -1"),
    ]
    for owner, fragment in expected:
        assert any(owner in m and fragment in m for m in messages), (owner, fragment, messages)
    assert all(m.startswith(f"quartz_jobs.{fmt}") for m in messages)


def test_every_element_at_fault_in_an_xml_file_is_reported() -> None:
    text = (
        "<job-scheduling-data>\n<schedule>\n"
        "<job><name>a</name><job-type>t</job-type><bogus/></job>\n"
        "<trigger><cron><name>t</name><cron-expression>* * * * * ?</cron-expression>"
        "<job-name>a</job-name></cron></trigger>\n"
        "<calendar/>\n"
        "</schedule>\n"
        "<processing-directives><ignore-duplicates>x</ignore-duplicates></processing-directives>\n"
        "</job-scheduling-data>"
    )
    lines = [each.line for each in error_of(text, "xml").errors]
    assert sorted(lines) == [3, 4, 5, 7], str(error_of(text, "xml"))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "<job-scheduling-data><schedule><job><name>a</name></job></schedule>"
            "</job-scheduling-data>",
            "job DEFAULT.a: job-type is required",
        ),
        (
            "<job-scheduling-data><pre-processing-commands><delete-job><group>g</group>"
            "</delete-job></pre-processing-commands></job-scheduling-data>",
            "delete-job: name is required",
        ),
        (
            "<job-scheduling-data><processing-directives><overwrite-existing-data>yes"
            "</overwrite-existing-data></processing-directives></job-scheduling-data>",
            "processing-directives: overwrite-existing-data must be true or false",
        ),
        (
            xml_trigger(
                "<start-time>2026-03-02T10:00:00Z</start-time>",
                "<start-time-seconds-in-future>5</start-time-seconds-in-future>",
                "<cron-expression>* * * * * ?</cron-expression>",
            ),
            "give start-time or start-time-seconds-in-future, not both",
        ),
        (
            xml_trigger(
                "<priority>high</priority>", "<cron-expression>* * * * * ?</cron-expression>"
            ),
            "trigger DEFAULT.nightly: priority must be a whole number",
        ),
        (
            xml_trigger(
                "<misfire-instruction>FireNow</misfire-instruction>",
                "<cron-expression>* * * * * ?</cron-expression>",
            ),
            "is not one of a cron trigger's",
        ),
    ],
)
def test_an_xml_error_names_the_element_as_the_file_spells_it(text: str, message: str) -> None:
    assert message in str(error_of(text, "xml"))


def test_a_json_error_names_the_json_key() -> None:
    text = '{"PreProcessingCommands": {"DeleteJob": [{"Group": "g"}]}}'
    assert "DeleteJob: Name is required" in str(error_of(text, "json"))
