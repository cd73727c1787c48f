"""consistent_hash: RocketMQ's ring, hash function and lookup, and its own test cases.

The exact shares below were produced by RocketMQ's AllocateMessageQueueConsistentHash on the
same inputs; they pin the MD5 hash, the ``<cid>-<i>`` virtual-node keys, routing by
``str(mq)`` and the ceiling/wrap-around lookup.
"""

from __future__ import annotations

import random

import pytest

from mqcore.errors import InvalidArgumentError
from mqcore.kernel import Kernel
from mqcore.message import MessageQueue
from mqcore.plugins.allocate_consistent_hash import (
    AllocateMessageQueueConsistentHash,
    ConsistentHashRouter,
    java_utf8,
    md5_hash,
)

CID_PREFIX = "CID-"


def queues(n: int) -> list[MessageQueue]:
    """RocketMQ's test data: ``n`` queues of topic_test on one broker."""
    return [MessageQueue("topic_test", "brokerName", i) for i in range(n)]


def cids(n: int) -> list[str]:
    """RocketMQ's test data: ``CID-0``..."""
    return [f"{CID_PREFIX}{i}" for i in range(n)]


def owners(strategy, mq_all: list[MessageQueue], cid_all: list[str]) -> dict[MessageQueue, str]:
    """Queue -> owner, asserting that no queue has two owners."""
    out: dict[MessageQueue, str] = {}
    for cid in cid_all:
        for mq in strategy.allocate("testConsumerGroup", cid, mq_all, cid_all):
            assert mq not in out, f"{mq} owned by {out[mq]} and {cid}"
            out[mq] = cid
    return out


# --- the hash ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("CID-0-0", 1900518137),
        ("MessageQueue [topic=T, brokerName=b1, queueId=0]", 1778817520),
        ("caf\u00e9-1", 1028527577),
        ("x\ud800y", 4261721551),  # Java writes a lone surrogate as '?'
        ("\U0001f600", 704834243),
    ],
)
def test_md5_hash_matches_java(key: str, value: int) -> None:
    assert md5_hash(key) == value


def test_java_utf8_joins_surrogate_pairs_and_replaces_lone_ones() -> None:
    assert java_utf8("a\ud83d\ude00b\ud800c") == "a\U0001f600b?c".encode()
    assert java_utf8("plain") == b"plain"


# --- RocketMQ's expected outcomes -------------------------------------------------------------


def test_rocketmq_twenty_queues_ten_consumers_three_virtual_nodes() -> None:
    strategy = AllocateMessageQueueConsistentHash(virtual_nodes=3)
    mq_all = queues(20)
    got = {c: [mq.queue_id for mq in strategy.allocate("g", c, mq_all, cids(10))] for c in cids(10)}
    assert got == {
        "CID-0": [3, 5, 8, 18, 19],
        "CID-1": [],
        "CID-2": [4],
        "CID-3": [6, 7, 9],
        "CID-4": [],
        "CID-5": [10, 11, 15, 17],
        "CID-6": [],
        "CID-7": [0, 2, 12],
        "CID-8": [1, 13, 14],
        "CID-9": [16],
    }


def test_seed_queues_default_virtual_nodes() -> None:
    strategy = Kernel(autoload=False).allocator("CONSISTENT_HASH")
    mq_all = [MessageQueue("T", b, q) for b in ("b1", "b2") for q in range(4)]
    got = {
        c: [
            f"{mq.broker_name}_q{mq.queue_id}"
            for mq in strategy.allocate("g", c, mq_all, ["c1", "c2", "c3"])
        ]
        for c in ("c1", "c2", "c3")
    }
    assert got == {
        "c1": ["b1_q0", "b1_q2"],
        "c2": ["b1_q1", "b1_q3", "b2_q0", "b2_q1", "b2_q2"],
        "c3": ["b2_q3"],
    }


def test_rocketmq_current_cid_not_in_group() -> None:
    result = AllocateMessageQueueConsistentHash().allocate("", str(2**31 - 1), queues(6), cids(2))
    assert result == []


@pytest.mark.parametrize(
    ("current", "mq_all", "cid_all"),
    [("", queues(6), cids(2)), ("0", None, cids(2)), ("0", queues(6), None)],
)
def test_rocketmq_illegal_arguments(current, mq_all, cid_all) -> None:
    with pytest.raises(ValueError):
        AllocateMessageQueueConsistentHash().allocate("", current, mq_all, cid_all)


def check_rocketmq_remove_then_add(queue_size: int, consumer_size: int) -> None:
    """RocketMQ's scenario: allocate all; remove the first consumer; add ``CID-NEW``.

    Every step covers every queue; removing a consumer moves only its queues, adding one
    moves only queues to the newcomer.
    """
    strategy = AllocateMessageQueueConsistentHash(virtual_nodes=3)
    mq_all = queues(queue_size)
    group = cids(consumer_size)

    before = owners(strategy, mq_all, group)
    assert set(before) == set(mq_all)

    removed, rest = group[0], group[1:]
    after_remove = owners(strategy, mq_all, rest)
    if rest:
        assert set(after_remove) == set(mq_all)
    else:
        assert after_remove == {}
    for mq, owner in before.items():
        if owner != removed:
            assert after_remove[mq] == owner

    added = [*rest, f"{CID_PREFIX}NEW"]
    after_add = owners(strategy, mq_all, added)
    assert set(after_add) == set(mq_all)
    for mq, owner in after_add.items():
        if owner != f"{CID_PREFIX}NEW":
            assert owner == after_remove[mq]


@pytest.mark.parametrize(("queue_size", "consumer_size"), [(20, 10), (10, 20)])
def test_rocketmq_allocate_remove_add(queue_size: int, consumer_size: int) -> None:
    check_rocketmq_remove_then_add(queue_size, consumer_size)


def test_rocketmq_random_cases() -> None:
    rng = random.Random(20)
    for _ in range(10):
        check_rocketmq_remove_then_add(rng.randint(1, 20), rng.randint(1, 20))


# --- options and ring details -----------------------------------------------------------------


def test_virtual_nodes_default_is_rocketmq_s() -> None:
    assert AllocateMessageQueueConsistentHash().virtual_nodes == 10
    assert len(ConsistentHashRouter(["a", "b"])) == 20


@pytest.mark.parametrize("bad", [-1, "3", 2.5, True])
def test_bad_virtual_nodes_is_an_error(bad) -> None:
    with pytest.raises(InvalidArgumentError, match="virtual_nodes") as err:
        Kernel(autoload=False).allocator("consistent_hash", virtual_nodes=bad)
    assert isinstance(err.value, ValueError)


def test_zero_virtual_nodes_routes_nothing() -> None:
    strategy = AllocateMessageQueueConsistentHash(virtual_nodes=0)
    assert strategy.allocate("g", "a", queues(3), ["a"]) == []
    assert ConsistentHashRouter(["a"], 0).route("x") is None


def test_lookup_takes_the_ceiling_point_and_wraps_around() -> None:
    points = {"a-0": 100, "b-0": 200, "x-at-100": 100, "x-low": 5, "x-mid": 150, "x-high": 250}
    ring = ConsistentHashRouter(["a", "b"], 1, hash_function=points.__getitem__)
    assert ring.route("x-low") == "a"
    assert ring.route("x-at-100") == "a"  # a point equal to the hash owns it
    assert ring.route("x-mid") == "b"
    assert ring.route("x-high") == "a"  # past the last point: wrap to the first


def test_duplicate_ids_and_colliding_points_follow_rocketmq() -> None:
    """A repeated id gets points numbered after its first ones; a later equal point wins."""
    seen: list[str] = []

    def collide(key: str) -> int:
        seen.append(key)
        fixed = {"a-1": 7, "b-0": 7, "q": 5}
        return fixed[key] if key in fixed else 1000 + ord(key[0]) * 10 + int(key[-1])

    ring = ConsistentHashRouter(["a", "b", "a"], 2, hash_function=collide)
    # b-0 replaced a-1 at point 7, so "a" held one point when it came again: a-1, a-2.
    assert seen == ["a-0", "a-1", "b-0", "b-1", "a-1", "a-2"]
    assert len(ring) == 4  # 7, a-0, b-1, a-2
    assert ring.route("q") == "a"  # point 7 belongs to "a" again (the later put wins)


def test_custom_hash_function_option() -> None:
    strategy = Kernel(autoload=False).allocator("consistent_hash", hash_function=lambda key: 1)
    # Every point and queue hashes to 1: the last point written owns the ring.
    assert strategy.allocate("g", "b", queues(3), ["a", "b"]) == queues(3)


def test_ring_is_reused_for_the_same_consumers() -> None:
    strategy = AllocateMessageQueueConsistentHash()
    first = strategy.router(["a", "b"])
    assert strategy.router(("a", "b")) is first
    assert strategy.router(["a", "c"]) is not first


def test_routes_by_str_of_the_queue() -> None:
    """Queues are hashed by RocketMQ's MessageQueue.toString()."""
    mq = MessageQueue("T", "broker-a", 0)
    assert str(mq) == "MessageQueue [topic=T, brokerName=broker-a, queueId=0]"
    ring = ConsistentHashRouter(["c1", "c2", "c3"], 10)
    strategy = AllocateMessageQueueConsistentHash()
    owner = ring.route(str(mq))
    assert strategy.allocate("g", owner, [mq], ["c1", "c2", "c3"]) == [mq]
