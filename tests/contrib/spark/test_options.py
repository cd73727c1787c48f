"""Options of the mqcore source and the planning rules (no Spark session needed)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("pyspark")

from hypothesis import given, settings
from hypothesis import strategies as st

from mqcore.contrib.spark.options import (
    Bounds,
    ReadOptions,
    cap_offsets,
    parse_timestamp,
    split_range,
)
from mqcore.errors import InvalidArgumentError


@given(
    start=st.integers(0, 10_000),
    length=st.integers(0, 5_000),
    limit=st.one_of(st.none(), st.integers(1, 2_000)),
)
def test_split_range_covers_every_offset_once(start: int, length: int, limit: int | None) -> None:
    """Slices tile [start, end): no gap, no overlap, none over the limit, ceil(n/limit) many."""
    end = start + length
    slices = split_range("T", 3, start, end, limit)
    offsets = [o for s in slices for o in range(s.start, s.end)]
    assert offsets == list(range(start, end))
    if length:
        expected = 1 if limit is None else -(-length // limit)
        assert len(slices) == expected
    assert all(s.count <= (limit or length) and s.count > 0 for s in slices)


@given(
    ranges=st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 1000)), min_size=1, max_size=8),
    limit=st.one_of(st.none(), st.integers(1, 3000)),
)
def test_cap_offsets_shares_the_limit(ranges: list[tuple[int, int]], limit: int | None) -> None:
    """Ends stay within [start, latest]; the batch reads min(limit, backlog) records."""
    rows = [("T", str(i), s, s + b) for i, (s, b) in enumerate(ranges)]
    ends = cap_offsets(rows, limit)
    taken = 0
    for _, qid, start, latest in rows:
        end = ends["T"][qid]
        assert start <= end <= latest
        taken += end - start
    backlog = sum(b for _, b in ranges)
    assert taken == (backlog if limit is None else min(limit, backlog))


@settings(max_examples=50)
@given(
    a=st.tuples(st.integers(0, 50), st.integers(0, 50)),
    b=st.tuples(st.integers(0, 50), st.integers(0, 50)),
)
def test_bounds_narrow_is_intersection(a: tuple[int, int], b: tuple[int, int]) -> None:
    """Narrowing keeps exactly the values in both ranges."""
    narrowed = Bounds(*a).narrow(*b)
    for v in range(-1, 52):
        assert narrowed.contains(v) == (Bounds(*a).contains(v) and Bounds(*b).contains(v))


def test_parse_options() -> None:
    """Every option is parsed to its type."""
    opts = ReadOptions.parse(
        {
            "path": "/d",
            "topic": "A, B",
            "queue_ids": "0,3",
            "start_offset": "5",
            "end_offset": "9",
            "start_timestamp": "2024-01-01T00:00:00Z",
            "end_timestamp": "1704067300000",
            "filter_type": "sql92",
            "filter": "a > 1",
            "max_records_per_partition": "100",
        }
    )
    assert opts.topics == ("A", "B")
    assert opts.queue_ids == {0, 3}
    assert opts.offsets == Bounds(5, 9)
    assert opts.timestamps == Bounds(1704067200000, 1704067300000)
    assert (opts.filter_type, opts.filter) == ("SQL92", "a > 1")
    assert opts.max_records_per_partition == 100


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"path": "/d"}, "'topic' is required"),
        ({"topic": "T", "start_offset": "9", "end_offset": "3"}, "not before end_offset"),
        ({"topic": "T", "start_timestamp": "5", "end_timestamp": "5"}, "not before"),
        ({"topic": "T", "start_timestamp": "yesterday"}, "ISO-8601"),
        ({"topic": "T", "filter_type": "XPATH", "filter": "x"}, "TAG or SQL92"),
        ({"topic": "T", "filter_type": "SQL92"}, "needs option 'filter'"),
        ({"topic": "T", "max_records_per_partition": "0"}, "must be >= 1"),
        ({"topic": "T", "queue_id": "1"}, "unknown option"),
        ({"topic": "T", "start_offset": "x"}, "must be an integer"),
    ],
)
def test_bad_options_are_named(options: dict[str, str], match: str) -> None:
    """A bad option fails with a message naming it."""
    with pytest.raises(InvalidArgumentError, match=match):
        ReadOptions.parse(options)


def test_starting_offsets() -> None:
    """earliest, latest, or Spark Kafka's JSON with -2/-1."""
    assert ReadOptions.parse({"topic": "T"}, streaming=True).starting_offsets == "earliest"
    assert (
        ReadOptions.parse(
            {"topic": "T", "starting_offsets": "LATEST"}, streaming=True
        ).starting_offsets
        == "latest"
    )
    given_json = json.dumps({"T": {"0": 5, "1": -1}})
    opts = ReadOptions.parse({"topic": "T", "starting_offsets": given_json}, streaming=True)
    assert opts.starting_offsets == {"T": {0: 5, 1: -1}}
    with pytest.raises(InvalidArgumentError, match="does not read"):
        ReadOptions.parse({"topic": "T", "starting_offsets": '{"U": {"0": 1}}'}, streaming=True)
    with pytest.raises(InvalidArgumentError, match="earliest, latest or JSON"):
        ReadOptions.parse({"topic": "T", "starting_offsets": "first"}, streaming=True)


def test_parse_timestamp_naive_is_utc() -> None:
    """A date without a zone is UTC."""
    assert parse_timestamp("t", "1970-01-01T00:00:01") == 1000
