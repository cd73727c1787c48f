"""RemotingCommand in both serialisations, against byte vectors written out from RocketMQ's
layout by hand (RemotingCommand.encode / RocketMQSerializable), and the frame decoder."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqcore.errors import ProtocolError
from mqcore.protocol.headers import GetMaxOffsetRequestHeader
from mqcore.remoting.command import (
    LanguageCode,
    RemotingCommand,
    SerializeType,
    salvage_opaque,
)
from mqcore.remoting.frame import FrameDecoder

# code 30 (GET_MAX_OFFSET), language CPP (1), version 5, opaque 7, flag 2 (oneway),
# remark "r", extFields {"topic": "T"}, body "ab"; RocketMQ binary header:
BINARY_HEADER = bytes.fromhex(
    "001e"  # code int16 = 30
    "01"  # language byte = CPP
    "0005"  # version int16 = 5
    "00000007"  # opaque int32 = 7
    "00000002"  # flag int32 = 2
    "00000001" + "72"  # remark: int32 length 1, "r"
    "0000000c"  # extFields: int32 length of the entries = 2+5 + 4+1
    "0005" + "746f706963"  # key: int16 length 5, "topic"
    "00000001" + "54"  # value: int32 length 1, "T"
)
BINARY_FRAME = (
    bytes.fromhex("00000028")  # total length = 4 + 34 header + 2 body = 40
    + bytes.fromhex("01000022")  # type 1 in the high byte | header length 34
    + BINARY_HEADER
    + b"ab"
)


def test_binary_vector_decodes() -> None:
    assert len(BINARY_HEADER) == 13 + 5 + 4 + 12
    (frame,) = FrameDecoder().feed(BINARY_FRAME)
    cmd = RemotingCommand.decode(frame)
    assert (cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag) == (
        30,
        LanguageCode.CPP,
        5,
        7,
        2,
    )
    assert cmd.is_oneway and not cmd.is_response
    assert cmd.remark == "r" and cmd.ext_fields == {"topic": "T"} and cmd.body == b"ab"
    assert cmd.serialize_type is SerializeType.ROCKETMQ


def test_binary_vector_encodes() -> None:
    cmd = RemotingCommand(
        30,
        language=LanguageCode.CPP,
        version=5,
        opaque=7,
        flag=2,
        remark="r",
        ext_fields={"topic": "T"},
        body=b"ab",
        serialize_type=SerializeType.ROCKETMQ,
    )
    assert cmd.encode() == BINARY_FRAME


def test_binary_empty_remark_and_fields_are_zero_lengths() -> None:
    cmd = RemotingCommand(
        0,
        language=LanguageCode.JAVA,
        version=0,
        opaque=1,
        flag=1,
        serialize_type=SerializeType.ROCKETMQ,
    )
    expected = bytes.fromhex("0000001901000015000000000000000001000000010000000000000000")
    assert cmd.encode() == expected
    decoded = RemotingCommand.decode(expected[4:])
    assert decoded.remark is None and decoded.ext_fields is None and decoded.body is None


def test_json_frame_as_the_cpp_core_writes_it() -> None:
    """The C++ core: language as a name, numbers in extFields, empty ACL fields, remark ""."""
    header = (
        b'{"code":30,"extFields":{"AccessKey":"","OnsChannel":"","Signature":"",'
        b'"queueId":3,"topic":"T"},"flag":0,"language":"CPP","opaque":9,"remark":"",'
        b'"version":405}'
    )
    frame = (
        (4 + len(header) + 3).to_bytes(4, "big") + len(header).to_bytes(4, "big") + header + b"xyz"
    )
    (raw,) = FrameDecoder().feed(frame)
    cmd = RemotingCommand.decode(raw)
    assert (cmd.code, cmd.language, cmd.opaque, cmd.version, cmd.body) == (
        30,
        LanguageCode.CPP,
        9,
        405,
        b"xyz",
    )
    assert cmd.serialize_type is SerializeType.JSON
    assert cmd.read_header(GetMaxOffsetRequestHeader) == GetMaxOffsetRequestHeader(
        topic="T", queue_id=3
    )


def test_json_encoding_follows_rocketmq() -> None:
    cmd = RemotingCommand.response(17, "no topic", to=RemotingCommand(105, opaque=42))
    frame = cmd.encode()
    total, word = int.from_bytes(frame[:4], "big"), int.from_bytes(frame[4:8], "big")
    assert total == len(frame) - 4 and word >> 24 == 0 and word == len(frame) - 8
    obj = json.loads(frame[8:])
    assert obj == {
        "code": 17,
        "language": "PYTHON",
        "version": cmd.version,
        "opaque": 42,
        "flag": 1,
        "remark": "no topic",
        "serializeTypeCurrentRPC": "JSON",
    }


def test_response_answers_in_the_requests_serialisation() -> None:
    req = RemotingCommand.decode(BINARY_FRAME[4:])
    resp = RemotingCommand.response(0, to=req)
    assert resp.serialize_type is SerializeType.ROCKETMQ and resp.opaque == 7 and resp.is_response


@given(
    code=st.integers(-(2**15), 2**15 - 1),
    opaque=st.integers(-(2**31), 2**31 - 1),
    flag=st.integers(0, 3),
    remark=st.none() | st.text(min_size=1),
    ext=st.none()
    | st.dictionaries(st.text(min_size=1, max_size=20), st.text(min_size=1), min_size=1),
    body=st.none() | st.binary(min_size=1),
    kind=st.sampled_from(SerializeType),
)
def test_round_trip_property(
    code: int,
    opaque: int,
    flag: int,
    remark: str | None,
    ext: dict[str, str] | None,
    body: bytes | None,
    kind: SerializeType,
) -> None:
    cmd = RemotingCommand(
        code,
        opaque=opaque,
        flag=flag,
        remark=remark,
        ext_fields=ext,
        body=body,
        serialize_type=kind,
    )
    frames = FrameDecoder().feed(cmd.encode())
    assert frames and RemotingCommand.decode(frames[0]) == cmd


def test_frame_decoder_handles_any_split() -> None:
    frames = b"".join(RemotingCommand(i, body=bytes(i)).encode() for i in range(1, 30))
    for step in (1, 3, 7, 64, 1000):
        dec = FrameDecoder()
        out = []
        for i in range(0, len(frames), step):
            out += dec.feed(frames[i : i + step])
        assert [RemotingCommand.decode(f).code for f in out] == list(range(1, 30))
        assert dec.buffered == 0


@pytest.mark.parametrize("length", [-1, 0, 3, 16 * 1024 * 1024 - 3, 2**31 - 1])
def test_frame_decoder_refuses_bad_lengths(length: int) -> None:
    with pytest.raises(ProtocolError, match="out of range"):
        FrameDecoder().feed(length.to_bytes(4, "big", signed=True) + b"\0" * 8)


def test_frame_decoder_limit_is_configurable() -> None:
    frame = RemotingCommand(1, body=b"x" * 100).encode()
    assert FrameDecoder(max_frame_size=len(frame)).feed(frame)
    with pytest.raises(ProtocolError):
        FrameDecoder(max_frame_size=len(frame) - 1).feed(frame)


@pytest.mark.parametrize(
    "frame",
    [
        b"\0\0\0\x09{bad json",  # header length 9 over a 9-byte header: not JSON
        b"\0\0\0\x03[1]",  # JSON, not an object
        b'\0\0\0\x08{"a":1}',  # no code
        b'\0\0\0\x0f{"code":"x"}  ',  # code not an int
        b"\0\0\x01\x00{}",  # header length over the frame
        b"\x05\0\0\x02{}",  # serialisation type 5
        b"\x01\0\0\x05" + b"\0" * 5,  # binary header truncated
        b"\x01\0\0\x15" + bytes.fromhex("000000000000000001000000007fffffff00000000"),
        b"\x01\0\0\x17" + bytes.fromhex("0000000000000000010000000000000000000000020005"),
        b"\x01\0\0\x16" + bytes.fromhex("0000000000000000010000000000000001ff00000000"),
    ],
)
def test_malformed_headers_raise_protocol_error(frame: bytes) -> None:
    with pytest.raises(ProtocolError):
        RemotingCommand.decode(frame)


def test_salvage_opaque() -> None:
    assert salvage_opaque(b'\0\0\0\x16{"opaque": 12, "code":') == 12
    assert salvage_opaque(b"\x01\0\0\x09" + bytes.fromhex("00010000000000002a")) == 42
    assert salvage_opaque(b"\0\0\0\x05xxxxx") is None


@given(
    kind=st.sampled_from([0, 1, 2, 255]),
    header=st.binary(max_size=80) | st.text(max_size=80).map(str.encode),
    tail=st.binary(max_size=16),
)
def test_decode_takes_any_bytes(kind: int, header: bytes, tail: bytes) -> None:
    """Whatever a peer sends, decoding gives a command or a ProtocolError, nothing else."""
    frame = ((kind << 24) | len(header)).to_bytes(4, "big") + header + tail
    try:
        cmd = RemotingCommand.decode(frame)
    except ProtocolError:
        return
    # what was read can be written back (extFields values then travel as strings)
    again = RemotingCommand.decode(FrameDecoder().feed(cmd.encode())[0])
    assert (again.code, again.opaque, again.flag, again.body) == (
        cmd.code,
        cmd.opaque,
        cmd.flag,
        cmd.body,
    )


@given(data=st.binary(max_size=200))
def test_frame_decoder_takes_any_bytes(data: bytes) -> None:
    try:
        frames = FrameDecoder().feed(data)
    except ProtocolError:
        return
    assert sum(len(f) + 4 for f in frames) <= len(data)


def test_values_outside_the_binary_layout_are_a_protocol_error() -> None:
    cmd = RemotingCommand(70000, serialize_type=SerializeType.ROCKETMQ)
    with pytest.raises(ProtocolError, match="70000"):
        cmd.encode()
    cmd.serialize_type = SerializeType.JSON  # JSON has no such bound
    assert RemotingCommand.decode(cmd.encode()[4:]).code == 70000


@given(
    sizes=st.lists(st.integers(min_value=0, max_value=300), min_size=1, max_size=12),
    cuts=st.lists(st.integers(min_value=1, max_value=700), min_size=1, max_size=40),
)
def test_frame_decoder_copes_with_a_reused_read_buffer(sizes: list[int], cuts: list[int]) -> None:
    """Readers hand the decoder a view of one buffer they overwrite on the next read: frames
    and the kept tail must not depend on what the buffer holds afterwards."""
    stream = b"".join(
        RemotingCommand(i + 1, body=bytes([i]) * n).encode() for i, n in enumerate(sizes)
    )
    dec, out, buffer, pos, i = FrameDecoder(), [], bytearray(1024), 0, 0
    while pos < len(stream):
        piece = stream[pos : pos + cuts[i % len(cuts)]]
        buffer[: len(piece)] = piece
        out += dec.feed(memoryview(buffer)[: len(piece)])
        buffer[:] = b"\xff" * len(buffer)  # the next read overwrites it
        pos, i = pos + len(piece), i + 1
    assert [RemotingCommand.decode(f) for f in out] == [
        RemotingCommand.decode(f) for f in FrameDecoder().feed(stream)
    ]
    assert len(out) == len(sizes) and dec.buffered == 0


@given(
    remark=st.none() | st.text(),
    ext=st.none()
    | st.dictionaries(
        st.text(max_size=10),
        st.text(max_size=10) | st.integers() | st.booleans() | st.floats(allow_nan=False),
    ),
)
def test_json_header_is_what_json_dumps_gives(
    remark: str | None, ext: dict[str, object] | None
) -> None:
    """The JSON header is written by hand (string extFields in one C call): it must be the
    document json.dumps writes, values as strings, booleans as true/false."""
    cmd = RemotingCommand(12, opaque=5, remark=remark, ext_fields=ext)
    doc: dict[str, object] = {
        "code": 12,
        "language": "PYTHON",
        "version": cmd.version,
        "opaque": 5,
        "flag": 0,
    }
    if remark is not None:
        doc["remark"] = remark
    if ext is not None:
        doc["extFields"] = {
            k: ("true" if v else "false") if isinstance(v, bool) else str(v) for k, v in ext.items()
        }
    doc["serializeTypeCurrentRPC"] = "JSON"
    expected = json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()
    assert cmd.encode_header() == expected
