"""machine_room_nearby: RocketMQ's AllocateMachineRoomNearby scenarios and details."""

from __future__ import annotations

import random

import pytest

from mqcore.errors import InvalidArgumentError
from mqcore.kernel import Kernel
from mqcore.message import MessageQueue
from mqcore.plugins.allocate import AllocateMessageQueueAveragelyByCircle
from mqcore.plugins.allocate_consistent_hash import AllocateMessageQueueConsistentHash
from mqcore.plugins.allocate_nearby import AllocateMachineRoomNearby, bundled_strategy

TOPIC = "topic_test"


def broker_room(mq: MessageQueue) -> str:
    """RocketMQ's test resolver: the room is the broker name up to the first '-'."""
    return mq.broker_name.split("-")[0]


def consumer_room(cid: str) -> str:
    """RocketMQ's test resolver: the room is the client id up to the first '-'."""
    return cid.split("-")[0]


def nearby(strategy="avg") -> AllocateMachineRoomNearby:
    """The strategy under test, built through the kernel as a user would."""
    return Kernel(autoload=False).allocator(
        "machine_room_nearby",
        broker_room=broker_room,
        consumer_room=consumer_room,
        strategy=strategy,
    )


def room_queues(room: str, n: int) -> list[MessageQueue]:
    """``n`` queues of broker ``<room>-brokerName``."""
    return [MessageQueue(TOPIC, f"{room}-brokerName", i) for i in range(n)]


def prepare_mq(rooms: int, per_room: int) -> list[MessageQueue]:
    """Queues in rooms IDC1..IDCn."""
    return [mq for r in range(1, rooms + 1) for mq in room_queues(f"IDC{r}", per_room)]


def prepare_consumers(rooms: int, per_room: int) -> list[str]:
    """Consumers ``IDC<r>-CID-<i>`` in rooms IDC1..IDCn."""
    return [f"IDC{r}-CID-{i}" for r in range(1, rooms + 1) for i in range(per_room)]


def allocate_all(strategy, mq_all, cid_all) -> dict[str, list[MessageQueue]]:
    """Every member's share."""
    return {cid: strategy.allocate("Test-C-G", cid, mq_all, cid_all) for cid in cid_all}


def assert_allocates_all(shares: dict[str, list[MessageQueue]], mq_all) -> None:
    """Every queue exactly once (RocketMQ's hasAllocateAllQ, with multiplicity)."""
    flat = [mq for share in shares.values() for mq in share]
    if not shares:
        assert flat == []
        return
    assert sorted(flat) == sorted(mq_all)


# --- RocketMQ's scenarios ---------------------------------------------------------------------


def check_same_rooms(rooms: int, queue_size: int, consumer_size: int) -> None:
    """Brokers and consumers in the same rooms: every queue stays in its room."""
    cid_all = prepare_consumers(rooms, consumer_size)
    mq_all = prepare_mq(rooms, queue_size)
    shares = allocate_all(nearby(), mq_all, cid_all)
    for cid, share in shares.items():
        assert all(broker_room(mq) == consumer_room(cid) for mq in share)
    assert_allocates_all(shares, mq_all)


def check_more_consumer_rooms(broker_rooms: int, more: int, queue_size: int, size: int) -> None:
    """Consumers also in rooms without brokers: queues of served rooms stay in their room."""
    cid_all = prepare_consumers(broker_rooms + more, size)
    mq_all = prepare_mq(broker_rooms, queue_size)
    served = {broker_room(mq) for mq in mq_all}
    shares = allocate_all(nearby(), mq_all, cid_all)
    for cid, share in shares.items():
        for mq in share:
            if broker_room(mq) in served:
                assert broker_room(mq) == consumer_room(cid)
    assert_allocates_all(shares, mq_all)


def check_fewer_consumer_rooms(broker_rooms: int, less: int, queue_size: int, size: int) -> None:
    """Rooms without consumers are shared; each served room's consumers get all its queues."""
    cid_all = prepare_consumers(broker_rooms - less, size)
    mq_all = prepare_mq(broker_rooms, queue_size)
    shares = allocate_all(nearby(), mq_all, cid_all)
    per_room: dict[str, list[MessageQueue]] = {}
    for cid, share in shares.items():
        per_room.setdefault(consumer_room(cid), []).extend(share)
    for room in {consumer_room(c) for c in cid_all}:
        assert set(room_queues(room, queue_size)) <= set(per_room[room])
    assert_allocates_all(shares, mq_all)


@pytest.mark.parametrize("consumers", [10, 20, 30, 0])
def test_rocketmq_same_rooms(consumers: int) -> None:
    check_same_rooms(5, 20, consumers)


@pytest.mark.parametrize("consumers", [10, 5, 20, 0])
def test_rocketmq_more_consumer_rooms(consumers: int) -> None:
    check_more_consumer_rooms(5, 1, 10, consumers)


@pytest.mark.parametrize("consumers", [10, 5, 20, 0])
def test_rocketmq_fewer_consumer_rooms(consumers: int) -> None:
    check_fewer_consumer_rooms(5, 2, 10, consumers)


def test_rocketmq_random_cases() -> None:
    rng = random.Random(10)
    for _ in range(10):
        consumers, queue_size = rng.randint(1, 40), rng.randint(1, 30)
        broker_rooms, consumer_rooms = rng.randint(1, 10), rng.randint(1, 10)
        if broker_rooms == consumer_rooms:
            check_same_rooms(broker_rooms, queue_size, consumers)
        elif broker_rooms > consumer_rooms:
            check_fewer_consumer_rooms(
                broker_rooms, broker_rooms - consumer_rooms, queue_size, consumers
            )
        else:
            check_more_consumer_rooms(
                broker_rooms, consumer_rooms - broker_rooms, queue_size, consumers
            )


# --- exact shares and order -------------------------------------------------------------------


def test_exact_shares_as_rocketmq() -> None:
    """Own room first (avg among the room), then the orphaned room IDC3 (avg among all)."""
    mq_all = prepare_mq(3, 3)
    cid_all = prepare_consumers(2, 2)
    got = {
        cid: [f"{broker_room(mq)}:{mq.queue_id}" for mq in share]
        for cid, share in allocate_all(nearby(), mq_all, cid_all).items()
    }
    assert got == {
        "IDC1-CID-0": ["IDC1:0", "IDC1:1", "IDC3:0"],
        "IDC1-CID-1": ["IDC1:2", "IDC3:1"],
        "IDC2-CID-0": ["IDC2:0", "IDC2:1", "IDC3:2"],
        "IDC2-CID-1": ["IDC2:2"],
    }


def test_orphaned_rooms_are_visited_in_sorted_order() -> None:
    """Rooms without consumers come in sorted room order, whatever mq_all's order."""
    mq_all = room_queues("zz", 1) + room_queues("aa", 1) + room_queues("mm", 1)
    result = nearby().allocate("g", "home-c", mq_all, ["home-c"])
    assert [broker_room(mq) for mq in result] == ["aa", "mm", "zz"]


def test_consumer_not_in_group_gets_nothing() -> None:
    assert nearby().allocate("g", "IDC9-x", prepare_mq(1, 2), ["IDC1-a"]) == []


def test_wrapped_strategy_by_name_or_object() -> None:
    mq_all, cid_all = prepare_mq(1, 5), prepare_consumers(1, 2)
    by_name = nearby("AVG_BY_CIRCLE").allocate("g", cid_all[0], mq_all, cid_all)
    by_object = nearby(AllocateMessageQueueAveragelyByCircle()).allocate(
        "g", cid_all[0], mq_all, cid_all
    )
    assert [mq.queue_id for mq in by_name] == [mq.queue_id for mq in by_object] == [0, 2, 4]


def test_rocketmq_name_includes_the_wrapped_strategy() -> None:
    assert nearby().rocketmq_name == "MACHINE_ROOM_NEARBY-AVG"
    assert nearby(AllocateMessageQueueConsistentHash(virtual_nodes=3)).rocketmq_name == (
        "MACHINE_ROOM_NEARBY-CONSISTENT_HASH"
    )
    assert nearby().name == "machine_room_nearby"


# --- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize("empty", ["", None])
def test_empty_broker_room_is_an_error(empty) -> None:
    strategy = AllocateMachineRoomNearby(broker_room=lambda mq: empty, consumer_room=consumer_room)
    with pytest.raises(InvalidArgumentError, match="machine room is empty for message queue"):
        strategy.allocate("g", "IDC1-a", prepare_mq(1, 1), ["IDC1-a"])


def test_empty_consumer_room_is_an_error() -> None:
    strategy = AllocateMachineRoomNearby(broker_room=broker_room, consumer_room=lambda c: "")
    with pytest.raises(InvalidArgumentError, match="consumer id IDC1-a") as err:
        strategy.allocate("g", "IDC1-a", prepare_mq(1, 1), ["IDC1-a"])
    assert isinstance(err.value, ValueError)


def test_empty_inputs_are_checked_before_resolving_rooms() -> None:
    with pytest.raises(InvalidArgumentError, match="mq_all is empty"):
        nearby().allocate("g", "IDC1-a", [], ["IDC1-a"])


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"consumer_room": consumer_room}, "needs broker_room"),
        ({"broker_room": broker_room}, "needs consumer_room"),
        ({"broker_room": "IDC1", "consumer_room": consumer_room}, "must be a function"),
        (
            {"broker_room": broker_room, "consumer_room": consumer_room, "strategy": "sticky"},
            r"not a bundled allocator.*Kernel\(\)\.allocator\('sticky'\)",
        ),
        (
            {"broker_room": broker_room, "consumer_room": consumer_room, "strategy": 42},
            "allocate",
        ),
    ],
)
def test_bad_options(options, match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        Kernel(autoload=False).allocator("machine_room_nearby", **options)


def test_bundled_strategy_passes_options() -> None:
    strategy = bundled_strategy("Consistent_Hash", virtual_nodes=4)
    assert isinstance(strategy, AllocateMessageQueueConsistentHash)
    assert strategy.virtual_nodes == 4
