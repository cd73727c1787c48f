"""``broker``: consumer offsets kept on the broker (RocketMQ's RemoteBrokerOffsetStore).

Clustering consumers share queues, so their progress must live where every member of the
group can see it: on the broker. The store caches offsets in memory (consumer threads update
them after each batch) and commits them to the broker with :meth:`BrokerOffsetStore.persist_all`,
which the consumer calls every 5 s and at shutdown. A consumer that crashes loses at most the
progress made since its last commit; the next owner of the queue re-reads those messages
(at-least-once).

A commit carries only offsets this member changed since it last committed them or read them
from the broker. RocketMQ's client commits every cached offset each time; but a member that
has just taken a queue caches the offset it read, and if the previous owner's last commit
lands after that read, committing the read offset again moves the group back (the broker
logs ``consumer_offset_moved_back``) and the queue is consumed again from there. A member
that took a queue and consumed nothing from it has nothing of its own to say about it.

Options: ``broker``, any object with ``query_consumer_offset(consumer_group, topic, queue_id)
-> int`` (-1 when none) and ``update_consumer_offset(consumer_group, topic, queue_id,
commit_offset)`` (the embedded :class:`~mqcore.Broker` has both); ``group``, the consumer group.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

import attrs

from mqcore.errors import InvalidArgumentError
from mqcore.hookspecs import RegisterOffsetStores, hookimpl
from mqcore.logs import get_logger
from mqcore.message import MessageQueue
from mqcore.plugins.offset_cache import CachedOffsets, OffsetCache, offset_store_factory

__all__ = ["BrokerOffsetStore", "mqcore_register_offset_stores"]

log = get_logger(__name__)

#: What :meth:`BrokerOffsetStore.read_offset` returns when the broker failed (RocketMQ's -2).
READ_FAILED = -2


def _check_broker(instance: Any, attribute: Any, broker: Any) -> None:
    missing = [
        name
        for name in ("query_consumer_offset", "update_consumer_offset")
        if not callable(getattr(broker, name, None))
    ]
    if missing:
        raise InvalidArgumentError(
            f"offset store 'broker' needs a broker with {' and '.join(missing)}(), "
            f"got {broker!r}; pass broker=<a Broker>"
        )


def _check_group(instance: Any, attribute: Any, group: Any) -> None:
    if not isinstance(group, str) or not group.strip():
        raise InvalidArgumentError(f"offset store 'broker' needs a consumer group, got {group!r}")


@attrs.define(eq=False)
class BrokerOffsetStore(CachedOffsets):
    """Offsets of one clustering consumer group, cached here and committed to the broker.

    Thread-safe. Offsets of queues on any broker name go to the one ``broker`` given (the
    embedded broker is the only one).
    """

    name: ClassVar[str] = "broker"

    broker: Any = attrs.field(validator=_check_broker)
    group: str = attrs.field(validator=_check_group)
    _cache: OffsetCache = attrs.field(init=False, factory=OffsetCache)

    def load(self) -> None:
        """Nothing to load: offsets are read from the broker when first needed."""

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool = False) -> None:
        """Cache ``offset`` as the next offset to consume in ``mq``; committed on persist.

        :param increase_only: ignore ``offset`` when it is lower than the cached one.
        """
        self._cache.update(mq, offset, increase_only)

    def read_offset(self, mq: MessageQueue, from_store: bool = False) -> int:
        """The next offset to consume in ``mq``.

        By default the cached offset, asking the broker only when ``mq`` is not cached
        (RocketMQ's MEMORY_FIRST_THEN_STORE); with ``from_store`` always the broker's
        (READ_FROM_STORE). What the broker returns is cached.

        :returns: the offset; -1 when neither knows one; -2 when the broker failed (logged).
        """
        if not from_store:
            cached = self._cache.get(mq)
            if cached is not None:
                return cached
        try:
            offset = int(self.broker.query_consumer_offset(self.group, mq))
        except Exception as exc:
            log.warning(
                "offset_query_failed",
                group=self.group,
                mq=str(mq),
                error=f"{type(exc).__name__}: {exc}",
            )
            return READ_FAILED
        if offset < 0:
            return -1
        self._cache.update(mq, offset)
        self._cache.mark_stored(mq, offset)
        return offset

    def _commit(self, mq: MessageQueue, offset: int) -> bool:
        try:
            self.broker.update_consumer_offset(self.group, mq, offset)
        except Exception as exc:
            # The offset stays cached: the next persist tries again.
            log.error(
                "offset_commit_failed",
                group=self.group,
                mq=str(mq),
                offset=offset,
                error=f"{type(exc).__name__}: {exc}",
            )
            return False
        self._cache.mark_stored(mq, offset)
        return True

    def persist_all(self, mqs: Iterable[MessageQueue]) -> None:
        """Commit the cached offsets of ``mqs`` that changed since they were last committed
        or read from the broker.

        As in RocketMQ, cached queues not in ``mqs`` (no longer owned after a rebalance) are
        dropped from the cache; an empty ``mqs`` does nothing. A failed commit is logged
        (``offset_commit_failed``) and the others still go out.
        """
        mqs = list(mqs)
        if not mqs:
            return
        owned, unused = self._cache.split(mqs)
        for mq in sorted(owned):
            offset = self._cache.changed(mq)
            if offset is not None:
                self._commit(mq, offset)
        for mq in unused:
            self._cache.remove(mq)
            log.info("offset_unused_mq_removed", group=self.group, mq=str(mq))

    def persist(self, mq: MessageQueue) -> None:
        """Commit the cached offset of ``mq`` if it changed since it was last committed or
        read from the broker."""
        offset = self._cache.changed(mq)
        if offset is not None:
            self._commit(mq, offset)

    def _write_one(self, mq: MessageQueue, offset: int) -> None:
        self._commit(mq, offset)


@hookimpl(trylast=True)
def mqcore_register_offset_stores(register: RegisterOffsetStores) -> None:
    """Register ``broker``."""
    register(
        BrokerOffsetStore.name,
        offset_store_factory(BrokerOffsetStore, BrokerOffsetStore.name, ("broker", "group")),
    )
