"""The five trigger kinds, and what they share (see :mod:`celery_quartz.triggers.base`)."""

from celery_quartz.triggers.base import (
    DEFAULT_PRIORITY,
    TRIGGER_KINDS,
    MisfireInstruction,
    Trigger,
)
from celery_quartz.triggers.cron import CronMisfireInstruction, CronTrigger
from celery_quartz.triggers.simple import (
    REPEAT_INDEFINITELY,
    SimpleMisfireInstruction,
    SimpleTrigger,
)

__all__ = [
    "DEFAULT_PRIORITY",
    "REPEAT_INDEFINITELY",
    "TRIGGER_KINDS",
    "CronMisfireInstruction",
    "CronTrigger",
    "MisfireInstruction",
    "SimpleMisfireInstruction",
    "SimpleTrigger",
    "Trigger",
]
