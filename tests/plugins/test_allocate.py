"""The avg, avg_by_circle, config and machine_room strategies and their checks.

Expected outcomes come from RocketMQ's own strategy tests (client ``rebalance`` package) and
the seed article's example (8 queues b1_q0..b2_q3, consumers c1..c3).
"""

from __future__ import annotations

import pytest
import structlog

from mqcore.errors import InvalidArgumentError, MQError, NotRegisteredError
from mqcore.interfaces import AllocateStrategy
from mqcore.kernel import Kernel
from mqcore.message import MessageQueue
from mqcore.plugins.allocate import (
    AllocateMessageQueueAveragely,
    AllocateMessageQueueAveragelyByCircle,
    AllocateMessageQueueByConfig,
    AllocateMessageQueueByMachineRoom,
)

BUNDLED = [
    "avg",
    "avg_by_circle",
    "config",
    "consistent_hash",
    "machine_room",
    "machine_room_nearby",
]


@pytest.fixture(scope="module")
def kernel() -> Kernel:
    """A kernel with the bundled plugins only."""
    return Kernel(autoload=False)


def queues(n: int, topic: str = "topic", broker: str = "brokerName") -> list[MessageQueue]:
    """RocketMQ's test data: ``n`` queues of one broker, ids 0..n-1."""
    return [MessageQueue(topic, broker, i) for i in range(n)]


def cids(n: int, prefix: str = "CID_PREFIX") -> list[str]:
    """RocketMQ's test data: consumer ids ``CID_PREFIX0``..."""
    return [f"{prefix}{i}" for i in range(n)]


def seed_queues() -> list[MessageQueue]:
    """The seed example: b1_q0..b1_q3, b2_q0..b2_q3."""
    return [MessageQueue("T", b, q) for b in ("b1", "b2") for q in range(4)]


def plan(strategy: AllocateStrategy, mq_all: list[MessageQueue], cid_all: list[str]) -> dict:
    """Every member's share, as ``{cid: ["b1_q0", ...]}``."""
    return {
        cid: [
            f"{mq.broker_name}_q{mq.queue_id}"
            for mq in strategy.allocate("g", cid, mq_all, cid_all)
        ]
        for cid in cid_all
    }


def ids(result: list[MessageQueue]) -> list[int]:
    """Queue ids of a result, in order."""
    return [mq.queue_id for mq in result]


# --- registry ---------------------------------------------------------------------------------


def test_bundled_names_are_registered(kernel: Kernel) -> None:
    assert set(BUNDLED) <= set(kernel.names("allocator"))


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("AVG", AllocateMessageQueueAveragely),
        ("AVG_BY_CIRCLE", AllocateMessageQueueAveragelyByCircle),
        ("CONFIG", AllocateMessageQueueByConfig),
        ("Avg", AllocateMessageQueueAveragely),
    ],
)
def test_rocketmq_names_select_the_strategy(kernel: Kernel, name: str, cls: type) -> None:
    """RocketMQ's getName() values work as names (the registry ignores case)."""
    strategy = kernel.allocator(name)
    assert type(strategy) is cls
    assert strategy.rocketmq_name == name.upper()
    assert strategy.name == name.lower()


def test_every_bundled_strategy_follows_the_protocol(kernel: Kernel) -> None:
    options = {
        "machine_room": {"consumer_idcs": {"room1"}},
        "machine_room_nearby": {"broker_room": lambda mq: "r", "consumer_room": lambda c: "r"},
    }
    for name in BUNDLED:
        strategy = kernel.allocator(name, **options.get(name, {}))
        assert isinstance(strategy, AllocateStrategy)
        assert strategy.name == name
        assert kernel.allocator(strategy.rocketmq_name.split("-")[0], **options.get(name, {}))


def test_unknown_strategy_lists_registered_names(kernel: Kernel) -> None:
    with pytest.raises(NotRegisteredError) as err:
        kernel.allocator("nope")
    for name in BUNDLED:
        assert name in str(err.value)
    assert set(BUNDLED) <= set(err.value.known)


def test_unknown_option_names_the_strategy_and_its_options(kernel: Kernel) -> None:
    with pytest.raises(
        InvalidArgumentError, match=r"'consistent_hash'.*virtual_node\b.*virtual_nodes"
    ):
        kernel.allocator("consistent_hash", virtual_node=3)
    with pytest.raises(InvalidArgumentError, match="no options"):
        kernel.allocator("avg", virtual_nodes=3)


# --- input checks -----------------------------------------------------------------------------

CHECKED = [
    AllocateMessageQueueAveragely(),
    AllocateMessageQueueAveragelyByCircle(),
    AllocateMessageQueueByMachineRoom(consumer_idcs={"room1"}),
]


@pytest.mark.parametrize("strategy", CHECKED, ids=lambda s: s.name)
@pytest.mark.parametrize(
    ("current", "mq_all", "cid_all", "what"),
    [
        ("", queues(2), cids(2), "current_cid"),
        (None, queues(2), cids(2), "current_cid"),
        ("CID_PREFIX0", [], cids(2), "mq_all"),
        ("CID_PREFIX0", None, cids(2), "mq_all"),
        ("CID_PREFIX0", queues(2), [], "cid_all"),
        ("CID_PREFIX0", queues(2), None, "cid_all"),
    ],
)
def test_empty_input_is_an_error(strategy, current, mq_all, cid_all, what) -> None:
    """Empty current_cid, mq_all or cid_all raise an MQError that is also a ValueError."""
    with pytest.raises(InvalidArgumentError, match=what) as err:
        strategy.allocate("g", current, mq_all, cid_all)
    assert isinstance(err.value, MQError)
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize("strategy", CHECKED, ids=lambda s: s.name)
def test_member_not_in_group_gets_nothing_and_a_warning(strategy) -> None:
    """RocketMQ's circle test: a consumer id outside cid_all owns no queue."""
    with structlog.testing.capture_logs() as logs:
        result = strategy.allocate("g", "CID_PREFIX", queues(10), cids(4))
    assert result == []
    assert [e["event"] for e in logs] == ["allocate_cid_not_in_group"]
    assert logs[0]["log_level"] == "warning"
    assert logs[0]["cid"] == "CID_PREFIX"
    assert logs[0]["group"] == "g"


def test_unordered_input_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="no order"):
        AllocateMessageQueueAveragely().allocate("g", "a", set(queues(3)), ["a"])
    with pytest.raises(InvalidArgumentError, match="no order"):
        AllocateMessageQueueAveragely().allocate("g", "a", queues(3), {"a"})


# --- avg ----------------------------------------------------------------------------------------


def test_avg_seed_example() -> None:
    assert plan(AllocateMessageQueueAveragely(), seed_queues(), ["c1", "c2", "c3"]) == {
        "c1": ["b1_q0", "b1_q1", "b1_q2"],
        "c2": ["b1_q3", "b2_q0", "b2_q1"],
        "c3": ["b2_q2", "b2_q3"],
    }


def test_avg_rocketmq_sizes_10_queues_4_consumers() -> None:
    """RocketMQ: 10 queues over 4 consumers give 3, 3, 2, 2."""
    strategy = AllocateMessageQueueAveragely()
    shares = [strategy.allocate("", c, queues(10), cids(4)) for c in cids(4)]
    assert [len(s) for s in shares] == [3, 3, 2, 2]
    assert [ids(s) for s in shares] == [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]


@pytest.mark.parametrize(
    ("n_mq", "n_cid", "expected"),
    [
        (4, 2, [[0, 1], [2, 3]]),
        (4, 3, [[0, 1], [2], [3]]),
        (4, 4, [[0], [1], [2], [3]]),
        (4, 5, [[0], [1], [2], [3], []]),  # the seed article: the fifth consumer waits
        (1, 3, [[0], [], []]),
        (3, 1, [[0, 1, 2]]),
    ],
)
def test_avg_blocks(n_mq: int, n_cid: int, expected: list[list[int]]) -> None:
    strategy = AllocateMessageQueueAveragely()
    got = [ids(strategy.allocate("g", c, queues(n_mq), cids(n_cid))) for c in cids(n_cid)]
    assert got == expected


def test_avg_keeps_the_given_order() -> None:
    """No strategy sorts: the result follows mq_all's order and cid_all's order."""
    mq_all = list(reversed(queues(4)))
    cid_all = ["z", "a"]
    strategy = AllocateMessageQueueAveragely()
    assert ids(strategy.allocate("g", "z", mq_all, cid_all)) == [3, 2]
    assert ids(strategy.allocate("g", "a", mq_all, cid_all)) == [1, 0]


# --- avg_by_circle ------------------------------------------------------------------------------


def test_avg_by_circle_seed_example() -> None:
    assert plan(AllocateMessageQueueAveragelyByCircle(), seed_queues(), ["c1", "c2", "c3"]) == {
        "c1": ["b1_q0", "b1_q3", "b2_q2"],
        "c2": ["b1_q1", "b2_q0", "b2_q3"],
        "c3": ["b1_q2", "b2_q1"],
    }


def test_avg_by_circle_rocketmq_10_queues_4_consumers() -> None:
    strategy = AllocateMessageQueueAveragelyByCircle()
    shares = {c: ids(strategy.allocate("", c, queues(10), cids(4))) for c in cids(4)}
    assert shares == {
        "CID_PREFIX0": [0, 4, 8],
        "CID_PREFIX1": [1, 5, 9],
        "CID_PREFIX2": [2, 6],
        "CID_PREFIX3": [3, 7],
    }


def test_avg_by_circle_more_consumers_than_queues() -> None:
    strategy = AllocateMessageQueueAveragelyByCircle()
    got = [ids(strategy.allocate("g", c, queues(2), cids(4))) for c in cids(4)]
    assert got == [[0], [1], [], []]


# --- config -------------------------------------------------------------------------------------


def test_config_rocketmq_every_member_gets_the_configured_list(kernel: Kernel) -> None:
    """RocketMQ: with 4 configured queues, both consumers get queues 0, 1, 2, 3."""
    strategy = kernel.allocator("config", message_queues=queues(4))
    for cid in cids(2):
        assert ids(strategy.allocate("", cid, queues(4), cids(2))) == [0, 1, 2, 3]


def test_config_performs_no_input_check() -> None:
    strategy = AllocateMessageQueueByConfig(message_queues=[MessageQueue("T", "broker-a", 0)])
    expected = [MessageQueue("T", "broker-a", 0)]
    assert strategy.allocate("", "", [], []) == expected
    assert strategy.allocate("g", "not-a-member", queues(3), ["x"]) == expected
    assert strategy.allocate(None, None, None, None) == expected


def test_config_returns_a_fresh_list_and_defaults_to_none() -> None:
    strategy = AllocateMessageQueueByConfig(message_queues=queues(2))
    strategy.allocate("g", "a", [], []).clear()
    assert ids(strategy.allocate("g", "a", [], [])) == [0, 1]
    assert AllocateMessageQueueByConfig().allocate("g", "a", queues(2), ["a"]) == []


@pytest.mark.parametrize("bad", [MessageQueue("T", "b", 0), ["T:b:0"], [("T", "b", 0)]])
def test_config_rejects_what_is_not_a_list_of_queues(bad) -> None:
    with pytest.raises(InvalidArgumentError, match="message_queues"):
        AllocateMessageQueueByConfig(message_queues=bad)


# --- machine_room -------------------------------------------------------------------------------


def rocketmq_room_queues(n: int) -> list[MessageQueue]:
    """RocketMQ's data: the first half on room1@broker-a, the rest on room2@broker-b."""
    return [
        MessageQueue("topic", "room1@broker-a" if i < n // 2 else "room2@broker-b", i)
        for i in range(n)
    ]


def test_machine_room_rocketmq_example(kernel: Kernel) -> None:
    """RocketMQ: room1's 5 queues over 2 consumers give [0, 1, 4] and [2, 3]."""
    strategy = kernel.allocator("machine_room", consumer_idcs={"room1"})
    mq_all = rocketmq_room_queues(10)
    assert ids(strategy.allocate("", "CID_PREFIX0", mq_all, cids(2))) == [0, 1, 4]
    assert ids(strategy.allocate("", "CID_PREFIX1", mq_all, cids(2))) == [2, 3]


def test_machine_room_empty_queues_message_as_rocketmq() -> None:
    strategy = AllocateMessageQueueByMachineRoom(consumer_idcs={"room1"})
    with pytest.raises(InvalidArgumentError, match="mq_all is empty"):
        strategy.allocate("", "CID_PREFIX0", [], cids(2))


def test_machine_room_is_not_avg() -> None:
    """Equal blocks first, then the remainder one by one: differs from avg's blocks."""
    mq_all = [MessageQueue("T", "r@b", i) for i in range(7)]
    room = AllocateMessageQueueByMachineRoom(consumer_idcs={"r"})
    avg = AllocateMessageQueueAveragely()
    got = [ids(room.allocate("g", c, mq_all, cids(3))) for c in cids(3)]
    assert got == [[0, 1, 6], [2, 3], [4, 5]]
    assert got != [ids(avg.allocate("g", c, mq_all, cids(3))) for c in cids(3)]


def test_machine_room_more_consumers_than_kept_queues() -> None:
    mq_all = [MessageQueue("T", "r@b", i) for i in range(2)]
    room = AllocateMessageQueueByMachineRoom(consumer_idcs=["r"])
    assert [ids(room.allocate("g", c, mq_all, cids(3))) for c in cids(3)] == [[0], [1], []]


@pytest.mark.parametrize(
    ("broker", "kept"),
    [
        ("room1@broker-a", True),
        ("room2@broker-a", False),
        ("room1", False),
        ("room1@", False),  # Java's split drops the trailing empty part: one part
        ("room1@broker@", True),  # ... so this is two parts
        ("room1@broker@x", False),  # three parts
        ("room1@@", False),
        ("@broker-a", False),  # the room is "", not in the set
    ],
)
def test_machine_room_broker_name_rule(broker: str, kept: bool) -> None:
    strategy = AllocateMessageQueueByMachineRoom(consumer_idcs={"room1"})
    mq = MessageQueue("T", broker, 0)
    assert strategy.allocate("g", "c", [mq], ["c"]) == ([mq] if kept else [])


def test_machine_room_needs_a_collection_of_rooms(kernel: Kernel) -> None:
    with pytest.raises(InvalidArgumentError, match="needs consumer_idcs"):
        kernel.allocator("machine_room")
    with pytest.raises(InvalidArgumentError, match="string 'room1'"):
        AllocateMessageQueueByMachineRoom(consumer_idcs="room1")
