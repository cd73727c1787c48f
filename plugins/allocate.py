"""Queue allocation: RocketMQ's average, circle, config and machine-room strategies.

Every member of a consumer group computes its own share locally, from the same inputs, and
a group may mix mqcore consumers with Java or C++ RocketMQ consumers. A strategy here
therefore returns exactly what RocketMQ's strategy of the same name returns, in the same
order, for every input, including RocketMQ's quirks.

Who sorts: the caller. RocketMQ's rebalance sorts ``mq_all`` and ``cid_all`` (Java string
order) before it calls a strategy, and no strategy sorts again; a strategy keeps the order it
is given and its result follows ``mq_all``'s order. The sort and the input checks the
strategies share are the kernel's (:mod:`mqcore.allocation`), re-exported here for the
plugins written against this module.

The consistent-hash strategy lives in :mod:`mqcore.plugins.allocate_consistent_hash`, the
nearby-machine-room proxy in :mod:`mqcore.plugins.allocate_nearby`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

import attrs

from mqcore.allocation import (
    check_allocate_args,
    java_split,
    java_string_key,
    sorted_cids,
    sorted_queues,
    strategy_factory,
)
from mqcore.errors import InvalidArgumentError
from mqcore.hookspecs import RegisterAllocators, hookimpl
from mqcore.message import MessageQueue

__all__ = [
    "AllocateMessageQueueAveragely",
    "AllocateMessageQueueAveragelyByCircle",
    "AllocateMessageQueueByConfig",
    "AllocateMessageQueueByMachineRoom",
    "check_allocate_args",
    "java_split",
    "java_string_key",
    "mqcore_register_allocators",
    "sorted_cids",
    "sorted_queues",
    "strategy_factory",
]

# --- the strategies --------------------------------------------------------------------------


@attrs.frozen
class AllocateMessageQueueAveragely:
    """``avg``: contiguous blocks; the first ``len(mq_all) % len(cid_all)`` members get one more.

    With more consumers than queues the first ``len(mq_all)`` consumers get one queue each
    and the rest get nothing. RocketMQ's default strategy.
    """

    name: ClassVar[str] = "avg"
    rocketmq_name: ClassVar[str] = "AVG"

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        """The contiguous block of ``mq_all`` that ``current_cid`` owns."""
        checked = check_allocate_args(self.name, consumer_group, current_cid, mq_all, cid_all)
        if checked is None:
            return []
        mqs, cids = checked
        index = cids.index(current_cid)
        n_mq, n_cid = len(mqs), len(cids)
        mod = n_mq % n_cid
        gets_extra = mod > 0 and index < mod
        # More consumers than queues: one each (RocketMQ sets 1 even for those left out).
        size = 1 if n_mq <= n_cid else n_mq // n_cid + (1 if gets_extra else 0)
        start = index * size if gets_extra else index * size + mod
        # Past the end when there are more consumers than queues: range() is then empty.
        return [mqs[start + i] for i in range(min(size, n_mq - start))]


@attrs.frozen
class AllocateMessageQueueAveragelyByCircle:
    """``avg_by_circle``: deal the queues out one at a time, member by member (round robin)."""

    name: ClassVar[str] = "avg_by_circle"
    rocketmq_name: ClassVar[str] = "AVG_BY_CIRCLE"

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        """Every ``len(cid_all)``-th queue, starting at ``current_cid``'s index."""
        checked = check_allocate_args(self.name, consumer_group, current_cid, mq_all, cid_all)
        if checked is None:
            return []
        mqs, cids = checked
        return mqs[cids.index(current_cid) :: len(cids)]


def _message_queue_list(value: Iterable[MessageQueue] | None) -> tuple[MessageQueue, ...]:
    if value is None:
        return ()
    if isinstance(value, MessageQueue):
        raise InvalidArgumentError(
            f"message_queues must be a list of MessageQueue, got one MessageQueue {value}; "
            f"wrap it in a list"
        )
    items = tuple(value)
    for item in items:
        if not isinstance(item, MessageQueue):
            raise InvalidArgumentError(
                f"message_queues must hold MessageQueue values, got {item!r}; "
                f'build them as MessageQueue("topic", "broker-a", 0)'
            )
    return items


@attrs.frozen
class AllocateMessageQueueByConfig:
    """``config``: always the configured ``message_queues``, whatever the inputs.

    Like RocketMQ's, it performs no input check at all: every member gets the same list, so
    it suits one consumer pinned to known queues (an empty list when none is configured).
    """

    name: ClassVar[str] = "config"
    rocketmq_name: ClassVar[str] = "CONFIG"

    message_queues: tuple[MessageQueue, ...] = attrs.field(
        default=(), converter=_message_queue_list
    )

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        """The configured queues (a new list each call)."""
        return list(self.message_queues)


def _room_set(value: Iterable[str] | None) -> frozenset[str]:
    if value is None:
        raise InvalidArgumentError(
            "allocator 'machine_room' needs consumer_idcs, the machine rooms this consumer "
            "serves, e.g. consumer_idcs={'room1'}; queues of brokers named 'room1@broker-a' "
            "are then shared"
        )
    if isinstance(value, str):
        raise InvalidArgumentError(
            f"consumer_idcs must be a collection of room names, got the string {value!r}; "
            f"write consumer_idcs={{{value!r}}}"
        )
    return frozenset(value)


@attrs.frozen
class AllocateMessageQueueByMachineRoom:
    """``machine_room``: share the queues of brokers named ``room@broker`` in ``consumer_idcs``.

    A broker name counts only when it splits at ``@`` into exactly two parts (Java's split,
    which drops trailing empty parts). The kept queues are handed out as RocketMQ does, which
    is not ``avg``: every member takes an equal block, then the remainder goes one by one to
    the first members (queue ``index + block * len(cid_all)`` to member ``index``).
    """

    name: ClassVar[str] = "machine_room"
    rocketmq_name: ClassVar[str] = "MACHINE_ROOM"

    consumer_idcs: frozenset[str] = attrs.field(default=None, converter=_room_set)

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        """``current_cid``'s share of the queues in ``consumer_idcs``'s rooms."""
        checked = check_allocate_args(self.name, consumer_group, current_cid, mq_all, cid_all)
        if checked is None:
            return []
        mqs, cids = checked
        index = cids.index(current_cid)
        kept = []
        for mq in mqs:
            parts = java_split(mq.broker_name, "@")
            if len(parts) == 2 and parts[0] in self.consumer_idcs:
                kept.append(mq)
        block, rem = divmod(len(kept), len(cids))
        result = kept[block * index : block * index + block]
        if rem > index:
            result.append(kept[index + block * len(cids)])
        return result


#: The strategies of this module by registered name.
STRATEGIES: dict[str, type[Any]] = {
    cls.name: cls
    for cls in (
        AllocateMessageQueueAveragely,
        AllocateMessageQueueAveragelyByCircle,
        AllocateMessageQueueByConfig,
        AllocateMessageQueueByMachineRoom,
    )
}


@hookimpl(trylast=True)
def mqcore_register_allocators(register: RegisterAllocators) -> None:
    """Register ``avg``, ``avg_by_circle``, ``config`` and ``machine_room``."""
    for name, cls in STRATEGIES.items():
        register(name, strategy_factory(cls))
