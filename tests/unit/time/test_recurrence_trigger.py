"""RecurrenceTrigger: RFC 5545 RRULEs, including the examples of RFC 5545 §3.8.5.3.

The RFC's examples use DTSTART;TZID=America/New_York; each expected fire time below is the
wall-clock time the RFC lists, read in New York, so the assertion is on the exact instant.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from celery_quartz.errors import InvalidTriggerError
from celery_quartz.triggers import TRIGGER_KINDS, CronMisfireInstruction, RecurrenceTrigger
from tests.unit.conftest import utc

UTC = timezone.utc
NEW_YORK = ZoneInfo("America/New_York")


def ny(y: int, m: int, d: int, h: int = 9, minute: int = 0) -> datetime:
    return datetime(y, m, d, h, minute, tzinfo=NEW_YORK)


def occurrences(rule: str, dtstart: datetime, n: int = 500, zone: str = "America/New_York"):  # type: ignore[no-untyped-def]
    """The first ``n`` fire times, walking the trigger as the scheduler does."""
    trigger = RecurrenceTrigger(rule=rule, start_at=dtstart, time_zone=zone)
    out = []
    t = trigger.compute_first_fire_time()
    while t is not None and len(out) < n:
        out.append(t)
        trigger.triggered()
        t = trigger.next_fire_time
    return out


# -- RFC 5545 §3.8.5.3 -------------------------------------------------------------------------


def test_rfc_daily_for_10_occurrences() -> None:
    assert occurrences("FREQ=DAILY;COUNT=10", ny(1997, 9, 2)) == [
        ny(1997, 9, d) for d in range(2, 12)
    ]


def test_rfc_daily_until_december_24_crosses_the_change_to_standard_time() -> None:
    times = occurrences("FREQ=DAILY;UNTIL=19971224T000000Z", ny(1997, 9, 2))
    assert len(times) == 113
    assert times[0] == utc(1997, 9, 2, 13)  # 09:00 EDT
    assert times[-1] == utc(1997, 12, 23, 14)  # 09:00 EST


def test_rfc_every_other_day_forever() -> None:
    assert occurrences("FREQ=DAILY;INTERVAL=2", ny(1997, 9, 2), n=4) == [
        ny(1997, 9, 2),
        ny(1997, 9, 4),
        ny(1997, 9, 6),
        ny(1997, 9, 8),
    ]


def test_rfc_every_10_days_5_occurrences() -> None:
    assert occurrences("FREQ=DAILY;INTERVAL=10;COUNT=5", ny(1997, 9, 2)) == [
        ny(1997, 9, 2),
        ny(1997, 9, 12),
        ny(1997, 9, 22),
        ny(1997, 10, 2),
        ny(1997, 10, 12),
    ]


def test_rfc_every_day_in_january_for_3_years() -> None:
    times = occurrences(
        "FREQ=YEARLY;UNTIL=20000131T140000Z;BYMONTH=1;BYDAY=SU,MO,TU,WE,TH,FR,SA", ny(1998, 1, 1)
    )
    assert len(times) == 93
    assert times[-1] == ny(2000, 1, 31)


def test_rfc_weekly_for_10_occurrences() -> None:
    assert occurrences("FREQ=WEEKLY;COUNT=10", ny(1997, 9, 2)) == [
        ny(1997, 9, 2),
        ny(1997, 9, 9),
        ny(1997, 9, 16),
        ny(1997, 9, 23),
        ny(1997, 9, 30),
        ny(1997, 10, 7),
        ny(1997, 10, 14),
        ny(1997, 10, 21),
        ny(1997, 10, 28),
        ny(1997, 11, 4),
    ]


def test_rfc_every_other_week_on_monday_wednesday_friday_until_december_24() -> None:
    times = occurrences(
        "FREQ=WEEKLY;INTERVAL=2;UNTIL=19971224T000000Z;WKST=SU;BYDAY=MO,WE,FR", ny(1997, 9, 1)
    )
    days = [(t.astimezone(NEW_YORK).month, t.astimezone(NEW_YORK).day) for t in times]
    assert days == [
        (9, 1), (9, 3), (9, 5), (9, 15), (9, 17), (9, 19), (9, 29),
        (10, 1), (10, 3), (10, 13), (10, 15), (10, 17), (10, 27), (10, 29), (10, 31),
        (11, 10), (11, 12), (11, 14), (11, 24), (11, 26), (11, 28),
        (12, 8), (12, 10), (12, 12), (12, 22),
    ]  # fmt: skip


def test_rfc_monthly_on_the_first_friday_for_10_occurrences() -> None:
    assert occurrences("FREQ=MONTHLY;COUNT=10;BYDAY=1FR", ny(1997, 9, 5)) == [
        ny(1997, 9, 5),
        ny(1997, 10, 3),
        ny(1997, 11, 7),
        ny(1997, 12, 5),
        ny(1998, 1, 2),
        ny(1998, 2, 6),
        ny(1998, 3, 6),
        ny(1998, 4, 3),
        ny(1998, 5, 1),
        ny(1998, 6, 5),
    ]


def test_rfc_monthly_on_the_second_to_last_monday_for_6_months() -> None:
    assert occurrences("FREQ=MONTHLY;COUNT=6;BYDAY=-2MO", ny(1997, 9, 22)) == [
        ny(1997, 9, 22),
        ny(1997, 10, 20),
        ny(1997, 11, 17),
        ny(1997, 12, 22),
        ny(1998, 1, 19),
        ny(1998, 2, 16),
    ]


def test_rfc_monthly_on_the_third_to_last_day() -> None:
    assert occurrences("FREQ=MONTHLY;BYMONTHDAY=-3", ny(1997, 9, 28), n=6) == [
        ny(1997, 9, 28),
        ny(1997, 10, 29),
        ny(1997, 11, 28),
        ny(1997, 12, 29),
        ny(1998, 1, 29),
        ny(1998, 2, 26),
    ]


def test_rfc_third_tuesday_wednesday_or_thursday_with_bysetpos() -> None:
    assert occurrences("FREQ=MONTHLY;COUNT=3;BYDAY=TU,WE,TH;BYSETPOS=3", ny(1997, 9, 4)) == [
        ny(1997, 9, 4),
        ny(1997, 10, 7),
        ny(1997, 11, 6),
    ]


def test_rfc_second_to_last_weekday_of_the_month() -> None:
    assert occurrences("FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-2", ny(1997, 9, 29), 7) == [
        ny(1997, 9, 29),
        ny(1997, 10, 30),
        ny(1997, 11, 27),
        ny(1997, 12, 30),
        ny(1998, 1, 29),
        ny(1998, 2, 26),
        ny(1998, 3, 30),
    ]


def test_rfc_every_friday_the_13th() -> None:
    # The RFC's DTSTART (2 September 1997) is not a Friday the 13th, so it does not fire.
    assert occurrences("FREQ=MONTHLY;BYDAY=FR;BYMONTHDAY=13", ny(1997, 9, 2), n=5) == [
        ny(1998, 2, 13),
        ny(1998, 3, 13),
        ny(1998, 11, 13),
        ny(1999, 8, 13),
        ny(2000, 10, 13),
    ]


def test_rfc_every_20_minutes_from_9_to_4_40() -> None:
    times = occurrences(
        "FREQ=DAILY;BYHOUR=9,10,11,12,13,14,15,16;BYMINUTE=0,20,40", ny(1997, 9, 2), n=25
    )
    assert times[:3] == [ny(1997, 9, 2, 9, 0), ny(1997, 9, 2, 9, 20), ny(1997, 9, 2, 9, 40)]
    assert times[23] == ny(1997, 9, 2, 16, 40)
    assert times[24] == ny(1997, 9, 3, 9, 0)


def test_rfc_week_start_changes_which_days_are_generated() -> None:
    monday = occurrences("FREQ=WEEKLY;INTERVAL=2;COUNT=4;BYDAY=TU,SU;WKST=MO", ny(1997, 8, 5))
    sunday = occurrences("FREQ=WEEKLY;INTERVAL=2;COUNT=4;BYDAY=TU,SU;WKST=SU", ny(1997, 8, 5))
    assert monday == [ny(1997, 8, 5), ny(1997, 8, 10), ny(1997, 8, 19), ny(1997, 8, 24)]
    assert sunday == [ny(1997, 8, 5), ny(1997, 8, 17), ny(1997, 8, 19), ny(1997, 8, 31)]


def test_rfc_an_invalid_date_is_ignored_and_not_counted() -> None:
    assert occurrences("FREQ=MONTHLY;BYMONTHDAY=15,30;COUNT=5", ny(2007, 1, 15)) == [
        ny(2007, 1, 15),
        ny(2007, 1, 30),
        ny(2007, 2, 15),
        ny(2007, 3, 15),
        ny(2007, 3, 30),
    ]


def test_rfc_every_thursday_in_march() -> None:
    times = occurrences("FREQ=YEARLY;BYMONTH=3;BYDAY=TH", ny(1997, 3, 13), n=11)
    assert times == [
        ny(1997, 3, 13), ny(1997, 3, 20), ny(1997, 3, 27),
        ny(1998, 3, 5), ny(1998, 3, 12), ny(1998, 3, 19), ny(1998, 3, 26),
        ny(1999, 3, 4), ny(1999, 3, 11), ny(1999, 3, 18), ny(1999, 3, 25),
    ]  # fmt: skip


def test_rfc_us_presidential_election_day() -> None:
    rule = "FREQ=YEARLY;INTERVAL=4;BYMONTH=11;BYDAY=TU;BYMONTHDAY=2,3,4,5,6,7,8"
    assert occurrences(rule, ny(1996, 11, 5), n=3) == [
        ny(1996, 11, 5),
        ny(2000, 11, 7),
        ny(2004, 11, 2),
    ]


def test_rfc_monday_of_week_number_20() -> None:
    assert occurrences("FREQ=YEARLY;BYWEEKNO=20;BYDAY=MO", ny(1997, 5, 12), n=3) == [
        ny(1997, 5, 12),
        ny(1998, 5, 11),
        ny(1999, 5, 17),
    ]


def test_rfc_every_3_hours_until_a_utc_instant() -> None:
    # RFC 5545 lists 09:00, 12:00 and 15:00 EDT here, but UNTIL is 17:00 UTC (13:00 EDT): the
    # published example is a known erratum; the rule's own bound allows the first two.
    assert occurrences("FREQ=HOURLY;INTERVAL=3;UNTIL=19970902T170000Z", ny(1997, 9, 2)) == [
        ny(1997, 9, 2, 9),
        ny(1997, 9, 2, 12),
    ]


# -- the seed's cadences -----------------------------------------------------------------------


def test_every_other_monday_is_anchored_on_the_start() -> None:
    start = datetime(2026, 1, 5, 9, tzinfo=ZoneInfo("Europe/Helsinki"))
    trigger = RecurrenceTrigger(
        rule="FREQ=WEEKLY;INTERVAL=2;BYDAY=MO", start_at=start, time_zone="Europe/Helsinki"
    )
    # Asked from any later instant, the fortnight keeps the start's phase.
    assert trigger.next_fire_time_after(utc(2026, 1, 6)) == utc(2026, 1, 19, 7)
    assert trigger.next_fire_time_after(utc(2026, 1, 13)) == utc(2026, 1, 19, 7)
    assert trigger.next_fire_time_after(utc(2027, 1, 1)) == utc(2027, 1, 4, 7)


def test_second_to_last_friday_of_the_month() -> None:
    assert occurrences("FREQ=MONTHLY;BYDAY=-2FR", ny(2026, 1, 1), n=3) == [
        ny(2026, 1, 23),
        ny(2026, 2, 20),
        ny(2026, 3, 20),
    ]


def test_every_third_day_does_not_reset_at_month_end() -> None:
    assert occurrences("FREQ=DAILY;INTERVAL=3", ny(2026, 1, 28), n=3) == [
        ny(2026, 1, 28),
        ny(2026, 1, 31),
        ny(2026, 2, 3),
    ]


# -- RFC 5545 §3.3.5: local times that do not exist or exist twice -----------------------------


def test_a_local_time_in_the_gap_uses_the_offset_before_the_gap() -> None:
    # 02:30 on 8 March 2026 does not exist in New York; read with EST it is 07:30 UTC (03:30 EDT).
    times = occurrences("FREQ=DAILY;BYHOUR=2;BYMINUTE=30", ny(2026, 3, 7, 0), n=3)
    assert times == [utc(2026, 3, 7, 7, 30), utc(2026, 3, 8, 7, 30), utc(2026, 3, 9, 6, 30)]


def test_a_repeated_local_time_means_its_first_occurrence() -> None:
    # 01:30 on 1 November 2026 occurs twice in New York: EDT (05:30 UTC) first.
    times = occurrences("FREQ=DAILY;BYHOUR=1;BYMINUTE=30", ny(2026, 10, 31, 0), n=3)
    assert times == [utc(2026, 10, 31, 5, 30), utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)]


# -- the trigger -------------------------------------------------------------------------------


def test_count_counts_fires_not_an_unmatched_start() -> None:
    # DTSTART is a Tuesday; the rule names Mondays; COUNT=2 is two Mondays.
    assert occurrences("FREQ=WEEKLY;BYDAY=MO;COUNT=2", ny(2026, 1, 6)) == [
        ny(2026, 1, 12),
        ny(2026, 1, 19),
    ]


def test_end_at_bounds_the_fire_times_inclusively() -> None:
    trigger = RecurrenceTrigger(
        rule="FREQ=DAILY", start_at=utc(2026, 1, 1, 9), end_at=utc(2026, 1, 2, 9)
    )
    assert trigger.next_fire_time_after(utc(2026, 1, 1, 10)) == utc(2026, 1, 2, 9)
    assert trigger.next_fire_time_after(utc(2026, 1, 2, 9)) is None


def test_a_far_later_question_is_answered_quickly_and_in_phase() -> None:
    trigger = RecurrenceTrigger(rule="FREQ=MINUTELY;INTERVAL=7", start_at=utc(2000, 1, 1))
    # dateutil expands from DTSTART; the trigger re-anchors whole 7-minute cycles later.
    after = utc(2026, 1, 1)
    fire = trigger.next_fire_time_after(after)
    assert fire is not None
    minutes = int((fire - utc(2000, 1, 1)).total_seconds() // 60)
    assert minutes % 7 == 0 and fire > after and (fire - after).total_seconds() <= 7 * 60


def test_rrule_prefix_is_accepted_and_dropped() -> None:
    trigger = RecurrenceTrigger(rule="RRULE:freq=daily;count=2", start_at=utc(2026, 1, 1))
    assert trigger.rule == "FREQ=DAILY;COUNT=2"


def test_an_invalid_rule_is_refused_naming_the_trigger() -> None:
    with pytest.raises(InvalidTriggerError, match="recurrence rule"):
        RecurrenceTrigger(rule="FREQ=SOMETIMES", start_at=utc(2026, 1, 1))


def test_a_trigger_without_start_cannot_compute_fire_times() -> None:
    with pytest.raises(InvalidTriggerError, match="start_at"):
        RecurrenceTrigger(rule="FREQ=DAILY").next_fire_time_after(utc(2026, 1, 1))


def test_detail_round_trips_through_the_kind_registry() -> None:
    trigger = RecurrenceTrigger(
        rule="FREQ=WEEKLY;INTERVAL=2;BYDAY=MO",
        start_at=ny(2026, 1, 5),
        time_zone="America/New_York",
    )
    rebuilt = TRIGGER_KINDS["RRULE"].from_detail(
        trigger.detail(), key=trigger.key, start_at=trigger.start_at
    )
    assert rebuilt.next_fire_time_after(utc(2026, 1, 6)) == ny(2026, 1, 19)


def test_smart_policy_fires_once_now() -> None:
    trigger = RecurrenceTrigger(rule="FREQ=DAILY", start_at=utc(2026, 1, 1, 9))
    trigger.next_fire_time = utc(2026, 1, 3, 9)
    trigger.update_after_misfire(utc(2026, 1, 5, 12))
    assert trigger.next_fire_time == utc(2026, 1, 5, 12)


def test_do_nothing_resumes_after_now() -> None:
    trigger = RecurrenceTrigger(
        rule="FREQ=DAILY",
        start_at=utc(2026, 1, 1, 9),
        misfire_instruction=CronMisfireInstruction.DO_NOTHING,
    )
    trigger.next_fire_time = utc(2026, 1, 3, 9)
    trigger.update_after_misfire(utc(2026, 1, 5, 12))
    assert trigger.next_fire_time == utc(2026, 1, 6, 9)


def test_a_rule_is_validated_before_the_scheduler_fills_in_the_start() -> None:
    RecurrenceTrigger(rule="FREQ=DAILY;BYHOUR=3").validate()
    with pytest.raises(InvalidTriggerError, match="recurrence rule"):
        RecurrenceTrigger(rule="FREQ=DAILY;BYHOUR=x").validate()


# -- validation (RFC 5545 §3.3.10) -------------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "named"),
    [
        ("FREQ=YEARLY;BYDAY=54MO", "54MO"),
        ("FREQ=MONTHLY;BYDAY=6MO", "6MO"),
        ("FREQ=WEEKLY;BYDAY=1MO", "1MO"),
        ("FREQ=MONTHLY;BYDAY=+MO", "+MO"),
        ("FREQ=MONTHLY;BYDAY=XX", "XX"),
        ("FREQ=YEARLY;BYMONTH=13", "BYMONTH"),
        ("FREQ=YEARLY;BYMONTH=0", "BYMONTH"),
        ("FREQ=MONTHLY;BYMONTHDAY=0", "BYMONTHDAY"),
        ("FREQ=MONTHLY;BYMONTHDAY=-32", "BYMONTHDAY"),
        ("FREQ=DAILY;BYHOUR=24", "BYHOUR"),
        ("FREQ=DAILY;BYMINUTE=-1", "BYMINUTE"),
        ("FREQ=DAILY;BYSECOND=60", "BYSECOND"),
        ("FREQ=YEARLY;BYYEARDAY=367", "BYYEARDAY"),
        ("FREQ=YEARLY;BYWEEKNO=54", "BYWEEKNO"),
        ("FREQ=YEARLY;BYSETPOS=0", "BYSETPOS"),
        ("FREQ=DAILY;INTERVAL=0", "INTERVAL"),
        ("FREQ=DAILY;COUNT=0", "COUNT"),
        ("FREQ=DAILY;COUNT=2;UNTIL=20270101T000000Z", "COUNT and UNTIL"),
        ("FREQ=DAILY;FREQ=WEEKLY", "twice"),
        ("FREQ=DAILY;WKST=XX", "WKST"),
        ("FREQ=DAILY;BYFOO=1", "BYFOO"),
        ("FREQ=DAILY;COUNT", "COUNT"),
        ("FREQ=MONTHLY;BYWEEKNO=1", "BYWEEKNO"),
        ("FREQ=MONTHLY;BYYEARDAY=1", "BYYEARDAY"),
        ("FREQ=WEEKLY;BYMONTHDAY=1", "BYMONTHDAY"),
        ("BYDAY=MO", "FREQ"),
        ("FREQ=DAILY;UNTIL=2027", "UNTIL"),
        ("FREQ=DAILY;UNTIL=20270101T0000H", "UNTIL"),
        ("FREQ=DAILY;UNTIL=20271301", "UNTIL"),
        ("FREQ=DAILY;UNTIL=tomorrow", "UNTIL"),
    ],
)
def test_a_rule_rfc_5545_does_not_allow_is_refused_when_validated(rule: str, named: str) -> None:
    with pytest.raises(InvalidTriggerError, match=re.escape(named)):
        RecurrenceTrigger(rule=rule, start_at=utc(2026, 1, 1))
    with pytest.raises(InvalidTriggerError, match=re.escape(named)):
        RecurrenceTrigger(rule=rule).validate()


def test_until_as_a_date_or_a_local_date_time_is_accepted() -> None:
    for until in ("20260105", "20260105T000000"):
        trigger = RecurrenceTrigger(rule=f"FREQ=DAILY;UNTIL={until}", start_at=utc(2026, 1, 1))
        assert trigger.final_fire_time() == utc(2026, 1, 5)


def test_x_extension_parts_are_accepted_and_ignored() -> None:
    trigger = RecurrenceTrigger(
        rule="FREQ=DAILY;X-NAME=nightly;COUNT=2;X-OWNER=ops", start_at=utc(2026, 1, 1)
    )
    assert trigger.rule == "FREQ=DAILY;COUNT=2"
    assert trigger.next_fire_time_after(utc(2026, 1, 1)) == utc(2026, 1, 2)


def test_negative_positions_within_range_are_accepted() -> None:
    trigger = RecurrenceTrigger(
        rule="FREQ=MONTHLY;BYMONTHDAY=-1;BYSETPOS=-1", start_at=utc(2026, 1, 1), time_zone="UTC"
    )
    assert trigger.next_fire_time_after(utc(2026, 1, 1)) == utc(2026, 1, 31)


# -- the final fire time -----------------------------------------------------------------------


def test_final_fire_time_of_a_counted_rule() -> None:
    trigger = RecurrenceTrigger(rule="FREQ=DAILY;COUNT=3", start_at=utc(2026, 1, 1))
    assert trigger.final_fire_time() == utc(2026, 1, 3)


def test_final_fire_time_of_a_rule_until_an_instant() -> None:
    trigger = RecurrenceTrigger(
        rule="FREQ=WEEKLY;UNTIL=20260131T000000Z", start_at=utc(2026, 1, 1), time_zone="UTC"
    )
    assert trigger.final_fire_time() == utc(2026, 1, 29)


def test_final_fire_time_is_bounded_by_end_at() -> None:
    trigger = RecurrenceTrigger(
        rule="FREQ=MINUTELY;INTERVAL=7", start_at=utc(2026, 1, 1), end_at=utc(2030, 6, 1, 12)
    )
    last = trigger.final_fire_time()
    assert last is not None and last <= utc(2030, 6, 1, 12)
    assert trigger.next_fire_time_after(last) is None
    assert trigger.next_fire_time_after(last - timedelta(minutes=7)) == last


def test_final_fire_time_of_a_sparse_rule_bounded_by_end_at() -> None:
    trigger = RecurrenceTrigger(
        rule="FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29", start_at=utc(2026, 1, 1), end_at=utc(2031, 1, 1)
    )
    assert trigger.final_fire_time() == utc(2028, 2, 29)


def test_final_fire_time_of_an_unbounded_rule_is_none() -> None:
    assert RecurrenceTrigger(rule="FREQ=DAILY", start_at=utc(2026, 1, 1)).final_fire_time() is None


def test_final_fire_time_when_nothing_fires_is_none() -> None:
    trigger = RecurrenceTrigger(
        rule="FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29", start_at=utc(2026, 1, 1), end_at=utc(2027, 1, 1)
    )
    assert trigger.final_fire_time() is None


def test_occurrences_skipped_by_a_misfire_use_up_the_count() -> None:
    trigger = RecurrenceTrigger(
        rule="FREQ=DAILY;COUNT=5",
        start_at=utc(2026, 1, 1),
        misfire_instruction=CronMisfireInstruction.DO_NOTHING,
    )
    trigger.compute_first_fire_time()
    trigger.triggered()  # 1 January fired
    trigger.update_after_misfire(utc(2026, 1, 3, 12))  # 2 and 3 January missed
    fired = []
    while trigger.next_fire_time is not None:
        fired.append(trigger.next_fire_time)
        trigger.triggered()
    assert fired == [utc(2026, 1, 4), utc(2026, 1, 5)]
    assert trigger.times_triggered == 3


def test_a_rule_whose_day_parts_never_meet_has_no_fire_time_and_answers_at_once() -> None:
    import time as clock

    trigger = RecurrenceTrigger(
        rule="FREQ=MINUTELY;BYMONTH=2;BYMONTHDAY=30", start_at=utc(2026, 1, 1)
    )
    began = clock.perf_counter()
    assert trigger.next_fire_time_after(utc(2026, 1, 1)) is None
    assert trigger.final_fire_time() is None
    assert clock.perf_counter() - began < 1.0


def test_a_set_position_no_period_holds_is_refused() -> None:
    with pytest.raises(InvalidTriggerError, match="BYSETPOS 2 can never match"):
        RecurrenceTrigger(rule="FREQ=MONTHLY;BYDAY=1MO;BYSETPOS=2", start_at=utc(2026, 1, 1))
    with pytest.raises(InvalidTriggerError, match="BYSETPOS"):
        RecurrenceTrigger(rule="FREQ=SECONDLY;BYSETPOS=366", start_at=utc(2026, 1, 1))
    RecurrenceTrigger(rule="FREQ=DAILY;BYHOUR=9,17;BYSETPOS=-1", start_at=utc(2026, 1, 1))


def test_an_until_past_year_9999_on_the_zone_clock_is_no_bound() -> None:
    trigger = RecurrenceTrigger(
        rule="FREQ=YEARLY;UNTIL=99991231T235959Z",
        start_at=utc(2026, 1, 1),
        time_zone="Asia/Kolkata",
    )
    assert trigger.next_fire_time_after(utc(2026, 6, 1)) == utc(2027, 1, 1)


def test_no_fire_time_is_searched_past_2299() -> None:
    trigger = RecurrenceTrigger(rule="FREQ=YEARLY", start_at=utc(2026, 1, 1))
    assert trigger.next_fire_time_after(utc(2299, 6, 1)) is None


@pytest.mark.parametrize(
    "rule",
    [
        "FREQ=SECONDLY;BYYEARDAY=1;BYHOUR=0;BYMINUTE=0,1",
        "FREQ=MINUTELY;BYMONTHDAY=1;BYHOUR=9",
        "FREQ=HOURLY;BYDAY=MO;BYMONTH=1",
        "FREQ=SECONDLY;BYMONTH=1;BYMONTHDAY=1;BYHOUR=0;BYMINUTE=0;COUNT=70",
    ],
)
def test_a_sub_daily_rule_on_rare_days_keeps_its_occurrences(rule: str) -> None:
    from dateutil import rrule as du

    start = datetime(2026, 1, 1, 0, 0, 5)
    plain = list(du.rrulestr(rule, dtstart=start).between(start, datetime(2028, 1, 3), inc=True))
    trigger = RecurrenceTrigger(rule=rule, start_at=start.replace(tzinfo=UTC), time_zone="UTC")
    fired, t = [], trigger.next_fire_time_after(utc(2025, 12, 31))
    while t is not None and t < utc(2028, 1, 3) and len(fired) < len(plain) + 1:
        fired.append(t.replace(tzinfo=None))
        t = trigger.next_fire_time_after(t)
    assert fired == plain


def test_a_secondly_rule_on_leap_days_answers_quickly() -> None:
    import time as clock

    trigger = RecurrenceTrigger(
        rule="FREQ=SECONDLY;BYYEARDAY=366;BYHOUR=23", start_at=utc(2029, 1, 1)
    )
    began = clock.perf_counter()
    assert trigger.next_fire_time_after(utc(2029, 1, 1)) == utc(2032, 12, 31, 23)
    assert clock.perf_counter() - began < 1.0
