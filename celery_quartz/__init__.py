"""celery-quartz: Quartz's clustered scheduler for Celery."""

from celery_quartz.clock import Clock, FakeClock, SystemClock
from celery_quartz.keys import JobKey, TriggerKey

__all__ = ["Clock", "FakeClock", "JobKey", "SystemClock", "TriggerKey"]
__version__ = "0.1.0"
