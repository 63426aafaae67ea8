"""A short fuzz campaign of each parser a user's input reaches (the long one is
``python -m tests.fuzz``): every input parses or raises one of our own errors, quickly."""

from __future__ import annotations

import pytest

from tests.fuzz.targets import TARGETS, run


@pytest.mark.parametrize("target", TARGETS)
def test_every_input_parses_or_is_refused_with_our_own_error(target: str) -> None:
    result = run(target, 3000, seed=7)
    assert result.failures == []
    assert result.inputs == 3000
    assert result.parsed > 0 and result.refused > 0  # both paths were reached
