"""A master and a slave as two ``mqcore serve`` processes: replication, SYNC_MASTER
statuses across a SIGKILL of the slave, and consumers sent to the slave and back."""

from __future__ import annotations

import filecmp
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from mqcore import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    Message,
    Producer,
    PushConsumer,
    SendStatus,
)
from mqcore.client.admin import MQAdmin
from mqcore.message import MessageExt
from mqcore.protocol import headers
from mqcore.protocol.codes import RequestCode, ResponseCode
from mqcore.protocol.fastjson import loads
from mqcore.protocol.route import TopicRoute
from mqcore.remoting.client import RemotingClient
from mqcore.remoting.command import RemotingCommand

pytestmark = pytest.mark.timeout(300)

SEGMENT = 1024 * 1024
COMMON = (
    "--set", f"store_options={{\"segment_size\": {SEGMENT}}}",
    "--set", "slave_synchronize_interval_ms=200",
    "--set", "ha_send_heartbeat_interval_ms=500",
)  # fmt: skip


class Node:
    """One ``mqcore serve`` process (master or slave) on a free port."""

    def __init__(self, data_dir: Path, *args: str, listen: str = "127.0.0.1:0") -> None:
        self.data_dir = data_dir
        self.args = args
        self.listen = listen
        self.proc: subprocess.Popen[str] | None = None
        self.address = ""
        self.ha = ""

    def start(self) -> Node:
        cmd = [
            sys.executable, "-c", "from mqcore.cli import main; main()", "serve",
            "--listen", self.listen, "--data-dir", str(self.data_dir), *COMMON, *self.args,
        ]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert "listening on" in line, f"mqcore serve did not start: {line!r}"
        self.address = line.split("listening on ")[1].split()[0]
        second = self.proc.stdout.readline()
        if "replication port" in second:
            self.ha = second.rsplit(" ", 1)[1].strip()
        return self

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def wait_until(check, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {check}")
        time.sleep(0.05)


def call(client: RemotingClient, addr: str, code: int, header) -> RemotingCommand:
    return client.invoke(addr, RemotingCommand.request(code, header), 10)


def max_offset(client: RemotingClient, addr: str, topic: str, queue_id: int) -> int:
    h = headers.GetMaxOffsetRequestHeader(topic=topic, queue_id=queue_id)
    resp = call(client, addr, RequestCode.GET_MAX_OFFSET, h)
    if resp.code != ResponseCode.SUCCESS:
        return -1
    return int(resp.read_header(headers.GetMaxOffsetResponseHeader).offset)


def pull(client: RemotingClient, addr: str, topic: str, queue_id: int, offset: int):
    h = headers.PullMessageRequestHeader(
        consumer_group="cg", topic=topic, queue_id=queue_id, queue_offset=offset,
        max_msg_nums=32, sys_flag=int(headers.PullSysFlag.SUBSCRIPTION), commit_offset=0,
        suspend_timeout_millis=0, subscription="*", sub_version=0, expression_type="TAG",
    )  # fmt: skip
    return call(client, addr, RequestCode.PULL_MESSAGE, h)


def members(client: RemotingClient, addr: str, topic: str) -> dict[int, str]:
    resp = call(
        client,
        addr,
        RequestCode.GET_ROUTEINFO_BY_TOPIC,
        headers.GetRouteInfoRequestHeader(topic=topic),
    )
    route = TopicRoute.from_json(topic, loads(resp.body or b"{}"))
    return dict(route.broker_datas[0].broker_addrs)


def create_topic(addr: str, topic: str, queues: int) -> None:
    with MQAdmin(addr) as admin:
        admin.create_topic(topic, queues)


def same_logs(a: Path, b: Path, segments: int = 1) -> None:
    """Both commit logs hold the same segment files (at least ``segments``), same bytes."""
    left, right = a / "store" / "commitlog", b / "store" / "commitlog"
    names = sorted(p.name for p in left.iterdir())
    assert names == sorted(p.name for p in right.iterdir())
    assert len(names) >= segments
    match, mismatch, errors = filecmp.cmpfiles(left, right, names, shallow=False)
    assert mismatch == [] and errors == [] and match == names


def synced(client: RemotingClient, master: Node, slave: Node, topic: str, queues: int) -> bool:
    return all(
        max_offset(client, slave.address, topic, q) == max_offset(client, master.address, topic, q)
        for q in range(queues)
    )


def test_two_processes_replicate_byte_for_byte_and_the_slave_serves_reads(tmp_path):
    master = Node(tmp_path / "m", "--ha-listen", "0").start()
    slave = None
    client = RemotingClient()
    try:
        slave = Node(
            tmp_path / "s", "--role", "SLAVE", "--broker-id", "1", "--master-ha", master.ha,
            "--set", "slave_read_enable=true",
        ).start()  # fmt: skip
        sent = []
        create_topic(master.address, "T", 4)
        with Producer("pg", namesrv_addr=master.address) as p:
            for i in range(0, 100_000, 100):
                batch = [
                    Message(topic="T", body=b"%06d" % j * 30, keys=f"k{j}")
                    for j in range(i, i + 100)
                ]
                sent.append(p.send_batch(batch))
        wait_until(lambda: synced(client, master, slave, "T", 4), 120)
        assert sum(max_offset(client, slave.address, "T", q) for q in range(4)) == 100_000
        # The slave serves pulls (the same records as the master), lookups by key and by id.
        for q in range(4):
            a, b = pull(client, master.address, "T", q, 50), pull(client, slave.address, "T", q, 50)
            assert a.code == b.code == ResponseCode.SUCCESS
            assert bytes(a.body) == bytes(b.body)
        found = call(
            client, slave.address, RequestCode.QUERY_MESSAGE,
            headers.QueryMessageRequestHeader(
                topic="T", key="k4242", max_num=32, begin_timestamp=0, end_timestamp=2**62
            ),
        )  # fmt: skip
        assert found.code == ResponseCode.SUCCESS
        assert MessageExt(bytes(found.body)).body == b"004242" * 30
        first_id = sent[7].offset_msg_id.split(",")[0]
        from mqcore.codec import decode_message_id

        viewed = call(
            client, slave.address, RequestCode.VIEW_MESSAGE_BY_ID,
            headers.ViewMessageRequestHeader(offset=decode_message_id(first_id)[1]),
        )  # fmt: skip
        assert viewed.code == ResponseCode.SUCCESS
        assert MessageExt(bytes(viewed.body)).body == b"000700" * 30
    finally:
        client.close()
        if slave is not None:
            slave.signal(signal.SIGTERM)
        master.signal(signal.SIGTERM)
    same_logs(tmp_path / "m", tmp_path / "s", segments=2)


def test_sync_master_across_a_slave_sigkill(tmp_path):
    """Sends are SEND_OK with the slave, SLAVE_NOT_AVAILABLE once it is killed, SEND_OK again
    after its restart; it resumes from its own offset and loses nothing acknowledged."""
    master = Node(tmp_path / "m", "--role", "SYNC_MASTER", "--ha-listen", "0").start()
    slave_args = ("--role", "SLAVE", "--broker-id", "1", "--master-ha", master.ha)
    slave = Node(tmp_path / "s", *slave_args).start()
    try:
        create_topic(master.address, "T", 2)
        with Producer("pg", namesrv_addr=master.address) as p:
            probe = Message(topic="T", body=b"probe")
            wait_until(lambda: p.send(probe).send_status is SendStatus.SEND_OK)
            statuses = [p.send(Message(topic="T", body=b"a%d" % i)).send_status for i in range(300)]
            assert set(statuses) == {SendStatus.SEND_OK}
            slave.signal(signal.SIGKILL)
            wait_until(lambda: p.send(probe).send_status is SendStatus.SLAVE_NOT_AVAILABLE)
            alone = [p.send(Message(topic="T", body=b"b%d" % i)).send_status for i in range(200)]
            assert set(alone) == {SendStatus.SLAVE_NOT_AVAILABLE}
            slave = Node(tmp_path / "s", *slave_args).start()
            wait_until(lambda: p.send(probe).send_status is SendStatus.SEND_OK)
    finally:
        slave.signal(signal.SIGTERM)
        master.signal(signal.SIGTERM)
    same_logs(tmp_path / "m", tmp_path / "s")


def test_master_sigkill_and_restart_loses_nothing_acknowledged(tmp_path):
    """SIGKILL the SYNC_MASTER mid-run; restarted on the same ports, its slave reconnects
    from its own offset and both logs end identical, holding every send."""
    master = Node(tmp_path / "m", "--role", "SYNC_MASTER", "--ha-listen", "0").start()
    slave = Node(
        tmp_path / "s", "--role", "SLAVE", "--broker-id", "1", "--master-ha", master.ha
    ).start()
    client = RemotingClient()
    sent = 0
    try:
        create_topic(master.address, "T", 2)
        with Producer("pg", namesrv_addr=master.address) as p:
            probe = Message(topic="T", body=b"probe")

            def ok() -> bool:
                nonlocal sent
                status = p.send(probe).send_status
                sent += 1
                return status is SendStatus.SEND_OK

            wait_until(ok)
            for i in range(300):
                assert p.send(Message(topic="T", body=b"a%d" % i)).send_status is SendStatus.SEND_OK
                sent += 1
        master.signal(signal.SIGKILL)
        port = master.ha.rsplit(":", 1)[1]
        master = Node(
            tmp_path / "m", "--role", "SYNC_MASTER", "--ha-listen", port, listen=master.address
        ).start()
        with Producer("pg", namesrv_addr=master.address) as p:
            wait_until(ok)
            for i in range(200):
                assert p.send(Message(topic="T", body=b"b%d" % i)).send_status is SendStatus.SEND_OK
                sent += 1
        assert sum(max_offset(client, slave.address, "T", q) for q in (0, 1)) == sent
    finally:
        client.close()
        slave.signal(signal.SIGTERM)
        master.signal(signal.SIGTERM)
    same_logs(tmp_path / "m", tmp_path / "s")


def test_lagging_consumer_goes_to_the_slave_and_back(tmp_path):
    """With a tiny memory figure a consumer far behind is sent to the slave, and back to
    the master once it has caught up; every message is consumed exactly once."""
    tiny = ("--set", "total_physical_memory_bytes=200000", "--set", "slave_read_enable=true")
    master = Node(tmp_path / "m", "--ha-listen", "0", *tiny).start()
    slave = Node(
        tmp_path / "s", "--role", "SLAVE", "--broker-id", "1", "--master-ha", master.ha, *tiny
    ).start()
    client = RemotingClient()
    consumer = None
    try:
        create_topic(master.address, "T", 2)
        with Producer("pg", namesrv_addr=master.address) as p:
            for i in range(0, 4000, 50):
                p.send_batch([Message(topic="T", body=b"%05d" % j * 100) for j in range(i, i + 50)])
            wait_until(lambda: synced(client, master, slave, "T", 2))
            # The route must name the slave before the consumer asks for it.
            wait_until(
                lambda: (
                    members(client, master.address, "T") == {0: master.address, 1: slave.address}
                )
            )
            got: list[bytes] = []
            lock = threading.Lock()

            def listener(msgs, ctx):  # type: ignore[no-untyped-def]
                with lock:
                    got.extend(bytes(m.body) for m in msgs)
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

            consumer = PushConsumer(
                "cg",
                namesrv_addr=master.address,
                consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            )
            consumer.subscribe("T", "*")
            consumer.register_message_listener(listener)
            used: list[str] = []
            transport = consumer.broker
            choose = transport._pull_addr

            def spy(mq):  # type: ignore[no-untyped-def]
                addr = choose(mq)
                used.append(addr)
                return addr

            transport._pull_addr = spy
            consumer.start()
            wait_until(lambda: len(got) >= 4000, 120)
            # Caught up: new messages come from the master again.
            mark = len(used)
            for i in range(4000, 4100):
                p.send(Message(topic="T", body=b"%05d" % i * 100))
            wait_until(lambda: len(got) >= 4100)
            time.sleep(1.0)  # let a duplicate, if any, arrive
        assert slave.address in used and master.address in used
        first_slave = used.index(slave.address)
        assert master.address in used[first_slave:]  # back to the master after the slave
        assert slave.address not in used[mark + 10 :]
        with lock:
            assert sorted(got) == [b"%05d" % i * 100 for i in range(4100)]
    finally:
        if consumer is not None:
            consumer.shutdown()
        client.close()
        slave.signal(signal.SIGTERM)
        master.signal(signal.SIGTERM)
