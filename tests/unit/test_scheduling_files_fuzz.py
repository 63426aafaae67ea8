"""A short fuzz run of the scheduling-file readers: every input reads or raises one of our own
errors, in bounded time. The long campaign is ``bench/fuzz_files.py N``."""

from __future__ import annotations

import random
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.scheduling_file_fuzz import FORMATS, check, one_case


def test_mutated_and_random_files_read_or_raise_our_own_errors() -> None:
    rng = random.Random(20261130)
    started = time.monotonic()
    outcomes = [check(*one_case(rng)) for _ in range(400)]
    assert time.monotonic() - started < 60
    assert any(outcomes) and not all(outcomes)  # both paths exercised


@settings(max_examples=150, deadline=2000)
@given(text=st.text(max_size=200), fmt=st.sampled_from(FORMATS))
def test_arbitrary_text_reads_or_raises_our_own_errors(text: str, fmt: str) -> None:
    check(text, fmt)
