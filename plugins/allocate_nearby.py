"""``machine_room_nearby``: RocketMQ's ``AllocateMachineRoomNearby`` proxy strategy.

Queues of a machine room go to the consumers in that room, split by a wrapped strategy;
queues of a room without any consumer are shared by all consumers, split by the same
strategy. Two functions say where things run: ``broker_room(mq) -> str`` and
``consumer_room(cid) -> str`` (RocketMQ's ``MachineRoomResolver``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import attrs

from mqcore.allocation import check_allocate_args, java_string_key, strategy_factory
from mqcore.errors import InvalidArgumentError
from mqcore.hookspecs import RegisterAllocators, hookimpl
from mqcore.interfaces import AllocateStrategy
from mqcore.message import MessageQueue
from mqcore.plugins import allocate, allocate_consistent_hash

__all__ = ["AllocateMachineRoomNearby", "bundled_strategy", "mqcore_register_allocators"]

RoomOf = Callable[[Any], str]


def bundled_strategy(name: str, **options: Any) -> AllocateStrategy:
    """A bundled strategy by name (case-insensitive), for wrapping in another strategy.

    Strategies of third-party plugins are not known here: build one with
    ``Kernel().allocator(name, ...)`` and pass the object instead of its name.
    """
    table: dict[str, Callable[..., Any]] = {
        **{n: strategy_factory(c) for n, c in allocate.STRATEGIES.items()},
        "consistent_hash": strategy_factory(
            allocate_consistent_hash.AllocateMessageQueueConsistentHash
        ),
        "machine_room_nearby": strategy_factory(AllocateMachineRoomNearby),
    }
    factory = table.get(name.strip().lower())
    if factory is None:
        raise InvalidArgumentError(
            f"strategy {name!r} is not a bundled allocator ({', '.join(sorted(table))}); for a "
            f"plugin's allocator pass the object: strategy=Kernel().allocator({name!r})"
        )
    strategy: AllocateStrategy = factory(**options)
    return strategy


def _wrapped(value: str | AllocateStrategy | None) -> AllocateStrategy:
    if value is None:
        return bundled_strategy("avg")
    if isinstance(value, str):
        return bundled_strategy(value)
    if not callable(getattr(value, "allocate", None)):
        raise InvalidArgumentError(
            f"strategy must be an allocator name or an object with an allocate() method, "
            f"got {value!r}"
        )
    return value


def _resolver(value: Any, what: str, of: str) -> RoomOf:
    if value is None:
        raise InvalidArgumentError(
            f"allocator 'machine_room_nearby' needs {what}, a function returning the machine "
            f"room of each {of}, e.g. {what}=lambda x: ...split('@')[0]"
        )
    if not callable(value):
        raise InvalidArgumentError(f"{what} must be a function, got {value!r}")
    return value  # type: ignore[no-any-return]


def _broker_resolver(value: Any) -> RoomOf:
    return _resolver(value, "broker_room", "queue")


def _consumer_resolver(value: Any) -> RoomOf:
    return _resolver(value, "consumer_room", "consumer id")


def _room(resolver: RoomOf, item: Any, what: str) -> str:
    room = resolver(item)
    if not isinstance(room, str) or not room:
        raise InvalidArgumentError(
            f"machine room is empty for {what} {item}: the resolver returned {room!r}; it must "
            f"return a non-empty room name"
        )
    return room


@attrs.frozen
class AllocateMachineRoomNearby:
    """``machine_room_nearby``: prefer consumers in the queue's own machine room.

    Options: ``broker_room(mq) -> str``, ``consumer_room(cid) -> str`` (required) and
    ``strategy``, the wrapped strategy (a bundled name or a strategy object; ``"avg"`` by
    default). For ``current_cid`` in room R, the result is the wrapped strategy's share of
    R's queues among R's consumers, followed, room by room in sorted order, by its share of
    each room that has queues but no consumer, among all consumers. An empty room name is
    an error.
    """

    name: ClassVar[str] = "machine_room_nearby"

    broker_room: RoomOf = attrs.field(default=None, converter=_broker_resolver)
    consumer_room: RoomOf = attrs.field(default=None, converter=_consumer_resolver)
    strategy: AllocateStrategy = attrs.field(default=None, converter=_wrapped)

    @property
    def rocketmq_name(self) -> str:
        """RocketMQ's ``getName()``: ``MACHINE_ROOM_NEARBY-`` and the wrapped strategy's name."""
        inner = getattr(self.strategy, "rocketmq_name", None) or str(self.strategy.name).upper()
        return f"MACHINE_ROOM_NEARBY-{inner}"

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        """Queues of ``current_cid``'s room, then its share of rooms without consumers."""
        checked = check_allocate_args(self.name, consumer_group, current_cid, mq_all, cid_all)
        if checked is None:
            return []
        mqs, cids = checked
        room_queues: dict[str, list[MessageQueue]] = {}
        for mq in mqs:
            room_queues.setdefault(_room(self.broker_room, mq, "message queue"), []).append(mq)
        room_consumers: dict[str, list[str]] = {}
        for cid in cids:
            room_consumers.setdefault(_room(self.consumer_room, cid, "consumer id"), []).append(cid)

        result: list[MessageQueue] = []
        here = self.consumer_room(current_cid)
        local = room_queues.pop(here, None)
        if local:
            result += self.strategy.allocate(
                consumer_group, current_cid, local, room_consumers[here]
            )
        # RocketMQ keeps rooms in a TreeMap: orphaned rooms are visited in sorted order.
        for room in sorted(room_queues, key=java_string_key):
            if room not in room_consumers:
                result += self.strategy.allocate(
                    consumer_group, current_cid, room_queues[room], cids
                )
        return result


@hookimpl(trylast=True)
def mqcore_register_allocators(register: RegisterAllocators) -> None:
    """Register ``machine_room_nearby``."""
    register("machine_room_nearby", strategy_factory(AllocateMachineRoomNearby))
