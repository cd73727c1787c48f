"""The files of the ``timer`` delay scheduler: timer log, timing wheel and checkpoint.

The layout follows RocketMQ 5's ``TimerLog``/``TimerWheel``/``TimerCheckpoint``, with units
of our own:

- the **timer log** (``<data_dir>/timerlog/``, segments named by their first position) is
  append-only; each 56-byte unit names one held message (its queue offset in the timer topic)
  and its deliver time, and points back to the previous unit of the same wheel slot, so
  every slot is a linked list running backwards through the log;
- the **timing wheel** (``<data_dir>/timerwheel``) is a fixed array of 32-byte slots, one
  per ``precision_ms`` of time, used round after round: slot time, latest deliver time in
  the slot, position of its last unit, number of units;
- the **checkpoint** (``<data_dir>/config/timercheck``) says how far the log is committed,
  which timer-topic offset comes next, the read cursor (the slot being delivered) and how
  many of its units were delivered. It is two 64-byte copies with a sequence number and a
  CRC, written alternately, so a torn write leaves the other one.
"""

from __future__ import annotations

import mmap
import os
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from mqcore import speedups
from mqcore.errors import StoreCorruptedError

__all__ = ["Checkpoint", "TimerCheckpoint", "TimerLog", "TimerWheel", "Unit", "py_write_slots"]

UNIT = struct.Struct(">qqqqqqii")  # prev, deliver, slot, queue off, cl off, enqueued, size, magic
UNIT_SIZE = UNIT.size  # 56
UNIT_MAGIC = 0x54494D52  # "TIMR"
SLOT = struct.Struct(">qqqii")  # slot time, latest deliver time, last pos, units, reserved
SLOT_SIZE = SLOT.size  # 32
_CKPT = struct.Struct(">qqqqqqii")  # seq, enqueue off, log end, read ms, done, pending, prec, slots
_CKPT_RECORD = 64  # one copy: the fields, then the CRC of them at byte 60


class Unit(NamedTuple):
    """One timer-log unit."""

    prev_pos: int
    deliver_ms: int
    slot_ms: int
    queue_offset: int
    commitlog_offset: int
    enqueue_ms: int
    size: int
    magic: int


class TimerLog:
    """Append-only segmented log of units; positions are global byte offsets.

    :param path: the directory of the segments.
    :param segment_bytes: size of one segment (rounded down to whole units).
    """

    def __init__(self, path: Path, segment_bytes: int = 64 * 1024 * 1024) -> None:
        self.path = path
        self.segment_bytes = max(UNIT_SIZE, segment_bytes - segment_bytes % UNIT_SIZE)
        path.mkdir(parents=True, exist_ok=True)
        self._fds: dict[int, int] = {}
        self._dirty: set[int] = set()
        for entry in sorted(path.iterdir()):
            if entry.name.isdigit():
                self._fds[int(entry.name)] = os.open(entry, os.O_RDWR)

    def segments(self) -> list[int]:
        """First positions of the segments on disk, oldest first."""
        return sorted(self._fds)

    def end(self) -> int:
        """Position one past the last byte on disk (committed or not)."""
        if not self._fds:
            return 0
        last = max(self._fds)
        return last + os.fstat(self._fds[last]).st_size

    def _fd(self, start: int, create: bool) -> int:
        fd = self._fds.get(start)
        if fd is None:
            if not create:
                raise StoreCorruptedError(
                    f"timer log segment {start:020d} is missing from {self.path}; restore it, "
                    "or remove the timer files to rebuild from the timer topic (timers "
                    "already delivered are then delivered again)"
                )
            fd = os.open(self.path / f"{start:020d}", os.O_RDWR | os.O_CREAT, 0o644)
            self._fds[start] = fd
        return fd

    def append(self, pos: int, data: bytes) -> None:
        """Write ``data`` (whole units) at ``pos``, rolling segments as needed."""
        seg = self.segment_bytes
        view = memoryview(data)
        while view:
            start = pos - pos % seg
            n = min(len(view), start + seg - pos)
            fd = self._fd(start, create=True)
            os.pwrite(fd, view[:n], pos - start)
            self._dirty.add(start)
            pos += n
            view = view[n:]

    def read(self, pos: int) -> Unit | None:
        """The unit at ``pos``, or None when it is missing or not a unit."""
        start = pos - pos % self.segment_bytes
        fd = self._fds.get(start)
        if fd is None or pos < 0:
            return None
        data = os.pread(fd, UNIT_SIZE, pos - start)
        if len(data) < UNIT_SIZE:
            return None
        unit = Unit(*UNIT.unpack(data))
        return unit if unit.magic == UNIT_MAGIC else None

    def scan(self, begin: int, end: int) -> Iterator[tuple[int, Unit]]:
        """``(pos, unit)`` for every readable unit in ``[begin, end)``."""
        seg = self.segment_bytes
        pos = begin - begin % UNIT_SIZE
        while pos < end:
            start = pos - pos % seg
            fd = self._fds.get(start)
            if fd is None:
                pos = start + seg
                continue
            data = os.pread(fd, min(end, start + seg) - pos, pos - start)
            for i, fields in enumerate(UNIT.iter_unpack(data[: len(data) - len(data) % UNIT_SIZE])):
                if fields[7] == UNIT_MAGIC:
                    yield pos + i * UNIT_SIZE, Unit(*fields)
            pos = start + seg

    def truncate(self, end: int) -> None:
        """Drop everything at and after ``end`` (an uncommitted tail)."""
        for start in sorted(self._fds, reverse=True):
            if start >= end and start > 0:
                self.delete(start)
            else:
                os.ftruncate(self._fds[start], min(self.segment_bytes, end - start))
                break

    def delete(self, start: int) -> None:
        """Remove the segment beginning at ``start``."""
        fd = self._fds.pop(start, None)
        self._dirty.discard(start)
        if fd is not None:
            os.close(fd)
        (self.path / f"{start:020d}").unlink(missing_ok=True)

    def flush(self) -> None:
        """fsync the segments written since the last flush."""
        for start in list(self._dirty):
            fd = self._fds.get(start)
            if fd is not None:
                os.fsync(fd)
        self._dirty.clear()

    def close(self) -> None:
        """Close every segment."""
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


def py_write_slots(wheel: Any, slots: dict[int, tuple[int, int, int, int]]) -> None:
    """Write each ``index: (slot time, latest deliver time, last pos, units)`` of ``slots``
    into the mapped ``wheel``: the reference for ``mqcore.plugins._delay_timer.write_slots``."""
    size = len(wheel)
    pack = SLOT.pack_into
    for index, (t, due, last, num) in slots.items():
        if index < 0 or (index + 1) * SLOT_SIZE > size:
            raise IndexError(f"write_slots: slot {index} is not in the wheel")
        if not -(2**31) <= num < 2**31:
            raise OverflowError("write_slots: a slot's unit count is not an int32")
        pack(wheel, index * SLOT_SIZE, t, due, last, num, 0)


_speedups = speedups.load("timer")
_write_slots: Any = py_write_slots if _speedups is None else _speedups.write_slots


class TimerWheel:
    """A memory-mapped array of ``slots`` slots; slot ``i`` serves times ``t`` with
    ``t // precision_ms % slots == i``. ``read_only`` maps it for reading (another process
    may be writing it)."""

    def __init__(self, path: Path, slots: int, *, read_only: bool = False) -> None:
        self.path = path
        self.slots = slots
        size = slots * SLOT_SIZE
        if read_only:
            fd = os.open(path, os.O_RDONLY)
            try:
                self._map = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
            finally:
                os.close(fd)
            return
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size != size:
                os.ftruncate(fd, size)  # sparse: untouched slots take no disk or memory
            self._map = mmap.mmap(fd, size)
        finally:
            os.close(fd)

    @property
    def mapping(self) -> mmap.mmap:
        """The mapped slots (``SLOT`` each), for the enqueue loop to read in one call."""
        return self._map

    def get(self, index: int) -> tuple[int, int, int, int]:
        """``(slot time, latest deliver time, last pos, units)`` of slot ``index``."""
        t, due, last, num, _ = SLOT.unpack_from(self._map, index * SLOT_SIZE)
        return t, due, last, num

    def put(self, index: int, slot_ms: int, due_ms: int, last_pos: int, num: int) -> None:
        """Overwrite slot ``index``."""
        SLOT.pack_into(self._map, index * SLOT_SIZE, slot_ms, due_ms, last_pos, num, 0)

    def put_many(self, slots: dict[int, tuple[int, int, int, int]]) -> None:
        """Overwrite each slot ``index: (slot time, latest deliver time, last pos, units)``
        of ``slots`` (one C call when the extension is built)."""
        _write_slots(self._map, slots)

    def iter_slots(self) -> Iterator[tuple[int, int, int, int, int]]:
        """``(index, slot time, latest deliver time, last pos, units)`` of every slot."""
        for i, (t, due, last, num, _) in enumerate(SLOT.iter_unpack(self._map)):
            yield i, t, due, last, num

    def flush(self) -> None:
        """msync the mapping."""
        self._map.flush()

    def close(self) -> None:
        """Unmap."""
        self._map.close()


class Checkpoint(NamedTuple):
    """The committed state of the timer scheduler."""

    seq: int
    enqueue_offset: int  # next timer-topic offset to put into the wheel
    log_end: int  # the log is committed below this position
    read_ms: int  # start of the slot being delivered (0: not set yet)
    done: int  # units of that slot already delivered, in append order
    pending: int  # units in the wheel not delivered yet
    precision_ms: int
    slots: int


class TimerCheckpoint:
    """Two alternating CRC-checked copies of a :class:`Checkpoint` in one small file."""

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self.path = path
        if read_only:
            self._fd = os.open(path, os.O_RDONLY)
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)

    def load(self) -> Checkpoint | None:
        """The valid copy with the higher sequence number, or None for a new file.

        :raises StoreCorruptedError: when the file has content but neither copy is valid.
        """
        data = os.pread(self._fd, 2 * _CKPT_RECORD, 0)
        if not data.strip(b"\0"):
            return None
        best: Checkpoint | None = None
        for base in (0, _CKPT_RECORD):
            chunk = data[base : base + _CKPT_RECORD]
            if len(chunk) < _CKPT_RECORD:
                continue
            body = chunk[: _CKPT.size]
            (crc,) = struct.unpack_from(">I", chunk, _CKPT_RECORD - 4)
            if zlib.crc32(body) != crc or not body.strip(b"\0"):
                continue
            cp = Checkpoint(*_CKPT.unpack(body))
            if best is None or cp.seq > best.seq:
                best = cp
        if best is None:
            raise StoreCorruptedError(
                f"timer checkpoint {self.path} is damaged (both copies fail their CRC); "
                "restore it, or remove the timer files to rebuild from the timer topic (timers "
                "already delivered are then delivered again)"
            )
        return best

    def write(self, cp: Checkpoint) -> None:
        """Write ``cp`` over the older copy (no fsync: see :meth:`flush`)."""
        body = _CKPT.pack(*cp)
        record = body.ljust(_CKPT_RECORD - 4, b"\0") + struct.pack(">I", zlib.crc32(body))
        os.pwrite(self._fd, record, (cp.seq % 2) * _CKPT_RECORD)

    def flush(self) -> None:
        """fsync the file."""
        os.fsync(self._fd)

    def close(self) -> None:
        """Close the file."""
        os.close(self._fd)
