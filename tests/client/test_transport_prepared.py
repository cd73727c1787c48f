"""The remote transport's prepared single send and pull (one-call encode, the direct call,
one-call answer decode): the server receives what the header objects write, the results are
the general path's, and busy answers and refusals are handled as on the general path."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from mqcore.client.transport_remote import RemoteTransport
from mqcore.errors import BrokerError
from mqcore.message import Message, MessageQueue
from mqcore.protocol import headers
from mqcore.protocol.codes import RequestCode, ResponseCode
from mqcore.protocol.route import TopicRoute
from mqcore.remoting.command import RemotingCommand
from mqcore.remoting.server import RemotingServer, ServerConnection

pytestmark = pytest.mark.timeout(60)

MSG_ID = "7F00000100002A9F00000000000004D2"  # an offset message id: commit-log offset 1234


@pytest.fixture(autouse=True)
def transport() -> str:
    """These tests drive the remote transport alone (no broker behind it)."""
    return "remote"


class Scripted:
    """Answers routes and heartbeats; sends and pulls as ``script`` says, one answer per
    request in order (the last one repeats)."""

    def __init__(self) -> None:
        self.addr = ""
        self.script: dict[int, list[RemotingCommand]] = {}
        self.seen: list[RemotingCommand] = []

    def process(self, cmd: RemotingCommand, conn: ServerConnection) -> Any:
        if cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            route = TopicRoute.single("T", "broker-a", self.addr, 4, 4)
            return RemotingCommand.response(ResponseCode.SUCCESS, body=route.encode())
        if cmd.code in self.script:
            self.seen.append(cmd)
            answers = self.script[cmd.code]
            return answers.pop(0) if len(answers) > 1 else answers[0]
        return RemotingCommand.response(ResponseCode.SUCCESS)


@pytest.fixture
def scripted() -> Iterator[tuple[Scripted, RemoteTransport]]:
    processor = Scripted()
    server = RemotingServer(processor, workers=2)
    server.start()
    assert server.address is not None
    processor.addr = f"{server.address[0]}:{server.address[1]}"
    remote = RemoteTransport(processor.addr)
    try:
        remote.get_route_info_by_topic("T")
        yield processor, remote
    finally:
        remote.close()
        server.close()


def _sent(queue_offset: int = 7) -> RemotingCommand:
    header = headers.SendMessageResponseHeader(msg_id=MSG_ID, queue_id=2, queue_offset=queue_offset)
    return RemotingCommand.response(ResponseCode.SUCCESS, header=header)


def _busy() -> RemotingCommand:
    return RemotingCommand.response(ResponseCode.SYSTEM_BUSY, "busy")


def test_a_prepared_send_writes_what_the_header_object_writes(
    scripted: tuple[Scripted, RemoteTransport],
) -> None:
    processor, remote = scripted
    processor.script[RequestCode.SEND_MESSAGE_V2] = [_sent()]
    mq = MessageQueue("T", "broker-a", 2)
    msg = Message(topic="T", body=b"body", tags="A", keys="k", properties={"x": "1"})
    results = remote.send_message(mq, [msg], producer_group="pg", born_timestamp=1700000000000)
    assert [(r.msg_id, r.queue_offset, r.commitlog_offset) for r in results] == [(MSG_ID, 7, 1234)]
    assert results == RemoteTransport.send_results(_sent())
    (request,) = processor.seen
    header = request.read_header(headers.SendMessageRequestHeaderV2)
    assert (header.producer_group, header.topic, header.queue_id, header.born_timestamp) == (
        "pg", "T", 2, 1700000000000
    )  # fmt: skip
    assert request.ext_fields == header.to_ext_fields()
    assert bytes(request.body or b"") == b"body"


def test_a_busy_send_is_sent_again(scripted: tuple[Scripted, RemoteTransport]) -> None:
    processor, remote = scripted
    processor.script[RequestCode.SEND_MESSAGE_V2] = [_busy(), _busy(), _sent(9)]
    mq = MessageQueue("T", "broker-a", 0)
    results = remote.send_message(mq, [Message(topic="T", body=b"x")], producer_group="pg",
                                  born_timestamp=1)  # fmt: skip
    assert [r.queue_offset for r in results] == [9]
    assert len(processor.seen) == 3


def test_a_refused_send_raises_as_on_the_general_path(
    scripted: tuple[Scripted, RemoteTransport],
) -> None:
    processor, remote = scripted
    refusal = RemotingCommand.response(ResponseCode.NO_PERMISSION, "the topic is read-only")
    processor.script[RequestCode.SEND_MESSAGE_V2] = [refusal]
    mq = MessageQueue("T", "broker-a", 0)
    with pytest.raises(BrokerError, match="read-only") as caught:
        remote.send_message(mq, [Message(topic="T", body=b"x")], producer_group="pg",
                            born_timestamp=1)  # fmt: skip
    assert caught.value.code == ResponseCode.NO_PERMISSION


def test_a_prepared_pull_reads_its_answer_header(
    scripted: tuple[Scripted, RemoteTransport],
) -> None:
    processor, remote = scripted
    found = headers.PullMessageResponseHeader(
        suggest_which_broker_id=0, next_begin_offset=12, min_offset=3, max_offset=40
    )
    processor.script[RequestCode.PULL_MESSAGE] = [
        _busy(), RemotingCommand.response(ResponseCode.PULL_NOT_FOUND, header=found)
    ]  # fmt: skip
    mq = MessageQueue("T", "broker-a", 1)
    answer = remote.pull_message(mq, "cg", 12, 32, sub_expression="A || B")
    assert (answer.code, answer.next_begin_offset, answer.min_offset, answer.max_offset) == (
        ResponseCode.PULL_NOT_FOUND, 12, 3, 40
    )  # fmt: skip
    assert list(answer.records) == []
    request = processor.seen[-1]
    header = request.read_header(headers.PullMessageRequestHeader)
    assert (header.consumer_group, header.queue_id, header.queue_offset, header.subscription) == (
        "cg", 1, 12, "A || B"
    )  # fmt: skip
    assert request.ext_fields == header.to_ext_fields()
    assert len(processor.seen) == 2  # the busy answer was waited out


_BATCH_IDS = ",".join(f"7F00000100002A9F{offset:016X}" for offset in (1234, 2300, 3366))


def test_a_prepared_batch_writes_what_the_header_object_writes(
    scripted: tuple[Scripted, RemoteTransport], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch goes prepared (not through the header object's call) as SEND_BATCH_MESSAGE
    with the V2 header's fields (batch true) and the encoded batch as body; its results are
    what send_results reads of the same answer."""
    from mqcore.protocol.send import decode_batch, encode_batch

    processor, remote = scripted

    def general(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the batch took the general call")

    monkeypatch.setattr(remote, "_call", general)
    answer = RemotingCommand.response(
        ResponseCode.SUCCESS,
        header=headers.SendMessageResponseHeader(msg_id=_BATCH_IDS, queue_id=3, queue_offset=40),
    )
    processor.script[RequestCode.SEND_BATCH_MESSAGE] = [answer]
    mq = MessageQueue("T", "broker-a", 3)
    msgs = [Message(topic="T", body=b"b%d" % i, tags="A", properties={"x": "1"}) for i in range(3)]
    results = remote.send_message(mq, msgs, producer_group="pg", born_timestamp=1700000000000)
    assert [(r.msg_id, r.queue_offset, r.commitlog_offset) for r in results] == [
        (i, 40 + n, offset)
        for n, (i, offset) in enumerate(zip(_BATCH_IDS.split(","), (1234, 2300, 3366), strict=True))
    ]
    assert results == RemoteTransport.send_results(answer)
    assert all(type(r) is type(results[0]) for r in results)
    (request,) = processor.seen
    header = request.read_header(headers.SendMessageRequestHeaderV2)
    assert (header.topic, header.queue_id, header.batch, header.born_timestamp) == (
        "T", 3, True, 1700000000000
    )  # fmt: skip
    assert request.ext_fields == header.to_ext_fields()
    assert bytes(request.body or b"") == encode_batch(msgs)
    assert [m.body for m in decode_batch("T", bytes(request.body or b""))] == [b"b0", b"b1", b"b2"]


def test_a_busy_batch_is_sent_again_as_a_batch(scripted: tuple[Scripted, RemoteTransport]) -> None:
    processor, remote = scripted
    stored = RemotingCommand.response(
        ResponseCode.SUCCESS,
        header=headers.SendMessageResponseHeader(msg_id=_BATCH_IDS, queue_id=0, queue_offset=5),
    )
    processor.script[RequestCode.SEND_BATCH_MESSAGE] = [_busy(), stored]
    mq = MessageQueue("T", "broker-a", 0)
    msgs = [Message(topic="T", body=b"x") for _ in range(3)]
    results = remote.send_message(mq, msgs, producer_group="pg", born_timestamp=1)
    assert [r.queue_offset for r in results] == [5, 6, 7]
    assert len(processor.seen) == 2
    assert processor.seen[1].read_header(headers.SendMessageRequestHeaderV2).batch is True


@pytest.mark.parametrize(
    ("code", "error"),
    [(ResponseCode.MESSAGE_ILLEGAL, BrokerError), (ResponseCode.FLUSH_SLAVE_TIMEOUT, None)],
)
def test_a_batch_answer_other_than_success_reads_as_on_the_general_path(
    scripted: tuple[Scripted, RemoteTransport], code: int, error: type[Exception] | None
) -> None:
    """A refusal raises the general path's error; a SYNC_MASTER's stored-unconfirmed answer
    raises SlaveNotAcknowledgedError carrying every message's result."""
    from mqcore.errors import SlaveNotAcknowledgedError

    processor, remote = scripted
    answer = RemotingCommand.response(
        code,
        "no",
        header=headers.SendMessageResponseHeader(msg_id=_BATCH_IDS, queue_id=0, queue_offset=5),
    )
    processor.script[RequestCode.SEND_BATCH_MESSAGE] = [answer]
    mq = MessageQueue("T", "broker-a", 0)
    msgs = [Message(topic="T", body=b"x") for _ in range(3)]
    with pytest.raises(error or SlaveNotAcknowledgedError) as caught:
        remote.send_message(mq, msgs, producer_group="pg", born_timestamp=1)
    assert caught.value.code == code
    if error is None:
        assert isinstance(caught.value, SlaveNotAcknowledgedError)
        assert [r.queue_offset for r in caught.value.results] == [5, 6, 7]
