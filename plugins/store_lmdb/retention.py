"""Retention of the LMDB store: delete the oldest batches, as the mmap store deletes segments.

The rules are RocketMQ's CleanCommitLogService and CleanConsumeQueueService, with a put
batch (one ``commitlog`` item) in place of a segment file:

- a batch is *expired* when its store timestamp (all its records share one) is more than
  ``file_reserved_time_hours`` old; the cleaner deletes expired batches, oldest first, in
  the ``delete_when`` hours, or at any hour while the disk holding the store is fuller than
  ``disk_max_used_space_ratio`` percent; a manual pass (a direct ``delete_expired_files()``)
  deletes them at any hour;
- only while the disk is fuller than ``disk_space_clean_forcibly_ratio`` percent are the
  oldest batches deleted whatever their age, until the disk is back within it
  (:mod:`mqcore.retentionrules` holds these rules, shared with the mmap store);
- the newest batch is always kept (it tells a reopened writer where the log ends).

Deleting a batch deletes, in the same write transaction, its consume-queue item (one per
put, found from the first record's topic, queue id and queue offset) and its key-index
entries, so a reader never sees a unit or an index entry pointing at a deleted record, and
a queue's min offset is simply its first remaining unit. A queue losing all its items keeps
its offsets in its meta entry (see :mod:`.layout`).

LMDB never shrinks its file: deleted pages go to its free list and later writes reuse them.
Retention therefore bounds the file's growth rather than shrinking it, and the disk-ratio
check counts the file's free pages as free space (otherwise every pass would delete more,
since deleting never lowers the disk's usage).

Work is done in bounded write transactions (:data:`MAX_TXN_ITEMS` batches,
:data:`MAX_TXN_RECORDS` records or :data:`MAX_TXN_BYTES` bytes each), each under the store's
lock for its own duration only, so producers wait for one short transaction at most.
"""

from __future__ import annotations

import functools
import math
import os
import shutil
import struct
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from mqcore.logs import get_logger
from mqcore.message import MessageExt
from mqcore.plugins.store_lmdb import layout
from mqcore.record.layout import POS_STORE_TIMESTAMP
from mqcore.retentionrules import plan
from mqcore.uniqkey import record_index_keys

if TYPE_CHECKING:
    from mqcore.plugins.store_lmdb.environment import Environment

__all__ = [
    "CLEAN_INTERVAL",
    "CLOCK",
    "MAX_TXN_BYTES",
    "MAX_TXN_ITEMS",
    "MAX_TXN_RECORDS",
    "Cleaner",
    "Pass",
    "RetentionHost",
    "delete_expired",
    "disk_space",
    "reusable_bytes",
]

log = get_logger(__name__)

CLEAN_INTERVAL = 10.0  # seconds between passes (RocketMQ's cleanResourceInterval)
#: The cleaner thread's clock (seconds since the epoch); ``None``: the current time.
CLOCK: Callable[[], float] | None = None
MAX_TXN_ITEMS = 2048
MAX_TXN_RECORDS = 16384
MAX_TXN_BYTES = 64 * 1024 * 1024

_OFFSET = layout.OFFSET
_SIZE = struct.Struct(">i")  # a record starts with its total size
_TIMESTAMP = struct.Struct(">q")


def disk_space(path: str | os.PathLike[str]) -> tuple[int, int]:
    """(bytes used, capacity) of the disk holding ``path``, as df counts them."""
    usage = shutil.disk_usage(path)
    # As df's Use%: blocks reserved for root (or otherwise unavailable) count as neither.
    return usage.used, usage.used + usage.free


def reusable_bytes(env: Environment, txn: Any) -> int:
    """Bytes of the LMDB file that no sub-database uses: its free pages, reused by writes."""
    info = env.env.info()
    main = env.env.stat()
    used = main["branch_pages"] + main["leaf_pages"] + main["overflow_pages"]
    for db in (env.log, env.cq, env.keyindex, env.meta):
        stat = txn.stat(db)
        used += stat["branch_pages"] + stat["leaf_pages"] + stat["overflow_pages"]
    # Pages 0 and 1 are LMDB's meta pages. With writemap the file's blocks are reserved up
    # to the map size: that tail is on disk, and free for writes, too.
    free = max(0, int(info["last_pgno"]) + 1 - 2 - int(used)) * int(main["psize"])
    return free + env.reserved_tail_bytes()


class Pass:
    """What one retention pass deleted (a mutable tally)."""

    def __init__(self) -> None:
        self.batches = 0
        self.records = 0
        self.bytes = 0
        self.expired = 0  # batches deleted for their age (the rest: for disk space)
        self.min_offset = -1  # the commit log's first offset after the pass (-1: unchanged)


class RetentionHost(Protocol):
    """What retention reads of the store it cleans (:class:`.store.LmdbStore`): its settings,
    its environment, and the lock and closing state it shares with the store's writers.
    Declared here, so that retention needs no import of the store that runs it."""

    @property
    def path(self) -> Path: ...

    @property
    def file_reserved_time_hours(self) -> float: ...

    @property
    def disk_max_used_space_ratio(self) -> float: ...

    @property
    def disk_space_clean_forcibly_ratio(self) -> float: ...

    @property
    def delete_when(self) -> str: ...

    @property
    def _env(self) -> Environment: ...

    @property
    def _lock(self) -> AbstractContextManager[Any]: ...

    @property
    def _closed(self) -> bool: ...

    @property
    def _stopping(self) -> threading.Event: ...

    def delete_expired_files(self, now: float | None = None, *, scheduled: bool = False) -> int:
        """One retention pass (see :meth:`.store.LmdbStore.delete_expired_files`)."""
        ...


def delete_expired(store: RetentionHost, now: float, *, manual: bool = True) -> Pass:
    """One retention pass over ``store`` at time ``now`` (seconds since the epoch);
    ``manual``: a direct call, else the cleaner's pass."""
    done = Pass()
    reserved = store.file_reserved_time_hours * 3600.0
    env = store._env
    with store._lock:
        if store._closed or store._stopping.is_set():
            return done
        txn = env.begin()
        try:
            reusable = reusable_bytes(env, txn)
            oldest = _oldest_timestamp(txn, env)
        finally:
            txn.abort()
    if oldest is None:
        return done  # at most one batch: it is kept
    used, capacity = disk_space(store.path)
    rules = plan(
        used=used - reusable,
        capacity=capacity,
        now=now,
        manual=manual,
        max_used_ratio=store.disk_max_used_space_ratio,
        clean_forcibly_ratio=store.disk_space_clean_forcibly_ratio,
        delete_when=store.delete_when,
    )
    # Batches stored before ``cutoff`` (ms) are expired; infinite hours: none ever is, and
    # outside the delete hours of a cleaner's pass none is deleted for its age.
    expiring = rules.expired and math.isfinite(reserved)
    cutoff = int((now - reserved) * 1000) if expiring else -(2**63)
    # Bytes to free whatever their age, for the disk to be within the forcible ratio.
    over = rules.force_over
    if oldest >= cutoff and over <= 0:
        return done  # the usual pass: no write transaction at all
    while True:
        with store._lock:
            if store._closed or store._stopping.is_set():
                break
            step = env.write(
                functools.partial(_delete_oldest, env=env, cutoff_ms=cutoff, over=over)
            )
            env.touched(step.bytes)
            env.release_pages()
        done.batches += step.batches
        done.records += step.records
        done.bytes += step.bytes
        done.expired += step.expired
        if step.batches:
            done.min_offset = step.min_offset
        over -= step.bytes
        bounded = (
            step.batches >= MAX_TXN_ITEMS
            or step.records >= MAX_TXN_RECORDS
            or step.bytes >= MAX_TXN_BYTES
        )
        if not bounded:
            break  # the transaction stopped on a batch to keep, not on its bounds
    if done.batches:
        log.info(
            "lmdb_retention_deleted",
            path=str(store.path),
            batches=done.batches,
            records=done.records,
            bytes=done.bytes,
            expired=done.expired,
            disk_full=done.batches - done.expired,
            expired_by=rules.reason or None,
            min_commitlog_offset=done.min_offset,
        )
    return done


def _oldest_timestamp(txn: Any, env: Environment) -> int | None:
    """Store timestamp of the oldest batch, or None when there are fewer than two."""
    cur = txn.cursor(db=env.log)
    if not cur.first() or not cur.next():
        return None
    cur.first()
    return int(_TIMESTAMP.unpack_from(cur.value(), POS_STORE_TIMESTAMP)[0])


def _delete_oldest(txn: Any, env: Environment, cutoff_ms: int, over: float) -> Pass:
    """Delete the oldest batches to delete, within one transaction's bounds."""
    step = Pass()
    log_cur = txn.cursor(db=env.log)
    if not log_cur.last():
        return step
    newest = bytes(log_cur.key())
    log_cur.first()
    cq = txn.cursor(db=env.cq)
    floors: dict[bytes, int] = {}
    while (
        step.batches < MAX_TXN_ITEMS
        and step.records < MAX_TXN_RECORDS
        and step.bytes < MAX_TXN_BYTES
    ):
        key = bytes(log_cur.key())
        if key == newest:
            break
        view = log_cur.value()
        expired = _TIMESTAMP.unpack_from(view, POS_STORE_TIMESTAMP)[0] < cutoff_ms
        if not expired and over - step.bytes <= 0:
            break
        base = _OFFSET.unpack(key)[0]
        first = MessageExt(view, 0)
        prefix = layout.queue_prefix(first.topic, first.queue_id)
        plen = len(prefix)
        # The consume-queue item holding the batch's first queue offset is the batch's own.
        if (
            cq.set_range(prefix + _OFFSET.pack(first.queue_offset))
            and cq.key()[:plen] == prefix
            and _OFFSET.unpack_from(cq.value(), 0)[0] == base
        ):
            floors[prefix] = _OFFSET.unpack_from(cq.key(), plen)[0] + 1
            cq.delete()
        else:  # a damaged store; deleting the batch alone still leaves it consistent
            log.warning("lmdb_retention_orphan_batch", commitlog_offset=base)
        step.records += _delete_keys(txn, env, view, base, prefix[: -layout.QUEUE_ID.size])
        step.batches += 1
        step.bytes += len(view)
        step.expired += expired
        log_cur.delete()  # moves to the next item (there is one: the newest is kept)
    for prefix, floor in floors.items():
        txn.put(layout.QUEUE_META + prefix, _OFFSET.pack(floor), db=env.meta)
    step.min_offset = _OFFSET.unpack(log_cur.key())[0]
    return step


def _delete_keys(txn: Any, env: Environment, view: Any, base: int, tprefix: bytes) -> int:
    """Delete the key-index entries of the batch ``view`` at ``base``; returns its records."""
    records = 0
    pos = 0
    end = len(view)
    while pos < end:
        keys = record_index_keys(MessageExt(view, pos))
        if keys:
            value = _OFFSET.pack(base + pos)
            for k in keys:
                txn.delete(layout.index_key(tprefix, k), value, db=env.keyindex)
        pos += _SIZE.unpack_from(view, pos)[0]
        records += 1
    return records


class Cleaner:
    """The cleaner thread: a scheduled retention pass every ``interval`` seconds at
    ``clock()``."""

    def __init__(
        self,
        store: RetentionHost,
        interval: float = CLEAN_INTERVAL,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._store = store
        self.interval = interval
        self._clock = clock
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"mqcore-lmdb-clean-{store.path.name}", daemon=True
        )

    def start(self) -> Cleaner:
        """Start the thread; returns ``self``."""
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                now = None if self._clock is None else self._clock()
                self._store.delete_expired_files(now, scheduled=True)
            except Exception as exc:  # retention must never take the store down
                log.error("lmdb_retention_failed", path=str(self._store.path), error=str(exc))

    def stop(self) -> None:
        """Stop and join the thread (a pass under way ends after its transaction)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
