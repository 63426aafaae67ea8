"""The five trigger kinds, and what they share (see :mod:`celery_quartz.triggers.base`)."""

from celery_quartz.triggers.base import (
    DEFAULT_PRIORITY,
    TRIGGER_KINDS,
    MisfireInstruction,
    Trigger,
)
from celery_quartz.triggers.calendar_interval import CalendarIntervalTrigger, IntervalUnit
from celery_quartz.triggers.cron import CronMisfireInstruction, CronTrigger
from celery_quartz.triggers.daily_time_interval import (
    ALL_DAYS_OF_WEEK,
    MONDAY_THROUGH_FRIDAY,
    SATURDAY_AND_SUNDAY,
    DailyTimeIntervalTrigger,
)
from celery_quartz.triggers.recurrence import RecurrenceTrigger
from celery_quartz.triggers.simple import (
    REPEAT_INDEFINITELY,
    SimpleMisfireInstruction,
    SimpleTrigger,
)

#: The misfire instructions of calendar-interval, daily-time-interval and recurrence triggers
#: are the cron trigger's (Quartz's values: FIRE_ONCE_NOW = 1, DO_NOTHING = 2).
CalendarIntervalMisfireInstruction = CronMisfireInstruction
DailyTimeIntervalMisfireInstruction = CronMisfireInstruction
RecurrenceMisfireInstruction = CronMisfireInstruction

__all__ = [
    "ALL_DAYS_OF_WEEK",
    "DEFAULT_PRIORITY",
    "MONDAY_THROUGH_FRIDAY",
    "REPEAT_INDEFINITELY",
    "SATURDAY_AND_SUNDAY",
    "TRIGGER_KINDS",
    "CalendarIntervalMisfireInstruction",
    "CalendarIntervalTrigger",
    "CronMisfireInstruction",
    "CronTrigger",
    "DailyTimeIntervalMisfireInstruction",
    "DailyTimeIntervalTrigger",
    "IntervalUnit",
    "MisfireInstruction",
    "RecurrenceMisfireInstruction",
    "RecurrenceTrigger",
    "SimpleMisfireInstruction",
    "SimpleTrigger",
    "Trigger",
]
