"""Replication support for the mmap store: commit-log bytes out of a master, into a slave.

A master hands out its commit log as it lies on disk (:func:`read`); a slave appends those
bytes unchanged at the same offsets (:func:`append`) and dispatches the complete records
among them into its own consume queues and key index (:func:`dispatch`), as RocketMQ's
ReputMessageService does on a slave. Records therefore sit at the same commit-log offsets on
both sides, and their message ids (store host + offset) stay valid on the slave.

A chunk may end in the middle of a record: the record is dispatched once its last byte has
arrived. After a restart, recovery cuts such a torn tail and the slave asks for the bytes
again from the end of its last complete record.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from mqcore.codec import BLANK_MAGIC_CODE, HEADER_SIZE, MESSAGE_MAGIC_CODE, record_tags_code
from mqcore.errors import InvalidArgumentError, StoreCorruptedError, StoreError
from mqcore.message import MessageExt
from mqcore.store import SCHEDULE_TOPIC, deliver_timestamp
from mqcore.uniqkey import record_index_keys

from .consumequeue import UNIT

if TYPE_CHECKING:
    from .store import MmapStore

__all__ = ["append", "dispatch", "read"]

_SIZE_MAGIC = struct.Struct(">ii")
_DISPATCH_BATCH = 1 << 20  # bytes of units gathered per queue before they are appended


def read(store: MmapStore, offset: int, max_bytes: int) -> bytes | None:
    """Up to ``max_bytes`` of the commit log from ``offset``, within one segment.

    Returns ``b""`` when nothing was appended past ``offset`` yet, ``None`` when ``offset``
    is not stored (below the oldest segment, or past the end).
    """
    log = store._commitlog
    end = log.max_offset
    if offset == end:
        return b""
    mf = log.file_for(offset)
    if mf is None or offset > end:
        return None
    stop = min(end, mf.file_end_offset, offset + max_bytes)
    view = log.read(offset, stop - offset)
    if view is None:
        return b""  # retention or a roll moved under us: the caller asks again
    return bytes(view)


def append(store: MmapStore, offset: int, data: bytes | memoryview) -> int:
    """Append ``data`` (commit-log bytes of a master) at ``offset``; returns the new end.

    ``offset`` must be the end of this store's commit log: a replica never has holes.
    Segment ends come as the master wrote them (a blank marker, then zeros), so a chunk
    never runs past a segment when both sides use the same ``segment_size``.
    """
    if store.read_only:
        raise StoreError(f"mmap store {str(store.path)!r} is open read-only; cannot replicate")
    view = memoryview(data)
    with store._write_lock:
        store._check_open()
        log = store._commitlog
        end = log.max_offset
        if offset != end:
            raise InvalidArgumentError(
                f"replicated bytes start at commit-log offset {offset}, but this store's "
                f"commit log ends at {end}; the slave must ask its master from its own end"
            )
        if store._replica_dispatched < 0:
            # Recovery dispatched every complete record below the end at opening.
            store._replica_dispatched = end
        pos = 0
        while pos < len(view):
            mf = log._writable()
            n = min(mf.file_size - mf.wrote_position, len(view) - pos)
            mf.append(view[pos : pos + n])
            pos += n
        new_end = log.max_offset
        if log.warmer is not None:
            log.warmer.wake()
    return new_end


def dispatch(store: MmapStore) -> set[tuple[str, int]]:
    """Build consume-queue units and index entries for the complete records appended since
    the last call; returns the ``(topic, queue_id)`` pairs that got new messages."""
    touched: set[tuple[str, int]] = set()
    with store._write_lock:
        store._check_open()
        log = store._commitlog
        frm = store._replica_dispatched
        if frm < 0:
            # First call since opening: recovery dispatched everything that was complete.
            frm = store._replica_dispatched = log.max_offset
        end = log.max_offset
        pending: dict[tuple[str, int], tuple[int, bytearray]] = {}
        keyed: list[tuple[str, list[str], int, int]] = []
        last_ts = 0
        while frm < end:
            mf = log.file_for(frm)
            if mf is None:
                break
            head = log.read(frm, 8)
            if head is None:
                break  # the header is not complete yet
            size, magic = _SIZE_MAGIC.unpack(head)
            if magic == BLANK_MAGIC_CODE:
                frm = mf.file_end_offset  # the rest of the segment is empty
                continue
            if magic != MESSAGE_MAGIC_CODE or size < HEADER_SIZE:
                raise StoreCorruptedError(
                    f"replicated commit log has no valid record header at offset {frm} "
                    f"(size {size}, magic {magic & 0xFFFFFFFF:#010x}); the master and this "
                    "slave disagree on the log: move the slave's store aside and let it copy "
                    "the log again",
                    path=str(mf.path),
                    offset=frm,
                )
            if frm + size > end:
                break  # the rest of the record is still on its way
            rec = log.read(frm, size)
            if rec is None:
                break
            msg = MessageExt(rec)
            key = (msg.topic, msg.queue_id)
            queued = pending.get(key)
            cq = store._cqs.get(key) or store._cq_for_write(*key)
            next_offset = queued[0] if queued is not None else cq.max_offset
            qoff = msg.queue_offset
            if qoff >= next_offset:
                if qoff > next_offset and not (queued is None and cq.min_offset == cq.max_offset):
                    raise StoreCorruptedError(
                        f"consume queue {msg.topic}-{msg.queue_id} ends at offset "
                        f"{next_offset} but the replicated record at commit-log offset {frm} "
                        f"has queue offset {qoff}; move the slave's store aside and let it "
                        "copy the log again",
                        path=str(cq.directory),
                        offset=frm,
                    )
                if queued is None:
                    if qoff > next_offset:
                        cq.append_units(qoff, b"", fill_gap=True)
                    queued = (qoff, bytearray())
                units = queued[1]
                ts = msg.store_timestamp
                if msg.topic == SCHEDULE_TOPIC and msg.delay_level > 0:
                    code = deliver_timestamp(store._delays, msg.delay_level, ts)
                else:  # in the timer topic, the deliver time
                    code = record_tags_code(msg)
                units += UNIT.pack(frm, size, code)
                pending[key] = (qoff + 1, units)
                keys = record_index_keys(msg)
                if keys:
                    keyed.append((msg.topic, keys, frm, ts))
                last_ts = ts
                if len(units) >= _DISPATCH_BATCH:
                    _drain(store, pending, touched)
            frm += size
        _drain(store, pending, touched)
        if keyed:
            store._index.put_keys(keyed)
        if last_ts:
            store._last_store_ts = max(store._last_store_ts, last_ts)
        store._replica_dispatched = frm
    return touched


def _drain(
    store: MmapStore,
    pending: dict[tuple[str, int], tuple[int, bytearray]],
    touched: set[tuple[str, int]],
) -> None:
    for key, (next_offset, units) in pending.items():
        first = next_offset - len(units) // UNIT.size
        store._cqs[key].append_units(first, units)
        touched.add(key)
    pending.clear()
