"""The C message_from_wire (a single send's Message) against its Python reference."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqcore import speedups
from mqcore.errors import MQError
from mqcore.protocol.send import message_from_wire, py_message_from_wire

pytestmark = pytest.mark.skipif(
    speedups.load("protocol") is None, reason="the protocol speedups are not in use"
)

# Property strings built from separators, field names and any text (surrogates included).
PIECE = st.sampled_from(["\x01", "\x02", "TAGS", "KEYS", "DELAY", "3", "x", "UNIQ_KEY", ""])
PROPERTIES = st.none() | st.lists(PIECE | st.text(max_size=5), max_size=12).map("".join)


def made(topic: str, body: bytes, flag: int, properties: str | None, c: bool) -> str:
    make = message_from_wire if c else py_message_from_wire
    try:
        return repr(make(topic, body, flag, properties))
    except MQError as exc:
        return f"error {type(exc).__name__}: {exc}"


@settings(max_examples=500, deadline=None)
@given(
    topic=st.text(max_size=5),
    body=st.binary(max_size=8),
    flag=st.integers(-(2**31), 2**31 - 1),
    properties=PROPERTIES,
)
def test_the_same_message_or_error_as_the_reference(
    topic: str, body: bytes, flag: int, properties: str | None
) -> None:
    assert made(topic, body, flag, properties, True) == made(topic, body, flag, properties, False)


def test_plain_properties_are_split_in_c() -> None:
    msg = message_from_wire("T", b"b", 7, "UNIQ_KEY\x01ab\x02noseparator\x02k\x01v=\x01w\x02")
    assert msg.properties == {"UNIQ_KEY": "ab", "k": "v=\x01w"}
    assert (msg.tags, msg.keys, msg.delay_level, msg.flag) == (None, None, 0, 7)
    assert msg == py_message_from_wire(
        "T", b"b", 7, "UNIQ_KEY\x01ab\x02noseparator\x02k\x01v=\x01w\x02"
    )
