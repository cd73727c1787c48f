"""A put's records and units in one C call, for the common case (the ``storeput`` speedups).

:func:`append` writes a batch that fits in the commit log's current segment and in its
consume queue's current file with one call of ``mqcore.plugins.store_mmap._put.append``:
records stamped straight into the segment's map, units into the queue file's map. It then
advances what :meth:`~.commitlog.CommitLog.put_batch` and
:meth:`~.consumequeue.ConsumeQueue.append_units` advance (write and commit positions, the
page warmer, the queue's published end), so that nothing downstream (flush, group commit,
replication, readers) tells the two apart. Anything else (a roll, a transient buffer, a
block not allocated yet, an IPv6 host, no C extension) returns None and the store takes
the Python path, which is the reference and writes the same bytes.
"""

from __future__ import annotations

from typing import Any

from mqcore import speedups
from mqcore.record.layout import BLANK_SIZE

from .commitlog import _WARM_AHEAD, RELEASE_EVERY, CommitLog
from .consumequeue import ConsumeQueue

__all__ = ["SPEEDUPS", "append"]

_c = speedups.load("storeput")
#: True when puts use the C write of ``mqcore.plugins.store_mmap._put``.
SPEEDUPS = _c is not None

_UNIT_SIZE = 20


def append(
    commitlog: CommitLog,
    cq: ConsumeQueue,
    prepared: list[Any],
    total: int,
    queue_id: int,
    queue_offset: int,
    store_ts: int,
    store_host: tuple[bytes, int],
    born: tuple[bytes, int] | None,
) -> tuple[list[int], int] | None:
    """Write ``prepared`` (records and units) in one C call, or return None when this put
    is not the common case. Returns the records' commit-log offsets and the offset past the
    last. The caller holds the write lock and made sure ``queue_offset`` is the queue's end.
    """
    c = _c
    if c is None:
        return None
    mf = commitlog._current
    if mf is None or mf.uses_buffer:
        return None
    pos = mf.wrote_position
    end_pos = pos + total
    # The Python path grows the file's blocks or rolls the segment here.
    if end_pos > mf.file_size - BLANK_SIZE or end_pos > mf.allocated:
        return None
    count = len(prepared)
    per = cq.units_per_file
    into = queue_offset % per
    if into + count > per or cq.max_offset != queue_offset or cq._closed or cq.read_only:
        return None
    phys = mf.file_from_offset + pos
    if phys < cq.max_physical_offset:
        return None  # append_units raises the documented error
    born_ip, born_port = born or store_host
    store_ip, store_port = store_host
    if len(store_ip) != 4 or len(born_ip) != 4:
        return None
    start = queue_offset - into
    maps = cq._maps
    tail = maps.tail
    qmap = tail[1] if tail is not None and tail[0] == start else cq._tail_map(start)
    commitlog.batch_start = phys  # the undo point of a failed put, as put_batch sets it
    offsets, end = c.append(
        mf._mm, pos, prepared, queue_id, queue_offset, phys, store_ts,
        store_ip, store_port, born_ip, born_port, qmap, into * _UNIT_SIZE,
    )  # fmt: skip
    mf.wrote_position = mf.committed_position = end_pos
    warmer = commitlog.warmer
    if warmer is not None and end_pos + _WARM_AHEAD > mf.warmed_position:
        warmer.wake()
    commitlog._since_release += total
    if commitlog._since_release >= RELEASE_EVERY:
        commitlog.release_cold_pages()
    maps.mark_dirty(start)
    cq.max_offset = queue_offset + count  # publish after the bytes are in place
    cq.max_physical_offset = end
    return offsets, end
