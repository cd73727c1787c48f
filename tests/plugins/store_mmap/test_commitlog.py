"""MappedFile, TransientStorePool and CommitLog: segments, rolls, blank markers, positions."""

from __future__ import annotations

import errno
import os
import time

import pytest

from mqcore import codec
from mqcore.errors import DiskFullError, StoreCorruptedError
from mqcore.message import Message, MessageExt
from mqcore.plugins.store_mmap import mappedfile
from mqcore.plugins.store_mmap.commitlog import CommitLog
from mqcore.plugins.store_mmap.mappedfile import MappedFile, TransientStorePool, segment_name

HOST = codec.host_bytes("127.0.0.1:10911")


def _prepared(count: int, size: int = 100, topic: str = "T") -> list[codec.Prepared]:
    messages = [Message(topic=topic, body=bytes([i % 256]) * size) for i in range(count)]
    return codec.prepare(messages, 1_700_000_000_000)


def _put(log: CommitLog, prepared: list[codec.Prepared], queue_offset: int = 0):
    return log.put_batch(
        prepared,
        sum(p[0] for p in prepared),
        queue_id=0,
        queue_offset=queue_offset,
        store_timestamp=1_700_000_000_001,
        store_host=HOST,
    )


def _records(log: CommitLog) -> list[MessageExt]:
    out = []
    for mf in log.files:
        out.extend(codec.iter_records(mf.view, 0, mf.wrote_position))
    return out


# --- MappedFile --------------------------------------------------------------------------


def test_segment_names_are_twenty_digit_offsets():
    """Segment files are named by their start offset, zero-padded to 20 digits."""
    assert segment_name(0) == "0" * 20
    assert segment_name(1 << 30) == "00000000001073741824"


def test_mapped_file_positions_append_and_flush(tmp_path):
    """append moves wrote/committed; flush catches flushed up; the file is preallocated."""
    path = tmp_path / segment_name(4096)
    mf = MappedFile(path, 4096, create=True)
    try:
        assert os.path.getsize(path) == 4096
        assert mf.file_from_offset == 4096 and mf.file_end_offset == 8192
        assert mf.append(b"abc") == 0
        assert mf.append(b"defg") == 3
        assert (mf.wrote_position, mf.committed_position, mf.flushed_position) == (7, 7, 0)
        assert mf.flush() == 7
        assert bytes(mf.read(0, 7)) == b"abcdefg"
        assert mf.free == 4096 - 7 and not mf.is_full
        assert mf.find(b"de", 0) == 3 and mf.find(b"zz", 0) == -1
        mf.release_pages(4096)  # pages leave the process, not the file
        assert bytes(mf.read(0, 7)) == b"abcdefg"
    finally:
        mf.close()
    assert (tmp_path / segment_name(4096)).read_bytes()[:7] == b"abcdefg"


def test_mapped_file_rejects_a_file_of_the_wrong_size(tmp_path):
    """Opening with another segment size than the file was written with is an error."""
    path = tmp_path / segment_name(0)
    path.write_bytes(bytes(100))
    with pytest.raises(StoreCorruptedError, match="segment_size"):
        MappedFile(path, 4096)


def test_set_positions_zeroes_the_rest(tmp_path):
    """Recovery's cut: positions move back and the bytes after them become zero."""
    mf = MappedFile(tmp_path / segment_name(0), 1024, create=True)
    try:
        mf.append(b"x" * 100)
        mf.set_positions(40)
        assert mf.wrote_position == mf.committed_position == 40
        assert mf.flushed_position == 0  # nothing was flushed before the cut
        assert bytes(mf.read(0, 100)) == b"x" * 40 + bytes(60)
        mf.flush()
        mf.set_positions(30)
        assert mf.flushed_position == 30
    finally:
        mf.close()


def test_enospc_on_preallocation_is_disk_full_naming_the_path(tmp_path, monkeypatch):
    """A full disk at segment creation raises DiskFullError and leaves no file behind."""

    def no_space(fd, size):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(mappedfile, "_grow", no_space)
    path = tmp_path / segment_name(0)
    with pytest.raises(DiskFullError) as info:
        MappedFile(path, 4096, create=True)
    assert str(path) in str(info.value)
    assert info.value.errno == errno.ENOSPC
    assert not path.exists()
    assert list(tmp_path.iterdir()) == []


def test_transient_buffer_commit_and_pool_reuse(tmp_path):
    """Appends land in the buffer; commit copies them into the file; full files give it back."""
    pool = TransientStorePool(1024, pool_size=1)
    mf = MappedFile(tmp_path / segment_name(0), 1024, create=True, pool=pool)
    try:
        assert mf.uses_buffer and pool.available == 0
        mf.append(b"hello")
        assert (mf.wrote_position, mf.committed_position) == (5, 0)
        # Readers get a copy of uncommitted bytes; the file itself is still empty.
        assert bytes(mf.read(0, 5)) == b"hello"
        assert bytes(mf.view[:5]) == bytes(5)
        assert mf.commit() == 5
        assert bytes(mf.view[:5]) == b"hello"
        # A second file finds the pool empty and writes straight into its map.
        other = MappedFile(tmp_path / segment_name(1024), 1024, create=True, pool=pool)
        assert not other.uses_buffer
        other.close()
        mf.append(b"y" * (1024 - 5))
        mf.commit()
        assert not mf.uses_buffer and pool.available == 1
    finally:
        mf.close()


# --- CommitLog ----------------------------------------------------------------------------


def test_batch_fits_in_one_write(tmp_path):
    """A batch that fits is one chunk of consecutive records with the right offsets."""
    log = CommitLog(tmp_path, 64 * 1024)
    try:
        prepared = _prepared(10)
        chunks = _put(log, prepared, queue_offset=5)
        assert chunks == [(0, 10)]
        records = _records(log)
        assert [r.queue_offset for r in records] == list(range(5, 15))
        assert records[3].commitlog_offset == 3 * prepared[0][0]
        assert log.max_offset == 10 * prepared[0][0] == log.committed_offset
    finally:
        log.close()


def test_batch_split_at_segment_roll_with_blank_marker(tmp_path):
    """A batch that does not fit is split; the rest of the segment holds a blank marker."""
    log = CommitLog(tmp_path, 1024)
    try:
        prepared = _prepared(12)  # 12 x ~200 bytes: three segments
        size = prepared[0][0]
        chunks = _put(log, prepared)
        assert len(chunks) == 3
        assert sum(n for _, n in chunks) == 12
        per = (1024 - codec.BLANK_SIZE) // size
        assert chunks[0] == (0, per)
        assert chunks[1] == (1024, per)
        assert chunks[2][0] == 2048
        first = log.files[0]
        kind, blank = codec.check_record(first.view, per * size, 1024)
        assert kind == codec.BLANK and blank == 1024 - per * size
        assert first.is_full
        records = _records(log)
        assert [r.queue_offset for r in records] == list(range(12))
        assert sorted(p.name for p in (tmp_path / "commitlog").iterdir()) == [
            segment_name(0),
            segment_name(1024),
            segment_name(2048),
        ]
    finally:
        log.close()


def test_reopen_and_truncate(tmp_path):
    """A reopened log cut at an offset keeps exactly the bytes before it; later files go."""
    log = CommitLog(tmp_path, 1024)
    prepared = _prepared(12)
    _put(log, prepared)
    log.close()
    log = CommitLog(tmp_path, 1024)
    try:
        assert len(log.files) == 3
        cut = 1024 + prepared[0][0]
        log.truncate(cut)
        assert len(log.files) == 2
        assert log.max_offset == cut
        assert bytes(log.files[1].view[prepared[0][0] :]) == bytes(1024 - prepared[0][0])
        # Appends continue exactly at the cut.
        assert _put(log, _prepared(1))[0][0] == cut
    finally:
        log.close()


def test_full_disk_at_roll_writes_nothing_of_the_batch(tmp_path, monkeypatch):
    """The segments a batch needs are created before any of it is written."""
    log = CommitLog(tmp_path, 1024)
    try:
        _put(log, _prepared(2))
        before = (log.max_offset, bytes(log.files[0].view))

        def no_space(fd, size):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(mappedfile, "_grow", no_space)
        with pytest.raises(DiskFullError):
            _put(log, _prepared(12))
        assert (log.max_offset, bytes(log.files[0].view)) == before
        monkeypatch.undo()
        assert sum(n for _, n in _put(log, _prepared(12))) == 12
    finally:
        log.close()


def test_file_for_read_and_delete_segments(tmp_path):
    """Offsets map to segments in O(1); retention drops the oldest, never the last."""
    log = CommitLog(tmp_path, 1024)
    try:
        prepared = _prepared(12)
        _put(log, prepared)
        assert log.file_for(1500) is log.files[1]
        assert log.file_for(10_000) is None
        record = log.read(1024, prepared[0][0])
        assert record is not None and MessageExt(record).commitlog_offset == 1024
        assert log.read(log.max_offset, 10) is None  # not written yet
        kept_view = log.read(0, prepared[0][0])
        gone = log.delete_segments(5)
        assert len(gone) == 2 and len(log.files) == 1
        assert log.min_offset == 2048
        assert log.read(0, 10) is None
        # A view taken before the deletion still reads the old bytes.
        assert kept_view is not None and MessageExt(kept_view).queue_offset == 0
    finally:
        log.close()


def test_misaligned_or_missing_segments_are_refused(tmp_path):
    """A segment gap or a name that is not a multiple of the segment size is corruption."""
    log = CommitLog(tmp_path, 1024)
    _put(log, _prepared(12))
    log.close()
    (tmp_path / "commitlog" / segment_name(1024)).unlink()
    with pytest.raises(StoreCorruptedError, match="misses segments"):
        CommitLog(tmp_path, 1024)
    (tmp_path / "commitlog" / segment_name(2048)).rename(tmp_path / "commitlog" / segment_name(5))
    with pytest.raises(StoreCorruptedError, match="multiple of segment_size"):
        CommitLog(tmp_path, 1024)


def test_read_only_log_sees_whole_files_and_refreshes(tmp_path):
    """A read-only log maps existing files and picks up new segments on refresh."""
    writer = CommitLog(tmp_path, 1024)
    reader = None
    try:
        _put(writer, _prepared(3))
        reader = CommitLog(tmp_path, 1024, read_only=True)
        assert len(reader.files) == 1
        _put(writer, _prepared(12), queue_offset=3)
        reader.refresh()
        assert [mf.file_from_offset for mf in reader.files] == [0, 1024, 2048, 3072][
            : len(writer.files)
        ]
        got = reader.read(1024, 100)
        assert got is not None
    finally:
        if reader is not None:
            reader.close()
        writer.close()


def test_interrupted_segment_creation_is_cleaned_up(tmp_path):
    """A ``.tmp`` file left by a crash during creation is removed by the next writer."""
    log = CommitLog(tmp_path, 1024)
    _put(log, _prepared(1))
    log.close()
    leftover = tmp_path / "commitlog" / (segment_name(1024) + ".tmp")
    leftover.write_bytes(b"")
    log = CommitLog(tmp_path, 1024)
    try:
        assert not leftover.exists()
        assert len(log.files) == 1
    finally:
        log.close()


@pytest.mark.timeout(30)
def test_page_warmer_keeps_ahead_of_the_writer(tmp_path):
    """The warmer faults in pages ahead of the write position; closing stops it cleanly."""
    from mqcore.plugins.store_mmap.pagewarmer import PageWarmer

    log = CommitLog(tmp_path, 4 * 1024 * 1024)
    warmer = PageWarmer(log.current, window=1024 * 1024)
    try:
        if not warmer.enabled:
            pytest.skip("madvise(MADV_POPULATE_WRITE) is not available here")
        log.warmer = warmer.start()
        _put(log, _prepared(4))
        mf = log.current()
        assert mf is not None
        warmer.wake()
        deadline = time.monotonic() + 10
        while mf.warmed_position < 1024 * 1024 and not mf.warm_failed:
            assert time.monotonic() < deadline, "the warmer never ran"
            time.sleep(0.01)
        if mf.warm_failed:
            pytest.skip("the kernel refused MADV_POPULATE_WRITE on this file system")
        assert mf.warmed_position >= 1024 * 1024
        # Records written over warmed pages read back intact.
        assert [r.queue_offset for r in _records(log)] == [0, 1, 2, 3]
    finally:
        warmer.stop()
        log.close()
    assert mf.warm(2 * 1024 * 1024) is False  # closed: the warmer may not touch the map


def test_segment_blocks_are_allocated_a_chunk_at_a_time(tmp_path, monkeypatch):
    """A new segment reserves its first chunk; appends allocate more; a full disk refuses
    the append before writing into a hole."""
    monkeypatch.setattr(mappedfile, "ALLOCATION_CHUNK", 64 * 1024)
    path = tmp_path / segment_name(0)
    mf = MappedFile(path, 1024 * 1024, create=True)
    try:
        assert os.path.getsize(path) == 1024 * 1024
        assert mf.allocated == 64 * 1024
        assert os.stat(path).st_blocks * 512 < 512 * 1024  # the rest is still a hole
        mf.append(b"x" * (100 * 1024))
        assert mf.allocated == 128 * 1024
        assert os.stat(path).st_blocks * 512 >= 128 * 1024

        def no_space(*args):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(mappedfile, "_grow", no_space)
        with pytest.raises(DiskFullError, match="allocating"):
            mf.append(b"y" * (64 * 1024))
        assert mf.wrote_position == 100 * 1024
        assert bytes(mf.read(100 * 1024, 10)) == bytes(10)
    finally:
        mf.close()


def test_recovery_reads_skip_the_holes_of_a_segment(tmp_path):
    """data_ranges skips holes; find and the tail zeroing still see every data byte."""
    size = 16 * 1024 * 1024
    path = tmp_path / segment_name(0)
    with open(path, "wb") as fh:
        fh.truncate(size)  # all hole
        fh.seek(4096)
        fh.write(b"\xda\xa3\x20\xa7 head")
        fh.seek(12 * 1024 * 1024)
        fh.write(b"late \xda\xa3\x20\xa7")
    mf = MappedFile(path, size)
    try:
        ranges = list(mf.data_ranges(0, size))
        covered = sum(b - a for a, b in ranges)
        assert any(a <= 4096 < b for a, b in ranges)
        assert any(a <= 12 * 1024 * 1024 < b for a, b in ranges)
        if len(ranges) > 1:  # the file system reports holes (ext4, xfs, tmpfs, btrfs)
            assert covered < size // 2
        assert mf.find(b"\xda\xa3\x20\xa7", 0) == 4096
        assert mf.find(b"\xda\xa3\x20\xa7", 4097) == 12 * 1024 * 1024 + 5
        assert mf.find(b"\xda\xa3\x20\xa7", 12 * 1024 * 1024 + 6) == -1
        mf.set_positions(8192)  # cuts: the late bytes are zeroed, the hole stays a hole
        assert mf.find(b"\xda\xa3\x20\xa7", 4097) == -1
        with open(path, "rb") as fh:
            fh.seek(12 * 1024 * 1024)
            assert fh.read(16) == bytes(16)
    finally:
        mf.close()
