"""SIGKILL of ``mqcore serve`` with 1,000 transactions undecided: after the restart each is
resolved as its producer says (half committed by the check, half rolled back), none lost,
none delivered twice.

The first producer leaves every local transaction unknown and answers every check "unknown"
too, so the halves are being checked (written again at the end of the half queue) when the
server is killed at a random moment. A second producer of the group, started after the
restart, answers the checks: even keys commit, odd keys roll back.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from mqserve import ServeProcess
from mqtest import wait_until

from mqcore import (
    Broker,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    LocalTransactionState,
    Message,
    MessageExt,
    PushConsumer,
    TransactionProducer,
)
from mqcore.protocol.transaction import HALF_TOPIC

pytestmark = pytest.mark.timeout(300)

COUNT = 1000
SETTINGS = (
    "transaction_timeout=1000",
    "transaction_check_interval=300",
    "transaction_check_max=1000",  # nothing is given up during the test
)


class Undecided:
    """A producer whose local transactions stay unknown, whatever it is asked."""

    def __init__(self) -> None:
        self.checks = 0

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        return LocalTransactionState.UNKNOW

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        self.checks += 1
        return LocalTransactionState.UNKNOW


class Decided:
    """After the restart: even keys were committed locally, odd keys rolled back."""

    def __init__(self) -> None:
        self.asked: Counter[str] = Counter()
        self._lock = threading.Lock()

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        raise AssertionError("no new transaction is sent after the restart")

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        key = msg.keys or ""
        with self._lock:
            self.asked[key] += 1
        if int(key) % 2 == 0:
            return LocalTransactionState.COMMIT_MESSAGE
        return LocalTransactionState.ROLLBACK_MESSAGE


def _stored_keys(broker: Broker, topic: str) -> Counter[str]:
    found: Counter[str] = Counter()
    for q in range(broker.topics.require(topic).read_queue_nums):
        offset = 0
        while True:
            got = broker.store.get(topic, q, offset, max_count=256)
            if not got.messages:
                break
            found.update(m.keys or "" for m in got.messages)
            offset = got.next_offset
    return found


@pytest.mark.parametrize("store", ["mmap", "lmdb"])
def test_sigkill_with_1000_undecided_transactions(tmp_path: Path, store: str) -> None:
    data = tmp_path / "data"
    server = ServeProcess(data, store=store)
    addr = server.start("127.0.0.1:0", *SETTINGS)
    undecided = Undecided()
    try:
        with TransactionProducer(
            "txg", namesrv_addr=addr, listener=undecided, heartbeat_broker_interval=0.5
        ) as first:
            for i in range(COUNT):
                r = first.send_message_in_transaction(Message("Tx", str(i).encode(), keys=str(i)))
                assert r.local_transaction_state is LocalTransactionState.UNKNOW
            # Killed while the halves are being checked (and written again).
            assert wait_until(lambda: undecided.checks > 0, timeout=30)
            threading.Event().wait(random.uniform(0.0, 1.0))
            server.kill()
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.kill()

    server = ServeProcess(data, store=store)
    addr = server.start("127.0.0.1:0", *SETTINGS)
    decided = Decided()
    consumed: Counter[str] = Counter()
    lock = threading.Lock()

    def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeConcurrentlyStatus:
        with lock:
            consumed.update(m.keys or "" for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer(
        "cg", namesrv_addr=addr, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    )
    consumer.subscribe("Tx", "*")
    consumer.register_message_listener(listener)
    try:
        with TransactionProducer("txg", namesrv_addr=addr, listener=decided):
            consumer.start()
            evens = {str(i) for i in range(0, COUNT, 2)}
            assert wait_until(lambda: set(consumed) == evens, timeout=120), (
                f"{len(set(consumed) & evens)} of {len(evens)} committed messages consumed"
            )
            # Every transaction was asked about; the odd ones rolled back.
            assert wait_until(lambda: len(decided.asked) == COUNT, timeout=60)
            threading.Event().wait(1.0)  # answers still on their way would show here
    finally:
        consumer.shutdown()
        assert server.stop() == 0

    assert set(consumed) == evens and max(consumed.values()) == 1
    with Broker(data, store=store) as broker:
        assert broker.transactions.pending_count() == 0
        stored = _stored_keys(broker, "Tx")
        # None lost, none stored twice, no rolled-back one ever stored.
        assert stored == Counter(evens)
        assert broker.store.max_offset(HALF_TOPIC, 0) > COUNT  # checked copies were written
