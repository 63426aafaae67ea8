"""CronExpression: the Quartz 4.x dialect, field by field, and the five-field crontab form."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone

import pytest
from croniter import croniter

from celery_quartz.cron import CronExpression, CronFormat
from celery_quartz.errors import CronSyntaxError
from tests.unit.conftest import utc

UTC = timezone.utc


def fires(expression: str, after: datetime, n: int, zone: str = "UTC") -> list[datetime]:
    cron = CronExpression(expression, time_zone=zone)
    out: list[datetime] = []
    for _ in range(n):
        nxt = cron.next_valid_time_after(after)
        if nxt is None:
            break
        out.append(nxt)
        after = nxt
    return out


# -- ordinary fields ---------------------------------------------------------------------------


def test_seconds_come_first() -> None:
    assert fires("30 * * * * ?", utc(2026, 1, 1), 2) == [
        utc(2026, 1, 1, 0, 0, 30),
        utc(2026, 1, 1, 0, 1, 30),
    ]


def test_next_time_is_strictly_after_the_given_instant() -> None:
    assert fires("0 0 12 * * ?", utc(2026, 1, 1, 12), 1) == [utc(2026, 1, 2, 12)]


def test_microseconds_of_the_given_instant_do_not_hide_the_next_second() -> None:
    after = utc(2026, 1, 1, 11, 59, 59) + timedelta(microseconds=999_999)
    assert fires("0 0 12 * * ?", after, 1) == [utc(2026, 1, 1, 12)]


def test_every_second_of_every_fifth_minute_is_not_every_five_minutes() -> None:
    times = fires("* 0/5 * * * ?", utc(2026, 1, 1, 0, 0, 58), 3)
    assert times == [utc(2026, 1, 1, 0, 0, 59), utc(2026, 1, 1, 0, 5, 0), utc(2026, 1, 1, 0, 5, 1)]


def test_every_five_minutes_is_zero_seconds_step_minutes() -> None:
    assert fires("0 0/5 * * * ?", utc(2026, 1, 1, 0, 0, 1), 2) == [
        utc(2026, 1, 1, 0, 5),
        utc(2026, 1, 1, 0, 10),
    ]


def test_step_starting_mid_range_runs_to_the_end_of_the_field() -> None:
    assert fires("0 50/5 * * * ?", utc(2026, 1, 1), 3) == [
        utc(2026, 1, 1, 0, 50),
        utc(2026, 1, 1, 0, 55),
        utc(2026, 1, 1, 1, 50),
    ]


def test_a_range_with_a_step() -> None:
    assert fires("0 0 9-17/4 * * ?", utc(2026, 1, 1), 4) == [
        utc(2026, 1, 1, 9),
        utc(2026, 1, 1, 13),
        utc(2026, 1, 1, 17),
        utc(2026, 1, 2, 9),
    ]


def test_a_range_may_wrap_past_the_end_of_the_field() -> None:
    assert fires("0 0 23-1 * * ?", utc(2026, 1, 1, 2), 3) == [
        utc(2026, 1, 1, 23),
        utc(2026, 1, 2, 0),
        utc(2026, 1, 2, 1),
    ]


def test_month_names_and_lists() -> None:
    assert fires("0 0 0 1 JAN,jul ?", utc(2026, 2, 1), 2) == [utc(2026, 7, 1), utc(2027, 1, 1)]


def test_day_of_week_counts_from_sunday_as_one() -> None:
    assert fires("0 0 0 ? * 1", utc(2026, 1, 1), 1) == [utc(2026, 1, 4)]  # a Sunday


def test_day_names_and_ranges() -> None:
    assert fires("0 0 12 ? * MON-FRI", utc(2026, 1, 2, 13), 1) == [utc(2026, 1, 5, 12)]


def test_a_bare_l_in_day_of_week_is_saturday() -> None:
    assert fires("0 0 0 ? * L", utc(2026, 1, 1), 1) == [utc(2026, 1, 3)]


def test_the_year_field_limits_the_schedule() -> None:
    assert fires("0 0 0 1 1 ? 2027-2028", utc(2026, 1, 1), 3) == [utc(2027, 1, 1), utc(2028, 1, 1)]


def test_an_expression_whose_years_are_past_has_no_next_time() -> None:
    assert CronExpression("0 0 0 1 1 ? 2020").next_valid_time_after(utc(2026, 1, 1)) is None


def test_an_impossible_date_has_no_next_time() -> None:
    assert CronExpression("0 0 0 30 2 ?").next_valid_time_after(utc(2026, 1, 1)) is None


def test_the_leap_day_is_found_years_ahead() -> None:
    assert fires("0 0 0 29 2 ?", utc(2026, 1, 1), 1) == [utc(2028, 2, 29)]


# -- the day specials --------------------------------------------------------------------------


def test_last_day_of_month() -> None:
    assert fires("0 0 0 L * ?", utc(2026, 1, 31), 2) == [utc(2026, 2, 28), utc(2026, 3, 31)]


def test_days_before_the_last_day_of_month() -> None:
    assert fires("0 0 0 L-2 * ?", utc(2026, 2, 1), 2) == [utc(2026, 2, 26), utc(2026, 3, 29)]


def test_nearest_weekday_moves_saturday_back_to_friday() -> None:
    assert fires("0 0 0 14W * ?", utc(2026, 3, 1), 1) == [utc(2026, 3, 13)]  # a Saturday


def test_nearest_weekday_moves_sunday_forward_to_monday() -> None:
    assert fires("0 0 0 15W * ?", utc(2026, 3, 1), 1) == [utc(2026, 3, 16)]


def test_nearest_weekday_does_not_leave_the_month() -> None:
    # 1 February 2026 is a Sunday: 1W is Monday the 2nd; 1 August 2026 is a Saturday: Monday 3rd.
    assert fires("0 0 0 1W * ?", utc(2026, 1, 31), 1) == [utc(2026, 2, 2)]
    assert fires("0 0 0 1W * ?", utc(2026, 7, 31), 1) == [utc(2026, 8, 3)]


def test_nearest_weekday_to_a_day_past_the_month_end_is_clamped_to_the_last_day() -> None:
    # Quartz.NET: 31W in February 2025 is the 28th (a Friday), not 31 March.
    assert fires("0 0 12 31W * ?", utc(2025, 1, 31, 12), 1) == [utc(2025, 2, 28, 12)]


def test_a_clamped_nearest_weekday_does_not_leave_the_month() -> None:
    # 30 November 2025 is a Sunday and the month's last day: the Friday before.
    assert fires("0 0 12 31W,4W * ?", utc(2025, 11, 22), 1) == [utc(2025, 11, 28, 12)]


def test_thirtieth_nearest_weekday_in_february_is_clamped_not_skipped() -> None:
    # 28 February 2026 is a Saturday, so Friday the 27th; 29 February 2028 is a Tuesday.
    assert fires("0 0 0 30W 2 ?", utc(2026, 1, 1), 3) == [
        utc(2026, 2, 27),
        utc(2027, 2, 26),
        utc(2028, 2, 29),
    ]


def test_last_day_in_a_list_of_days() -> None:
    assert fires("0 15 10 6,15,L * ? 2010", utc(2010, 1, 1), 6) == [
        utc(2010, 1, 6, 10, 15),
        utc(2010, 1, 15, 10, 15),
        utc(2010, 1, 31, 10, 15),
        utc(2010, 2, 6, 10, 15),
        utc(2010, 2, 15, 10, 15),
        utc(2010, 2, 28, 10, 15),
    ]


def test_several_offsets_from_the_last_day_in_a_list() -> None:
    assert fires("0 15 10 L-1,L-2 * ? 2010", utc(2010, 2, 1), 4) == [
        utc(2010, 2, 26, 10, 15),
        utc(2010, 2, 27, 10, 15),
        utc(2010, 3, 29, 10, 15),
        utc(2010, 3, 30, 10, 15),
    ]


def test_days_before_the_last_weekday() -> None:
    # Quartz.NET: LW-2 in October 2010 is the 27th (LW is Friday the 29th).
    assert fires("0 15 10 LW-2 * ? 2010", utc(2010, 10, 1), 1) == [utc(2010, 10, 27, 10, 15)]


def test_days_before_the_last_weekday_stop_at_the_first() -> None:
    # LW of February 2026 is Friday the 27th; 30 days before it is clamped to the 1st.
    assert fires("0 0 0 LW-30 2 ? 2026", utc(2026, 1, 1), 1) == [utc(2026, 2, 1)]


def test_a_list_mixing_last_forms_nearest_weekdays_and_days() -> None:
    # March 2026: 1W is Monday the 2nd, 15W Monday the 16th, LW Tuesday the 31st, L-3 the 28th.
    assert fires("0 0 0 1W,10,15W,L-3,LW * ?", utc(2026, 3, 1), 5) == [
        utc(2026, 3, 2),
        utc(2026, 3, 10),
        utc(2026, 3, 16),
        utc(2026, 3, 28),
        utc(2026, 3, 31),
    ]


def test_the_same_day_named_twice_fires_once() -> None:
    # 31 March 2026 is both L and LW.
    assert fires("0 0 0 L,LW 3 ?", utc(2026, 3, 1), 2) == [utc(2026, 3, 31), utc(2027, 3, 31)]


def test_a_list_of_nearest_weekdays() -> None:
    assert fires("0 0 0 1W,15W * ?", utc(2026, 3, 1), 2) == [utc(2026, 3, 2), utc(2026, 3, 16)]


def test_weekday_nearest_a_day_before_the_last() -> None:
    # L-3W, 2026: 25 February is a Wednesday; 28 March a Saturday, so Friday the 27th;
    # 27 April a Monday.
    assert fires("0 0 0 L-3W * ?", utc(2026, 2, 1), 3) == [
        utc(2026, 2, 25),
        utc(2026, 3, 27),
        utc(2026, 4, 27),
    ]


def test_last_weekday_of_march() -> None:
    # Seed 004: 0 0 0 LW 3 ? is the last weekday of March. 31 March 2029 is a Saturday.
    assert fires("0 0 0 LW 3 ?", utc(2026, 1, 1), 4) == [
        utc(2026, 3, 31),
        utc(2027, 3, 31),
        utc(2028, 3, 31),
        utc(2029, 3, 30),
    ]


def test_second_monday_of_the_month() -> None:
    assert fires("0 0 0 ? * MON#2", utc(2026, 1, 1), 3) == [
        utc(2026, 1, 12),
        utc(2026, 2, 9),
        utc(2026, 3, 9),
    ]


def test_fifth_friday_skips_months_without_one() -> None:
    assert fires("0 0 0 ? * 6#5", utc(2026, 1, 1), 2) == [utc(2026, 1, 30), utc(2026, 5, 29)]


def test_last_friday_of_the_month() -> None:
    assert fires("0 0 0 ? * 6L", utc(2026, 1, 1), 2) == [utc(2026, 1, 30), utc(2026, 2, 27)]
    assert fires("0 0 0 ? * FRIL", utc(2026, 1, 1), 1) == [utc(2026, 1, 30)]


def test_every_third_day_restarts_on_the_first_of_each_month() -> None:
    # Seed 004: 1/3 reads like every third day but 31 January is followed by 1 February.
    assert fires("0 0 0 1/3 * ?", utc(2026, 1, 30), 3) == [
        utc(2026, 1, 31),
        utc(2026, 2, 1),
        utc(2026, 2, 4),
    ]


def test_textual_day_with_a_step_is_a_step_through_the_week() -> None:
    # Quartz 4.1: MON/2 means 2/2, Monday, Wednesday and Friday.
    assert fires("0 0 0 ? * MON/2", utc(2026, 1, 4), 4) == [
        utc(2026, 1, 5),
        utc(2026, 1, 7),
        utc(2026, 1, 9),
        utc(2026, 1, 12),
    ]


def test_textual_day_step_means_what_the_numeric_one_means_all_year() -> None:
    textual = fires("0 0 0 ? * MON/2", utc(2026, 1, 1), 200)
    numeric = fires("0 0 0 ? * 2/2", utc(2026, 1, 1), 200)
    assert textual == numeric
    assert sum(1 for t in textual if t.year == 2026) == 156


def test_textual_day_step_logs_a_warning_about_the_3x_meaning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="celery_quartz.cron"):
        CronExpression("0 0 0 ? * MON/2")
    assert "MON/2" in caplog.text and "3.x" in caplog.text


# -- both day fields --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "days"),
    [
        # Quartz.NET's CronExpressionTest.CanUse_DayOfMonth_And_DayOfWeek_Together, October 2010
        # (the 4th is a Monday, the 1st a Friday).
        ("0 15 10 5/5 * MON 2010", [4, 11, 18, 25, 5, 10, 15, 20, 25, 30]),
        ("0 15 10 3 * MON,THU,FRI 2010", [1, 3, 4, 11, 18, 25, 7, 14, 21, 28, 8, 15, 22, 29]),
        (
            "0 15 10 1,2,3,4,5,6 * MON,THU,FRI 2010",
            [1, 2, 3, 4, 5, 6, 11, 18, 25, 7, 14, 21, 28, 8, 15, 22, 29],
        ),
        ("0 15 10 * * MON,THU,FRI 2010", list(range(1, 32))),
        ("0 15 10 1 * * 2010", list(range(1, 32))),
    ],
)
def test_a_day_either_day_field_names_fires(expression: str, days: list[int]) -> None:
    cron = CronExpression(expression)
    satisfied = {day for day in range(1, 32) if cron.is_satisfied_by(utc(2010, 10, day, 10, 15))}
    assert satisfied == set(days)


def test_both_day_fields_walk_through_the_days_either_names() -> None:
    # The 15th, or the last Friday: 15 and 29 May 2026, 15 and 26 June.
    assert fires("0 0 12 15 * 6L", utc(2026, 5, 1), 4) == [
        utc(2026, 5, 15, 12),
        utc(2026, 5, 29, 12),
        utc(2026, 6, 15, 12),
        utc(2026, 6, 26, 12),
    ]


def test_a_wildcard_beside_named_days_logs_that_it_fires_every_day(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="celery_quartz.cron"):
        CronExpression("0 0 12 * * MON")
    assert "'MON'" in caplog.text and "every day" in caplog.text


def test_both_day_fields_question_mark_is_refused() -> None:
    with pytest.raises(CronSyntaxError, match=r"day-of-month/day-of-week field.*both.*'\?'"):
        CronExpression("0 0 0 ? * ?")


# -- time zones --------------------------------------------------------------------------------


def test_zone_defaults_to_utc() -> None:
    assert CronExpression("0 0 0 * * ?").time_zone == "UTC"


def test_an_aware_non_utc_instant_is_accepted_and_utc_returned() -> None:
    after = datetime(2026, 1, 1, 5, tzinfo=timezone(timedelta(hours=5)))  # 00:00 UTC
    result = CronExpression("0 0 1 * * ?").next_valid_time_after(after)
    assert result == utc(2026, 1, 1, 1) and result is not None and result.tzinfo is UTC


def test_a_naive_instant_is_refused() -> None:
    with pytest.raises(ValueError, match="aware"):
        CronExpression("0 0 1 * * ?").next_valid_time_after(datetime(2026, 1, 1))


def test_a_windows_zone_id_means_its_iana_zone() -> None:
    windows = fires("0 0 2 * * ?", utc(2026, 6, 30, 12), 1, zone="W. Europe Standard Time")
    assert windows == fires("0 0 2 * * ?", utc(2026, 6, 30, 12), 1, zone="Europe/Berlin")
    assert windows == [utc(2026, 7, 1, 0)]


def test_an_unknown_zone_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="Nowhere/Special"):
        CronExpression("0 0 2 * * ?", time_zone="Nowhere/Special")


# -- is_satisfied_by ---------------------------------------------------------------------------


def test_is_satisfied_by_a_fire_time() -> None:
    assert CronExpression("0 15 10 ? * 6L").is_satisfied_by(utc(2026, 1, 30, 10, 15))


def test_is_satisfied_by_ignores_microseconds() -> None:
    t = utc(2026, 1, 30, 10, 15) + timedelta(microseconds=400)
    assert CronExpression("0 15 10 ? * 6L").is_satisfied_by(t)


def test_is_not_satisfied_by_another_time() -> None:
    assert not CronExpression("0 15 10 ? * 6L").is_satisfied_by(utc(2026, 1, 23, 10, 15))


# -- canonical spelling and the crontab form ---------------------------------------------------


def test_expression_is_upper_case_with_single_spaces() -> None:
    assert CronExpression(" 0 0 12 ? *   mon-fri ").expression == "0 0 12 ? * MON-FRI"


def test_unix_form_renumbers_sunday_zero() -> None:
    cron = CronExpression("0 2 * * 0", format=CronFormat.UNIX)
    assert cron.expression == "0 0 2 ? * 1"
    assert cron.next_valid_time_after(utc(2026, 1, 1)) == utc(2026, 1, 4, 2)


def test_unix_form_reads_seven_as_sunday() -> None:
    assert CronExpression("0 2 * * 7", format=CronFormat.UNIX).expression == "0 0 2 ? * 1"


def test_unix_form_renumbers_ranges() -> None:
    assert CronExpression("*/15 9-17 * * 1-5", format=CronFormat.UNIX).expression == (
        "0 */15 9-17 ? * 2-6"
    )


def test_unix_form_range_through_sunday() -> None:
    assert CronExpression("0 0 * * 5-7", format=CronFormat.UNIX).expression == "0 0 0 ? * 1,6,7"


def test_unix_form_keeps_day_names() -> None:
    assert CronExpression("0 0 * * mon", format=CronFormat.UNIX).expression == "0 0 0 ? * MON"


def test_unix_form_day_of_month() -> None:
    assert CronExpression("30 4 1 * *", format=CronFormat.UNIX).expression == "0 30 4 1 * ?"


def test_unix_form_every_minute() -> None:
    assert CronExpression("* * * * *", format=CronFormat.UNIX).expression == "0 * * * * ?"


def test_unix_form_with_both_day_fields_fires_when_either_matches() -> None:
    # crontab's rule, and Quartz.NET's: the 13th, or a Friday (croniter agrees). 13 April 2026
    # is a Monday.
    cron = CronExpression("0 0 13 * 5", format=CronFormat.UNIX)
    assert cron.expression == "0 0 0 13 * 6"
    theirs = croniter("0 0 13 * 5", utc(2026, 4, 1))
    expected = [theirs.get_next(datetime) for _ in range(6)]
    assert expected == [utc(2026, 4, d) for d in (3, 10, 13, 17, 24)] + [utc(2026, 5, 1)]
    assert fires(cron.expression, utc(2026, 4, 1), 6) == expected


def test_unix_form_with_a_starred_day_beside_a_restricted_one_is_refused() -> None:
    # Vixie cron requires both fields to match when one starts with '*'; Quartz cannot say so.
    with pytest.raises(CronSyntaxError, match=r"day-of-month/day-of-week field, token '\*/2 1'"):
        CronExpression("0 0 */2 * 1", format=CronFormat.UNIX)


def test_unix_form_needs_five_fields() -> None:
    with pytest.raises(CronSyntaxError, match="5 fields"):
        CronExpression("0 0 0 * * ?", format=CronFormat.UNIX)


def test_five_fields_in_quartz_form_point_at_the_unix_format() -> None:
    with pytest.raises(CronSyntaxError, match=r"CronFormat\.UNIX"):
        CronExpression("0 2 * * 0")


def test_macros_expand_to_quartz_expressions() -> None:
    assert CronExpression("@daily").expression == "0 0 0 * * ?"
    assert CronExpression("@weekly").expression == "0 0 0 ? * 1"


def test_reboot_macro_is_refused_by_name() -> None:
    with pytest.raises(CronSyntaxError, match="@reboot"):
        CronExpression("@reboot")


# -- what 4.x refuses --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "field", "token"),
    [
        ("0 0 0 1-5W * ?", "day-of-month", "1-5W"),
        ("0 0 0 ? * L-3", "day-of-week", "L-3"),
        ("0 0 0 ? * LW", "day-of-week", "LW"),
        ("0 0 0 ? * MON,FRI#3", "day-of-week", "MON,FRI#3"),
        ("0 0 0 5C * ?", "day-of-month", "5C"),
        ("0 0 0 ? * 1C", "day-of-week", "1C"),
        ("*/0 * * * * ?", "second", "*/0"),
        ("0 5/0 * * * ?", "minute", "5/0"),
        ("0 0-10/0 * * * ?", "minute", "0-10/0"),
        ("0 0-10/120 * * * ?", "minute", "0-10/120"),
        ("0 0/120 * * * ?", "minute", "0/120"),
        ("0 0 0 ? * MON/X", "day-of-week", "MON/X"),
        ("0 0 0 ? * SUN/9", "day-of-week", "SUN/9"),
        ("0 0 0 ? * MON/0", "day-of-week", "MON/0"),
        ("60 * * * * ?", "second", "60"),
        ("0 60 * * * ?", "minute", "60"),
        ("0 0 24 * * ?", "hour", "24"),
        ("0 0 0 0 * ?", "day-of-month", "0"),
        ("0 0 0 32 * ?", "day-of-month", "32"),
        ("0 0 0 1 13 ?", "month", "13"),
        ("0 0 0 1 FOO ?", "month", "FOO"),
        ("0 0 0 ? * 0", "day-of-week", "0"),
        ("0 0 0 ? * 8", "day-of-week", "8"),
        ("0 0 0 ? * 2#6", "day-of-week", "2#6"),
        ("0 0 0 ? * 2#0", "day-of-week", "2#0"),
        ("0 0 0 L-31 * ?", "day-of-month", "L-31"),
        ("0 0 0 LX * ?", "day-of-month", "LX"),
        ("0 0 0 L-3W-31 * ?", "day-of-month", "L-3W-31"),
        ("0 0 0 15L * ?", "day-of-month", "15L"),
        ("0 0 0 W * ?", "day-of-month", "W"),
        ("0 0 0 1 * ? 1969", "year", "1969"),
        ("0 0 0 1 * ? 2200", "year", "2200"),
        ("0 0 L * * ?", "hour", "L"),
        ("0 0 5W * * ?", "hour", "5W"),
        ("0 ? 0 * * ?", "minute", "?"),
        ("0 0 0 1,,2 * ?", "day-of-month", "1,,2"),
        ("0 0 0 1-x * ?", "day-of-month", "1-X"),
    ],
)
def test_refused_forms_name_the_field_and_the_token(
    expression: str, field: str, token: str
) -> None:
    with pytest.raises(CronSyntaxError) as raised:
        CronExpression(expression)
    assert f"{field} field" in str(raised.value)
    assert repr(token) in str(raised.value)


def test_wrong_number_of_fields_is_refused() -> None:
    with pytest.raises(CronSyntaxError, match="6 or 7 fields"):
        CronExpression("0 0 0 * * ? 2026 extra")


def test_cron_syntax_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        CronExpression("nonsense")
