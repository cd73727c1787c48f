"""Group commit in ``mqcore serve``: the single sends one wake-up of the event loop brings, from
one connection or several, are stored by one put_many and each answered after it; with the
direct branch and group commit turned off the same requests get the same answers; and a
SIGKILL while pipelined sends are in flight loses nothing that was acknowledged."""

from __future__ import annotations

import random
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from countingstore import CountingStore
from mqserve import ServeProcess
from mqtest import wait_until

from mqcore import Broker
from mqcore.protocol import headers
from mqcore.protocol.codes import RequestCode, ResponseCode
from mqcore.remoting.command import RemotingCommand
from mqcore.server import Server

pytestmark = pytest.mark.timeout(300)


def _send(topic: str, body: bytes, queue_id: int, opaque: int) -> bytes:
    """A SEND_MESSAGE_V2 frame as the Java client writes it."""
    header = headers.SendMessageRequestHeaderV2(
        producer_group="pg",
        topic=topic,
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=queue_id,
        sys_flag=0,
        born_timestamp=1732800000000,
        flag=0,
        properties=f"UNIQ_KEY\x01U{opaque:08d}\x02",
        reconsume_times=0,
    )
    cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header, body)
    cmd.opaque = opaque
    return cmd.encode()


def _read_answers(sock: socket.socket, count: int) -> list[RemotingCommand]:
    """``count`` answer frames off ``sock``, in the order they came."""
    buf = bytearray()
    out: list[RemotingCommand] = []
    while len(out) < count:
        while len(buf) >= 4 and len(buf) >= 4 + int.from_bytes(buf[:4], "big"):
            size = int.from_bytes(buf[:4], "big")
            out.append(RemotingCommand.decode(bytes(buf[4 : 4 + size])))
            del buf[: 4 + size]
        if len(out) >= count:
            break
        chunk = sock.recv(1 << 16)
        if not chunk:
            break
        buf += chunk
    return out


@pytest.fixture
def served(tmp_path: Path, store_name: str) -> Iterator[Server]:
    """An in-process server with topic T (4 queues) and a small body limit."""
    settings = {"max_message_size": 2048}
    with Server(tmp_path / "data", "127.0.0.1:0", store=store_name, settings=settings) as server:
        server.broker.create_topic("T", queue_nums=4)
        yield server


def _connect(address: str, n: int) -> list[socket.socket]:
    host, _, port = address.rpartition(":")
    return [socket.create_connection((host, int(port)), timeout=30) for _ in range(n)]


def test_pipelined_sends_from_several_connections_share_one_put_many(served: Server) -> None:
    """Four connections pipeline six sends each (one too large) while the loop is held: all
    of them arrive in one wake-up, 23 are stored by one put_many, each answer is its own."""
    counting = CountingStore(served.broker.store)
    served.broker.store = counting  # type: ignore[assignment]
    socks = _connect(served.address, 4)
    try:
        # Every connection accepted first, then the server's loop held, so that every frame
        # below is waiting when it wakes up.
        assert wait_until(lambda: len(served.remoting.connections()) == 4, timeout=10)
        loop = served.remoting._loop
        assert loop is not None
        held, release = threading.Event(), threading.Event()

        def hold() -> None:
            held.set()
            release.wait(30)

        loop.call_soon_threadsafe(hold)
        assert held.wait(10)
        sent: dict[int, tuple[int, bytes]] = {}
        for c, sock in enumerate(socks):
            frames = []
            for i in range(6):
                opaque = 1000 * (c + 1) + i
                body = b"z" * 3000 if (c, i) == (2, 3) else b"c%d-m%d" % (c, i)
                sent[opaque] = (c % 4, body)
                frames.append(_send("T", body, c % 4, opaque))
            sock.sendall(b"".join(frames))
        release.set()
        answers = {a.opaque: a for sock in socks for a in _read_answers(sock, 6)}
    finally:
        for sock in socks:
            sock.close()
    assert sorted(answers) == sorted(sent)
    assert counting.groups == [23]
    refused = answers[3003]
    assert refused.code == ResponseCode.MESSAGE_ILLEGAL and "2048" in (refused.remark or "")
    for opaque, (queue_id, body) in sent.items():
        if opaque == 3003:
            continue
        a = answers[opaque]
        assert a.code == ResponseCode.SUCCESS, a.remark
        assert a.ext_fields is not None and a.ext_fields["transactionId"] == f"U{opaque:08d}"
        assert int(a.ext_fields["queueId"]) == queue_id
        got = served.broker.pull_message("chk", "T", queue_id, int(a.ext_fields["queueOffset"]), 1)
        assert got.messages[0].body == body
        assert got.messages[0].offset_msg_id == a.ext_fields["msgId"]
    # One connection's sends keep their order in their queue.
    offsets = [int(answers[1000 + i].ext_fields["queueOffset"]) for i in range(6)]  # type: ignore[index]
    assert offsets == sorted(offsets) == list(range(offsets[0], offsets[0] + 6))


def _comparable(a: RemotingCommand) -> tuple[Any, ...]:
    """An answer's fields, its msgId without the server's own address (the two servers
    listen on different ports; the commit-log offset it holds must match)."""
    ext = dict(a.ext_fields or {})
    if "msgId" in ext:
        ext["msgId"] = ext["msgId"][16:]
    return (a.opaque, a.code, a.remark, ext, a.flag, a.language, a.version)


def _exchange(server: Server, frames_per_conn: list[list[bytes]]) -> list[list[Any]]:
    socks = _connect(server.address, len(frames_per_conn))
    try:
        for sock, frames in zip(socks, frames_per_conn, strict=True):
            sock.sendall(b"".join(frames))
        return [
            [_comparable(a) for a in _read_answers(sock, len(frames))]
            for sock, frames in zip(socks, frames_per_conn, strict=True)
        ]
    finally:
        for sock in socks:
            sock.close()


def test_same_answers_with_the_direct_branch_and_group_commit_off(
    tmp_path: Path, store_name: str
) -> None:
    """The same pipelined requests to a server with the direct branch and group commit and to
    one without: the same answers (order within a connection included), field by field."""
    rng = random.Random(36)
    conns: list[list[bytes]] = []
    for c in range(3):
        frames = []
        for i in range(40):
            topic = rng.choice(["T", "T", "T", "bad topic!", "Auto"])
            body = b"z" * 3000 if rng.random() < 0.05 else b"c%d-%d" % (c, i)
            frames.append(_send(topic, body, rng.choice([0, 1, 2, 3, 9]), 100 * c + i + 1))
        conns.append(frames)
    answers = []
    for fast in (False, True):
        settings = {"max_message_size": 2048}
        data = tmp_path / f"data-{fast}"
        with Server(data, "127.0.0.1:0", store=store_name, settings=settings) as server:
            server.broker.create_topic("T", queue_nums=4)
            if not fast:
                server.processor.direct = False
                server.remoting.group_codes = frozenset()
            else:
                assert server.remoting.group_codes
            # One connection after the other: the stores' order, and so the offsets, match.
            answers.append([_exchange(server, [frames])[0] for frames in conns])
    assert answers[0] == answers[1]
    codes = {a[1] for per_conn in answers[0] for a in per_conn}
    assert {ResponseCode.SUCCESS, ResponseCode.MESSAGE_ILLEGAL} <= codes


@pytest.mark.parametrize("store", ["mmap", "lmdb"])
def test_sigkill_with_pipelined_sends_in_flight_loses_nothing_acknowledged(
    tmp_path: Path, store: str
) -> None:
    """Eight connections keep 64 sends each in flight; ``mqcore serve`` is SIGKILLed at a
    random moment: after the restart every acknowledged send is where its answer said."""
    data = tmp_path / "data"
    server = ServeProcess(data, store=store)
    addr = server.start("127.0.0.1:0")
    acked: dict[int, tuple[int, int, bytes]] = {}  # opaque -> queue, offset, body
    lock = threading.Lock()
    killed = threading.Event()

    def pipeline(c: int) -> None:
        host, _, port = addr.rpartition(":")
        try:
            sock = socket.create_connection((host, int(port)), timeout=30)
        except OSError:
            return
        with sock:
            window = 64
            n = 0
            bodies: dict[int, tuple[int, bytes]] = {}

            def more(count: int) -> None:
                nonlocal n
                frames = []
                for _ in range(count):
                    opaque = c * 10_000_000 + n + 1
                    body = b"c%d-n%d-" % (c, n) + bytes(rng.randrange(256) for _ in range(32))
                    bodies[opaque] = (n % 4, body)
                    frames.append(_send("Crash", body, n % 4, opaque))
                    n += 1
                sock.sendall(b"".join(frames))

            rng = random.Random(c)
            try:
                more(window)
                while not killed.is_set():
                    got = _read_answers(sock, 1)
                    if not got:
                        return
                    a = got[0]
                    if a.code == ResponseCode.SUCCESS and a.ext_fields is not None:
                        queue_id, body = bodies[a.opaque]
                        with lock:
                            acked[a.opaque] = (queue_id, int(a.ext_fields["queueOffset"]), body)
                    more(1)
            except OSError:
                return

    threads = [threading.Thread(target=pipeline, args=(c,)) for c in range(8)]
    try:
        for t in threads:
            t.start()
        # Killed once a good number of sends are acknowledged, at a random point after.
        deadline = threading.Event()
        while len(acked) < 3000 and not deadline.wait(0.05):
            assert all(t.is_alive() for t in threads) or len(acked) >= 3000
        deadline.wait(random.uniform(0.0, 0.3))
        server.kill()
        killed.set()
    finally:
        killed.set()
        if server.proc is not None and server.proc.poll() is None:
            server.kill()
        for t in threads:
            t.join(30)
    assert len(acked) >= 3000
    with Broker(data, store=store) as broker:
        for opaque, (queue_id, offset, body) in acked.items():
            got = broker.pull_message("chk", "Crash", queue_id, offset, 1)
            assert got.messages and got.messages[0].body == body, opaque
