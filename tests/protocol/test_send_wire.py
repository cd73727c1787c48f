"""The batch body of SEND_BATCH_MESSAGE: encoded as RocketMQ's clients write it, read back."""

from __future__ import annotations

import struct

from batchwire import raw_batch
from hypothesis import given
from hypothesis import strategies as st

from mqcore.message import Message
from mqcore.protocol.send import decode_batch, encode_batch, wire_properties
from mqcore.validation import SYSTEM_PROPERTY_NAMES

_TEXT = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=["Cs"]))


def _reference_batch(messages: list[Message]) -> bytes:
    """RocketMQ's MessageDecoder.encodeMessages layout, field by field."""
    out = b""
    for m in messages:
        props = wire_properties(m).encode()
        body = bytes(m.body)
        size = 4 * 5 + len(body) + 2 + len(props)
        out += struct.pack(">iiiii", size, 0, 0, m.flag, len(body)) + body
        out += struct.pack(">h", len(props)) + props
    return out


_MESSAGES = st.builds(
    Message,
    topic=st.just("T"),
    body=st.binary(min_size=1, max_size=64),
    tags=st.none() | _TEXT.filter(bool),
    keys=st.none() | _TEXT.filter(bool),
    # User properties: a name the system reserves (TIMER_OUT_MS...) is refused by Message.
    properties=st.dictionaries(
        _TEXT.filter(lambda s: s.isidentifier() and s not in SYSTEM_PROPERTY_NAMES),
        _TEXT,
        max_size=3,
    ),
    flag=st.integers(0, 2**31 - 1),
    delay_level=st.integers(0, 18),
)


@given(messages=st.lists(_MESSAGES, min_size=1, max_size=6))
def test_encode_batch_is_rocketmqs_layout_and_reads_back(messages: list[Message]) -> None:
    data = encode_batch(messages)
    assert data == _reference_batch(messages)
    back = decode_batch("T", data)
    assert [(m.body, m.tags, m.keys, m.properties, m.flag, m.delay_level) for m in back] == [
        (bytes(m.body), m.tags, m.keys, dict(m.properties), m.flag, m.delay_level) for m in messages
    ]


@given(
    msg_id=st.text(alphabet="0123456789ABCDEFabcdef", min_size=32, max_size=32)
    | st.text(max_size=40)
)
def test_send_results_read_the_offset_as_decode_message_id(msg_id: str) -> None:
    """The remote producer reads each result's commit-log offset from its offset message
    id with a shortcut; it must agree with decode_message_id (-1 where that refuses)."""
    from mqcore.client.transport_remote import _commitlog_offset
    from mqcore.codec import decode_message_id

    try:
        expected = decode_message_id(msg_id)[1]
    except Exception:
        expected = -1
    assert _commitlog_offset(msg_id) == expected


_PROPERTY_TEXT = st.lists(
    st.tuples(
        st.sampled_from(["a", "TAGS", "KEYS", "DELAY", "UNIQ_KEY", "", "é"]),
        st.sampled_from(["", "1", "x y", "é", "-3", " 7", "\ud7ff"]),
        st.sampled_from(["\x01", ""]),
    ),
    max_size=4,
).map(lambda items: "".join(f"{n}{sep}{v}\x02" for n, v, sep in items).encode())

_RAW_BATCHES = st.lists(
    st.tuples(
        st.integers(-(2**31), 2**31 - 1),
        st.binary(max_size=40),
        _PROPERTY_TEXT | st.binary(max_size=12),
    ),
    max_size=4,
).map(raw_batch)


@given(
    data=_RAW_BATCHES
    | st.tuples(_RAW_BATCHES, st.integers(0, 400), st.binary(max_size=3)).map(
        lambda t: t[0][: t[1]] + t[2] + t[0][t[1] + len(t[2]) :]  # damaged
    )
    | st.binary(max_size=60)
)
def test_decode_batch_in_c_agrees_with_the_python_reference(data: bytes) -> None:
    """The C batch decoder gives the same messages (every field) or the same error as
    py_decode_batch, for well-formed, damaged and random bodies."""
    import attrs

    from mqcore.errors import MessageIllegalError
    from mqcore.protocol import send

    def outcome(decode: object) -> object:
        try:
            return [
                (type(m), attrs.asdict(m, recurse=False))
                for m in decode("T", data)  # type: ignore[operator]
            ]
        except MessageIllegalError as exc:
            return ("refused", str(exc), exc.code)

    expected = outcome(send.py_decode_batch)
    assert outcome(send.decode_batch) == expected
    for wrapped in (bytearray(data), memoryview(data)):
        assert outcome(lambda t, _, w=wrapped: send.decode_batch(t, w)) == expected


@given(
    ids=st.lists(
        st.text(alphabet="0123456789ABCDEFabcdef", min_size=32, max_size=32)
        | st.text(alphabet="0123456789ABCDEF ,g+é", max_size=33)
        | st.text(alphabet="0123456789ABCDEF", min_size=31, max_size=33),
        min_size=1,
        max_size=5,
    )
)
def test_a_batch_results_offsets_are_read_as_one_by_one(ids: list[str]) -> None:
    """A batch's offset ids are decoded in one call when all are 32 hex digits; the offsets
    are those of decoding each id alone."""
    from mqcore.client.transport_remote import _commitlog_offset, _commitlog_offsets

    joined = ",".join(ids)
    split = joined.split(",")
    assert _commitlog_offsets(joined, split) == [_commitlog_offset(i) for i in split]


_ODD_FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "body": st.sampled_from([bytearray(b"ba"), memoryview(b"mv"), b""]),
        "flag": st.sampled_from([2**31, -(2**31) - 1, -5, True]),
        "tags": st.sampled_from(["", None, "t"]),
        "keys": st.sampled_from(["", None, "k"]),
        "delay_level": st.sampled_from([0, False, 2]),
        "properties": st.sampled_from(
            [{}, {"a": "\ud800"}, {"é": "ü"}, {"a": "x" * 33000}, {"k": "1", "j": "2"}]
        ),
    },
)


@given(batch=st.lists(st.tuples(_MESSAGES, _ODD_FIELDS), min_size=1, max_size=4))
def test_encode_batch_in_c_agrees_with_the_python_reference(
    batch: list[tuple[Message, dict[str, object]]],
) -> None:
    """The C batch encoder writes the same bytes as py_encode_batch, and leaves to it (same
    error) every batch holding a message it does not take."""
    from mqcore.protocol import send

    messages = []
    for message, odd in batch:
        for name, value in odd.items():  # as a caller may set them after building
            object.__setattr__(message, name, value)
        messages.append(message)

    def outcome(encode: object) -> object:
        try:
            return encode(messages)  # type: ignore[operator]
        except Exception as exc:
            return type(exc)

    assert outcome(send.encode_batch) == outcome(send.py_encode_batch)


_OFFSET_ID = st.text(alphabet="0123456789ABCDEFabcdef", min_size=32, max_size=32)


@given(
    ids=st.lists(
        _OFFSET_ID
        | st.text(alphabet="0123456789ABCDEF ,g+é", max_size=33)
        | st.text(alphabet="0123456789ABCDEF", min_size=31, max_size=33),
        min_size=1,
        max_size=6,
    ),
    queue_offset=st.integers(0, 2**40)
    | st.integers(2**63 - 8, 2**63 + 8)
    | st.integers(-(2**63) - 8, -(2**63) + 8),
)
def test_a_send_answers_results_in_c_agree_with_the_python_reference(
    ids: list[str], queue_offset: int
) -> None:
    """The C reader of a send answer's ids builds the results py_put_results builds (same
    type, same fields), or leaves the answer to it."""
    from mqcore import speedups
    from mqcore.client import transport_remote
    from mqcore.store import PutResult

    joined = ",".join(ids)
    expected = transport_remote.py_put_results(joined, queue_offset)
    got = transport_remote._put_results(joined, queue_offset)
    assert got == expected
    assert [type(r) for r in got] == [PutResult] * len(expected)
    codec = speedups.load("codec")
    if codec is not None:
        direct = codec.answer_results(PutResult, joined, queue_offset)
        plain = all(len(i) == 32 and all(c in "0123456789ABCDEFabcdef" for c in i) for i in ids)
        if plain and -(2**63) <= queue_offset <= 2**63 - len(ids):
            assert direct == expected  # the C code reads every plain answer itself
            assert [type(r) for r in direct] == [PutResult] * len(expected)
        else:
            assert direct is None


def test_the_c_answer_reader_refuses_arguments_of_the_wrong_type() -> None:
    """answer_results checks what it is given: a class that is not a tuple, an answer that
    is not text, an offset that is not an int are refused; a joined text beyond ASCII, or
    a length that is not n ids and commas, is left to the reference."""
    import pytest

    from mqcore import speedups
    from mqcore.store import PutResult

    codec = speedups.load("codec")
    if codec is None:
        pytest.skip("the codec speedups are not in use")
    one = "7F00000100002A9F00000000000004D2"
    with pytest.raises(TypeError):
        codec.answer_results(dict, one, 0)
    with pytest.raises(TypeError):
        codec.answer_results(PutResult, one.encode(), 0)
    with pytest.raises(TypeError):
        codec.answer_results(PutResult, one, 1.0)
    for text in (one[:-1] + "é", one[:-1] + "\u20ac", one + ",", "," + one, one + one, ""):
        assert codec.answer_results(PutResult, text, 0) is None
    # The second of two ids counts past a long; one alone is the last long.
    assert codec.answer_results(PutResult, f"{one},{one}", 2**63 - 1) is None
    assert codec.answer_results(PutResult, one, 2**63 - 1) == [
        PutResult(one, 2**63 - 1, 1234, 0, 0)
    ]
