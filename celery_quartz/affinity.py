"""Node affinity: which Celery worker a trigger's firings prefer (Quartz's preferred node).

A pin is a strong preference with failover, never a hard constraint: while the pinned worker
checks in, the trigger's firings are sent to its own queue; when it does not, any eligible worker
runs them (see docs/affinity.md). The node is a Celery worker's node name (``celery@host``).

Storage is two columns, ``preferred_node`` and ``preferred_node_auto``, with no marker string in
either, so no worker name is reserved by the storage form (a worker may be called ``auto:thing``
or ``*-west``)::

    PreferredNode.NONE                     (NULL, false)
    PreferredNode.AUTO, unclaimed          (NULL, true)
    PreferredNode.AUTO claimed by W        (W,    true)
    PreferredNode.for_node(W)              (W,    false)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from celery_quartz.errors import ValidationError

#: Longest node name the store accepts (the width of its node-name columns), as keys.py bounds keys.
MAX_NODE_NAME_LENGTH = 255

#: Spellings that mean "automatic" or "none" in Quartz's protocol; refused as node names so that a
#: pin read back from any Quartz tooling cannot be mistaken for a marker.
RESERVED_NODE_NAMES = frozenset({"*", "_"})

#: How a configuration or scheduling file spells an automatic pin.
AUTO_SPELLING = "*"


@dataclass(frozen=True, slots=True, repr=False)
class PreferredNode:
    """A trigger's preferred node: none, automatic (claimed by the first worker to start a
    firing, or not yet), or a worker named by the user.

    Build it with :meth:`for_node`, :attr:`AUTO` or :attr:`NONE`; it is immutable and hashable,
    so a trigger rebuilt or copied carries the same pin with its auto-claim flag.
    """

    #: No pin: the firing goes to its execution group's queue (or its job's own routing).
    NONE: ClassVar[PreferredNode]
    #: An automatic pin no worker has claimed yet: the first worker that starts a firing of the
    #: trigger claims it.
    AUTO: ClassVar[PreferredNode]

    #: The pinned worker's node name; ``None`` when unpinned or an unclaimed automatic pin.
    node: str | None
    #: True for an automatic pin (claimed or not), false for a pin the user named.
    is_automatic: bool

    def __post_init__(self) -> None:
        if not isinstance(self.is_automatic, bool):
            raise ValidationError(
                f"preferred node: is_automatic must be a bool, not {self.is_automatic!r}"
            )
        if self.node is not None:
            _check_node_name(self.node)

    @classmethod
    def for_node(cls, node: str) -> PreferredNode:
        """A pin to the worker ``node`` (its Celery node name, e.g. ``celery@host-1``).

        Refuses ``None``, a non-string, the empty name, the reserved markers ``*`` and ``_``, and
        names longer than :data:`MAX_NODE_NAME_LENGTH`.
        """
        if node is None:
            raise ValidationError(
                "preferred node None: name a worker, or use PreferredNode.NONE for no pin"
            )
        return cls(node, False)

    @classmethod
    def parse(cls, text: str | None, *, owner: str | None = None) -> PreferredNode:
        """Read a pin as a configuration or scheduling file spells it: ``*`` is automatic,
        absent (``None`` or empty) is no pin, anything else names a worker.

        ``owner`` (e.g. ``"trigger DEFAULT.nightly"``) prefixes the error of a refused name, so a
        file reader's message names the trigger at fault.
        """
        if text is None or text == "":
            return cls.NONE
        if text == AUTO_SPELLING:
            return cls.AUTO
        try:
            return cls.for_node(text)
        except ValidationError as error:
            if owner is None:
                raise
            raise ValidationError(f"{owner}: {error}") from None

    @classmethod
    def from_columns(cls, node: str | None, automatic: bool) -> PreferredNode:
        """The pin stored as (``preferred_node``, ``preferred_node_auto``).

        What the store holds is taken as it is, unchecked: this runs for every trigger row read,
        acquisition included, and a name written by another tool must not stop acquisition.
        Unpinned and unclaimed rows share the two singletons instead of allocating.
        """
        if node is None:
            return cls.AUTO if automatic else cls.NONE
        pin = object.__new__(cls)
        object.__setattr__(pin, "node", node)
        object.__setattr__(pin, "is_automatic", bool(automatic))
        return pin

    def to_columns(self) -> tuple[str | None, bool]:
        """(``preferred_node``, ``preferred_node_auto``) as stored."""
        return self.node, self.is_automatic

    def claimed_by(self, worker: str) -> PreferredNode:
        """This automatic pin, claimed by ``worker`` (what the store writes when a worker
        starts a firing of the trigger)."""
        if not self.is_automatic:
            raise ValidationError(f"{self!r} is not an automatic pin: only those are claimed")
        return PreferredNode(worker, True)

    @property
    def is_none(self) -> bool:
        """True when the trigger has no preference at all."""
        return self.node is None and not self.is_automatic

    def __repr__(self) -> str:
        if self.is_automatic:
            return "PreferredNode.AUTO" + (
                "" if self.node is None else f".claimed_by({self.node!r})"
            )
        if self.node is None:
            return "PreferredNode.NONE"
        return f"PreferredNode.for_node({self.node!r})"


def _check_node_name(node: object) -> None:
    if not isinstance(node, str):
        raise ValidationError(
            f"preferred node {node!r}: a node name is a string (a Celery worker's node name), "
            f"not {type(node).__name__}"
        )
    if node == "":
        raise ValidationError("preferred node '': the node name is empty")
    if node in RESERVED_NODE_NAMES:
        raise ValidationError(
            f"preferred node {node!r} is reserved: use PreferredNode.AUTO for an automatic pin, "
            "PreferredNode.NONE for none"
        )
    if len(node) > MAX_NODE_NAME_LENGTH:
        raise ValidationError(
            f"preferred node {node[:40]!r}... is {len(node)} characters; "
            f"at most {MAX_NODE_NAME_LENGTH}"
        )


PreferredNode.NONE = PreferredNode(None, False)
PreferredNode.AUTO = PreferredNode(None, True)
