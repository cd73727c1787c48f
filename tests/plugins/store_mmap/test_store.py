"""MmapStore specifics beyond the contract suite: options, sizes, flush modes, full disk,
transient pool, read-only openers, locking."""

from __future__ import annotations

import errno
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mqcore import Kernel, codec
from mqcore.errors import (
    DiskFullError,
    FlushTimeoutError,
    InvalidArgumentError,
    StoreError,
    StoreLockedError,
)
from mqcore.message import Message
from mqcore.plugins.store_mmap import MmapStore, fastput, indexfile, mappedfile
from mqcore.plugins.store_mmap.consumequeue import ConsumeQueue
from mqcore.plugins.store_mmap.dispatch import Dispatcher
from mqcore.plugins.store_mmap.options import MAX_BODY_SIZE, MmapStoreOptions
from mqcore.store import FlushMode, GetStatus
from mqcore.storecaps import PreparedPutRequest, PutRequest
from mqcore.uniqkey import uniq_ids

SMALL = {
    "segment_size": 4096,
    "consume_queue_units": 16,
    "index_hash_slots": 64,
    "index_max_entries": 256,
}


@pytest.fixture
def opened(tmp_path: Path):
    """``opened(**options)`` opens an mmap store in ``tmp_path / "s"``; all are closed after."""
    stores: list[Any] = []
    kernel = Kernel(autoload=False)

    def open_(path: Path | None = None, **options: Any) -> MmapStore:
        store = kernel.open_store("mmap", path or tmp_path / "s", **{**SMALL, **options})
        stores.append(store)
        return store

    yield open_
    for store in reversed(stores):
        store.close()


def _msgs(n: int, topic: str = "T", size: int = 50, **kw: Any) -> list[Message]:
    return [Message(topic=topic, body=b"%d-" % i + b"x" * size, **kw) for i in range(n)]


def _put_many(store: Any, requests: list[PutRequest], how: str) -> list[Any]:
    """``requests`` through put_many, or through put_many_prepared as the records prepare()
    makes of them (``how``: the method's name): the two share their write."""
    if how == "put_many":
        return store.put_many(requests)  # type: ignore[no-any-return]
    return store.put_many_prepared(  # type: ignore[no-any-return]
        [
            PreparedPutRequest(
                r.topic, r.queue_id, codec.prepare(r.messages, 1, topic=r.topic),
                uniq_ids(r.messages), r.born_host,
            )
            for r in requests
        ]
    )  # fmt: skip


_HOW = pytest.mark.parametrize("how", ["put_many", "put_many_prepared"])


# --- options ---------------------------------------------------------------------------


def test_unknown_option_lists_the_valid_ones(opened):
    """A typo in an option name is an error naming every valid option."""
    with pytest.raises(InvalidArgumentError) as info:
        opened(segmnet_size=1024)
    message = str(info.value)
    assert "segmnet_size" in message
    for name in MmapStoreOptions.names():
        assert name in message


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"flush_mode": "sometimes"}, "flush mode"),
        ({"segment_size": 10}, "segment_size"),
        ({"disk_max_used_space_ratio": 0}, "disk_max_used_space_ratio"),
        ({"flush_interval_ms": -1}, "flush_interval_ms"),
        ({"transient_store_pool": True, "flush_mode": "sync"}, "ASYNC_FLUSH"),
    ],
)
def test_invalid_option_values(opened, options, fragment):
    """Bad values are InvalidArgumentError naming the option."""
    with pytest.raises(InvalidArgumentError, match=fragment):
        opened(**options)


@pytest.mark.parametrize("mode", ["SYNC_FLUSH", "sync", FlushMode.SYNC_FLUSH])
def test_flush_mode_spellings(opened, mode):
    """A FlushMode, its name or the short form are accepted."""
    assert opened(flush_mode=mode).flush_mode is FlushMode.SYNC_FLUSH


# --- put ---------------------------------------------------------------------------------


def test_put_results_match_the_stored_records(opened):
    """Message ids, offsets, timestamps and sizes agree with what get returns."""
    store = opened(store_host="10.1.2.3:9876")
    results = store.put("T", 1, _msgs(5))
    got = store.get("T", 1, 0).messages
    for result, msg in zip(results, got, strict=True):
        assert result.msg_id == msg.msg_id
        assert codec.decode_message_id(result.msg_id) == ("10.1.2.3:9876", msg.commitlog_offset)
        assert result.queue_offset == msg.queue_offset
        assert result.commitlog_offset == msg.commitlog_offset
        assert result.store_timestamp == msg.store_timestamp
        assert result.size == msg.store_size
    assert [r.queue_offset for r in results] == list(range(5))


def test_too_large_body_and_record_are_refused(opened):
    """Bodies over 4 MiB and records larger than a segment are InvalidArgumentError."""
    store = opened()
    with pytest.raises(InvalidArgumentError, match="segment"):
        store.put("T", 0, [Message(topic="T", body=b"x" * 5000)])
    big = opened(tmp_path_store(store), segment_size=16 * 1024 * 1024)
    with pytest.raises(InvalidArgumentError, match="4 MiB"):
        big.put("T", 0, [Message(topic="T", body=bytes(MAX_BODY_SIZE + 1))])
    # Nothing of a refused batch is stored, and the queue still works.
    assert big.max_offset("T", 0) == 0
    big.put("T", 0, [Message(topic="T", body=bytes(MAX_BODY_SIZE))])
    assert len(big.get("T", 0, 0).messages[0].body) == MAX_BODY_SIZE


def tmp_path_store(store: MmapStore) -> Path:
    """A sibling directory of ``store`` for a second store in the same test."""
    return store.path.with_name(store.path.name + "-2")


@pytest.mark.parametrize("topic", ["a/b", "..", "", "x" * 128])
def test_unstorable_topic_names(opened, topic):
    """Topics that cannot name a directory are refused before anything is written."""
    store = opened()
    with pytest.raises(InvalidArgumentError):
        store.put(topic, 0, _msgs(1, topic="T"))
    assert store.topics() == []


def test_put_honours_born_host_timestamp_and_reconsume_times(opened):
    """Keyword arguments of put end up in the records."""
    store = opened()
    store.put("T", 0, _msgs(1), born_timestamp=1234, born_host="10.0.0.9:555", reconsume_times=3)
    msg = store.get("T", 0, 0).messages[0]
    assert (msg.born_timestamp, msg.born_host, msg.reconsume_times) == (1234, "10.0.0.9:555", 3)
    assert msg.store_host == "127.0.0.1:10911"


def test_empty_put_and_unknown_queue(opened):
    """An empty batch stores nothing; unknown queues answer NO_MESSAGE_IN_QUEUE."""
    store = opened()
    assert store.put("T", 0, []) == []
    result = store.get("nope", 3, 10)
    assert result.status is GetStatus.NO_MESSAGE_IN_QUEUE and result.next_offset == 0
    assert store.get_raw("nope", 3, 0).status is GetStatus.NO_MESSAGE_IN_QUEUE
    assert store.offset_for_timestamp("nope", 0, 0) == 0
    assert store.lookup("nope", "k") == []
    assert store.message_at(10**9) is None and store.message_at(-1) is None


def test_overflow_badly_next_offset_rules(opened):
    """Beyond max: next is min when min == 0, else max (RocketMQ)."""
    store = opened()
    store.put("T", 0, _msgs(3))
    far = store.get("T", 0, 10)
    assert far.status is GetStatus.OFFSET_OVERFLOW_BADLY and far.next_offset == 0
    with pytest.raises(InvalidArgumentError):
        store.get("T", 0, 0, max_count=0)


def test_get_messages_are_copies_raw_records_are_views(opened):
    """get copies records (they outlive the store); get_raw returns views of the maps."""
    store = opened()
    store.put("T", 0, _msgs(4))
    messages = store.get("T", 0, 0).messages
    raw = store.get_raw("T", 0, 0)
    assert all(isinstance(r, memoryview) for r in raw.records)
    assert [bytes(r) for r in raw.records] == [bytes(m.record) for m in messages]
    store.close()
    assert messages[2].body.startswith(b"2-")


def test_property_filter_reads_properties_without_the_body(opened):
    """A property filter gets every stored property, TAGS included."""

    class ColourFilter:
        expression_type = "SQL92"
        expression = "colour = 'red'"
        uses_properties = True
        seen: list[dict[str, str]] = []

        def matches(self, message: Any) -> bool:
            return message.properties.get("colour") == "red"

        def matches_tags_code(self, tags_code: int) -> bool:
            return True

        def matches_properties(self, properties: Any) -> bool:
            self.seen.append(dict(properties))
            return properties.get("colour") == "red"

    store = opened()
    colours = ["red", "blue", "red"]
    store.put(
        "T", 0, [Message(topic="T", body=b"b", tags="A", properties={"colour": c}) for c in colours]
    )
    flt = ColourFilter()
    result = store.get("T", 0, 0, message_filter=flt)
    assert [m.queue_offset for m in result.messages] == [0, 2]
    assert result.next_offset == 3
    assert flt.seen[0] == {"colour": "red", "TAGS": "A"}


# --- flush modes --------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_sync_flush_group_commit_serves_many_puts_per_fsync(opened):
    """8 threads putting one message at a time: far fewer fsyncs than puts."""
    store = opened(flush_mode="sync", segment_size=1 << 20)
    puts_per_thread = 40
    errors: list[BaseException] = []

    def producer(qid: int) -> None:
        try:
            for i in range(puts_per_thread):
                store.put("G", qid, [Message(topic="G", body=b"%d" % i)])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=producer, args=(q,)) for q in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=50)
    assert not errors
    assert sum(store.max_offset("G", q) for q in range(8)) == 8 * puts_per_thread
    fsyncs = store._flusher.group_commits
    assert 0 < fsyncs < 8 * puts_per_thread
    # Everything acknowledged is flushed.
    assert store._parts.commitlog.flushed_offset >= store._parts.commitlog.max_offset


@pytest.mark.timeout(60)
def test_group_commit_delay_gathers_the_concurrent_writers(opened):
    """With a commit delay, one fsync serves nearly every one of 8 concurrent writers."""
    store = opened(flush_mode="sync", segment_size=1 << 20, group_commit_delay_ms=200)
    puts_per_thread = 30
    gate = threading.Barrier(8, timeout=20)

    def producer(qid: int) -> None:
        gate.wait()
        for i in range(puts_per_thread):
            store.put("G", qid, [Message(topic="G", body=b"%d" % i)])

    threads = [threading.Thread(target=producer, args=(q,)) for q in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=50)
    assert sum(store.max_offset("G", q) for q in range(8)) == 8 * puts_per_thread
    # Without the delay this machine serves about 4 puts per fsync; held for the siblings,
    # every round but the first few and the stragglers' last ones serves all 8.
    assert 8 * puts_per_thread / store._flusher.group_commits >= 5


@pytest.mark.timeout(30)
def test_sync_flush_timeout_raises_but_keeps_the_message(opened, monkeypatch):
    """A flush slower than sync_flush_timeout_ms: FlushTimeoutError; the data is stored."""
    store = opened(flush_mode="sync", sync_flush_timeout_ms=50)
    real = store._parts.commitlog.flush
    release = threading.Event()

    def slow_flush() -> int:
        release.wait(5)
        return real()

    monkeypatch.setattr(store._parts.commitlog, "flush", slow_flush)
    with pytest.raises(FlushTimeoutError, match="sync_flush_timeout_ms"):
        store.put("T", 0, _msgs(1))
    release.set()
    assert store.max_offset("T", 0) == 1


@pytest.mark.timeout(30)
def test_async_flush_thread_flushes_in_the_background(opened):
    """ASYNC_FLUSH: the flush thread catches up within a few intervals."""
    store = opened(flush_interval_ms=20)
    store.put("T", 0, _msgs(10))
    deadline = time.monotonic() + 10
    while store._parts.commitlog.flushed_offset < store._parts.commitlog.max_offset:
        assert time.monotonic() < deadline, "background flush never happened"
        time.sleep(0.01)
    assert store._checkpoint is not None
    while store._checkpoint.physic_msg_timestamp == 0:
        assert time.monotonic() < deadline, "checkpoint never saved"
        time.sleep(0.01)


# --- full disk ----------------------------------------------------------------------------


def test_disk_full_loses_nothing_and_stays_readable(opened, monkeypatch):
    """ENOSPC when a segment must grow: DiskFullError, acknowledged data intact."""
    store = opened()
    acked = store.put("T", 0, _msgs(10))
    monkeypatch.setattr(
        mappedfile, "_grow", lambda *args: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full"))
    )
    with pytest.raises(DiskFullError) as info:
        for _ in range(100):
            store.put("T", 0, _msgs(10))
    assert str(store.path) in str(info.value)
    written = store.max_offset("T", 0)
    assert written >= 10 and written % 10 == 0  # whole batches or nothing
    # Nothing of the failed batch stays in the commit log either.
    last = store.get("T", 0, written - 1).messages[0]
    end = last.commitlog_offset + last.store_size
    assert store._parts.commitlog.max_offset in (end, (end // 4096 + 1) * 4096)
    result = store.get("T", 0, 0, max_count=1000)
    assert [m.queue_offset for m in result.messages] == list(range(written))
    assert result.messages[0].msg_id == acked[0].msg_id
    monkeypatch.undo()  # space freed: writing resumes
    store.put("T", 0, _msgs(1))
    assert store.max_offset("T", 0) == written + 1


@_HOW
def test_put_many_on_a_full_disk_stores_the_requests_before_it(opened, monkeypatch, how):
    """ENOSPC while a put_many rolls segments: whole requests up to the one that met it are
    stored, that one and every later one hold the same DiskFullError and left nothing."""
    store = opened()
    store.put("T", 0, _msgs(2))
    monkeypatch.setattr(
        mappedfile, "_grow", lambda *args: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full"))
    )
    requests = [PutRequest("T", i % 3, _msgs(3, size=400)) for i in range(30)]
    slots = _put_many(store, requests, how)
    stored = [s for s in slots if isinstance(s, list)]
    assert stored and len(stored) < len(slots)
    assert all(isinstance(s, list) for s in slots[: len(stored)])  # whole requests, in order
    first = slots[len(stored)]
    assert isinstance(first, DiskFullError) and str(store.path) in str(first)
    assert all(s is first for s in slots[len(stored) :])
    end = max(r.commitlog_offset + r.size for s in stored for r in s)
    assert store._parts.commitlog.max_offset in (end, (end // 4096 + 1) * 4096)
    monkeypatch.undo()
    for qid in range(3):
        mine = [s for s, rq in zip(slots, requests, strict=True) if rq.queue_id == qid]
        want = [r.queue_offset for s in mine if isinstance(s, list) for r in s]
        got = store.get("T", qid, 0, max_count=1000).messages
        assert [m.queue_offset for m in got] == ([0, 1] if qid == 0 else []) + want
    store.put("T", 1, _msgs(1))


@_HOW
def test_put_many_takes_every_request_back_when_the_index_is_full(opened, monkeypatch, how):
    """The index entries of a put_many are written in one call after the records: when that
    call meets a full disk, every request holds the error and nothing of them stays."""
    store = opened()
    store.put("T", 0, _msgs(2, keys="old"))
    index = store._parts.index

    def full(*args: Any) -> int:
        raise DiskFullError(errno.ENOSPC, "disk full while growing the index")

    monkeypatch.setattr(index, "put_keys", full)
    requests = [PutRequest("T", i % 2, _msgs(3, keys=f"k{i}")) for i in range(4)]
    slots = _put_many(store, requests, how)
    assert all(isinstance(s, DiskFullError) for s in slots) and len(set(map(id, slots))) == 1
    assert (store.max_offset("T", 0), store.max_offset("T", 1)) == (2, 0)
    monkeypatch.undo()
    slots = _put_many(store, requests, how)
    assert [r.queue_offset for r in slots[2]] == [5, 6, 7]
    assert [m.queue_offset for m in store.lookup("T", "k2")] == [5, 6, 7]
    assert len(store.lookup("T", "old")) == 2


@_HOW
def test_put_many_waits_for_one_flush_in_sync_flush(opened, monkeypatch, how):
    """SYNC_FLUSH: a put_many of 8 requests to 8 queues waits once, for the end of the
    last, and returns with all of it flushed."""
    store = opened(flush_mode="sync", segment_size=1 << 20)
    flusher = store._group_commit
    waits: list[int] = []
    real = flusher.wait_flushed

    def counted(offset: int) -> None:
        waits.append(offset)
        real(offset)

    monkeypatch.setattr(flusher, "wait_flushed", counted)
    slots = _put_many(store, [PutRequest("S", q, _msgs(2)) for q in range(8)], how)
    assert waits == [store._parts.commitlog.max_offset]
    assert store.log_positions().flushed >= waits[0]
    assert [r.queue_offset for s in slots for r in s] == [0, 1] * 8


@_HOW
@pytest.mark.parametrize("path", ["python", "c"])
def test_put_many_failing_on_an_io_error_leaves_nothing(opened, monkeypatch, path, how):
    """An error that is not about one request (here an I/O error dispatching the third
    request: its units on the Python path, its index entries after the C write) fails the
    whole put_many: none of its requests stays stored."""
    if path == "c" and not fastput.SPEEDUPS:
        pytest.skip("the C write of a put is not built or turned off")
    store = opened()
    store.put("T", 0, _msgs(1))
    calls = []
    if path == "python":
        monkeypatch.setattr(fastput, "_c", None)
    cls, name = (ConsumeQueue, "append_unit") if path == "python" else (Dispatcher, "put_written")
    real = getattr(cls, name)

    def failing(self: Any, *args: Any) -> Any:
        calls.append(1)
        if len(calls) == 3:
            raise OSError(errno.EIO, "input/output error")
        return real(self, *args)

    monkeypatch.setattr(cls, name, failing)
    with pytest.raises(OSError, match="input/output"):
        _put_many(store, [PutRequest("T", q % 2, _msgs(1, keys=f"io{q}")) for q in range(4)], how)
    monkeypatch.undo()
    assert (store.max_offset("T", 0), store.max_offset("T", 1)) == (1, 0)
    assert store.lookup("T", "io0") == []
    (again,) = store.put_many([PutRequest("T", 1, _msgs(1))])
    assert again[0].queue_offset == 0
    assert store.get("T", 1, 0).messages[0].commitlog_offset == again[0].commitlog_offset


@_HOW
def test_put_many_refuses_a_record_larger_than_a_segment_in_its_slot(opened, how):
    store = opened()
    slots = _put_many(
        store,
        [
            PutRequest("T", 0, _msgs(1)),
            PutRequest("T", 0, _msgs(1, size=5000)),
            PutRequest("T", 0, _msgs(2)),
        ],
        how,
    )
    assert isinstance(slots[1], InvalidArgumentError) and "segment" in str(slots[1])
    assert [r.queue_offset for r in slots[0]] + [r.queue_offset for r in slots[2]] == [0, 1, 2]
    assert store.max_offset("T", 0) == 3


# --- transient store pool -----------------------------------------------------------------


@pytest.mark.timeout(30)
def test_transient_pool_round_trip_and_reopen(opened, tmp_path):
    """With the pool, puts are readable at once, committed in the background, durable on close."""
    store = opened(transient_store_pool=True)
    store.put("T", 0, _msgs(60))  # rolls several segments
    got = store.get("T", 0, 0, max_count=100).messages
    assert [m.queue_offset for m in got] == list(range(60))
    raw = store.get_raw("T", 0, 59).records
    assert bytes(raw[0]) == bytes(got[59].record)
    store.close()
    again = opened()
    assert [m.body for m in again.get("T", 0, 0, max_count=100).messages] == [m.body for m in got]


# --- read-only and locking ----------------------------------------------------------------


def test_read_only_opener_refreshes_and_never_writes(opened, tmp_path):
    """A reader next to a live writer sees the prefix at open, more after refresh()."""
    writer = opened()
    writer.put("T", 0, _msgs(5, keys="k1"))
    reader = opened(read_only=True)
    assert reader.max_offset("T", 0) == 5
    writer.put("T", 0, _msgs(30))
    writer.put("U", 2, _msgs(1))
    assert reader.max_offset("T", 0) == 5
    reader.refresh()
    assert reader.max_offset("T", 0) == 35 and reader.topics() == ["T", "U"]
    assert len(reader.get("T", 0, 0, max_count=100).messages) == 35
    assert len(reader.lookup("T", "k1")) == 5
    with pytest.raises(StoreError, match="read-only"):
        reader.put("T", 0, _msgs(1))
    reader.flush()  # a no-op, not an error


def test_read_only_needs_an_existing_store(opened, tmp_path):
    """Opening a missing directory read-only is an error, not an empty store."""
    with pytest.raises(StoreError, match="no store"):
        opened(tmp_path / "missing", read_only=True)
    assert not (tmp_path / "missing").exists()


def test_second_writer_is_locked_out(opened):
    """Two writers on one directory: the second gets StoreLockedError naming the pid."""
    first = opened()
    with pytest.raises(StoreLockedError, match="locked by process"):
        opened()
    first.close()
    opened().put("T", 0, _msgs(1))


def test_clean_close_leaves_no_abort_marker(opened, tmp_path):
    """The abort marker exists while open and is gone after close."""
    store = opened()
    assert (tmp_path / "s" / "abort").exists()
    store.close()
    assert not (tmp_path / "s" / "abort").exists()
    store.close()  # twice is fine


@pytest.mark.timeout(60)
def test_transient_pool_under_concurrent_reads(opened, tmp_path):
    """Commit thread, writer and a reader together: every record read is complete."""
    store = opened(transient_store_pool=True, segment_size=16 * 1024)
    stop = threading.Event()
    errors: list[BaseException] = []

    def reader() -> None:
        offset = 0
        try:
            while not stop.is_set() or offset < store.max_offset("T", 0):
                for msg in store.get("T", 0, offset, max_count=64).messages:
                    codec.check_record(bytes(msg.record), 0)
                    assert msg.queue_offset == offset
                    offset += 1
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for i in range(200):
            store.put("T", 0, _msgs(5, size=40 + i % 50))
    finally:
        stop.set()
        thread.join(timeout=30)
    assert not errors, errors
    bodies = [m.body for m in store.get("T", 0, 0, max_count=2000).messages]
    store.close()
    again = opened(segment_size=16 * 1024)
    assert [m.body for m in again.get("T", 0, 0, max_count=2000).messages] == bodies
    assert len(bodies) == 1000


@pytest.mark.parametrize("transient", [False, True], ids=["direct", "transient"])
def test_failed_dispatch_is_rolled_back(opened, monkeypatch, transient):
    """A batch whose consume-queue append fails leaves nothing behind; earlier puts survive."""
    store = opened(transient_store_pool=transient)
    acked = store.put("T", 0, _msgs(7))
    cq = store._parts.queues[("T", 0)]
    real = cq.append_units

    def full(*args: Any, **kwargs: Any) -> int:
        raise DiskFullError(errno.ENOSPC, "disk full while growing a consume queue")

    monkeypatch.setattr(cq, "append_units", full)
    with pytest.raises(DiskFullError):
        store.put("T", 0, _msgs(30))  # crosses segments too
    monkeypatch.setattr(cq, "append_units", real)
    assert store._parts.commitlog.max_offset == acked[-1].commitlog_offset + acked[-1].size
    later = store.put("T", 0, _msgs(3))
    assert later[0].queue_offset == 7
    assert later[0].commitlog_offset == acked[-1].commitlog_offset + acked[-1].size
    expected = [r.msg_id for r in acked + later]
    store.close()
    again = opened()
    assert [m.msg_id for m in again.get("T", 0, 0, max_count=100).messages] == expected


def test_full_disk_while_the_key_index_grows(opened, monkeypatch):
    """No blocks for new index entries: DiskFullError, the batch rolled back, keys intact."""
    monkeypatch.setattr(indexfile, "_RESERVE_CHUNK", 10 * indexfile.ENTRY_SIZE)
    store = opened(index_hash_slots=16, index_max_entries=1000)
    acked = store.put("T", 0, [Message(topic="T", body=b"%d" % i, keys=f"k{i}") for i in range(5)])
    with monkeypatch.context() as m:
        m.setattr(
            mappedfile,
            "_grow",
            lambda *args: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full")),
        )
        with pytest.raises(DiskFullError, match="disk full"):
            store.put("T", 0, [Message(topic="T", body=b"x", keys=f"n{i}") for i in range(20)])
    assert store.max_offset("T", 0) == 5
    assert [m.body for m in store.lookup("T", "k3")] == [b"3"]
    assert store.lookup("T", "n0") == []
    later = store.put("T", 0, [Message(topic="T", body=b"y", keys="n0")])
    assert later[0].queue_offset == 5
    assert later[0].commitlog_offset == acked[-1].commitlog_offset + acked[-1].size
    assert [m.body for m in store.lookup("T", "n0")] == [b"y"]


def test_a_new_store_creates_its_first_segment_when_it_opens(opened, tmp_path):
    """The first segment exists before the first put; reopening an empty store keeps it empty."""
    store = opened()
    segments = sorted((tmp_path / "s" / "commitlog").iterdir())
    assert [p.name for p in segments] == ["0" * 20]
    assert store._parts.commitlog.max_offset == 0
    store.close()
    again = opened()
    assert again._parts.commitlog.max_offset == 0
    assert again.topics() == []
    result = again.put("T", 0, _msgs(2))
    assert result[0].commitlog_offset == 0
    assert len(list((tmp_path / "s" / "commitlog").iterdir())) == 1
