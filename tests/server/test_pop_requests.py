"""Pop consumption's requests on the wire, as a RocketMQ 5 client sends them: POP_MESSAGE with
``pollTime``, ACK_MESSAGE, BATCH_ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME, NOTIFICATION, their
refusals, and the invisible-messages gauge."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mqcore import Message
from mqcore.client.producer import Producer
from mqcore.client.transport_remote import split_records
from mqcore.message import MessageExt
from mqcore.protocol import pop as wire
from mqcore.protocol.codes import RequestCode, ResponseCode
from mqcore.remoting.client import RemotingClient
from mqcore.remoting.command import RemotingCommand
from mqcore.server import Server

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def server(tmp_path: Path, store_name: str) -> Iterator[Server]:
    with Server(tmp_path, "127.0.0.1:0", store_name, {"revive_interval_ms": 100}) as s:
        s.broker.create_topic("P", queue_nums=2)
        yield s


@pytest.fixture
def client() -> Iterator[RemotingClient]:
    c = RemotingClient()
    yield c
    c.close()


def _call(client: RemotingClient, addr: str, code: int, header: Any, body: Any = None,
          timeout: float = 10) -> RemotingCommand:  # fmt: skip
    return client.invoke(addr, RemotingCommand.request(code, header, body), timeout)


def _pop(client: RemotingClient, addr: str, poll_ms: int = 0, n: int = 32,
         invisible: int = 5000, group: str = "g") -> RemotingCommand:  # fmt: skip
    header = wire.PopMessageRequestHeader(
        consumer_group=group, topic="P", queue_id=-1, max_msg_nums=n, invisible_time=invisible,
        poll_time=poll_ms, born_time=int(time.time() * 1000), init_mode=wire.INIT_MODE_MAX,
        exp_type="TAG", exp="*",
    )  # fmt: skip
    return _call(client, addr, RequestCode.POP_MESSAGE, header, timeout=poll_ms / 1000 + 10)


def _send(server: Server, n: int) -> None:
    with Producer("pg", namesrv_addr=server.address) as p:
        for i in range(n):
            p.send(Message(topic="P", body=f"{i}".encode()))


def _handles(resp: RemotingCommand) -> list[tuple[MessageExt, str]]:
    h = resp.read_header(wire.PopMessageResponseHeader)
    starts = wire.parse_offset_info(h.start_offset_info)
    out = []
    for r in split_records(resp.body):
        m = MessageExt(bytes(r))
        info = wire.ExtraInfo.build(
            starts[f"0@{m.queue_id}"][0], h.pop_time, h.invisible_time, h.revive_qid, m.topic,
            "broker-a", m.queue_id, m.queue_offset,
        )  # fmt: skip
        out.append((m, str(info)))
    return out


def test_held_pop_answers_when_a_message_arrives(server: Server, client: RemotingClient) -> None:
    assert _pop(client, server.address).code == ResponseCode.POLLING_TIMEOUT
    got: list[RemotingCommand] = []
    t = threading.Thread(target=lambda: got.append(_pop(client, server.address, 10_000)))
    t0 = time.monotonic()
    t.start()
    time.sleep(0.5)
    _send(server, 1)
    t.join()
    assert got[0].code == ResponseCode.SUCCESS
    assert time.monotonic() - t0 < 8
    assert [m.body for m, _ in _handles(got[0])] == [b"0"]


def test_ack_batch_ack_change_and_notification(server: Server, client: RemotingClient) -> None:
    _send(server, 4)
    note = wire.NotificationRequestHeader(
        consumer_group="g", topic="P", queue_id=-1, poll_time=0, born_time=0
    )
    resp = _call(client, server.address, RequestCode.NOTIFICATION, note)
    assert resp.read_header(wire.NotificationResponseHeader).has_msg is True
    popped = _handles(_pop(client, server.address))
    assert len(popped) == 4
    (m0, h0), (m1, h1), *rest = popped
    ack = wire.AckMessageRequestHeader(
        consumer_group="g", topic="P", queue_id=m0.queue_id, extra_info=h0,
        offset=m0.queue_offset,
    )  # fmt: skip
    assert _call(client, server.address, RequestCode.ACK_MESSAGE, ack).code == 0
    change = wire.ChangeInvisibleTimeRequestHeader(
        consumer_group="g", topic="P", queue_id=m1.queue_id, extra_info=h1,
        offset=m1.queue_offset, invisible_time=60_000,
    )  # fmt: skip
    resp = _call(client, server.address, RequestCode.CHANGE_MESSAGE_INVISIBLETIME, change)
    assert resp.code == 0
    assert resp.read_header(wire.ChangeInvisibleTimeResponseHeader).invisible_time == 60_000
    info = [wire.ExtraInfo.parse(h) for _, h in rest]
    acks = [
        wire.BatchAck("g", "P", "0", i.ck_queue_offset, i.queue_id, i.revive_qid, i.pop_time,
                      i.invisible_time, 1 << (i.queue_offset - i.ck_queue_offset))
        for i in info
    ]  # fmt: skip
    body = wire.encode_batch_ack_body(acks)
    assert _call(client, server.address, RequestCode.BATCH_ACK_MESSAGE, None, body).code == 0
    assert server.broker.pop.invisible_counts() == {("g", "P"): 1}  # m1, for a minute
    resp = _call(client, server.address, RequestCode.NOTIFICATION, note)
    assert resp.read_header(wire.NotificationResponseHeader).has_msg is False


@pytest.mark.parametrize(
    ("mangle", "code"),
    [
        (lambda h: h.rsplit(" ", 3)[0], ResponseCode.INVALID_PARAMETER),
        (lambda h: "x" + h, ResponseCode.INVALID_PARAMETER),
        (lambda h: h.replace("broker-a", "broker-z"), ResponseCode.INVALID_PARAMETER),
        (lambda h: h.replace(" 5000 ", " 5001 "), ResponseCode.NO_MESSAGE),
        (lambda h: "0 1000 5000 0 0 broker-a 0 0", ResponseCode.NO_MESSAGE),
    ],
)
def test_bad_handles_get_rocketmq_codes_and_change_nothing(
    server: Server, client: RemotingClient, mangle: Any, code: int
) -> None:
    _send(server, 1)
    ((m, good),) = _handles(_pop(client, server.address))
    bad = mangle(good)
    header = wire.AckMessageRequestHeader(
        consumer_group="g", topic="P", queue_id=m.queue_id, extra_info=bad,
        offset=m.queue_offset,
    )  # fmt: skip
    resp = _call(client, server.address, RequestCode.ACK_MESSAGE, header)
    assert resp.code == code, resp.remark
    assert resp.remark
    assert server.broker.pop.invisible_counts() == {("g", "P"): 1}
    # Another group's ack of the good handle is refused too.
    other = wire.AckMessageRequestHeader(
        consumer_group="h", topic="P", queue_id=m.queue_id, extra_info=good,
        offset=m.queue_offset,
    )  # fmt: skip
    assert _call(client, server.address, RequestCode.ACK_MESSAGE, other).code == (
        ResponseCode.NO_MESSAGE
    )
    assert server.broker.pop.invisible_counts() == {("g", "P"): 1}


def test_absurd_times_and_counts_are_refused(server: Server, client: RemotingClient) -> None:
    for invisible in (-1, 0, 10**13):
        assert _pop(client, server.address, invisible=invisible).code == (
            ResponseCode.INVALID_PARAMETER
        )
    assert _pop(client, server.address, n=33).code == ResponseCode.INVALID_PARAMETER
    late = wire.PopMessageRequestHeader(
        consumer_group="g", topic="P", queue_id=-1, max_msg_nums=1, invisible_time=5000,
        poll_time=1000, born_time=int(time.time() * 1000) - 60_000, init_mode=1,
    )  # fmt: skip
    resp = _call(client, server.address, RequestCode.POP_MESSAGE, late)
    assert resp.code == ResponseCode.POLLING_TIMEOUT
    body = b"not json"
    resp = _call(client, server.address, RequestCode.BATCH_ACK_MESSAGE, None, body)
    assert resp.code == ResponseCode.INVALID_PARAMETER


def test_the_revive_topic_takes_no_sends(server: Server) -> None:
    from mqcore.errors import MQClientError

    with Producer("pg", namesrv_addr=server.address) as p, pytest.raises(MQClientError) as info:
        p.send(Message(topic="rmq_sys_REVIVE_LOG_DefaultCluster", body=b"forged ck"))
    assert info.value.code == ResponseCode.NO_PERMISSION
    assert server.broker.topics.get("rmq_sys_REVIVE_LOG_DefaultCluster") is None


def test_invisible_pop_messages_are_a_gauge(tmp_path: Path) -> None:
    """``mqcore_pop_invisible_messages{group, topic}``: popped, unacked, time not over."""
    pytest.importorskip("prometheus_client")
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    def gauge(s: Server) -> dict[tuple[str, str], float]:
        assert s.metrics is not None
        with urllib.request.urlopen(f"http://{s.metrics.address}/metrics", timeout=10) as r:
            text = r.read().decode()
        return {
            (x.labels["group"], x.labels["topic"]): x.value
            for f in text_string_to_metric_families(text)
            if f.name == "mqcore_pop_invisible_messages"
            for x in f.samples
        }

    with Server(tmp_path, "127.0.0.1:0", "mmap", metrics_listen="127.0.0.1:0") as s:
        s.broker.create_topic("P", queue_nums=2)
        _send(s, 3)
        client = RemotingClient()
        try:
            assert gauge(s) == {}
            popped = _handles(_pop(client, s.address))
            assert gauge(s) == {("g", "P"): 3.0}
            m, h = popped[0]
            ack = wire.AckMessageRequestHeader(
                consumer_group="g", topic="P", queue_id=m.queue_id, extra_info=h,
                offset=m.queue_offset,
            )  # fmt: skip
            assert _call(client, s.address, RequestCode.ACK_MESSAGE, ack).code == 0
            assert gauge(s) == {("g", "P"): 2.0}
        finally:
            client.close()
