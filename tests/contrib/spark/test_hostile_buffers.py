"""Column buffers that lie, handed straight to the C builders of mqcore.contrib.spark._arrow
(arrow_prepare, arrow_batches): offsets that go back, past the data or below zero, too few
offsets, short validity bitmaps, map offsets past the entries, replay columns too short,
rows out of range. The builders check every buffer before they read it: each call raises
ValueError (TypeError for a malformed argument) or gives a result, never reads outside a
buffer (the sanitizer builds of the extensions check that)."""

from __future__ import annotations

import struct
import zlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqcore import speedups

_c = speedups.load("spark")
pytestmark = pytest.mark.skipif(_c is None, reason="the Spark speedups are not in use")

N = st.integers(0, 6)


@st.composite
def strcol(draw: st.DrawFn, n: int) -> Any:
    """(validity, offsets, data) for ``n`` values: honest, or with one part lying."""
    data = draw(st.binary(max_size=24))
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), min_size=n + 1, max_size=n + 1)))
    offsets = list(cuts)
    if draw(st.integers(0, 2)) == 0 and offsets:
        at = draw(st.integers(0, len(offsets) - 1))
        offsets[at] = draw(st.sampled_from([-1, -(2**31), 2**31 - 1, len(data) + 1, 0]))
    raw = struct.pack(f"<{len(offsets)}i", *offsets)
    if draw(st.integers(0, 5)) == 0:
        raw = raw[: draw(st.integers(0, len(raw)))]
    validity = draw(st.none() | st.binary(max_size=(n + 7) // 8 + 1))
    return validity, raw, data


@st.composite
def columns(draw: st.DrawFn) -> tuple[int, Any, Any, Any, Any, Any]:
    n = draw(N)
    body = draw(strcol(n))
    tags = draw(st.none() | strcol(n))
    keys = draw(st.none() | strcol(n))
    props = None
    if draw(st.booleans()):
        counts = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
        moff = [0]
        for c in counts:
            moff.append(moff[-1] + c)
        if draw(st.integers(0, 2)) == 0:
            moff[draw(st.integers(0, n))] = draw(st.sampled_from([-1, 2**31 - 1, moff[-1] + 3]))
        entries = sum(counts)
        props = (
            draw(st.none() | st.binary(max_size=(n + 7) // 8 + 1)),
            struct.pack(f"<{n + 1}i", *moff),
            draw(strcol(entries)),
            draw(strcol(entries)),
        )
    replay = None
    if draw(st.booleans()):
        values = draw(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=n + 1))
        replay = (
            draw(st.none() | st.binary(max_size=(n + 7) // 8 + 1)),
            struct.pack(f"<{len(values)}q", *values),
        )
    return n, body, tags, keys, props, replay


@settings(max_examples=1500, deadline=None)
@given(cols=columns())
def test_arrow_prepare_refuses_lying_buffers(cols: Any) -> None:
    try:
        got = _c.arrow_prepare(*cols, b"\x01T", 1234, zlib.crc32, (b"TRAN_MSG",))  # type: ignore[union-attr]
    except ValueError:
        return
    assert got is None or len(got) == cols[0]


@settings(max_examples=1500, deadline=None)
@given(
    cols=columns(),
    rows=st.lists(st.integers(-2, 8), max_size=8),
    first_row=st.sampled_from([0, 5, 2**40]),
    max_count=st.integers(1, 4),
    max_bytes=st.integers(1, 200),
)
def test_arrow_batches_refuses_lying_buffers(
    cols: Any, rows: list[int], first_row: int, max_count: int, max_bytes: int
) -> None:
    rows_buf = struct.pack(f"<{len(rows)}q", *rows)
    try:
        got = _c.arrow_batches(*cols, rows_buf, b"AB", first_row, max_count, max_bytes)  # type: ignore[union-attr]
    except ValueError:
        return
    assert all(0 <= row < cols[0] for row in rows)
    assert got is None or sum(count for _, count in got) == len(rows)
