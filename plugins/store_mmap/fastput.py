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

:func:`append_group` does the same for several puts (a group commit's, or one put alone)
in one call of ``_put.append_group``: the longest head of them that rolls nothing, each
put's records after the previous one's, all records before any unit and all units before
any index entry, with the puts' :class:`~mqcore.store.PutResult` lists built in C; the
store writes the rest of the group on the Python path.
"""

from __future__ import annotations

import itertools
from typing import Any

from mqcore import speedups
from mqcore.record.layout import BLANK_SIZE
from mqcore.store import SCHEDULE_TOPIC, PutResult
from mqcore.uniqkey import index_keys

from .commitlog import _WARM_AHEAD, RELEASE_EVERY, CommitLog
from .consumequeue import ConsumeQueue
from .indexfile import ENTRY_SIZE, IndexService, _pack_header

__all__ = ["SPEEDUPS", "append", "append_group"]

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
        _publish_index(index, entries[0], entries[1], state)  # type: ignore[arg-type]
    return offsets, end


def _publish_index(index: IndexService, meta: Any, args: tuple[Any, ...], state: Any) -> None:
    """Advance the index file's header past the entries a C call wrote (``state``)."""
    count, new_slots, *ends = state
    if count > meta.count:
        meta.begin_phy, meta.begin_ts, meta.end_phy, meta.end_ts = ends
        meta.slot_count += new_slots
        meta.count = count  # publish
        _pack_header(
            args[0], 0, meta.begin_ts, meta.end_ts, meta.begin_phy, meta.end_phy,
            meta.slot_count, count,
        )  # fmt: skip
        index._maps.mark_dirty(meta.path)


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
        # Fewer ids than records: the rest have none (as the Python path zips them); the C
        # write needs one slot per record.
        ids = itertools.chain(uniqs, itertools.repeat(None))
        keys = [
            index_keys(p[10], uniq) if p[10] or uniq else None
            for p, uniq in zip(prepared, ids, strict=False)
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


def append_group(
    commitlog: CommitLog,
    queues: dict[tuple[str, int], ConsumeQueue],
    staged: list[Any],
    store_host: tuple[bytes, int],
    index: IndexService,
    prefix: str,
    last_ts: int,
) -> tuple[list[list[PutResult]], int, int] | None:
    """Write the longest head of ``staged`` (the store's checked requests of a group) that
    rolls nothing in one C call: records, units and index entries, as :func:`append` writes
    each; the caller holds the write lock and goes on from there with the Python path.

    Returns the put results of the written requests, in order, the offset past the last
    record and the last store time; None when not even the first request is the common case
    (a new queue, a roll, a new index file, a schedule-topic request, an IPv6 host...).
    """
    c = _c
    if c is None:
        return None
    mf = commitlog._current
    if mf is None or mf.uses_buffer:
        return None
    store_ip, store_port = store_host
    if len(store_ip) != 4:
        return None
    pos = mf.wrote_position
    room = min(mf.file_size - BLANK_SIZE, mf.allocated)  # past it: grow the blocks or roll
    base = mf.file_from_offset
    # What the index takes without a new file or more disk blocks (0: nothing).
    files = index._files
    meta = files[-1] if files else None
    fits = 0
    entries: tuple[Any, ...] | None = None
    if meta is not None and not index._closed and not index.read_only:
        last_phy = meta.end_phy if meta.count > 1 or len(files) > 1 else -1
        if base + pos > last_phy:
            entries = _group_index_args(index, meta)
            if entries is not None:
                fits = min(
                    index.max_index_count - meta.count,
                    (meta.reserved - index._entries_at) // ENTRY_SIZE - meta.count,
                )
    jobs: list[Any] = []
    # Each queue written: [its next offset, start of its file, commit-log offset past it,
    # its file's map]
    touched: dict[ConsumeQueue, list[Any]] = {}
    at = pos
    for _, topic, queue_id, prepared, uniqs, _, _, total, born, now in staged:
        end_at = at + total
        if end_at > room or topic == SCHEDULE_TOPIC:
            break
        cq = queues.get((topic, queue_id))
        if cq is None:
            break  # a new queue: its first file is made on the Python path
        count = len(prepared)
        seen = touched.get(cq)
        if seen is None:
            if cq._closed or cq.read_only or base + at < cq.max_physical_offset:
                break
            qoff = cq.max_offset
        else:
            qoff = seen[0]
        per = cq.units_per_file
        into = qoff % per
        if into == 0 or into + count > per:
            break  # a new queue file
        if born is None:
            born = store_host
        elif len(born[0]) != 4:
            break
        if uniqs is not None and len(uniqs) != count:  # as the Python path zips them
            uniqs = [*uniqs[:count], *[None] * (count - len(uniqs))]
        if count == 1 and not prepared[0][10]:
            keys = None  # the unique id alone, if any: the C call takes it from uniqs
            if uniqs is not None and uniqs[0] is not None:
                fits -= 1
        else:
            keys = _keys(prepared, uniqs)
            uniqs = None  # in keys
            if keys is not None:
                fits -= sum(len(k) for k in keys if k)
        if fits < 0:
            break
        if seen is None:
            start = qoff - into
            tail = cq._maps.tail
            qmap = tail[1] if tail is not None and tail[0] == start else cq._tail_map(start)
            seen = touched[cq] = [qoff, start, 0, qmap]
        store_ts = now if now >= last_ts else last_ts
        last_ts = store_ts
        jobs.append(
            (prepared, queue_id, qoff, store_ts, born[0], born[1], seen[3], into * _UNIT_SIZE,
             topic, keys, uniqs)
        )  # fmt: skip
        seen[0] = qoff + count
        seen[2] = base + end_at
        at = end_at
    if not jobs:
        return None
    phys = base + pos
    commitlog.batch_start = phys  # the undo point of a failed put, as put_batch sets it
    results, end, state = c.append_group(
        mf._mm, pos, phys, store_ip, store_port, prefix, PutResult, jobs, entries
    )
    mf.wrote_position = mf.committed_position = at
    warmer = commitlog.warmer
    if warmer is not None and at + _WARM_AHEAD > mf.warmed_position:
        warmer.wake()
    commitlog._since_release += at - pos
    if commitlog._since_release >= RELEASE_EVERY:
        commitlog.release_cold_pages()
    for cq, (qend, start, phys_end, _) in touched.items():
        cq._maps.mark_dirty(start)
        cq.max_offset = qend  # publish after the bytes are in place
        cq.max_physical_offset = phys_end
    if state is not None:
        _publish_index(index, meta, entries, state)  # type: ignore[arg-type]
    return results, end, last_ts


def _group_index_args(index: IndexService, meta: Any) -> tuple[Any, ...] | None:
    """The index arguments of :func:`append_group` for the current file ``meta`` (None
    when it is not mapped)."""
    tail = index._maps.tail
    mm = tail[1] if tail is not None and tail[0] is meta.path else index._map(meta)
    if mm is None:
        return None
    return (
        mm, index.max_hash_slots, index._entries_at, index.max_index_count, meta.count,
        meta.begin_phy, meta.begin_ts, meta.end_phy, meta.end_ts,
    )  # fmt: skip
