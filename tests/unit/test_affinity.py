"""Node affinity (issue 5): the preferred node of a trigger, its storage, the auto-pin claim at a
worker's start, its reset when the worker is confirmed dead, and re-pinning in place."""

from __future__ import annotations

import re

import pytest

from celery_quartz import PreferredNode
from celery_quartz.errors import ValidationError

W1, W2 = "celery@w1", "celery@w2"


# -- the value ---------------------------------------------------------------------------------


def test_none_is_unpinned() -> None:
    pin = PreferredNode.NONE
    assert (pin.node, pin.is_automatic, pin.is_none) == (None, False, True)


def test_auto_is_an_unclaimed_automatic_pin() -> None:
    pin = PreferredNode.AUTO
    assert (pin.node, pin.is_automatic, pin.is_none) == (None, True, False)


def test_a_named_pin_answers_its_node_and_is_not_automatic() -> None:
    pin = PreferredNode.for_node(W1)
    assert (pin.node, pin.is_automatic, pin.is_none) == (W1, False, False)


def test_a_claimed_auto_pin_answers_the_claiming_worker_and_stays_automatic() -> None:
    pin = PreferredNode.AUTO.claimed_by(W1)
    assert (pin.node, pin.is_automatic, pin.is_none) == (W1, True, False)
    assert pin != PreferredNode.for_node(W1)


def test_only_an_automatic_pin_is_claimed() -> None:
    with pytest.raises(ValidationError, match=re.escape("PreferredNode.for_node('celery@w1')")):
        PreferredNode.for_node(W1).claimed_by(W2)


@pytest.mark.parametrize("name", ["*-west", "auto:thing", "_x", "**", "x" * 255])
def test_names_that_only_look_like_markers_are_accepted_verbatim(name: str) -> None:
    assert PreferredNode.for_node(name).node == name


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("*", "preferred node '*' is reserved"),
        ("_", "preferred node '_' is reserved"),
        ("", "preferred node '': the node name is empty"),
        (None, "preferred node None"),
        (7, "preferred node 7: a node name is a string"),
        ("n" * 256, "is 256 characters; at most 255"),
    ],
)
def test_for_node_refuses_markers_empty_non_strings_and_long_names(
    name: object, message: str
) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        PreferredNode.for_node(name)  # type: ignore[arg-type]


def test_the_constructor_refuses_what_for_node_refuses() -> None:
    with pytest.raises(ValidationError, match="reserved"):
        PreferredNode("*", True)


def test_pins_are_equal_by_value_and_hashable() -> None:
    assert PreferredNode.for_node(W1) == PreferredNode.for_node(W1)
    assert PreferredNode.for_node(W1) != PreferredNode.for_node(W2)
    assert PreferredNode.AUTO != PreferredNode.NONE
    assert len({PreferredNode.for_node(W1), PreferredNode.for_node(W1), PreferredNode.AUTO}) == 2


def test_a_pin_is_immutable() -> None:
    pin = PreferredNode.for_node(W1)
    with pytest.raises(AttributeError):
        pin.node = W2  # type: ignore[misc]


def test_repr_reads_as_the_code_that_builds_it() -> None:
    assert repr(PreferredNode.NONE) == "PreferredNode.NONE"
    assert repr(PreferredNode.AUTO) == "PreferredNode.AUTO"
    assert repr(PreferredNode.AUTO.claimed_by(W1)) == "PreferredNode.AUTO.claimed_by('celery@w1')"
    assert repr(PreferredNode.for_node(W1)) == "PreferredNode.for_node('celery@w1')"


@pytest.mark.parametrize(
    ("text", "pin"),
    [
        ("*", PreferredNode.AUTO),
        (None, PreferredNode.NONE),
        ("", PreferredNode.NONE),
        (W1, PreferredNode.for_node(W1)),
        ("*-west", PreferredNode.for_node("*-west")),
    ],
)
def test_parse_reads_the_file_spelling(text: str | None, pin: PreferredNode) -> None:
    assert PreferredNode.parse(text) == pin


def test_parse_refuses_a_reserved_name_naming_the_owner() -> None:
    with pytest.raises(
        ValidationError, match=re.escape("trigger DEFAULT.nightly: preferred node '_'")
    ):
        PreferredNode.parse("_", owner="trigger DEFAULT.nightly")


@pytest.mark.parametrize(
    ("pin", "columns"),
    [
        (PreferredNode.NONE, (None, False)),
        (PreferredNode.AUTO, (None, True)),
        (PreferredNode.AUTO.claimed_by(W1), (W1, True)),
        (PreferredNode.for_node(W1), (W1, False)),
    ],
)
def test_the_storage_form_has_no_marker_and_round_trips(
    pin: PreferredNode, columns: tuple[str | None, bool]
) -> None:
    assert pin.to_columns() == columns
    assert PreferredNode.from_columns(*columns) == pin


def test_unpinned_and_unclaimed_rows_read_back_as_the_singletons() -> None:
    assert PreferredNode.from_columns(None, False) is PreferredNode.NONE
    assert PreferredNode.from_columns(None, True) is PreferredNode.AUTO
