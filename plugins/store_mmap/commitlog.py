"""The commit log: every message of every queue, in arrival order, in fixed-size segments.

Layout (as RocketMQ): ``<root>/commitlog/`` holds segment files of ``segment_size`` bytes
(1 GiB by default), each named by the commit-log offset of its first byte as 20 zero-padded
digits, so offset ``o`` lives in file ``o // segment_size`` at position ``o % segment_size``.
Records use the layout of :mod:`mqcore.codec`. A record never straddles two files: when the
next record (plus the 8 bytes of a blank marker) does not fit in the rest of a segment, the
rest is filled with a blank marker (``BLANK_MAGIC_CODE``) and the record goes to the next one.

Writes are serialised by the store's write lock; reads take no lock. The list of segments is
only ever replaced as a whole (a roll appends, retention drops from the front), so a reader
holding the old list keeps a consistent picture.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mqcore.codec import pack, pack_blank
from mqcore.errors import StoreCorruptedError
from mqcore.logs import get_logger
from mqcore.record.layout import BLANK_MAGIC_CODE, BLANK_SIZE, MESSAGE_MAGIC_CODE, SIZE_MAGIC
from mqcore.record.prepared import Prepared, size_of

from .mappedfile import MappedFile, TransientStorePool, segment_name

__all__ = ["CommitLog"]

log = get_logger(__name__)

_WARM_AHEAD = 16 * 1024 * 1024  # wake the page warmer when less is warmed ahead
#: bytes written or read through the maps between two releases of their pages
RELEASE_EVERY = 64 * 1024 * 1024


def _whole(path: str, size: int) -> bool:
    """Whether the records of a segment file chain up to its end without running past it
    (a whole segment of another size), rather than a record being cut by the file's end."""
    with open(path, "rb") as f:
        data = f.read()
    pos = 0
    length: int
    magic: int
    while pos + 8 <= size:
        length, magic = SIZE_MAGIC.unpack_from(data, pos)
        if magic == BLANK_MAGIC_CODE:
            return pos + length == size
        if magic != MESSAGE_MAGIC_CODE or length <= 0:
            return data[pos:].count(0) == size - pos  # the unwritten rest of a segment
        pos += length
    return pos <= size


class CommitLog:
    """The segmented commit log under ``<root>/commitlog``.

    :param root: the store directory.
    :param segment_size: bytes per segment file.
    :param read_only: map existing files read-only; never create or change anything.
    :param pool: a :class:`TransientStorePool` to write through in-memory buffers.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        segment_size: int,
        *,
        read_only: bool = False,
        pool: TransientStorePool | None = None,
    ) -> None:
        self.directory = Path(root) / "commitlog"
        self.segment_size = segment_size
        self.read_only = read_only
        self.pool = pool
        self.files: list[MappedFile] = []
        self._current: MappedFile | None = None  # the segment being written
        self._buffered: list[MappedFile] = []  # segments with uncommitted transient buffers
        #: commit-log offset where the last put_batch started (undo point of a failed put)
        self.batch_start = 0
        #: set by the store: a PageWarmer to wake as the writer advances
        self.warmer: Any = None
        self._since_release = 0
        if not read_only:
            self.directory.mkdir(parents=True, exist_ok=True)
        self._load()

    # --- files ------------------------------------------------------------------------

    def _scan(self) -> list[int]:
        starts = []
        if self.directory.is_dir():
            for entry in os.scandir(self.directory):
                if len(entry.name) == 20 and entry.name.isdigit():
                    starts.append(int(entry.name))
                elif entry.name.endswith(".tmp") and not self.read_only:
                    os.unlink(entry.path)  # a segment creation interrupted by a crash
        starts.sort()
        return starts

    def _load(self) -> None:
        starts = self._scan()
        for start in starts:
            if start % self.segment_size:
                raise StoreCorruptedError(
                    f"commit-log file {segment_name(start)} in {str(self.directory)!r} does not "
                    f"start at a multiple of segment_size={self.segment_size}; open the store "
                    f"with the segment_size it was written with",
                    path=str(self.directory / segment_name(start)),
                    offset=start,
                )
        self._check_sizes(starts)
        for prev, cur in itertools.pairwise(starts):
            if cur != prev + self.segment_size:
                raise StoreCorruptedError(
                    f"commit log {str(self.directory)!r} misses segments between offsets "
                    f"{prev + self.segment_size} and {cur}; restore the missing files",
                    path=str(self.directory / segment_name(cur)),
                    offset=prev + self.segment_size,
                )
        files = [self._open(start) for start in starts]
        if self.read_only:
            for mf in files:
                mf.wrote_position = mf.committed_position = mf.file_size
        self.files = files

    def _check_sizes(self, starts: list[int]) -> None:
        """Refuse segment files of the wrong size, with the hint that fits.

        When every segment has the same other size, the store was written with another
        ``segment_size``; a file that differs from the others (or is no plausible segment
        size) was cut short or grew, and only restoring it helps.
        """
        sizes = {start: os.stat(self.directory / segment_name(start)).st_size for start in starts}
        wrong = [start for start, size in sizes.items() if size != self.segment_size]
        if not wrong:
            return
        start = wrong[0]
        size = sizes[start]
        path = str(self.directory / segment_name(start))
        same = len(wrong) == len(starts) and len(set(sizes.values())) == 1
        if same and size > 0 and all(s % size == 0 for s in starts) and _whole(path, size):
            hint = f"the store was written with segment_size={size}: open it with that"
        else:
            how = "cut short" if size < self.segment_size else "grown"
            hint = (
                f"the file was {how} (the other segments have {self.segment_size} bytes); "
                "restore it from a replica or backup, or move the store aside"
            )
        raise StoreCorruptedError(
            f"commit-log file {path!r} has {size} bytes, expected {self.segment_size}; {hint}",
            path=path,
            offset=start,
        )

    def _open(self, start: int, *, create: bool = False) -> MappedFile:
        return MappedFile(
            self.directory / segment_name(start),
            self.segment_size,
            create=create,
            read_only=self.read_only,
            pool=self.pool if create else None,
        )

    def _new_file(self) -> MappedFile:
        start = self.files[-1].file_end_offset if self.files else 0
        if self.pool is not None:
            # Full segments give their buffers back once committed: do it now, so that the
            # new segment gets one too (RocketMQ refuses puts when the pool runs dry) and
            # segments are always committed in order.
            self.commit()
        mf = self._open(start, create=True)
        if mf.uses_buffer:
            self._buffered = [*self._buffered, mf]
        self.files = [*self.files, mf]
        return mf

    def refresh(self) -> None:
        """Read-only openers: map segments created since, forget deleted ones."""
        starts = self._scan()
        if not starts:
            self.files = []
            return
        files = [mf for mf in self.files if mf.file_from_offset >= starts[0]]
        known = {mf.file_from_offset for mf in files}
        for start in starts:
            if start not in known:
                try:
                    mf = self._open(start)
                except FileNotFoundError:
                    continue  # deleted under us by retention
                mf.wrote_position = mf.committed_position = mf.file_size
                files.append(mf)
        files.sort(key=lambda f: f.file_from_offset)
        self.files = files

    # --- offsets ----------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        """Offset of the first byte still stored (start of the oldest segment)."""
        files = self.files
        return files[0].file_from_offset if files else 0

    @property
    def max_offset(self) -> int:
        """Offset one past the last byte appended (the next record's offset, before a roll)."""
        last = self._last_written()
        return last.file_from_offset + last.wrote_position if last is not None else 0

    def _last_written(self) -> MappedFile | None:
        if self._current is not None:
            return self._current
        files = self.files
        return files[-1] if files else None

    @property
    def committed_offset(self) -> int:
        """Offset one past the last byte present in the files (readable)."""
        last = self._last_written()
        return last.file_from_offset + last.committed_position if last is not None else 0

    @property
    def flushed_offset(self) -> int:
        """Offset one past the last byte known to be on disk."""
        files = self.files
        for mf in reversed(files):
            if mf.flushed_position:
                return mf.file_from_offset + mf.flushed_position
        return files[0].file_from_offset if files else 0

    def file_for(self, offset: int) -> MappedFile | None:
        """The segment holding commit-log ``offset``, or None."""
        files = self.files
        if not files:
            return None
        index = (offset - files[0].file_from_offset) // self.segment_size
        if 0 <= index < len(files):
            return files[index]
        return None

    def read(self, offset: int, size: int) -> memoryview | None:
        """``size`` bytes at ``offset`` (zero-copy), or None if they are not (or no more) there."""
        mf = self.file_for(offset)
        if mf is None:
            return None
        pos = offset - mf.file_from_offset
        if pos + size > mf.wrote_position:
            return None
        return mf.read(pos, size)

    # --- writing ----------------------------------------------------------------------

    def current(self) -> MappedFile | None:
        """The segment being written (None before the first write)."""
        return self._current

    def prepare_first_segment(self) -> None:
        """Create the first segment of an empty log ahead of the first write."""
        if not self.files and not self.read_only:
            self._writable()

    def _writable(self) -> MappedFile:
        mf = self._current
        if mf is not None and not mf.is_full:
            return mf
        files = self.files
        if mf is not None and mf is not files[-1]:
            mf = files[files.index(mf) + 1]  # created ahead of time by _ensure_room
        elif files and not files[-1].is_full:
            mf = files[-1]
        else:
            mf = self._new_file()
        self._current = mf
        return mf

    def _ensure_room(self, sizes: Sequence[int]) -> None:
        """Create every segment a batch will roll into *before* writing any of it.

        A full disk then fails the batch cleanly, with nothing of it written.
        """
        mf = self._writable()
        free = mf.file_size - mf.wrote_position - BLANK_SIZE
        ahead = 0
        for size in sizes:
            if size > free:
                ahead += 1
                free = self.segment_size - BLANK_SIZE
            free -= size
        files = self.files
        index = files.index(mf)
        while len(files) - 1 - index < ahead:
            self._new_file()
            files = self.files

    def _end_segment(self, mf: MappedFile) -> None:
        rest = mf.file_size - mf.wrote_position
        if mf.uses_buffer:
            mf.append(pack_blank(rest))  # a reused buffer holds an older segment's bytes
        else:
            # Header only: the rest of a fresh segment is already zero.
            mf.append(SIZE_MAGIC.pack(rest, BLANK_MAGIC_CODE))
        mf.wrote_position = mf.file_size
        if not mf.uses_buffer:
            mf.committed_position = mf.file_size

    def put_batch(
        self,
        prepared: Sequence[Prepared],
        total_size: int,
        queue_id: int,
        queue_offset: int,
        store_timestamp: int,
        store_host: tuple[bytes, int],
        born_host: tuple[bytes, int] | None = None,
    ) -> list[tuple[int, int]]:
        """Append records for ``prepared`` (one write per segment touched).

        ``total_size`` is the sum of the record sizes. Returns ``(commitlog_offset, count)``
        chunks: the records of each chunk are consecutive from that offset. The caller checked
        that every record fits in an empty segment.
        """
        mf = self._current
        # Where this batch starts, for the caller's rollback (set before anything can fail).
        self.batch_start = mf.file_from_offset + mf.wrote_position if mf is not None else 0
        if mf is None or mf.wrote_position >= mf.file_size:
            mf = self._writable()
        free = mf.file_size - mf.wrote_position - BLANK_SIZE
        if total_size <= free:  # the common case: the whole batch fits
            phys = mf.file_from_offset + mf.wrote_position
            mf.append(
                pack(
                    prepared,
                    queue_id=queue_id,
                    queue_offset=queue_offset,
                    commitlog_offset=phys,
                    store_timestamp=store_timestamp,
                    store_host=store_host,
                    born_host=born_host,
                )
            )
            warmer = self.warmer
            if warmer is not None and mf.wrote_position + _WARM_AHEAD > mf.warmed_position:
                warmer.wake()
            self._since_release += total_size
            if self._since_release >= RELEASE_EVERY:
                self.release_cold_pages()
            return [(phys, len(prepared))]
        self._ensure_room(list(map(size_of, prepared)))
        chunks: list[tuple[int, int]] = []
        i = 0
        n = len(prepared)
        while i < n:
            mf = self._writable()
            free = mf.file_size - mf.wrote_position - BLANK_SIZE
            k = 0
            acc = 0
            while i + k < n and acc + prepared[i + k][0] <= free:
                acc += prepared[i + k][0]
                k += 1
            if k == 0:
                self._end_segment(mf)
                continue
            phys = mf.file_from_offset + mf.wrote_position
            mf.append(
                pack(
                    prepared[i : i + k],
                    queue_id=queue_id,
                    queue_offset=queue_offset + i,
                    commitlog_offset=phys,
                    store_timestamp=store_timestamp,
                    store_host=store_host,
                    born_host=born_host,
                )
            )
            chunks.append((phys, k))
            i += k
        if self.warmer is not None:
            self.warmer.wake()
        return chunks

    def append_copy(self, data: memoryview) -> int:
        """Append bytes of another commit log (a slave copies its master's) at the end, as
        they lie there, segment by segment; returns the new end.

        Segment ends come as the other log wrote them (a blank marker, then zeros), so with
        the same ``segment_size`` a chunk never runs past a segment.
        """
        pos = 0
        while pos < len(data):
            mf = self._writable()
            n = min(mf.file_size - mf.wrote_position, len(data) - pos)
            mf.append(data[pos : pos + n])
            pos += n
        if self.warmer is not None:
            self.warmer.wake()
        return self.max_offset

    def commit(self) -> int:
        """Move transient buffers into the files, oldest first; returns the committed offset."""
        buffered = self._buffered
        for mf in buffered:
            mf.commit()
        if any(not mf.uses_buffer for mf in buffered):
            self._buffered = [mf for mf in self._buffered if mf.uses_buffer]
        return self.committed_offset

    def flush(self) -> int:
        """fdatasync whatever is committed but not flushed; returns the flushed offset."""
        pending = []
        for mf in reversed(self.files):
            if mf.flushed_position >= mf.file_size:
                break  # segments are flushed in order: everything older is on disk
            pending.append(mf)
        for mf in reversed(pending):
            mf.flush()
        return self.flushed_offset

    def release_cold_pages(self) -> None:
        """Unmap from this process (not from the page cache) the pages of every segment.

        Pages below each segment's write position go (dirty ones stay dirty in the page
        cache: ``MADV_DONTNEED`` on a shared file mapping loses nothing); the warmed pages
        ahead of the writer stay. Readers and the writer map pages back on demand, with a
        minor fault. Called every :data:`RELEASE_EVERY` bytes written or read, and after
        each periodic flush, so the resident set stays flat however much data streams by.
        """
        self._since_release = 0
        for mf in self.files:
            mf.release_pages(mf.wrote_position)

    def note_io(self, nbytes: int) -> None:
        """Count bytes written or read through the maps; release pages now and then."""
        self._since_release += nbytes
        if self._since_release >= RELEASE_EVERY:
            self.release_cold_pages()

    # --- recovery and retention --------------------------------------------------------

    def truncate(self, offset: int) -> None:
        """Keep exactly the bytes below ``offset``; later segments are deleted.

        Recovery cuts a torn tail with it; a failed put undoes its batch.
        """
        keep = []
        for mf in self.files:
            if mf.file_from_offset >= offset and mf.file_from_offset != 0:
                log.warning("segment_deleted_past_cut", path=str(mf.path), cut=offset)
                mf.destroy()
                continue
            if mf.file_end_offset <= offset:
                if mf.wrote_position < mf.file_size:  # just loaded: the whole file is valid
                    mf.wrote_position = mf.committed_position = mf.file_size
            else:
                mf.set_positions(max(0, offset - mf.file_from_offset))
            keep.append(mf)
        self.files = keep
        self._current = keep[-1] if keep else None

    def delete_segments(self, count: int) -> list[MappedFile]:
        """Retention: drop the ``count`` oldest segments (never the last); returns them."""
        files = self.files
        count = min(count, len(files) - 1)
        if count <= 0:
            return []
        gone = files[:count]
        self.files = files[count:]  # readers holding the old list still see valid maps
        for mf in gone:
            mf.destroy()
        return gone

    def close(self) -> None:
        """Commit, flush and unmap everything."""
        if not self.read_only:
            self.commit()
            self.flush()
        files, self.files = self.files, []
        self._current = None
        for mf in files:
            mf.close()
