"""Master/slave replication between two in-process brokers (mqcore.broker.ha)."""

from __future__ import annotations

import threading
import time

import pytest
from structlog.testing import capture_logs

from mqcore import Broker, Message, Producer, SendStatus
from mqcore.broker.groupcommit import PreparedSend
from mqcore.errors import BrokerError, InvalidArgumentError, SlaveNotAcknowledgedError
from mqcore.message import MessageExt
from mqcore.protocol.codes import ResponseCode

pytestmark = pytest.mark.timeout(120)

STORE = {"segment_size": 256 * 1024}
FAST = {
    "slave_synchronize_interval_ms": 200,
    "ha_send_heartbeat_interval_ms": 500,
    "store_options": STORE,
}


def wait_until(check, timeout: float = 30.0) -> None:
    """Poll ``check`` until it is true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {check}")
        time.sleep(0.02)


def master_broker(path, role: str = "ASYNC_MASTER", **extra) -> Broker:
    return Broker(path, broker_role=role, ha_listen_port=0, **FAST, **extra)


def slave_broker(path, master: Broker, **extra) -> Broker:
    return Broker(
        path,
        broker_role="SLAVE",
        broker_id=1,
        listen_port=10999,
        ha_master_address=f"127.0.0.1:{master.ha.port}",
        **FAST,
        **extra,
    )


def whole_log(broker: Broker) -> bytes:
    out, offset = [], 0
    while data := broker.store.read_commitlog(offset, 1 << 30):
        out.append(data)
        offset += len(data)
    return b"".join(out)


def caught_up(master: Broker, slave: Broker) -> bool:
    return slave.store.commitlog_max_offset() == master.store.commitlog_max_offset()


def test_slave_copies_the_log_byte_for_byte_and_serves_reads(tmp_path):
    """N messages on the master are on the slave at the same offsets; it serves pulls,
    key lookups and ids, and has the topic and the consumer offsets."""
    with master_broker(tmp_path / "m") as master:
        master.create_topic("T", queue_nums=4)
        with slave_broker(tmp_path / "s", master, slave_read_enable=True) as slave:
            sent = []
            with Producer("pg", broker=master) as p:
                for i in range(3000):
                    msg = Message(topic="T", body=f"body-{i}".encode() * 20, keys=f"key{i}")
                    sent.append(p.send(msg))
            master.update_consumer_offset("cg", "T", 0, 7)
            wait_until(lambda: caught_up(master, slave))
            assert master.store.commitlog_max_offset() > 3 * STORE["segment_size"]
            assert whole_log(slave) == whole_log(master)
            wait_until(lambda: slave.offsets.query_offset("cg", "T", 0) == 7)
            for q in range(4):
                want = master.pull_message("cg", "T", q, 0, 1000).records
                got = slave.pull_message("cg", "T", q, 0, 1000).records
                assert len(got) == len(want) > 0
                assert [bytes(r) for r in got] == [bytes(r) for r in want]
            r = sent[1234]
            assert [m.msg_id for m in slave.query_message("T", "key1234")] == [r.msg_id]
            assert slave.view_message_by_id(r.offset_msg_id).body == b"body-1234" * 20
            with pytest.raises(BrokerError) as refused:
                slave.send_message("T", 0, [Message(topic="T", body=b"x")])
            assert refused.value.code == ResponseCode.SERVICE_NOT_AVAILABLE


def test_sync_master_reports_slave_not_available_until_a_slave_connects(tmp_path):
    with master_broker(tmp_path / "m", "SYNC_MASTER", sync_flush_timeout_ms=3000) as master:
        master.create_topic("T", queue_nums=1)
        with Producer("pg", broker=master) as p:
            alone = p.send(Message(topic="T", body=b"first"))
            assert alone.send_status is SendStatus.SLAVE_NOT_AVAILABLE
            assert alone.queue_offset == 0  # stored on the master all the same
            with slave_broker(tmp_path / "s", master) as slave:
                wait_until(lambda: master.ha.connection_count == 1)
                paired = p.send(Message(topic="T", body=b"second"))
                assert paired.send_status is SendStatus.SEND_OK
                # Acknowledged means the slave has the bytes already.
                assert slave.store.commitlog_max_offset() >= master.store.commitlog_max_offset()
            wait_until(lambda: master.ha.connection_count == 0)
            again = p.send(Message(topic="T", body=b"third"))
            assert again.send_status is SendStatus.SLAVE_NOT_AVAILABLE


def test_sync_master_times_out_when_the_slave_stops_reporting(tmp_path):
    """A connected slave that never confirms: FLUSH_SLAVE_TIMEOUT after sync_flush_timeout."""
    import socket
    import struct

    with master_broker(tmp_path / "m", "SYNC_MASTER", sync_flush_timeout_ms=300) as master:
        master.create_topic("T", queue_nums=1)
        mute = socket.create_connection(("127.0.0.1", master.ha.port))
        try:
            mute.sendall(struct.pack(">q", master.store.commitlog_max_offset()))
            wait_until(lambda: master.ha.connection_count == 1)
            with Producer("pg", broker=master) as p:
                r = p.send(Message(topic="T", body=b"x"))
            assert r.send_status is SendStatus.FLUSH_SLAVE_TIMEOUT
        finally:
            mute.close()


def test_slave_catches_up_from_its_own_offset_after_a_restart(tmp_path):
    with master_broker(tmp_path / "m") as master:
        master.create_topic("T", queue_nums=2)
        with Producer("pg", broker=master) as p:
            for _ in range(500):
                p.send(Message(topic="T", body=b"a" * 300))
            with slave_broker(tmp_path / "s", master) as slave:
                wait_until(lambda: caught_up(master, slave))
                kept = slave.store.commitlog_max_offset()
            for _ in range(500):
                p.send(Message(topic="T", body=b"b" * 300))
        with capture_logs() as logs, slave_broker(tmp_path / "s", master) as slave:
            wait_until(lambda: caught_up(master, slave))
            # It asked for the log from the end of its own data, not from the start.
            starts = [e["offset"] for e in logs if e["event"] == "ha_slave_connected"]
            assert starts[0] == kept > 0
            assert whole_log(slave) == whole_log(master)
            assert sum(slave.get_max_offset("T", q) for q in (0, 1)) == 1000


def test_read_suggestion_on_master_and_slave(tmp_path):
    """A consumer behind by more than memory x ratio is sent to the slave (id 1); the slave
    sends it back (id 0) once it is close to the end."""
    tiny = {"total_physical_memory_bytes": 100_000, "slave_read_enable": True}
    with master_broker(tmp_path / "m", **tiny) as master:
        master.create_topic("T", queue_nums=1)
        with Producer("pg", broker=master) as p:
            for _ in range(400):
                p.send(Message(topic="T", body=b"z" * 500))
        # 400 x ~600 bytes: far more than 40 % of 100 kB behind at offset 0.
        assert master.pull_message("cg", "T", 0, 0, 32).suggest_which_broker_id == 1
        assert master.pull_message("cg", "T", 0, 390, 32).suggest_which_broker_id == 0
        with slave_broker(tmp_path / "s", master, **tiny) as slave:
            wait_until(lambda: caught_up(master, slave))
            wait_until(lambda: slave.topics.get("T") is not None)
            assert slave.pull_message("cg", "T", 0, 0, 32).suggest_which_broker_id == 1
            assert slave.pull_message("cg", "T", 0, 390, 32).suggest_which_broker_id == 0
    with master_broker(tmp_path / "m2", total_physical_memory_bytes=1) as master:
        master.create_topic("T", queue_nums=1)
        master.send_message("T", 0, [Message(topic="T", body=b"z" * 500)] * 10)
        # slave_read_enable off: always the master.
        assert master.pull_message("cg", "T", 0, 0, 32).suggest_which_broker_id == 0


def test_slave_without_slave_read_enable_serves_and_suggests_the_master(tmp_path):
    """As RocketMQ 4.x's slave: the pull is answered (a consumer whose master is gone from
    the route still reads), and the next pull is sent to the master (id 0)."""
    with master_broker(tmp_path / "m", total_physical_memory_bytes=1) as master:
        master.create_topic("T", queue_nums=1)
        master.send_message("T", 0, [Message(topic="T", body=b"x")])
        with slave_broker(tmp_path / "s", master, total_physical_memory_bytes=1) as slave:
            wait_until(lambda: caught_up(master, slave))
            wait_until(lambda: slave.topics.get("T") is not None)
            wait_until(lambda: slave.get_max_offset("T", 0) == 1)  # dispatched
            resp = slave.pull_message("cg", "T", 0, 0, 32)
            assert resp.code == ResponseCode.SUCCESS
            assert [MessageExt(bytes(r)).body for r in resp.records] == [b"x"]
            assert resp.suggest_which_broker_id == 0  # far behind, but not sent to a slave


def test_master_route_lists_its_registered_slave(tmp_path):
    with master_broker(tmp_path / "m", listen_port=10911) as master:
        master.create_topic("T", queue_nums=2)
        assert master.get_route_info_by_topic("T").broker_datas[0].broker_addrs == (
            (0, "127.0.0.1:10911"),
        )
        with slave_broker(tmp_path / "s", master) as slave:
            wait_until(lambda: master.ha.slaves() == {1: "127.0.0.1:10999"})
            members = master.get_route_info_by_topic("T").broker_datas[0].broker_addrs
            assert members == ((0, "127.0.0.1:10911"), (1, "127.0.0.1:10999"))
            wait_until(lambda: slave.topics.get("T") is not None)
            wait_until(lambda: slave.ha.master_address is not None)
            wait_until(lambda: slave.ha.connected.is_set())
            route = slave.get_route_info_by_topic("T")
            assert route.broker_datas[0].broker_addrs == members
        wait_until(lambda: master.ha.slaves() == {})


def test_a_slave_route_names_its_master_only_while_it_reaches_it(tmp_path):
    """A slave answering routes (``mqcore serve`` is its own name server) leaves a master it
    cannot reach out of them: clients then read from the slave instead of retrying a dead
    master, and producers are told no master is writable."""
    master = master_broker(tmp_path / "m", listen_port=10911)
    try:
        master.create_topic("T", queue_nums=2)
        with slave_broker(tmp_path / "s", master) as slave:
            wait_until(lambda: slave.topics.get("T") is not None)
            wait_until(lambda: slave.ha.master_address is not None and slave.ha.connected.is_set())
            both = slave.get_route_info_by_topic("T")
            assert [i for i, _ in both.broker_datas[0].broker_addrs] == [0, 1]
            assert len(both.write_queues()) == 2
            master.close()
            wait_until(lambda: not slave.ha.connected.is_set())
            alone = slave.get_route_info_by_topic("T")
            assert alone.broker_datas[0].broker_addrs == ((1, "127.0.0.1:10999"),)
            assert alone.write_queues() == [] and len(alone.read_queues()) == 2
    finally:
        master.close()


def test_lmdb_refuses_the_slave_role(tmp_path):
    pytest.importorskip("lmdb")
    with pytest.raises(InvalidArgumentError, match="cannot be a slave"):
        Broker(
            tmp_path / "s",
            store="lmdb",
            broker_role="SLAVE",
            ha_master_address="127.0.0.1:1",
        )


def test_unknown_role_is_refused():
    with pytest.raises(InvalidArgumentError, match="broker_role 'MASTER'"):
        Broker("unused", broker_role="MASTER")


def test_delay_progress_syncs_and_only_the_master_delivers(tmp_path):
    """Delay progress (delayOffset.json) reaches the slave; the slave delivers nothing
    itself: its log stays the master's, byte for byte."""
    with master_broker(tmp_path / "m") as master:
        master.create_topic("T", queue_nums=1)
        with slave_broker(tmp_path / "s", master) as slave:
            held = Message(topic="T", body=b"later", delay_level=1)
            master.send_message("T", 0, [held])
            wait_until(lambda: master.get_max_offset("T", 0) == 1)
            master.delay.scheduler.persist()
            progress = (tmp_path / "m" / "config" / "delayOffset.json").read_bytes()
            copy = tmp_path / "s" / "config" / "delayOffset.json"
            wait_until(lambda: copy.is_file() and copy.read_bytes() == progress)
            wait_until(lambda: caught_up(master, slave))
            assert slave.get_max_offset("T", 0) == 1
            assert whole_log(slave) == whole_log(master)


def _counting_connects(monkeypatch) -> list[int]:
    """Count the replication thread's attempts to reach the master (every second)."""
    from mqcore.broker.ha import HASlave

    attempts: list[int] = []
    connect = HASlave._connect

    def counted(self):  # type: ignore[no-untyped-def]
        if threading.current_thread().name == "mqcore-ha-slave":
            attempts.append(1)
        return connect(self)

    monkeypatch.setattr(HASlave, "_connect", counted)
    return attempts


def _events(logs, name: str) -> list[dict]:
    return [e for e in logs if e["event"] == name]


def test_a_slave_logs_an_unreachable_master_once(tmp_path, monkeypatch):
    """A master that never answers: one warning naming it and the error, however many
    attempts; the runtime facts say why."""
    import socket

    attempts = _counting_connects(monkeypatch)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        nowhere = f"127.0.0.1:{s.getsockname()[1]}"  # nothing listens there once closed
    with (
        capture_logs() as logs,
        Broker(
            tmp_path / "s", broker_role="SLAVE", broker_id=1, ha_master_address=nowhere, **FAST
        ) as slave,
    ):
        wait_until(lambda: len(attempts) >= 3)
        assert not slave.ha.connected.is_set()
        assert "refused" in (slave.ha.last_error or "").lower()
    unreachable = _events(logs, "ha_master_unreachable")
    assert len(unreachable) == 1
    assert unreachable[0]["master"] == nowhere and unreachable[0]["log_level"] == "warning"
    assert _events(logs, "ha_slave_connected_to_master") == []


def test_a_slave_logs_each_change_of_its_master_once(tmp_path, monkeypatch):
    """Connected (info), lost when the master stops (one warning, however many retries),
    connected again when it returns (a warning, the outage's end)."""
    attempts = _counting_connects(monkeypatch)
    master = master_broker(tmp_path / "m")
    port = master.ha.port
    try:
        with capture_logs() as logs, slave_broker(tmp_path / "s", master) as slave:
            wait_until(lambda: slave.ha.connected.is_set())
            master.close()
            wait_until(lambda: not slave.ha.connected.is_set())
            seen = len(attempts)
            wait_until(lambda: len(attempts) >= seen + 3)
            master = Broker(tmp_path / "m", ha_listen_port=port, **FAST)
            wait_until(lambda: slave.ha.connected.is_set())
    finally:
        master.close()
    changes = [
        (e["event"], e["log_level"])
        for e in logs
        if e["event"]
        in ("ha_master_unreachable", "ha_master_connection_lost", "ha_slave_connected_to_master")
    ]
    assert changes == [
        ("ha_slave_connected_to_master", "info"),
        ("ha_master_connection_lost", "warning"),
        ("ha_slave_connected_to_master", "warning"),
    ]


def _prepared_sends(topic: str, count: int) -> list[PreparedSend]:
    from mqcore.codec import prepare

    out = []
    for i in range(count):
        (record,) = prepare([Message(topic=topic, body=b"g%d" % i)], 1_700_000_000_000, topic=topic)
        out.append(PreparedSend(topic, i % 2, record, None, "10.0.0.1:5000"))
    return out


def test_a_group_of_prepared_sends_reaches_the_slave(tmp_path):
    """ASYNC_MASTER: a group commit of prepared sends (one put_many_prepared) wakes the
    writers to the slave, which then holds the master's log byte for byte."""
    with master_broker(tmp_path / "m") as master:
        master.create_topic("T", queue_nums=2)
        with slave_broker(tmp_path / "s", master) as slave:
            wait_until(lambda: master.ha.connection_count == 1)
            out = master.send_many(_prepared_sends("T", 6))
            assert [r[0].queue_offset for r in out] == [0, 0, 1, 1, 2, 2]  # type: ignore[index]
            wait_until(lambda: caught_up(master, slave))
            assert whole_log(slave) == whole_log(master)


def test_a_sync_master_serves_a_group_of_prepared_sends_one_by_one(tmp_path):
    """SYNC_MASTER without a slave: each prepared send of a group is stored and gets its own
    SLAVE_NOT_AVAILABLE error holding its results, as a send alone does."""
    with master_broker(tmp_path / "m", "SYNC_MASTER", sync_flush_timeout_ms=500) as master:
        master.create_topic("T", queue_nums=2)
        out = master.send_many(_prepared_sends("T", 3))
        assert all(isinstance(o, SlaveNotAcknowledgedError) for o in out)
        assert all(o.code == ResponseCode.SLAVE_NOT_AVAILABLE for o in out)  # type: ignore[union-attr]
        assert [o.results[0].queue_offset for o in out] == [0, 0, 1]  # type: ignore[union-attr]
        assert master.store.max_offset("T", 0) == 2
