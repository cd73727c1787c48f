"""A put's records, units and index entries in one C call, for the common case (the
``storeput`` speedups).

:func:`append` writes a batch that fits in the commit log's current segment, in its consume
queue's current file and in the key index's current file with one call of
``mqcore.plugins.store_mmap._put.append``: records stamped straight into the segment's map,
units into the queue file's map, then the entries of its keys and unique ids into the index
file's map (the header after them, as :meth:`~.indexfile.IndexService.put_keys` writes it).
It then
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
from mqcore.uniqkey import index_keys

from .commitlog import _WARM_AHEAD, RELEASE_EVERY, CommitLog
from .consumequeue import ConsumeQueue
from .indexfile import ENTRY_SIZE, IndexService, _pack_header

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
    topic: str,
    uniqs: list[str | None] | None,
    index: IndexService | None,
) -> tuple[list[int], int] | None:
    """Write ``prepared`` (records, units and, with ``index``, their index entries) in one C
    call, or return None when this put is not the common case. Returns the records'
    commit-log offsets and the offset past the last. The caller holds the write lock and
    made sure ``queue_offset`` is the queue's end; without ``index`` it indexes the keys.
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
    entries: Any = None
    if index is not None:
        keys = _keys(prepared, uniqs)
        if keys is not None:
            entries = _index_args(index, topic, keys, phys)
            if entries is None:
                return None
    start = queue_offset - into
    maps = cq._maps
    tail = maps.tail
    qmap = tail[1] if tail is not None and tail[0] == start else cq._tail_map(start)
    commitlog.batch_start = phys  # the undo point of a failed put, as put_batch sets it
    offsets, end, state = c.append(
        mf._mm, pos, prepared, queue_id, queue_offset, phys, store_ts,
        store_ip, store_port, born_ip, born_port, qmap, into * _UNIT_SIZE,
        entries[1] if entries is not None else None,
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
    if state is not None:
        meta = entries[0]
        count, new_slots, *ends = state
        if count > meta.count:
            meta.begin_phy, meta.begin_ts, meta.end_phy, meta.end_ts = ends
            meta.slot_count += new_slots
            meta.count = count  # publish
            _pack_header(
                entries[1][0], 0, meta.begin_ts, meta.end_ts, meta.begin_phy, meta.end_phy,
                meta.slot_count, count,
            )  # fmt: skip
            index._maps.mark_dirty(meta.path)  # type: ignore[union-attr]
    return offsets, end


def _keys(prepared: list[Any], uniqs: list[str | None] | None) -> list[Any] | None:
    """Each record's index keys (None for none), as the dispatcher finds them; None when
    no record has any."""
    if len(prepared) == 1:
        own = prepared[0][10]
        if not own and not uniqs:
            return None
        found = index_keys(own, uniqs[0] if uniqs else None)
        return [found] if found else None
    if uniqs is None:
        if not any(p[10] for p in prepared):
            return None
        keys = [index_keys(p[10], None) if p[10] else None for p in prepared]
    else:
        keys = [
            index_keys(p[10], uniq) if p[10] or uniq else None
            for p, uniq in zip(prepared, uniqs, strict=False)
        ]
    return keys if any(keys) else None


def _index_args(index: IndexService, topic: str, keys: list[Any], phys: int) -> Any:
    """``(file, arguments of the C call)`` when the keys' entries fit the index's current
    file as it is (no new file, no more disk blocks, nothing indexed at or past ``phys``),
    else None (:meth:`IndexService.put_keys` does it)."""
    files = index._files
    if not files or index._closed or index.read_only:
        return None
    meta = files[-1]
    last_phy = meta.end_phy if meta.count > 1 or len(files) > 1 else -1
    if phys <= last_phy:
        return None
    pending = sum(len(k) for k in keys if k)
    limit = index.max_index_count
    if meta.count + pending > limit:
        return None
    if meta.reserved < index._entries_at + (meta.count + pending) * ENTRY_SIZE:
        return None
    tail = index._maps.tail
    mm = tail[1] if tail is not None and tail[0] is meta.path else index._map(meta)
    if mm is None:
        return None
    args = (
        mm, topic, keys, index.max_hash_slots, index._entries_at, limit, meta.count,
        meta.begin_phy, meta.begin_ts, meta.end_phy, meta.end_ts,
    )  # fmt: skip
    return meta, args
