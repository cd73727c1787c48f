"""Reading a queue of the LMDB store: bounds, status rules and the consume-queue scan.

The plain scan (no filter) is the consumer's hot path, so it does its per-message work in C:
the consume-queue units and, when they point at adjacent records (the usual case: a batch
is written in one piece), the records too are read with one cursor walk each
(``islice(cursor.iternext())``), and the units are decoded with one ``iter_unpack``.
Filtered scans go unit by unit, as RocketMQ does, because each unit may be skipped.
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import accumulate, islice
from operator import itemgetter
from typing import Any

from mqcore import codec
from mqcore.interfaces import MessageFilter
from mqcore.plugins.store_lmdb import layout
from mqcore.store import GetStatus, position_status

__all__ = ["MAX_SCAN", "queue_bounds", "read_queue"]

# Units a filtered get may scan before it returns what it has (or NO_MATCHED_MSG); RocketMQ
# bounds a filtered pull the same way (16000 bytes of consume queue = 800 units).
MAX_SCAN = 800

_OFFSET = layout.OFFSET
_UNIT_UNPACK = layout.CQ_UNIT.unpack
_UNIT_ITER = layout.CQ_UNIT.iter_unpack
_CL = itemgetter(0)
_SIZE = itemgetter(1)


def queue_bounds(txn: Any, cq_db: Any, prefix: bytes) -> tuple[int, int]:
    """(min offset, max offset) of the queue under ``prefix``; (0, 0) when it has no unit."""
    cur = txn.cursor(db=cq_db)
    plen = len(prefix)
    if not cur.set_range(prefix):
        return 0, 0
    key = cur.key()
    if key[:plen] != prefix:
        return 0, 0
    low = _OFFSET.unpack_from(key, plen)[0]
    # The unit just before the next queue's first key is this queue's last.
    after = prefix[:-4] + layout.QUEUE_ID.pack(layout.QUEUE_ID.unpack(prefix[-4:])[0] + 1)
    if cur.set_range(after):
        cur.prev()
    else:
        cur.last()
    return low, _OFFSET.unpack_from(cur.key(), plen)[0] + 1


def read_queue(
    txn: Any,
    env: Any,
    prefix: bytes,
    offset: int,
    max_count: int,
    max_bytes: int,
    message_filter: MessageFilter | None,
) -> tuple[GetStatus, list[bytes], int, int, int]:
    """RocketMQ's getMessage on one queue: (status, records, next offset, min, max)."""
    low, high = queue_bounds(txn, env.cq, prefix)
    early = position_status(offset, low, high)
    if early is not None:
        return early[0], [], early[1], low, high
    cq = txn.cursor(db=env.cq)
    if not cq.set_key(prefix + _OFFSET.pack(offset)):
        return GetStatus.OFFSET_FOUND_NULL, [], offset + 1, low, high
    log_cur = txn.cursor(db=env.log)
    if message_filter is None:
        count = min(max_count, high - offset)
        records = _adjacent(cq, log_cur, prefix, offset, count, max_bytes)
        if records is None:
            cq.set_key(prefix + _OFFSET.pack(offset))
            records = _plain(cq, log_cur, count, max_bytes)
        scanned = len(records)
    else:
        limit = min(high - offset, max(MAX_SCAN, max_count))
        records, scanned = _filtered(cq, log_cur, limit, max_count, max_bytes, message_filter)
    status = GetStatus.FOUND if records else GetStatus.NO_MATCHED_MSG
    return status, records, offset + scanned, low, high


def _adjacent(
    cq: Any, log_cur: Any, prefix: bytes, offset: int, count: int, max_bytes: int
) -> list[bytes] | None:
    """The fast path: ``count`` units whose records are adjacent in the log (or ``None``).

    Only the first and the last unit are read. The units' records are distinct and in log
    order, so if the ``count``-th record from the first one is the last unit's, the records
    in between are exactly the queue's: one cursor walk reads them, and their sizes come from
    their lengths.
    """
    first = _UNIT_UNPACK(cq.value())[0]
    if count > 1:
        if not cq.set_key(prefix + _OFFSET.pack(offset + count - 1)):
            return None
        last_key = _OFFSET.pack(_UNIT_UNPACK(cq.value())[0])
        cq.set_key(prefix + _OFFSET.pack(offset))
    else:
        last_key = _OFFSET.pack(first)
    if not log_cur.set_key(_OFFSET.pack(first)):
        return None
    records = list(islice(log_cur.iternext(keys=False, values=True), count))
    if len(records) != count or log_cur.key() != last_key:
        return None
    total = list(accumulate(map(len, records)))
    if total[-1] > max_bytes:
        # The first message always goes, even alone over the limit (RocketMQ's rule).
        del records[max(1, bisect_right(total, max_bytes)) :]
    return records


def _plain(cq: Any, log_cur: Any, count: int, max_bytes: int) -> list[bytes]:
    """Up to ``count`` records from the cursor's unit on, within ``max_bytes`` (any layout)."""
    units = list(_UNIT_ITER(b"".join(islice(cq.iternext(keys=False, values=True), count))))
    sizes = list(map(_SIZE, units))
    total = list(accumulate(sizes))
    n = len(units)
    if total[-1] > max_bytes:
        n = max(1, bisect_right(total, max_bytes))
    keys = [_OFFSET.pack(cl) for cl in map(_CL, units[:n])]
    found = dict(log_cur.getmulti(keys))
    # A unit whose record is gone ends the read (it cannot happen without retention).
    out = []
    for key in keys:
        record = found.get(key)
        if record is None:
            break
        out.append(record)
    return out


def _filtered(
    cq: Any,
    log_cur: Any,
    limit: int,
    max_count: int,
    max_bytes: int,
    message_filter: MessageFilter,
) -> tuple[list[bytes], int]:
    """Scan at most ``limit`` units, keeping records that pass ``message_filter``."""
    tags_ok = message_filter.matches_tags_code
    props_ok = message_filter.matches_properties if message_filter.uses_properties else None
    records: list[bytes] = []
    total = 0
    scanned = 0
    expect = -1  # commit-log offset where the log cursor's next record starts
    for value in cq.iternext(keys=False, values=True):
        cl, size, code = _UNIT_UNPACK(value)
        if records and (len(records) >= max_count or total + size > max_bytes):
            break
        scanned += 1
        # Records of one batch are adjacent in the log: step the cursor instead of seeking.
        if tags_ok(code) and (
            (cl == expect and log_cur.next()) or log_cur.set_key(_OFFSET.pack(cl))
        ):
            record = log_cur.value()
            expect = cl + size
            if props_ok is None or props_ok(codec.record_properties(record, 0)):
                records.append(record)
                total += size
        if scanned >= limit:
            break
    return records, scanned
