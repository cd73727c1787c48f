"""IndexService: RocketMQ's index file layout, hash chains, rolls, truncation and retention."""

from __future__ import annotations

import errno
import os
import random
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqcore.errors import (
    DiskFullError,
    InvalidArgumentError,
    StoreClosedError,
    StoreCorruptedError,
)
from mqcore.plugins.store_mmap import indexfile, mappedfile
from mqcore.plugins.store_mmap.indexfile import (
    ENTRY,
    ENTRY_SIZE,
    HEADER,
    HEADER_SIZE,
    IndexService,
    index_key_hash,
)


@pytest.fixture
def index(tmp_path):
    """An index with 8 slots and 5 entries (4 usable) per file, closed after the test."""
    service = IndexService(tmp_path, max_hash_slots=8, max_index_count=5)
    yield service
    service.close()


def files_of(tmp_path):
    return sorted(os.listdir(tmp_path / "index"))


def test_key_hash_is_javas_string_hash_code_made_non_negative(monkeypatch):
    assert index_key_hash("a", "b") == 97 * 31 * 31 + ord("#") * 31 + 98  # "a#b".hashCode()
    monkeypatch.setattr(indexfile, "string_hash_code", lambda text: -5)
    assert index_key_hash("a", "b") == 5
    monkeypatch.setattr(indexfile, "string_hash_code", lambda text: -(2**31))
    assert index_key_hash("a", "b") == 0  # Math.abs(Integer.MIN_VALUE) stays negative: 0


def test_file_layout_is_rocketmqs(tmp_path):
    service = IndexService(tmp_path, max_hash_slots=8, max_index_count=5)
    service.put_keys([("T", ["k1"], 1000, 5_000), ("T", ["k1"], 2000, 7_500)])
    service.close()
    (name,) = files_of(tmp_path)
    assert len(name) == 17 and name.isdigit()
    raw = (tmp_path / "index" / name).read_bytes()
    assert len(raw) == HEADER_SIZE + 8 * 4 + 5 * ENTRY_SIZE
    assert HEADER.unpack_from(raw) == (5_000, 7_500, 1000, 2000, 1, 3)
    key_hash = index_key_hash("T", "k1")
    slot = HEADER_SIZE + (key_hash % 8) * 4
    assert int.from_bytes(raw[slot : slot + 4], "big") == 2  # newest entry of the chain
    entries = HEADER_SIZE + 8 * 4
    assert raw[entries : entries + ENTRY_SIZE] == bytes(ENTRY_SIZE)  # entry 0 is never used
    assert ENTRY.unpack_from(raw, entries + ENTRY_SIZE) == (key_hash, 1000, 0, 0)
    assert ENTRY.unpack_from(raw, entries + 2 * ENTRY_SIZE) == (key_hash, 2000, 2, 1)


def test_query_newest_first_with_max_count(index):
    index.put_keys([("T", ["a", "b"], 10, 1000), ("T", ["a"], 20, 2000), ("U", ["a"], 30, 3000)])
    assert index.query("T", "a", 10) == [20, 10]
    assert index.query("T", "a", 1) == [20]
    assert index.query("T", "b", 10) == [10]
    assert index.query("U", "a", 10) == [30]
    assert index.query("T", "zzz", 10) == []


def test_hash_collisions_return_every_candidate(tmp_path):
    assert index_key_hash("T", "Aa") == index_key_hash("T", "BB")  # "Aa" and "BB" collide in Java
    service = IndexService(tmp_path, max_hash_slots=1, max_index_count=50)
    try:
        service.put_keys([("T", ["Aa"], 10, 1000), ("T", ["BB"], 20, 1000), ("T", ["x"], 30, 1000)])
        # one slot: every key shares a chain; the stored hash tells the others apart...
        assert service.query("T", "x", 10) == [30]
        # ...except for a true collision, which the store filters by re-reading the record
        assert service.query("T", "Aa", 10) == [20, 10]
    finally:
        service.close()


def test_rolls_to_new_files_and_reopens(tmp_path):
    service = IndexService(tmp_path, max_hash_slots=2, max_index_count=3)  # 2 entries a file
    for i in range(9):
        service.put_keys([("T", [f"k{i % 2}", "all"], 100 * (i + 1), 1000 * (i + 1))])
    names = files_of(tmp_path)
    assert len(names) == 9 and names == sorted(set(names))
    expected_all = [100 * (i + 1) for i in reversed(range(9))]
    assert service.query("T", "all", 100) == expected_all
    assert service.query("T", "k1", 100) == [800, 600, 400, 200]
    assert service.end_phy_offset == 900 and service.end_timestamp == 9000
    service.close()
    again = IndexService(tmp_path, max_hash_slots=2, max_index_count=3)
    try:
        assert again.query("T", "all", 100) == expected_all
        assert again.query("T", "k0", 3) == [900, 700, 500]
        again.put_keys([("T", ["all"], 1000, 10_000)])
        assert again.query("T", "all", 2) == [1000, 900]
    finally:
        again.close()


def test_time_range_filters_entries_and_files(tmp_path):
    service = IndexService(tmp_path, max_hash_slots=4, max_index_count=3)
    try:
        for i in range(6):
            service.put_keys([("T", ["k"], i + 1, 10_000 * (i + 1))])
        assert service.query("T", "k", 10, begin_ts=20_000, end_ts=40_000) == [4, 3, 2]
        assert service.query("T", "k", 10, begin_ts=55_000) == [6]
        assert service.query("T", "k", 10, end_ts=15_000) == [1]
    finally:
        service.close()


def test_files_are_created_only_for_keys(tmp_path):
    service = IndexService(tmp_path, max_hash_slots=2, max_index_count=3)
    try:
        assert service.put_keys([("T", [], 10, 1000), ("T", [""], 20, 1000)]) == 0
        assert files_of(tmp_path) == []
        assert service.end_phy_offset == -1 and service.end_timestamp == 0
        assert service.put_keys([("T", ["k"], 30, 3000)]) == 1
        assert len(files_of(tmp_path)) == 1
    finally:
        service.close()


def test_already_indexed_records_are_skipped(index):
    assert index.put_keys([("T", ["a"], 10, 1000), ("T", ["a", ""], 20, 1000)]) == 2
    assert index.put_keys([("T", ["a"], 10, 1000), ("T", ["a"], 20, 1000)]) == 0
    assert index.put_keys([("T", ["a"], 20, 1000), ("T", ["a"], 30, 1000)]) == 1
    assert index.query("T", "a", 10) == [30, 20, 10]


def test_truncate_removes_the_cut_tail_and_keeps_chains(tmp_path):
    service = IndexService(tmp_path, max_hash_slots=3, max_index_count=4)  # 3 entries a file
    try:
        for i in range(10):
            service.put_keys([("T", ["k", f"u{i}"], 10 * (i + 1), 1000 * (i + 1))])
        files_before = len(files_of(tmp_path))
        service.truncate(45)  # records at 50.. are cut
        assert service.end_phy_offset == 40
        assert len(files_of(tmp_path)) < files_before
        assert service.query("T", "k", 100) == [40, 30, 20, 10]
        assert service.query("T", "u6", 10) == []
        # the rebuild re-adds the tail, with other records at the same offsets
        service.put_keys([("T", ["k", "new"], 50, 11_000), ("T", ["k"], 60, 12_000)])
        assert service.query("T", "k", 100) == [60, 50, 40, 30, 20, 10]
        assert service.query("T", "new", 10) == [50]
        assert service.query("T", "u4", 10) == []
        service.truncate(0)
        assert service.end_phy_offset == -1
        assert service.query("T", "k", 100) == []
    finally:
        service.close()


def test_truncate_inside_the_only_file_then_reopen(tmp_path):
    service = IndexService(tmp_path, max_hash_slots=1, max_index_count=100)
    service.put_keys([("T", ["a", "b"], phy, phy) for phy in range(1, 20)])
    service.truncate(7)
    assert service.query("T", "a", 100) == [6, 5, 4, 3, 2, 1]
    service.close()
    again = IndexService(tmp_path, max_hash_slots=1, max_index_count=100)
    try:
        assert again.query("T", "b", 100) == [6, 5, 4, 3, 2, 1]
        assert again.end_phy_offset == 6
    finally:
        again.close()


def test_unpublished_entries_of_a_killed_writer_are_removed(tmp_path):
    service = IndexService(tmp_path, max_hash_slots=2, max_index_count=100)
    service.put_keys([("T", ["a"], 10, 1000), ("T", ["b"], 20, 1000)])
    path = tmp_path / "index" / files_of(tmp_path)[0]
    header = path.read_bytes()[:HEADER_SIZE]
    service.put_keys([("T", ["a"], 30, 2000), ("T", ["c"], 40, 2000)])
    service.close()
    with open(path, "r+b") as fh:  # the writer died before the header update
        fh.write(header)
    again = IndexService(tmp_path, max_hash_slots=2, max_index_count=100)
    try:
        assert again.end_phy_offset == 20
        assert again.query("T", "a", 10) == [10]
        assert again.query("T", "c", 10) == []
        assert again.put_keys([("T", ["a"], 30, 2000)]) == 1
        assert again.query("T", "a", 10) == [30, 10]
    finally:
        again.close()


def test_truncate_looks_past_an_empty_newest_file(tmp_path):
    service = IndexService(tmp_path, max_hash_slots=2, max_index_count=3)  # 2 entries a file
    service.put_keys([("T", ["k"], 10, 1000), ("T", ["k"], 20, 2000)])
    first = tmp_path / "index" / files_of(tmp_path)[0]
    service.put_keys([("T", ["k"], 30, 3000)])  # rolls
    service.close()
    second = tmp_path / "index" / files_of(tmp_path)[1]
    raw = bytearray(second.read_bytes())  # killed before the new file's first publish
    raw[:HEADER_SIZE] = HEADER.pack(2000, 2000, 20, 20, 0, 1)
    second.write_bytes(bytes(raw))
    again = IndexService(tmp_path, max_hash_slots=2, max_index_count=3)
    try:
        assert again.query("T", "k", 10) == [20, 10]
        again.truncate(15)
        assert again.end_phy_offset == 10
        assert files_of(tmp_path) == [first.name]
        assert again.query("T", "k", 10) == [10]
    finally:
        again.close()


def test_delete_expired_keeps_the_newest_file(tmp_path):
    service = IndexService(tmp_path, max_hash_slots=2, max_index_count=3)
    try:
        for i in range(6):
            service.put_keys([("T", ["k"], 10 * (i + 1), 1000 * (i + 1))])
        assert len(files_of(tmp_path)) == 3
        assert service.delete_expired(25) == 1  # first file ends at 20
        assert service.query("T", "k", 10) == [60, 50, 40, 30]
        assert service.delete_expired(1_000) == 1
        assert len(files_of(tmp_path)) == 1
        assert service.query("T", "k", 10) == [60, 50]
    finally:
        service.close()


def test_read_only_opener_refreshes(tmp_path):
    writer = IndexService(tmp_path, max_hash_slots=2, max_index_count=3)
    reader = IndexService(tmp_path, max_hash_slots=2, max_index_count=3, read_only=True)
    try:
        writer.put_keys([("T", ["k"], 10, 1000)])
        reader.refresh()
        assert reader.query("T", "k", 10) == [10]
        writer.put_keys([("T", ["k"], phy, 1000) for phy in (20, 30, 40)])
        reader.refresh()
        assert reader.query("T", "k", 10) == [40, 30, 20, 10]
        with pytest.raises(InvalidArgumentError, match="read-only"):
            reader.put_keys([("T", ["k"], 50, 1000)])
    finally:
        reader.close()
        writer.close()


def test_use_after_close_is_an_error(tmp_path):
    service = IndexService(tmp_path, max_hash_slots=2, max_index_count=3)
    service.put_keys([("T", ["k"], 10, 1000)])
    service.close()
    with pytest.raises(StoreClosedError):
        service.query("T", "k", 1)
    with pytest.raises(StoreClosedError):
        service.put_keys([("T", ["k"], 20, 1000)])
    service.close()


@pytest.mark.timeout(30)
def test_queries_while_keys_are_put(tmp_path):
    service = IndexService(tmp_path, max_hash_slots=3, max_index_count=40)
    total = 1500
    errors: list[str] = []
    done = threading.Event()

    def reader():
        while not done.is_set():
            for key in ("k0", "k1", "k2"):
                found = service.query("T", key, 10_000)
                # offsets of key ki are i, i + 3, i + 6...: newest first, nothing else
                if any(phy % 3 != int(key[1]) for phy in found):
                    errors.append(f"{key}: {found}")
                if found != sorted(found, reverse=True):
                    errors.append(f"{key} not newest first: {found}")

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for first in range(1, total, 7):
            service.put_keys(
                [("T", [f"k{phy % 3}"], phy, 1000 * phy) for phy in range(first, first + 7)]
            )
    finally:
        done.set()
        thread.join(10)
    try:
        assert errors == []
        assert len(service.query("T", "k1", 10_000)) == len(range(1, first + 7, 3))
    finally:
        service.close()


def test_preallocated_index_reports_a_full_disk(tmp_path, monkeypatch):
    service = IndexService(tmp_path, max_hash_slots=2, max_index_count=3, preallocate=True)
    try:
        service.put_keys([("T", ["k"], 10, 1000), ("T", ["k"], 20, 2000)])
        monkeypatch.setattr(
            mappedfile,
            "_grow",
            lambda fd, size: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full")),
        )
        with pytest.raises(DiskFullError):
            service.put_keys([("T", ["k"], 30, 3000)])  # needs a new file
        assert service.query("T", "k", 10) == [20, 10]
        monkeypatch.undo()
        assert service.put_keys([("T", ["k"], 30, 3000)]) == 1
        assert service.query("T", "k", 10) == [30, 20, 10]
    finally:
        service.close()


_WRITER = """
import sys
import structlog
from mqcore.plugins.store_mmap.indexfile import IndexService
structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))  # stdout: acks
index = IndexService(sys.argv[1], max_hash_slots=5, max_index_count=50)
phy = index.end_phy_offset + 1
while True:
    # record phy has keys k<phy % 7> and u<phy>
    batch = [("T", [f"k{p % 7}", f"u{p}"], p, 1000 * p) for p in range(phy, phy + 5)]
    index.put_keys(batch)
    phy += 5
    print(phy - 1, flush=True)
"""


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_sigkill_while_putting_keys_loses_no_acknowledged_key(tmp_path, kill_writer):
    """A writer killed at random moments: every acknowledged key is found after reopening."""
    rnd = random.Random(11)
    acked = 0
    for _ in range(4):
        acked = kill_writer(_WRITER, tmp_path, rnd, 3, 60)
        service = IndexService(tmp_path, max_hash_slots=5, max_index_count=50)
        try:
            end = service.end_phy_offset
            assert end >= acked
            for p in rnd.sample(range(1, end + 1), min(20, end)):
                assert service.query("T", f"u{p}", 5) == [p]
            assert service.query("T", "k3", 10_000) == list(range(end - (end - 3) % 7, 0, -7))
        finally:
            service.close()


def test_wrong_sizes_are_reported(tmp_path):
    service = IndexService(tmp_path, max_hash_slots=2, max_index_count=3)
    service.put_keys([("T", ["k"], 10, 1000)])
    service.close()
    with pytest.raises(StoreCorruptedError, match="expected"):
        IndexService(tmp_path, max_hash_slots=4, max_index_count=3)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    slots=st.integers(1, 4),
    per_file=st.integers(2, 6),
    steps=st.lists(
        st.one_of(
            st.lists(
                st.lists(st.sampled_from(["a", "b", "Aa", "BB", "c"]), max_size=3), max_size=4
            ),
            st.just("reopen"),
            st.integers(0, 40).map(lambda n: ("truncate", n)),
        ),
        max_size=12,
    ),
)
def test_queries_match_a_model_across_rolls_reopens_and_truncation(
    tmp_path_factory, slots, per_file, steps
):
    root = tmp_path_factory.mktemp("ix")
    service = IndexService(root, max_hash_slots=slots, max_index_count=per_file)
    records: list[tuple[int, list[str]]] = []  # (phy, keys) in commit-log order
    try:
        for step in steps:
            if step == "reopen":
                service.close()
                service = IndexService(root, max_hash_slots=slots, max_index_count=per_file)
            elif isinstance(step, tuple):
                cut = step[1]
                service.truncate(cut)
                records = [r for r in records if r[0] < cut]
            else:
                batch = []
                for keys in step:
                    phy = (records[-1][0] if records else 0) + 1
                    records.append((phy, keys))
                    batch.append(("T", keys, phy, 1000 * phy))
                service.put_keys(batch)
        for key in ["a", "b", "Aa", "c"]:
            want_hash = index_key_hash("T", key)
            expected = [
                phy
                for phy, keys in reversed(records)
                if any(k and index_key_hash("T", k) == want_hash for k in keys)
            ]
            assert service.query("T", key, 1000) == expected
    finally:
        service.close()


def test_entries_get_disk_blocks_a_chunk_at_a_time(tmp_path, monkeypatch):
    """A sparse index file holds blocks for header, slots and the entries reserved so far."""
    monkeypatch.setattr(indexfile, "_RESERVE_CHUNK", 4096)
    service = IndexService(tmp_path, max_hash_slots=1024, max_index_count=100_000)
    try:
        service.put_keys([("T", ["k0"], 1, 1000)])
        path = service._files[-1].path
        entries_at = indexfile.HEADER_SIZE + 1024 * 4
        blocks = os.stat(path).st_blocks * 512
        assert entries_at <= blocks < entries_at + 64 * 1024  # not the 2 MB of the file
        service.put_keys([("T", [f"k{i}"], 1 + i, 1000) for i in range(1, 1000)])
        covered = entries_at + 1000 * indexfile.ENTRY_SIZE
        assert service._files[-1].reserved >= covered
        assert os.stat(path).st_blocks * 512 >= covered
        assert service.query("T", "k999", 5) == [1000]
    finally:
        service.close()


def test_a_full_disk_fails_the_batch_before_it_writes(tmp_path, monkeypatch):
    """No blocks for the next entries: DiskFullError, and the index is as it was."""
    monkeypatch.setattr(indexfile, "_RESERVE_CHUNK", 10 * indexfile.ENTRY_SIZE)
    service = IndexService(tmp_path, max_hash_slots=4, max_index_count=1000)
    try:
        service.put_keys([("T", ["a"], p, 1000) for p in range(1, 6)])
        with monkeypatch.context() as m:
            m.setattr(
                mappedfile,
                "_grow",
                lambda fd, size: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full")),
            )
            with pytest.raises(DiskFullError, match="disk full"):
                service.put_keys([("T", ["a", "b"], p, 2000) for p in range(6, 12)])
        assert service.query("T", "a", 100) == [5, 4, 3, 2, 1]
        assert service.query("T", "b", 100) == []
        assert service.end_phy_offset == 5
        assert service.put_keys([("T", ["a", "b"], p, 2000) for p in range(6, 12)]) == 12
        assert service.query("T", "a", 100) == list(range(11, 0, -1))
        assert service.query("T", "b", 100) == list(range(11, 5, -1))
    finally:
        service.close()
