"""The remoting request path's per-request stages, C against the Python reference, in-process.

For a SEND_MESSAGE_V2 request as the Java client writes it (1 KiB body, every header value a
string) and its answer, times each stage the C speedups take on, with the C path and with the
Python reference the tests hold it to:

- cutting the frame out of the received bytes (``FrameDecoder``);
- decoding the command (``RemotingCommand.decode`` / ``py_decode``);
- reading the send header from its extFields (``from_ext_fields`` / the generated reader);
- building the sent message and splitting its properties (``message_from_wire``);
- encoding the send answer (``encode_parts`` / ``py_encode_parts``);
- the direct branch's header read, the fields alone (``read_plain``) against the header object
  the generic dispatch builds (``from_ext_fields``);
- the direct branch's send answer, the whole frame in one call (``encode_send_answer``)
  against building the response command and encoding it as the generic path does.

(The two "direct" rows compare the direct branch with the generic path, both C where they
can be; they are left out of the total.)

No socket, broker or store: these are the CPU costs of the stages alone, in µs per request
(this process's CPU time, the best of ``--repeat`` timings of ``--number`` calls, so a
loaded machine inflates them less)::

    python bench/request_path.py [--number 20000] [--repeat 7] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import time
import timeit
from collections.abc import Callable

from mqcore import speedups
from mqcore.protocol.codes import RequestCode, ResponseCode
from mqcore.protocol.fields import _CODECS, _build_codecs
from mqcore.protocol.headers import SendMessageRequestHeaderV2, SendMessageResponseHeader
from mqcore.protocol.send import message_from_wire, py_message_from_wire
from mqcore.remoting.command import LanguageCode, RemotingCommand
from mqcore.remoting.frame import FrameDecoder
from mqcore.remoting.send_answer import encode_send_answer

_EXT = {
    "a": "bench-producer",
    "b": "BenchTopic",
    "c": "TBW102",
    "d": "4",
    "e": "3",
    "f": "0",
    "g": "1732800000000",
    "h": "0",
    "i": "UNIQ_KEY\x010A0B0C0D0E0F00000000000000000001\x02WAIT\x01true\x02",
    "j": "0",
    "k": "false",
    "m": "false",
}


class _ReferenceDecoder(FrameDecoder):
    def _cut(
        self, buf: bytes | bytearray | memoryview, pos: int, end: int, frames: list[bytes]
    ) -> int:
        return self._py_cut(buf, pos, end, frames)


def stages() -> dict[str, tuple[Callable[[], object], Callable[[], object]]]:
    """Each stage as (C path, Python reference)."""
    request = RemotingCommand(
        RequestCode.SEND_MESSAGE_V2,
        language=LanguageCode.JAVA,
        version=453,
        opaque=12345,
        ext_fields=dict(_EXT),
        body=os.urandom(1024),
    )
    body = bytes(request.body or b"")
    wire = request.encode()
    frame = wire[4:]
    decoder, reference_decoder = FrameDecoder(), _ReferenceDecoder()
    ext = RemotingCommand.decode(frame).ext_fields
    generated = (
        _CODECS.get(SendMessageRequestHeaderV2) or _build_codecs(SendMessageRequestHeaderV2)[0]
    )
    answer = RemotingCommand.response(
        ResponseCode.SUCCESS,
        header=SendMessageResponseHeader(
            msg_id="7F00000100002A9F0000000000012345",
            queue_id=3,
            queue_offset=123456,
            msg_region="DefaultRegion",
            trace_on="true",
        ),
    )
    answer.opaque = 12345
    return {
        "frame cut": (lambda: decoder.feed(wire), lambda: reference_decoder.feed(wire)),
        "command decode": (
            lambda: RemotingCommand.decode(frame),
            lambda: RemotingCommand.py_decode(frame),
        ),
        "send header read": (
            lambda: SendMessageRequestHeaderV2.from_ext_fields(ext),
            lambda: generated(ext),
        ),
        "message build": (
            lambda: message_from_wire("BenchTopic", body, 0, _EXT["i"]),
            lambda: py_message_from_wire("BenchTopic", body, 0, _EXT["i"]),
        ),
        "answer encode": (answer.encode_parts, answer.py_encode_parts),
        "direct header read": (
            lambda: SendMessageRequestHeaderV2.read_plain(ext),
            lambda: SendMessageRequestHeaderV2.from_ext_fields(ext),
        ),
        "direct answer": (
            lambda: encode_send_answer(
                0, 12345, None, "7F00000100002A9F0000000000012345", 3, 123456, "0A0B"
            ),
            lambda: RemotingCommand.response(
                ResponseCode.SUCCESS,
                header=SendMessageResponseHeader(
                    msg_id="7F00000100002A9F0000000000012345",
                    queue_id=3,
                    queue_offset=123456,
                    transaction_id="0A0B",
                ),
            ).encode_parts(),
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if speedups.load("remoting") is None or speedups.load("protocol") is None:
        raise SystemExit("the C speedups are not built or are turned off (MQCORE_NO_SPEEDUPS)")
    rows = {}
    for name, (c, py) in stages().items():
        best = [
            min(timeit.repeat(f, timer=time.process_time, number=args.number, repeat=args.repeat))
            / args.number
            * 1e6
            for f in (c, py)
        ]
        rows[name] = {"c_us": round(best[0], 2), "python_us": round(best[1], 2)}
    # The direct rows are the direct branch's alternatives to two generic stages, not more work.
    staged = [r for name, r in rows.items() if not name.startswith("direct")]
    rows["total"] = {k: round(sum(r[k] for r in staged), 2) for k in ("c_us", "python_us")}
    if args.json:
        print(json.dumps(rows))
        return
    print(f"{'stage':<18} {'C µs':>8} {'Python µs':>10}")
    for name, r in rows.items():
        print(f"{name:<18} {r['c_us']:>8.2f} {r['python_us']:>10.2f}")
    print(f"load average: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
