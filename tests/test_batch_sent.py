"""A sent batch straight to prepared records (mqcore.batch.prepare_sent_batch): the C loop
against its Python reference, and both against decoding the messages and preparing them."""

from __future__ import annotations

import pytest
from batchwire import raw_batch
from hypothesis import given
from hypothesis import strategies as st

from mqcore import batch
from mqcore.codec import prepare
from mqcore.errors import MessageIllegalError
from mqcore.protocol.send import decode_batch
from mqcore.uniqkey import uniq_ids
from mqcore.validation import check_sent_message

_HEAD = b"\x01T"  # the trailer's start for topic "T"


_NAMES = ["a", "b", "TAGS", "KEYS", "DELAY", "UNIQ_KEY", "WAIT", "TRAN_MSG", "TIMER_DELAY_MS"]
_PROPERTY_TEXT = st.lists(
    st.tuples(
        st.sampled_from([*_NAMES, "REAL_TOPIC", "", "é"]),
        st.sampled_from(["", "1", "x y", "AB12", "é", "a\x01b", "-3"]),
        st.sampled_from(["\x01", "\x01", ""]),
    ),
    max_size=5,
).map(lambda items: "".join(f"{n}{sep}{v}\x02" for n, v, sep in items).encode())

# Mostly plain batches: distinct names from the accepted ones, ASCII values.
_PLAIN_TEXT = st.dictionaries(
    st.sampled_from(["a", "b", "c", "TAGS", "KEYS", "UNIQ_KEY", "WAIT"]),
    st.sampled_from(["", "1", "x y", "AB12", "TagA", "k1 k2"]),
    max_size=5,
).map(lambda d: "".join(f"{n}\x01{v}\x02" for n, v in d.items()).encode())

_RAW_BATCHES = st.lists(
    st.tuples(
        st.integers(-(2**31), 2**31 - 1),
        st.binary(max_size=40),
        _PLAIN_TEXT | _PROPERTY_TEXT | st.binary(max_size=12),
    ),
    max_size=4,
).map(raw_batch)

_BODIES = (
    _RAW_BATCHES
    | st.tuples(_RAW_BATCHES, st.integers(0, 400), st.binary(max_size=3)).map(
        lambda t: t[0][: t[1]] + t[2] + t[0][t[1] + len(t[2]) :]  # damaged
    )
    | st.binary(max_size=60)
)


@pytest.mark.skipif(batch._c_prepare_sent_batch is None, reason="built without the speedups")
@given(data=_BODIES, limit=st.sampled_from([1, 8, 4 << 20]), sys_flag=st.sampled_from([0, 1]))
def test_c_prepare_sent_batch_agrees_with_the_python_reference(
    data: bytes, limit: int, sys_flag: int
) -> None:
    """The C loop gives the same records and unique ids as py_prepare_sent_batch, or None
    where it does, for plain, special, damaged and random bodies."""
    expected = batch.py_prepare_sent_batch(_HEAD, data, limit, 1234, 2, sys_flag)
    for wrapped in (data, bytearray(data), memoryview(data)):
        assert batch.prepare_sent_batch(_HEAD, wrapped, limit, 1234, 2, sys_flag) == expected


@given(data=_BODIES, limit=st.sampled_from([1, 8, 4 << 20]), sys_flag=st.sampled_from([0, 1]))
def test_a_prepared_batch_is_what_the_decoded_messages_prepare_to(
    data: bytes, limit: int, sys_flag: int
) -> None:
    """Whatever is prepared straight from the body is what decoding the messages and
    preparing them gives (records and unique ids), and every such message passes the
    broker's checks of a sent message; a body refused by decoding is never prepared."""
    got = batch.prepare_sent_batch(_HEAD, data, limit, 1234, 2, sys_flag)
    assert got == batch.py_prepare_sent_batch(_HEAD, data, limit, 1234, 2, sys_flag)
    try:
        messages = decode_batch("T", data)
    except MessageIllegalError:
        assert got is None
        return
    if got is None:
        return
    prepared, uniqs = got
    assert prepared == prepare(messages, 1234, topic="T", reconsume_times=2, sys_flag=sys_flag)
    assert uniqs == (uniq_ids(messages) or [None] * len(messages))
    for m in messages:
        check_sent_message(m, "T")
        assert 0 < len(m.body) <= limit
        assert m.delay_level == 0
        assert not {"TRAN_MSG", "TIMER_DELAY_MS", "DELAY"} & m.properties.keys()


def test_plain_batches_are_prepared_and_special_ones_are_not() -> None:
    """A plain batch is prepared (tags and keys after the other properties, as a decoded
    message's record holds them); a delayed, timer, transactional, refused or malformed one
    is left to the general path."""
    plain = raw_batch(
        [(0, b"x", b"KEYS\x01k1\x02UNIQ_KEY\x01AB\x02TAGS\x01t\x02a\x011\x02"), (3, b"yy", b"")]
    )
    got = batch.prepare_sent_batch(_HEAD, plain, 100, 7, 0, 1)
    assert got is not None
    prepared, uniqs = got
    assert [p[2] for p in prepared] == [
        b"\x01T\x00\x1fUNIQ_KEY\x01AB\x02a\x011\x02TAGS\x01t\x02KEYS\x01k1\x02",
        b"\x01T\x00\x00",
    ]
    assert uniqs == ["AB", None]
    assert [p[4] for p in prepared] == [0, 3]  # the flags
    assert [p[5] for p in prepared] == [1, 1]  # the sender's sys flag (compressed bodies)
    for props in (
        b"DELAY\x013\x02",
        b"TIMER_DELAY_MS\x01100\x02",
        b"TRAN_MSG\x01true\x02",
        b"REAL_TOPIC\x01X\x02",
        b"a\x011\x02a\x012\x02",
        b"\xc3\xa9\x011\x02",
    ):
        assert batch.prepare_sent_batch(_HEAD, raw_batch([(0, b"x", props)]), 100, 7, 0, 0) is None
    assert batch.prepare_sent_batch(_HEAD, raw_batch([(0, b"x" * 101, b"")]), 100, 7, 0, 0) is None
    assert batch.prepare_sent_batch(_HEAD, raw_batch([(0, b"", b"")]), 100, 7, 0, 0) is None
    assert batch.prepare_sent_batch(_HEAD, b"", 100, 7, 0, 0) is None
    assert batch.prepare_sent_batch(_HEAD, plain[:-1], 100, 7, 0, 0) is None
