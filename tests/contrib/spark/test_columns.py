"""The column builder: C and its Python reference give the same Arrow columns and errors."""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path
from typing import Any

import attrs
import pytest

pytest.importorskip("pyarrow")

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqcore import Kernel, Message, codec
from mqcore.contrib.spark import columns
from mqcore.contrib.spark.columns import COLUMNS, build_batch, record_columns, wanted_mask
from mqcore.errors import StoreCorruptedError
from mqcore.record.sysflag import COMPRESSED_FLAG

ALL = wanted_mask(COLUMNS)
needs_c = pytest.mark.skipif(not columns.SPEEDUPS, reason="C speedups not built or turned off")

# The source's Arrow schema (as pyspark's to_arrow_schema makes it), without pyspark.
SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string(), False),
        pa.field("queue_id", pa.int32(), False),
        pa.field("queue_offset", pa.int64(), False),
        pa.field("commitlog_offset", pa.int64(), False),
        pa.field("msg_id", pa.string(), False),
        pa.field("tags", pa.string()),
        pa.field("keys", pa.string()),
        pa.field(
            "properties",
            pa.map_(pa.field("key", pa.string(), False), pa.field("value", pa.string())),
            False,
        ),
        pa.field("born_timestamp", pa.int64(), False),
        pa.field("store_timestamp", pa.int64(), False),
        pa.field("reconsume_times", pa.int32(), False),
        pa.field("body", pa.binary(), False),
    ]
)


def _stores() -> list[str]:
    wanted = [s for s in os.environ.get("MQCORE_TEST_STORES", "").split(",") if s]
    return [s for s in Kernel(autoload=False).names("store") if not wanted or s in wanted]


text = st.text(
    st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), max_size=12
)
messages = st.lists(
    st.builds(
        lambda body, tags, keys, props: Message(
            topic="T", body=body, tags=tags, keys=keys, properties=props
        ),
        st.binary(max_size=64),
        st.one_of(st.none(), text),
        st.one_of(st.none(), text.filter(lambda k: k.strip() == k)),
        st.dictionaries(
            # Lower case: never one of the system names (TAGS, UNIQ_KEY...) Message refuses.
            text.map(str.lower).filter(lambda n: n and "\x01" not in n and "\x02" not in n),
            text,
            max_size=3,
        ),
    ),
    min_size=1,
    max_size=40,
)


def _expected(m: Any) -> dict[str, Any]:
    """A row as the source defines it, from the decoded message (an independent decoder)."""
    props = [(k, v) for k, v in m.properties.items() if k not in ("TAGS", "KEYS", "DELAY")]
    return {
        "topic": m.topic,
        "queue_id": m.queue_id,
        "queue_offset": m.queue_offset,
        "commitlog_offset": m.commitlog_offset,
        "msg_id": m.msg_id,
        "tags": m.tags,
        "keys": m.keys,
        "properties": props,
        "born_timestamp": m.born_timestamp,
        "store_timestamp": m.store_timestamp,
        "reconsume_times": m.reconsume_times,
        "body": bytes(m.body),
    }


@pytest.mark.parametrize("store_name", _stores())
@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batch=messages, split=st.integers(1, 40))
def test_batches_hold_what_the_store_holds(
    store_name: str, tmp_path_factory: pytest.TempPathFactory, batch: list[Message], split: int
) -> None:
    """Columns built from get_spans equal the messages get() decodes, on every store."""
    path = tmp_path_factory.mktemp(store_name)
    with Kernel().open_store(store_name, path) as store:
        store.put("T", 0, batch[:split])
        store.put("Other", 1, [Message(topic="Other", body=b"between")])
        store.put("T", 0, batch[split:])
    with Kernel().open_store(store_name, path, read_only=True) as store:
        want = [_expected(m) for m in store.get("T", 0, 0, max_count=100).messages]
        got = store.get_spans("T", 0, 0, max_count=100)
        assert got.count == len(batch)
        for python in (False, True):
            rb, done = build_batch(got.spans, SCHEMA, python=python)
            assert not done
            assert rb.to_pylist() == want


def _records(batch: list[Message], compressed: bool = False) -> tuple[bytes, bytes]:
    """``batch`` encoded back to back from offset 1000, and its consume-queue units; with
    ``compressed``, each body stored deflated and flagged, as a remote producer sends it."""
    out, units = b"", b""
    for i, m in enumerate(batch):
        if compressed:
            m = attrs.evolve(m, body=zlib.compress(m.body))
        rec = codec.pack(
            codec.prepare([m], 0, sys_flag=COMPRESSED_FLAG if compressed else 0),
            queue_id=0,
            queue_offset=i,
            commitlog_offset=1000 + len(out),
            store_timestamp=i,
            store_host=codec.host_bytes("127.0.0.1:10911"),
        )
        units += struct.pack(">qiq", 1000 + len(out), len(rec), codec.tags_hash_code(m.tags))
        out += rec
    return out, units


def _outcome(spans: list[Any], wanted: int, python: bool, **kw: Any) -> Any:
    try:
        return record_columns(spans, wanted, python=python, **kw)
    except StoreCorruptedError as exc:
        return ("error", str(exc), exc.offset)


@needs_c
@settings(max_examples=300, deadline=None)
@given(
    batch=messages,
    data=st.data(),
    wanted=st.integers(0, ALL),
    units=st.booleans(),
    compressed=st.booleans(),
)
def test_c_and_python_agree_on_damaged_records(
    batch: list[Message], data: Any, wanted: int, units: bool, compressed: bool
) -> None:
    """Flipped bytes, cut buffers and wrong unit sizes, in plain and compressed bodies: same
    columns or the same error."""
    buf, unit_bytes = _records(batch, compressed)
    damage = data.draw(st.sampled_from(["none", "byte", "cut", "unit"]))
    if damage == "byte":
        at = data.draw(st.integers(0, len(buf) - 1))
        buf = buf[:at] + bytes([data.draw(st.integers(0, 255))]) + buf[at + 1 :]
    elif damage == "cut":
        buf = buf[: data.draw(st.integers(0, len(buf) - 1))]
    elif damage == "unit" and units:
        at = data.draw(st.integers(0, len(unit_bytes) // 20 - 1)) * 20 + 8
        size = data.draw(st.integers(-(2**31), 2**31 - 1))
        unit_bytes = unit_bytes[:at] + size.to_bytes(4, "big", signed=True) + unit_bytes[at + 4 :]
    spans = [(buf, unit_bytes if units else None, 1000)]
    end = data.draw(st.one_of(st.just(2**63 - 1), st.integers(0, len(batch))))
    low = data.draw(st.one_of(st.none(), st.integers(0, len(batch))))
    high = data.draw(st.one_of(st.none(), st.integers(0, len(batch))))
    tags = data.draw(st.one_of(st.none(), st.lists(text, max_size=3)))
    tags_filter = None
    if tags is not None:
        codes = tuple(codec.tags_hash_code(t) for t in tags)
        tags_filter = (codes, tuple(t.encode() for t in tags))
    kw = {"ts_low": low, "ts_high": high, "end_offset": end, "tags": tags_filter}
    c = _outcome(spans, wanted, False, **kw)
    py = _outcome(spans, wanted, True, **kw)
    assert c == py
    if damage == "none" and tags is None:
        assert c[0] == len([i for i in range(min(end, len(batch))) if _in(i, low, high)])


def _in(ts: int, low: int | None, high: int | None) -> bool:
    return (low is None or ts >= low) and (high is None or ts < high)


@pytest.mark.parametrize("python", [False, True] if columns.SPEEDUPS else [True])
@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda b: b[:4] + b"\0\0\0\0" + b[8:], "bad magic code 0x00000000"),
        (lambda b: b[:-1], "only 137 bytes left"),
        (lambda b: b[:84] + (9999).to_bytes(4, "big") + b[88:], "bad body length 9999"),
        (lambda b: b[:-12] + b"\xff" + b[-11:], "the properties are not UTF-8"),
    ],
)
def test_damaged_record_raises_the_store_error(python: bool, damage: Any, reason: str) -> None:
    """Each kind of damage is a StoreCorruptedError naming the record's offset, not a crash."""
    rec = codec.encode(
        Message(topic="T", body=b"0123456789", tags="TagA", properties={"abc": "defgh"}),
        commitlog_offset=1000,
    )
    reason = reason.replace("137", str(len(rec) - 1))
    with pytest.raises(StoreCorruptedError, match=reason) as info:
        record_columns([(damage(rec), None, 1000)], ALL, python=python)
    assert info.value.offset == 1000
    assert "commit-log offset 1000" in str(info.value)


@pytest.mark.parametrize("python", [False, True] if columns.SPEEDUPS else [True])
@settings(max_examples=50, deadline=None)
@given(batch=messages, units=st.booleans())
def test_compressed_bodies_are_inflated(python: bool, batch: list[Message], units: bool) -> None:
    """A body stored compressed (sys flag bit 0) is inflated into the body column; the other
    columns are those of the same records stored plain."""
    buf, unit_bytes = _records(batch, compressed=True)
    rb, _ = build_batch([(buf, unit_bytes if units else None, 1000)], SCHEMA, python=python)
    assert rb.column("body").to_pylist() == [m.body for m in batch]
    plain, plain_units = _records(batch)
    want, _ = build_batch([(plain, plain_units if units else None, 1000)], SCHEMA, python=True)
    different = {"body", "commitlog_offset", "msg_id"}  # compressed records are shorter
    assert rb.drop_columns(list(different)) == want.drop_columns(list(different))


@pytest.mark.parametrize("python", [False, True] if columns.SPEEDUPS else [True])
def test_a_compressed_body_that_does_not_inflate_is_corruption(python: bool) -> None:
    """A body flagged compressed that is not zlib data raises the store's corruption error
    naming the record; a read without the body column does not inflate it."""
    rec = codec.pack(
        codec.prepare([Message(topic="T", body=b"not zlib at all")], 0, sys_flag=COMPRESSED_FLAG),
        queue_id=0,
        queue_offset=0,
        commitlog_offset=1000,
        store_timestamp=0,
        store_host=codec.host_bytes("127.0.0.1:10911"),
    )
    with pytest.raises(StoreCorruptedError, match="flagged compressed but is not zlib") as info:
        record_columns([(rec, None, 1000)], ALL, python=python)
    assert info.value.offset == 1000
    n, _, cols = record_columns([(rec, None, 1000)], wanted_mask(["topic"]), python=python)
    assert (n, bytes(cols[COLUMNS.index("topic")][1])) == (1, b"T")


@pytest.mark.parametrize("python", [False, True] if columns.SPEEDUPS else [True])
@settings(max_examples=50, deadline=None)
@given(batch=messages, tags=st.lists(text, max_size=3), units=st.booleans())
def test_tags_filter_keeps_the_tagged_records(
    python: bool, batch: list[Message], tags: list[str], units: bool
) -> None:
    """A pushed-down tags filter keeps exactly the records whose tag is one of them."""
    buf, unit_bytes = _records(batch)
    codes = tuple(codec.tags_hash_code(t) for t in tags)
    rb, _ = build_batch(
        [(buf, unit_bytes if units else None, 1000)],
        SCHEMA,
        tags=(codes, tuple(t.encode() for t in tags)),
        python=python,
    )
    want = [i for i, m in enumerate(batch) if (m.tags or None) in tags]  # "" is stored as none
    assert rb.column("queue_offset").to_pylist() == want


@pytest.mark.parametrize("python", [False, True] if columns.SPEEDUPS else [True])
def test_only_wanted_columns_are_built(python: bool) -> None:
    """Unselected columns are never built (None); body alone copies no property bytes."""
    buf, units = _records([Message(topic="T", body=b"xyz", tags="A", keys="k")])
    n, done, cols = record_columns([(buf, units, 1000)], wanted_mask(["body"]), python=python)
    assert (n, done) == (1, False)
    assert [i for i, c in enumerate(cols) if c is not None] == [COLUMNS.index("body")]
    assert cols[COLUMNS.index("body")][1] == b"xyz"


@pytest.mark.skipif("mmap" not in _stores(), reason="the mmap store is not under test")
def test_damaged_segment_fails_the_read(tmp_path: Path) -> None:
    """A record damaged on disk makes the read raise the store's corruption error (the mmap
    store: its records sit at known places in a file)."""
    with Kernel().open_store("mmap", tmp_path) as store:
        store.put("T", 0, [Message(topic="T", body=b"x" * 10) for _ in range(3)])
    segment = next((tmp_path / "commitlog").iterdir())
    with segment.open("r+b") as f:
        f.seek(4)  # the first record's magic code
        f.write(b"\0\0\0\0")
    with Kernel().open_store("mmap", tmp_path, read_only=True) as store:
        got = store.get_spans("T", 0, 0, max_count=10)
        with pytest.raises(StoreCorruptedError, match="bad magic code"):
            build_batch(got.spans, SCHEMA)
