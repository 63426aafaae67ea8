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

from dataclasses import dataclass

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


@dataclass(frozen=True)
class ExpiredOutcome:
    """What becomes of a firing whose message expired unstarted: published again, or dropped;
    ``why`` says which rule decided, for the log."""

    republish: bool
    why: str


def expired_firing_outcome(
    trigger: Trigger | None, *, recovering: bool, expired_count: int
) -> ExpiredOutcome:
    """Resolve a firing no worker started before its message expired, by its trigger's misfire
    instruction. ``trigger`` is the trigger as stored (COMPLETE once it has fired its last
    occurrence: it is kept until its last firing ends), None once it was removed by the user.
    A recovery firing runs whatever the instruction; a firing that expired once already is
    dropped, so a queue nobody consumes ends with nothing in flight."""
    if expired_count:
        return ExpiredOutcome(False, "it expired again after being published again")
    if trigger is None:
        return ExpiredOutcome(False, "no worker started it and its trigger has been removed")
    if recovering:
        return ExpiredOutcome(True, "a recovery firing runs however late")
    if runs_missed_occurrence(trigger):
        return ExpiredOutcome(True, "its misfire instruction runs a missed occurrence now")
    return ExpiredOutcome(
        False, "no worker started it and its misfire instruction skips a missed occurrence"
    )
