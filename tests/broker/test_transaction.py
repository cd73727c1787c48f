"""The broker's half and op bookkeeping: checked copies, restarts, a commit a crash left
without its op message, immunity times, compressed bodies, refusals."""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

import pytest
from mqtest import wait_until

from mqcore import Broker, MessageExt
from mqcore.errors import BrokerError, MessageIllegalError
from mqcore.message import system_message
from mqcore.protocol.transaction import (
    HALF_TOPIC,
    OP_HALF_TOPIC,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)
from mqcore.record.sysflag import COMPRESSED_FLAG
from mqcore.store import PutResult
from mqcore.uniqkey import create_uniq_id

pytestmark = pytest.mark.timeout(60)

COMMIT = TRANSACTION_COMMIT_TYPE
ROLLBACK = TRANSACTION_ROLLBACK_TYPE


@pytest.fixture
def broker_options() -> dict[str, Any]:
    """Halves are due at once; passes run only when a test asks (interval: an hour)."""
    return {"transaction_timeout": 0, "transaction_check_interval": 3_600_000}


def half(broker: Broker, body: bytes = b"x", **props: str) -> PutResult:
    """Send a half message to T, queue 0, as a transactional producer of group txp does."""
    props = {"UNIQ_KEY": create_uniq_id(), "TRAN_MSG": "true", "PGROUP": "txp", **props}
    msg = system_message(topic="T", body=body, properties=props)
    return broker.send_message("T", 0, [msg])[0]


def stored(broker: Broker, topic: str, queue_id: int = 0) -> list[MessageExt]:
    return broker.store.get(topic, queue_id, 0, max_count=1000).messages


def checks(broker: Broker) -> list[Any]:
    """The next check pass that has something due (halves are due from the next ms)."""
    found: list[Any] = []
    assert wait_until(lambda: bool(found.extend(broker.transactions.check_pass()) or found))
    return found


def test_a_check_writes_the_half_again_and_the_answer_names_the_copy(broker: Broker) -> None:
    r = half(broker, b"body")
    (req,) = checks(broker)
    copy = broker.store.message_at(req.header.commit_log_offset)
    assert copy is not None and copy.topic == HALF_TOPIC
    assert copy.get_property("TRANSACTION_CHECK_TIMES") == "1"
    assert copy.get_property("TRAN_PREPARED_QUEUE_OFFSET") == str(r.queue_offset)
    assert req.header.tran_state_table_offset == copy.queue_offset == 1
    assert (req.message.topic, req.message.queue_id, req.message.body) == ("T", 0, b"body")
    # The producer's own late answer names the first copy; the check's answer the second:
    # whichever comes first decides, the other changes nothing.
    broker.end_transaction("txp", req.header.tran_state_table_offset, copy.commitlog_offset, COMMIT)
    with pytest.raises(BrokerError, match="no longer undecided"):
        broker.end_transaction("txp", r.queue_offset, r.commitlog_offset, COMMIT)
    assert [m.body for m in stored(broker, "T")] == [b"body"]
    assert stored(broker, "T")[0].sys_flag & ROLLBACK == COMMIT


def test_undecided_halves_survive_a_restart_with_their_check_counts(
    tmp_path: Path, store_name: str
) -> None:
    data = tmp_path / "b"
    options = {"transaction_timeout": 0, "transaction_check_interval": 3_600_000}
    with Broker(data, store=store_name, **options) as b:
        b.create_topic("T", queue_nums=1)
        first = half(b, b"one")
        decided = half(b, b"two")
        checks(b)
        b.end_transaction("txp", decided.queue_offset, decided.commitlog_offset, ROLLBACK)
    progress = json.loads((data / "config" / "transaction.json").read_text())
    with Broker(data, store=store_name, **options) as b:
        assert b.transactions.pending_by_topic() == {"T": 1}
        (req,) = checks(b)
        assert req.message.body == b"one"
        assert req.message.get_property("TRANSACTION_CHECK_TIMES") == "2"
        assert req.message.get_property("TRAN_PREPARED_QUEUE_OFFSET") == str(first.queue_offset)
    # The progress moved past the first half (its copy is what matters now).
    assert progress["halfOffset"] > first.queue_offset


def test_a_commit_whose_op_message_was_lost_is_not_committed_again(
    tmp_path: Path, store_name: str
) -> None:
    data = tmp_path / "b"
    with Broker(data, store=store_name) as b:
        b.create_topic("T", queue_nums=1)
        r = half(b, b"paid")
        msg = b.store.message_at(r.commitlog_offset)
        assert msg is not None
        # What a crash between the commit and its op message leaves: the real message
        # stored, the half still undecided in the half and op topics.
        with b.transactions._lock:
            b.transactions._commit(msg)
    with Broker(data, store=store_name) as b:
        assert b.transactions.pending_count() == 0
        assert b.store.max_offset(OP_HALF_TOPIC, 0) == 1
        with pytest.raises(BrokerError, match="no longer undecided"):
            b.end_transaction("txp", r.queue_offset, r.commitlog_offset, COMMIT)
        assert [m.body for m in stored(b, "T")] == [b"paid"]


def test_check_immunity_time_defers_the_first_check(broker: Broker) -> None:
    half(broker, b"later", CHECK_IMMUNITY_TIME_IN_SECONDS="3600")
    half(broker, b"now")
    (req,) = checks(broker)
    assert req.message.body == b"now"
    # Checked at every pass from now on; the other not before its hour.
    assert [r.message.body for r in broker.transactions.check_pass()] == [b"now"]


def test_a_compressed_body_is_committed_as_sent(broker: Broker) -> None:
    body = b"compressible " * 1000
    msg = system_message(
        topic="T", body=zlib.compress(body), properties={"TRAN_MSG": "true", "PGROUP": "txp"}
    )
    r = broker.send_message("T", 0, [msg], sys_flag=COMPRESSED_FLAG)[0]
    broker.end_transaction("txp", r.queue_offset, r.commitlog_offset, COMMIT)
    (got,) = stored(broker, "T")
    assert got.body == body
    assert got.sys_flag & COMPRESSED_FLAG


def test_refusals(broker: Broker) -> None:
    with pytest.raises(MessageIllegalError, match="cannot be delayed"):
        msg = system_message(
            topic="T", body=b"x", delay_level=3, properties={"TRAN_MSG": "true", "PGROUP": "g"}
        )
        broker.send_message("T", 0, [msg])
    with pytest.raises(MessageIllegalError, match="names no producer group"):
        broker.send_message("T", 0, [system_message(topic="T", body=b"x",
                                                    properties={"TRAN_MSG": "true"})])  # fmt: skip
    r = half(broker)
    with pytest.raises(BrokerError, match="offset wrong"):
        broker.end_transaction("txp", r.queue_offset + 5, r.commitlog_offset, COMMIT)
    with pytest.raises(BrokerError, match="Find prepared transaction message failed"):
        broker.end_transaction("txp", r.queue_offset, r.commitlog_offset + 1, COMMIT)
    with pytest.raises(BrokerError, match="commitOrRollback"):
        broker.end_transaction("txp", r.queue_offset, r.commitlog_offset, 4)
    assert broker.end_transaction("txp", r.queue_offset, r.commitlog_offset, 0) is None
    assert broker.transactions.pending_count() == 1
    assert stored(broker, "T") == []


def test_a_slave_has_the_halves_and_leaves_deciding_to_its_master(tmp_path: Path) -> None:
    """Halves, commits and op messages reach the slave in the log; the slave refuses
    END_TRANSACTION (SLAVE_NOT_AVAILABLE) and checks nothing itself."""
    from mqcore.protocol.codes import ResponseCode

    fast = {"slave_synchronize_interval_ms": 200, "ha_send_heartbeat_interval_ms": 500}
    with Broker(tmp_path / "m", broker_role="ASYNC_MASTER", ha_listen_port=0, **fast) as master:
        master.create_topic("T", queue_nums=1)
        assert master.ha is not None
        with Broker(
            tmp_path / "s",
            broker_role="SLAVE",
            broker_id=1,
            listen_port=10999,
            ha_master_address=f"127.0.0.1:{master.ha.port}",
            transaction_timeout=0,
            transaction_check_interval=50,
            **fast,
        ) as slave:
            undecided = half(master, b"undecided")
            committed = half(master, b"committed")
            master.end_transaction(
                "txp", committed.queue_offset, committed.commitlog_offset, COMMIT
            )
            assert wait_until(
                lambda: slave.store.commitlog_max_offset() == master.store.commitlog_max_offset()
            )
            assert [m.body for m in stored(slave, "T")] == [b"committed"]
            assert slave.store.max_offset(HALF_TOPIC, 0) == 2
            with pytest.raises(BrokerError) as refused:
                slave.end_transaction(
                    "txp", undecided.queue_offset, undecided.commitlog_offset, COMMIT
                )
            assert refused.value.code == ResponseCode.SLAVE_NOT_AVAILABLE
            assert not slave.transaction_check._thread.is_alive()
            assert slave.transactions.pending_count() == 0  # the master's to track
            assert master.transactions.pending_count() == 1
