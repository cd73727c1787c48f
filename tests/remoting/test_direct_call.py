"""The direct call (mqcore.remoting.client): a synchronous caller that finds nobody reading
writes its request and blocks in recv_into for its own answer. What it must keep: deadlines,
the server's requests on the same connection, other callers' answers, reconnection, prepared
requests read with their plan, and nothing left behind."""

from __future__ import annotations

import threading
import time

import pytest
from remotingtest import BIND, ECHO, PARK, SILENT, ScriptedProcessor

from mqcore.errors import InvalidArgumentError, RemotingConnectError, RemotingTimeoutError
from mqcore.protocol.codes import RequestCode
from mqcore.protocol.headers import NotifyConsumerIdsChangedRequestHeader
from mqcore.remoting import client as client_module
from mqcore.remoting.client import RemotingClient
from mqcore.remoting.command import (
    PreparedRequest,
    RemotingCommand,
    encode_request_head,
    next_opaque,
)
from mqcore.remoting.frame import FrameDecoder
from mqcore.remoting.server import RemotingServer
from mqcore.remoting.signing import Credentials

pytestmark = pytest.mark.timeout(60)


def _cmd(code: int, body: bytes | None = None, **ext: object) -> RemotingCommand:
    return RemotingCommand(code, body=body, ext_fields={k: str(v) for k, v in ext.items()} or None)


@pytest.fixture
def direct(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The opaques of the requests that went through the direct call."""
    taken: list[int] = []
    call = client_module._Connection.call

    def counting(conn: client_module._Connection, cmd: object, deadline: float) -> object:
        taken.append(cmd.opaque)  # type: ignore[attr-defined]
        return call(conn, cmd, deadline)  # type: ignore[arg-type]

    monkeypatch.setattr(client_module._Connection, "call", counting)
    return taken


@pytest.mark.parametrize("timeout", [0.03, 0.3])
def test_a_direct_call_ends_at_its_deadline(
    client: RemotingClient, addr: str, direct: list[int], timeout: float
) -> None:
    """Shorter than a read's tick (polled) and longer (blocking reads): the call fails at
    its deadline, naming address and code, and the connection serves the next call."""
    assert client.invoke(addr, _cmd(ECHO, b"warm"), 5).body == b"warm"
    silent = _cmd(SILENT)
    began = time.monotonic()
    with pytest.raises(RemotingTimeoutError, match=f"{addr}.*code {SILENT}"):
        client.invoke(addr, silent, timeout)
    took = time.monotonic() - began
    assert timeout <= took < timeout + 1.0
    assert silent.opaque in direct
    assert client.invoke(addr, _cmd(ECHO, b"after"), 5).body == b"after"


def test_a_late_answer_is_not_taken_for_the_next_one(
    client: RemotingClient, addr: str, direct: list[int]
) -> None:
    assert client.invoke(addr, _cmd(ECHO, b"warm"), 5).body == b"warm"
    with pytest.raises(RemotingTimeoutError):
        client.invoke(addr, _cmd(PARK, ms=200), 0.05)
    time.sleep(0.3)  # the late answer arrives while nobody waits for it
    answer = client.invoke(addr, _cmd(ECHO, b"next"), 5)
    assert (answer.body, answer.remark) == (b"next", None)
    answer = client.invoke(addr, _cmd(ECHO, b"and next"), 5)
    assert answer.body == b"and next"


def test_server_requests_during_a_direct_call_reach_the_handler(
    server: RemotingServer, addr: str, direct: list[int]
) -> None:
    """While a caller blocks for its answer, the server's requests on that connection reach
    the handler (on the client's handler thread) and are answered; the caller then gets
    its own answer."""
    seen: list[tuple[int, str | None, str]] = []

    def handler(cmd: RemotingCommand, peer: str) -> RemotingCommand | None:
        header = cmd.read_header(NotifyConsumerIdsChangedRequestHeader)
        seen.append((cmd.code, header.consumer_group, threading.current_thread().name))
        return None if cmd.is_oneway else RemotingCommand.response(0, remark="handled")

    with RemotingClient(handler) as cli:
        assert cli.invoke(addr, _cmd(BIND, clientId="direct"), 5).code == 0
        conn = server.find_connection("direct")
        assert conn is not None
        answers: list[RemotingCommand] = []

        def push() -> None:
            header = NotifyConsumerIdsChangedRequestHeader(consumer_group="cg")
            request = RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, header)
            conn.send_oneway(request)
            answers.append(
                conn.request(
                    RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, header), 5
                )
            )

        pusher = threading.Timer(0.1, push)
        parked = _cmd(PARK, ms=600)
        pusher.start()
        try:
            assert cli.invoke(addr, parked, 10).remark == "parked"
        finally:
            pusher.join(10)
        assert parked.opaque in direct
        assert [a.remark for a in answers] == ["handled"]
        assert [(code, group) for code, group, _ in seen] == [(40, "cg"), (40, "cg")]
        me = threading.current_thread().name
        assert all(name != me and name.startswith("mqcore-remoting-client-handler")
                   for _, _, name in seen)  # fmt: skip


def test_threads_calling_at_once_each_get_their_own_answer(
    client: RemotingClient, addr: str, direct: list[int]
) -> None:
    """Eight threads on one connection: whoever leads reads the others' answers; every
    caller gets the answer to its own request."""
    wrong: list[tuple[bytes, bytes | None]] = []

    def calls(n: int) -> None:
        for i in range(150):
            body = f"{n}-{i}".encode()
            if i % 3 == 0:
                answer = client.invoke(addr, _cmd(PARK, body, ms=1), 10)
                if answer.remark != "parked":
                    wrong.append((body, answer.remark.encode() if answer.remark else None))
                continue
            answer = client.invoke(addr, _cmd(ECHO, body), 10)
            if answer.body != body:
                wrong.append((body, answer.body))

    threads = [threading.Thread(target=calls, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert wrong == []
    assert len(direct) > 0  # some calls were direct, the others waited for a leader


def test_a_direct_call_whose_connection_drops_fails_and_the_next_reconnects(
    client: RemotingClient, addr: str, server: RemotingServer, direct: list[int]
) -> None:
    assert client.invoke(addr, _cmd(BIND, clientId="drop"), 5).code == 0
    conn = server.find_connection("drop")
    assert conn is not None
    closer = threading.Timer(0.2, conn.close)
    closer.start()
    try:
        with pytest.raises(RemotingConnectError, match="lost before the answer"):
            client.invoke(addr, _cmd(PARK, ms=5000), 10)
    finally:
        closer.join(5)
    assert client.invoke(addr, _cmd(ECHO, b"again"), 5).body == b"again"


def test_a_server_restarted_on_its_port_is_called_again(
    leak_check: None, processor: ScriptedProcessor
) -> None:
    first = RemotingServer(processor, workers=2)
    first.start()
    assert first.address is not None
    host, port = first.address[:2]
    addr = f"{host}:{port}"
    with RemotingClient() as cli:
        try:
            assert cli.invoke(addr, _cmd(ECHO, b"one"), 5).body == b"one"
        finally:
            first.close()
        with pytest.raises(RemotingConnectError):
            cli.invoke(addr, _cmd(ECHO, b"down"), 2)
        second = RemotingServer(processor, workers=2, host=host, port=port)
        second.start()
        try:
            # The first call after the restart may still meet the old connection's end.
            deadline = time.monotonic() + 5
            while True:
                try:
                    assert cli.invoke(addr, _cmd(ECHO, b"two"), 5).body == b"two"
                    break
                except RemotingConnectError:
                    assert time.monotonic() < deadline
        finally:
            second.close()


def test_a_prepared_request_is_read_with_its_plan(
    client: RemotingClient, addr: str, direct: list[int]
) -> None:
    """The answer has the plan's fields: read with the plan; it has not (ECHO answers no
    extFields, so a required field is missing): read as a command."""
    assert client.invoke(addr, _cmd(ECHO, b"warm"), 5).body == b"warm"
    first = opaque = next_opaque()
    head = encode_request_head(ECHO, opaque, ("k",), ("v",), 3)
    answer = client.invoke_prepared(addr, PreparedRequest(ECHO, opaque, head, b"abc", ()), 5)
    assert isinstance(answer, tuple)
    assert (answer[0], answer[1], answer[4], answer[5]) == (0, opaque, (), b"abc")
    opaque = next_opaque()
    head = encode_request_head(ECHO, opaque, (), (), 3)
    request = PreparedRequest(ECHO, opaque, head, b"xyz", (("msgId", 0, True),))
    answer = client.invoke_prepared(addr, request, 5)
    assert isinstance(answer, RemotingCommand)
    assert (answer.opaque, answer.body) == (opaque, b"xyz")
    assert first in direct and opaque in direct


def test_a_lone_answer_frame_is_read_where_it_lies(
    client: RemotingClient, addr: str, direct: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A prepared request's answer that arrives whole and alone is read with the plan
    straight from the read buffer (the frame decoder is not fed), and what comes back owns
    its bytes: the next read into the same buffer leaves it as it was."""
    assert client.invoke(addr, _cmd(ECHO, b"warm"), 5).body == b"warm"
    fed: list[int] = []
    feed = FrameDecoder.feed

    def counting(decoder: FrameDecoder, data: bytes) -> list[bytes]:
        fed.append(len(data))
        return feed(decoder, data)

    monkeypatch.setattr(FrameDecoder, "feed", counting)
    answers = []
    for body in (b"first answer", b"second"):
        opaque = next_opaque()
        head = encode_request_head(ECHO, opaque, ("k",), ("v",), len(body))
        answer = client.invoke_prepared(addr, PreparedRequest(ECHO, opaque, head, body, ()), 5)
        assert isinstance(answer, tuple)
        answers.append(answer)
    assert [(a[0], a[5]) for a in answers] == [(0, b"first answer"), (0, b"second")]
    assert fed == []


def test_a_large_prepared_request_and_its_answer_in_many_reads(
    client: RemotingClient, addr: str, direct: list[int]
) -> None:
    """A body past the copy limit is written from its own buffer after the header, and an
    answer that takes several reads goes through the frame decoder: both arrive whole."""
    body = bytes(range(256)) * 4096 + b"tail"
    opaque = next_opaque()
    head = encode_request_head(ECHO, opaque, (), (), len(body))
    answer = client.invoke_prepared(addr, PreparedRequest(ECHO, opaque, head, body, ()), 10)
    assert isinstance(answer, tuple)
    assert (answer[0], answer[1], answer[5]) == (0, opaque, body)
    assert opaque in direct
    assert client.invoke(addr, _cmd(ECHO, b"after"), 5).body == b"after"


def test_a_prepared_request_is_refused_by_a_client_that_signs(addr: str) -> None:
    with RemotingClient(credentials=Credentials("ak", "sk")) as signing:
        opaque = next_opaque()
        head = encode_request_head(ECHO, opaque, (), (), 0)
        with pytest.raises(InvalidArgumentError, match="cannot be signed"):
            signing.invoke_prepared(addr, PreparedRequest(ECHO, opaque, head, b"", ()), 5)


def test_without_timed_reads_a_direct_call_polls_to_its_deadline(
    client: RemotingClient, addr: str, direct: list[int]
) -> None:
    """A system that refuses SO_RCVTIMEO: each read polls first, and the deadline holds."""
    assert client.invoke(addr, _cmd(ECHO, b"warm"), 5).body == b"warm"
    client._conns[addr]._timed_reads = False
    began = time.monotonic()
    with pytest.raises(RemotingTimeoutError):
        client.invoke(addr, _cmd(SILENT), 0.3)
    assert 0.3 <= time.monotonic() - began < 1.3
    assert client.invoke(addr, _cmd(ECHO, b"after"), 5).body == b"after"


def test_an_async_request_after_direct_calls_does_not_wait_for_the_readers_next_look(
    client: RemotingClient, addr: str, direct: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reader thread looks again only now and then while synchronous calls lead; an
    asynchronous request sent after them wakes it, so its answer is read at once."""
    monkeypatch.setattr(client_module, "_ASIDE_LOOK", 120.0)
    for _ in range(20):
        assert client.invoke(addr, _cmd(ECHO, b"sync"), 5).body == b"sync"
    fut = client.invoke_async(addr, _cmd(ECHO, b"async"), 30)
    assert fut.result(timeout=10).body == b"async"
