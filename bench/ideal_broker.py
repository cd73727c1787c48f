"""An ideal broker: answers every request at once with a canned answer, to measure clients.

Nothing is stored. The server reads a request's code and opaque straight from the bytes
(the JSON header as mqcore's and the Java client write it, or RocketMQ's binary header) and
writes a prepared answer with that opaque patched in:

- GET_ROUTEINFO_BY_TOPIC: a route naming this server as the master of ``broker-a``, 4 queues;
- SEND_MESSAGE / SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE: SUCCESS with a fixed msgId, queueId
  and queueOffset;
- anything else (heartbeats, unregistering): a bare SUCCESS.

One blocking thread per connection, so the server's own cost per request is a ``recv`` and a
``send`` and a few byte slices: what is left is the client's. Run it alone::

    python bench/ideal_broker.py [--listen 127.0.0.1:0]

(it prints ``listening HOST:PORT`` and serves until killed), or start it from a bench with
:func:`start`, which runs it as a child process and returns its address.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import subprocess
import sys
import threading

_INT = struct.Struct(">i")
_PREFIX = struct.Struct(">ii")
_BIN_OPAQUE = struct.Struct(">i")  # the binary header's opaque, at byte 5 of the header

SEND_CODES = (10, 310, 320)  # SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE
ROUTE_CODE = 105  # GET_ROUTEINFO_BY_TOPIC
OPAQUE_WIDTH = 11  # the widest int32 in decimal, sign included


def _route_body(addr: str) -> bytes:
    route = {
        "queueDatas": [
            {"brokerName": "broker-a", "readQueueNums": 4, "writeQueueNums": 4,
             "perm": 6, "topicSysFlag": 0}
        ],
        "brokerDatas": [
            {"cluster": "DefaultCluster", "brokerName": "broker-a", "brokerAddrs": {"0": addr}}
        ],
        "filterServerTable": {},
    }  # fmt: skip
    return json.dumps(route, separators=(",", ":")).encode()


class Canned:
    """One prepared answer: the frame's bytes with room for the opaque, in each header
    serialisation."""

    def __init__(self, ext: dict[str, str] | None, body: bytes = b"") -> None:
        fixed = '{"code":0,"language":"JAVA","version":401,"opaque":'
        rest = ',"flag":1'
        if ext is not None:
            rest += ',"extFields":' + json.dumps(ext, separators=(",", ":"))
        rest += ',"serializeTypeCurrentRPC":"JSON"}'
        head = fixed.encode(), rest.encode()
        size = len(head[0]) + OPAQUE_WIDTH + len(head[1])
        self.json = (_PREFIX.pack(4 + size + len(body), size) + head[0], head[1] + body)
        entries = b"".join(
            struct.pack(">h", len(k)) + k.encode() + _INT.pack(len(v)) + v.encode()
            for k, v in (ext or {}).items()
        )
        binary_tail = _INT.pack(1) + _INT.pack(0) + _INT.pack(len(entries)) + entries
        size = 9 + len(binary_tail)  # code, language, version, opaque; flag in the tail
        self.binary = (
            _PREFIX.pack(4 + size + len(body), (1 << 24) | size) + struct.pack(">hbh", 0, 0, 401),
            binary_tail + body,
        )

    def frame(self, opaque: int, binary: bool) -> bytes:
        """The answer carrying ``opaque``."""
        if binary:
            head, tail = self.binary
            return head + _BIN_OPAQUE.pack(opaque) + tail
        head, tail = self.json
        return head + str(opaque).rjust(OPAQUE_WIDTH).encode() + tail


class IdealBroker:
    """The server: one listening socket, one thread per connection."""

    def __init__(self, listen: str = "127.0.0.1:0") -> None:
        host, port = listen.rsplit(":", 1)
        self.sock = socket.create_server((host, int(port)))
        self.addr = "{}:{}".format(*self.sock.getsockname()[:2])
        self.send = Canned(
            {"msgId": "7F00000100002A9F0000000000000000", "queueId": "0", "queueOffset": "0"}
        )
        self.route = Canned(None, _route_body(self.addr))
        self.plain = Canned(None)

    def serve_forever(self) -> None:
        """Accept connections until the process ends."""
        while True:
            conn, _ = self.sock.accept()
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _answer(self, frame: memoryview) -> bytes:
        (word,) = _INT.unpack_from(frame, 0)
        header_len = word & 0xFFFFFF
        if word >> 24 == 1:
            code = struct.unpack_from(">h", frame, 4)[0]
            opaque = _BIN_OPAQUE.unpack_from(frame, 9)[0]
            binary = True
        else:
            header = bytes(frame[4 : 4 + header_len])
            code = _json_int(header, b'"code":')
            opaque = _json_int(header, b'"opaque":')
            binary = False
        canned = (
            self.send if code in SEND_CODES else self.route if code == ROUTE_CODE else self.plain
        )
        return canned.frame(opaque, binary)

    def _serve(self, conn: socket.socket) -> None:
        buf = bytearray(1 << 20)
        view = memoryview(buf)
        have = 0
        with conn:
            while True:
                n = conn.recv_into(view[have:])
                if not n:
                    return
                have += n
                out = []
                pos = 0
                while have - pos >= 4:
                    (length,) = _INT.unpack_from(buf, pos)
                    if have - pos - 4 < length:
                        break
                    out.append(self._answer(view[pos + 4 : pos + 4 + length]))
                    pos += 4 + length
                if out:
                    conn.sendall(b"".join(out))
                if pos:
                    buf[: have - pos] = buf[pos:have]
                    have -= pos


def _json_int(header: bytes, key: bytes) -> int:
    at = header.index(key) + len(key)
    end = at
    while header[end : end + 1] not in (b",", b"}"):
        end += 1
    return int(header[at:end])


def start() -> tuple[subprocess.Popen[str], str]:
    """The ideal broker as a child process; (the process, its address). Stop it with
    ``proc.kill(); proc.wait()``."""
    proc = subprocess.Popen(
        [sys.executable, __file__], stdout=subprocess.PIPE, text=True, bufsize=1
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    if line[:1] != ["listening"]:
        proc.kill()
        proc.wait()
        raise SystemExit(f"the ideal broker did not start: {line}")
    return proc, line[1]


def main(argv: list[str] | None = None) -> None:
    """Serve until killed."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--listen", default="127.0.0.1:0")
    args = ap.parse_args(argv)
    broker = IdealBroker(args.listen)
    print("listening", broker.addr, flush=True)
    broker.serve_forever()


if __name__ == "__main__":
    main()
