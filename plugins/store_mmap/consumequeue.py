"""RocketMQ's ConsumeQueue: the per-(topic, queue) index of 20-byte units into the commit log.

Layout (as RocketMQ): the directory ``<root>/consumequeue/<topic>/<queue_id>/`` holds
fixed-size segment files of ``units_per_file`` units, each named by its start *byte* offset
within the queue as 20 zero-padded digits. A unit is big-endian ``commit-log offset`` (8),
``size`` (4), ``tags hash code`` (8) (:data:`UNIT`). A unit is valid when offset >= 0 and
size > 0; the zero-filled tail of a preallocated file is free space. A queue that starts past
offset 0 (rebuilt after retention) has *blank* units before its first real unit (offset 0,
size ``0x7FFFFFFF``, tags 0), as RocketMQ's fillPreBlank writes them.

All offsets in the API are *logical*, counted in units (queue offsets), never in bytes.

API used by the store (writes are serialised by the store's lock; reads take no lock):

- ``ConsumeQueue(root, topic, queue_id, units_per_file=300_000, read_only=False,
  max_mapped_files=4, preallocate=False)``: opens (and recovers, see
  :meth:`ConsumeQueue.recover`) the queue. ``preallocate`` reserves each file's disk blocks
  when it is created (see :func:`.filemaps.create_zeroed_file`); ``reserve(count)`` creates
  the files of the next ``count`` units ahead, so a full disk is reported before the commit
  log write.
- ``append_units(first_queue_offset, units, *, fill_gap=False)``: ``units`` is a packed buffer
  of whole units or a sequence of ``(commitlog_offset, size, tags_code)``; rolls files
  mid-batch; ``first_queue_offset`` must equal ``max_offset``.
- ``read_units(queue_offset, max_count) -> memoryview`` of whole units (zero-copy inside one
  file), ``unit_at(queue_offset) -> CqUnit | None``.
- ``min_offset``, ``max_offset``, ``max_physical_offset`` (attributes, read freely).
- ``truncate_dirty(max_commitlog_offset)``, ``correct_min_offset(min_commitlog_offset)``,
  ``delete_expired(min_commitlog_offset) -> int``, ``offset_for_timestamp(ts, timestamp_of,
  boundary="lower")``, ``refresh()`` (read-only openers), ``flush()``, ``close()``,
  ``destroy()``.

Recovery order for the store, as RocketMQ: open every queue (each finds its last valid unit),
recover the commit log, then ``truncate_dirty(commit-log end)`` on every queue and
``correct_min_offset(commit-log min)``, then dispatch the records past each queue's
``max_physical_offset``. A torn unit can look valid (a size half written), so checking the last
unit against the record it points at is the store's job.

Memory stays flat: files are mapped lazily, at most ``max_mapped_files`` of them (plus the
file being written) at a time; an evicted map is unmapped as soon as no view into it is alive,
so a reader must not keep views returned by :meth:`ConsumeQueue.read_units` longer than needed.
"""

from __future__ import annotations

import bisect
import itertools
import mmap
import operator
import os
import struct
import sys
import threading
from array import array
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

from mqcore.errors import InvalidArgumentError, StoreClosedError, StoreCorruptedError
from mqcore.logs import get_logger
from mqcore.record.unit import UNIT, UNIT_POS_SIZE, UNIT_POS_TAGS_CODE, UNIT_SIZE

from .filemaps import FileMaps
from .mappedfile import segment_name

__all__ = [
    "BLANK_UNIT",
    "UNIT",
    "UNIT_SIZE",
    "ConsumeQueue",
    "CqUnit",
]

log = get_logger(__name__)

BLANK_UNIT = UNIT.pack(0, 0x7FFFFFFF, 0)  # fills a rebuilt queue's first file before its start
_PHY = struct.Struct(">q")
_SIZE = struct.Struct(">i")
_EMPTY = memoryview(b"")
_SIGN_BITS = bytes(0x80 if i >= 0x80 else 0 for i in range(256))  # translate: keep the sign


class CqUnit(NamedTuple):
    """One consume-queue unit: where a message's record is in the commit log."""

    commitlog_offset: int
    size: int
    tags_code: int


def _valid_prefix(buf: bytes | memoryview | mmap.mmap) -> int:
    """Number of leading valid units in ``buf`` (whole units); C-speed, no per-unit loop.

    Bytes 0 and 8 of a unit hold the sign bits of offset and size; bytes 8..11 are the size.
    """
    data = bytes(buf)
    count = len(data) // UNIT_SIZE
    if count == 0:
        return 0
    first_bad = count
    # A negative offset or size: the high bit of byte 0 or byte 8 is set.
    for col in (data[0::UNIT_SIZE], data[UNIT_POS_SIZE::UNIT_SIZE]):
        pos = col[:first_bad].translate(_SIGN_BITS).find(b"\x80")
        if pos >= 0:
            first_bad = pos
    # A zero size: the OR of the four size bytes of the unit is zero.
    merged = 0
    for k in range(UNIT_POS_SIZE, UNIT_POS_TAGS_CODE):
        merged |= int.from_bytes(data[k::UNIT_SIZE][:first_bad], "big")
    pos = merged.to_bytes(first_bad, "big").find(b"\x00") if first_bad else -1
    if pos >= 0:
        first_bad = pos
    return first_bad


def _offsets(units: bytes) -> array[int]:
    """The commit-log offsets of packed units, gathered with strided slices (no Python loop
    per unit): a clean open checks every unit of a queue's last file."""
    n = len(units) // UNIT_SIZE
    gathered = bytearray(n * 8)
    for k in range(8):
        gathered[k::8] = units[k : n * UNIT_SIZE : UNIT_SIZE]
    out = array("q", gathered)
    if sys.byteorder == "little":
        out.byteswap()
    return out


class ConsumeQueue:
    """The consume queue of one (topic, queue id); see the module docstring for the API."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        topic: str,
        queue_id: int,
        units_per_file: int = 300_000,
        read_only: bool = False,
        max_mapped_files: int = 4,
        preallocate: bool = False,
    ) -> None:
        if units_per_file < 1:
            raise InvalidArgumentError(f"units_per_file must be >= 1, got {units_per_file}")
        self.topic = topic
        self.queue_id = queue_id
        self.units_per_file = units_per_file
        self.file_size = units_per_file * UNIT_SIZE
        self.read_only = read_only
        self.max_mapped_files = max(1, max_mapped_files)
        self.preallocate = preallocate
        self.directory = Path(root) / "consumequeue" / topic / str(queue_id)
        #: first valid queue offset (moves forward with retention)
        self.min_offset = 0
        #: queue offset the next unit gets; units below it are published and readable
        self.max_offset = 0
        #: commit-log offset + size of the last unit; -1 when the queue holds none
        self.max_physical_offset = -1
        #: set by :meth:`recover` when it cut units that were not a clean end (see there)
        self.damaged_at: int | None = None
        self._starts: list[int] = []  # unit start of every file, ascending
        self._maps: FileMaps[int] = FileMaps(
            self._path, self.file_size, read_only=read_only, max_mapped=max_mapped_files
        )
        self._lock = threading.Lock()  # guards changes of _starts
        self._closed = False
        if not read_only:
            self.directory.mkdir(parents=True, exist_ok=True)
        self._load_files()
        self.recover()

    # --- files --------------------------------------------------------------------------

    def _path(self, start: int) -> Path:
        return self.directory / segment_name(start * UNIT_SIZE)  # as commit-log segments

    def _load_files(self) -> None:
        starts = []
        entries = list(os.scandir(self.directory)) if self.directory.is_dir() else []
        for entry in entries:
            name = entry.name
            if name.endswith(".tmp") and not self.read_only:
                os.unlink(entry.path)  # a roll interrupted before its rename
                continue
            if len(name) != 20 or not name.isdigit():
                continue
            start_bytes = int(name)
            size = entry.stat().st_size
            if start_bytes % self.file_size or size != self.file_size:
                raise StoreCorruptedError(
                    f"consume queue file {entry.path} has size {size} at byte offset "
                    f"{start_bytes}, expected files of {self.file_size} bytes "
                    f"({self.units_per_file} units); open with the units_per_file it "
                    "was written with, or delete the consumequeue directory to rebuild every "
                    "queue from the commit log",
                    path=entry.path,
                    offset=start_bytes,
                )
            starts.append(start_bytes // UNIT_SIZE)
        starts.sort()
        for prev, cur in itertools.pairwise(starts):
            if cur != prev + self.units_per_file:
                raise StoreCorruptedError(
                    f"consume queue {self.directory} misses files between byte offsets "
                    f"{prev * UNIT_SIZE} and {cur * UNIT_SIZE}; restore them or delete the "
                    "directory so it is rebuilt from the commit log",
                    path=str(self.directory),
                    offset=cur * UNIT_SIZE,
                )
        self._starts = starts

    def _map(self, start: int) -> mmap.mmap | None:
        """The map of the file starting at unit ``start`` (None if there is no such file)."""
        return self._maps.get(start)

    def _create_file(self, start: int) -> mmap.mmap:
        mm = self._maps.create(start, self.preallocate)
        with self._lock:
            bisect.insort(self._starts, start)
        log.debug(
            "consume_queue_file_created", topic=self.topic, queue_id=self.queue_id, start=start
        )
        return mm

    def _tail_map(self, start: int) -> mmap.mmap:
        """The writer's map of the file starting at ``start``, creating the file if needed."""
        i = bisect.bisect_left(self._starts, start)
        if i == len(self._starts) or self._starts[i] != start:
            self._create_file(start)
        mm = self._maps.pin(start)
        assert mm is not None
        return mm

    def _remove_file(self, start: int) -> None:
        self._maps.forget(start)
        with self._lock:
            self._starts.remove(start)
        try:
            os.unlink(self._path(start))
        except FileNotFoundError:
            pass

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"consume queue {self.topic}-{self.queue_id} is closed")

    # --- recovery -----------------------------------------------------------------------

    def recover(self) -> None:
        """Find the last valid unit (RocketMQ's ConsumeQueue.recover) and set the offsets.

        Scans from the third-last file on, as RocketMQ does: full files are followed, the
        first file with an invalid unit ends the queue. A writable queue zeroes everything
        after the end (a torn unit, stale units) and deletes files past it, so that later
        appends never run into old data. ``min_offset`` starts at the first file, past any
        blank units; the store corrects it with :meth:`correct_min_offset`.
        """
        self._check_open()
        if not self._starts:
            self.min_offset = self.max_offset = 0
            self.max_physical_offset = -1
            return
        index = max(0, len(self._starts) - 3)
        while True:
            start = self._starts[index]
            mm = self._map(start)
            assert mm is not None
            valid = _valid_prefix(mm)
            if valid == self.units_per_file and index + 1 < len(self._starts):
                index += 1
                continue
            break
        end = start + valid  # an empty last file ends where the full one before it ends
        if not self.read_only:
            damaged = self._first_damaged(index, start, valid)
            if damaged is not None:
                # Cut there too; the store rebuilds the rest from the commit log.
                self.damaged_at = end = damaged
                log.warning(
                    "consume_queue_damaged",
                    topic=self.topic,
                    queue_id=self.queue_id,
                    queue_offset=damaged,
                )
            self._cut_after(end)
        self.max_offset = end
        first = self._starts[0]
        self.min_offset = self._skip_blanks(first, end)
        last = self._raw_unit(end - 1) if end > self.min_offset else None
        self.max_physical_offset = last[0] + last[1] if last else -1
        log.debug(
            "consume_queue_recovered",
            topic=self.topic,
            queue_id=self.queue_id,
            min_offset=self.min_offset,
            max_offset=self.max_offset,
        )

    def _first_damaged(self, index: int, start: int, valid: int) -> int | None:
        """Queue offset of the first unit of the file at ``start`` (``valid`` valid units)
        that cannot be right, else None.

        Two signs of damage: commit-log offsets that do not increase along the queue (garbage
        that looks like valid units), and data after the last valid unit (units zeroed or
        overwritten in the middle). Both can also be a crash's torn batch; either way the
        units from there on are rebuilt from the commit log.
        """
        mm = self._map(start)
        assert mm is not None
        skip = self._skip_blanks(start, start + valid) - start if index == 0 else 0
        offsets = _offsets(mm[skip * UNIT_SIZE : valid * UNIT_SIZE])
        if not all(map(operator.lt, offsets, itertools.islice(offsets, 1, None))):
            for i in range(len(offsets) - 1):  # damage only: say where
                if offsets[i] >= offsets[i + 1]:
                    return start + skip + i
        tail = valid * UNIT_SIZE
        if tail < self.file_size and mm[tail:].count(0) != self.file_size - tail:
            return start + valid
        for later in self._starts[index + 1 :]:
            lm = self._map(later)
            if lm is not None and lm[:].count(0) != self.file_size:
                return start + valid
        return None

    def refresh(self) -> int:
        """Read-only openers: pick up units another process appended since; returns the new max.

        Units are trusted up to the first invalid one. The writer stores a batch's first
        unit last, its size field last of all, so a batch turns valid at once. When the
        writer truncated or rebuilt the queue meanwhile, the queue is recovered afresh.
        """
        self._check_open()
        self._maps.clear()  # a file may have been replaced by a rebuilt one
        self._load_files()
        end = self.max_offset
        if (
            not self._starts
            or end < self._starts[0]
            or end > self._starts[-1] + self.units_per_file
            or (end > self.min_offset and _valid_prefix(self._raw_view(end - 1, 1)) == 0)
        ):
            self.recover()
            return self.max_offset
        window = 256  # grows: a reader that keeps up scans little, one far behind scans fast
        while True:
            start = end - end % self.units_per_file
            rel = end - start
            if rel == 0 and start not in self._starts:
                break
            n = min(window, self.units_per_file - rel)
            view = self._raw_view(end, n)
            valid = _valid_prefix(view)
            del view
            end += valid
            if valid < n:
                break
            window *= 2
        if end > self.max_offset:
            last = self._raw_unit(end - 1)
            assert last is not None
            self.max_physical_offset = last[0] + last[1]
            self.max_offset = end
        self.min_offset = max(self.min_offset, self._starts[0])
        return self.max_offset

    def _skip_blanks(self, first: int, end: int) -> int:
        """First queue offset at or after ``first`` that is not a blank unit (binary search)."""
        lo, hi = first, min(end, first + self.units_per_file)
        while lo < hi:
            mid = (lo + hi) // 2
            if bytes(self._raw_view(mid, 1)) == BLANK_UNIT:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _cut_after(self, end: int) -> None:
        """Zero units at/after ``end`` in its file and delete files starting after it."""
        for start in [s for s in self._starts if s > end or (s == end and s != self._starts[0])]:
            self._remove_file(start)
        if not self._starts:
            return
        start = self._starts[-1]
        mm = self._map(start)
        assert mm is not None
        pos = (end - start) * UNIT_SIZE
        if pos < self.file_size and mm[pos:].count(0) != self.file_size - pos:
            mm[pos:] = bytes(self.file_size - pos)
            self._maps.mark_dirty(start)

    # --- writing ------------------------------------------------------------------------

    def append_units(
        self,
        first_queue_offset: int,
        units: bytes | bytearray | memoryview | Sequence[tuple[int, int, int]],
        *,
        fill_gap: bool = False,
    ) -> int:
        """Append units at ``first_queue_offset`` (must be ``max_offset``); returns the new max.

        ``units`` is a packed buffer of whole units or a sequence of ``(commitlog_offset,
        size, tags_code)``. Files roll mid-batch as needed. ``max_offset`` is published after
        the units are written, so lock-free readers never see a unit before its bytes.
        ``fill_gap=True`` lets a queue that holds no units start at any offset (rebuilding a
        queue whose head was deleted): its files are replaced by one whose units before
        ``first_queue_offset`` are blank, and ``min_offset`` becomes ``first_queue_offset``.
        If creating a file fails (a full disk), the units before the roll stay published and
        the error propagates; :meth:`reserve` first to fail before writing anything.
        """
        if self._closed or self.read_only:
            self._check_open()
            raise InvalidArgumentError(
                f"consume queue {self.topic}-{self.queue_id} is open read-only; open it "
                "without read_only=True to append"
            )
        if isinstance(units, (bytes, bytearray, memoryview)):
            data = memoryview(units)
            if data.format != "B":
                data = data.cast("B")
            if len(data) % UNIT_SIZE:
                raise InvalidArgumentError(
                    f"packed units have {len(data)} bytes, not a multiple of {UNIT_SIZE}"
                )
        else:
            buf = bytearray(len(units) * UNIT_SIZE)
            pack_into = UNIT.pack_into
            for i, (offset, size, tags_code) in enumerate(units):
                pack_into(buf, i * UNIT_SIZE, offset, size, tags_code)
            data = memoryview(buf)
        count = len(data) // UNIT_SIZE
        end = self.max_offset
        if first_queue_offset != end:
            if fill_gap and self.min_offset == end and first_queue_offset >= 0:
                self._start_at(first_queue_offset)
                end = first_queue_offset
            else:
                raise InvalidArgumentError(
                    f"consume queue {self.topic}-{self.queue_id}: append at queue offset "
                    f"{first_queue_offset} but the next offset is {end}; units "
                    "must be contiguous (skip units already present, or fill_gap=True to "
                    "restart an empty queue)"
                )
        if count == 0:
            return end
        first_phy = _PHY.unpack_from(data)[0]
        if first_phy < self.max_physical_offset and data[:UNIT_SIZE] != BLANK_UNIT:
            raise InvalidArgumentError(
                f"consume queue {self.topic}-{self.queue_id}: unit at commit-log offset "
                f"{first_phy} is below the end of the last unit ({self.max_physical_offset}); "
                "was this batch dispatched twice?"
            )
        done = 0
        per = self.units_per_file
        while done < count:
            start = end - end % per
            tail = self._maps.tail
            mm = tail[1] if tail is not None and tail[0] == start else self._tail_map(start)
            n = min(count - done, start + per - end)
            pos = (end - start) * UNIT_SIZE
            chunk = data[done * UNIT_SIZE : (done + n) * UNIT_SIZE] if n != count else data
            # The first unit's offset and size go last, the size last of all: until then it
            # reads as free space, so another process sees the whole chunk or none of it.
            code, size = UNIT_POS_TAGS_CODE, UNIT_POS_SIZE
            mm[pos + code : pos + n * UNIT_SIZE] = chunk[code:]
            mm[pos : pos + size] = chunk[:size]
            mm[pos + size : pos + code] = chunk[size:code]
            self._maps.mark_dirty(start)
            done += n
            end += n
            self.max_offset = end  # publish after the bytes are in place
        phy, size, _ = UNIT.unpack_from(data, (count - 1) * UNIT_SIZE)
        self.max_physical_offset = phy + size
        return end

    def append_unit(
        self, queue_offset: int, commitlog_offset: int, size: int, tags_code: int
    ) -> int:
        """:meth:`append_units` for one unit (a one-message put): same checks, same order.

        Anything unusual (a closed or read-only queue, a gap, a unit below the last one)
        goes through :meth:`append_units`, which raises the documented error.
        """
        end = self.max_offset
        if (
            queue_offset != end
            or self._closed
            or self.read_only
            or commitlog_offset < self.max_physical_offset
        ):
            return self.append_units(queue_offset, UNIT.pack(commitlog_offset, size, tags_code))
        into = end % self.units_per_file
        start = end - into
        tail = self._maps.tail
        mm = tail[1] if tail is not None and tail[0] == start else self._tail_map(start)
        pos = into * UNIT_SIZE
        # As in append_units: tags code, then offset, then size last, so another process
        # reads the unit as free space until it is whole.
        _PHY.pack_into(mm, pos + UNIT_POS_TAGS_CODE, tags_code)
        _PHY.pack_into(mm, pos, commitlog_offset)
        _SIZE.pack_into(mm, pos + UNIT_POS_SIZE, size)
        self._maps.mark_dirty(start)
        self.max_offset = end + 1  # publish after the bytes are in place
        self.max_physical_offset = commitlog_offset + size
        return end + 1

    def reserve(self, count: int) -> None:
        """Create now the files the next ``count`` units will need.

        With ``preallocate=True`` a store calls this before writing the commit log, so that
        a full disk raises :class:`~mqcore.errors.DiskFullError` before anything is written.
        """
        self._check_open()
        per = self.units_per_file
        first = self.max_offset - self.max_offset % per
        for start in range(first, self.max_offset + count, per):
            i = bisect.bisect_left(self._starts, start)
            if i == len(self._starts) or self._starts[i] != start:
                self._create_file(start)

    def _start_at(self, queue_offset: int) -> None:
        for start in list(self._starts):
            self._remove_file(start)
        start = queue_offset - queue_offset % self.units_per_file
        mm = self._tail_map(start)
        blanks = queue_offset - start
        mm[: blanks * UNIT_SIZE] = BLANK_UNIT * blanks
        self._maps.mark_dirty(start)
        self.min_offset = self.max_offset = queue_offset
        self.max_physical_offset = -1
        log.info(
            "consume_queue_restarted",
            topic=self.topic,
            queue_id=self.queue_id,
            queue_offset=queue_offset,
        )

    # --- reading ------------------------------------------------------------------------

    def _raw_view(self, queue_offset: int, count: int) -> memoryview:
        """Units [queue_offset, +count) inside one file, without bounds checks."""
        start = queue_offset - queue_offset % self.units_per_file
        mm = self._maps.get(start)
        if mm is None:
            return _EMPTY
        pos = (queue_offset - start) * UNIT_SIZE
        return memoryview(mm)[pos : pos + count * UNIT_SIZE]

    def _raw_unit(self, queue_offset: int) -> CqUnit | None:
        view = self._raw_view(queue_offset, 1)
        return CqUnit._make(UNIT.unpack(view)) if len(view) == UNIT_SIZE else None

    def read_units(self, queue_offset: int, max_count: int) -> memoryview:
        """Up to ``max_count`` packed units from ``queue_offset``; empty outside [min, max).

        Zero-copy (a view into the mapped file) when the range lies in one file, else one
        joined copy. Decode with ``UNIT.iter_unpack(view)``. Do not keep the view long: it
        pins the file's map.
        """
        end = self.max_offset  # read once: the published bound
        if queue_offset < self.min_offset or queue_offset >= end or max_count <= 0:
            return _EMPTY
        stop = min(end, queue_offset + max_count)
        per = self.units_per_file
        file_end = queue_offset - queue_offset % per + per
        if stop <= file_end:
            return self._raw_view(queue_offset, stop - queue_offset)
        parts = []
        at = queue_offset
        while at < stop:
            n = min(stop, at - at % per + per) - at
            part = self._raw_view(at, n)
            if len(part) != n * UNIT_SIZE:
                break  # a file vanished under retention: return what was contiguous
            parts.append(part)
            at += n
        return memoryview(b"".join(parts))

    def unit_at(self, queue_offset: int) -> CqUnit | None:
        """The unit at ``queue_offset``, or None outside [min_offset, max_offset)."""
        if queue_offset < self.min_offset or queue_offset >= self.max_offset:
            return None
        return self._raw_unit(queue_offset)

    def offset_for_timestamp(
        self,
        timestamp: int,
        timestamp_of: Callable[[int, int], int],
        boundary: str = "lower",
    ) -> int:
        """Queue offset for a store time (RocketMQ's getOffsetInQueueByTime), binary search.

        ``timestamp_of(commitlog_offset, size)`` returns the record's store timestamp (ms).
        ``boundary="lower"``: the first offset whose time is >= ``timestamp`` (``max_offset``
        if none is). ``"upper"``: the last offset whose time is <= ``timestamp``
        (``min_offset`` if none is). An empty queue gives ``min_offset``.
        """
        if boundary not in ("lower", "upper"):
            raise InvalidArgumentError(f"boundary must be 'lower' or 'upper', got {boundary!r}")
        lo, hi = self.min_offset, self.max_offset
        if lo >= hi:
            return lo
        first = lo

        def time_at(queue_offset: int) -> int:
            unit = self._raw_unit(queue_offset)
            # A unit deleted by retention meanwhile counts as older than anything.
            return -1 if unit is None else timestamp_of(unit.commitlog_offset, unit.size)

        if boundary == "lower":
            while lo < hi:  # first offset with time >= timestamp
                mid = (lo + hi) // 2
                if time_at(mid) < timestamp:
                    lo = mid + 1
                else:
                    hi = mid
            return lo
        while lo < hi:  # first offset with time > timestamp, then step back
            mid = (lo + hi) // 2
            if time_at(mid) <= timestamp:
                lo = mid + 1
            else:
                hi = mid
        return max(first, lo - 1)

    # --- maintenance --------------------------------------------------------------------

    def truncate_dirty(self, max_commitlog_offset: int) -> None:
        """Drop units pointing at or past ``max_commitlog_offset`` (a cut commit-log tail).

        RocketMQ's truncateDirtyLogicFiles: the kept prefix ends before the first unit whose
        commit-log offset is >= the cut; the dropped units are zeroed and later files deleted.
        """
        self._check_open()
        lo, hi = self.min_offset, self.max_offset
        while lo < hi:  # units' commit-log offsets increase along the queue
            mid = (lo + hi) // 2
            unit = self._raw_unit(mid)
            assert unit is not None
            if unit.commitlog_offset < max_commitlog_offset:
                lo = mid + 1
            else:
                hi = mid
        if lo == self.max_offset:
            return
        self.max_offset = lo  # unpublish first, then wipe
        self._cut_after(lo)
        self.min_offset = min(self.min_offset, lo)
        last = self._raw_unit(lo - 1) if lo > self.min_offset else None
        self.max_physical_offset = last.commitlog_offset + last.size if last else -1
        log.info(
            "consume_queue_truncated",
            topic=self.topic,
            queue_id=self.queue_id,
            max_offset=lo,
            max_commitlog_offset=max_commitlog_offset,
        )

    def correct_min_offset(self, min_commitlog_offset: int) -> int:
        """Move ``min_offset`` to the first unit at/after ``min_commitlog_offset``; returns it.

        RocketMQ's correctMinOffset: when even the last unit points below, the queue holds
        no valid entry and ``min_offset`` becomes ``max_offset``. Call it after opening.
        """
        lo, hi = self.min_offset, self.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            unit = self._raw_unit(mid)
            if (
                unit is None
                or unit.commitlog_offset < min_commitlog_offset
                or (bytes(self._raw_view(mid, 1)) == BLANK_UNIT)
            ):
                lo = mid + 1
            else:
                hi = mid
        self.min_offset = lo
        return lo

    def delete_expired(self, min_commitlog_offset: int) -> int:
        """Retention: delete whole files whose last unit points below ``min_commitlog_offset``.

        RocketMQ's deleteExpiredFile + correctMinOffset; the last file is always kept.
        Returns the number of files deleted; ``min_offset`` moves forward.
        """
        self._check_open()
        deleted = 0
        for start in list(self._starts[:-1]):
            last = self._raw_view(start + self.units_per_file - 1, 1)
            if len(last) != UNIT_SIZE or UNIT.unpack(last)[0] >= min_commitlog_offset:
                break
            del last
            self.min_offset = max(self.min_offset, start + self.units_per_file)
            self._remove_file(start)
            deleted += 1
        self.correct_min_offset(min_commitlog_offset)
        if deleted:
            log.info(
                "consume_queue_files_deleted",
                topic=self.topic,
                queue_id=self.queue_id,
                count=deleted,
                min_offset=self.min_offset,
            )
        return deleted

    def flush(self) -> None:
        """Write dirty units to disk (fdatasync of every file written since the last flush)."""
        if not self._closed:
            self._maps.flush()

    def close(self) -> None:
        """Flush and unmap; the object is unusable afterwards. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._maps.close()

    def destroy(self) -> None:
        """Close and delete every file of this queue (topic deletion)."""
        self.close()
        for start in list(self._starts):
            try:
                os.unlink(self._path(start))
            except FileNotFoundError:
                pass
        self._starts.clear()
        try:
            self.directory.rmdir()
        except OSError:
            pass

    def __repr__(self) -> str:
        return (
            f"ConsumeQueue(topic={self.topic!r}, queue_id={self.queue_id}, "
            f"min_offset={self.min_offset}, max_offset={self.max_offset})"
        )
