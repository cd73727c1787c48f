"""The in-memory half of the offset stores: RocketMQ's per-queue offset cache.

Both bundled offset stores (:mod:`mqcore.plugins.offset_broker` for clustering,
:mod:`mqcore.plugins.offset_local_file` for broadcasting) keep the consumer's progress in
memory and write it out every few seconds; this module holds what they share. It registers
nothing itself.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import attrs

from mqcore.errors import InvalidArgumentError
from mqcore.message import MessageQueue

__all__ = ["CachedOffsets", "OffsetCache", "offset_store_factory"]

S = TypeVar("S")


@attrs.define(eq=False)
class OffsetCache:
    """Thread-safe next-offset-to-consume per :class:`~mqcore.MessageQueue`.

    Consumer threads update it while the persist timer reads it, hence the lock.

    It also remembers, per queue, the offset the store is known to hold (read from it or
    written to it: :meth:`mark_stored`), so that a store can write only what changed since
    (:meth:`changed`).
    """

    _offsets: dict[MessageQueue, int] = attrs.field(init=False, factory=dict)
    _stored: dict[MessageQueue, int] = attrs.field(init=False, factory=dict)
    _lock: threading.Lock = attrs.field(init=False, factory=threading.Lock)

    def update(self, mq: MessageQueue, offset: int, increase_only: bool = False) -> None:
        """Set ``mq``'s offset; with ``increase_only`` a lower offset is ignored.

        ``increase_only`` is what consumers use after processing a batch, so that a slow
        thread finishing late never moves the offset back past a faster one.
        """
        if not isinstance(mq, MessageQueue):
            raise InvalidArgumentError(f"expected a MessageQueue, got {mq!r}")
        with self._lock:
            current = self._offsets.get(mq)
            if current is None or not increase_only or offset > current:
                self._offsets[mq] = offset

    def get(self, mq: MessageQueue) -> int | None:
        """The cached offset of ``mq``, or None."""
        with self._lock:
            return self._offsets.get(mq)

    def remove(self, mq: MessageQueue) -> bool:
        """Forget ``mq``; whether it was cached."""
        with self._lock:
            self._stored.pop(mq, None)
            return self._offsets.pop(mq, None) is not None

    def mark_stored(self, mq: MessageQueue, offset: int) -> None:
        """Note that the store holds ``offset`` for ``mq`` (just read from it or written)."""
        with self._lock:
            self._stored[mq] = offset

    def changed(self, mq: MessageQueue) -> int | None:
        """The cached offset of ``mq`` when it differs from the one the store is known to
        hold (or the store's is unknown); None when it is not cached or unchanged."""
        with self._lock:
            offset = self._offsets.get(mq)
            if offset is None or self._stored.get(mq) == offset:
                return None
            return offset

    def snapshot(self, topic: str | None = None) -> dict[MessageQueue, int]:
        """A copy of the cached offsets, of ``topic`` only when given (and not empty)."""
        with self._lock:
            return {mq: o for mq, o in self._offsets.items() if not topic or mq.topic == topic}

    def split(
        self, mqs: Iterable[MessageQueue]
    ) -> tuple[dict[MessageQueue, int], list[MessageQueue]]:
        """The cached offsets of ``mqs``, and the cached queues that are not in ``mqs``."""
        wanted = set(mqs)
        with self._lock:
            kept = {mq: o for mq, o in self._offsets.items() if mq in wanted}
            others = [mq for mq in self._offsets if mq not in wanted]
        return kept, others


class CachedOffsets:
    """What the offset stores that cache in an :class:`OffsetCache` (``_cache``) share; each
    writes one queue's offset where it keeps them with ``_write_one``."""

    __slots__ = ()
    _cache: OffsetCache

    def _write_one(self, mq: MessageQueue, offset: int) -> None:
        raise NotImplementedError

    def persist(self, mq: MessageQueue) -> None:
        """Write the cached offset of ``mq`` (if any) where the store keeps offsets."""
        offset = self._cache.get(mq)
        if offset is not None:
            self._write_one(mq, offset)

    def remove_offset(self, mq: MessageQueue) -> None:
        """Forget the cached offset of ``mq`` (what was written stays where it was written)."""
        self._cache.remove(mq)

    def clone_offset_table(self, topic: str | None = None) -> dict[MessageQueue, int]:
        """A copy of the cached offsets, of ``topic`` only when given."""
        return self._cache.snapshot(topic)


def offset_store_factory(cls: type[S], label: str, required: tuple[str, ...]) -> Callable[..., S]:
    """A ``factory(**options)`` for an attrs offset store that names bad options clearly.

    :param cls: the store class.
    :param label: its registered name, for messages.
    :param required: options without which it cannot work.
    """
    accepted = sorted(a.alias or a.name for a in attrs.fields(cls) if a.init)  # type: ignore[arg-type]

    def factory(**options: Any) -> S:
        unknown = sorted(set(options) - set(accepted))
        if unknown:
            raise InvalidArgumentError(
                f"offset store {label!r} got unknown option(s) {', '.join(unknown)}; "
                f"it takes: {', '.join(accepted)}"
            )
        missing = [name for name in required if options.get(name) in (None, "")]
        if missing:
            raise InvalidArgumentError(
                f"offset store {label!r} needs option(s) {', '.join(missing)}; "
                f"it takes: {', '.join(accepted)}"
            )
        return cls(**options)

    factory.__name__ = f"make_{label}_offset_store"
    factory.__doc__ = f"Build a {cls.__name__} from keyword options ({', '.join(accepted)})."
    return factory
