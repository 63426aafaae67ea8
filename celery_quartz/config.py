"""Settings, read from Celery's ``app.conf`` (``quartz_*`` keys), with documented defaults."""

from __future__ import annotations

import os
import re
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import timedelta
from typing import Any

from celery_quartz.audit import DEFAULT_REDACT_KEYS
from celery_quartz.errors import ConfigurationError, RetryPolicyError
from celery_quartz.history import (
    DEFAULT_HISTORY_MAX_ROWS,
    DEFAULT_HISTORY_RETENTION,
    HistoryRetention,
    parse_result,
)
from celery_quartz.job import DEFAULT_MAX_DATA_BYTES
from celery_quartz.keys import DEFAULT_GROUP, JobKey
from celery_quartz.limits import ExecutionLimits
from celery_quartz.liveness import DEFAULT_CHECKIN_MISFIRE_THRESHOLD
from celery_quartz.misfire import DEFAULT_MISFIRE_THRESHOLD
from celery_quartz.retry import RetryPolicy
from celery_quartz.routing import Router
from celery_quartz.table_prefix import DEFAULT_TABLE_PREFIX

AUTO = "AUTO"
#: A store's name in ``quartz_dashboard_stores`` (never a ``:``: the dashboard addresses a
#: scheduler of a named store as ``STORE:SCHEDULER``).
STORE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
#: Values of ``quartz_election``: none, a PostgreSQL advisory lock, a Redis lock.
ELECTIONS = ("", "postgresql", "redis")
#: Values of ``quartz_health_overdue_jobs``: what a job past its success deadline makes health.
HEALTH_OVERDUE_JOBS = ("degraded", "unhealthy")
#: Settings that mean something only to a clustered scheduler (failure detection of peers).
CLUSTER_ONLY = ("checkin_misfire_threshold",)
#: Settings that mean something only to a non-clustered scheduler.
NON_CLUSTERED_ONLY = ("election",)
#: Settings whose ``None`` means something (no cap), so one set to None is not a default.
_NONE_MEANS_SOMETHING = ("history_max_rows_per_trigger", "history_max_rows")


@dataclass(frozen=True)
class Settings:
    """Every ``quartz_*`` setting; the README's settings table lists the same names and defaults."""

    #: SQLAlchemy URL of the store. ``sqlite:///quartz.db`` is the embedded default.
    store_url: str = "sqlite:///quartz.db"
    #: Logical scheduler (cluster) name: processes with the same name share the work.
    scheduler_name: str = ""  # empty: the Celery app's main name, or "celery"
    #: Unique per process; ``AUTO`` generates host-pid-milliseconds.
    instance_id: str = AUTO
    #: Prefix of every table's name; each prefix has its own tables and schema version.
    table_prefix: str = DEFAULT_TABLE_PREFIX
    #: Clustered (several schedulers on one database) is the default.
    clustered: bool = True
    #: Longest sleep when nothing is due, seconds; also how far ahead a trigger may be acquired.
    idle_wait: float = 1.0
    #: Most triggers acquired in one transaction.
    batch_size: int = 100
    #: Triggers due up to this many seconds after the first of a batch fire with it (early).
    fire_ahead_window: float = 0.0
    #: A trigger this many seconds late is handled by its misfire instruction.
    misfire_threshold: float = DEFAULT_MISFIRE_THRESHOLD
    #: Most misfired triggers handled in one round of the misfire handler.
    max_misfires_per_round: int = 20
    #: Seconds between check-ins of a scheduler or worker.
    checkin_interval: float = 7.5
    #: Longest a worker process holds a successful execution's end to record it with others
    #: (one statement for many); 0 records each end at once (docs/worker.md).
    worker_completion_delay: float = 0.1
    #: Extra seconds of silence, beyond the check-in interval, before a peer is declared dead.
    checkin_misfire_threshold: float = DEFAULT_CHECKIN_MISFIRE_THRESHOLD
    #: Bound on the JSON encoding of job data, args, kwargs, options and trigger data.
    max_job_data_bytes: int = DEFAULT_MAX_DATA_BYTES
    #: Create or upgrade the tables (Alembic) when a scheduler starts. Off, a scheduler or worker
    #: refuses to start on tables older than its version (run ``quartz schema upgrade`` first).
    schema_auto_upgrade: bool = True
    #: Import ``beat_schedule`` into the store when a scheduler starts.
    import_beat_schedule: bool = True
    #: At shutdown, wait for the firings this scheduler published to finish on the workers.
    shutdown_wait_for_jobs: bool = False
    #: The most seconds that wait may take.
    shutdown_timeout: float = 30.0
    #: Start the scheduler with ``celery beat``; off, it is built and left in CREATED until
    #: something (an election, application code) calls ``start()``.
    auto_start: bool = True
    #: A built-in leader election for a non-clustered scheduler: ``"postgresql"`` (an advisory
    #: lock on the store's database) or ``"redis"`` (a lock with renewal); empty for none.
    election: str = ""
    #: Redis URL of the ``"redis"`` election; empty: the broker URL.
    election_redis_url: str = ""
    #: Sentinel master name when that URL is ``sentinel://…``; empty: the broker's
    #: ``broker_transport_options["master_name"]``.
    election_redis_master_name: str = ""
    #: Seconds a Redis election lock lives without renewal (renewed every third of it).
    election_lock_timeout: float = 10.0
    #: Seconds between attempts to become leader, and between checks that the lock is held.
    election_retry_interval: float = 1.0
    #: Port of beat's HTTP health endpoint (``/healthz``, ``/livez``); None (default): off.
    health_port: int | None = None
    #: Address that endpoint binds.
    health_address: str = "127.0.0.1"
    #: More overdue triggers than this (due by more than the misfire threshold) make the health
    #: report degraded; None (default): overdue triggers are reported, never judged.
    health_overdue_threshold: int | None = None
    #: Success deadlines of jobs defined elsewhere (docs/history.md#success-deadlines): a
    #: mapping of ``"group.name"`` (split at the last dot), ``"name"`` (the DEFAULT group) or a
    #: ``(group, name)`` pair to seconds or a timedelta; a deadline stored on the job
    #: (``Job(require_success_within=...)``) wins. None by default.
    require_success_within: Any = field(default=None, compare=False)
    #: What a job past its success deadline makes the health report: ``"degraded"`` (default)
    #: or ``"unhealthy"``.
    health_overdue_jobs: str = "degraded"
    #: Register the store gauges (``quartz.trigger.count`` and the rest) on the global meter.
    metrics_gauges: bool = True
    # -- the run history's retention and its sweep (docs/history.md#retention) ---------------
    #: Seconds rows of a result are kept where it differs from ``history_retention``: a
    #: mapping of result name to seconds (or a timedelta).
    history_retention_by_result: Any = field(
        default_factory=lambda: {"failed": 30 * 86400.0}, compare=False
    )
    #: Most history rows kept per trigger, the oldest deleted first; None: no cap.
    history_max_rows_per_trigger: int | None = 10_000
    #: Most history rows kept per scheduler name, the oldest deleted first; None: no cap.
    history_max_rows: int | None = DEFAULT_HISTORY_MAX_ROWS
    #: Seconds audit rows are kept (a timedelta is accepted).
    audit_retention: Any = 365 * 86400.0
    #: Seconds between two sweeps of the history (one scheduler of the cluster at a time).
    history_sweep_interval: float = 10.0
    #: The retry policy of triggers and jobs that have none of their own: a ``RetryPolicy``
    #: or its stored form (``"f:3:30000"``); None (default): no retry
    #: (docs/steering.md#retries-continued).
    default_retry_policy: Any = field(default=None, compare=False)
    #: Pause a trigger whose occurrence fails with no retry left (a trigger's own
    #: ``pause_when_retries_exhausted`` wins); the failure's message is the reason.
    pause_when_retries_exhausted: bool = False
    #: Execution limits (see :mod:`celery_quartz.limits`): an ``ExecutionLimits`` or a mapping
    #: of group to limit; none by default (nothing is capped).
    execution_limits: Any = field(default=None, compare=False)
    #: Scheduling files (``quartz_jobs.xml``, ``.json``, ``.yaml``) loaded into the store when a
    #: scheduler starts: a path or a list of paths; none by default.
    scheduling_files: Any = field(default=(), compare=False)
    #: Seconds between checks that a scheduling file changed (then all are loaded again);
    #: 0: at start only (Quartz's plugin ``scanInterval``).
    scheduling_files_scan_interval: float = 0.0
    # -- the run history (docs/history.md) ---------------------------------------------------
    #: Seconds history rows are kept (a ``timedelta`` is accepted too); 0 records nothing: no
    #: history row and no run status is written.
    history_retention: float = DEFAULT_HISTORY_RETENTION.total_seconds()
    # -- the dashboard and HTTP API (``celery quartz dashboard``, docs/dashboard.md) ----------
    #: Interface the dashboard listens on.
    dashboard_address: str = "127.0.0.1"
    #: Port the dashboard listens on.
    dashboard_port: int = 5566
    #: Path the dashboard is served under behind a proxy (``/quartz``); empty: the root.
    dashboard_url_prefix: str = ""
    #: Dotted path of the authorization policy, called on every request with (principal,
    #: scheduler name, action); empty: bearer tokens from ``dashboard_tokens``.
    dashboard_authorization: str = ""
    #: Bearer tokens: a mapping of token to principal name, or to ``{"principal": ...,
    #: "schedulers": [...], "write": bool}``; none set refuses every request.
    dashboard_tokens: Any = field(default=None, compare=False, repr=False)
    #: Let requests without a token read (never write).
    dashboard_anonymous_read: bool = False
    #: Refuse every write, whatever the policy says; the pages show no action buttons.
    dashboard_read_only: bool = False
    #: Task names the API may schedule jobs of (each must also be registered); None: any
    #: registered task.
    dashboard_allowed_tasks: Any = field(default=None, compare=False)
    #: Job and trigger data under keys matching this regular expression (case-insensitive)
    #: are shown redacted, and recorded redacted in the audit.
    dashboard_redact_keys: str = DEFAULT_REDACT_KEYS
    #: A BLOCKED trigger this many seconds past its fire time is listed as owed.
    dashboard_blocked_threshold: float = 300.0
    #: Seconds between the pages' live refreshes; 0 turns them off.
    dashboard_poll_interval: float = 5.0
    #: Key that signs the forms' CSRF tokens; empty: a random key per process (set one when
    #: several dashboard processes serve the same users).
    dashboard_secret_key: str = field(default="", repr=False)
    #: Proxies whose X-Forwarded-For/-Proto headers are trusted (comma-separated, ``*``: any).
    dashboard_forwarded_allow_ips: str = "127.0.0.1"
    #: Several stores in one dashboard, and the CLI's ``--store NAME``: a mapping of a store's
    #: name to its URL, or to ``{"url": ..., "table_prefix": ...}``; none (default): the app's
    #: store only (docs/operations.md#past-one-database).
    dashboard_stores: Any = field(default=None, compare=False, repr=False)
    #: The ``quartz_*`` keys the application set itself (for the clustering guard).
    explicitly_set: frozenset[str] = field(
        default=frozenset(), compare=False, repr=False, metadata={"internal": True}
    )

    def __post_init__(self) -> None:
        if isinstance(self.history_retention, timedelta):
            object.__setattr__(self, "history_retention", self.history_retention.total_seconds())

    @property
    def records_history(self) -> bool:
        """Whether the run history is recorded (``quartz_history_retention`` above 0)."""
        return self.history_retention > 0

    @classmethod
    def from_app(cls, app: Any) -> Settings:
        conf = app.conf
        values: dict[str, Any] = {}
        for f in fields(cls):
            key = f"quartz_{f.name}"
            value = conf.get(key) if f.name != "explicitly_set" else None
            if value is not None or (f.name in _NONE_MEANS_SOMETHING and key in conf):
                values[f.name] = value
        settings = cls(**values, explicitly_set=frozenset(values))
        if not settings.scheduler_name:
            settings = _replace(settings, scheduler_name=app.main or "celery")
        settings.validate()
        return settings

    def validate(self) -> None:
        def positive(name: str, allow_zero: bool = False) -> None:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigurationError(f"quartz_{name} must be a number, got {value!r}")
            if value < 0 or (value == 0 and not allow_zero):
                raise ConfigurationError(f"quartz_{name} must be positive, got {value!r}")

        for name in (
            "idle_wait",
            "misfire_threshold",
            "checkin_interval",
            "batch_size",
            "max_misfires_per_round",
            "max_job_data_bytes",
        ):
            positive(name)
        for name in ("election_lock_timeout", "election_retry_interval"):
            positive(name)
        for name in (
            "fire_ahead_window",
            "checkin_misfire_threshold",
            "worker_completion_delay",
            "shutdown_timeout",
            "scheduling_files_scan_interval",
            "history_retention",
        ):
            positive(name, allow_zero=True)
        # A count of 2.5 would reach SQL LIMIT, and a string such as "false" (say, from an
        # environment variable) would silently mean True.
        for name in ("batch_size", "max_misfires_per_round", "max_job_data_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int):
                raise ConfigurationError(f"quartz_{name} must be a whole number, got {value!r}")
        for name in (
            "clustered",
            "schema_auto_upgrade",
            "import_beat_schedule",
            "shutdown_wait_for_jobs",
            "auto_start",
            "dashboard_anonymous_read",
            "dashboard_read_only",
            "pause_when_retries_exhausted",
        ):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise ConfigurationError(f"quartz_{name} must be True or False, got {value!r}")
        if not isinstance(self.store_url, str) or "://" not in self.store_url:
            raise ConfigurationError(
                f"quartz_store_url must be a SQLAlchemy URL, got {self.store_url!r}"
            )
        if self.election not in ELECTIONS:
            raise ConfigurationError(
                f"quartz_election must be one of {', '.join(map(repr, ELECTIONS))}, "
                f"got {self.election!r}"
            )
        for name in ("health_port", "health_overdue_threshold"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 0
            ):
                raise ConfigurationError(
                    f"quartz_{name} must be a whole number (0 or more), got {value!r}"
                )
        if self.health_port is not None and self.health_port > 65535:
            raise ConfigurationError(f"quartz_health_port must be a port, got {self.health_port}")
        if not isinstance(self.metrics_gauges, bool):
            raise ConfigurationError(
                f"quartz_metrics_gauges must be True or False, got {self.metrics_gauges!r}"
            )
        if self.health_overdue_jobs not in HEALTH_OVERDUE_JOBS:
            raise ConfigurationError(
                "quartz_health_overdue_jobs must be one of "
                f"{', '.join(map(repr, HEALTH_OVERDUE_JOBS))}, got {self.health_overdue_jobs!r}"
            )
        self.success_deadlines  # noqa: B018  (raises on a bad value)
        self.retry_default  # noqa: B018  (raises on a bad value)
        ExecutionLimits.coerce(self.execution_limits)
        self.scheduling_file_paths  # noqa: B018  (raises on a bad value)
        self._validate_dashboard()
        self.history_retention_policy()  # raises on a bad value
        if not self.instance_id or len(self.instance_id) > 200:
            raise ConfigurationError(
                f"quartz_instance_id {self.instance_id!r}: 1 to 200 characters"
            )

    def _validate_dashboard(self) -> None:
        import re

        port = self.dashboard_port
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ConfigurationError(f"quartz_dashboard_port must be 0 to 65535, got {port!r}")
        prefix = self.dashboard_url_prefix
        if not isinstance(prefix, str) or (prefix and not prefix.startswith("/")):
            raise ConfigurationError(
                f"quartz_dashboard_url_prefix must be empty or start with '/', got {prefix!r}"
            )
        for name in ("blocked_threshold", "poll_interval"):
            value = getattr(self, f"dashboard_{name}")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ConfigurationError(
                    f"quartz_dashboard_{name} must be a number of seconds, got {value!r}"
                )
        try:
            re.compile(self.dashboard_redact_keys)
        except (re.error, TypeError) as exc:
            raise ConfigurationError(
                f"quartz_dashboard_redact_keys {self.dashboard_redact_keys!r}: {exc}"
            ) from None
        tokens = self.dashboard_tokens
        if tokens is not None and not isinstance(tokens, dict):
            raise ConfigurationError(
                "quartz_dashboard_tokens must be a mapping of token to principal"
            )
        self.stores()  # validates quartz_dashboard_stores
        allowed = self.dashboard_allowed_tasks
        if allowed is not None and (
            isinstance(allowed, str) or not all(isinstance(t, str) for t in allowed)
        ):
            raise ConfigurationError(
                f"quartz_dashboard_allowed_tasks must be a list of task names, got {allowed!r}"
            )

    def history_retention_policy(self) -> HistoryRetention:
        """How long history and audit rows are kept, from the ``history_*`` and
        ``audit_retention`` settings (validated: a bad value raises naming its setting)."""
        return _retention_policy(self)

    def stores(self) -> dict[str, Settings]:
        """``dashboard_stores`` as settings of their own, by store name (empty when none is
        configured): each is these settings on the store's URL and table prefix."""
        return _stores(self)

    def for_store(self, name: str) -> Settings:
        """These settings on the store named ``name`` in ``dashboard_stores``."""
        stores = self.stores()
        if name not in stores:
            known = ", ".join(sorted(stores)) or "none: set quartz_dashboard_stores"
            raise ConfigurationError(f"no store named {name!r} (configured: {known})")
        return stores[name]

    @property
    def scheduling_file_paths(self) -> list[str]:
        """``scheduling_files`` as a list of paths (validated by :meth:`validate`)."""
        value = self.scheduling_files
        if isinstance(value, (str, os.PathLike)):
            value = [value]
        if not isinstance(value, (list, tuple)) or not all(
            isinstance(p, (str, os.PathLike)) and os.fspath(p) for p in value
        ):
            raise ConfigurationError(
                f"quartz_scheduling_files must be a path or a list of paths, got {value!r}"
            )
        return [os.fspath(p) for p in value]

    @property
    def success_deadlines(self) -> dict[JobKey, timedelta]:
        """``require_success_within`` by job key (validated by :meth:`validate`)."""
        value = self.require_success_within
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise ConfigurationError(
                "quartz_require_success_within must be a mapping of job to seconds or a "
                f"timedelta, got {value!r}"
            )
        found: dict[JobKey, timedelta] = {}
        for name, deadline in value.items():
            where = f"quartz_require_success_within[{name!r}]"
            found[_job_key_of(where, name)] = _deadline_of(where, deadline)
        return found

    @property
    def retry_default(self) -> RetryPolicy | None:
        """``quartz_default_retry_policy`` as a policy (None: none set)."""
        return _retry_policy_of(self.default_retry_policy)

    @property
    def limits(self) -> ExecutionLimits:
        """``execution_limits`` as an :class:`ExecutionLimits` (validated by :meth:`validate`)."""
        return ExecutionLimits.coerce(self.execution_limits)

    def router(self, default_queue: str = "celery") -> Router:
        """How this scheduler routes and admits firings; ``default_queue`` is the Celery app's
        ``task_default_queue`` (whose consumers serve the ungrouped triggers)."""
        return Router(
            self.limits,
            default_queue=default_queue,
            threshold_millis=int(self.checkin_misfire_threshold * 1000),
        )

    def resolve_instance_id(self) -> str:
        """This process's instance id: the configured one, or a generated one for ``AUTO``."""
        if self.instance_id != AUTO:
            return self.instance_id
        # Two ids generated in one process within the same millisecond must differ (two loops
        # sharing an id would release each other's claims): the milliseconds part moves forward
        # by at least one per id generated in this process.
        global _last_auto_millis
        with _auto_lock:
            millis = max(time.time_ns() // 1_000_000, _last_auto_millis + 1)
            _last_auto_millis = millis
        return f"{socket.gethostname()}-{os.getpid()}-{millis}"


def _job_key_of(where: str, name: Any) -> JobKey:
    """``"group.name"`` (at the last dot), ``"name"`` (DEFAULT group) or ``(group, name)``."""
    if isinstance(name, JobKey):
        return name
    if isinstance(name, tuple) and len(name) == 2 and all(isinstance(p, str) for p in name):
        group, job = name
    elif isinstance(name, str) and name:
        group, _, job = name.rpartition(".")
        group = group or DEFAULT_GROUP
    else:
        raise ConfigurationError(f"{where}: a job as 'group.name', 'name' or (group, name)")
    try:
        return JobKey(job, group)
    except Exception as exc:
        raise ConfigurationError(f"{where}: {exc}") from None


def _deadline_of(where: str, value: Any) -> timedelta:
    if isinstance(value, bool) or not isinstance(value, (int, float, timedelta)):
        raise ConfigurationError(f"{where}: seconds or a timedelta, got {value!r}")
    deadline = value if isinstance(value, timedelta) else timedelta(seconds=value)
    if deadline < timedelta(milliseconds=1):
        raise ConfigurationError(f"{where}: must be positive, got {value!r}")
    return deadline


_auto_lock = threading.Lock()
_last_auto_millis = 0


def _retry_policy_of(value: Any) -> RetryPolicy | None:
    if value is None or isinstance(value, RetryPolicy):
        return value
    if isinstance(value, str):
        try:
            return RetryPolicy.parse(value)
        except RetryPolicyError as exc:
            raise ConfigurationError(f"quartz_default_retry_policy: {exc}") from None
    raise ConfigurationError(
        "quartz_default_retry_policy must be a RetryPolicy or its stored form (such as "
        f"'f:3:30000'), got {value!r}"
    )


def _duration(name: str, value: Any, *, positive: bool = False) -> timedelta:
    """A setting of seconds (or a timedelta) as a timedelta; raises naming the setting."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise ConfigurationError(f"quartz_{name} must be seconds or a timedelta, got {value!r}")
    if seconds < 0 or (positive and seconds == 0):
        raise ConfigurationError(
            f"quartz_{name} must be {'positive' if positive else '0 or more'}, got {value!r}"
        )
    return timedelta(seconds=seconds)


def _replace(settings: Settings, **changes: Any) -> Settings:
    from dataclasses import replace

    return replace(settings, **changes)


def _retention_policy(settings: Settings) -> HistoryRetention:
    """:meth:`Settings.history_retention_policy`."""
    by_result = settings.history_retention_by_result or {}
    if not isinstance(by_result, dict):
        raise ConfigurationError(
            "quartz_history_retention_by_result must be a mapping of result to seconds, "
            f"got {by_result!r}"
        )
    ages = {}
    for name, age in by_result.items():
        try:
            result = parse_result(str(name))
        except ValueError as exc:
            raise ConfigurationError(f"quartz_history_retention_by_result: {exc}") from None
        ages[result] = _duration(f"history_retention_by_result[{name!r}]", age)
    caps = {}
    for name in _NONE_MEANS_SOMETHING:
        value = getattr(settings, name)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise ConfigurationError(
                f"quartz_{name} must be a whole number (1 or more) or None, got {value!r}"
            )
        caps[name] = value
    interval = settings.history_sweep_interval
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) or interval <= 0:
        raise ConfigurationError(
            f"quartz_history_sweep_interval must be a positive number of seconds, got {interval!r}"
        )
    return HistoryRetention(
        max_age=_duration("history_retention", settings.history_retention),
        max_age_by_result=ages,
        max_rows_per_trigger=caps["history_max_rows_per_trigger"],
        max_rows=caps["history_max_rows"],
        audit_max_age=_duration("audit_retention", settings.audit_retention, positive=True),
    )


def _stores(settings: Settings) -> dict[str, Settings]:
    """:meth:`Settings.stores`."""
    configured = settings.dashboard_stores
    if configured is None:
        return {}
    if not isinstance(configured, Mapping) or not configured:
        raise ConfigurationError(
            "quartz_dashboard_stores must be a mapping of a store's name to its URL, got "
            f"{type(configured).__name__}"
        )
    stores: dict[str, Settings] = {}
    for name, value in configured.items():
        if not isinstance(name, str) or not STORE_NAME.fullmatch(name):
            raise ConfigurationError(
                f"quartz_dashboard_stores: store name {name!r}: use 1 to 64 letters, "
                "digits, '.', '_' and '-', starting with a letter or digit"
            )
        if isinstance(value, str):
            value = {"url": value}
        if not isinstance(value, Mapping):
            raise ConfigurationError(
                f"quartz_dashboard_stores[{name!r}] must be a URL or a mapping with 'url' "
                "(and 'table_prefix')"
            )
        unknown = sorted(set(value) - {"url", "table_prefix"})
        if unknown:
            raise ConfigurationError(
                f"quartz_dashboard_stores[{name!r}]: unknown key(s) {', '.join(unknown)}; "
                "use 'url' and 'table_prefix'"
            )
        url = value.get("url")
        if not isinstance(url, str) or "://" not in url:
            raise ConfigurationError(
                f"quartz_dashboard_stores[{name!r}]: 'url' must be a SQLAlchemy URL"
            )
        prefix = value.get("table_prefix", settings.table_prefix)
        if not isinstance(prefix, str):
            raise ConfigurationError(
                f"quartz_dashboard_stores[{name!r}]: 'table_prefix' must be a string"
            )
        stores[name] = _replace(settings, store_url=url, table_prefix=prefix)
    return stores
