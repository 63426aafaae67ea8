"""Quartz 4.x daylight-saving rules for cron expressions (seed 004, "The two daylight saving
rules").

Berlin 2026: clocks go 02:00 CET -> 03:00 CEST at 01:00 UTC on 29 March, and 03:00 CEST ->
02:00 CET at 01:00 UTC on 25 October. Lord Howe 2026: 02:00 -> 02:30 (+10:30 -> +11) at 15:30 UTC
on 3 October, and 02:00 -> 01:30 (+11 -> +10:30) at 15:00 UTC on 4 April.
"""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta, timezone

from celery_quartz.cron import CronExpression
from tests.unit.conftest import utc

UTC = timezone.utc


def fires_between(expression: str, zone: str, start: datetime, end: datetime) -> list[datetime]:
    cron = CronExpression(expression, time_zone=zone)
    out: list[datetime] = []
    t: datetime | None = start
    while True:
        assert t is not None
        t = cron.next_valid_time_after(t)
        if t is None or t >= end:
            return out
        out.append(t)


# -- spring forward: a time the clock skips fires at the end of the gap ------------------------


def test_fixed_time_in_the_gap_fires_at_the_gap_end() -> None:
    times = fires_between("0 30 2 * * ?", "Europe/Berlin", utc(2026, 3, 28), utc(2026, 3, 31))
    assert times == [
        utc(2026, 3, 28, 1, 30),  # 02:30 CET
        utc(2026, 3, 29, 1, 0),  # 03:00 CEST: the instant the clocks moved
        utc(2026, 3, 30, 0, 30),  # 02:30 CEST
    ]


def test_the_gap_end_fire_satisfies_the_expression() -> None:
    assert CronExpression("0 30 2 * * ?", time_zone="Europe/Berlin").is_satisfied_by(
        utc(2026, 3, 29, 1, 0)
    )


def test_the_3x_delta_shifted_time_does_not_satisfy_the_expression() -> None:
    # 03:30 CEST is where Quartz 3.x fired; 4.x does not match it.
    assert not CronExpression("0 30 2 * * ?", time_zone="Europe/Berlin").is_satisfied_by(
        utc(2026, 3, 29, 1, 30)
    )


def test_half_hour_zone_gap_fires_at_its_end() -> None:
    # Lord Howe: 0 15 2 * * ? reads 02:30 on the spring-forward day (3.x: 02:45).
    times = fires_between("0 15 2 * * ?", "Australia/Lord_Howe", utc(2026, 10, 2), utc(2026, 10, 5))
    assert times == [
        utc(2026, 10, 2, 15, 45),  # 02:15 +10:30
        utc(2026, 10, 3, 15, 30),  # 02:30 +11: the gap end
        utc(2026, 10, 4, 15, 15),  # 02:15 +11
    ]


def test_half_hour_zone_gap_end_satisfies_the_expression() -> None:
    cron = CronExpression("0 15 2 * * ?", time_zone="Australia/Lord_Howe")
    assert cron.is_satisfied_by(utc(2026, 10, 3, 15, 30))
    assert not cron.is_satisfied_by(utc(2026, 10, 3, 15, 45))


def test_interval_expression_gets_an_extra_fire_at_the_gap_end() -> None:
    # 4.x runs 0 30 * * * ? at 03:00 for the swallowed 02:30 and again at 03:30.
    times = fires_between("0 30 * * * ?", "Europe/Berlin", utc(2026, 3, 29, 0), utc(2026, 3, 29, 3))
    assert times == [
        utc(2026, 3, 29, 0, 30),  # 01:30 CET
        utc(2026, 3, 29, 1, 0),  # 03:00 CEST, for 02:30
        utc(2026, 3, 29, 1, 30),  # 03:30 CEST
        utc(2026, 3, 29, 2, 30),  # 04:30 CEST
    ]


def test_every_minute_through_the_gap_fires_once_at_its_end() -> None:
    times = fires_between(
        "0 * * * * ?", "Europe/Berlin", utc(2026, 3, 29, 0, 58), utc(2026, 3, 29, 1, 2)
    )
    assert times == [utc(2026, 3, 29, 0, 59), utc(2026, 3, 29, 1, 0), utc(2026, 3, 29, 1, 1)]


def test_new_york_gap() -> None:
    times = fires_between("0 30 2 * * ?", "America/New_York", utc(2026, 3, 8), utc(2026, 3, 10))
    assert times == [utc(2026, 3, 8, 7, 0), utc(2026, 3, 9, 6, 30)]


# -- fall back: a repeated time fires once, at the first pass -----------------------------------


def test_fixed_time_repeated_by_fall_back_fires_at_the_first_pass_only() -> None:
    times = fires_between("0 30 2 * * ?", "Europe/Berlin", utc(2026, 10, 24), utc(2026, 10, 27))
    assert times == [
        utc(2026, 10, 24, 0, 30),  # 02:30 CEST
        utc(2026, 10, 25, 0, 30),  # 02:30 CEST, first pass; not 01:30 UTC (02:30 CET)
        utc(2026, 10, 26, 1, 30),  # 02:30 CET
    ]


def test_fixed_time_second_pass_is_not_satisfied() -> None:
    cron = CronExpression("0 30 2 * * ?", time_zone="Europe/Berlin")
    assert cron.is_satisfied_by(utc(2026, 10, 25, 0, 30))
    assert not cron.is_satisfied_by(utc(2026, 10, 25, 1, 30))


def test_comma_list_of_fixed_times_fires_at_the_first_pass_only() -> None:
    times = fires_between(
        "0 0,30 2 * * ?", "Europe/Berlin", utc(2026, 10, 24, 12), utc(2026, 10, 25, 12)
    )
    assert times == [utc(2026, 10, 25, 0, 0), utc(2026, 10, 25, 0, 30)]


def test_searching_from_inside_the_second_pass_skips_a_fixed_time_to_the_next_day() -> None:
    cron = CronExpression("0 45 2 * * ?", time_zone="Europe/Berlin")
    # 01:15 UTC is 02:15 CET, the second pass; 02:45 already fired at its first pass.
    assert cron.next_valid_time_after(utc(2026, 10, 25, 1, 15)) == utc(2026, 10, 26, 1, 45)


def test_interval_expression_fires_through_both_passes() -> None:
    times = fires_between(
        "0 0/30 * * * ?", "Europe/Berlin", utc(2026, 10, 24, 23, 45), utc(2026, 10, 25, 2, 15)
    )
    assert times == [
        utc(2026, 10, 25, 0, 0),  # 02:00 CEST
        utc(2026, 10, 25, 0, 30),  # 02:30 CEST
        utc(2026, 10, 25, 1, 0),  # 02:00 CET
        utc(2026, 10, 25, 1, 30),  # 02:30 CET
        utc(2026, 10, 25, 2, 0),  # 03:00 CET
    ]


def test_every_minute_fires_every_minute_of_a_25_hour_day() -> None:
    # The local day 25 October in Berlin runs from 22:00 UTC on the 24th to 23:00 UTC on the 25th.
    times = fires_between(
        "0 * * * * ?",
        "Europe/Berlin",
        utc(2026, 10, 24, 22) - timedelta(seconds=1),
        utc(2026, 10, 25, 23),
    )
    assert len(times) == 25 * 60
    assert all(b - a == timedelta(minutes=1) for a, b in itertools.pairwise(times))


def test_hour_range_is_an_interval_expression_over_the_repeated_hour() -> None:
    times = fires_between(
        "0 0 1-3 * * ?", "Europe/Berlin", utc(2026, 10, 24, 22), utc(2026, 10, 25, 3)
    )
    assert times == [
        utc(2026, 10, 24, 23),  # 01:00 CEST
        utc(2026, 10, 25, 0),  # 02:00 CEST
        utc(2026, 10, 25, 1),  # 02:00 CET
        utc(2026, 10, 25, 2),  # 03:00 CET
    ]


def test_interval_expression_second_pass_satisfies_the_expression() -> None:
    assert CronExpression("0 0/30 * * * ?", time_zone="Europe/Berlin").is_satisfied_by(
        utc(2026, 10, 25, 1, 30)
    )


def test_half_hour_zone_repeated_half_hour_fixed_time() -> None:
    times = fires_between(
        "0 45 1 * * ?", "Australia/Lord_Howe", utc(2026, 4, 4, 12), utc(2026, 4, 5, 12)
    )
    assert times == [utc(2026, 4, 4, 14, 45)]  # 01:45 +11, not 01:45 +10:30 (15:15 UTC)


def test_half_hour_zone_repeated_half_hour_interval_expression() -> None:
    times = fires_between(
        "0 0/15 * * * ?", "Australia/Lord_Howe", utc(2026, 4, 4, 14, 20), utc(2026, 4, 4, 15, 35)
    )
    assert times == [
        utc(2026, 4, 4, 14, 30),  # 01:30 +11
        utc(2026, 4, 4, 14, 45),  # 01:45 +11
        utc(2026, 4, 4, 15, 0),  # 01:30 +10:30
        utc(2026, 4, 4, 15, 15),  # 01:45 +10:30
        utc(2026, 4, 4, 15, 30),  # 02:00 +10:30
    ]


def test_a_fixed_time_expression_is_not_an_interval_one() -> None:
    assert not CronExpression("0 0,30 2 * * ?").is_interval
    assert CronExpression("0 30 * * * ?").is_interval
    assert CronExpression("0 0/30 2 * * ?").is_interval
    assert CronExpression("0 30 1-3 * * ?").is_interval
