"""What a misfire instruction means for an occurrence that was missed after it fired.

Triggers that are late before they fire are handled by their own ``update_after_misfire`` (see
:mod:`celery_quartz.triggers`). A firing can also be missed *after* the trigger fired: its message
was published but no worker started it before it expired (no consumer, a broker that lost it, a
worker killed with the message prefetched). Then the occurrence is resolved by the same
instruction:

* instructions that run a missed occurrence now — IgnoreMisfires, FireNow / FireOnceNow, SmartPolicy
  where it means one of those, and a simple trigger's RescheduleNow… — publish the firing again,
  once, with a fresh expiry;
* instructions that skip it — DoNothing, a simple trigger's RescheduleNext…, and SmartPolicy where
  it means one of those — drop it.

A firing already published again once is dropped if it expires a second time, so a queue nobody
consumes ends with nothing in flight rather than a message forever re-sent.
"""

from __future__ import annotations

from celery_quartz.triggers.base import MisfireInstruction, Trigger
from celery_quartz.triggers.simple import SimpleMisfireInstruction, SimpleTrigger

#: Default of ``quartz_misfire_threshold``: seconds late before a trigger's misfire instruction
#: applies (Quartz's ``misfireThreshold``, 60 s); also how long a firing's message lives unstarted.
DEFAULT_MISFIRE_THRESHOLD = 60.0

_SIMPLE_RUNS_NOW = frozenset(
    {
        SimpleMisfireInstruction.IGNORE_MISFIRE_POLICY,
        SimpleMisfireInstruction.FIRE_NOW,
        SimpleMisfireInstruction.RESCHEDULE_NOW_WITH_EXISTING_REPEAT_COUNT,
        SimpleMisfireInstruction.RESCHEDULE_NOW_WITH_REMAINING_REPEAT_COUNT,
    }
)
#: For every other kind: IgnoreMisfires, SmartPolicy (= FireOnceNow) and FireOnceNow (1).
_OTHERS_RUN_NOW = frozenset({MisfireInstruction.IGNORE_MISFIRE_POLICY, 0, 1})


def runs_missed_occurrence(trigger: Trigger) -> bool:
    """Whether ``trigger``'s misfire instruction runs a missed occurrence now (else it skips it)."""
    if isinstance(trigger, SimpleTrigger):
        return trigger.effective_misfire_instruction() in _SIMPLE_RUNS_NOW
    return int(trigger.misfire_instruction) in _OTHERS_RUN_NOW
