"""Arbitrary text either parses or raises CronSyntaxError; nothing else escapes."""

from __future__ import annotations

from datetime import datetime, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from celery_quartz.cron import CronExpression, CronFormat
from celery_quartz.errors import CronSyntaxError

UTC = timezone.utc
_TOKENS = st.sampled_from(
    [*"0123456789", "*", "?", "/", "-", ",", "L", "W", "#", "C", "LW", "L-", "JAN", "MON",
     "FRI", "DEC", "SUN", "@", "@daily", "@reboot", "60", "99", "2300", "1970", "\t", " ",
     "\u00b2", "\u0663", "x"]
)  # fmt: skip
_CRONISH = st.lists(st.lists(_TOKENS, min_size=1, max_size=5).map("".join), max_size=8).map(
    " ".join
)


def _exercise(text: str, form: CronFormat) -> None:
    try:
        cron = CronExpression(text, format=form)
    except CronSyntaxError:
        return
    after = datetime(2026, 5, 17, 3, 4, 5, tzinfo=UTC)
    result = cron.next_valid_time_after(after)
    assert result is None or result > after
    CronExpression(cron.expression)  # the canonical spelling parses again


@settings(max_examples=600, deadline=None)
@given(text=st.text(max_size=40))
def test_arbitrary_text_parses_or_raises_cron_syntax_error(text: str) -> None:
    _exercise(text, CronFormat.QUARTZ)


@settings(max_examples=1500, deadline=None)
@given(text=_CRONISH)
def test_cron_like_text_parses_or_raises_cron_syntax_error(text: str) -> None:
    _exercise(text, CronFormat.QUARTZ)


@settings(max_examples=800, deadline=None)
@given(text=_CRONISH)
def test_cron_like_text_in_unix_form_parses_or_raises_cron_syntax_error(text: str) -> None:
    _exercise(text, CronFormat.UNIX)


@settings(max_examples=300, deadline=None)
@given(
    after=st.datetimes(timezones=st.just(UTC)),
    expression=st.sampled_from(["0 0 0 * * ?", "* * * ? * *", "0 30 2 L * ?", "0 0 0 ? * 6#5"]),
    zone=st.sampled_from(["UTC", "Europe/Berlin", "Australia/Lord_Howe"]),
)
def test_any_instant_is_answered_without_error(after: datetime, expression: str, zone: str) -> None:
    cron = CronExpression(expression, time_zone=zone)
    result = cron.next_valid_time_after(after)
    assert result is None or result > after
    assert isinstance(cron.is_satisfied_by(after), bool)
