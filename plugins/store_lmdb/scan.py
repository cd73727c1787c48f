"""Reading the LMDB store: queue bounds, status rules, the consume-queue scan, record lookup.

A queue is a run of consume-queue items, one per put batch, each keyed by the batch's last
queue offset (see :mod:`.layout`). A plain get positions one cursor on the item holding
its start offset, decodes the sizes it needs with one ``struct`` call, copies the wanted
span of the batch's commit-log item out of LMDB once and describes each record as a
position and a size in that copy: the caller builds ``MessageExt`` views or memoryviews
over it without copying again. A pull rarely touches a second batch; one over many small
batches decodes their units together and reads their log items with one cursor walk.
Filtered scans go unit by unit, as RocketMQ does, because each unit may be skipped; they
copy the records they keep into one buffer.

Read transactions run with ``buffers=True``: values are views into the map, valid only
until the transaction ends, so everything returned from here is a copy (``bytes``).
"""

from __future__ import annotations

import functools
import struct
from bisect import bisect_left, bisect_right
from itertools import accumulate, islice
from operator import itemgetter
from typing import Any

from mqcore import codec
from mqcore.interfaces import MessageFilter
from mqcore.plugins.store_lmdb import layout
from mqcore.record.layout import HEADER_SIZE, POS_STORE_TIMESTAMP
from mqcore.store import GetStatus, position_status

__all__ = ["MAX_SCAN", "Chunk", "batch_timestamp", "queue_bounds", "read_queue", "record_at"]

# Units a filtered get may scan before it returns what it has (or NO_MATCHED_MSG); RocketMQ
# bounds a filtered pull the same way (16000 bytes of consume queue = 800 units).
MAX_SCAN = 800

_OFFSET = layout.OFFSET
_OFFSET_PACK = layout.OFFSET.pack
_UNIT = layout.UNIT_SIZE
_UNIT_ITER = layout.CQ_UNIT.iter_unpack
_FIRST_CL = layout.OFFSET.unpack_from  # a unit starts with its commit-log offset
_SIZE = struct.Struct(">i")  # a record starts with its total size
_TIMESTAMP = struct.Struct(">q")
_VALUE = itemgetter(1)

#: Records read in one piece: ``(their copy, their starts in it, their sizes)``.
Chunk = tuple[bytes, list[int], list[int]]
#: What a read of consume-queue items returns when a batch they point at is not in the log.
_GONE: Any = object()


def queue_bounds(txn: Any, env: Any, prefix: bytes) -> tuple[int, int]:
    """(min offset, max offset) of the queue under ``prefix``; (0, 0) when it never held a unit."""
    return _bounds(txn, env.meta, txn.cursor(db=env.cq), prefix)


def _bounds(txn: Any, meta_db: Any, cur: Any, prefix: bytes) -> tuple[int, int]:
    plen = len(prefix)
    if not cur.set_range(prefix) or cur.key()[:plen] != prefix:
        # No item: a queue never written, or one whose items retention deleted all; then its
        # meta entry keeps the offset after the last one deleted (min == max, as in RocketMQ).
        floor = txn.get(layout.QUEUE_META + prefix, db=meta_db)
        low = _OFFSET.unpack(floor)[0] if floor is not None and len(floor) == 8 else 0
        return low, low
    key = cur.key()
    # The first item ends at its key's offset and holds len // 20 units.
    low = _OFFSET.unpack_from(key, plen)[0] + 1 - len(cur.value()) // _UNIT
    # The item just before the next queue's first key is this queue's last.
    if cur.set_range(_next_queue(prefix)):
        cur.prev()
    else:
        cur.last()
    return low, _OFFSET.unpack_from(cur.key(), plen)[0] + 1


@functools.lru_cache(maxsize=4096)
def _next_queue(prefix: bytes) -> bytes:
    """The prefix of the queue after ``prefix`` (same topic, queue id + 1)."""
    return prefix[:-4] + layout.QUEUE_ID.pack(layout.QUEUE_ID.unpack(prefix[-4:])[0] + 1)


def read_queue(
    txn: Any,
    env: Any,
    prefix: bytes,
    offset: int,
    max_count: int,
    max_bytes: int,
    message_filter: MessageFilter | None,
) -> tuple[GetStatus, list[Chunk], int, int, int]:
    """RocketMQ's getMessage on one queue: (status, chunks, next offset, min, max)."""
    cq = txn.cursor(db=env.cq)
    low, high = _bounds(txn, env.meta, cq, prefix)
    early = position_status(offset, low, high)
    if early is not None:
        return early[0], [], early[1], low, high
    cq.set_range(prefix + _OFFSET_PACK(offset))  # offset < high: an item of this queue
    if message_filter is None:
        count = min(max_count, high - offset)
        chunks, scanned, gone = _plain(txn, env.log, cq, prefix, offset, count, max_bytes)
    else:
        limit = min(high - offset, max(MAX_SCAN, max_count))
        chunks, scanned, gone = _filtered(
            txn, env.log, cq, prefix, offset, limit, max_count, max_bytes, message_filter
        )
    if not chunks and (gone or not scanned):
        # Units whose batch is gone from the log and nothing else read: RocketMQ's answer for
        # a unit pointing at deleted data, skipping them. Retention deletes a batch's log and
        # consume-queue items in one transaction, so a snapshot only shows this if the two
        # disagree (a damaged store); the pull then moves past the units instead of failing.
        return GetStatus.OFFSET_FOUND_NULL, [], offset + max(1, scanned), low, high
    status = GetStatus.FOUND if chunks else GetStatus.NO_MATCHED_MSG
    return status, chunks, offset + scanned, low, high


def read_units(
    txn: Any, env: Any, prefix: bytes, offset: int, max_count: int
) -> tuple[GetStatus, bytes, int, int, int]:
    """Up to ``max_count`` consume-queue units of one queue from ``offset``, records not read:
    (status, units, next offset, min, max)."""
    cq = txn.cursor(db=env.cq)
    low, high = _bounds(txn, env.meta, cq, prefix)
    early = position_status(offset, low, high)
    if early is not None:
        return early[0], b"", early[1], low, high
    cq.set_range(prefix + _OFFSET_PACK(offset))  # offset < high: an item of this queue
    count = min(max_count, high - offset)
    key, units = cq.item()
    n = len(units) // _UNIT
    skip = offset - (_OFFSET.unpack_from(key, len(prefix))[0] + 1 - n)
    parts = [bytes(units[skip * _UNIT :])]
    got = n - skip
    # ``count`` never exceeds what the queue holds from ``offset``: the items are its own.
    while got < count and cq.next():
        units = cq.value()
        parts.append(bytes(units))
        got += len(units) // _UNIT
    return GetStatus.FOUND, b"".join(parts)[: count * _UNIT], offset + count, low, high


def _plain(
    txn: Any, log_db: Any, cq: Any, prefix: bytes, offset: int, count: int, max_bytes: int
) -> tuple[list[Chunk], int, int]:
    """Up to ``count`` records from ``offset`` on, within ``max_bytes``;
    (chunks, units passed, units whose batch is gone).

    ``count`` never exceeds what the queue holds from ``offset``, so the items that cover
    it are all this queue's. Items are taken in rounds: first the one holding ``offset``
    (usually enough), then as many as the rest probably needs, walked by the cursor in C.
    A batch missing from the log ends the pull before it; when it is the first one, its
    units are passed (reported as gone) so that the next pull moves on.
    """
    plen = len(prefix)
    key, units = cq.item()
    n = len(units) // _UNIT
    skip = offset - (_OFFSET.unpack_from(key, plen)[0] + 1 - n)
    items = [units]
    if n - skip < count and cq.next():
        # More items are needed: walk ahead about as many as the rest needs, sizing them
        # like this one (items of one queue tend to hold alike batches).
        items += islice(cq.iternext(keys=False, values=True), _ahead(count - n + skip, n))
    log_cur = None
    chunks: list[Chunk] = []
    got = 0
    total = 0
    rest: list[Any] = []  # items walked but not read yet (after a gone batch among them)
    while True:
        if len(items) == 1:
            chunk, full = _one_item(txn, log_db, items[0], skip, count - got, total, max_bytes)
        else:
            if log_cur is None:
                log_cur = txn.cursor(db=log_db)
            chunk, full = _items(log_cur, items, skip, count - got, total, max_bytes)
        if chunk is _GONE:
            if len(items) > 1:  # some batch among them is gone: read them one at a time
                rest = items[1:] + rest
                items = items[:1]
                continue
            if not chunks:
                return [], min(count, len(items[0]) // _UNIT - skip), 1
            break
        if chunk is None:
            break
        chunks.append(chunk)
        got += len(chunk[1])
        total += len(chunk[0])
        if full or got >= count:
            break
        skip = 0
        if rest:
            items, rest = rest, []
            continue
        if not cq.next():
            break
        walk = cq.iternext(keys=False, values=True)
        items = list(islice(walk, _ahead(count - got, len(items[-1]) // _UNIT)))
    return chunks, got, 0


def _ahead(need: int, per: int) -> int:
    """Items to walk for ``need`` more units at about ``per`` units an item."""
    return min(need, -(-need // max(1, per)) + 1)


def _cut(sizes: list[int], total: int, max_bytes: int, first: bool) -> tuple[list[int], bool]:
    """Record starts (from 0, plus the end) of the ``sizes`` that fit ``max_bytes``."""
    ends = list(accumulate(sizes, initial=0))
    if total + ends[-1] <= max_bytes:
        return ends, False
    # The first message always goes, even alone over the limit (RocketMQ's rule).
    take = max(1 if first else 0, bisect_right(ends, max_bytes - total) - 1)
    del ends[take + 1 :]
    return ends, True


def _one_item(
    txn: Any, log_db: Any, units: Any, skip: int, need: int, total: int, max_bytes: int
) -> tuple[Any, bool]:
    """Records of one consume-queue item from its unit ``skip`` on: (chunk, None when
    nothing fits or :data:`_GONE` when the batch is not in the log; full)."""
    take = min(len(units) // _UNIT - skip, need)
    # A batch's records are adjacent in its log item: the first wanted unit's commit-log
    # offset and the sizes place them all.
    sizes = list(layout.sizes_struct(take).unpack_from(units, skip * _UNIT))
    starts, full = _cut(sizes, total, max_bytes, total == 0)
    span = starts.pop()
    if not starts:
        return None, full
    del sizes[len(starts) :]
    base = _FIRST_CL(units, 0)[0]
    view = txn.get(_OFFSET_PACK(base), db=log_db)
    if view is None:
        return _GONE, False
    first = _FIRST_CL(units, skip * _UNIT)[0] - base
    # The one copy out of the map: only the records asked for, not the whole batch.
    data = bytes(view) if span == len(view) else bytes(view[first : first + span])
    return (data, starts, sizes), full


def _items(
    log_cur: Any, items: list[Any], skip: int, need: int, total: int, max_bytes: int
) -> tuple[Any, bool]:
    """Records of several consume-queue items, from unit ``skip`` of the first on:
    (one chunk, None or :data:`_GONE` as for :func:`_one_item`; full).

    The items' units are decoded together; their log items are read with one cursor walk
    when adjacent in the log, else one ``getmulti``, and the wanted spans are joined into one
    copy (many small batches: one pull, one buffer).
    """
    joined = b"".join(items)
    take = min(len(joined) // _UNIT - skip, need)
    sizes = list(layout.sizes_struct(take).unpack_from(joined, skip * _UNIT))
    starts, full = _cut(sizes, total, max_bytes, total == 0)
    span = starts[-1]
    take = len(starts) - 1
    if take == 0:
        return None, full
    del sizes[take:]
    # The items holding the ``take`` records.
    item_ends = list(accumulate(map(len, items)))  # in bytes of units
    m = bisect_left(item_ends, (skip + take) * _UNIT) + 1
    base = _FIRST_CL(items[0], 0)[0]
    views = None
    if log_cur.set_key(_OFFSET_PACK(base)):
        # One queue's batches are usually adjacent in the log (puts to other queues did not
        # come between): then one cursor walk reads them, checked by the last key it reaches.
        views = list(islice(log_cur.iternext(keys=False, values=True), m))
        if len(views) != m or log_cur.key() != _OFFSET_PACK(_FIRST_CL(items[m - 1], 0)[0]):
            views = None
    if views is None:
        keys = [_OFFSET_PACK(_FIRST_CL(u, 0)[0]) for u in items[:m]]
        views = list(map(_VALUE, log_cur.getmulti(keys)))
        if len(views) != m:  # a batch is gone: the caller reads them one by one
            return _GONE, False
    # The first item is read from its unit ``skip`` on, the last one may be used in part.
    first = _FIRST_CL(items[0], skip * _UNIT)[0] - base
    if m == 1:
        views[0] = views[0][first : first + span]
    else:
        views[-1] = views[-1][: span - starts[item_ends[m - 2] // _UNIT - skip]]
        views[0] = views[0][first:]
    starts.pop()
    return (b"".join(views), starts, sizes), full


def _filtered(
    txn: Any,
    log_db: Any,
    cq: Any,
    prefix: bytes,
    offset: int,
    limit: int,
    max_count: int,
    max_bytes: int,
    message_filter: MessageFilter,
) -> tuple[list[Chunk], int, int]:
    """Scan at most ``limit`` units, keeping records that pass ``message_filter``;
    (chunks, units scanned, units whose batch is gone).

    ``limit`` never exceeds what the queue holds from ``offset``. The records kept are
    views into the map until the end, then joined into one copy (one chunk). The units of
    a batch missing from the log are passed over, as RocketMQ passes units whose data was
    deleted.
    """
    tags_ok = message_filter.matches_tags_code
    props_ok = message_filter.matches_properties if message_filter.uses_properties else None
    plen = len(prefix)
    parts: list[Any] = []
    sizes: list[int] = []
    total = 0
    scanned = 0
    gone = 0
    key, units = cq.item()
    skip = offset - (_OFFSET.unpack_from(key, plen)[0] + 1 - len(units) // _UNIT)
    log_cur = txn.cursor(db=log_db)
    expect = -1  # commit-log offset where the log cursor's item ends
    done = False
    # iternext yields the cursor's item (the one read above) first, then the next ones.
    for units in cq.iternext(keys=False, values=True):
        base = -1  # the item's log item is read when its first unit passes the tags test
        view: Any = None
        left = len(units) // _UNIT - skip  # units of this item not scanned yet
        for cl, size, code in _UNIT_ITER(units[skip * _UNIT :] if skip else units):
            left -= 1
            if parts and (len(parts) >= max_count or total + size > max_bytes):
                done = True
                break
            scanned += 1
            if tags_ok(code):
                if view is None:
                    base = _FIRST_CL(units, 0)[0]
                    # Log items are contiguous in commit-log offsets: when this batch starts
                    # where the last one read ended, it is the cursor's next item.
                    want = _OFFSET_PACK(base)
                    if not (
                        (base == expect and log_cur.next() and log_cur.key() == want)
                        or log_cur.set_key(want)
                    ):  # the batch is gone: pass over its other units too
                        passed = min(left, limit - scanned)
                        scanned += passed
                        gone += passed + 1
                        expect = -1
                        done = scanned >= limit
                        break
                    view = log_cur.value()
                    expect = base + len(view)
                pos = cl - base
                if props_ok is None or props_ok(codec.record_properties(view, pos)):
                    parts.append(view[pos : pos + size])
                    sizes.append(size)
                    total += size
            if scanned >= limit:
                done = True
                break
        if done:
            break
        skip = 0
    if not parts:
        return [], scanned, gone
    starts = list(accumulate(sizes, initial=0))
    starts.pop()
    # The kept records, copied out of the map into one buffer.
    return [(b"".join(parts), starts, sizes)], scanned, gone


def record_at(txn: Any, log_db: Any, commitlog_offset: int) -> bytes | None:
    """A copy of the record starting at ``commitlog_offset``, or None.

    The record lives in the item with the greatest key <= the offset; walking the item's
    records by their sizes confirms the offset is a record's start, not a byte inside one.
    """
    if commitlog_offset < 0:
        return None
    cur = txn.cursor(db=log_db)
    key = _OFFSET_PACK(commitlog_offset)
    if cur.set_range(key):
        if cur.key() != key and not cur.prev():
            return None
    elif not cur.last():
        return None
    view = cur.value()
    want = commitlog_offset - _OFFSET.unpack(cur.key())[0]
    if want > len(view) - HEADER_SIZE:  # no record starts that late in the batch
        return None
    pos = 0
    while pos < want:
        size = _SIZE.unpack_from(view, pos)[0]
        if size <= 0:
            return None
        pos += size
    if pos != want:
        return None
    return bytes(view[pos : pos + _SIZE.unpack_from(view, pos)[0]])


def batch_timestamp(txn: Any, log_db: Any, units: Any) -> int:
    """Store timestamp of the batch whose consume-queue item is ``units`` (one per put);
    -1 when the batch is not in the log (retention deletes the oldest: it counts as older
    than any timestamp asked for)."""
    view = txn.get(_OFFSET_PACK(_FIRST_CL(units, 0)[0]), db=log_db)
    if view is None:
        return -1
    return int(_TIMESTAMP.unpack_from(view, POS_STORE_TIMESTAMP)[0])
