"""Planning and reading slices straight from a store (the work of each Spark task)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqcore import Kernel, Message
from mqcore.contrib.spark.layout import Location, resolve_read, resolve_write
from mqcore.contrib.spark.options import ReadOptions, Slice
from mqcore.contrib.spark.records import (
    ReadFilter,
    plan_slices,
    read_slice,
)
from mqcore.contrib.spark.source import SCHEMA
from mqcore.errors import InvalidArgumentError, StoreError

QUEUES = 8
PER_QUEUE = 300


def _stores() -> list[str]:
    wanted = [s for s in os.environ.get("MQCORE_TEST_STORES", "").split(",") if s]
    return [s for s in Kernel(autoload=False).names("store") if not wanted or s in wanted]


def _arrow_schema() -> Any:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(SCHEMA, timezone="UTC")


@pytest.fixture(scope="module", params=_stores())
def filled(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """(location, open read-only store) of 8 queues x 300 messages, per store backend."""
    path = tmp_path_factory.mktemp(f"records-{request.param}")
    with Kernel().open_store(request.param, path) as store:
        for qid in range(QUEUES):
            msgs = [
                Message(
                    topic="T",
                    body=f"{qid}:{i}".encode(),
                    tags="A" if i % 4 else "B",
                    properties={"i": str(i)},
                )
                for i in range(PER_QUEUE)
            ]
            store.put("T", qid, msgs)
    location = resolve_read(path)
    assert location.store == request.param
    store = Kernel().open_store(location.store, location.store_dir, read_only=True)
    yield location, store
    store.close()


def _read_all(store: Any, slices: list[Slice], **kw: Any) -> Iterator[tuple[int, int, bytes]]:
    schema = _arrow_schema()
    for part in slices:
        for batch in read_slice(store, part, schema, **kw):
            cols = batch.to_pydict()
            yield from zip(cols["queue_id"], cols["queue_offset"], cols["body"], strict=True)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    limit=st.one_of(st.none(), st.integers(1, 400)),
    start=st.one_of(st.none(), st.integers(0, PER_QUEUE + 10)),
    length=st.one_of(st.none(), st.integers(1, PER_QUEUE)),
)
def test_slices_read_every_record_once(
    filled: Any, limit: int | None, start: int | None, length: int | None
) -> None:
    """Any limit and offset range: the expected partitions, each record exactly once."""
    location, store = filled
    options = {"path": location.store_dir, "topic": "T"}
    if limit:
        options["max_records_per_partition"] = str(limit)
    if start is not None:
        options["start_offset"] = str(start)
    if length is not None:
        options["end_offset"] = str((start or 0) + length)
    slices = plan_slices(store, location, ReadOptions.parse(options))
    low = start or 0
    high = min(PER_QUEUE, low + length) if length is not None else PER_QUEUE
    n = max(0, high - low)
    per_queue = 0 if n == 0 else (1 if limit is None else -(-n // limit))
    assert len(slices) == QUEUES * per_queue
    rows = list(_read_all(store, slices))
    keys = [(q, o) for q, o, _ in rows]
    assert len(keys) == len(set(keys)) == QUEUES * n
    assert set(keys) == {(q, o) for q in range(QUEUES) for o in range(low, high)}
    assert all(body == f"{q}:{o}".encode() for q, o, body in rows)


def test_filtered_read_stops_at_the_slice_end(filled: Any) -> None:
    """A filtered scan runs past a slice; the next slice owns those records."""
    location, store = filled
    opts = ReadOptions.parse(
        {"path": location.store_dir, "topic": "T", "max_records_per_partition": "7"}
    )
    slices = plan_slices(store, location, opts)
    rows = list(_read_all(store, slices, message_filter=ReadFilter(frozenset({"B"}))))
    keys = sorted((q, o) for q, o, _ in rows)
    assert keys == [(q, o) for q in range(QUEUES) for o in range(0, PER_QUEUE, 4)]


def test_column_subset_skips_columns(filled: Any) -> None:
    """A schema without body yields no body column."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    _location, store = filled
    schema = to_arrow_schema(StructType([SCHEMA["queue_offset"], SCHEMA["properties"]]))
    batches = list(read_slice(store, Slice("T", 2, 10, 13), schema))
    assert batches[0].schema.names == ["queue_offset", "properties"]
    assert batches[0].to_pydict() == {
        "queue_offset": [10, 11, 12],
        "properties": [[("i", "10")], [("i", "11")], [("i", "12")]],
    }


def test_slice_beyond_the_store_is_an_error(filled: Any) -> None:
    """A slice past what the store holds fails instead of returning less."""
    _, store = filled
    with pytest.raises(StoreError, match="before the planned slice"):
        list(read_slice(store, Slice("T", 0, PER_QUEUE - 1, PER_QUEUE + 5), _arrow_schema()))


def test_unknown_topic_is_named(filled: Any) -> None:
    """Reading a topic the store does not hold lists the topics it does."""
    location, store = filled
    with pytest.raises(InvalidArgumentError, match=r"'Nope'.*topics there: T"):
        plan_slices(store, location, ReadOptions.parse({"path": "x", "topic": "Nope"}))


def test_paths(tmp_path: Path, filled: Any) -> None:
    """Store dirs, broker data dirs and new dirs resolve; other paths fail clearly."""
    location, _ = filled
    assert resolve_read(location.store_dir).data_dir is None
    with pytest.raises(InvalidArgumentError, match="does not exist"):
        resolve_read(tmp_path / "missing")
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "file.txt").write_text("x")
    with pytest.raises(InvalidArgumentError, match="is not an mqcore store"):
        resolve_read(tmp_path / "junk")
    new = resolve_write(tmp_path / "new", "lmdb")
    assert new == Location(str(tmp_path / "new" / "store"), "lmdb", str(tmp_path / "new"))
    assert new.topics_file == tmp_path / "new" / "config" / "topics.json"
    with pytest.raises(InvalidArgumentError, match="holds a"):
        resolve_read(location.store_dir, "mmap" if location.store == "lmdb" else "lmdb")


def test_time_range_selects_by_store_timestamp(tmp_path: Path) -> None:
    """start/end_timestamp cut each queue where its store timestamps cross the bounds."""
    import time

    path = tmp_path / "timed"
    name = _stores()[0]
    stamps = []
    with Kernel().open_store(name, path) as store:
        for batch in range(3):
            results = store.put("T", 0, [Message(topic="T", body=b"%d" % batch)] * 5)
            stamps.append(results[0].store_timestamp)
            time.sleep(0.01)
    location = resolve_read(path)
    opts = ReadOptions.parse(
        {
            "path": str(path),
            "topic": "T",
            "start_timestamp": str(stamps[1]),
            "end_timestamp": str(stamps[2]),
        }
    )
    with Kernel().open_store(location.store, location.store_dir, read_only=True) as store:
        slices = plan_slices(store, location, opts)
        assert slices == [Slice("T", 0, 5, 10)]
        rows = list(_read_all(store, slices, timestamps=opts.timestamps))
    assert [body for _, _, body in rows] == [b"1"] * 5


def test_pushdown_narrows_the_read() -> None:
    """Spark's filters on queue, offset, time, topic and tags move into the read options."""
    from pyspark.sql.datasource import (
        EqualTo,
        GreaterThan,
        GreaterThanOrEqual,
        In,
        LessThan,
        LessThanOrEqual,
        StringStartsWith,
    )

    from mqcore.contrib.spark.options import Bounds
    from mqcore.contrib.spark.pushdown import push

    opts = ReadOptions.parse({"path": "p", "topic": "A,B", "start_offset": "3"})
    filters = [
        In(("queue_id",), (1, 2, 5)),
        GreaterThan(("queue_id",), 1),
        GreaterThanOrEqual(("queue_offset",), 1),
        LessThan(("queue_offset",), 40),
        LessThanOrEqual(("store_timestamp",), 999),
        EqualTo(("topic",), "B"),
        In(("tags",), ("x", "y")),
        EqualTo(("tags",), "y"),
        StringStartsWith(("keys",), "k"),
        EqualTo(("queue_id",), "1"),  # not an int: Spark keeps it
    ]
    narrowed, left = push(opts, filters)
    assert left == filters[-2:]
    assert narrowed.queue_ids == {1, 2, 5}
    assert narrowed.queue_range == Bounds(2, None)
    assert narrowed.offsets == Bounds(3, 40)
    assert narrowed.timestamps == Bounds(None, 1000)
    assert narrowed.only_topics == {"B"}
    assert narrowed.tags == {"y"}
