"""ConsumeQueue: units across file rolls, recovery, truncation, retention, time search."""

from __future__ import annotations

import errno
import itertools
import os
import random
import struct
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
from mqcore.plugins.store_mmap import mappedfile
from mqcore.plugins.store_mmap.consumequeue import (
    BLANK_UNIT,
    UNIT,
    UNIT_SIZE,
    ConsumeQueue,
    CqUnit,
    _valid_prefix,
)

PER_FILE = 4  # tiny files so that every test rolls


def units(first: int, count: int, size: int = 10) -> list[tuple[int, int, int]]:
    """Units of ``count`` consecutive records of ``size`` bytes from record number ``first``."""
    return [(i * size, size, i * 7 - 3) for i in range(first, first + count)]


def read_all(cq: ConsumeQueue) -> list[tuple[int, int, int]]:
    """Every readable unit, read in small batches."""
    out = []
    at = cq.min_offset
    while at < cq.max_offset:
        view = cq.read_units(at, 3)
        assert len(view) > 0
        out.extend(UNIT.iter_unpack(view))
        at += len(view) // UNIT_SIZE
    return out


@pytest.fixture
def cq(tmp_path):
    """A writable queue with 4 units per file, closed after the test."""
    queue = ConsumeQueue(tmp_path, "TopicA", 3, units_per_file=PER_FILE)
    yield queue
    queue.close()


def test_round_trip_across_rolls_and_file_names(cq, tmp_path):
    assert cq.append_units(0, units(0, 6)) == 6
    packed = b"".join(UNIT.pack(*u) for u in units(6, 5))
    assert cq.append_units(6, packed) == 11
    assert read_all(cq) == units(0, 11)
    assert cq.max_physical_offset == 110
    assert cq.unit_at(10) == CqUnit(100, 10, 67)
    assert cq.unit_at(11) is None
    names = sorted(os.listdir(tmp_path / "consumequeue" / "TopicA" / "3"))
    # named by start byte offset: 4 units * 20 bytes = 80 bytes per file
    assert names == ["00000000000000000000", "00000000000000000080", "00000000000000000160"]
    assert all(os.path.getsize(tmp_path / "consumequeue/TopicA/3" / n) == 80 for n in names)


def test_read_units_is_zero_copy_inside_a_file_and_joined_across(cq):
    cq.append_units(0, units(0, 8))
    inside = cq.read_units(4, 10)
    assert len(inside) == 4 * UNIT_SIZE and isinstance(inside.obj, type(cq._map(4)))
    across = cq.read_units(2, 4)
    assert list(UNIT.iter_unpack(across)) == units(2, 4)
    assert len(cq.read_units(8, 1)) == 0
    assert len(cq.read_units(-1, 1)) == 0
    del inside


def test_reopen_reads_the_same_units(tmp_path):
    with_close = ConsumeQueue(tmp_path, "T", 0, units_per_file=PER_FILE)
    with_close.append_units(0, units(0, 9))
    with_close.close()
    again = ConsumeQueue(tmp_path, "T", 0, units_per_file=PER_FILE)
    try:
        assert (again.min_offset, again.max_offset) == (0, 9)
        assert again.max_physical_offset == 90
        assert read_all(again) == units(0, 9)
        again.append_units(9, units(9, 2))
        assert read_all(again) == units(0, 11)
    finally:
        again.close()


def test_append_must_be_contiguous(cq):
    cq.append_units(0, units(0, 2))
    with pytest.raises(InvalidArgumentError, match="next offset is 2"):
        cq.append_units(3, units(3, 1))
    with pytest.raises(InvalidArgumentError, match="next offset is 2"):
        cq.append_units(1, units(1, 1))
    with pytest.raises(InvalidArgumentError, match="dispatched twice"):
        cq.append_units(2, units(0, 1))
    with pytest.raises(InvalidArgumentError, match="multiple of 20"):
        cq.append_units(2, b"x" * 21)
    # a non-empty queue may not be restarted, even with fill_gap
    with pytest.raises(InvalidArgumentError):
        cq.append_units(10, units(10, 1), fill_gap=True)
    assert cq.max_offset == 2


def test_fill_gap_starts_an_empty_queue_with_blank_units(tmp_path):
    queue = ConsumeQueue(tmp_path, "T", 1, units_per_file=PER_FILE)
    queue.append_units(6, units(6, 3), fill_gap=True)
    assert (queue.min_offset, queue.max_offset) == (6, 9)
    assert queue.unit_at(5) is None
    assert bytes(queue._raw_view(4, 1)) == BLANK_UNIT
    queue.close()
    reopened = ConsumeQueue(tmp_path, "T", 1, units_per_file=PER_FILE)
    try:
        assert (reopened.min_offset, reopened.max_offset) == (6, 9)
        assert read_all(reopened) == units(6, 3)
    finally:
        reopened.close()


def _file(tmp_path, topic, queue_id, start_unit):
    return tmp_path / "consumequeue" / topic / str(queue_id) / f"{start_unit * UNIT_SIZE:020d}"


def test_recover_zero_tail_and_torn_last_unit(tmp_path):
    queue = ConsumeQueue(tmp_path, "T", 0, units_per_file=PER_FILE)
    queue.append_units(0, units(0, 6))
    queue.close()
    # a torn unit 6: offset written, size still zero
    path = _file(tmp_path, "T", 0, 4)
    with open(path, "r+b") as fh:
        fh.seek(2 * UNIT_SIZE)
        fh.write(struct.pack(">q", 60))
        # a stale unit after it, which a later append must never revive
        fh.write(bytes(12) + UNIT.pack(999, 5, 0))
    reopened = ConsumeQueue(tmp_path, "T", 0, units_per_file=PER_FILE)
    try:
        assert reopened.max_offset == 6
        assert reopened.max_physical_offset == 60
        assert path.read_bytes()[2 * UNIT_SIZE :] == bytes(2 * UNIT_SIZE)
        reopened.append_units(6, units(6, 1))
    finally:
        reopened.close()
    third = ConsumeQueue(tmp_path, "T", 0, units_per_file=PER_FILE)
    try:
        assert read_all(third) == units(0, 7)
    finally:
        third.close()


def test_recover_negative_size_and_empty_trailing_file(tmp_path):
    queue = ConsumeQueue(tmp_path, "T", 0, units_per_file=PER_FILE)
    queue.append_units(0, units(0, 8))  # fills two files exactly
    queue.close()
    # a preallocated third file with nothing in it, and a corrupted unit 7
    _file(tmp_path, "T", 0, 8).write_bytes(bytes(PER_FILE * UNIT_SIZE))
    with open(_file(tmp_path, "T", 0, 4), "r+b") as fh:
        fh.seek(3 * UNIT_SIZE)
        fh.write(UNIT.pack(70, -1, 0))
    reopened = ConsumeQueue(tmp_path, "T", 0, units_per_file=PER_FILE)
    try:
        assert reopened.max_offset == 7
        assert not _file(tmp_path, "T", 0, 8).exists()
        assert read_all(reopened) == units(0, 7)
    finally:
        reopened.close()


def test_wrong_units_per_file_is_reported(tmp_path):
    ConsumeQueue(tmp_path, "T", 0, units_per_file=PER_FILE).close()
    queue = ConsumeQueue(tmp_path, "T", 0, units_per_file=PER_FILE)
    queue.append_units(0, units(0, 1))
    queue.close()
    with pytest.raises(StoreCorruptedError, match="units_per_file"):
        ConsumeQueue(tmp_path, "T", 0, units_per_file=8)


def test_missing_middle_file_is_reported(tmp_path):
    queue = ConsumeQueue(tmp_path, "T", 0, units_per_file=PER_FILE)
    queue.append_units(0, units(0, 10))
    queue.close()
    _file(tmp_path, "T", 0, 4).unlink()
    with pytest.raises(StoreCorruptedError, match="misses files") as info:
        ConsumeQueue(tmp_path, "T", 0, units_per_file=PER_FILE)
    assert info.value.offset == 8 * UNIT_SIZE


def test_truncate_dirty_drops_units_at_or_past_the_cut(tmp_path):
    queue = ConsumeQueue(tmp_path, "T", 0, units_per_file=PER_FILE)
    queue.append_units(0, units(0, 11))
    queue.truncate_dirty(55)  # unit 5 covers [50, 60): it points before the cut and stays
    assert queue.max_offset == 6 and queue.max_physical_offset == 60
    assert not _file(tmp_path, "T", 0, 8).exists()
    assert queue.unit_at(6) is None
    queue.truncate_dirty(1000)  # nothing past the end: no change
    assert queue.max_offset == 6
    queue.append_units(6, units(6, 1))
    queue.close()
    reopened = ConsumeQueue(tmp_path, "T", 0, units_per_file=PER_FILE)
    try:
        assert read_all(reopened) == units(0, 7)
        reopened.truncate_dirty(0)
        assert (reopened.min_offset, reopened.max_offset) == (0, 0)
        assert reopened.max_physical_offset == -1
    finally:
        reopened.close()


def test_truncate_at_file_boundary_deletes_the_empty_file(cq, tmp_path):
    cq.append_units(0, units(0, 6))
    cq.truncate_dirty(40)
    assert cq.max_offset == 4
    assert not _file(tmp_path, "TopicA", 3, 4).exists()
    cq.append_units(4, units(4, 1))
    assert read_all(cq) == units(0, 5)


def test_delete_expired_moves_min_offset_inside_the_first_kept_file(cq):
    cq.append_units(0, units(0, 10))
    assert cq.delete_expired(35) == 1  # file 0 ends with unit 3 at 30 < 35
    assert cq.min_offset == 4
    assert cq.delete_expired(45) == 0  # file 1 ends with unit 7 at 70: kept
    assert cq.min_offset == 5
    assert read_all(cq) == units(5, 5)


def test_delete_expired_deletes_whole_files_and_keeps_the_last(tmp_path):
    queue = ConsumeQueue(tmp_path, "T", 0, units_per_file=PER_FILE)
    try:
        queue.append_units(0, units(0, 10))
        assert queue.delete_expired(55) == 1
        assert not _file(tmp_path, "T", 0, 0).exists()
        assert queue.min_offset == 6  # unit 6 points at 60, the first >= 55
        assert queue.unit_at(5) is None and len(queue.read_units(4, 5)) == 0
        assert queue.delete_expired(10_000) == 1  # the last file is always kept
        assert _file(tmp_path, "T", 0, 8).exists()
        assert queue.min_offset == queue.max_offset == 10
        queue.append_units(10, units(10, 1))
        assert read_all(queue) == units(10, 1)
    finally:
        queue.close()
    reopened = ConsumeQueue(tmp_path, "T", 0, units_per_file=PER_FILE)
    try:
        assert reopened.min_offset == 8  # the first file; the store corrects it after opening
        assert reopened.correct_min_offset(100) == 10
    finally:
        reopened.close()


@pytest.mark.parametrize(
    ("target", "lower", "upper"),
    [
        (0, 0, 0),  # before everything
        (100, 0, 0),
        (150, 1, 0),  # between 100 and 200
        (200, 1, 3),  # three units share 200
        (250, 4, 3),
        (900, 8, 7),  # after everything
    ],
)
def test_offset_for_timestamp(cq, target, lower, upper):
    times = [100, 200, 200, 200, 300, 400, 500, 600]
    cq.append_units(0, units(0, len(times)))
    calls = []

    def timestamp_of(offset, size):
        calls.append(offset)
        assert size == 10
        return times[offset // 10]

    assert cq.offset_for_timestamp(target, timestamp_of) == lower
    assert cq.offset_for_timestamp(target, timestamp_of, boundary="upper") == upper
    assert len(calls) <= 10  # a binary search, not a scan


def test_offset_for_timestamp_respects_min_offset_and_empty(cq):
    assert cq.offset_for_timestamp(5, lambda o, s: 0) == 0
    cq.append_units(0, units(0, 10))
    cq.delete_expired(60)
    assert cq.offset_for_timestamp(0, lambda o, s: o) == 6
    assert cq.offset_for_timestamp(0, lambda o, s: o, boundary="upper") == 6
    with pytest.raises(InvalidArgumentError):
        cq.offset_for_timestamp(0, lambda o, s: o, boundary="middle")


def test_read_only_opener_refreshes(tmp_path):
    writer = ConsumeQueue(tmp_path, "T", 0, units_per_file=PER_FILE)
    reader = ConsumeQueue(tmp_path, "T", 0, units_per_file=PER_FILE, read_only=True)
    try:
        assert reader.max_offset == 0
        writer.append_units(0, units(0, 3))
        assert reader.refresh() == 3
        writer.append_units(3, units(3, 7))
        assert reader.refresh() == 10
        assert read_all(reader) == units(0, 10)
        with pytest.raises(InvalidArgumentError, match="read-only"):
            reader.append_units(10, units(10, 1))
    finally:
        reader.close()
        writer.close()


def test_read_only_opener_follows_a_truncation_and_a_long_backlog(tmp_path):
    writer = ConsumeQueue(tmp_path, "T", 0, units_per_file=1000)
    reader = ConsumeQueue(tmp_path, "T", 0, units_per_file=1000, read_only=True)
    try:
        writer.append_units(0, units(0, 10))
        assert reader.refresh() == 10
        writer.truncate_dirty(50)
        writer.append_units(5, [(50, 20, 1)])
        assert reader.refresh() == 6
        assert reader.unit_at(5) == CqUnit(50, 20, 1)
        writer.append_units(6, [(70 + 10 * i, 10, 0) for i in range(2500)])
        assert reader.refresh() == 2506
        assert reader.max_physical_offset == writer.max_physical_offset
    finally:
        reader.close()
        writer.close()


def test_close_with_a_live_view_and_reads_after_close(tmp_path):
    queue = ConsumeQueue(tmp_path, "T", 0, units_per_file=PER_FILE)
    queue.append_units(0, units(0, 3))
    view = queue.read_units(0, 3)
    queue.close()  # the view pins its map; close must not fail because of it
    assert list(UNIT.iter_unpack(view)) == units(0, 3)
    del view
    assert len(queue.read_units(0, 3)) == 0
    with pytest.raises(StoreClosedError):
        queue.append_units(3, units(3, 1))
    queue.close()  # twice is fine


def _no_space(fd, size):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_preallocated_files_report_a_full_disk_before_writing(tmp_path, monkeypatch):
    queue = ConsumeQueue(tmp_path, "T", 0, units_per_file=PER_FILE, preallocate=True)
    try:
        queue.append_units(0, units(0, 3))
        assert os.stat(_file(tmp_path, "T", 0, 0)).st_blocks * 512 >= PER_FILE * UNIT_SIZE
        monkeypatch.setattr(mappedfile, "_grow", _no_space)
        with pytest.raises(DiskFullError, match="disk full"):
            queue.reserve(6)  # needs the file of units 4..7
        assert queue.max_offset == 3 and not _file(tmp_path, "T", 0, 4).exists()
        queue.append_units(3, units(3, 1))  # fits in the current file
        with pytest.raises(DiskFullError):
            queue.append_units(4, units(4, 2))
        assert queue.max_offset == 4 and read_all(queue) == units(0, 4)  # still readable
        monkeypatch.undo()
        queue.reserve(9)  # creates the files of units 4..11 ahead
        assert _file(tmp_path, "T", 0, 8).exists()
        queue.append_units(4, units(4, 8))
        assert read_all(queue) == units(0, 12)
    finally:
        queue.close()


def test_reserved_empty_files_are_dropped_on_reopen(tmp_path):
    queue = ConsumeQueue(tmp_path, "T", 0, units_per_file=PER_FILE)
    queue.append_units(0, units(0, 2))
    queue.reserve(10)
    assert _file(tmp_path, "T", 0, 8).exists()
    queue.close()
    again = ConsumeQueue(tmp_path, "T", 0, units_per_file=PER_FILE)
    try:
        assert again.max_offset == 2
        assert not _file(tmp_path, "T", 0, 4).exists()
        again.append_units(2, units(2, 7))
        assert read_all(again) == units(0, 9)
    finally:
        again.close()


def test_mapped_files_stay_bounded(tmp_path):
    queue = ConsumeQueue(tmp_path, "T", 0, units_per_file=PER_FILE, max_mapped_files=2)
    try:
        queue.append_units(0, units(0, 40))
        assert read_all(queue) == units(0, 40)
        assert len(queue._maps) <= 2
    finally:
        queue.close()


@pytest.mark.timeout(30)
def test_concurrent_reader_sees_only_written_units(tmp_path):
    queue = ConsumeQueue(tmp_path, "T", 0, units_per_file=7, max_mapped_files=2)
    total = 3000
    errors: list[str] = []
    done = threading.Event()

    def reader():
        at = 0
        while at < total and not done.is_set():
            view = queue.read_units(at, 50)
            for i, unit in enumerate(UNIT.iter_unpack(view)):
                if unit != units(at + i, 1)[0]:
                    errors.append(f"unit {at + i} read as {unit}")
            at += len(view) // UNIT_SIZE
        done.set()

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        at = 0
        while at < total:
            n = min(total - at, 1 + at % 13)
            at = queue.append_units(at, units(at, n))
        assert done.wait(20)
    finally:
        done.set()
        thread.join(10)
        queue.close()
    assert errors == []


_WRITER = """
import sys
import structlog
from mqcore.plugins.store_mmap.consumequeue import ConsumeQueue
structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))  # stdout: acks
queue = ConsumeQueue(sys.argv[1], "T", 0, units_per_file=7)
at = queue.max_offset
n = 1
while True:
    # unit i points at commit-log offset 10 * i: the content is known from the offset
    at = queue.append_units(at, [(10 * i, 10, i) for i in range(at, at + n)])
    print(at, flush=True)
    n = n % 11 + 1
"""


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_sigkill_while_appending_loses_no_acknowledged_unit(tmp_path, kill_writer):
    """A writer killed at random moments: after reopening, units form an exact prefix."""
    rnd = random.Random(7)
    acked = 0
    for _ in range(4):
        acked = kill_writer(_WRITER, tmp_path, rnd, 5, 400)
        queue = ConsumeQueue(tmp_path, "T", 0, units_per_file=7)
        try:
            assert queue.max_offset >= acked
            got = read_all(queue)
            assert got == [(10 * i, 10, i) for i in range(queue.max_offset)]
            assert queue.max_physical_offset == 10 * queue.max_offset
        finally:
            queue.close()


def _naive_valid_prefix(data: bytes) -> int:
    count = 0
    for offset, size, _ in UNIT.iter_unpack(data):
        if offset < 0 or size <= 0:
            break
        count += 1
    return count


@given(
    st.lists(
        st.tuples(
            st.integers(-(2**63), 2**63 - 1),
            st.sampled_from([0, 1, -1, 255, 256, 2**31 - 1, -(2**31), 65536]),
            st.integers(-(2**63), 2**63 - 1),
        ),
        max_size=20,
    )
)
def test_valid_prefix_matches_a_plain_scan(rows):
    data = b"".join(UNIT.pack(*r) for r in rows)
    assert _valid_prefix(data) == _naive_valid_prefix(data)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    per_file=st.integers(1, 5),
    steps=st.lists(
        st.one_of(
            st.integers(0, 9),
            st.sampled_from(["reopen", "packed"]),
            st.tuples(st.sampled_from(["truncate", "expire"]), st.integers(0, 30)),
        ),
        max_size=25,
    ),
)
def test_offsets_strictly_increase_across_rolls_reopens_and_cuts(tmp_path_factory, per_file, steps):
    """A model of a commit log of 10-byte records; cuts never go below retention."""
    root = tmp_path_factory.mktemp("cq")
    queue = ConsumeQueue(root, "T", 0, units_per_file=per_file)
    expected: list[tuple[int, int, int]] = []
    min_phy = 0  # the commit log's minimum offset (retention)
    next_phy = 0  # the commit log's end
    packed = False
    try:
        for step in steps:
            if step == "reopen":
                queue.close()
                queue = ConsumeQueue(root, "T", 0, units_per_file=per_file)
                queue.correct_min_offset(min_phy)  # what the store does after opening
            elif step == "packed":
                packed = not packed
            elif isinstance(step, tuple):
                kind, n = step
                if kind == "truncate":
                    cut = min(min_phy + 10 * n, next_phy)
                    queue.truncate_dirty(cut)
                    expected = [u for u in expected if u[0] < cut]
                    next_phy = cut
                else:
                    min_phy = max(min_phy, min(10 * n, next_phy))
                    queue.delete_expired(min_phy)
            else:
                before = queue.max_offset
                batch = [(next_phy + 10 * i, 10, before + i) for i in range(step)]
                next_phy += 10 * step
                data = b"".join(UNIT.pack(*u) for u in batch) if packed else batch
                after = queue.append_units(before, data)
                assert after == before + step == queue.max_offset
                expected.extend(batch)
            assert queue.max_offset == len(expected)
            first_kept = next((i for i, u in enumerate(expected) if u[0] >= min_phy), None)
            assert queue.min_offset == (len(expected) if first_kept is None else first_kept)
        got = read_all(queue)
        assert got == expected[queue.min_offset :]
        phys = [u[0] for u in got]
        assert all(a < b for a, b in itertools.pairwise(phys))
    finally:
        queue.close()


def test_append_unit_matches_append_units_across_rolls_and_reopen(cq, tmp_path):
    """The one-unit fast path writes what the batch path writes, rolls files and reopens."""
    expected = units(0, 3 * PER_FILE + 1)
    for i, (phy, size, code) in enumerate(expected):
        assert cq.append_unit(i, phy, size, code) == i + 1
    assert read_all(cq) == expected
    assert cq.max_physical_offset == expected[-1][0] + expected[-1][1]
    cq.close()
    again = ConsumeQueue(tmp_path, "TopicA", 3, units_per_file=PER_FILE)
    try:
        assert read_all(again) == expected
    finally:
        again.close()


def test_append_unit_refuses_what_append_units_refuses(cq):
    cq.append_unit(0, 100, 10, 1)
    with pytest.raises(InvalidArgumentError, match="contiguous"):
        cq.append_unit(5, 110, 10, 1)
    with pytest.raises(InvalidArgumentError, match="dispatched twice"):
        cq.append_unit(1, 50, 10, 1)
    assert cq.max_offset == 1
    cq.close()
    with pytest.raises(StoreClosedError):
        cq.append_unit(1, 110, 10, 1)
