"""Quartz.NET's ``job_scheduling_data_2_0`` schema, for checking that an XML export is a file
Quartz.NET reads (its XMLSchedulingDataProcessor validates a file against the schema first)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from lxml import etree

XSD = Path(__file__).with_name("job_scheduling_data_2_0.xsd")


@cache
def _schema() -> etree.XMLSchema:
    return etree.XMLSchema(etree.parse(str(XSD)))


def schema_errors(text: str) -> list[str]:
    """What the schema finds wrong with ``text`` (empty: valid)."""
    schema = _schema()
    if schema.validate(etree.fromstring(text.encode("utf-8"))):
        return []
    return [f"line {error.line}: {error.message}" for error in schema.error_log]


def assert_valid_for_quartznet(text: str) -> None:
    errors = schema_errors(text)
    assert not errors, "\n".join(errors) + "\n" + text
