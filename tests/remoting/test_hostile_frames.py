"""Hostile bytes against the C frame cutter and JSON header readers of
mqcore.remoting._remoting (cut, decode_json_frame, decode_answer): truncated frames, lying
length words, odd or deep JSON, numbers past int32/int64, bytes that are not UTF-8. Each C
call either gives what its Python reference gives or leaves the input to it (None, or a
negative position for cut); the dispatching entry points then give exactly the reference's
result or its ProtocolError."""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqcore import speedups
from mqcore.errors import ProtocolError
from mqcore.remoting.command import RemotingCommand, decode_answer, py_decode_answer
from mqcore.remoting.frame import FrameDecoder

_c = speedups.load("remoting")
pytestmark = pytest.mark.skipif(_c is None, reason="the remoting speedups are not in use")

NUMBER = st.one_of(
    st.integers(-(2**31), 2**31 - 1),
    st.integers(-(2**70), 2**70),
    st.sampled_from([2**31, -(2**31) - 1, 2**63, -(2**63) - 1, 10**18, -(10**18), 0]),
)
SCALAR = st.one_of(
    st.none(),
    st.booleans(),
    NUMBER,
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    NUMBER.map(str),
    st.sampled_from(["", " 7", "+7", "-", "1_0", "٣", "JAVA", "GO", "NODE_JS", "nope"]),
)
VALUE = st.recursive(
    SCALAR,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
KEY = st.sampled_from(
    [
        "code",
        "language",
        "version",
        "opaque",
        "flag",
        "remark",
        "extFields",
        "other",
        "msgId",
        "queueId",
        "queueOffset",
        "transactionId",
    ]
)
EXT = st.dictionaries(KEY | st.text(max_size=6), VALUE, max_size=5)
HEADER = st.dictionaries(KEY, VALUE | EXT, max_size=8)

# Pieces of JSON text, valid and not, joined at random: escapes, surrogates, leading zeros,
# fractions and exponents, 19-digit numbers, bare words, raw control and non-UTF-8 bytes.
TOKENS = st.sampled_from(
    [
        b"{",
        b"}",
        b"[",
        b"]",
        b":",
        b",",
        b" ",
        b"\n",
        b'"code"',
        b'"extFields"',
        b'"remark"',
        b'"language"',
        b'"opaque"',
        b'"flag"',
        b'"version"',
        b'"msgId"',
        b'"queueId"',
        b'"k"',
        b'"\\u00e9"',
        b'"\\ud800"',
        b'"\\udc00\\ud800"',
        b'"\\u12"',
        b'"\\x"',
        b'"\\"',
        b'"\\\\"',
        b'"a\\"b"',
        b'"\\/\\b\\f\\n\\r\\t"',
        b'"\x01"',
        b'"\xff"',
        b'"\xc3\xa9"',
        b'"\xed\xa0\x80"',
        b"0",
        b"-0",
        b"01",
        b"-",
        b"1.5",
        b"1e3",
        b"2147483648",
        b"-2147483649",
        b"999999999999999999",
        b"9999999999999999999",
        b"-9223372036854775808",
        b"true",
        b"false",
        b"null",
        b"tru",
        b"NaN",
        b"Infinity",
        b"\x00",
        b"\xef\xbb\xbf",
    ]
)
INT32 = st.integers(-(2**31), 2**31 - 1)
EXT_VALUE = st.one_of(
    st.none(),
    st.booleans(),
    NUMBER,
    NUMBER.map(str),
    st.text(max_size=12),
    st.sampled_from(["", " 7", "+7", "-", "1_0", "٣", "-0", "007"]),
)
# Headers of the shape clients write (the C readers take them on), a field or two hostile.
PLAIN = st.fixed_dictionaries(
    {"code": INT32},
    optional={
        "language": st.sampled_from(["JAVA", "GO", "NODE_JS", "nope", ""]) | INT32,
        "version": INT32,
        "opaque": INT32,
        "flag": INT32,
        "remark": st.none() | st.text(max_size=12),
        "extFields": st.none()
        | st.dictionaries(
            st.sampled_from(["msgId", "queueId", "queueOffset", "transactionId"])
            | st.text(max_size=6),
            EXT_VALUE,
            max_size=5,
        ),
        "serializeTypeCurrentRPC": st.just("JSON"),
    },
)
HOSTILE = st.tuples(PLAIN, HEADER).map(lambda pair: {**pair[0], **pair[1]})
PLAIN_TEXT = st.one_of(
    PLAIN.map(lambda h: json.dumps(h, ensure_ascii=False).encode()),
    PLAIN.map(lambda h: json.dumps(h, indent=1).encode()),
)
JSON_TEXT = st.one_of(
    PLAIN_TEXT,
    HOSTILE.map(lambda h: json.dumps(h, ensure_ascii=False).encode()),
    st.lists(TOKENS, max_size=30).map(b"".join),
    st.builds(lambda n: b'{"code":' + b"[" * n + b"]" * n + b"}", st.integers(0, 3000)),
    st.builds(
        lambda n: b'{"code":0,"extFields":' + b'{"a":' * n + b"1" + b"}" * n + b"}",
        st.integers(0, 3000),
    ),
)


@st.composite
def mutated(draw: st.DrawFn, text: bytes) -> bytes:
    """``text`` with a few bytes cut, replaced or inserted."""
    data = bytearray(text)
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(data)))
        how = draw(st.sampled_from(["cut", "replace", "insert"]))
        byte = draw(st.sampled_from([0, 1, 0x22, 0x5C, 0x7B, 0x7D, 0x2C, 0x3A, 0x80, 0xC3, 0xFF]))
        if how == "cut":
            del data[at:]
        elif how == "replace" and at < len(data):
            data[at] = byte
        else:
            data.insert(at, byte)
    return bytes(data)


@st.composite
def frames(draw: st.DrawFn) -> bytes:
    """A frame without its total-length word: header-length word (its serialisation byte
    and length possibly lying), header, body."""
    text = draw(PLAIN_TEXT if draw(st.booleans()) else JSON_TEXT)
    header = draw(mutated(text)) if draw(st.integers(0, 3)) == 0 else text
    kind = draw(st.sampled_from([0] * 9 + [1, 2, 0xFF]))
    length = len(header)
    if draw(st.integers(0, 3)) == 0:
        length = draw(st.sampled_from([0, 0xFFFFFF]) | st.integers(0, len(header) + 8))
    body = draw(st.binary(max_size=12))
    frame = struct.pack(">I", (kind << 24) | (length & 0xFFFFFF)) + header + body
    if draw(st.integers(0, 3)) == 0:
        frame = frame[: draw(st.integers(0, len(frame)))]
    return frame


def _outcome(call: Any, *args: Any) -> Any:
    try:
        return call(*args)
    except ProtocolError:
        return ProtocolError


def _command(cmd: Any) -> Any:
    if cmd is ProtocolError:
        return cmd
    return repr(
        (
            cmd.code,
            cmd.language,
            cmd.version,
            cmd.opaque,
            cmd.flag,
            cmd.remark,
            cmd.ext_fields,
            None if cmd.body is None else bytes(cmd.body),
            cmd.serialize_type,
        )
    )


@settings(max_examples=1500, deadline=None)
@given(frame=frames() | st.binary(max_size=40))
def test_any_frame_decodes_as_the_reference(frame: bytes) -> None:
    """decode_json_frame gives the reference's fields or leaves the frame to it."""
    expected = _command(_outcome(RemotingCommand.py_decode, frame))
    fields = _c.decode_json_frame(frame)  # type: ignore[union-attr]
    if fields is not None:
        assert expected is not ProtocolError
    for view in (frame, bytearray(frame), memoryview(frame)):
        assert _command(_outcome(RemotingCommand.decode, view)) == expected


PLAN_ENTRY = st.tuples(KEY | st.text(max_size=4), st.sampled_from([0, 1, 2]), st.booleans())


@settings(max_examples=1500, deadline=None)
@given(frame=frames() | st.binary(max_size=40), plan=st.lists(PLAN_ENTRY, max_size=5).map(tuple))
def test_any_answer_decodes_as_the_reference(frame: bytes, plan: Any) -> None:
    """decode_answer gives the reference's values (types included) or leaves the frame."""
    expected = repr(_outcome(py_decode_answer, frame, plan))
    got = _c.decode_answer(frame, plan)  # type: ignore[union-attr]
    if got is not None:
        assert repr(got) == expected
    assert repr(_outcome(decode_answer, frame, plan)) == expected


LENGTH_WORD = st.one_of(
    st.integers(-(2**31), 2**31 - 1),
    st.sampled_from([-1, 0, 3, 4, 5, 2**31 - 1, -(2**31), 60, 1 << 20]),
).map(lambda n: struct.pack(">i", n))
STREAM = st.lists(
    st.tuples(LENGTH_WORD, st.binary(max_size=20)).map(b"".join)
    | st.binary(min_size=1, max_size=8).map(lambda b: struct.pack(">i", len(b)) + b),
    max_size=6,
).map(b"".join)


def _py_cut(buf: bytes, pos: int, end: int, limit: int) -> Any:
    frames: list[bytes] = []
    try:
        return FrameDecoder(limit)._py_cut(buf, pos, end, frames), frames
    except ProtocolError:
        return ProtocolError, frames


@settings(max_examples=1500, deadline=None)
@given(stream=STREAM, data=st.data(), limit=st.sampled_from([8, 64, 1 << 20, 2**31, 2**62]))
def test_cut_splits_any_stream_as_the_reference(
    stream: bytes, data: st.DataObject, limit: int
) -> None:
    """Lying, negative and huge length words: cut stops where the reference stops, or
    hands it the bad word's position; the frames before are the same."""
    pos = data.draw(st.integers(0, len(stream)))
    end = data.draw(st.integers(pos, len(stream)))
    expected, expected_frames = _py_cut(stream, pos, end, limit)
    frames: list[bytes] = []
    got = _c.cut(stream, pos, end, limit, frames)  # type: ignore[union-attr]
    if got < 0:
        assert expected is ProtocolError
        rest, more = _py_cut(stream, -1 - got, end, limit)
        assert rest is ProtocolError
        frames += more
    else:
        assert got == expected
    assert frames == expected_frames


@pytest.mark.parametrize(("pos", "end"), [(-1, 4), (0, 99), (5, 4)])
def test_cut_refuses_a_range_outside_the_buffer(pos: int, end: int) -> None:
    with pytest.raises(ValueError, match="outside the buffer"):
        _c.cut(b"\x00\x00\x00\x04abcd", pos, end, 64, [])  # type: ignore[union-attr]
