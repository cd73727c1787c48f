"""Queue allocation: RocketMQ's average, circle, config and machine-room strategies.

Every member of a consumer group computes its own share locally, from the same inputs, and
a group may mix mqcore consumers with Java or C++ RocketMQ consumers. A strategy here
therefore returns exactly what RocketMQ's strategy of the same name returns, in the same
order, for every input, including RocketMQ's quirks.

Who sorts: the caller. RocketMQ's rebalance sorts ``mq_all`` and ``cid_all`` (Java string
order) before it calls a strategy, and no strategy sorts again; a strategy keeps the order it
is given and its result follows ``mq_all``'s order. :func:`sorted_queues` and
:func:`sorted_cids` reproduce the rebalance's sort.

The consistent-hash strategy lives in :mod:`mqcore.plugins.allocate_consistent_hash`, the
nearby-machine-room proxy in :mod:`mqcore.plugins.allocate_nearby`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar, TypeVar

import attrs

from mqcore.errors import InvalidArgumentError
from mqcore.hookspecs import RegisterAllocators, hookimpl
from mqcore.logs import get_logger
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

log = get_logger(__name__)

S = TypeVar("S")


# --- RocketMQ's ordering and string helpers -------------------------------------------------


def java_string_key(text: str) -> bytes:
    """A sort key that orders strings as Java's ``String.compareTo`` does.

    Java compares UTF-16 code units, Python compares code points; the two differ only when
    characters above U+FFFF meet characters in U+E000..U+FFFF. Big-endian UTF-16 bytes
    compare in code-unit order, so they make an exact key.
    """
    return text.encode("utf-16-be", "surrogatepass")


def _queue_key(mq: MessageQueue) -> tuple[bytes, bytes, int]:
    return (java_string_key(mq.topic), java_string_key(mq.broker_name), mq.queue_id)


def sorted_queues(mq_all: Iterable[MessageQueue]) -> list[MessageQueue]:
    """``mq_all`` sorted as RocketMQ's rebalance sorts it: topic, broker name, queue id."""
    return sorted(mq_all, key=_queue_key)


def sorted_cids(cid_all: Iterable[str]) -> list[str]:
    """Consumer ids sorted as RocketMQ's rebalance sorts them (Java string order)."""
    return sorted(cid_all, key=java_string_key)


def java_split(text: str, sep: str) -> list[str]:
    """``text.split(sep)`` with Java's ``String.split`` semantics for a literal separator.

    Java drops trailing empty strings, so ``"room@"`` gives one part and ``"a@b@"`` two.
    """
    if sep not in text:
        return [text]
    parts = text.split(sep)
    while parts and not parts[-1]:
        parts.pop()
    return parts


# --- the checks every RocketMQ strategy but CONFIG runs --------------------------------------


def _as_list(value: Any, what: str) -> list[Any]:
    if isinstance(value, (set, frozenset)):
        raise InvalidArgumentError(
            f"{what} is a {type(value).__name__}, which has no order; pass a list sorted as "
            f"the rebalance sorts it (see sorted_queues / sorted_cids)"
        )
    return list(value)


def check_allocate_args(
    strategy: str,
    consumer_group: str,
    current_cid: str,
    mq_all: Sequence[MessageQueue] | None,
    cid_all: Sequence[str] | None,
) -> tuple[list[MessageQueue], list[str]] | None:
    """RocketMQ's input check, shared by the strategies.

    Returns ``mq_all`` and ``cid_all`` as lists, or ``None`` (after logging a warning) when
    ``current_cid`` is not a member of ``cid_all``: that member then owns nothing.

    :raises InvalidArgumentError: ``current_cid``, ``mq_all`` or ``cid_all`` is empty.
    """
    if not current_cid:
        raise InvalidArgumentError(
            f"current_cid is empty ({current_cid!r}); pass this consumer's client id"
        )
    if not mq_all:
        raise InvalidArgumentError(
            f"mq_all is empty ({mq_all!r}); pass every queue of the topic, sorted"
        )
    if not cid_all:
        raise InvalidArgumentError(
            f"cid_all is empty ({cid_all!r}); pass every consumer id of group "
            f"{consumer_group!r}, sorted"
        )
    mqs = _as_list(mq_all, "mq_all")
    cids = _as_list(cid_all, "cid_all")
    if current_cid not in cids:
        # RocketMQ logs this as a bug and hands out nothing; the next rebalance repairs it.
        log.warning(
            "allocate_cid_not_in_group",
            strategy=strategy,
            group=consumer_group,
            cid=current_cid,
            cid_all=cids,
        )
        return None
    return mqs, cids


def strategy_factory(cls: type[S]) -> Callable[..., S]:
    """A ``factory(**options)`` for an attrs strategy class, rejecting unknown options.

    Misspelt options raise :class:`InvalidArgumentError` naming the strategy and the options
    it takes, instead of a bare ``TypeError`` from ``__init__``.
    """
    accepted = sorted(a.alias or a.name for a in attrs.fields(cls) if a.init)  # type: ignore[arg-type]
    label = getattr(cls, "name", cls.__name__)

    def factory(**options: Any) -> S:
        unknown = sorted(set(options) - set(accepted))
        if unknown:
            takes = ", ".join(accepted) if accepted else "no options"
            raise InvalidArgumentError(
                f"allocator {label!r} got unknown option(s) {', '.join(unknown)}; it takes: {takes}"
            )
        return cls(**options)

    factory.__name__ = f"make_{label}"
    factory.__doc__ = f"Build a {cls.__name__} from keyword options ({', '.join(accepted)})."
    return factory


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
