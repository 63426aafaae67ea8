"""Quartz's rule for when a silent process counts as dead, shared by failure detection of peers
(:mod:`celery_quartz.cluster`) and the routing of firings to live workers
(:mod:`celery_quartz.routing`)."""

from __future__ import annotations

from typing import Protocol

#: Default of ``quartz_checkin_misfire_threshold``: seconds of silence, beyond its check-in
#: interval, before a process counts as dead.
DEFAULT_CHECKIN_MISFIRE_THRESHOLD = 7.5


class CheckedIn(Protocol):
    """A check-in: when it was last written and how often it is written (milliseconds)."""

    @property
    def last_checkin_millis(self) -> int: ...

    @property
    def checkin_interval_millis(self) -> int: ...


def failed_after(
    peer: CheckedIn, *, now_millis: int, my_last_checkin_millis: int | None, threshold_millis: int
) -> int:
    """The instant (ms) after which ``peer`` counts as dead (Quartz's ``calcFailedIfAfter``).

    A peer gets its own check-in interval, stretched by however long it has been since *our*
    last check-in (if we were paused, so might everyone have been), plus the threshold.
    """
    since_mine = 0 if my_last_checkin_millis is None else now_millis - my_last_checkin_millis
    return (
        peer.last_checkin_millis + max(peer.checkin_interval_millis, since_mine) + threshold_millis
    )
