"""The optional store capabilities (mqcore.storecaps) on every registered store that declares
them; a bundled store must keep declaring the ones it has."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from mqcore import Message, codec, errors
from mqcore.batch import UNIT
from mqcore.message import PROPERTY_UNIQ_KEY, system_message
from mqcore.spans import RawSpans
from mqcore.store import SCHEDULE_TOPIC, GetStatus
from mqcore.storecaps import (
    CommitLogBounds,
    CommitLogReplica,
    CommitLogSource,
    ExpiringStore,
    LogPositionReporter,
    MultiQueuePut,
    PreparedMultiPut,
    PreparedWriter,
    SpanReader,
    UnitReader,
)
from mqcore.uniqkey import uniq_ids

ALL = {
    PreparedWriter,
    MultiQueuePut,
    PreparedMultiPut,
    UnitReader,
    SpanReader,
    ExpiringStore,
    LogPositionReporter,
    CommitLogBounds,
    CommitLogSource,
    CommitLogReplica,
}
#: What each bundled store declares (a store registered by a plugin is checked on what it has).
BUNDLED = {
    "mmap": ALL,
    "lmdb": {
        PreparedWriter,
        MultiQueuePut,
        PreparedMultiPut,
        UnitReader,
        SpanReader,
        ExpiringStore,
        LogPositionReporter,
    },
}
BORN_TS = 1_700_000_000_123
_SIZE = struct.Struct(">i")


def _need(store: Any, capability: type) -> None:
    if not isinstance(store, capability):
        pytest.skip(f"{type(store).__name__} is no {capability.__name__}")


def _messages(topic: str) -> list[Message]:
    return [
        Message(topic=topic, body=b"x" * (i * 37), tags="AB"[i % 2], keys=f"key{i} all")
        for i in range(12)
    ]


def test_bundled_stores_declare_their_capabilities(harness: Any) -> None:
    store = harness.open()
    declared = {cap for cap in ALL if isinstance(store, cap)}
    expected = BUNDLED.get(harness.name)
    if expected is None:
        pytest.skip(f"no declared capabilities recorded for store {harness.name!r}")
    assert {c.__name__ for c in declared} == {c.__name__ for c in expected}


def test_put_prepared_stores_what_put_stores(harness: Any, reopen_mode: str) -> None:
    """PreparedWriter: records prepared ahead read back as put's do, indexed by key and by
    unique id; the schedule topic is refused; nothing in, nothing stored."""
    store = harness.open()
    _need(store, PreparedWriter)
    sent = _messages("P")
    sent[3] = system_message(topic="P", body=b"uniq", properties={PROPERTY_UNIQ_KEY: "U-123"})
    store.put("P", 0, sent, born_timestamp=BORN_TS)
    prepared = codec.prepare(sent, BORN_TS, topic="P")
    results = store.put_prepared("P", 1, prepared, uniq_ids(sent), born_host="10.0.0.9:4000")
    assert [r.queue_offset for r in results] == list(range(len(sent)))
    assert store.put_prepared("P", 1, []) == []
    store.put_prepared("P", 2, prepared[2:4])  # no unique ids given
    with pytest.raises(errors.InvalidArgumentError, match=SCHEDULE_TOPIC):
        store.put_prepared(SCHEDULE_TOPIC, 0, prepared)
    store = harness.readback(store)
    by_put = harness.read_queue(store, "P", 0)
    by_prepared = harness.read_queue(store, "P", 1)
    fields = ("body", "tags", "keys", "properties", "flag", "born_timestamp", "store_size")
    for a, b, r in zip(by_put, by_prepared, results, strict=True):
        assert [getattr(a, f) for f in fields] == [getattr(b, f) for f in fields]
        assert (b.queue_id, b.commitlog_offset, b.born_host) == (
            1,
            r.commitlog_offset,
            "10.0.0.9:4000",
        )
    assert {m.queue_id for m in store.lookup("P", "key5")} == {0, 1}
    assert {m.queue_id for m in store.lookup("P", "all")} == {0, 1, 2}
    # Unique ids given are indexed as put indexes them. (A record that holds one may be found
    # by it without: a rebuilt index takes the keys from the records.)
    assert {0, 1} <= {m.queue_id for m in store.lookup("P", "U-123")}


def _span_records(got: RawSpans) -> list[bytes]:
    out: list[bytes] = []
    for buffer, units, base in got.spans:
        view = memoryview(buffer)
        if units is None:  # records back to back
            pos = 0
            while pos < len(view):
                size = _SIZE.unpack_from(view, pos)[0]
                out.append(bytes(view[pos : pos + size]))
                pos += size
        else:
            for phys, size, _ in UNIT.iter_unpack(units):
                out.append(bytes(view[phys - base : phys - base + size]))
    return out


class _TagB:
    expression_type = "TAG"
    expression = "B"
    uses_properties = False

    def matches(self, message: Any) -> bool:
        return bool(message.tags == "B")

    def matches_tags_code(self, tags_code: int) -> bool:
        return tags_code == codec.tags_hash_code("B")

    def matches_properties(self, properties: Any) -> bool:
        return True


def test_get_spans_holds_the_records_get_raw_returns(harness: Any, reopen_mode: str) -> None:
    """SpanReader: the spans hold get_raw's records byte for byte, with its status and
    offsets, filtered or not, and outside the queue."""
    store = harness.open()
    _need(store, SpanReader)
    for _ in range(3):
        store.put("S", 0, _messages("S"))
    store = harness.readback(store)
    for offset, count, message_filter in ((0, 100, None), (5, 7, None), (3, 100, _TagB())):
        raw = store.get_raw("S", 0, offset, count, message_filter=message_filter)
        spans = store.get_spans("S", 0, offset, count, message_filter=message_filter)
        assert isinstance(spans, RawSpans)
        assert _span_records(spans) == [bytes(r) for r in raw.records]
        assert spans.count == len(raw.records)
        assert (spans.status, spans.next_offset, spans.min_offset, spans.max_offset) == (
            raw.status, raw.next_offset, raw.min_offset, raw.max_offset,
        )  # fmt: skip
    for offset in (36, 40):
        raw = store.get_raw("S", 0, offset)
        spans = store.get_spans("S", 0, offset)
        assert (spans.status, spans.next_offset, spans.spans) == (raw.status, raw.next_offset, [])
    assert store.get_spans("none", 0, 0).status is GetStatus.NO_MESSAGE_IN_QUEUE


def test_commit_log_bounds_follow_the_puts(harness: Any) -> None:
    """CommitLogBounds: the commit log grows by every record put; nothing is deleted yet."""
    store = harness.open()
    _need(store, CommitLogBounds)
    assert store.commitlog_min_offset() == store.commitlog_max_offset() == 0
    results = store.put("B", 0, _messages("B"))
    last = results[-1]
    assert store.commitlog_min_offset() == 0
    assert store.commitlog_max_offset() == last.commitlog_offset + last.size


def test_a_replica_copies_the_commit_log_byte_for_byte(harness: Any, tmp_path: Any) -> None:
    """CommitLogSource to CommitLogReplica: bytes read from one store appended to another
    give the same records at the same offsets, dispatched into the same queues."""
    source = harness.open()
    _need(source, CommitLogSource)
    for i in range(6):
        source.put("R", i % 3, _messages("R"))
    replica_harness = type(harness)(harness.name, harness.options, tmp_path / "replica", False)
    try:
        replica = replica_harness.open()
        _need(replica, CommitLogReplica)
        touched: set[tuple[str, int]] = set()
        offset = replica.commitlog_max_offset()
        while data := source.read_commitlog(offset, 1000):
            with pytest.raises(errors.InvalidArgumentError):
                replica.append_commitlog(offset + 1, data)
            touched |= replica.append_commitlog(offset, data)
            offset += len(data)
        assert source.read_commitlog(offset, 1000) == b""  # the end: nothing yet
        assert source.read_commitlog(offset + 1, 1000) is None  # past the end
        assert touched == {("R", 0), ("R", 1), ("R", 2)}
        assert replica.commitlog_max_offset() == source.commitlog_max_offset()
        for qid in range(3):
            mine = [bytes(m.record) for m in harness.read_queue(source, "R", qid)]
            theirs = [bytes(m.record) for m in replica_harness.read_queue(replica, "R", qid)]
            assert theirs == mine
        assert len(replica.lookup("R", "key7", 100)) == 6
    finally:
        replica_harness.close_all()


def test_log_positions_show_the_flush_lag_until_a_flush(harness: Any) -> None:
    """LogPositionReporter, ASYNC_FLUSH with a flush far away: a put's bytes are written and
    dispatched at once, unflushed until the store is flushed."""
    store = harness.open(flush_mode="ASYNC_FLUSH", flush_interval_ms=3_600_000)
    _need(store, LogPositionReporter)
    start = store.log_positions()
    assert start.written == start.flushed == start.dispatched
    store.put("L", 0, _messages("L"))
    put = store.log_positions()
    assert put.written > start.written
    assert put.dispatched == put.written
    assert put.written - put.flushed == put.written - start.written  # none of it flushed
    store.flush()
    flushed = store.log_positions()
    assert flushed.written == flushed.flushed == flushed.dispatched == put.written


def test_log_positions_in_sync_flush_have_no_flush_lag(harness: Any) -> None:
    """LogPositionReporter, SYNC_FLUSH: a put returns with its bytes on disk."""
    store = harness.open(flush_mode="SYNC_FLUSH")
    _need(store, LogPositionReporter)
    before = store.log_positions()
    store.put("L", 1, _messages("L"))
    after = store.log_positions()
    assert after.written > before.written
    assert after.written == after.flushed == after.dispatched


def test_log_positions_show_the_dispatch_lag_of_a_torn_replicated_record(
    harness: Any, tmp_path: Any
) -> None:
    """LogPositionReporter on a CommitLogReplica: bytes of a record still on their way are
    written but not dispatched; its last byte dispatches it."""
    source = harness.open()
    _need(source, CommitLogSource)
    source.put("R", 0, _messages("R")[:3])
    data = b""
    while chunk := source.read_commitlog(len(data), 1000):
        data += chunk
    replica_harness = type(harness)(harness.name, harness.options, tmp_path / "replica", False)
    try:
        replica = replica_harness.open()
        _need(replica, LogPositionReporter)
        replica.append_commitlog(0, data[:-10])
        torn = replica.log_positions()
        assert torn.written == len(data) - 10
        # The last record's bytes so far: written, not dispatched.
        assert torn.written - torn.dispatched == _last_record_size(data) - 10
        replica.append_commitlog(len(data) - 10, data[-10:])
        whole = replica.log_positions()
        assert whole.written == whole.dispatched == len(data)
    finally:
        replica_harness.close_all()


def _last_record_size(data: bytes) -> int:
    """Size of the last of the records laid end to end in ``data``."""
    at = size = 0
    while at < len(data):
        size = _SIZE.unpack_from(data, at)[0]
        at += size
    return size
