"""The new cron syntax (H, L lists, LW-n, clamped nW) and RRULE text: every input parses or raises
our own error, and a parsed one answers its time questions in bounded time.

A short run of the generators ``bench/fuzz_time.py`` drives for millions of inputs.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from celery_quartz.cron import CronExpression, CronFormat
from celery_quartz.errors import InvalidTriggerError, QuartzError
from celery_quartz.triggers import RecurrenceTrigger
from celery_quartz.triggers.recurrence import MAX_COUNT

UTC = timezone.utc
#: Seconds one input may take, parse and questions together (generous for a loaded machine).
BOUND = 5.0
ZONES = st.sampled_from(["UTC", "Europe/Berlin", "Australia/Lord_Howe", "America/Santiago"])
INSTANTS = st.datetimes(
    min_value=datetime(1990, 1, 1), max_value=datetime(2150, 1, 1), timezones=st.just(UTC)
)

_CRON_ATOMS = st.sampled_from(
    [*"0123456789", "H", "H(", ")", "H/", "(", "-", "/", ",", "L", "LW", "L-", "W", "W-", "?",
     "*", "#", "MON", "THU", "JAN", "31W", "LW-2", "L-1", "6,15,L", "H(0-29)", "H/15"]
)  # fmt: skip
_FIELD = st.lists(_CRON_ATOMS, min_size=1, max_size=4).map("".join)
_CRON = st.lists(_FIELD, min_size=5, max_size=7).map(" ".join)

_RRULE_PART = st.one_of(
    st.sampled_from(["FREQ=DAILY", "FREQ=WEEKLY", "FREQ=MONTHLY", "FREQ=YEARLY", "FREQ=HOURLY",
                     "FREQ=MINUTELY", "FREQ=SECONDLY", "X-FOO=bar", "COUNT=3", "INTERVAL=2",
                     "UNTIL=20300101T000000Z", "WKST=SU"]),
    st.tuples(
        st.sampled_from(["BYDAY", "BYMONTHDAY", "BYMONTH", "BYYEARDAY", "BYWEEKNO", "BYSETPOS",
                         "BYHOUR", "BYMINUTE", "BYSECOND", "COUNT", "INTERVAL", "UNTIL", "WKST"]),
        st.sampled_from(["0", "1", "-1", "13", "31", "54", "366", "367", "MO", "54MO", "-5FR",
                         "+2TU", "1,15,-1", "2", "60", "", "x", "20300101"]),
    ).map("=".join),
)  # fmt: skip
_RRULE = st.lists(_RRULE_PART, min_size=1, max_size=5).map(";".join)


def _cron_questions(text: str, form: CronFormat, zone: str, at: datetime) -> None:
    began = time.perf_counter()
    try:
        cron = CronExpression(text, time_zone=zone, format=form, hash_key="DEFAULT.fuzz")
    except QuartzError:
        return
    following = cron.next_valid_time_after(at)
    assert following is None or (following > at and cron.is_satisfied_by(following))
    before = cron.time_before(at)
    assert before is None or before < at
    assert time.perf_counter() - began < BOUND, text


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_CRON, zone=ZONES, at=INSTANTS)
def test_new_cron_syntax_parses_or_raises_our_error(text: str, zone: str, at: datetime) -> None:
    _cron_questions(text, CronFormat.QUARTZ, zone, at)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_CRON, zone=ZONES, at=INSTANTS)
def test_new_cron_syntax_in_unix_form_parses_or_raises_our_error(
    text: str, zone: str, at: datetime
) -> None:
    _cron_questions(text, CronFormat.UNIX, zone, at)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_RRULE, zone=ZONES, at=INSTANTS)
def test_rrule_text_parses_or_raises_our_error(text: str, zone: str, at: datetime) -> None:
    began = time.perf_counter()
    try:
        trigger = RecurrenceTrigger(rule=text, start_at=at - timedelta(days=400), time_zone=zone)
        trigger.validate()
        following = trigger.next_fire_time_after(at)
        assert following is None or following > at
        trigger.final_fire_time()
    except QuartzError:
        pass
    assert time.perf_counter() - began < BOUND, text


def test_the_final_fire_time_of_a_long_until_bounded_rule_is_found_without_walking_it() -> None:
    # Found by the suite's fuzz test: a MINUTELY rule with an UNTIL four years away took a minute.
    at = datetime(2026, 6, 1, tzinfo=timezone.utc)
    trigger = RecurrenceTrigger(
        rule="WKST=SU;FREQ=MINUTELY;UNTIL=20300101T000000Z",
        start_at=at - timedelta(days=400),
        time_zone="Europe/Berlin",
    )
    began = time.perf_counter()
    assert trigger.final_fire_time() == datetime(2030, 1, 1, tzinfo=timezone.utc)
    assert time.perf_counter() - began < BOUND


def test_a_count_too_large_to_walk_is_refused_and_the_largest_allowed_answers_quickly() -> None:
    # Found by the suite's fuzz test: COUNT=20300101;FREQ=SECONDLY took minutes to answer.
    at = datetime(2026, 6, 1, tzinfo=timezone.utc)
    start = at - timedelta(days=400)
    with pytest.raises(InvalidTriggerError, match="COUNT 20300101 is more than 100,000"):
        RecurrenceTrigger(rule="COUNT=20300101;FREQ=SECONDLY", start_at=start).validate()
    trigger = RecurrenceTrigger(rule=f"COUNT={MAX_COUNT};FREQ=SECONDLY", start_at=start)
    began = time.perf_counter()
    trigger.validate()
    assert trigger.next_fire_time_after(at) is None
    assert trigger.final_fire_time() == start + timedelta(seconds=MAX_COUNT - 1)
    assert time.perf_counter() - began < BOUND
