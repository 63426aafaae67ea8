"""The typed ways to hook into celery-quartz: named before and after hooks, in dramatiq's style.

A cross-cutting concern (metrics, tracing, history, audit) is one class implementing the hooks
it needs, beside the core; the core calls them and knows nothing of what they do.

* :class:`StoreHooks`: around each role operation of a store
  (:meth:`celery_quartz.store.SqlStore.add_hooks`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class StoreOperation:
    """One call of a store role operation, as the hooks around it see it."""

    #: The role method's name (``claim``, ``check_in``, ``complete_execution``, …).
    name: str
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]


class StoreHooks(Protocol):
    """Called around every role operation of a store (the methods of the role interfaces in
    :mod:`celery_quartz.store.abc`), in the calling thread.

    Each hook of a store is called before the operation in the order they were added, and after
    it in the reverse order, whether it returned or raised. A hook that raises fails the
    operation: one that must never do so catches its own errors.
    """

    def before_store_operation(self, operation: StoreOperation) -> Any:
        """Called before ``operation`` runs; what it returns is handed to
        :meth:`after_store_operation` (a start time, a span)."""

    def after_store_operation(
        self,
        operation: StoreOperation,
        before: Any,
        *,
        result: Any = None,
        exception: BaseException | None = None,
    ) -> None:
        """Called once ``operation`` returned ``result``, or raised ``exception``; ``before``
        is what :meth:`before_store_operation` returned."""
