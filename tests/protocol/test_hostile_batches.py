"""SEND_BATCH_MESSAGE bodies whose length fields lie, against the C batch loops of
mqcore.protocol._protocol (decode_batch, prepare_sent_batch) and their Python references:
a message's size, body length or properties length rewritten to 0, -1, the int limits,
one off the truth or past the body, and properties without separators. The C loops give
exactly the reference's messages, records or MessageIllegalError (same text), or None
where the reference does."""

from __future__ import annotations

import struct
from typing import Any

import attrs
import pytest
from batchwire import raw_batch
from hypothesis import given, settings
from hypothesis import strategies as st

from mqcore import batch, speedups
from mqcore.errors import MessageIllegalError
from mqcore.protocol import send

_c = speedups.load("protocol")
pytestmark = pytest.mark.skipif(_c is None, reason="the protocol speedups are not in use")

_HEAD = b"\x01T"

PROPERTIES = st.one_of(
    st.dictionaries(
        st.sampled_from(["a", "b", "TAGS", "KEYS", "UNIQ_KEY", "DELAY", "é"]),
        st.sampled_from(["", "1", "x y", "é", "\x01"]),
        max_size=4,
    ).map(lambda d: "".join(f"{n}\x01{v}\x02" for n, v in d.items()).encode()),
    # no separators, a name with no value, a trailing item without its \x02, stray bytes
    st.sampled_from(
        [
            b"a",
            b"a\x02",
            b"\x01\x02",
            b"\x01",
            b"\x02\x02",
            b"a\x01b",
            b"a\x01b\x01c\x02",
            b"\xff\x01x\x02",
            b"a\x01\xc3\x02",
            b"\x00\x01\x00\x02",
        ]
    ),
)
ENTRIES = st.lists(
    st.tuples(st.integers(-(2**31), 2**31 - 1), st.binary(max_size=24), PROPERTIES),
    min_size=1,
    max_size=4,
)
# (offset in the message, struct format) of its size, body length and properties length
FIELDS = {"size": (0, ">i"), "body_len": (16, ">i"), "props_len": (None, ">h")}


@st.composite
def lying_bodies(draw: st.DrawFn) -> bytes:
    """A well-formed batch, then up to two length fields of its messages rewritten."""
    entries = draw(ENTRIES)
    data = bytearray(raw_batch(entries))
    starts, pos = [], 0
    for _, body, props in entries:
        starts.append(pos)
        pos += 22 + len(body) + len(props)
    for _ in range(draw(st.integers(0, 2))):
        i = draw(st.integers(0, len(entries) - 1))
        name = draw(st.sampled_from(sorted(FIELDS)))
        offset, fmt = FIELDS[name]
        at = starts[i] + (offset if offset is not None else 20 + len(entries[i][1]))
        (true,) = struct.unpack_from(fmt, data, at)
        low, high = (-(2**31), 2**31 - 1) if fmt == ">i" else (-(2**15), 2**15 - 1)
        lie = draw(
            st.sampled_from([0, -1, 1, 21, 22, low, high, true - 1, true + 1, true + 22])
            | st.integers(low, high)
        )
        struct.pack_into(fmt, data, at, max(low, min(high, lie)))
    cut = draw(st.integers(0, len(data)))
    return bytes(data) if draw(st.booleans()) else bytes(data[:cut])


def _decoded(decode: Any, data: Any) -> Any:
    try:
        return [(type(m), attrs.asdict(m, recurse=False)) for m in decode("T", data)]
    except MessageIllegalError as exc:
        return ("refused", str(exc), exc.code)


@settings(max_examples=1500, deadline=None)
@given(data=lying_bodies())
def test_a_batch_with_lying_lengths_decodes_as_the_reference(data: bytes) -> None:
    expected = _decoded(send.py_decode_batch, data)
    for wrapped in (data, bytearray(data), memoryview(data)):
        assert _decoded(send.decode_batch, wrapped) == expected


@settings(max_examples=1500, deadline=None)
@given(data=lying_bodies(), limit=st.sampled_from([1, 16, 4 << 20]))
def test_a_batch_with_lying_lengths_prepares_as_the_reference(data: bytes, limit: int) -> None:
    expected = batch.py_prepare_sent_batch(_HEAD, data, limit, 1234, 2, 0)
    for wrapped in (data, bytearray(data), memoryview(data)):
        assert batch.prepare_sent_batch(_HEAD, wrapped, limit, 1234, 2, 0) == expected
