"""Fixed-size files mapped on demand: a bounded LRU of maps, one pinned writer file, dirty marks.

The ConsumeQueue and the IndexService keep many files of one size and touch few of them at a
time. :class:`FileMaps` maps a file when it is first read, keeps at most ``max_mapped`` read
maps (the least recently used one is dropped, and unmapped as soon as no view into it is
alive), pins the file being written, and remembers which files were written since the last
:meth:`FileMaps.flush`. It never closes a map a reader may still hold a view into: dropping
the reference is enough, CPython unmaps with the last view.

Lookups take a short lock; the writer's pinned map is also readable without it through
:attr:`FileMaps.tail`, a ``(key, map)`` tuple replaced whole.
"""

from __future__ import annotations

import mmap
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Generic, TypeVar

from .mappedfile import _create as _create_preallocated

__all__ = ["FileMaps", "create_zeroed_file"]

K = TypeVar("K", bound=Hashable)


def create_zeroed_file(path: Path, size: int, preallocate: bool) -> int:
    """Create ``path`` with ``size`` zero bytes, renamed into place whole; returns an fd.

    ``preallocate`` reserves the disk blocks now (``posix_fallocate``): a full disk then fails
    here as :class:`~mqcore.errors.DiskFullError`, instead of as SIGBUS on a later write
    through the map into a hole. Without it the file is sparse, cheap to create.
    """
    if preallocate:
        return _create_preallocated(path, size)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.ftruncate(fd, size)
        os.rename(tmp, path)
    except BaseException:
        os.close(fd)
        raise
    return fd


class FileMaps(Generic[K]):
    """The maps of one family of same-size files, keyed by ``K`` (see the module docstring)."""

    def __init__(
        self, path_of: Callable[[K], Path], size: int, *, read_only: bool, max_mapped: int
    ) -> None:
        self.path_of = path_of
        self.size = size
        self.read_only = read_only
        self.max_mapped = max(1, max_mapped)
        #: the writer's file, ``(key, map)``, or None; readable without the lock
        self.tail: tuple[K, mmap.mmap] | None = None
        self._maps: OrderedDict[K, mmap.mmap] = OrderedDict()
        self._dirty: set[K] = set()
        self._lock = threading.Lock()
        self.closed = False

    def _open(self, key: K) -> mmap.mmap | None:
        try:
            fd = os.open(self.path_of(key), os.O_RDONLY if self.read_only else os.O_RDWR)
        except FileNotFoundError:
            return None  # deleted (retention, truncation) while a reader looked it up
        try:
            access = mmap.ACCESS_READ if self.read_only else mmap.ACCESS_WRITE
            return mmap.mmap(fd, self.size, access=access)
        finally:
            os.close(fd)

    def _trim(self) -> None:
        while len(self._maps) > self.max_mapped:
            self._maps.popitem(last=False)  # unmapped once no reader's view is alive

    def get(self, key: K) -> mmap.mmap | None:
        """The map of ``key``'s file, mapping it if needed; None if there is no such file."""
        tail = self.tail
        if tail is not None and tail[0] == key:
            return tail[1]
        with self._lock:
            if self.closed:
                return None  # never map again after close(): reads come back empty
            mm = self._maps.get(key)
            if mm is not None:
                self._maps.move_to_end(key)
                return mm
            mm = self._open(key)
            if mm is not None:
                self._maps[key] = mm
                self._trim()
            return mm

    def create(self, key: K, preallocate: bool) -> mmap.mmap:
        """Create ``key``'s file zero-filled (see :func:`create_zeroed_file`) and map it."""
        fd = create_zeroed_file(self.path_of(key), self.size, preallocate)
        try:
            mm = mmap.mmap(fd, self.size, access=mmap.ACCESS_WRITE)
        finally:
            os.close(fd)
        with self._lock:
            self._maps[key] = mm
            self._trim()
        return mm

    def pin(self, key: K) -> mmap.mmap | None:
        """Make ``key``'s file the writer's: always mapped, read without the lock."""
        tail = self.tail
        if tail is not None and tail[0] == key:
            return tail[1]
        mm = self.get(key)
        if mm is None:
            return None
        with self._lock:
            if self.tail is not None:
                self._maps[self.tail[0]] = self.tail[1]  # demoted to the LRU
            self._maps.pop(key, None)
            self.tail = (key, mm)
            self._trim()
        return mm

    def forget(self, key: K) -> None:
        """Drop everything about ``key`` (its file is being deleted)."""
        with self._lock:
            self._maps.pop(key, None)
            if self.tail is not None and self.tail[0] == key:
                self.tail = None
            self._dirty.discard(key)

    def clear(self) -> None:
        """Drop every read map (files may have been replaced by another process)."""
        with self._lock:
            self._maps.clear()

    def mark_dirty(self, key: K) -> None:
        """Remember that ``key``'s file was written; call it after the write."""
        # Checked without the lock: a flush swapping the set meanwhile either syncs this
        # write (it came first) or finds the key in the new set.
        if key not in self._dirty:
            with self._lock:
                self._dirty.add(key)

    def flush(self) -> None:
        """fdatasync every file written since the last flush."""
        if self.read_only:
            return
        with self._lock:
            if self.closed:
                return
            dirty, self._dirty = self._dirty, set()
        # fdatasync on the file, not msync on the map: on Linux both write back the pages
        # dirtied through a shared mapping, but CPython's mmap.flush holds the GIL for the
        # whole msync, stalling every producer thread while the disk works.
        for key in dirty:
            try:
                fd = os.open(self.path_of(key), os.O_RDONLY)
            except FileNotFoundError:
                continue  # deleted meanwhile
            try:
                os.fdatasync(fd)
            finally:
                os.close(fd)

    def close(self) -> None:
        """Flush, then unmap everything; later lookups return None. Safe to call twice."""
        self.flush()
        with self._lock:
            self.closed = True
            maps = list(self._maps.values())
            if self.tail is not None:
                maps.append(self.tail[1])
            self._maps.clear()
            self.tail = None
        for mm in maps:
            try:
                mm.close()
            except BufferError:
                pass  # a caller still holds a view; the map goes with its last reference

    def __len__(self) -> int:
        """Number of read maps held (the pinned writer file not counted)."""
        return len(self._maps)
