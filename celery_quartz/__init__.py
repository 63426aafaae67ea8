"""celery-quartz: Quartz's clustered scheduler for Celery.

Run ``celery -A proj beat -S celery_quartz.Scheduler`` on as many machines as you like against
one SQL database; every occurrence fires once. See the README and docs/.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from celery_quartz.affinity import PreferredNode
    from celery_quartz.audit import Actor, acting_as, current_actor
    from celery_quartz.beat import Scheduler
    from celery_quartz.calendars import (
        AnnualCalendar,
        Calendar,
        CronCalendar,
        DailyCalendar,
        HolidayCalendar,
        MonthlyCalendar,
        WeeklyCalendar,
    )
    from celery_quartz.client import Quartz
    from celery_quartz.clock import Clock, FakeClock, SystemClock
    from celery_quartz.context import JobExecutionContext, current_context
    from celery_quartz.cron import CronExpression, CronFormat
    from celery_quartz.job import Job
    from celery_quartz.keys import JobKey, TriggerKey
    from celery_quartz.lifecycle import SchedulerStatus
    from celery_quartz.limits import ExecutionLimits, ExecutionLimitScope
    from celery_quartz.overlap import OverlapPolicy
    from celery_quartz.retry import RetryPolicy
    from celery_quartz.triggers import (
        REPEAT_INDEFINITELY,
        CalendarIntervalTrigger,
        CronMisfireInstruction,
        CronTrigger,
        DailyTimeIntervalTrigger,
        IntervalUnit,
        MisfireInstruction,
        RecurrenceTrigger,
        SimpleMisfireInstruction,
        SimpleTrigger,
        Trigger,
    )
    from celery_quartz.triggers.base import TriggerDetailsUpdate
    from celery_quartz.worker import install

__all__ = [
    "REPEAT_INDEFINITELY",
    "Actor",
    "AnnualCalendar",
    "Calendar",
    "CalendarIntervalTrigger",
    "Clock",
    "CronCalendar",
    "CronExpression",
    "CronFormat",
    "CronMisfireInstruction",
    "CronTrigger",
    "DailyCalendar",
    "DailyTimeIntervalTrigger",
    "ExecutionLimitScope",
    "ExecutionLimits",
    "FakeClock",
    "HolidayCalendar",
    "IntervalUnit",
    "Job",
    "JobExecutionContext",
    "JobKey",
    "MisfireInstruction",
    "MonthlyCalendar",
    "OverlapPolicy",
    "PreferredNode",
    "Quartz",
    "RecurrenceTrigger",
    "RetryPolicy",
    "Scheduler",
    "SchedulerStatus",
    "SimpleMisfireInstruction",
    "SimpleTrigger",
    "SystemClock",
    "Trigger",
    "TriggerDetailsUpdate",
    "TriggerKey",
    "WeeklyCalendar",
    "acting_as",
    "current_actor",
    "current_context",
    "install",
]
__version__ = "0.1.0"


#: Each public name -> the module that defines it. Imported on first use, so that importing a
#: light module (``celery_quartz.cron``, ``celery_quartz.triggers``) loads neither SQLAlchemy nor
#: Celery's worker, and ``celery.beat`` is imported only by processes that run a scheduler.
_EXPORTS = {
    "PreferredNode": "affinity",
    **dict.fromkeys(("Actor", "acting_as", "current_actor"), "audit"),
    **dict.fromkeys(
        (
            "AnnualCalendar",
            "Calendar",
            "CronCalendar",
            "DailyCalendar",
            "HolidayCalendar",
            "MonthlyCalendar",
            "WeeklyCalendar",
        ),
        "calendars",
    ),
    "Quartz": "client",
    **dict.fromkeys(("Clock", "FakeClock", "SystemClock"), "clock"),
    **dict.fromkeys(("JobExecutionContext", "current_context"), "context"),
    **dict.fromkeys(("CronExpression", "CronFormat"), "cron"),
    "Job": "job",
    **dict.fromkeys(("JobKey", "TriggerKey"), "keys"),
    "SchedulerStatus": "lifecycle",
    **dict.fromkeys(("ExecutionLimits", "ExecutionLimitScope"), "limits"),
    "OverlapPolicy": "overlap",
    "RetryPolicy": "retry",
    **dict.fromkeys(
        (
            "REPEAT_INDEFINITELY",
            "CalendarIntervalTrigger",
            "CronMisfireInstruction",
            "CronTrigger",
            "DailyTimeIntervalTrigger",
            "IntervalUnit",
            "MisfireInstruction",
            "RecurrenceTrigger",
            "SimpleMisfireInstruction",
            "SimpleTrigger",
            "Trigger",
        ),
        "triggers",
    ),
    "TriggerDetailsUpdate": "triggers.base",
    "install": "worker",
    "Scheduler": "beat",
}


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'celery_quartz' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"celery_quartz.{module}"), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
