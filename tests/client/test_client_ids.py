"""Client ids as RocketMQ 4.9: one member per client object, DEFAULT kept for broadcasting."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from mqtest import wait_until

from mqcore import (
    Broker,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    Message,
    MessageModel,
    Producer,
    PullConsumer,
    PushConsumer,
)
from mqcore.client.common import client_ip
from mqcore.errors import MQClientError

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def broker_topics() -> dict[str, int]:
    return {"T": 8}


def _consumer(broker: Broker, sink: list[bytes], **kw) -> PushConsumer:  # type: ignore[no-untyped-def]
    lock = threading.Lock()

    def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        with lock:
            sink.extend(m.body for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    c = PushConsumer(
        kw.pop("group", "g"),
        broker=broker,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        **kw,
    )
    c.subscribe("T", "*")
    c.register_message_listener(listener)
    return c


def test_default_instance_name_becomes_pid_and_nanos_at_start(broker: Broker) -> None:
    """Clustering: DEFAULT until start(), then ``<pid>#<ns>``; each client its own id."""
    a, b = _consumer(broker, []), _consumer(broker, [])
    assert a.client_id == f"{client_ip()}@DEFAULT"
    a.start()
    b.start()
    try:
        for c in (a, b):
            pid, sep, nanos = c.instance_name.partition("#")
            assert sep and pid == str(os.getpid()) and nanos.isdigit()
            assert c.client_id == f"{client_ip()}@{c.instance_name}"
        assert a.client_id != b.client_id
        assert sorted(broker.get_consumer_list_by_group("g")) == sorted([a.client_id, b.client_id])
    finally:
        a.shutdown()
        b.shutdown()
    with Producer("pg", broker=broker) as p:
        assert p.instance_name.startswith(f"{os.getpid()}#")


def test_two_default_consumers_share_the_queues(broker: Broker) -> None:
    """Two PushConsumer("g") in one process own disjoint queue sets and consume each
    message once between them."""
    got_a: list[bytes] = []
    got_b: list[bytes] = []
    a, b = _consumer(broker, got_a), _consumer(broker, got_b)
    a.start()
    b.start()
    try:
        mqs = set(broker.get_route_info_by_topic("T").read_queues())

        def split() -> bool:
            qa, qb = a.assigned_queues("T"), b.assigned_queues("T")
            return len(qa) == 4 and len(qb) == 4 and not qa & qb and qa | qb == mqs

        def split_holds() -> bool:
            # A member that saw only itself takes the queues one by one: halfway through it
            # shows the final split for a moment, then takes the other member's queues too
            # until its next rebalance gives them back (RocketMQ's rebalance is at least once
            # too). The steady state is what is asserted: the split must hold for a second.
            end = time.monotonic() + 1.0
            while time.monotonic() < end:
                if not split():
                    return False
                time.sleep(0.02)
            return True

        assert wait_until(lambda: split() and split_holds(), timeout=30)
        with Producer("pg", broker=broker) as p:
            for i in range(200):
                p.send(Message(topic="T", body=b"%d" % i))
        assert wait_until(lambda: len(got_a) + len(got_b) >= 200, timeout=30)
        time.sleep(0.3)  # a duplicate would arrive now
        counts = Counter(got_a + got_b)
        assert len(counts) == 200 and set(counts.values()) == {1}
        assert got_a and got_b
    finally:
        a.shutdown()
        b.shutdown()


def test_explicit_instance_name_in_use_is_refused(broker: Broker) -> None:
    """A second running client of one group under one explicit instance name: refused."""
    first = _consumer(broker, [], instance_name="c1")
    first.start()
    try:
        second = _consumer(broker, [], instance_name="c1")
        with pytest.raises(MQClientError, match=r"group\[g\] has been created before"):
            second.start()
        # Another group, or a producer of the same group name, may use the name.
        other = _consumer(broker, [], instance_name="c1", group="g2")
        other.start()
        other.shutdown()
        with Producer("g", broker=broker, instance_name="c1"):
            pass
    finally:
        first.shutdown()
    # Once the first one is shut down the name is free again.
    again = _consumer(broker, [], instance_name="c1")
    again.start()
    again.shutdown()
    with (
        Producer("pg", broker=broker, instance_name="p1"),
        pytest.raises(MQClientError, match="has been created before"),
    ):
        Producer("pg", broker=broker, instance_name="p1").start()


def test_a_producer_of_the_consumer_s_id_leaving_keeps_the_consumer_in_its_group(
    broker: Broker,
) -> None:
    """A producer and a consumer of one group name under one instance name share a client id;
    the producer shutting down (its connection closes) leaves the consumer in its group, and
    the consumer keeps its queues (the broker took every member of that id out at once, so
    the group was empty until the consumer's next heartbeat, up to 30 s later)."""
    consumer = _consumer(broker, [], instance_name="c1")
    consumer.start()
    try:
        assert wait_until(lambda: len(consumer.assigned_queues("T")) == 8)
        producer = Producer("g", broker=broker, instance_name="c1")
        producer.start()
        assert producer.client_id == consumer.client_id
        producer.shutdown()
        time.sleep(0.5)  # the broker's connection-closed handling runs on a worker thread
        assert broker.get_consumer_list_by_group("g") == [consumer.client_id]
    finally:
        consumer.shutdown()


def test_a_consumer_whose_connection_closes_leaves_its_group_at_once(
    broker: Broker, transport: str
) -> None:
    """Over the network, a member whose connection closes without unregistering (a killed
    process) is taken out of its group at once, not at expiry (RocketMQ's housekeeping)."""
    if transport != "remote":
        pytest.skip("only a remote client has a connection to lose")
    first = _consumer(broker, [], instance_name="c1")
    second = _consumer(broker, [], instance_name="c2")
    first.start()
    second.start()
    try:
        assert wait_until(lambda: len(broker.get_consumer_list_by_group("g")) == 2)
        second.broker.close()  # its sockets close; no UNREGISTER_CLIENT is sent
        assert wait_until(lambda: broker.get_consumer_list_by_group("g") == [first.client_id])
        assert wait_until(lambda: len(first.assigned_queues("T")) == 8)
    finally:
        first.shutdown()
        second.shutdown()


def test_broadcasting_keeps_default(broker: Broker, tmp_path: Path) -> None:
    """Broadcasting consumers keep DEFAULT (and so their offset file's directory)."""
    c = _consumer(
        broker,
        [],
        message_model=MessageModel.BROADCASTING,
        offset_store_options={"store_dir": tmp_path / "offsets"},
    )
    c.start()
    try:
        assert c.client_id == f"{client_ip()}@DEFAULT"
        assert c.offset_store.path == tmp_path / "offsets" / c.client_id / "g" / "offsets.json"
        pull = PullConsumer(
            "pull-b",
            broker=broker,
            message_model=MessageModel.BROADCASTING,
            offset_store_options={"store_dir": tmp_path / "offsets"},
        )
        pull.start()
        assert pull.client_id == f"{client_ip()}@DEFAULT"
        pull.shutdown()
    finally:
        c.shutdown()


_WORKER = textwrap.dedent(
    """
    import sys, threading, time
    from mqcore import (Broker, ConsumeConcurrentlyStatus, ConsumeFromWhere, Message,
                        MessageModel, Producer, PushConsumer)

    mode, data, store = sys.argv[1], sys.argv[2], sys.argv[3]
    with Broker(data, store=store) as broker:
        if mode == "send":
            first, count = int(sys.argv[4]), int(sys.argv[5])
            if not broker.list_topics() or "T" not in {t.topic_name for t in broker.list_topics()}:
                broker.create_topic("T", queue_nums=4)
            with Producer("pg", broker=broker) as p:
                for i in range(first, first + count):
                    p.send(Message(topic="T", body=b"m%d" % i))
            sys.exit(0)
        offsets, expect = sys.argv[4], int(sys.argv[5])
        lock = threading.Lock()
        seen = []

        def listener(msgs, ctx):
            with lock:
                for m in msgs:
                    seen.append(m.body)
                    print(m.body.decode(), flush=True)
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        c = PushConsumer("bg", broker=broker, message_model=MessageModel.BROADCASTING,
                         consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                         persist_consumer_offset_interval=0.2,
                         offset_store_options={"store_dir": offsets})
        c.subscribe("T", "*")
        c.register_message_listener(listener)
        c.start()
        deadline = time.monotonic() + 60
        while len(seen) < expect and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)  # several offset persists; a duplicate would show up too
        print("DONE", flush=True)
        time.sleep(120)  # killed here, as a crash: no shutdown, no final persist
    """
)


def _run(script: Path, *args: str) -> None:
    proc = subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, timeout=90
    )
    assert proc.returncode == 0, proc.stderr


def _consume_then_kill(script: Path, *args: str) -> list[str]:
    proc = subprocess.Popen(
        [sys.executable, str(script), "consume", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.strip() == "DONE":
                break
            lines.append(line.strip())
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()
        if proc.stderr is not None:
            proc.stderr.close()
    return lines


def test_broadcasting_consumer_resumes_in_a_new_process(tmp_path: Path, store_name: str) -> None:
    """Killed and restarted in a new process, a broadcasting consumer gets exactly the
    messages sent while it was down (its DEFAULT-named offset file is found again)."""
    script = tmp_path / "worker.py"
    script.write_text(_WORKER)
    data, offsets = str(tmp_path / "data"), str(tmp_path / "offsets")
    _run(script, "send", data, store_name, "0", "20")
    first = _consume_then_kill(script, data, store_name, offsets, "20")
    assert sorted(first) == sorted(f"m{i}" for i in range(20))
    assert (tmp_path / "offsets" / f"{client_ip()}@DEFAULT" / "bg" / "offsets.json").exists()
    _run(script, "send", data, store_name, "20", "7")  # while the consumer is down
    second = _consume_then_kill(script, data, store_name, offsets, "7")
    assert sorted(second) == sorted(f"m{i}" for i in range(20, 27))
