"""The run history's vocabulary: what became of an occurrence, how long history is kept, and the
histograms its statistics are merged from (docs/history.md).

Every finished execution is recorded with a :class:`RunResult` of :data:`RUN_RESULTS`; every
occurrence that was owed and did not run with one of :data:`NOT_RUN_RESULTS` and a reason. The
store writes them (the worker in the transaction that ends the firing, the scheduler where it
decides a non-run); this module decides nothing about a database.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from enum import Enum


class RunResult(str, Enum):
    """What became of a firing, or of an occurrence that did not run."""

    #: The task returned.
    SUCCEEDED = "succeeded"
    #: The task raised (and no retry was scheduled), or was killed at its hard time limit.
    FAILED = "failed"
    #: Revoked, or revoked with ``terminate=True`` while it ran.
    CANCELLED = "cancelled"
    #: The worker, or its pool process, died while it ran; its job does not request recovery.
    INTERRUPTED = "interrupted"
    #: The worker died while it ran, and a recovery firing runs the occurrence again.
    RECOVERED = "recovered"
    #: The task raised and its retry policy scheduled a retry.
    RETRIED = "retried"
    #: Not run: missed by more than the misfire threshold; the reason names the instruction.
    MISFIRED = "misfired"
    #: Not run: its message expired unstarted and was dropped, or published again.
    EXPIRED = "expired"
    #: Not run when due: held back by an execution-group limit or by ``disallow_concurrent``.
    HELD = "held"
    #: Not run: skipped (the trigger's overlap policy).
    SKIPPED = "skipped"

    @property
    def ran(self) -> bool:
        """Whether this result is of an execution (rather than of an occurrence not run)."""
        return self in RUN_RESULTS


#: The results of an execution that started.
RUN_RESULTS = frozenset(
    {
        RunResult.SUCCEEDED,
        RunResult.FAILED,
        RunResult.CANCELLED,
        RunResult.INTERRUPTED,
        RunResult.RECOVERED,
        RunResult.RETRIED,
    }
)
#: The results of an occurrence that was owed and did not run (when it was due).
NOT_RUN_RESULTS = frozenset(
    {RunResult.MISFIRED, RunResult.EXPIRED, RunResult.HELD, RunResult.SKIPPED}
)
#: The results that count as a failure in a job's status (consecutive failures, failure count).
FAILURE_RESULTS = frozenset({RunResult.FAILED, RunResult.INTERRUPTED})


def parse_result(value: str) -> RunResult:
    """The result named ``value``; a ValueError naming the accepted values otherwise."""
    try:
        return RunResult(value.strip().lower())
    except ValueError:
        accepted = ", ".join(r.value for r in RunResult)
        raise ValueError(f"unknown result {value!r}: use one of {accepted}") from None


# -- bounds ------------------------------------------------------------------------------------

#: Longest summary a task may report; a longer one is dropped, with a log line.
MAX_SUMMARY_CHARS = 1000
#: Largest JSON encoding of the metrics a task reports; larger ones are dropped, with a log line.
MAX_METRICS_BYTES = 4096
#: Largest JSON encoding of a run's args (and of its kwargs) kept for "Run again"; larger ones
#: are not kept (Run again then uses the job's current arguments).
MAX_ARGUMENTS_BYTES = 4096
#: Longest exception type and message kept (longer ones are cut).
MAX_ERROR_TYPE_CHARS = 200
MAX_ERROR_MESSAGE_CHARS = 1000


# -- retention ---------------------------------------------------------------------------------

#: How long history is kept by default.
DEFAULT_HISTORY_RETENTION = timedelta(days=7)
#: Most history rows kept per scheduler name by default.
DEFAULT_HISTORY_MAX_ROWS = 1_000_000
#: How long the audit is kept by default.
DEFAULT_AUDIT_RETENTION = timedelta(days=365)


@dataclass(frozen=True)
class HistoryRetention:
    """How long history rows are kept: ``max_age`` for every result unless ``max_age_by_result``
    names a longer (or shorter) one, at most ``max_rows_per_trigger`` rows per trigger and
    ``max_rows`` per scheduler name (None: no cap). A ``max_age`` of zero records nothing."""

    max_age: timedelta = DEFAULT_HISTORY_RETENTION
    max_age_by_result: Mapping[RunResult, timedelta] = field(default_factory=dict)
    max_rows_per_trigger: int | None = None
    max_rows: int | None = DEFAULT_HISTORY_MAX_ROWS
    audit_max_age: timedelta = DEFAULT_AUDIT_RETENTION

    @property
    def records(self) -> bool:
        """Whether history is recorded at all."""
        return self.max_age > timedelta(0)

    def age_of(self, result: RunResult) -> timedelta:
        """How long a row of ``result`` is kept."""
        return self.max_age_by_result.get(result, self.max_age)


# -- histograms --------------------------------------------------------------------------------

#: Bins per doubling of a histogram: a percentile read from one is within about 9% of the
#: true value (half a bin's width, 2 ** (1/8) - 1).
BINS_PER_DOUBLING = 4
#: The last bin holds every value at or above its lower bound (2 ** (127/4) ms: about 41 days).
LAST_BIN = 127


def histogram_bin(millis: int) -> int:
    """The bin of a duration (or lateness) of ``millis`` (a negative one counts as 0)."""
    if millis <= 0:
        return 0
    return min(LAST_BIN, int(math.log2(millis + 1) * BINS_PER_DOUBLING))


def bin_value(index: int) -> int:
    """The value a bin stands for: its geometric midpoint, in milliseconds."""
    low = 2 ** (index / BINS_PER_DOUBLING) - 1
    high = 2 ** ((index + 1) / BINS_PER_DOUBLING) - 1
    return round(math.sqrt(max(low, 0.5) * high)) if index else 0


def merge_histograms(histograms: Iterable[Mapping[int, int]]) -> dict[int, int]:
    """The sum of ``histograms`` (bin → count)."""
    merged: dict[int, int] = {}
    for histogram in histograms:
        for index, count in histogram.items():
            merged[index] = merged.get(index, 0) + count
    return merged


def percentile(histogram: Mapping[int, int], q: float) -> int | None:
    """The ``q`` quantile (0 < q ≤ 1) of the values counted in ``histogram``, as its bin's
    value; None when it is empty."""
    total = sum(histogram.values())
    if not total:
        return None
    rank = q * total
    seen = 0
    for index in sorted(histogram):
        seen += histogram[index]
        if seen >= rank:
            return bin_value(index)
    return bin_value(max(histogram))
