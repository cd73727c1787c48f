"""Arrow batches to SEND_BATCH_MESSAGE bodies: C and Python give the same bytes, which the
server's batch decoder reads back as the rows' messages with deterministic UNIQ_KEYs."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pyarrow")

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from mqcore.contrib.spark import netbatch
from mqcore.contrib.spark.netbatch import (
    arrow_batches,
    batch_bodies,
    message_batches,
    py_arrow_batches,
    uniq_key,
    uniq_prefix,
)
from mqcore.errors import InvalidArgumentError
from mqcore.protocol.send import decode_batch

needs_c = pytest.mark.skipif(not netbatch.SPEEDUPS, reason="C speedups not built or turned off")
PROPS = pa.map_(pa.string(), pa.string())
text = st.text(
    st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), max_size=10
)
names = text.map(str.lower).filter(bool)  # never a system name such as TAGS or UNIQ_KEY
rows = st.lists(
    st.tuples(
        st.one_of(st.none(), st.binary(max_size=40)),
        st.one_of(st.none(), text),
        st.one_of(st.none(), text),
        st.one_of(st.none(), st.dictionaries(names, text, max_size=3)),
        st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
    ),
    min_size=1,
    max_size=30,
)


def _batch(data: list[tuple[Any, ...]]) -> pa.RecordBatch:
    body, tags, keys, props, replay = zip(*data, strict=True)
    return pa.RecordBatch.from_pydict(
        {
            "body": pa.array(body, pa.binary()),
            "tags": pa.array(tags, pa.string()),
            "keys": pa.array(keys, pa.string()),
            "properties": pa.array([None if p is None else list(p.items()) for p in props], PROPS),
            "commitlog_offset": pa.array(replay, pa.int64()),
        }
    )


@needs_c
@settings(max_examples=200, deadline=None)
@given(
    data=rows,
    pick=st.lists(st.integers(0, 29), max_size=40),
    first_row=st.integers(0, 2**40),
    max_count=st.integers(1, 8),
    max_bytes=st.integers(1, 600),
)
def test_c_bodies_equal_the_python_reference(
    data: list[tuple[Any, ...]], pick: list[int], first_row: int, max_count: int, max_bytes: int
) -> None:
    """The C builder and its Python reference write the same bodies, cut the same way."""
    batch = _batch(data)
    chosen = [i % len(data) for i in pick]
    prefix = uniq_prefix(0x1234_5678_9ABC, 7)
    got = arrow_batches(batch, chosen, prefix, first_row, max_count, max_bytes)
    want = py_arrow_batches(batch, chosen, prefix, first_row, max_count, max_bytes)
    assert got == want


@settings(max_examples=100, deadline=None)
@given(data=rows, first_row=st.integers(0, 10**6))
def test_bodies_decode_to_the_rows(data: list[tuple[Any, ...]], first_row: int) -> None:
    """The server's decoder reads each row back: body, tags, keys, properties, REPLAY_ID and
    a UNIQ_KEY of the write's prefix and the row's number (with or without the C builder)."""
    batch = _batch(data)
    prefix = uniq_prefix(42, 3)
    bodies = batch_bodies(batch, list(range(len(data))), "T", prefix, first_row, 4, 1 << 20)
    assert [count for _, count in bodies] == [min(4, len(data) - i) for i in range(0, len(data), 4)]
    got = [m for body, _ in bodies for m in decode_batch("T", body)]
    assert len(got) == len(data)
    for i, (msg, (body, tags, keys, props, replay)) in enumerate(zip(got, data, strict=True)):
        assert msg.body == (body or b"")
        assert msg.tags == (tags or None)
        assert msg.keys == (keys or None)
        want = dict(props or {})
        if replay is not None:
            want["REPLAY_ID"] = str(replay)
        want["UNIQ_KEY"] = uniq_key(prefix, first_row + i)
        assert msg.properties == want


def test_uniq_keys_are_32_hex_digits_of_write_partition_and_row() -> None:
    """A key reads as RocketMQ's ids (32 upper-case hex digits) and names its row."""
    key = uniq_key(uniq_prefix(0xABC, 5), 0x1F)
    assert key == "000000000ABC" + "00000005" + "00000000001F"
    assert uniq_prefix(2**60 + 1, 2**33 + 2) == uniq_prefix(1, 2)  # wrapped to the widths


def test_a_row_with_its_own_uniq_key_keeps_it() -> None:
    """Rows copied from records keep their UNIQ_KEY (the duplicates' key stays the same)."""
    batch = _batch([(b"x", None, None, {"UNIQ_KEY": "ORIGINAL"}, None)])
    ((body, _),) = batch_bodies(batch, [0], "T", uniq_prefix(1, 1), 0, 10, 1 << 20)
    assert decode_batch("T", body)[0].properties == {"UNIQ_KEY": "ORIGINAL"}


@pytest.mark.parametrize(
    ("column", "values", "kind"),
    [
        ("tags", ["a\x01b"], pa.string()),
        ("keys", ["k\x02"], pa.string()),
        ("properties", [[("", "x")]], PROPS),
        ("properties", [[("a", None)]], PROPS),
        ("properties", [[("a", "1"), ("a", "2")]], PROPS),
        ("properties", [[("a", "x" * 40000)]], PROPS),
    ],
)
def test_rows_needing_message_checks_take_the_message_path(
    column: str, values: list[Any], kind: pa.DataType
) -> None:
    """Both builders decline such a row; the message path refuses it naming the problem,
    or sends what Message accepts (a name twice keeps the last value)."""
    batch = pa.RecordBatch.from_pydict(
        {"body": pa.array([b"b"], pa.binary()), column: pa.array(values, kind)}
    )
    assert py_arrow_batches(batch, [0], "P" * 20, 0, 10, 1 << 20) is None
    if netbatch.SPEEDUPS:
        assert arrow_batches(batch, [0], "P" * 20, 0, 10, 1 << 20) is None
    try:
        bodies = message_batches(batch, [0], "T", "P" * 20, 0, 10, 1 << 20)
    except (InvalidArgumentError, ValueError) as exc:
        assert str(exc)
    else:
        assert decode_batch("T", bodies[0][0])[0].body == b"b"


def test_a_body_over_the_byte_limit_is_cut() -> None:
    """Bodies hold at most max_bytes unless a single message is larger."""
    batch = _batch([(b"x" * 100, None, None, None, None)] * 5)
    # Each message: 20 bytes of head, the body, 2 + 42 bytes of properties (the UNIQ_KEY).
    bodies = batch_bodies(batch, list(range(5)), "T", uniq_prefix(1, 1), 0, 100, 400)
    assert [count for _, count in bodies] == [2, 2, 1]
    assert all(len(body) <= 400 for body, _ in bodies)
    one = batch_bodies(batch, [0], "T", uniq_prefix(1, 1), 0, 100, 10)
    assert [count for _, count in one] == [1]
