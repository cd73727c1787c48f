"""One preallocated commit-log segment file, mapped into memory (RocketMQ's MappedFile).

A segment is created at its full size, with real disk blocks (``posix_fallocate``) for its
first :data:`ALLOCATION_CHUNK` bytes and then a chunk at a time ahead of the writer, so that
writing through the map never hits a hole on a full disk (which would kill the process with
SIGBUS), while a fresh store does not take a whole 1 GiB segment of disk at once. Running
out of space shows up as :class:`~mqcore.errors.DiskFullError` before anything is written.

Three positions, all relative to the start of the file, only ever move forward (except when
recovery cuts a torn tail):

- ``wrote_position``: bytes appended so far;
- ``committed_position``: bytes present in the file. Equal to ``wrote_position`` unless the
  file writes into a transient buffer (see :class:`TransientStorePool`), whose content a
  commit thread copies into the file later;
- ``flushed_position``: bytes known to be on disk (``fdatasync``).

Readers use :meth:`MappedFile.view`, a zero-copy memoryview of the map.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import mmap
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mqcore.errors import DiskFullError, StoreCorruptedError
from mqcore.logs import get_logger

from .pagewarmer import populate_write

__all__ = ["MappedFile", "TransientStorePool", "segment_name"]

log = get_logger(__name__)

_PAGE = mmap.PAGESIZE
#: disk blocks of a segment are allocated this much at a time, ahead of the writer
ALLOCATION_CHUNK = 64 * 1024 * 1024
_ZERO_CHUNK = 4 * 1024 * 1024  # bytes read at a time when recovery zeroes a cut tail


def segment_name(start_offset: int) -> str:
    """The file name of a segment starting at ``start_offset``: 20 zero-padded digits."""
    return f"{start_offset:020d}"


def _grow(fd: int, size: int) -> None:
    """Give the file ``size`` bytes of real disk blocks (tests replace this to fake ENOSPC)."""
    os.posix_fallocate(fd, 0, size)


def _disk_full(path: Path, what: str, exc: OSError) -> DiskFullError:
    error = DiskFullError(
        errno.ENOSPC,
        f"disk full while {what} {str(path)!r}: free some space (or lower "
        f"file_reserved_time_hours / disk_max_used_space_ratio); nothing acknowledged was lost "
        f"and the store stays readable",
    )
    error.filename = str(path)
    error.__cause__ = exc
    return error


@contextlib.contextmanager
def disk_full_as_error(path: Path, what: str) -> Iterator[None]:
    """Raise ENOSPC/EDQUOT from the block as :class:`DiskFullError` naming ``path``."""
    try:
        yield
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise _disk_full(path, what, exc) from exc
        raise


def _create(path: Path, size: int, preallocate: int | None = None) -> int:
    """Create ``path`` with ``size`` bytes, atomically: a crash never leaves a short segment
    behind, only a ``.tmp`` file that the next writer removes.

    The first ``preallocate`` bytes (all by default) get real disk blocks now; the rest is a
    hole until :meth:`MappedFile.append` allocates it, a chunk at a time.
    """
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        if preallocate is not None and preallocate < size:
            os.ftruncate(fd, size)
            if preallocate > 0:
                _grow(fd, preallocate)
        else:
            _grow(fd, size)
        os.rename(tmp, path)
    except OSError as exc:
        os.close(fd)
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise _disk_full(path, "preallocating", exc) from exc
        raise
    try:
        # Make the new name durable, or a flushed segment could vanish on power loss.
        dfd = os.open(path.parent, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass
    return fd


class TransientStorePool:
    """In-memory write buffers lent to segments (RocketMQ's TransientStorePool).

    Writers copy records into a buffer instead of the map; a background commit thread moves
    them into the file with ``pwrite``, which releases the GIL and takes the page-cache work
    (page faults, block allocation) off the producer's path. Readers always read the file, so
    a record becomes visible once committed. A process crash loses what was not committed.
    Buffers are allocated lazily and reused; when all are lent, a segment writes directly
    into its map instead.
    """

    def __init__(self, buffer_size: int, pool_size: int = 2) -> None:
        self.buffer_size = buffer_size
        self.pool_size = pool_size
        self._free: list[bytearray] = []
        self._lent = 0
        self._lock = threading.Lock()

    def borrow(self) -> bytearray | None:
        """A buffer of ``buffer_size`` bytes, or None when every buffer is in use."""
        with self._lock:
            if self._free:
                self._lent += 1
                return self._free.pop()
            if self._lent < self.pool_size:
                self._lent += 1
                return bytearray(self.buffer_size)  # calloc: pages appear as they are used
            return None

    def give_back(self, buffer: bytearray) -> None:
        """Return a buffer whose content has been committed."""
        with self._lock:
            self._lent -= 1
            self._free.append(buffer)

    @property
    def available(self) -> int:
        """Buffers that :meth:`borrow` can still hand out."""
        with self._lock:
            return self.pool_size - self._lent


class MappedFile:
    """A segment file of ``file_size`` bytes starting at commit-log offset ``file_from_offset``.

    ``create=True`` makes (and preallocates) a new file; otherwise the file must exist with
    exactly ``file_size`` bytes. ``read_only`` maps it read-only and allows no writes.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        file_size: int,
        *,
        create: bool = False,
        read_only: bool = False,
        pool: TransientStorePool | None = None,
    ) -> None:
        self.path = Path(path)
        self.file_size = file_size
        self.file_from_offset = int(self.path.name)
        self.read_only = read_only
        self.wrote_position = 0
        self.committed_position = 0
        self.flushed_position = 0
        self._pool = pool
        self._buffer: bytearray | None = None
        self._closed = False
        flags = os.O_RDONLY if read_only else os.O_RDWR
        if create:
            fd = _create(self.path, file_size, min(file_size, ALLOCATION_CHUNK))
            self.allocated = min(file_size, ALLOCATION_CHUNK)
        else:
            fd = os.open(self.path, flags | os.O_CLOEXEC)
            self.allocated = 0  # unknown: checked (cheaply) again on the first append
        try:
            if not create:
                actual = os.fstat(fd).st_size
                if actual != file_size:
                    raise StoreCorruptedError(
                        f"commit-log file {str(self.path)!r} has {actual} bytes, expected "
                        f"{file_size}; open the store with the segment_size it was written "
                        f"with",
                        path=str(self.path),
                        offset=self.file_from_offset,
                    )
            access = mmap.ACCESS_READ if read_only else mmap.ACCESS_WRITE
            self._mm = mmap.mmap(fd, file_size, access=access)
        except BaseException:
            if fd >= 0:
                os.close(fd)
            raise
        self._fd = fd  # kept for fdatasync/pwrite, which release the GIL (msync does not)
        #: bytes from the start already faulted in by the page warmer
        self.warmed_position = 0
        self.warm_failed = False
        self._warm_lock = threading.Lock()
        self._commit_lock = threading.Lock()
        self._anchor: Any = None  # pins the map while its address is used by the warmer
        if not read_only:
            try:
                # Ask the kernel to read the (preallocated, zero) pages ahead: writing through
                # the map then takes no major fault per page, several times faster.
                self._mm.madvise(mmap.MADV_WILLNEED)
            except (AttributeError, OSError):
                pass
            if pool is not None:
                self._buffer = pool.borrow()
        self.view = memoryview(self._mm)
        if create:
            log.debug("segment_created", path=str(self.path), size=file_size)

    # --- positions --------------------------------------------------------------------

    @property
    def file_end_offset(self) -> int:
        """Commit-log offset one past the end of this file."""
        return self.file_from_offset + self.file_size

    @property
    def free(self) -> int:
        """Bytes that can still be appended."""
        return self.file_size - self.wrote_position

    @property
    def is_full(self) -> bool:
        """Whether nothing more can be appended."""
        return self.wrote_position >= self.file_size

    @property
    def uses_buffer(self) -> bool:
        """Whether appends go to a transient buffer (committed later) instead of the map."""
        return self._buffer is not None

    # --- writing ----------------------------------------------------------------------

    def allocate(self, end: int) -> None:
        """Make sure the disk blocks up to ``end`` exist (a chunk at a time).

        Raises :class:`DiskFullError` when the disk is full: a write through the map into a
        hole would otherwise kill the process with SIGBUS.
        """
        target = min(self.file_size, end + ALLOCATION_CHUNK - end % ALLOCATION_CHUNK)
        with disk_full_as_error(self.path, "allocating space in"):
            _grow(self._fd, target)
        self.allocated = target

    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Append ``data`` (the caller checked it fits); returns its position in the file."""
        pos = self.wrote_position
        end = pos + len(data)
        if end > self.allocated:
            self.allocate(end)
        buffer = self._buffer
        if buffer is not None:
            buffer[pos:end] = data
        else:
            self._mm[pos:end] = data
            self.committed_position = end
        self.wrote_position = end
        return pos

    def commit(self) -> int:
        """Copy buffered bytes into the file (transient buffers only); returns the position."""
        if self._buffer is None:
            return self.committed_position
        # The commit thread and a flush may both get here: one copy at a time, so that the
        # committed position never moves back and the buffer goes back to the pool once.
        with self._commit_lock:
            return self._commit_locked()

    def _commit_locked(self) -> int:
        buffer = self._buffer
        if buffer is None or self._closed:
            return self.committed_position
        start = self.committed_position
        end = self.wrote_position
        if end > start:
            with disk_full_as_error(self.path, "committing to"):
                written = os.pwrite(self._fd, memoryview(buffer)[start:end], start)
            self.committed_position = start + written
        if self.committed_position >= self.file_size and self._pool is not None:
            # Full and committed: the buffer goes back to the pool for the next segment.
            self._buffer = None
            self._pool.give_back(buffer)
        return self.committed_position

    def flush(self) -> int:
        """fdatasync everything committed; returns the flushed position."""
        committed = self.committed_position
        if committed > self.flushed_position and not self._closed:
            with self._commit_lock:  # the fd stays open meanwhile (see _retire)
                if self._closed:
                    return self.flushed_position
                with disk_full_as_error(self.path, "flushing"):
                    os.fdatasync(self._fd)
                if committed > self.flushed_position:
                    self.flushed_position = committed
        return self.flushed_position

    def set_positions(self, position: int) -> None:
        """Everything up to ``position`` is valid; zero the rest of the file (a cut)."""
        with self._commit_lock:  # no commit may copy the cut bytes back meanwhile
            self.wrote_position = position
            if self._buffer is not None:
                # Bytes below ``position`` not committed yet are still to be committed.
                self.committed_position = min(self.committed_position, position)
            else:
                self.committed_position = position
            self.flushed_position = min(self.flushed_position, position)
            if position < self.file_size and not self.read_only and self._zero_from(position):
                os.fdatasync(self._fd)

    def _zero_from(self, position: int) -> bool:
        """Zero every non-zero byte from ``position`` on; returns whether any was found.

        Reads with ``pread`` in chunks (no mapping, so no resident pages) and writes zeros
        only over the non-zero stretch of each chunk: holes of a partly allocated segment
        stay holes (writing there could need blocks a full disk does not have).
        """
        changed = False
        for at, stop in self.data_ranges(position, self.file_size):
            while at < stop:
                size = min(_ZERO_CHUNK, stop - at)
                chunk = os.pread(self._fd, size, at)
                head = size - len(chunk.lstrip(b"\0"))
                if head < size:
                    tail = len(chunk.rstrip(b"\0"))
                    os.pwrite(self._fd, bytes(tail - head), at + head)
                    changed = True
                at += size
        return changed

    def data_ranges(self, start: int, end: int) -> Iterator[tuple[int, int]]:
        """The ``[a, b)`` stretches of ``[start, end)`` that may hold data (not holes).

        A segment's blocks are allocated a chunk at a time, so the unwritten rest of the
        last one is mostly a hole: ``SEEK_DATA``/``SEEK_HOLE`` let recovery skip it instead
        of reading up to a gigabyte of zeros. Where the file system cannot say, the whole
        range is one stretch.
        """
        pos = start
        while pos < end:
            try:
                data = os.lseek(self._fd, pos, os.SEEK_DATA)
                hole = os.lseek(self._fd, data, os.SEEK_HOLE)
            except OSError as exc:
                if exc.errno != errno.ENXIO:  # ENXIO: no data after pos
                    yield pos, end
                return
            if data >= end:
                return
            yield data, min(hole, end)
            pos = hole

    # --- reading ----------------------------------------------------------------------

    @property
    def read_position(self) -> int:
        """Bytes that readers may look at (what is in the file)."""
        return self.committed_position

    def read(self, pos: int, size: int) -> memoryview:
        """``size`` bytes at ``pos``: a view of the map, or a copy of a not yet committed buffer."""
        if pos + size > self.committed_position and self._buffer is not None:
            # Still in the transient buffer, which will be reused: hand out a copy, taken
            # under the commit lock so the buffer cannot go back to the pool meanwhile.
            with self._commit_lock:
                buffer = self._buffer
                if buffer is not None and pos + size > self.committed_position:
                    return memoryview(bytes(buffer[pos : pos + size]))
        return self.view[pos : pos + size]

    def warm(self, upto: int) -> bool:
        """Fault in the pages up to ``upto`` (page warmer thread; see :mod:`.pagewarmer`)."""
        with self._warm_lock:
            if self._closed or self.read_only or self.warm_failed:
                return False
            if self._anchor is None:
                self._anchor = ctypes.c_char.from_buffer(self._mm)
            if upto > self.allocated:
                try:
                    self.allocate(upto)  # ahead of the writer, off its thread
                except DiskFullError:
                    upto = self.allocated  # never fault in a hole: the writer reports it
            start = self.warmed_position - self.warmed_position % _PAGE
            if upto <= start:
                return True
            if not populate_write(ctypes.addressof(self._anchor) + start, upto - start):
                self.warm_failed = True
                return False
            self.warmed_position = upto
            return True

    def find(self, pattern: bytes, start: int, end: int | None = None) -> int:
        """Position of ``pattern`` in the map between ``start`` and ``end``, or -1 (C speed).

        Holes of the file (see :meth:`data_ranges`) are skipped; a match may straddle the
        start of a hole, never its end (holes read as zeros).
        """
        stop = self.file_size if end is None else end
        for a, b in self.data_ranges(start, stop):
            found = self._mm.find(pattern, a, min(stop, b + len(pattern) - 1))
            if found >= 0:
                return found
        return -1

    def release_pages(self, upto: int) -> None:
        """Drop this process's mapping of the pages below ``upto`` (they stay in the page cache).

        Keeps the resident set flat while gigabytes stream through the map; a later read
        simply maps the page again (a minor fault).
        """
        upto = min(upto, self.file_size)
        length = upto - upto % _PAGE
        if length > 0 and not self._closed:
            try:
                self._mm.madvise(mmap.MADV_DONTNEED, 0, length)
            except (AttributeError, OSError, ValueError):
                pass

    # --- lifecycle --------------------------------------------------------------------

    def _retire(self) -> bool:
        """Stop every use by this store's threads and close the fd; False if already done."""
        with self._warm_lock:  # the warmer must be done with the address first
            if self._closed:
                return False
            self._closed = True
            self._anchor = None
        with self._commit_lock:  # a commit in flight finishes with the buffer first
            buffer, self._buffer = self._buffer, None
            if buffer is not None and self._pool is not None:
                self._pool.give_back(buffer)
            os.close(self._fd)
        return True

    def close(self) -> None:
        """Unmap and close (idempotent). Views handed out keep the map alive until dropped."""
        if not self._retire():
            return
        try:
            self.view.release()
            self._mm.close()
        except BufferError:
            pass  # a reader still holds a view; the map goes with its last reference

    def destroy(self) -> None:
        """Delete the file while the store runs (retention, a cut).

        The map is *not* closed: a lock-free reader may be between looking this segment up
        and slicing its view. It is unmapped when the last reference to it goes.
        """
        self._retire()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def __repr__(self) -> str:
        return (
            f"MappedFile({self.path.name}, wrote={self.wrote_position}, "
            f"committed={self.committed_position}, flushed={self.flushed_position})"
        )
