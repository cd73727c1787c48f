"""The batch body of SEND_BATCH_MESSAGE: encoded as RocketMQ's clients write it, read back."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from mqcore.message import Message
from mqcore.protocol.send import decode_batch, encode_batch, wire_properties

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
    properties=st.dictionaries(_TEXT.filter(lambda s: s.isidentifier()), _TEXT, max_size=3),
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
