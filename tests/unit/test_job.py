"""A job's own checks: a registered-task name and strict, bounded JSON (never pickle)."""

from __future__ import annotations

import re

import pytest

from celery_quartz.errors import JobDataError, ValidationError
from celery_quartz.job import Job, encode_json, encode_json_object
from celery_quartz.keys import JobKey

KEY = JobKey("report", "nightly")


def test_a_job_of_json_values_is_valid() -> None:
    Job(
        key=KEY,
        task="tasks.report",
        args=[1, 2.5, "three", None, True, [4], {"five": 5}],
        kwargs={"k": {"nested": [1, {"deep": None}]}},
        data={"count": 0},
        options={"queue": "reports", "priority": 3},
    ).validate()


def test_the_task_must_be_named() -> None:
    with pytest.raises(ValidationError, match=re.escape("job nightly.report: task must be")):
        Job(key=KEY, task="").validate()


def test_the_key_must_be_a_job_key() -> None:
    with pytest.raises(ValidationError, match=re.escape("job key must be a JobKey, got 'report'")):
        Job(key="report", task="tasks.report").validate()  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"a": (1, 2)}, "job nightly.report: data has a tuple value (1, 2); only JSON types"),
        ({"a": {"b": b"raw"}}, "job nightly.report: data is not JSON"),
        ({"a": [float("-inf")]}, "job nightly.report: data is not JSON"),
        ({"a": {3: "c"}}, "job nightly.report: data has a non-string key 3"),
        ({"a": object()}, "job nightly.report: data is not JSON"),
    ],
    ids=["tuple", "bytes", "minus-infinity", "nested-int-key", "object"],
)
def test_data_that_would_not_read_back_as_written_is_refused(value: dict, message: str) -> None:
    with pytest.raises(JobDataError, match=re.escape(message)):
        Job(key=KEY, task="tasks.report", data=value).validate()


def test_json_is_encoded_compactly_with_sorted_keys() -> None:
    assert encode_json_object("job x", "data", {"b": 1, "a": [1, 2]}, 100) == '{"a":[1,2],"b":1}'


def test_the_bound_counts_the_encoded_bytes_with_non_ascii_escaped() -> None:
    assert encode_json("job x", "data", "é", 8) == '"\\u00e9"'
    with pytest.raises(JobDataError, match=re.escape("job x: data is 14 bytes encoded")):
        encode_json("job x", "data", "éé", 13)


@pytest.mark.parametrize("expires", [30, 1.5, "2027-01-01T00:00:00+00:00"])
def test_a_job_may_give_its_messages_an_expiry(expires: object) -> None:
    Job(key=JobKey("j"), task="t", options={"expires": expires}).validate()


@pytest.mark.parametrize("expires", [-1, "tomorrow", "2027-01-01T00:00:00", True])
def test_an_expiry_that_is_neither_seconds_nor_an_aware_instant_is_refused(expires: object) -> None:
    with pytest.raises(ValidationError, match="options expires"):
        Job(key=JobKey("j"), task="t", options={"expires": expires}).validate()


def test_a_description_longer_than_the_store_holds_is_refused_naming_the_job() -> None:
    Job(key=KEY, task="tasks.report", description="d" * 250).validate()
    with pytest.raises(
        ValidationError,
        match=re.escape("job nightly.report: description is 251 characters; at most 250"),
    ):
        Job(key=KEY, task="tasks.report", description="d" * 251).validate()


def test_a_task_name_longer_than_the_store_holds_is_refused_naming_the_job() -> None:
    # SQLite would keep it; PostgreSQL would fail the whole transaction without naming the job.
    Job(key=KEY, task="t" * 255).validate()
    with pytest.raises(
        ValidationError,
        match=re.escape("job nightly.report: task name is 256 characters; at most 255"),
    ):
        Job(key=KEY, task="t" * 256).validate()
