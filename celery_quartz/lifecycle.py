"""A scheduler's lifecycle: CREATED, RUNNING, STANDBY, SHUTTING_DOWN, SHUTDOWN.

Quartz 4.x's ``SchedulerStatus`` and its rules, for a scheduler started and stood down by a
leader election (see docs/leadership.md):

* ``start()`` is idempotent and resumes from standby; only the first start runs start-up
  recovery (a non-clustered leader also runs the leader-move pass whenever another leader held
  the epoch since it last led).
* ``standby()`` stops acquiring. It does not stop running jobs, does not release an acquired
  batch (only shutdown does), and does not stop the misfire handler once started. A
  never-started scheduler stands down to CREATED.
* After shutdown, ``start()`` raises "cannot be restarted after shutdown" and ``standby()``
  raises "has been shut down".

:class:`~celery_quartz.loop.SchedulingLoop` holds the status; this module holds the rules, and the
clustering guard checked at start.
"""

from __future__ import annotations

import enum
import logging

from celery_quartz.config import AUTO, CLUSTER_ONLY, NON_CLUSTERED_ONLY, Settings
from celery_quartz.errors import ConfigurationError, SchedulerStateError

logger = logging.getLogger(__name__)


class SchedulerStatus(enum.Enum):
    """Where a scheduler is in its life (Quartz 4.x's ``SchedulerStatus``)."""

    #: Built, not started yet (an election starts it when this process leads).
    CREATED = "CREATED"
    #: Acquiring and firing triggers.
    RUNNING = "RUNNING"
    #: Started, not acquiring: ``start()`` resumes it.
    STANDBY = "STANDBY"
    #: Shutting down: releasing what it holds, checking out.
    SHUTTING_DOWN = "SHUTTING_DOWN"
    #: Shut down; it cannot be started again.
    SHUTDOWN = "SHUTDOWN"

    @property
    def is_shut_down(self) -> bool:
        """Whether the scheduler is shutting down or shut down (it can no longer start)."""
        return self in (SchedulerStatus.SHUTTING_DOWN, SchedulerStatus.SHUTDOWN)


def refuse_start(status: SchedulerStatus, scheduler: str) -> None:
    """Raise if a scheduler in ``status`` may not start."""
    if status.is_shut_down:
        raise SchedulerStateError(
            f"scheduler {scheduler}: cannot be restarted after shutdown; build a new one "
            "(use standby() and start() to pause and resume)"
        )


def refuse_standby(status: SchedulerStatus, scheduler: str) -> None:
    """Raise if a scheduler in ``status`` may not stand down."""
    if status.is_shut_down:
        raise SchedulerStateError(
            f"scheduler {scheduler}: has been shut down; check its status before standby() "
            "(losing leadership while the process stops is ordinary)"
        )


def check_clustering(settings: Settings) -> None:
    """Refuse a configuration that mixes clustered and non-clustered settings, saying why.

    Checked when a scheduler starts, for that scheduler's settings only, so a sibling scheduler
    (another ``quartz_scheduler_name``) can run un-clustered beside a cluster.
    """
    set_here = settings.explicitly_set
    who = f"scheduler {settings.scheduler_name!r}"
    if not settings.clustered:
        wrong = sorted(f"quartz_{n}" for n in CLUSTER_ONLY if n in set_here)
        if wrong:
            raise ConfigurationError(
                f"{who}: {', '.join(wrong)} configure(s) clustering, but quartz_clustered is "
                "False: a non-clustered scheduler detects no failed peers, so the setting would "
                "do nothing. Remove it, or turn clustering on (and leave it on) for every node."
            )
    else:
        wrong = sorted(
            f"quartz_{n}" for n in NON_CLUSTERED_ONLY if n in set_here and getattr(settings, n)
        )
        if wrong:
            raise ConfigurationError(
                f"{who}: {', '.join(wrong)} elects one leader for a non-clustered scheduler, but "
                "quartz_clustered is True: a cluster needs no election (every node schedules). "
                "Set quartz_clustered = False to run under the election."
            )


def warn_generated_instance_id(settings: Settings, instance_id: str) -> None:
    """A non-clustered scheduler with a generated id loses unpublished firings at a leader move."""
    if not settings.clustered and settings.instance_id == AUTO:
        logger.warning(
            "non-clustered scheduler %r runs with a generated instance id (%s): when the leader "
            "moves, the firings it fired but did not publish are dropped, not published again. "
            "Set quartz_instance_id to one fixed name for every replica (it names the leader, "
            "of which there is one). See docs/leadership.md.",
            settings.scheduler_name,
            instance_id,
        )
