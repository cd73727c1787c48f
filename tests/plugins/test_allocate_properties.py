"""Hypothesis: shares of a whole group cover every queue exactly once, and stay balanced."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from mqcore.allocation import java_split, sorted_cids, sorted_queues
from mqcore.kernel import Kernel
from mqcore.message import MessageQueue
from mqcore.plugins.allocate import (
    AllocateMessageQueueAveragely,
    AllocateMessageQueueAveragelyByCircle,
    AllocateMessageQueueByMachineRoom,
)
from mqcore.plugins.allocate_consistent_hash import AllocateMessageQueueConsistentHash
from mqcore.plugins.allocate_nearby import AllocateMachineRoomNearby

# Ids mix ASCII, '@', '-', accents and characters on both sides of the surrogate range.
ID_TEXT = st.text(alphabet="ab-@é\ue000\U0001f600", max_size=6)

mq_values = st.builds(
    MessageQueue,
    topic=st.sampled_from(["T", "Topic\U0001f600", "%RETRY%g"]),
    broker_name=st.one_of(st.sampled_from(["broker-a", "broker-b", "r1@b", "r2@b"]), ID_TEXT),
    queue_id=st.integers(min_value=0, max_value=31),
)
# The rebalance hands every member the same sorted lists (see sorted_queues / sorted_cids).
mq_lists = st.lists(mq_values, min_size=1, max_size=48, unique=True).map(sorted_queues)
cid_lists = st.lists(ID_TEXT.filter(bool), min_size=1, max_size=16, unique=True).map(sorted_cids)

SETTINGS = settings(max_examples=150, deadline=None)


def shares(strategy, mq_all, cid_all) -> dict[str, list[MessageQueue]]:
    """Every member's result."""
    return {cid: strategy.allocate("g", cid, mq_all, cid_all) for cid in cid_all}


def assert_exactly_once(result: dict[str, list[MessageQueue]], expected) -> None:
    """The union of all results is ``expected``, each queue exactly once."""
    counts = Counter(mq for share in result.values() for mq in share)
    assert counts == Counter(expected)


def assert_follows_order(result: dict[str, list[MessageQueue]], mq_all) -> None:
    """Each result is a subsequence of mq_all: strategies keep the order they are given."""
    position = {mq: i for i, mq in enumerate(mq_all)}
    for share in result.values():
        indexes = [position[mq] for mq in share]
        assert indexes == sorted(indexes)


def assert_balanced(result: dict[str, list[MessageQueue]]) -> None:
    """Shares differ in size by at most one."""
    sizes = [len(share) for share in result.values()]
    assert max(sizes) - min(sizes) <= 1


@SETTINGS
@given(mq_all=mq_lists, cid_all=cid_lists)
def test_avg_covers_every_queue_once_and_is_balanced(mq_all, cid_all) -> None:
    result = shares(AllocateMessageQueueAveragely(), mq_all, cid_all)
    assert_exactly_once(result, mq_all)
    assert_balanced(result)
    assert_follows_order(result, mq_all)
    # Blocks are contiguous, and earlier members hold the larger ones.
    position = {mq: i for i, mq in enumerate(mq_all)}
    flat = [position[mq] for cid in cid_all for mq in result[cid]]
    assert flat == list(range(len(mq_all)))
    sizes = [len(result[cid]) for cid in cid_all]
    assert sizes == sorted(sizes, reverse=True)


@SETTINGS
@given(mq_all=mq_lists, cid_all=cid_lists)
def test_avg_by_circle_covers_every_queue_once_and_is_balanced(mq_all, cid_all) -> None:
    result = shares(AllocateMessageQueueAveragelyByCircle(), mq_all, cid_all)
    assert_exactly_once(result, mq_all)
    assert_balanced(result)
    assert_follows_order(result, mq_all)
    for index, cid in enumerate(cid_all):
        assert result[cid] == mq_all[index :: len(cid_all)]


@SETTINGS
@given(mq_all=mq_lists, cid_all=cid_lists, virtual_nodes=st.integers(min_value=1, max_value=24))
def test_consistent_hash_covers_every_queue_once(mq_all, cid_all, virtual_nodes) -> None:
    result = shares(
        AllocateMessageQueueConsistentHash(virtual_nodes=virtual_nodes), mq_all, cid_all
    )
    assert_exactly_once(result, mq_all)
    assert_follows_order(result, mq_all)


@SETTINGS
@given(mq_all=mq_lists, cid_all=cid_lists, data=st.data())
def test_consistent_hash_moves_only_the_leaver_s_queues(mq_all, cid_all, data) -> None:
    """Removing one member reassigns only the queues it owned."""
    leaver = data.draw(st.sampled_from(cid_all))
    strategy = AllocateMessageQueueConsistentHash(virtual_nodes=5)
    before = {mq: cid for cid, share in shares(strategy, mq_all, cid_all).items() for mq in share}
    rest = [cid for cid in cid_all if cid != leaver]
    after = {mq: cid for cid, share in shares(strategy, mq_all, rest).items() for mq in share}
    for mq, owner in before.items():
        if owner != leaver:
            assert after[mq] == owner


@SETTINGS
@given(
    mq_all=mq_lists,
    cid_all=cid_lists,
    rooms=st.sets(st.sampled_from(["r1", "r2", "", "broker"]), max_size=3),
)
def test_machine_room_covers_the_kept_queues_once_and_is_balanced(mq_all, cid_all, rooms) -> None:
    strategy = AllocateMessageQueueByMachineRoom(consumer_idcs=rooms)
    result = shares(strategy, mq_all, cid_all)
    kept = [
        mq
        for mq in mq_all
        if len(parts := java_split(mq.broker_name, "@")) == 2 and parts[0] in rooms
    ]
    assert_exactly_once(result, kept)
    assert_balanced(result)
    assert_follows_order(result, kept)


@SETTINGS
@given(
    mq_all=mq_lists,
    cid_all=cid_lists,
    inner=st.sampled_from(["avg", "avg_by_circle", "consistent_hash"]),
)
def test_machine_room_nearby_covers_every_queue_once(mq_all, cid_all, inner) -> None:
    """Rooms are the first character (or 'x' for an empty id): some rooms have no consumer."""
    strategy = AllocateMachineRoomNearby(
        broker_room=lambda mq: mq.broker_name[:1] or "x",
        consumer_room=lambda cid: cid[:1],
        strategy=inner,
    )
    assert_exactly_once(shares(strategy, mq_all, cid_all), mq_all)


@settings(max_examples=30, deadline=None)
@given(mq_all=mq_lists, cid_all=cid_lists, data=st.data())
def test_every_instance_and_group_name_computes_the_same_share(mq_all, cid_all, data) -> None:
    """Members compute locally: a fresh strategy object (another process) agrees."""
    name = data.draw(st.sampled_from(["avg", "avg_by_circle", "consistent_hash"]))
    cid = data.draw(st.sampled_from(cid_all))
    kernel = Kernel(autoload=False)
    first = kernel.allocator(name).allocate("group-a", cid, mq_all, cid_all)
    second = kernel.allocator(name).allocate("group-b", cid, list(mq_all), list(cid_all))
    assert first == second
