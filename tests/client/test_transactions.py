"""Transactional messages: half, commit, rollback, check back, give up (both transports)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from mqtest import wait_until
from structlog.testing import capture_logs

from mqcore import (
    Broker,
    LocalTransactionState,
    Message,
    MessageExt,
    SendStatus,
    TransactionProducer,
    TransactionSendResult,
)
from mqcore.errors import BrokerError, MQClientError, TopicNotExistError
from mqcore.protocol.transaction import CHECK_MAX_TIME_TOPIC, HALF_TOPIC, OP_HALF_TOPIC

pytestmark = pytest.mark.timeout(60)

COMMIT = LocalTransactionState.COMMIT_MESSAGE
ROLLBACK = LocalTransactionState.ROLLBACK_MESSAGE
UNKNOW = LocalTransactionState.UNKNOW


@pytest.fixture
def broker_options() -> dict[str, Any]:
    """Checks come quickly: a half is checked 0.3 s after it was sent, passes every 0.1 s."""
    return {
        "transaction_timeout": 300,
        "transaction_check_interval": 100,
        "transaction_check_max": 3,
    }


class Listener:
    """Answers ``execute`` for the local transaction, then ``check`` for every check, by
    message key; records what it was asked."""

    def __init__(self, execute: LocalTransactionState, check: LocalTransactionState) -> None:
        self.execute = execute
        self.check = check
        self.executed: list[tuple[str | None, Any]] = []
        self.checked: list[MessageExt] = []
        self._lock = threading.Lock()

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        with self._lock:
            self.executed.append((msg.keys, arg))
        return self.execute

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        with self._lock:
            self.checked.append(msg)
        return self.check


def topic_messages(broker: Broker, topic: str) -> list[MessageExt]:
    """Every message stored in ``topic`` (as a consumer of it would read them)."""
    out: list[MessageExt] = []
    for q in range(broker.topics.require(topic).read_queue_nums):
        offset = 0
        while True:
            resp = broker.pull_message("reader", topic, q, offset, 32)
            if not resp.records:
                break
            out.extend(MessageExt(r) for r in resp.records)
            offset = resp.next_begin_offset
    return out


def test_commit_makes_the_message_consumable_once(broker: Broker) -> None:
    listener = Listener(COMMIT, COMMIT)
    with TransactionProducer("txp", broker, listener=listener) as p:
        r = p.send_message_in_transaction(Message("T", b"paid", keys="order-1"), arg=42)
    assert isinstance(r, TransactionSendResult)
    assert r.send_status is SendStatus.SEND_OK
    assert r.local_transaction_state is COMMIT
    assert r.transaction_id == r.msg_id
    assert listener.executed == [("order-1", 42)]
    # END_TRANSACTION is one-way (over the network it may still be on its way).
    assert wait_until(lambda: broker.transactions.pending_count() == 0)
    got = topic_messages(broker, "T")
    assert [(m.body, m.keys, m.msg_id) for m in got] == [(b"paid", "order-1", r.msg_id)]
    assert got[0].get_property("TRAN_MSG") is None  # a committed message is a plain one
    assert got[0].get_property("REAL_TOPIC") is None
    assert broker.transactions.pending_count() == 0
    assert listener.checked == []


def test_rollback_is_never_consumed(broker: Broker) -> None:
    listener = Listener(ROLLBACK, ROLLBACK)
    with TransactionProducer("txp", broker, listener=listener) as p:
        r = p.send_message_in_transaction(Message("T", b"cancelled"))
        assert r.local_transaction_state is ROLLBACK
        assert wait_until(lambda: broker.transactions.pending_count() == 0)
    assert topic_messages(broker, "T") == []
    assert broker.transactions.pending_count() == 0
    assert broker.store.max_offset(OP_HALF_TOPIC, 0) == 1


@pytest.mark.parametrize("answer", [COMMIT, ROLLBACK])
def test_unknown_is_checked_back_after_the_timeout(
    broker: Broker, answer: LocalTransactionState
) -> None:
    listener = Listener(UNKNOW, answer)
    with TransactionProducer("txp", broker, listener=listener) as p:
        r = p.send_message_in_transaction(Message("T", b"maybe", keys="k"))
        assert r.local_transaction_state is UNKNOW
        # Undecided: invisible to consumers meanwhile.
        assert topic_messages(broker, "T") == []
        assert broker.transactions.pending_by_topic() == {"T": 1}
        assert wait_until(lambda: broker.transactions.pending_count() == 0)
    # A pass may check it again before the answer to the first check arrives (over the
    # network); the answers after the first find it decided and change nothing.
    assert len(listener.checked) >= 1
    assert {m.msg_id for m in listener.checked} == {r.msg_id}
    checked = listener.checked[0]
    # The producer is shown the message under its real topic and queue.
    assert (checked.topic, checked.queue_id, checked.msg_id) == (
        "T",
        r.message_queue.queue_id,
        r.msg_id,
    )
    assert checked.body == b"maybe"
    got = topic_messages(broker, "T")
    if answer is COMMIT:
        assert [(m.body, m.msg_id, m.queue_id) for m in got] == [
            (b"maybe", r.msg_id, r.message_queue.queue_id)
        ]
    else:
        assert got == []


def test_a_producer_that_never_answers_is_given_up_after_check_max(broker: Broker) -> None:
    listener = Listener(UNKNOW, UNKNOW)
    with capture_logs() as logs, TransactionProducer("txp", broker, listener=listener) as p:
        r = p.send_message_in_transaction(Message("T", b"limbo", keys="k"))
        assert wait_until(lambda: broker.transactions.pending_count() == 0, timeout=20)
    (gave_up,) = [e for e in logs if e["event"] == "transaction_check_max_reached"]
    assert gave_up["log_level"] == "error"
    assert (gave_up["topic"], gave_up["checks"], gave_up["transaction_id"]) == ("T", 3, r.msg_id)
    assert len(listener.checked) == 3  # transaction_check_max
    assert [int(m.get_property("TRANSACTION_CHECK_TIMES") or 0) for m in listener.checked] == [
        1,
        2,
        3,
    ]
    assert topic_messages(broker, "T") == []
    given_up = topic_messages(broker, CHECK_MAX_TIME_TOPIC)
    assert [(m.body, m.msg_id, m.get_property("REAL_TOPIC")) for m in given_up] == [
        (b"limbo", r.msg_id, "T")
    ]
    assert broker.transactions.discarded == 1


def test_no_producer_online_still_counts_the_checks(broker: Broker) -> None:
    listener = Listener(UNKNOW, UNKNOW)
    with TransactionProducer("txp", broker, listener=listener) as p:
        p.send_message_in_transaction(Message("T", b"orphan"))
    # The producer is gone: no one to ask; the half is given up after the checks.
    assert wait_until(lambda: broker.transactions.pending_count() == 0, timeout=20)
    assert len(listener.checked) < 3  # most (usually all) checks found no producer
    assert len(topic_messages(broker, CHECK_MAX_TIME_TOPIC)) == 1
    assert topic_messages(broker, "T") == []


def test_halves_are_never_user_data(broker: Broker) -> None:
    listener = Listener(UNKNOW, UNKNOW)
    with TransactionProducer("txp", broker, listener=listener, heartbeat_broker_interval=5) as p:
        p.send_message_in_transaction(Message("T", b"hidden"))
        assert topic_messages(broker, "T") == []
        names = {t.topic_name for t in broker.list_topics()}
        assert HALF_TOPIC not in names and OP_HALF_TOPIC not in names
        with pytest.raises(TopicNotExistError):
            broker.pull_message("g", HALF_TOPIC, 0, 0)
        with pytest.raises(BrokerError, match="conflict with system topic"):
            broker.create_topic(HALF_TOPIC)


def test_refused_without_listener_or_with_a_delay(broker: Broker) -> None:
    with TransactionProducer("txp", broker) as p:
        with pytest.raises(MQClientError, match="TransactionListener is null"):
            p.send_message_in_transaction(Message("T", b"x"))
        p.set_transaction_listener(Listener(COMMIT, COMMIT))
        with pytest.raises(MQClientError, match="cannot be delayed"):
            p.send_message_in_transaction(Message("T", b"x", delay_level=2))
    assert broker.store.max_offset(HALF_TOPIC, 0) == 0


def test_end_transaction_twice_commits_once(broker: Broker) -> None:
    listener = Listener(COMMIT, COMMIT)
    with TransactionProducer("txp", broker, listener=listener) as p:
        r = p.send_message_in_transaction(Message("T", b"once"))
        assert wait_until(lambda: broker.transactions.pending_count() == 0)
    offset = int(r.offset_msg_id[16:], 16) if r.offset_msg_id else -1
    with pytest.raises(BrokerError, match="no longer undecided"):
        broker.end_transaction("txp", r.queue_offset, offset, 8)
    with pytest.raises(BrokerError, match="producer group wrong"):
        broker.end_transaction("other", r.queue_offset, offset, 8)
    assert len(topic_messages(broker, "T")) == 1


class ByKey:
    """Key ``<outcome>-<n>``: ``commit``/``rollback`` decide at once; ``check-commit`` and
    ``check-rollback`` are unknown at first and decided by the check."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.checked: list[str] = []

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        kind = (msg.keys or "").rsplit("-", 1)[0]
        return {"commit": COMMIT, "rollback": ROLLBACK}.get(kind, UNKNOW)

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        with self._lock:
            self.checked.append(msg.keys or "")
        # Truthful, as a check must be: a pass may ask about one decided at once too.
        return COMMIT if (msg.keys or "").startswith(("commit", "check-commit")) else ROLLBACK


def test_consumers_get_each_committed_message_once_and_no_other(broker: Broker) -> None:
    from collections import Counter

    from mqcore import ConsumeConcurrentlyStatus, ConsumeFromWhere, PushConsumer

    kinds = ["commit", "rollback", "check-commit", "check-rollback"]
    keys = [f"{kind}-{n}" for n in range(5) for kind in kinds]
    consumed: Counter[str] = Counter()
    lock = threading.Lock()

    def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeConcurrentlyStatus:
        with lock:
            consumed.update(m.keys or "" for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer(
        "cg", broker=broker, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    )
    consumer.subscribe("T", "*")
    consumer.register_message_listener(listener)
    consumer.start()
    listener_tx = ByKey()
    try:
        with TransactionProducer("txp", broker, listener=listener_tx) as p:
            for key in keys:
                p.send_message_in_transaction(Message("T", key.encode(), keys=key))
            assert wait_until(lambda: broker.transactions.pending_count() == 0, timeout=30)
        committed = {k for k in keys if k.startswith(("commit", "check-commit"))}
        assert wait_until(lambda: set(consumed) == committed, timeout=30)
    finally:
        consumer.shutdown()
    # Everything the topic holds was consumed: nothing else can ever come.
    assert sorted(m.keys or "" for m in topic_messages(broker, "T")) == sorted(committed)
    assert max(consumed.values()) == 1
    # Every undecided one was checked (a decided one too, if a pass came between its send
    # and its outcome on a slow machine: the answer then finds it decided).
    assert set(listener_tx.checked) >= {k for k in keys if k.startswith("check")}
