"""Protocols that plugins implement (besides stores, see :mod:`mqcore.store`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from mqcore.message import MessageQueue

__all__ = ["AllocateStrategy", "DelayScheduler", "MessageFilter", "OffsetStore"]


@runtime_checkable
class AllocateStrategy(Protocol):
    """Decides which queues one member of a consumer group owns.

    Every member computes its share locally from the same inputs, so a strategy must be
    deterministic. The caller (the rebalance) sorts ``mq_all`` and ``cid_all`` first, as
    RocketMQ does; a strategy keeps the order it is given.
    """

    name: str

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        """The queues ``current_cid`` owns."""
        ...


@runtime_checkable
class MessageFilter(Protocol):
    """A compiled filter expression.

    The broker filters in two stages, as RocketMQ does: first on the tags hash code kept in
    the consume queue (:meth:`matches_tags_code`), then on the stored properties without
    decoding the body (:meth:`matches_properties`). Clients call :meth:`matches`.
    ``uses_properties`` tells the store whether the second stage is needed at all.
    """

    expression_type: str
    expression: str
    uses_properties: bool

    def matches(self, message: Any) -> bool:
        """Whether ``message`` (a Message or MessageExt) passes; never raises."""
        ...

    def matches_tags_code(self, tags_code: int) -> bool:
        """Consume-queue stage: may the message with this tags hash code pass?"""
        ...

    def matches_properties(self, properties: Mapping[str, str]) -> bool:
        """Commit-log stage: ``properties`` are all stored properties, TAGS included."""
        ...


@runtime_checkable
class OffsetStore(Protocol):
    """Where a consumer keeps its progress per queue."""

    def load(self) -> None:
        """Read persisted offsets (local stores); a no-op for remote ones."""
        ...

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool = False) -> None:
        """Record ``offset`` as the next offset to consume in ``mq`` (cached)."""
        ...

    def read_offset(self, mq: MessageQueue, from_store: bool = False) -> int:
        """The next offset to consume in ``mq``; -1 when unknown."""
        ...

    def persist_all(self, mqs: Sequence[MessageQueue]) -> None:
        """Write cached offsets of ``mqs`` to where they persist (and forget other queues)."""
        ...

    def persist(self, mq: MessageQueue) -> None:
        """Write the cached offset of one queue to where it persists."""
        ...

    def remove_offset(self, mq: MessageQueue) -> None:
        """Forget ``mq`` (it was rebalanced away)."""
        ...


@runtime_checkable
class DelayScheduler(Protocol):
    """Holds messages until their delivery time, then hands them back for delivery."""

    def deliver_at(self, delay_level: int, store_timestamp: int) -> int:
        """The delivery time (ms) of a message stored at ``store_timestamp``."""
        ...
