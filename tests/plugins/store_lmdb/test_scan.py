"""Reading the batch layout of the lmdb store: one commit-log and one consume-queue item per put."""

from __future__ import annotations

import random
from pathlib import Path

import lmdb
import pytest

from mqcore import Kernel, Message, errors
from mqcore.message import MessageExt
from mqcore.plugins.store_lmdb import layout
from mqcore.plugins.store_lmdb.store import LmdbStore
from mqcore.store import GetStatus


def _open(path: Path, **options: object) -> LmdbStore:
    return Kernel().open_store("lmdb", path, **options)


def _fill(store: LmdbStore, sizes: list[int], topic: str = "B", queue_id: int = 0) -> list:
    """Put batches of the given sizes; bodies are their queue offsets. Returns all results."""
    results = []
    n = 0
    for size in sizes:
        batch = [Message(topic=topic, body=b"m%04d" % (n + i)) for i in range(size)]
        results += store.put(topic, queue_id, batch)
        n += size
    return results


def _bodies(first: int, count: int) -> list[bytes]:
    return [b"m%04d" % i for i in range(first, first + count)]


def test_one_item_per_batch_in_log_and_consume_queue(tmp_path):
    """Three puts are three commit-log items and three consume-queue items (last offset keys)."""
    with _open(tmp_path / "s") as store:
        results = _fill(store, [3, 4, 5])
        env = store._env
        with env.env.begin() as txn:
            log_keys = [layout.OFFSET.unpack(k)[0] for k, _ in txn.cursor(db=env.log)]
            cq = [(k, v) for k, v in txn.cursor(db=env.cq)]
        assert log_keys == [
            results[0].commitlog_offset,
            results[3].commitlog_offset,
            results[7].commitlog_offset,
        ]
        prefix = layout.queue_prefix("B", 0)
        assert [k for k, _ in cq] == [prefix + layout.OFFSET.pack(q) for q in (2, 6, 11)]
        assert [len(v) for _, v in cq] == [3 * 20, 4 * 20, 5 * 20]
        # A unit: commit-log offset, size, tags code (RocketMQ's 20 bytes).
        cl, size, _code = layout.CQ_UNIT.unpack_from(cq[1][1], 20)
        assert (cl, size) == (results[4].commitlog_offset, results[4].size)


def test_get_starting_in_the_middle_of_a_batch(tmp_path):
    """A get from inside a batch returns that batch's rest, positioned correctly."""
    with _open(tmp_path / "s") as store:
        _fill(store, [10])
        got = store.get("B", 0, 4, max_count=3)
        assert got.status is GetStatus.FOUND
        assert [m.body for m in got.messages] == _bodies(4, 3)
        assert [m.queue_offset for m in got.messages] == [4, 5, 6]
        assert got.next_offset == 7
        raw = store.get_raw("B", 0, 7)
        assert [bytes(r) for r in raw.records] == [
            bytes(m.record) for m in store.get("B", 0, 7).messages
        ]
        assert raw.next_offset == 10 and (raw.min_offset, raw.max_offset) == (0, 10)


def test_get_spanning_batches(tmp_path):
    """A get crosses batch (item) boundaries, in both get and get_raw."""
    with _open(tmp_path / "s") as store:
        _fill(store, [3, 1, 4, 5])
        got = store.get("B", 0, 2, max_count=9)
        assert [m.body for m in got.messages] == _bodies(2, 9)
        assert got.next_offset == 11
        raw = store.get_raw("B", 0, 1, max_count=32)
        assert len(raw.records) == 12 and raw.next_offset == 13
        assert [MessageExt(r).body for r in raw.records] == _bodies(1, 12)


def test_batches_of_other_queues_between(tmp_path):
    """A queue's batches are interleaved with another queue's in the log; reads skip those."""
    with _open(tmp_path / "s") as store:
        for i in range(4):
            store.put("B", 0, [Message(topic="B", body=b"q0-%d-%d" % (i, j)) for j in range(3)])
            store.put("B", 1, [Message(topic="B", body=b"q1-%d" % i)])
        got = store.get("B", 0, 1, max_count=7)
        assert [m.body for m in got.messages] == [b"q0-%d-%d" % divmod(n, 3) for n in range(1, 8)]
        assert [m.body for m in store.get("B", 1, 0).messages] == [b"q1-%d" % i for i in range(4)]


def test_max_bytes_cuts_inside_a_batch(tmp_path):
    """max_bytes stops mid-batch, and mid-way through a second batch of a spanning read."""
    with _open(tmp_path / "s") as store:
        results = _fill(store, [10, 10])
        size = results[0].size
        assert all(r.size == size for r in results)
        cut = store.get("B", 0, 2, max_bytes=3 * size + size // 2)
        assert [m.body for m in cut.messages] == _bodies(2, 3)
        assert cut.next_offset == 5
        # From offset 8: two records of the first batch, then two of the second.
        span = store.get_raw("B", 0, 8, max_bytes=4 * size)
        assert len(span.records) == 4 and span.next_offset == 12
        # The first record always goes, even when it alone is over the limit.
        one = store.get("B", 0, 6, max_bytes=1)
        assert [m.body for m in one.messages] == _bodies(6, 1) and one.next_offset == 7


def test_a_get_copies_only_the_records_it_returns(tmp_path):
    """Two records out of a batch of 100 share one copy of just those two records."""
    with _open(tmp_path / "s") as store:
        results = _fill(store, [100])
        raw = store.get_raw("B", 0, 40, max_count=2)
        assert raw.records[0].obj is raw.records[1].obj
        assert len(raw.records[0].obj) == results[40].size + results[41].size
        assert [MessageExt(r).body for r in raw.records] == _bodies(40, 2)
        got = store.get("B", 0, 98, max_count=2)
        assert [m.body for m in got.messages] == _bodies(98, 2)
        assert [m.commitlog_offset for m in got.messages] == [
            r.commitlog_offset for r in results[98:]
        ]
    assert bytes(raw.records[1]) == bytes(MessageExt(raw.records[1]).record)  # valid after close


def test_filtered_get_across_batches(tmp_path):
    """A TAG filter scans units across items and keeps the matching records in order."""
    kernel = Kernel()
    if "tag" not in [n.lower() for n in kernel.names("filter")]:
        pytest.skip("the TAG filter is not registered")
    tag_a = kernel.filter("TAG", "A")
    with _open(tmp_path / "s") as store:
        for b in range(4):
            store.put(
                "F",
                0,
                [
                    Message(
                        topic="F", body=b"%d-%d" % (b, i), tags="A" if (b + i) % 3 == 0 else "B"
                    )
                    for i in range(5)
                ],
            )
        want = [b"%d-%d" % (b, i) for b in range(4) for i in range(5) if (b + i) % 3 == 0]
        got = store.get("F", 0, 1, max_count=32, message_filter=tag_a)
        assert [m.body for m in got.messages] == [w for w in want if w != b"0-0"]
        assert got.next_offset == 20
        few = store.get("F", 0, 0, max_count=3, message_filter=tag_a)
        assert [m.body for m in few.messages] == want[:3]
        assert few.next_offset == 8  # the third match is offset 7: the scan stops there
        raw = store.get_raw("F", 0, 0, max_count=3, message_filter=tag_a)
        assert [MessageExt(r).body for r in raw.records] == want[:3]


def test_message_at_a_record_in_the_middle_of_a_batch(tmp_path):
    """message_at finds records inside an item; offsets inside a record or past the end do not."""
    with _open(tmp_path / "s") as store:
        results = _fill(store, [5, 7])
        for r in (results[0], results[2], results[4], results[5], results[9], results[11]):
            msg = store.message_at(r.commitlog_offset)
            assert msg is not None and msg.queue_offset == r.queue_offset
            assert msg.msg_id == r.msg_id
        assert store.message_at(results[2].commitlog_offset + 1) is None
        assert store.message_at(results[6].commitlog_offset - 4) is None
        end = results[-1].commitlog_offset + results[-1].size
        assert store.message_at(end) is None
        assert store.message_at(end + 10_000) is None
        assert store.message_at(-1) is None


def test_lookup_and_timestamps_inside_batches(tmp_path):
    """Keys of records in the middle of batches are found; timestamps bisect over batches."""
    with _open(tmp_path / "s") as store:
        store.put("K", 0, [Message(topic="K", body=b"%d" % i, keys=f"k{i % 3}") for i in range(7)])
        assert [m.body for m in store.lookup("K", "k1")] == [b"1", b"4"]
        assert [m.body for m in store.lookup("K", "k2", max_count=1)] == [b"2"]
        first = store.get("K", 0, 0).messages[0].store_timestamp
        assert store.offset_for_timestamp("K", 0, first) == 0
        assert store.offset_for_timestamp("K", 0, first + 10**9) == 7


def _set_version(path: Path, version: bytes) -> None:
    env = lmdb.open(str(path), max_dbs=8)
    try:
        meta = env.open_db(layout.META_DB)
        with env.begin(write=True) as txn:
            txn.put(layout.VERSION_KEY, version, db=meta)
    finally:
        env.close()


def test_a_version_1_directory_is_refused(tmp_path):
    """A directory in format version 1 fails to open (writer and reader), naming both."""
    path = tmp_path / "s"
    with _open(path) as store:
        store.put("V", 0, [Message(topic="V", body=b"x")])
    _set_version(path, b"1")
    for options in ({}, {"read_only": True}):
        with pytest.raises(errors.StoreError) as info:
            _open(path, **options)
        text = str(info.value)
        assert str(path) in text and "format version 1" in text and "version 2" in text
    # The refused open left the directory usable once it is in the current format again.
    _set_version(path, layout.FORMAT_VERSION)
    with _open(path) as store:
        assert [m.body for m in store.get("V", 0, 0).messages] == [b"x"]


def _expected(sizes: list[int], offset: int, max_count: int, max_bytes: int) -> int:
    """How many records RocketMQ's rules return from ``offset`` (the first always goes)."""
    n = 0
    total = 0
    for size in sizes[offset : offset + max_count]:
        if n and total + size > max_bytes:
            break
        n += 1
        total += size
    return n


def test_reads_agree_with_a_model_over_mixed_batches(tmp_path):
    """Many batches of 1 to 7 records of mixed sizes, another queue's batches in between:
    every start offset, count and byte limit reads what RocketMQ's rules say."""
    rng = random.Random(7)
    bodies: list[bytes] = []
    sizes: list[int] = []
    with _open(tmp_path / "s") as store:
        while len(bodies) < 120:
            batch = [rng.randbytes(rng.choice((1, 30, 300))) for _ in range(rng.randint(1, 7))]
            results = store.put("M", 0, [Message(topic="M", body=b) for b in batch])
            bodies += batch
            sizes += [r.size for r in results]
            if rng.random() < 0.5:
                store.put("M", 1, [Message(topic="M", body=b"other")] * rng.randint(1, 3))
        for offset in range(0, len(bodies), 3):
            for max_count in (1, 2, 5, 32, 200):
                for max_bytes in (1, 700, 5000, 1 << 20):
                    want = _expected(sizes, offset, max_count, max_bytes)
                    got = store.get("M", 0, offset, max_count=max_count, max_bytes=max_bytes)
                    assert [m.body for m in got.messages] == bodies[offset : offset + want]
                    assert [m.queue_offset for m in got.messages] == list(
                        range(offset, offset + want)
                    )
                    assert got.next_offset == offset + want
                    raw = store.get_raw("M", 0, offset, max_count=max_count, max_bytes=max_bytes)
                    assert [len(r) for r in raw.records] == sizes[offset : offset + want]
                    # Copied out of LMDB: exactly the records returned, nothing around them.
                    copies = {id(r.obj): r.obj for r in raw.records}.values()
                    assert sum(map(len, copies)) == sum(sizes[offset : offset + want])
                    assert [MessageExt(r).body for r in raw.records] == [
                        m.body for m in got.messages
                    ]


def test_filtered_reads_agree_with_a_model_over_mixed_batches(tmp_path):
    """A TAG filter over batches of 1 to 7 records: kept records and next offsets as RocketMQ."""
    kernel = Kernel()
    if "tag" not in [n.lower() for n in kernel.names("filter")]:
        pytest.skip("the TAG filter is not registered")
    tag_a = kernel.filter("TAG", "A")
    rng = random.Random(11)
    tags: list[str] = []
    sizes: list[int] = []
    with _open(tmp_path / "s") as store:
        while len(tags) < 100:
            batch = [
                Message(topic="M", body=b"%d" % (len(tags) + i), tags=rng.choice("AAB"))
                for i in range(rng.randint(1, 7))
            ]
            results = store.put("M", 0, batch)
            tags += [m.tags for m in batch]
            sizes += [r.size for r in results]
            if rng.random() < 0.5:
                store.put("M", 1, [Message(topic="M", body=b"other", tags="A")])
        for offset in range(0, len(tags), 3):
            for max_count in (1, 3, 32):
                for max_bytes in (1, 400, 1 << 20):
                    picked: list[int] = []
                    scanned = 0
                    total = 0
                    for q in range(offset, len(tags)):
                        if picked and (len(picked) >= max_count or total + sizes[q] > max_bytes):
                            break
                        scanned += 1
                        if tags[q] == "A":
                            picked.append(q)
                            total += sizes[q]
                    got = store.get(
                        "M",
                        0,
                        offset,
                        max_count=max_count,
                        max_bytes=max_bytes,
                        message_filter=tag_a,
                    )
                    assert [m.queue_offset for m in got.messages] == picked
                    assert [m.body for m in got.messages] == [b"%d" % q for q in picked]
                    assert got.next_offset == offset + scanned
                    assert got.status is (GetStatus.FOUND if picked else GetStatus.NO_MATCHED_MSG)


def _drop_log_item(store: LmdbStore, commitlog_offset: int) -> None:
    """Delete one batch's commit-log item only (a store damaged behind the store's back)."""
    env = store._env
    env.write(lambda txn: txn.delete(layout.OFFSET.pack(commitlog_offset), db=env.log))


def test_units_of_a_batch_gone_from_the_log_are_passed_over(tmp_path):
    """A batch missing from the log: a pull starting on it answers OFFSET_FOUND_NULL past
    its units, one reaching it returns what comes before it; filtered pulls skip it."""
    with _open(tmp_path / "s") as store:
        results = _fill(store, [3, 4, 5, 2])
        _drop_log_item(store, results[3].commitlog_offset)  # the batch of offsets 3..6
        # A pull starting inside the gone batch moves past its units (from 4: 3 of them).
        for start, after in [(3, 7), (4, 7), (6, 7)]:
            got = store.get("B", 0, start)
            assert (got.status, got.messages, got.next_offset) == (
                GetStatus.OFFSET_FOUND_NULL,
                [],
                after,
            )
        # One reaching it from before returns what precedes it; the next pull passes it.
        got = store.get("B", 0, 1, max_count=10)
        assert [m.body for m in got.messages] == _bodies(1, 2)
        assert got.next_offset == 3
        assert [m.body for m in store.get("B", 0, 7, max_count=10).messages] == _bodies(7, 7)
        raw = store.get_raw("B", 0, 0, max_count=10)
        assert raw.next_offset == 3
        assert [bytes(r) for r in raw.records] == [
            bytes(m.record) for m in store.get("B", 0, 0, max_count=3).messages
        ]
        # Filtered pulls pass over the gone units and go on with the next batch.
        everything = Kernel().filter("TAG", "*")
        got = store.get("B", 0, 0, max_count=32, message_filter=everything)
        assert [m.body for m in got.messages] == _bodies(0, 3) + _bodies(7, 7)
        assert got.next_offset == 14
        got = store.get("B", 0, 4, message_filter=everything)
        assert [m.body for m in got.messages] == _bodies(7, 7)
