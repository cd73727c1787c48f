"""Every request code docs/remote.md lists is answered over the network, through the one table."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from mqcore import ConsumeConcurrentlyStatus, Message, Producer, PushConsumer
from mqcore.message import MessageQueue
from mqcore.protocol import bodies, headers
from mqcore.protocol.codes import RequestCode, ResponseCode
from mqcore.protocol.send import encode_batch
from mqcore.remoting.client import RemotingClient
from mqcore.remoting.command import RemotingCommand
from mqcore.server import OPERATION_TABLE, Server

DOC = Path(__file__).parents[2] / "docs" / "remote.md"


def _documented_codes() -> list[int]:
    """The request codes of the table under "What the server speaks", but those sent to clients."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## What the server speaks", 1)[1].split("\n## ", 1)[0]
    codes: list[int] = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or "(to clients)" in cells[0]:
            continue
        if re.fullmatch(r"\d+(\s*,\s*\d+)*", cells[0]):
            codes += [int(c) for c in cells[0].split(",")]
    return codes


CODES = _documented_codes()

# Answers other than SUCCESS that a well-formed request may get here, by code.
_ALSO = {
    RequestCode.QUERY_CONSUMER_OFFSET: {ResponseCode.QUERY_NOT_FOUND},
    # A made-up receipt handle names no invisible message.
    RequestCode.ACK_MESSAGE: {ResponseCode.NO_MESSAGE},
    RequestCode.CHANGE_MESSAGE_INVISIBLETIME: {ResponseCode.NO_MESSAGE},
}


@attrs.define
class _Scene:
    server: Server
    client: RemotingClient
    consumer_id: str
    queue_id: int  # where the message is
    commitlog_offset: int


@pytest.fixture
def scene(tmp_path: Path) -> Iterator[_Scene]:
    """A server with topic Orders holding one message, and a push consumer of group cg."""
    data = tmp_path / "data"
    small = {"store_options": {"segment_size": 1024 * 1024}}
    got = threading.Event()

    def listener(msgs: Any, ctx: Any) -> ConsumeConcurrentlyStatus:
        got.set()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    with Server(data, "127.0.0.1:0", settings=small) as server, RemotingClient() as client:
        server.broker.create_topic("Orders", queue_nums=4)
        with Producer("pg", namesrv_addr=server.address) as producer:
            sent = producer.send(Message(topic="Orders", body=b"paid", keys="order-1"))
        consumer = PushConsumer("cg", namesrv_addr=server.address, instance_name="c1")
        consumer.subscribe("Orders", "*")
        consumer.register_message_listener(listener)
        consumer.start()
        try:
            assert got.wait(10), "the consumer never got the message"
            found = server.broker.query_message("Orders", "order-1", 1, 0, 2**62)
            queue_id = sent.message_queue.queue_id
            yield _Scene(server, client, consumer.client_id, queue_id, found[0].commitlog_offset)
        finally:
            consumer.shutdown()


def _values(scene: _Scene) -> dict[str, Any]:
    """A value for each header field the documented requests carry, by attribute name."""
    now = int(time.time() * 1000)
    return {
        "topic": "Orders",
        "default_topic": "TBW102",
        "default_topic_queue_nums": 4,
        "queue_id": scene.queue_id,
        "sys_flag": 0,
        "born_timestamp": now,
        "flag": 0,
        "producer_group": "pg",
        "consumer_group": "cg",
        "group": "cg",
        "queue_offset": 0,
        "max_msg_nums": 1,
        "commit_offset": 0,
        "suspend_timeout_millis": 0,
        "sub_version": 0,
        "key": "order-1",
        "max_num": 32,
        "begin_timestamp": 0,
        "end_timestamp": now + 60_000,
        "read_queue_nums": 4,
        "write_queue_nums": 4,
        "perm": 6,
        "topic_filter_type": "SINGLE_TAG",
        "timestamp": 0,
        "offset": scene.commitlog_offset,
        "client_id": scene.consumer_id,
        "delay_level": 0,
        "invisible_time": 5_000,
        "poll_time": 0,
        "born_time": now,
        "init_mode": 0,
        "extra_info": f"0 {now} 5000 0 0 broker-a {scene.queue_id} 0",
    }


# Per code: header fields that differ from _values (requests that would undo the scene).
_OVERRIDES: dict[int, dict[str, Any]] = {
    RequestCode.UPDATE_AND_CREATE_TOPIC: {"topic": "Scratch"},
    RequestCode.DELETE_TOPIC_IN_BROKER: {"topic": "Scratch"},
    RequestCode.UNREGISTER_CLIENT: {"client_id": "127.0.0.1@probe", "consumer_group": "probe"},
    # "Unknown" (0): the half stays undecided, as an END_TRANSACTION with nothing to decide.
    RequestCode.END_TRANSACTION: {
        "tran_state_table_offset": 0,
        "commit_log_offset": 0,
        "commit_or_rollback": 0,
        "msg_id": "probe",
    },
    # Pop groups are not the push consumer's (a group pops or pulls).
    RequestCode.POP_MESSAGE: {"consumer_group": "popg"},
    RequestCode.ACK_MESSAGE: {"consumer_group": "popg", "offset": 0},
    RequestCode.CHANGE_MESSAGE_INVISIBLETIME: {"consumer_group": "popg", "offset": 0},
    RequestCode.NOTIFICATION: {"consumer_group": "popg"},
}


def _request(code: int, scene: _Scene) -> RemotingCommand:
    header_cls = headers.REQUEST_HEADERS.get(code)
    header = None
    if header_cls is not None:
        values = {**_values(scene), **_OVERRIDES.get(code, {})}
        fields = attrs.fields(header_cls)
        missing = [f.name for f in fields if f.default is attrs.NOTHING and f.name not in values]
        assert not missing, f"no sample value for {header_cls.__name__} fields {missing}"
        header = header_cls(**{f.name: values[f.name] for f in fields if f.name in values})
    mq = MessageQueue("Orders", scene.server.broker.config.broker_name, 3)
    body: bytes | None = {
        RequestCode.SEND_MESSAGE: b"probe",
        RequestCode.SEND_MESSAGE_V2: b"probe",
        RequestCode.SEND_BATCH_MESSAGE: encode_batch([Message(topic="Orders", body=b"probe")]),
        RequestCode.HEART_BEAT: bodies.HeartbeatData(client_id="127.0.0.1@probe").encode(),
        RequestCode.CHECK_CLIENT_CONFIG: b"{}",
        RequestCode.BATCH_ACK_MESSAGE: b'{"acks": []}',
        RequestCode.LOCK_BATCH_MQ: bodies.LockBatchRequestBody(
            consumer_group="probe", client_id="127.0.0.1@probe", mq_set=[mq]
        ).encode(),
        RequestCode.UNLOCK_BATCH_MQ: bodies.UnlockBatchRequestBody(
            consumer_group="probe", client_id="127.0.0.1@probe", mq_set=[mq]
        ).encode(),
    }.get(code)
    if code == RequestCode.SEND_BATCH_MESSAGE:
        header = attrs.evolve(header, batch=True)
    return RemotingCommand.request(code, header, body)


def test_the_document_lists_the_codes_the_table_serves() -> None:
    """The walk below covers the table: every code it serves is listed, and none twice."""
    assert len(CODES) == len(set(CODES))
    assert set(CODES) == set(OPERATION_TABLE)
    assert RequestCode.QUERY_BROKER_OFFSET in CODES


@pytest.mark.timeout(60)
def test_each_documented_code_is_answered_over_the_network(scene: _Scene) -> None:
    """Each code, in the document's order, sent as a well-formed request: answered SUCCESS
    (or a documented refusal), never REQUEST_CODE_NOT_SUPPORTED."""
    wrong = {}
    for code in CODES:
        answer = scene.client.invoke(scene.server.address, _request(code, scene), 10)
        if answer.code not in {ResponseCode.SUCCESS, *_ALSO.get(code, ())}:
            wrong[RequestCode(code).name] = (answer.code, answer.remark)
    assert not wrong


def test_query_broker_offset_is_the_queue_s_max_offset(scene: _Scene) -> None:
    """QUERY_BROKER_OFFSET (13) answers what GET_MAX_OFFSET (30) answers."""
    offsets = {}
    for code in (RequestCode.QUERY_BROKER_OFFSET, RequestCode.GET_MAX_OFFSET):
        header = headers.GetMaxOffsetRequestHeader(topic="Orders", queue_id=scene.queue_id)
        answer = scene.client.invoke(
            scene.server.address, RemotingCommand.request(code, header), 10
        )
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        offsets[code] = answer.read_header(headers.GetMaxOffsetResponseHeader).offset
    assert offsets[RequestCode.QUERY_BROKER_OFFSET] == offsets[RequestCode.GET_MAX_OFFSET]
    stored = scene.server.broker.get_max_offset("Orders", scene.queue_id)
    assert offsets[RequestCode.GET_MAX_OFFSET] == stored
    assert offsets[RequestCode.GET_MAX_OFFSET] >= 1


def test_lite_pull_is_answered_as_pull(scene: _Scene) -> None:
    """LITE_PULL_MESSAGE (361, RocketMQ 5.x's lite pull consumer) finds what PULL_MESSAGE
    (11) finds: the same message at the same offset."""
    answers = {}
    for code in (RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE):
        request = _request(code, scene)
        answer = scene.client.invoke(scene.server.address, request, 10)
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        answers[code] = bytes(answer.body or b"")
    assert answers[RequestCode.LITE_PULL_MESSAGE] == answers[RequestCode.PULL_MESSAGE]
    assert b"paid" in answers[RequestCode.PULL_MESSAGE]


def test_get_topic_config_answers_the_topic_s_config(scene: _Scene) -> None:
    """GET_TOPIC_CONFIG (351): the topic's config under RocketMQ's field names; an unknown
    topic is TOPIC_NOT_EXIST."""
    import json

    def ask(topic: str) -> RemotingCommand:
        header = headers.GetTopicConfigRequestHeader(topic=topic)
        request = RemotingCommand.request(RequestCode.GET_TOPIC_CONFIG, header)
        return scene.client.invoke(scene.server.address, request, 10)

    answer = ask("Orders")
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    config = json.loads(bytes(answer.body or b""))
    assert config["topicName"] == "Orders"
    assert (config["readQueueNums"], config["writeQueueNums"], config["perm"]) == (4, 4, 6)
    assert ask("NoSuchTopic").code == ResponseCode.TOPIC_NOT_EXIST


def test_a_code_not_served_is_answered_and_logged(scene: _Scene) -> None:
    """A code outside the table is answered REQUEST_CODE_NOT_SUPPORTED and logged with the
    code, so a client feature that needs it shows in the server's log."""
    from structlog.testing import capture_logs

    with capture_logs() as logs:
        answer = scene.client.invoke(scene.server.address, RemotingCommand.request(9999), 10)
    assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert [e for e in logs if e["event"] == "request_not_supported"] == [
        {"event": "request_not_supported", "code": 9999, "log_level": "warning"}
    ]


def test_a_single_send_answers_its_unique_id_as_transaction_id(scene: _Scene) -> None:
    """As a RocketMQ broker does, a send's answer carries the message's UNIQ_KEY as
    ``transactionId`` (RocketMQ's Java TransactionMQProducer returns it as the transaction
    id); a batch has no one id and answers none."""
    from mqcore.message import format_properties

    def send(code: int, body: bytes, properties: str, batch: bool = False) -> Any:
        header = headers.SendMessageRequestHeader(
            producer_group="pg", topic="Orders", default_topic="TBW102",
            default_topic_queue_nums=4, queue_id=0, sys_flag=0,
            born_timestamp=int(time.time() * 1000), flag=0, properties=properties,
            reconsume_times=0, batch=batch,
        )  # fmt: skip
        request = RemotingCommand.request(code, header, body)
        answer = scene.client.invoke(scene.server.address, request, 10)
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        return answer.read_header(headers.SendMessageResponseHeader)

    uniq = "7F0000010001000000000000000000AB"
    answered = send(RequestCode.SEND_MESSAGE, b"tx", format_properties({"UNIQ_KEY": uniq}))
    assert answered.transaction_id == uniq
    assert send(RequestCode.SEND_MESSAGE, b"plain", "").transaction_id is None
    batch = encode_batch([Message(topic="Orders", body=b"b1"), Message(topic="Orders", body=b"b2")])
    assert send(RequestCode.SEND_MESSAGE, batch, "", batch=True).transaction_id is None
