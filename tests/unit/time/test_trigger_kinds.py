"""What the store relies on, for every kind: kind names, misfire values, JSON detail round trips."""

from __future__ import annotations

import json
import re
from datetime import datetime, time, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from celery_quartz.cron import WINDOWS_TIME_ZONES
from celery_quartz.errors import InvalidTriggerError, ValidationError
from celery_quartz.keys import JobKey, TriggerKey
from celery_quartz.triggers import (
    TRIGGER_KINDS,
    CalendarIntervalTrigger,
    CronMisfireInstruction,
    CronTrigger,
    DailyTimeIntervalTrigger,
    RecurrenceTrigger,
    SimpleMisfireInstruction,
    SimpleTrigger,
    Trigger,
)
from celery_quartz.triggers.base import TriggerDetailsUpdate

UTC = timezone.utc
START = datetime(2026, 1, 1, 9, tzinfo=UTC)
COMMON_FIELDS = (
    "key", "job_key", "description", "priority", "start_at", "end_at", "misfire_instruction",
    "data", "calendar_name", "next_fire_time", "previous_fire_time", "times_triggered",
)  # fmt: skip


def every_kind() -> list[Trigger]:
    return [
        SimpleTrigger(start_at=START, repeat_interval=timedelta(minutes=10), repeat_count=5),
        CronTrigger(start_at=START, expression="0 15 10 ? * MON-FRI", time_zone="Europe/Paris"),
        CalendarIntervalTrigger(
            start_at=START, repeat_interval=2, repeat_interval_unit="WEEK", time_zone="Asia/Tokyo"
        ),
        DailyTimeIntervalTrigger(
            start_at=START,
            start_time_of_day=time(8, 30),
            end_time_of_day=time(18),
            repeat_interval=45,
            time_zone="America/Chicago",
        ),
        RecurrenceTrigger(start_at=START, rule="FREQ=MONTHLY;BYDAY=-1FR", time_zone="UTC"),
    ]


def test_the_five_kinds_are_registered_under_their_stored_names() -> None:
    assert {k: TRIGGER_KINDS[k] for k in ("SIMPLE", "CRON", "CAL_INT", "DAILY_I", "RRULE")} == {
        "SIMPLE": SimpleTrigger,
        "CRON": CronTrigger,
        "CAL_INT": CalendarIntervalTrigger,
        "DAILY_I": DailyTimeIntervalTrigger,
        "RRULE": RecurrenceTrigger,
    }


def test_misfire_instruction_values_are_quartzs() -> None:
    assert [int(m) for m in SimpleMisfireInstruction] == [-1, 0, 1, 2, 3, 4, 5]
    assert SimpleMisfireInstruction.RESCHEDULE_NEXT_WITH_REMAINING_COUNT == 4
    assert [int(m) for m in CronMisfireInstruction] == [-1, 0, 1, 2]
    for cls in (CronTrigger, CalendarIntervalTrigger, DailyTimeIntervalTrigger, RecurrenceTrigger):
        assert cls.misfire_instructions == frozenset({-1, 0, 1, 2})
    assert SimpleTrigger.misfire_instructions == frozenset(range(-1, 6))


@pytest.mark.parametrize("trigger", every_kind(), ids=lambda t: t.kind)
def test_detail_is_json_and_rebuilds_the_same_schedule(trigger: Trigger) -> None:
    trigger.job_key = JobKey("job")
    trigger.key = TriggerKey("t", "g")
    trigger.validate()
    trigger.compute_first_fire_time()
    trigger.triggered()
    detail = json.loads(json.dumps(trigger.detail()))
    common = {name: getattr(trigger, name) for name in COMMON_FIELDS}
    rebuilt = TRIGGER_KINDS[trigger.kind].from_detail(detail, **common)
    assert type(rebuilt) is type(trigger)
    assert rebuilt.detail() == trigger.detail()
    after = trigger.next_fire_time
    for _ in range(5):
        assert after is not None
        expected = trigger.next_fire_time_after(after)
        assert rebuilt.next_fire_time_after(after) == expected
        after = expected


@pytest.mark.parametrize("trigger", every_kind(), ids=lambda t: t.kind)
def test_a_trigger_built_without_a_key_gets_a_generated_one(trigger: Trigger) -> None:
    assert isinstance(trigger.key, TriggerKey) and trigger.key.name


@pytest.mark.parametrize("trigger", every_kind(), ids=lambda t: t.kind)
def test_fire_times_are_utc_and_strictly_later(trigger: Trigger) -> None:
    after = datetime(2026, 1, 1, 14, 33, 3, tzinfo=ZoneInfo("Asia/Kolkata"))  # 09:03:03 UTC
    fire = trigger.next_fire_time_after(after)
    assert fire is not None and fire > after and fire.tzinfo is UTC


@pytest.mark.parametrize("trigger", every_kind(), ids=lambda t: t.kind)
def test_an_end_before_the_start_is_invalid(trigger: Trigger) -> None:
    trigger.end_at = START - timedelta(days=1)
    with pytest.raises(ValueError, match="end_at"):
        trigger.validate()


@pytest.mark.parametrize("trigger", every_kind(), ids=lambda t: t.kind)
def test_a_description_longer_than_the_store_holds_is_refused_naming_the_trigger(
    trigger: Trigger,
) -> None:
    trigger.key = TriggerKey("report", "nightly")
    trigger.description = "d" * 251
    with pytest.raises(
        InvalidTriggerError,
        match=re.escape("trigger nightly.report: description is 251 characters; at most 250"),
    ):
        trigger.validate()


def test_a_details_update_with_a_description_longer_than_the_store_holds_is_refused() -> None:
    with pytest.raises(ValidationError, match="description is 251 characters; at most 250"):
        TriggerDetailsUpdate(description="d" * 251)


@pytest.mark.parametrize("windows_id", sorted(WINDOWS_TIME_ZONES))
def test_every_windows_time_zone_id_resolves(windows_id: str) -> None:
    CronTrigger(expression="0 0 0 * * ?", time_zone=windows_id).validate()


def test_every_kind_answers_its_final_fire_time() -> None:
    from datetime import time as time_of_day

    from celery_quartz.triggers import (
        CalendarIntervalTrigger,
        CronTrigger,
        DailyTimeIntervalTrigger,
        RecurrenceTrigger,
        SimpleTrigger,
    )

    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    end = datetime(2026, 1, 10, 12, tzinfo=timezone.utc)
    kinds = [
        SimpleTrigger(start_at=start, repeat_interval=timedelta(hours=1), repeat_count=-1),
        CronTrigger(expression="0 0 6 * * ?", start_at=start),
        CalendarIntervalTrigger(start_at=start, repeat_interval=1),
        DailyTimeIntervalTrigger(start_at=start, start_time_of_day=time_of_day(6)),
        RecurrenceTrigger(rule="FREQ=DAILY;BYHOUR=6", start_at=start),
    ]
    for trigger in kinds:
        assert trigger.final_fire_time() is None, trigger.kind
        trigger.end_at = end
        last = trigger.final_fire_time()
        assert last is not None and last <= end, trigger.kind
        assert trigger.next_fire_time_after(last) is None, trigger.kind
