"""A store plugin written against the declared store protocol alone serves the broker and its
clients; one that adds a capability of :mod:`mqcore.storecaps` is used through it."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from memstore import MemoryStore, MemoryStorePlugin, UnitsMemoryStore
from mqtest import FakeClock, group_member, wait_until

from mqcore import (
    Broker,
    Kernel,
    Message,
    Producer,
    PushConsumer,
    SendStatus,
)
from mqcore.store import TIMER_TOPIC, Store
from mqcore.storecaps import (
    CommitLogBounds,
    CommitLogReplica,
    CommitLogSource,
    ExpiringStore,
    PreparedWriter,
    SpanReader,
    UnitReader,
)

pytestmark = pytest.mark.timeout(90)

CAPABILITIES = (
    PreparedWriter,
    UnitReader,
    SpanReader,
    ExpiringStore,
    CommitLogBounds,
    CommitLogSource,
    CommitLogReplica,
)


def _kernel() -> Kernel:
    return Kernel(plugins=[MemoryStorePlugin()], autoload=False)


def _member(broker: Broker, name: str, sink: list[Message], lock: threading.Lock) -> PushConsumer:
    return group_member(broker, name, sink, lock, "A || B")


def _send(broker: Broker, bodies: range) -> None:
    with Producer("pg", broker=broker) as p:
        for i in bodies:
            msg = Message(topic="T", body=b"%d" % i, tags="AB"[i % 2], keys=f"k{i}")
            assert p.send(msg).send_status is SendStatus.SEND_OK


def test_a_store_with_only_the_store_protocol_serves_a_consumer_group(tmp_path: Path) -> None:
    """Produce, consume as a group of two, commit offsets and resume from them, on a store
    that has the Store operations and no capability."""
    with Broker(tmp_path, store="memory", kernel=_kernel()) as broker:
        store = broker.store
        assert type(store) is MemoryStore and isinstance(store, Store)
        assert [c.__name__ for c in CAPABILITIES if isinstance(store, c)] == []
        broker.create_topic("T", queue_nums=4)
        lock = threading.Lock()
        got_a: list[Message] = []
        got_b: list[Message] = []
        a = _member(broker, "c1", got_a, lock)
        b = _member(broker, "c2", got_b, lock)
        a.start()
        b.start()
        try:
            assert wait_until(
                lambda: len(a.assigned_queues("T")) == 2 == len(b.assigned_queues("T")), 20
            )
            # Sent once the group owns the queues evenly (a queue handed over while the
            # group forms may deliver some messages twice, as RocketMQ's rebalance may).
            _send(broker, range(200))
            assert wait_until(lambda: len(got_a) + len(got_b) >= 200, 20)
        finally:
            a.shutdown()
            b.shutdown()
        assert got_a and got_b  # the group shared the queues
        assert sorted(int(m.body) for m in got_a + got_b) == list(range(200))
        assert sum(broker.query_consumer_offset("cg", "T", q) for q in range(4)) == 200
        # A member starting again resumes at the committed offsets: only the new messages.
        again: list[Message] = []
        c = _member(broker, "c3", again, lock)
        c.start()
        try:
            _send(broker, range(200, 210))
            assert wait_until(lambda: len(again) >= 10)
        finally:
            c.shutdown()
        assert sorted(int(m.body) for m in again) == list(range(200, 210))
        assert [m.body for m in broker.query_message("T", "k7", 5)] == [b"7"]


@pytest.mark.parametrize("store_name", ["memory", "memory_units"])
def test_a_store_adding_unit_reads_is_read_through_them(tmp_path: Path, store_name: str) -> None:
    """The timer scheduler takes the held messages' deliver times from the store's units
    when the store is a UnitReader, and from the records otherwise: same deliveries."""
    clock = FakeClock()
    with Broker(
        tmp_path,
        store=store_name,
        kernel=_kernel(),
        delay_scheduler_options={"clock": clock},
        timer_scheduler_options={"clock": clock},
    ) as broker:
        broker.create_topic("T", queue_nums=1)
        t0 = clock.now
        with Producer("pg", broker=broker) as p:
            sent = p.send(Message(topic="T", body=b"later", deliver_time_ms=t0 + 1500))
        assert sent.send_status is SendStatus.SEND_OK
        assert broker.get_max_offset("T", 0) == 0  # held in the timer topic
        clock.now = t0 + 3000
        broker.timer_scheduler.run_due()
        assert wait_until(lambda: broker.get_max_offset("T", 0) == 1)
        got = broker.pull_message("g", "T", 0, 0)
        assert [m.body for m in got.messages] == [b"later"]
        store = broker.store
        if store_name == "memory_units":
            assert isinstance(store, UnitsMemoryStore) and isinstance(store, UnitReader)
            assert any(read[0] == TIMER_TOPIC for read in store.unit_reads)
        else:
            assert not isinstance(store, UnitReader)
