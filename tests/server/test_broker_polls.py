"""Long polls held by the broker's processor: parked without threads, answered when a message
arrives, and forgotten at once when their client vanishes mid-poll."""

from __future__ import annotations

import socket
import struct
import threading
import time
from pathlib import Path

import pytest
from mqtest import wait_until

from mqcore import Message
from mqcore.protocol import headers
from mqcore.protocol.codes import RequestCode, ResponseCode
from mqcore.remoting.command import RemotingCommand
from mqcore.server import Server

pytestmark = pytest.mark.timeout(60)


def _pull_frame(queue_id: int, hold_ms: int) -> bytes:
    header = headers.PullMessageRequestHeader(
        consumer_group="g", topic="P", queue_id=queue_id, queue_offset=0, max_msg_nums=32,
        sys_flag=int(headers.PullSysFlag.SUSPEND | headers.PullSysFlag.SUBSCRIPTION),
        commit_offset=0, suspend_timeout_millis=hold_ms, sub_version=0, subscription="*",
        expression_type="TAG",
    )  # fmt: skip
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, header).encode()


def _read_answer(sock: socket.socket) -> RemotingCommand:
    head = b""
    while len(head) < 4:
        head += sock.recv(4 - len(head))
    (total,) = struct.unpack(">i", head)
    data = b""
    while len(data) < total:
        data += sock.recv(total - len(data))
    return RemotingCommand.decode(data)


def _parked(server: Server) -> int:
    waiters = server.broker.waiters
    with waiters._lock:
        return sum(len(v) for v in waiters._callbacks.values())


def test_held_polls_use_no_thread_and_wake_on_a_message(tmp_path: Path) -> None:
    with Server(tmp_path, "127.0.0.1:0") as server:
        server.broker.create_topic("P", queue_nums=1)
        host, port = server.address.rsplit(":", 1)
        threads = threading.active_count()
        socks = [socket.create_connection((host, int(port)), timeout=10) for _ in range(20)]
        try:
            for s in socks:
                s.sendall(_pull_frame(0, 20_000))
            assert wait_until(lambda: _parked(server) == 20, 5)
            assert threading.active_count() <= threads + 1  # parked, not a thread each
            begin = time.monotonic()
            server.broker.send_message("P", 0, [Message(topic="P", body=b"wake")])
            for s in socks:
                answer = _read_answer(s)
                assert answer.code == ResponseCode.SUCCESS and b"wake" in (answer.body or b"")
            assert time.monotonic() - begin < 5
        finally:
            for s in socks:
                s.close()


def test_a_client_vanishing_mid_poll_leaves_nothing_parked(tmp_path: Path) -> None:
    with Server(tmp_path, "127.0.0.1:0") as server:
        server.broker.create_topic("P", queue_nums=1)
        host, port = server.address.rsplit(":", 1)
        for _ in range(3):
            socks = [socket.create_connection((host, int(port)), timeout=10) for _ in range(10)]
            for s in socks:
                s.sendall(_pull_frame(0, 25_000))
            assert wait_until(lambda: _parked(server) == 10, 5)
            for s in socks:
                s.close()
            # Gone with its connection, long before its 25 s hold would end.
            assert wait_until(lambda: _parked(server) == 0, 5)
            assert wait_until(lambda: len(server.remoting.connections()) == 0, 5)
