"""The client's one-call request encode and answer decode (mqcore.remoting._remoting's
client section) against their Python references (py_encode_request_head, py_decode_answer),
and the references against the general path they stand for."""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqcore import speedups
from mqcore.errors import ProtocolError
from mqcore.protocol.headers import (
    PullMessageRequestHeader,
    SendMessageRequestHeaderV2,
    SendMessageResponseHeader,
)
from mqcore.remoting.command import (
    RemotingCommand,
    decode_answer,
    encode_request_head,
    py_decode_answer,
    py_encode_request_head,
)

_c = speedups.load("remoting")
needs_c = pytest.mark.skipif(_c is None, reason="the remoting speedups are not in use")

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=30)
NAMES = st.lists(TEXT, max_size=8, unique=True)
VALUE = st.one_of(st.none(), TEXT, st.booleans(), INT64, st.integers(), st.floats(), st.binary())

SEND_ANSWER_PLAN = (
    ("msgId", 0, True),
    ("queueId", 1, True),
    ("queueOffset", 2, True),
    ("transactionId", 0, False),
)


def _same_encode(code: int, opaque: int, names: tuple[str, ...], values: tuple[Any, ...]) -> None:
    try:
        expected: bytes | type[BaseException] = py_encode_request_head(
            code, opaque, names, values, 7
        )
    except (ProtocolError, ValueError, TypeError, OverflowError) as exc:
        expected = type(exc)
    head = _c.encode_request_head(code, 3, 401, opaque, 0, names, values, 7)  # type: ignore[union-attr]
    if head is not None:
        assert head == expected
    try:
        got: bytes | type[BaseException] = encode_request_head(code, opaque, names, values, 7)
    except (ProtocolError, ValueError, TypeError, OverflowError) as exc:
        got = type(exc)
    assert got == expected


@needs_c
@settings(max_examples=300, deadline=None)
@given(code=INT32, opaque=INT32, data=st.data(), names=NAMES)
def test_request_head_is_the_references(
    code: int, opaque: int, data: st.DataObject, names: list[str]
) -> None:
    """Any names and values: C writes the reference's bytes, or leaves the value to it."""
    values = tuple(data.draw(VALUE) for _ in names)
    _same_encode(code, opaque, tuple(names), values)


@needs_c
def test_values_the_c_encoder_leaves_to_the_reference() -> None:
    for value in (1.5, b"x", 2**70, object()):
        assert _c.encode_request_head(10, 3, 401, 1, 0, ("k",), (value,), 0) is None  # type: ignore[union-attr]


@settings(max_examples=100, deadline=None)
@given(
    group=TEXT, topic=TEXT, queue_id=INT32, sys_flag=INT32, born=INT64, flag=INT32,
    properties=TEXT, batch=st.booleans(), body=st.binary(max_size=40),
)  # fmt: skip
def test_the_send_header_encodes_as_the_header_object_does(
    group: str, topic: str, queue_id: int, sys_flag: int, born: int, flag: int,
    properties: str, batch: bool, body: bytes,
) -> None:  # fmt: skip
    """The send request built from its field values is the bytes the header object and
    RemotingCommand give (with or without the speedups)."""
    header = SendMessageRequestHeaderV2(
        producer_group=group, topic=topic, default_topic="TBW102", default_topic_queue_nums=4,
        queue_id=queue_id, sys_flag=sys_flag, born_timestamp=born, flag=flag,
        properties=properties, reconsume_times=0, batch=batch,
    )  # fmt: skip
    cmd = RemotingCommand.request(310, header, body)
    ext = header.to_ext_fields()
    names = tuple(ext)
    values = tuple(getattr(header, _attr(name)) for name in names)
    head = encode_request_head(310, cmd.opaque, names, values, len(body))
    assert head + body == cmd.py_encode_parts()[0] + body
    assert RemotingCommand.decode(head[4:] + body) == RemotingCommand.py_decode(
        cmd.py_encode_parts()[0][4:] + body
    )


def _attr(wire: str) -> str:
    spec = {s.wire: s.attr for s in SendMessageRequestHeaderV2._specs()}
    return spec[wire]


def _answer_frame(ext: dict[str, Any] | None, remark: str | None, body: bytes | None) -> bytes:
    header: dict[str, Any] = {"code": 0, "language": "JAVA", "version": 401, "opaque": 9,
                              "flag": 1}  # fmt: skip
    if remark is not None:
        header["remark"] = remark
    if ext is not None:
        header["extFields"] = ext
    raw = json.dumps(header).encode()
    return struct.pack(">i", len(raw)) + raw + (body or b"")


def _reference(frame: bytes, plan: Any) -> Any:
    try:
        return py_decode_answer(frame, plan)
    except ProtocolError:
        return ProtocolError


FIELD = st.one_of(
    st.none(), TEXT, INT64.map(str), INT32.map(str), st.integers(), st.booleans(),
    st.just(""), st.just(" 7"), st.just("+7"), st.just("1_0"),
)  # fmt: skip


@needs_c
@settings(max_examples=400, deadline=None)
@given(
    msg_id=FIELD, queue_id=FIELD, queue_offset=FIELD, transaction_id=FIELD,
    remark=st.none() | TEXT, body=st.none() | st.binary(min_size=1, max_size=20),
)  # fmt: skip
def test_answer_decode_is_the_references(
    msg_id: Any, queue_id: Any, queue_offset: Any, transaction_id: Any,
    remark: str | None, body: bytes | None,
) -> None:  # fmt: skip
    """Any send answer: C gives the reference's fields (types included) or leaves it."""
    pairs = (
        ("msgId", msg_id),
        ("queueId", queue_id),
        ("queueOffset", queue_offset),
        ("transactionId", transaction_id),
    )
    ext = {k: v for k, v in pairs if v is not None}
    frame = _answer_frame(ext, remark, body)
    expected = _reference(frame, SEND_ANSWER_PLAN)
    got = _c.decode_answer(frame, SEND_ANSWER_PLAN)  # type: ignore[union-attr]
    if got is not None:
        assert repr(got) == repr(expected)
    try:
        dispatched = decode_answer(frame, SEND_ANSWER_PLAN)
    except ProtocolError:
        dispatched = ProtocolError
    assert repr(dispatched) == repr(expected)


@settings(max_examples=100, deadline=None)
@given(msg_id=TEXT, queue_id=INT32, queue_offset=INT64, transaction_id=st.none() | TEXT)
def test_the_send_answer_reads_as_its_header_does(
    msg_id: str, queue_id: int, queue_offset: int, transaction_id: str | None
) -> None:
    """The plan's values are the response header object's fields."""
    header = SendMessageResponseHeader(
        msg_id=msg_id, queue_id=queue_id, queue_offset=queue_offset,
        transaction_id=transaction_id,
    )  # fmt: skip
    frame = RemotingCommand.response(0, "fine", header, b"b").encode()[4:]
    code, _, flag, remark, values, body = decode_answer(frame, SEND_ANSWER_PLAN)
    assert (code, flag, remark, body) == (0, 1, "fine", b"b")
    read = RemotingCommand.decode(frame).read_header(SendMessageResponseHeader)
    assert values == (read.msg_id, read.queue_id, read.queue_offset, read.transaction_id)


def test_a_required_field_missing_is_a_protocol_error() -> None:
    frame = _answer_frame({"msgId": "A", "queueId": "1"}, None, None)
    with pytest.raises(ProtocolError, match="queueOffset"):
        decode_answer(frame, SEND_ANSWER_PLAN)


@settings(max_examples=100, deadline=None)
@given(
    group=TEXT, topic=TEXT, queue_id=INT32, offset=INT64, nums=INT32, sys_flag=INT32,
    commit=INT64, suspend=INT64, subscription=TEXT, version=INT64,
    expression_type=st.none() | TEXT,
)  # fmt: skip
def test_the_pull_header_encodes_as_the_header_object_does(
    group: str, topic: str, queue_id: int, offset: int, nums: int, sys_flag: int,
    commit: int, suspend: int, subscription: str, version: int, expression_type: str | None,
) -> None:  # fmt: skip
    """The pull request as the remote transport prepares it (values in wire_names order)
    is the bytes the header object and RemotingCommand give."""
    header = PullMessageRequestHeader(
        consumer_group=group, topic=topic, queue_id=queue_id, queue_offset=offset,
        max_msg_nums=nums, sys_flag=sys_flag, commit_offset=commit,
        suspend_timeout_millis=suspend, subscription=subscription, sub_version=version,
        expression_type=expression_type,
    )  # fmt: skip
    cmd = RemotingCommand.request(11, header)
    specs = {s.wire: s.attr for s in PullMessageRequestHeader._specs()}
    names = PullMessageRequestHeader.wire_names()
    values = tuple(getattr(header, specs[name]) for name in names)
    assert encode_request_head(11, cmd.opaque, names, values, 0) == cmd.py_encode_parts()[0]


@settings(max_examples=50, deadline=None)
@given(code=st.integers(), opaque=st.integers())
def test_numbers_past_int64_are_the_references_to_write(code: int, opaque: int) -> None:
    expected = py_encode_request_head(code, opaque, ("k",), ("v",), 0)
    assert encode_request_head(code, opaque, ("k",), ("v",), 0) == expected
