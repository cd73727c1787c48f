"""The C request path of the remoting layer (mqcore.remoting._remoting) against its Python
reference: frame cutting (FrameDecoder._py_cut) and JSON command headers
(RemotingCommand.py_decode)."""

from __future__ import annotations

import itertools
import json
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqcore import speedups
from mqcore.errors import ProtocolError
from mqcore.remoting.command import LanguageCode, RemotingCommand, SerializeType
from mqcore.remoting.frame import FrameDecoder

_c = speedups.load("remoting")
pytestmark = pytest.mark.skipif(_c is None, reason="the remoting speedups are not in use")

INT32 = st.integers(-(2**31), 2**31 - 1)
INT16 = st.integers(-(2**15), 2**15 - 1)  # code and version in a binary header
# Text as clients write it: any code point but the surrogates (which JSON carries as escapes
# the C reader leaves to the reference); control characters included (property separators).
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)


def reference(frame: bytes) -> tuple[Any, ...] | None:
    """The Python reference's fields in the C decoder's order, or None when it refuses."""
    try:
        cmd = RemotingCommand.py_decode(frame)
    except ProtocolError:
        return None
    return (
        cmd.code,
        int(cmd.language),
        cmd.version,
        cmd.opaque,
        cmd.flag,
        cmd.remark,
        cmd.ext_fields,
        cmd.body,
    )


def check_same(frame: bytes) -> tuple[Any, ...] | None:
    """C either hands ``frame`` to the reference (None) or gives exactly its fields (types
    included: a JSON true is no 1)."""
    fields = _c.decode_json_frame(frame)  # type: ignore[union-attr]
    if fields is not None:
        assert repr(fields) == repr(reference(frame))
        decoded = RemotingCommand.decode(frame)
        assert decoded == RemotingCommand.py_decode(frame)
        assert decoded.serialize_type is SerializeType.JSON
    return fields


def frame_of(header: bytes, body: bytes = b"", kind: int = 0) -> bytes:
    """A frame without its total-length word."""
    return struct.pack(">i", (kind << 24) | len(header)) + header + body


@settings(max_examples=300, deadline=None)
@given(
    code=INT32,
    language=st.sampled_from(LanguageCode),
    version=INT32,
    opaque=INT32,
    flag=INT32,
    remark=st.none() | TEXT,
    ext=st.none() | st.dictionaries(TEXT, TEXT, max_size=6),
    body=st.none() | st.binary(min_size=1, max_size=64),
)
def test_commands_as_clients_write_them_are_read_in_c(
    code: int,
    language: LanguageCode,
    version: int,
    opaque: int,
    flag: int,
    remark: str | None,
    ext: dict[str, str] | None,
    body: bytes | None,
) -> None:
    """Every JSON command mqcore's encoder writes takes the C path, with the reference's
    result."""
    cmd = RemotingCommand(
        code, language, version, opaque, flag, remark=remark, ext_fields=ext, body=body
    )
    frame = cmd.encode()[4:]
    assert check_same(frame) is not None
    assert RemotingCommand.decode(frame) == cmd


SCALAR = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
KEYS = st.sampled_from(
    ["code", "language", "version", "opaque", "flag", "remark", "extFields", "other", "c\u00f6de"]
)
VALUE = st.recursive(
    SCALAR | st.sampled_from(["JAVA", "CPP", "NODE_JS", "nope"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=500, deadline=None)
@given(
    obj=st.dictionaries(KEYS, VALUE, max_size=8) | VALUE,
    indent=st.none() | st.integers(0, 2),
    ascii_only=st.booleans(),
    body=st.binary(max_size=8),
)
def test_any_json_header_is_read_as_the_reference_reads_it(
    obj: Any, indent: int | None, ascii_only: bool, body: bytes
) -> None:
    """Odd headers (wrong types, floats, big numbers, nesting, whitespace, escapes): C reads
    them as the reference does or leaves them to it."""
    header = json.dumps(obj, indent=indent, ensure_ascii=ascii_only).encode()
    check_same(frame_of(header, body))


@settings(max_examples=500, deadline=None)
@given(data=st.data())
def test_damaged_frames_are_refused_or_read_as_the_reference(data: st.DataObject) -> None:
    """A valid frame with bytes changed, cut or added: never a result the reference would
    not give."""
    cmd = RemotingCommand(
        data.draw(INT32),
        # Drawn, not the next opaque: a counter's value would change the frame's length
        # between a case and its replay, which Hypothesis refuses as flaky.
        opaque=data.draw(INT32),
        remark=data.draw(st.none() | TEXT),
        ext_fields=data.draw(st.dictionaries(TEXT, TEXT, max_size=3)),
        body=data.draw(st.binary(max_size=8)) or None,
    )
    frame = bytearray(cmd.encode()[4:])
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(frame)))
        edit = data.draw(st.sampled_from(["set", "insert", "delete"]))
        byte = data.draw(st.sampled_from([0, 1, 0x20, 0x22, 0x5C, 0x7B, 0x7D, 0xC3, 0xFF]))
        if edit == "insert":
            frame[at:at] = bytes([byte])
        elif at < len(frame):
            if edit == "set":
                frame[at] = byte
            else:
                del frame[at]
    check_same(bytes(frame))


@pytest.mark.parametrize(
    "header",
    [
        b'{"code":1,"opaque":"7"}',  # a quoted number
        b'{"code":true}',  # a bool is no int
        b'{"code":2147483648}',  # out of int32
        b'{"code":1,"remark":5}',
        b'{"code":1,"extFields":[]}',
        b'{"code":1,"extFields":{"k":"\\ud83d\\ude00"}}',  # a surrogate pair
        b'{"code":01}',  # not JSON
        b'{"code":1}x',
        b'{"code":1,"language":null}',
        b'{"opaque":1}',
        b"\xef\xbb\xbf{}",
        b'{"code":1,"extFields":{"k":"\xff"}}',  # not UTF-8
    ],
)
def test_shapes_left_to_the_reference(header: bytes) -> None:
    """Shapes the C reader does not take on: it answers None, the reference decides."""
    frame = frame_of(header)
    assert _c.decode_json_frame(frame) is None  # type: ignore[union-attr]
    if reference(frame) is None:
        with pytest.raises(ProtocolError):
            RemotingCommand.decode(frame)
    else:
        assert RemotingCommand.decode(frame) == RemotingCommand.py_decode(frame)


def test_binary_headers_are_left_to_the_reference() -> None:
    cmd = RemotingCommand(11, ext_fields={"a": "b"}, serialize_type=SerializeType.ROCKETMQ)
    frame = cmd.encode()[4:]
    assert _c.decode_json_frame(frame) is None  # type: ignore[union-attr]
    assert RemotingCommand.decode(frame) == cmd


def test_repeated_keys_keep_the_first_place_and_the_last_value() -> None:
    header = b'{"code":1,"extFields":{"a":"1","b":"2","a":"3"},"code":5}'
    fields = check_same(frame_of(header))
    assert fields is not None and fields[0] == 5
    assert list(fields[6].items()) == [("a", "3"), ("b", "2")]


class ReferenceDecoder(FrameDecoder):
    """A frame decoder that cuts with the Python loop only."""

    def _cut(
        self, buf: bytes | bytearray | memoryview, pos: int, end: int, frames: list[bytes]
    ) -> int:
        return self._py_cut(buf, pos, end, frames)


def stream_of(frames: list[bytes]) -> bytes:
    return b"".join(struct.pack(">i", len(f)) + f for f in frames)


@settings(max_examples=300, deadline=None)
@given(
    frames=st.lists(st.binary(min_size=4, max_size=40), max_size=8),
    cuts=st.lists(st.integers(0, 400), max_size=6),
    limit=st.integers(8, 60),
    bad=st.none() | st.integers(-(2**31), 3),
)
def test_cutting_frames_matches_the_reference(
    frames: list[bytes], cuts: list[int], limit: int, bad: int | None
) -> None:
    """Any stream fed in any pieces: the same frames and the same refusal as the reference
    loop."""
    data = stream_of(frames) + (struct.pack(">i", bad) if bad is not None else b"")
    points = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    pieces = [data[a:b] for a, b in itertools.pairwise(points)]

    def run(decoder: FrameDecoder) -> tuple[list[bytes], str | None]:
        out: list[bytes] = []
        try:
            for piece in pieces:
                out += decoder.feed(memoryview(piece))
        except ProtocolError as exc:
            return out, str(exc)
        return out, None

    expected = run(ReferenceDecoder(limit))
    assert run(FrameDecoder(limit)) == expected


def test_cut_answers_where_a_bad_length_word_starts() -> None:
    frames: list[bytes] = []
    data = stream_of([b"abcd"]) + struct.pack(">i", 2) + b"xx"
    assert _c.cut(data, 0, len(data), 1024, frames) == -1 - 8  # type: ignore[union-attr]
    assert frames == [b"abcd"]
    with pytest.raises(ValueError, match="outside the buffer"):
        _c.cut(data, 0, len(data) + 1, 1024, [])  # type: ignore[union-attr]


ANY_TEXT = st.text(max_size=30)  # surrogates included: not UTF-8 encodable
EXT_VALUE = ANY_TEXT | st.integers(-(2**40), 2**40) | st.booleans() | st.none()


def encoded(cmd: RemotingCommand, how: str) -> tuple[str, Any]:
    """What encoding ``cmd`` gives (C and reference path, or the reference alone): the bytes,
    or the error's type and words."""
    try:
        head, body = cmd.encode_parts() if how == "c" else cmd.py_encode_parts()
    except (ProtocolError, UnicodeEncodeError, struct.error) as exc:
        return "error", (type(exc), str(exc))
    return "ok", (head, bytes(body))


@settings(max_examples=500, deadline=None)
@given(
    code=INT32 | st.integers(-(2**70), 2**70) | st.sampled_from(LanguageCode),
    language=st.sampled_from(LanguageCode),
    numbers=st.tuples(INT32, INT32, INT32) | st.tuples(*[st.integers(-(2**66), 2**66)] * 3),
    remark=st.none() | ANY_TEXT,
    ext=st.none()
    | st.dictionaries(TEXT, TEXT, max_size=6)
    | st.dictionaries(ANY_TEXT, EXT_VALUE, max_size=4),
    body=st.none() | st.binary(max_size=32),
)
def test_json_heads_are_written_as_the_reference_writes_them(
    code: int,
    language: LanguageCode,
    numbers: tuple[int, int, int],
    remark: str | None,
    ext: dict[str, Any] | None,
    body: bytes | None,
) -> None:
    """encode_parts in C gives the reference's bytes, or leaves the command to it (which
    then gives the same bytes or the same error)."""
    version, opaque, flag = numbers
    cmd = RemotingCommand(
        code, language, version, opaque, flag, remark=remark, ext_fields=ext, body=body
    )
    expected = encoded(cmd, "py")
    assert encoded(cmd, "c") == expected
    head = _c.encode_json_head(  # type: ignore[union-attr]
        code, language, version, opaque, flag, remark, ext, len(body or b"")
    )
    if head is not None:
        assert expected == ("ok", (head, body or b""))


def test_a_command_of_strings_is_written_in_c() -> None:
    cmd = RemotingCommand.request(10, body=b"x")
    cmd.ext_fields = {"topic": "T", "properties": "a\x01b\x02", "k\u00e9y": '"\\'}
    cmd.remark = "line\nnext\t\x7f"
    head = _c.encode_json_head(  # type: ignore[union-attr]
        cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag, cmd.remark, cmd.ext_fields, 1
    )
    assert head is not None and (head, b"x") == cmd.py_encode_parts()
    assert RemotingCommand.decode(cmd.encode()[4:]) == cmd


# -- frames cut and decoded in one pass (FrameDecoder.feed_decoded) ------------------------------


def command_of(item: tuple[Any, ...] | bytes) -> tuple[str, Any]:
    """What a server makes of one item of ``feed_decoded``: the command, or the reference's
    refusal of a frame left as bytes."""
    if isinstance(item, tuple):
        code, language, version, opaque, flag, remark, ext, body = item
        return "ok", RemotingCommand(
            code, list(LanguageCode)[language], version, opaque, flag, remark, ext, body
        )
    return reference_command(item)


def reference_command(frame: bytes) -> tuple[str, Any]:
    try:
        return "ok", RemotingCommand.py_decode(frame)
    except ProtocolError as exc:
        return "error", str(exc)


def a_frame() -> st.SearchStrategy[bytes]:
    """Frames of every kind a server meets: JSON commands as clients write them, binary
    headers, damaged headers and bare bytes."""
    command = st.builds(
        RemotingCommand,
        code=INT16,
        language=st.sampled_from(LanguageCode),
        version=INT16,
        opaque=INT32,
        flag=INT32,
        remark=st.none() | TEXT,
        ext_fields=st.none() | st.dictionaries(TEXT, TEXT, max_size=4),
        body=st.none() | st.binary(min_size=1, max_size=64),
        serialize_type=st.sampled_from(SerializeType),
    )
    whole = command.map(lambda cmd: cmd.encode()[4:])
    damaged = st.tuples(whole, st.integers(0, 200), st.binary(min_size=1, max_size=3)).map(
        lambda t: t[0][: t[1] % len(t[0])] + t[2] + t[0][t[1] % len(t[0]) + len(t[2]) :]
    )
    return whole | damaged | st.binary(min_size=4, max_size=40)


@settings(max_examples=300, deadline=None)
@given(
    frames=st.lists(a_frame(), max_size=8),
    cuts=st.lists(st.integers(0, 2000), max_size=6),
    bad=st.none() | st.integers(-(2**31), 3),
)
def test_frames_cut_and_decoded_in_one_pass_match_the_reference(
    frames: list[bytes], cuts: list[int], bad: int | None
) -> None:
    """Any stream fed in any pieces: feed_decoded gives the commands (and refusals) the
    reference cut and decode give, and refuses a bad length word with the same words."""
    data = stream_of(frames) + (struct.pack(">i", bad) if bad is not None else b"")
    points = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    pieces = [data[a:b] for a, b in itertools.pairwise(points)]

    def run(decoder: FrameDecoder, decoded: bool) -> tuple[list[tuple[str, Any]], str | None]:
        out: list[tuple[str, Any]] = []
        try:
            for piece in pieces:
                if decoded:
                    out += [command_of(item) for item in decoder.feed_decoded(memoryview(piece))]
                else:
                    out += [reference_command(frame) for frame in decoder.feed(piece)]
        except ProtocolError as exc:
            return out, str(exc)
        return out, None

    expected = run(ReferenceDecoder(), decoded=False)
    assert run(FrameDecoder(), decoded=True) == expected


def test_cut_decode_reads_json_frames_in_place_and_leaves_the_rest_as_bytes() -> None:
    json_frame = RemotingCommand(10, opaque=7, ext_fields={"a": "b"}, body=b"xyz").encode()[4:]
    binary = RemotingCommand(10, serialize_type=SerializeType.ROCKETMQ).encode()[4:]
    data = bytearray(stream_of([json_frame, binary]) + struct.pack(">i", 2))
    items: list[Any] = []
    where = _c.cut_decode(data, 0, len(data), 1024, items)  # type: ignore[union-attr]
    assert where == -1 - (len(data) - 4)  # the bad length word is the reference's to refuse
    assert items[0] == _c.decode_json_frame(json_frame)  # type: ignore[union-attr]
    assert items[1] == binary
    with pytest.raises(ValueError, match="outside the buffer"):
        _c.cut_decode(data, 0, len(data) + 1, 1024, [])  # type: ignore[union-attr]
