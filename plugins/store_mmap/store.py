"""MmapStore: RocketMQ's storage engine (commit log, consume queues, index) over mmap.

Directory layout under ``path``::

    LOCK                      writer lock (names the writer's pid); see mqcore.lockfile
    abort                     exists while a writer has the store open (crash detection)
    checkpoint                flush progress (store timestamps), RocketMQ's layout
    commitlog/<20 digits>     segments of ``segment_size`` bytes, named by start offset
    consumequeue/<topic>/<queue_id>/<20 digits>   20-byte units per queue
    index/<yyyyMMddHHmmssSSS> key index files

A ``put`` encodes the batch outside the write lock, then, holding it: stamps offsets and
writes the records with one copy into the segment, appends the batch's consume-queue units as
one buffer, indexes the keys, and publishes. Readers take no lock: they only look at what the
consume queues publish, which is always behind complete records.
"""

from __future__ import annotations

import os
import struct
import threading
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any, NoReturn

from mqcore import batch
from mqcore.codec import (
    body_crc_ok,
    cached_host_bytes,
    check_record,
    host_bytes,
    message_id_prefix,
    prepare,
    record_properties,
)
from mqcore.errors import (
    CodecError,
    DiskFullError,
    InvalidArgumentError,
    MQError,
    StoreClosedError,
    StoreCorruptedError,
    StoreError,
)
from mqcore.interfaces import MessageFilter
from mqcore.lockfile import StoreLock, no_write_access
from mqcore.logs import get_logger
from mqcore.message import Message, MessageExt
from mqcore.record.layout import BLANK_SIZE, HEADER_SIZE, MESSAGE_MAGIC_CODE, SIZE_MAGIC
from mqcore.record.prepared import body_of, size_of
from mqcore.record.unit import UNIT, UNIT_SIZE
from mqcore.spans import RawSpans
from mqcore.store import (
    DEFAULT_MAX_BYTES,
    SCHEDULE_TOPIC,
    FlushMode,
    GetResult,
    GetStatus,
    PutResult,
    RawGetResult,
    UnitsResult,
    parse_delay_levels,
    position_status,
)
from mqcore.storecaps import LogPositions, PreparedPutRequest, PutRequest
from mqcore.storekind import check_store_kind
from mqcore.uniqkey import record_index_keys, uniq_ids

from . import fastput, queueends, recovery, replica, retention
from .checkpoint import StoreCheckpoint, create_abort_marker, remove_abort_marker
from .consumequeue import ConsumeQueue
from .dispatch import Dispatcher, Keyed
from .flushservice import CommitService, FlushService
from .mappedfile import TransientStorePool
from .options import MAX_BODY_SIZE, MmapStoreOptions
from .pagewarmer import PageWarmer
from .parts import StoreParts

__all__ = ["MmapStore"]

log = get_logger(__name__)

_I64 = struct.Struct(">q")
_make_put = partial(tuple.__new__, PutResult)
_pack_unit = UNIT.pack
_MAX_FILTER_UNITS = 16000 // UNIT_SIZE  # RocketMQ's maxFilterMessageCount, in units


# A request put_many or put_many_prepared checked, for _put_staged: its slot, topic, queue
# id, prepared records, unique ids, messages (empty when prepared ahead), record sizes and
# their sum, born host bytes and the time it came.
_Staged = tuple[
    int, str, int, list[Any], list[str | None] | None, Sequence[Message], list[int], int,
    tuple[bytes, int] | None, int,
]  # fmt: skip


def total_size(picked: list[tuple[Any, int, int]]) -> int:
    """Sum of the record sizes of a selection."""
    return sum(p[2] for p in picked)


class MmapStore:
    """The default store: RocketMQ's CommitLog / ConsumeQueue / IndexFile layout over mmap.

    Open it with ``Kernel().open_store("mmap", path, **options)``. Options:

    - ``flush_mode`` (``ASYNC_FLUSH``): ``SYNC_FLUSH`` (or ``"sync"``) makes ``put`` return
      after ``fdatasync`` (group commit); ``ASYNC_FLUSH`` (``"async"``) after the write, with
      a background flush every ``flush_interval_ms``.
    - ``read_only`` (False): no lock, no writes; sees a consistent prefix; ``refresh()``.
    - ``store_host`` (``"127.0.0.1:10911"``): written into records and message ids.
    - ``segment_size`` (1 GiB): bytes per commit-log segment file.
    - ``consume_queue_units`` (300 000): 20-byte units per consume-queue file.
    - ``flush_interval_ms`` (500): period of the background flush.
    - ``sync_flush_timeout_ms`` (5000): SYNC_FLUSH wait before ``FlushTimeoutError``.
    - ``group_commit_delay_ms`` (1.0): SYNC_FLUSH, longest hold of a group commit for the
      usual number of concurrent writers to queue up (0: flush at once).
    - ``file_reserved_time_hours`` (72): retention of commit-log segments (by file mtime).
    - ``delete_when`` (``"04"``): hours in which the cleaner deletes expired segments.
    - ``disk_max_used_space_ratio`` (75): above it, expired segments go at any hour.
    - ``disk_space_clean_forcibly_ratio`` (85): above it, the oldest segments go whatever
      their age (see :mod:`mqcore.retentionrules`).
    - ``transient_store_pool`` (False): write into memory buffers committed to the files by
      a background thread (ASYNC_FLUSH only; a crash loses up to 200 ms of puts).
    - ``index_hash_slots`` (5 000 000), ``index_max_entries`` (20 000 000): key index size.
    - ``check_crc_on_read`` (False): verify every record's body CRC as it is read; a
      mismatch is a :class:`~mqcore.errors.StoreCorruptedError` naming file and offset.
    """

    #: the commit log, consume queues and index (set once the directory is open)
    _parts: StoreParts

    def __init__(self, path: str | os.PathLike[str], **options: Any) -> None:
        self.options = opts = MmapStoreOptions.from_options(options)
        self.path = Path(path)
        self.read_only = opts.read_only
        self.flush_mode = opts.flush_mode
        self.segment_size = int(opts.segment_size)
        # Records above this size need a closer look (body limit, segment size).
        self._size_alarm = min(MAX_BODY_SIZE, self.segment_size - BLANK_SIZE)
        self._closed = False
        self._write_lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._store_host = host_bytes(opts.store_host)
        self._msgid_prefix = message_id_prefix(self._store_host)
        self._check_crc = bool(opts.check_crc_on_read)
        # Read-only openers: the highest queue offset per queue whose record is verified.
        self._visible: dict[tuple[str, int], int] = {}
        self._lock: StoreLock | None = None
        self._flusher: FlushService | None = None
        self._group_commit: FlushService | None = None  # the flusher, in SYNC_FLUSH only
        self._committer: CommitService | None = None
        self._warmer: PageWarmer | None = None
        self._cleaner: retention.CleanService | None = None
        self._checkpoint: StoreCheckpoint | None = None
        self._replica: replica.Replica | None = None  # slaves: the master's log coming in
        self._error: BaseException | None = None
        if self.read_only:
            if not self.path.is_dir():
                raise StoreError(
                    f"no store at {str(self.path)!r} to open read-only; a writer must create "
                    "it first"
                )
        else:
            try:
                self.path.mkdir(parents=True, exist_ok=True)
                self._lock = StoreLock(self.path).acquire()
            except OSError as exc:
                raise (no_write_access(self.path, exc) or exc) from exc
        try:
            check_store_kind(self.path, "mmap", read_only=self.read_only)
            self._open()
        except OSError as exc:
            self._release_all()
            denied = None if self.read_only else no_write_access(self.path, exc)
            if denied is None:
                raise
            raise denied from exc
        except BaseException:
            self._release_all()
            raise

    # --- opening ----------------------------------------------------------------------

    def _open(self) -> None:
        opts = self.options
        pool = None
        if opts.transient_store_pool and not self.read_only:
            pool = TransientStorePool(self.segment_size)
        self._parts = parts = StoreParts(
            self.path, opts, delays=parse_delay_levels(opts.message_delay_level), pool=pool
        )
        self._dispatcher = Dispatcher(parts)
        if self.read_only:
            parts.correct_min_offsets()
            self._verify_visible()
            return
        self._checkpoint = StoreCheckpoint.load(self.path)
        recovery.recover(parts, self._dispatcher, self._checkpoint)
        create_abort_marker(self.path)
        commitlog = parts.commitlog
        if not commitlog.files:
            # A new store: create and map its first segment now rather than inside the first
            # put (a few milliseconds of preallocation and readahead a producer would wait on).
            commitlog.prepare_first_segment()
        self._flusher = FlushService(
            self._flush_log,
            self._flush_all,
            interval=opts.flush_interval_ms / 1000,
            sync=self.flush_mode is FlushMode.SYNC_FLUSH,
            timeout=opts.sync_flush_timeout_ms / 1000,
            group_delay=opts.group_commit_delay_ms / 1000,
        ).start()
        if self._flusher.sync:
            self._group_commit = self._flusher
        if pool is not None:
            self._committer = CommitService(commitlog.commit).start()
        elif opts.warm_mapped_file:
            # Transient buffers take the writes off the map; otherwise warm it ahead if asked.
            self._warmer = PageWarmer(commitlog.current).start()
            commitlog.warmer = self._warmer if self._warmer.enabled else None
        self._cleaner = retention.CleanService(self).start()
        log.info(
            "mmap_store_opened",
            path=str(self.path),
            max_offset=commitlog.max_offset,
            queues=len(parts.queues),
        )

    # --- writing ----------------------------------------------------------------------

    def put(
        self,
        topic: str,
        queue_id: int,
        messages: Sequence[Message],
        *,
        born_timestamp: int | None = None,
        born_host: str | None = None,
        reconsume_times: int = 0,
        sys_flag: int = 0,
    ) -> list[PutResult]:
        """Append ``messages`` to ``topic``/``queue_id`` (one write); see the module docstring.

        Returns after the flush mode is met. Raises :class:`InvalidArgumentError` for a body
        over 4 MiB or a record larger than a segment, :class:`DiskFullError` when the disk is
        full (nothing of the batch is then stored).
        """
        if self._closed or self.read_only:
            self._refuse_write()
        if not messages:
            return []
        now = time.time_ns() // 1_000_000
        try:
            prepared = prepare(
                messages,
                now if born_timestamp is None else born_timestamp,
                topic=topic,
                reconsume_times=reconsume_times,
                sys_flag=sys_flag,
            )
        except CodecError as exc:
            raise InvalidArgumentError(str(exc)) from exc
        # Unique ids are indexed like keys (None: no properties).
        return self._append(topic, queue_id, prepared, uniq_ids(messages), messages, born_host, now)

    def put_prepared(
        self,
        topic: str,
        queue_id: int,
        prepared: list[Any],
        uniqs: list[str | None] | None = None,
        *,
        born_host: str | None = None,
    ) -> list[PutResult]:
        """Append records prepared ahead, as :meth:`put` stores the messages they stand for.

        ``prepared`` holds the tuples :func:`mqcore.codec.prepare` returns for ``topic`` (or
        tuples built the same way, e.g. from Arrow columns by the Spark sink): a bulk writer
        skips building a :class:`~mqcore.message.Message` per record. ``uniqs`` are the
        records' ``UNIQ_KEY`` properties (None where one has none; None for none at all),
        indexed as :meth:`put` indexes them; ``born_host`` is :meth:`put`'s. Not for
        ``SCHEDULE_TOPIC_XXXX``, whose records need their messages' delay levels.
        """
        if topic == SCHEDULE_TOPIC:
            raise InvalidArgumentError(
                f"mmap store: put_prepared() cannot write {topic!r}; put() the messages"
            )
        if self._closed or self.read_only:
            self._refuse_write()
        if not prepared:
            return []
        return self._append(
            topic, queue_id, prepared, uniqs, (), born_host, time.time_ns() // 1_000_000
        )

    def _refuse_write(self) -> NoReturn:
        self._check_open()
        raise StoreError(
            f"mmap store {str(self.path)!r} is open read-only; open it without "
            "read_only=True to write"
        )

    def _append(
        self,
        topic: str,
        queue_id: int,
        prepared: list[Any],
        uniqs: list[str | None] | None,
        messages: Sequence[Message],
        born_host: str | None,
        now: int,
    ) -> list[PutResult]:
        """Write ``prepared`` (of ``messages``, when a put gave them) and dispatch it."""
        sizes, total = self._measure(prepared)
        born = cached_host_bytes(born_host) if born_host else None
        parts = self._parts
        with self._write_lock:
            if self._closed:
                raise StoreClosedError(f"mmap store {str(self.path)!r} is closed")
            done = None
            if fastput.SPEEDUPS:
                # The common case as a group of one: one C call, the results built in it.
                done = fastput.append_group(
                    parts.commitlog, parts.queues,
                    [(0, topic, queue_id, prepared, uniqs, (), sizes, total, born, now)],
                    self._store_host, parts.index, self._msgid_prefix, parts.last_store_ts,
                )  # fmt: skip
            if done is not None:
                grouped, end, parts.last_store_ts = done
                results = grouped[0]
            else:
                offsets, end, qoff, store_ts = self._write_locked(
                    topic, queue_id, prepared, uniqs, messages, born, now, sizes, total
                )
        if done is None:
            results = self._results(prepared, offsets, qoff, store_ts, total)
        if self._group_commit is not None:
            self._group_commit.wait_flushed(end)
        return results

    def put_many(self, requests: Sequence[PutRequest]) -> list[list[PutResult] | MQError]:
        """Store each request as :meth:`put` stores it, all under one write lock and one
        flush-mode wait (the served broker's group commit; see
        :class:`~mqcore.storecaps.MultiQueuePut`).

        A request the store refuses (a body over 4 MiB, a record larger than a segment) gets
        its :class:`InvalidArgumentError` in its slot, the others are stored. A full disk
        stores nothing of the request it meets and gives that request and every later one
        the :class:`DiskFullError`; the earlier ones stay stored.
        """
        if self._closed or self.read_only:
            self._refuse_write()
        slots: list[list[PutResult] | MQError] = []
        # Encoding and checks outside the lock, as put does them.
        staged: list[_Staged] = []
        for request in requests:
            slots.append([])
            if not request.messages:
                continue
            now = time.time_ns() // 1_000_000
            try:
                prepared = prepare(
                    request.messages,
                    now if request.born_timestamp is None else request.born_timestamp,
                    topic=request.topic,
                    reconsume_times=request.reconsume_times,
                    sys_flag=request.sys_flag,
                )
                sizes, total = self._measure(prepared)
            except CodecError as exc:
                slots[-1] = InvalidArgumentError(str(exc))
                continue
            except InvalidArgumentError as exc:
                slots[-1] = exc
                continue
            born = cached_host_bytes(request.born_host) if request.born_host else None
            msgs = request.messages
            staged.append(
                (len(slots) - 1, request.topic, request.queue_id, prepared, uniq_ids(msgs),
                 msgs, sizes, total, born, now)
            )  # fmt: skip
        return self._put_staged(staged, slots)

    def put_many_prepared(
        self, requests: Sequence[PreparedPutRequest]
    ) -> list[list[PutResult] | MQError]:
        """Store each request as :meth:`put_prepared` stores it, with :meth:`put_many`'s
        single lock, single flush-mode wait and per-request errors (see
        :class:`~mqcore.storecaps.PreparedMultiPut`). A request for
        ``SCHEDULE_TOPIC_XXXX`` gets an :class:`InvalidArgumentError` in its slot."""
        if self._closed or self.read_only:
            self._refuse_write()
        slots: list[list[PutResult] | MQError] = []
        staged: list[_Staged] = []
        now = time.time_ns() // 1_000_000  # one clock read: the requests came together
        for request in requests:
            slots.append([])
            topic = request.topic
            if topic == SCHEDULE_TOPIC:
                slots[-1] = InvalidArgumentError(
                    f"mmap store: put_many_prepared() cannot write {topic!r}; put_many() the "
                    "messages"
                )
                continue
            prepared = request.prepared
            if len(prepared) == 1:  # a single send: _measure inlined
                sizes: list[int] = []
                total = prepared[0][0]  # its size (size_of)
                if total > self._size_alarm:
                    try:
                        self._check_sizes(prepared)
                    except InvalidArgumentError as exc:
                        slots[-1] = exc
                        continue
            elif not prepared:
                continue
            else:
                try:
                    sizes, total = self._measure(prepared)
                except InvalidArgumentError as exc:
                    slots[-1] = exc
                    continue
            host = request.born_host
            staged.append(
                (len(slots) - 1, topic, request.queue_id, prepared, request.uniqs, (), sizes,
                 total, cached_host_bytes(host) if host else None, now)
            )  # fmt: skip
        return self._put_staged(staged, slots)

    def _put_staged(
        self, staged: list[_Staged], slots: list[list[PutResult] | MQError]
    ) -> list[list[PutResult] | MQError]:
        """Write the checked requests ``staged`` under one lock, their index entries in one
        call, and wait once for the flush mode; fills their ``slots`` (see :meth:`put_many`
        for the errors)."""
        if not staged:
            return slots
        written: list[tuple[int, list[Any], list[int], int, int, int]] = []
        end = -1
        keyed: list[Keyed] = []  # every request's index entries, written in one call
        parts = self._parts
        grouped: list[list[PutResult]] = []  # the results of the head written in one call
        with self._write_lock:
            if self._closed:
                raise StoreClosedError(f"mmap store {str(self.path)!r} is closed")
            full: DiskFullError | None = None
            start = -1
            rest = staged
            if fastput.SPEEDUPS:
                # The head of the group that rolls nothing, in one C call; the Python path
                # from the request that would roll (or for all of them).
                done = fastput.append_group(
                    parts.commitlog, parts.queues, staged, self._store_host, parts.index,
                    self._msgid_prefix, parts.last_store_ts,
                )  # fmt: skip
                if done is not None:
                    grouped, end, parts.last_store_ts = done
                    start = parts.commitlog.batch_start
                    rest = staged[len(grouped) :]
            for slot, topic, queue_id, prepared, uniqs, msgs, sizes, total, born, now in rest:
                if full is not None:
                    slots[slot] = full
                    continue
                try:
                    offsets, end, qoff, store_ts = self._write_locked(
                        topic, queue_id, prepared, uniqs, msgs, born, now, sizes, total, keyed
                    )
                except DiskFullError as exc:
                    full = exc
                    slots[slot] = exc
                    continue
                except BaseException:
                    # Not about this request (an I/O error): the call fails as a whole,
                    # so none of it stays, unindexed, in the queues.
                    if start >= 0:
                        self._rollback_all(start)
                    raise
                if start < 0:
                    start = parts.commitlog.batch_start
                written.append((slot, prepared, offsets, qoff, store_ts, total))
            if keyed:
                try:
                    parts.index.put_keys(keyed)
                except BaseException as exc:
                    # Typically a full disk for a new index file: take every request back,
                    # so that none stays unindexed and unacknowledged in the queues.
                    self._rollback_all(start)
                    if not isinstance(exc, DiskFullError):
                        raise
                    for slot, *_ in written:
                        slots[slot] = exc
                    for (slot, *_), _ in zip(staged, grouped, strict=False):
                        slots[slot] = exc
                    return slots
        for request, results in zip(staged, grouped, strict=False):
            slots[request[0]] = results
        for slot, prepared, offsets, qoff, store_ts, total in written:
            slots[slot] = self._results(prepared, offsets, qoff, store_ts, total)
        if (written or grouped) and self._group_commit is not None:
            self._group_commit.wait_flushed(end)
        return slots

    def _measure(self, prepared: list[Any]) -> tuple[list[int], int]:
        """The records' sizes (empty for one record) and their sum; refuses oversized ones."""
        if len(prepared) == 1:  # one message per put is common: skip the batch machinery
            sizes: list[int] = []
            total = biggest = size_of(prepared[0])
        else:
            sizes = list(map(size_of, prepared))
            total = sum(sizes)
            biggest = max(sizes)
        if biggest > self._size_alarm:
            self._check_sizes(prepared)
        return sizes, total

    def _write_locked(
        self,
        topic: str,
        queue_id: int,
        prepared: list[Any],
        uniqs: list[str | None] | None,
        messages: Sequence[Message],
        born: tuple[bytes, int] | None,
        now: int,
        sizes: list[int],
        total: int,
        deferred: list[Keyed] | None = None,
    ) -> tuple[list[int], int, int, int]:
        """Append and dispatch one queue's records (write lock held): their commit-log
        offsets, the offset past the last, the first queue offset and the store time.
        Nothing of them stays when it raises. With ``deferred``, their index entries are
        added to it for the caller to write."""
        parts = self._parts
        cq = parts.queues.get((topic, queue_id))
        if cq is None:
            cq = parts.queue_for_write(topic, queue_id)
        qoff = cq.max_offset
        # One clock read per put; the wall clock stepping back must not show in the log.
        last = parts.last_store_ts
        store_ts = now if now >= last else last
        if topic == SCHEDULE_TOPIC:  # held messages: their deliver time as tags code
            prepared = batch.with_deliver_times(prepared, messages, parts.delays, store_ts)
        # Files the units will need exist before the log is written (a full disk fails
        # here, with nothing written). Mid-file, the file holding qoff - 1 is there.
        count = len(prepared)
        into = qoff % cq.units_per_file
        if into == 0 or into + count > cq.units_per_file:
            cq.reserve(count)
        commitlog = parts.commitlog
        try:
            # The common case in one C call (records and units); the Python path otherwise.
            done = None
            if topic != SCHEDULE_TOPIC:  # held messages take the reference path
                # Its index entries too, unless the caller gathers them (put_many).
                index = parts.index if deferred is None else None
                done = fastput.append(
                    commitlog, cq, prepared, total, queue_id, qoff, store_ts, self._store_host,
                    born, topic, uniqs, index,
                )  # fmt: skip
            if done is not None:
                offsets, end = done
                if deferred is None:
                    parts.last_store_ts = store_ts
                else:
                    self._dispatcher.put_written(
                        topic, prepared, uniqs, offsets, store_ts, deferred
                    )
                return offsets, end, qoff, store_ts
            chunks = commitlog.put_batch(
                prepared, total, queue_id, qoff, store_ts, self._store_host, born
            )
            offsets, end = self._dispatcher.put_batch(
                topic, cq, qoff, prepared, uniqs, chunks, sizes, total, store_ts, deferred
            )
        except BaseException:
            # Typically a full disk when a consume-queue or index file had to grow:
            # undo the batch so that nothing of it stays, half-dispatched, in the log.
            self._rollback(cq, commitlog.batch_start)
            raise
        return offsets, end, qoff, store_ts

    def _results(
        self, prepared: list[Any], offsets: list[int], qoff: int, store_ts: int, total: int
    ) -> list[PutResult]:
        prefix = self._msgid_prefix
        if len(prepared) == 1:
            phys = offsets[0]
            return [_make_put((f"{prefix}{phys:016X}", qoff, phys, store_ts, total))]
        return batch.put_results(prefix, prepared, offsets, qoff, store_ts)

    def _rollback(self, cq: ConsumeQueue, start_phys: int) -> None:
        """Remove a failed batch (write lock held): units, index entries and records."""
        try:
            self._parts.rollback(cq, start_phys)
        except Exception as exc:  # the original error is the one to report
            log.error("put_rollback_failed", error=str(exc), offset=start_phys)

    def _rollback_all(self, start_phys: int) -> None:
        """Remove everything from ``start_phys`` on, in every queue (write lock held)."""
        parts = self._parts
        try:
            for cq in parts.queues.values():
                if cq.max_physical_offset >= start_phys:
                    cq.truncate_dirty(start_phys)
            parts.index.truncate(start_phys)
            parts.commitlog.truncate(start_phys)
        except Exception as exc:  # the original error is the one to report
            log.error("put_rollback_failed", error=str(exc), offset=start_phys)

    def _check_sizes(self, prepared: Sequence[Any]) -> None:
        limit = self.segment_size - BLANK_SIZE
        for i, p in enumerate(prepared):
            if len(body_of(p)) > MAX_BODY_SIZE:
                raise InvalidArgumentError(
                    f"message {i} of the batch has a {len(body_of(p))}-byte body; the limit is "
                    f"{MAX_BODY_SIZE} bytes (4 MiB)"
                )
            if size_of(p) > limit:
                raise InvalidArgumentError(
                    f"message {i} of the batch encodes to {size_of(p)} bytes, more than a "
                    f"{self.segment_size}-byte commit-log segment holds; raise segment_size"
                )

    # --- reading ----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"mmap store {str(self.path)!r} is closed")

    def _bounds(self, topic: str, queue_id: int) -> tuple[ConsumeQueue | None, int, int]:
        if self._closed:
            self._check_open()
        cq = self._parts.queues.get((topic, queue_id))
        if cq is None:
            return None, 0, 0
        high = cq.max_offset
        if self.read_only:
            high = min(high, self._visible.get((topic, queue_id), 0))
        return cq, min(cq.min_offset, high), high

    def _select(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        max_bytes: int,
        message_filter: MessageFilter | None,
    ) -> tuple[GetStatus, list[tuple[Any, int, int]], int, int, int]:
        """Scan the consume queue: (status, [(segment view, pos, size)], next, min, max)."""
        self._check_open()
        cq, low, high = self._bounds(topic, queue_id)
        if cq is None or high == 0:
            return GetStatus.NO_MESSAGE_IN_QUEUE, [], 0, low, high
        if max_count < 1 or max_bytes < 1:
            raise InvalidArgumentError(
                f"max_count ({max_count}) and max_bytes ({max_bytes}) must be >= 1"
            )
        early = position_status(offset, low, high)
        if early is not None:
            return early[0], [], early[1], low, high
        # As RocketMQ: a filtered get may scan past max_count units (up to 16000 bytes of
        # them) to find max_count matching messages.
        scan = max_count if message_filter is None else max(_MAX_FILTER_UNITS, max_count)
        units = cq.read_units(offset, min(scan, high - offset))
        if not len(units):
            return GetStatus.OFFSET_TOO_SMALL, [], cq.min_offset, cq.min_offset, high
        picked: list[tuple[Any, int, int]] = []
        add = picked.append
        status = GetStatus.NO_MATCHED_MSG
        total = 0
        scanned = 0
        lo = hi = -1
        base = 0
        mf: Any = None
        view: Any = None
        direct = True
        file_for = self._parts.commitlog.file_for
        tags_ok = message_filter.matches_tags_code if message_filter is not None else None
        props_ok = (
            message_filter.matches_properties
            if message_filter is not None and message_filter.uses_properties
            else None
        )
        try:
            for phys, size, tags_code in UNIT.iter_unpack(units):
                if picked and (len(picked) >= max_count or total + size > max_bytes):
                    break
                scanned += 1
                if tags_ok is not None and not tags_ok(tags_code):
                    continue
                if not lo <= phys < hi:
                    mf = file_for(phys)
                    if mf is None:
                        if not picked:
                            status = GetStatus.OFFSET_FOUND_NULL
                        continue
                    base = mf.file_from_offset
                    lo, hi = base, base + mf.file_size
                    view = mf.view
                    direct = not mf.uses_buffer
                if direct:
                    buf, pos = view, phys - base
                else:
                    # Transient pool: the record may still be in a buffer (read a copy).
                    buf, pos = mf.read(phys - base, size), 0
                if self._check_crc and not body_crc_ok(buf if direct else memoryview(buf), pos):
                    self._verify_crc(mf, buf, pos, size, phys)  # says what is wrong
                if props_ok is not None and not props_ok(record_properties(buf, pos)):
                    continue
                add((buf, pos, size))
                total += size
            if picked:
                status = GetStatus.FOUND
                self._parts.commitlog.note_io(total)
        finally:
            units.release()
        return status, picked, offset + scanned, low, high

    def get(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int = 32,
        max_bytes: int = DEFAULT_MAX_BYTES,
        message_filter: MessageFilter | None = None,
    ) -> GetResult:
        """Up to ``max_count`` messages from ``offset`` (RocketMQ's getMessage rules).

        Messages are copies (they outlive the segment files).
        """
        status, picked, next_offset, low, high = self._select(
            topic, queue_id, offset, max_count, max_bytes, message_filter
        )
        messages: list[MessageExt] = []
        if picked:
            append = messages.append
            ext = MessageExt
            first_buf, first_pos, _ = picked[0]
            last_buf, last_pos, last_size = picked[-1]
            span = last_pos + last_size - first_pos
            if first_buf is last_buf and 0 < span <= 2 * total_size(picked):
                # One copy of the whole range; the messages share it (no copy per message).
                data = bytes(first_buf[first_pos : first_pos + span])
                for _, pos, _ in picked:
                    append(ext(data, pos - first_pos))
            else:
                for buf, pos, size in picked:
                    append(ext(bytes(buf[pos : pos + size])))
        return GetResult(status, messages, next_offset, low, high)

    def get_raw(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int = 32,
        max_bytes: int = DEFAULT_MAX_BYTES,
        message_filter: MessageFilter | None = None,
    ) -> RawGetResult:
        """Like :meth:`get`, with zero-copy memoryviews of the records in the segment maps."""
        status, picked, next_offset, low, high = self._select(
            topic, queue_id, offset, max_count, max_bytes, message_filter
        )
        records = [buf[pos : pos + size] for buf, pos, size in picked]
        return RawGetResult(status, records, next_offset, low, high)

    def get_spans(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int = 32,
        max_bytes: int = DEFAULT_MAX_BYTES,
        message_filter: MessageFilter | None = None,
    ) -> RawSpans:
        """Like :meth:`get_raw`, the records as spans (see :mod:`mqcore.spans`).

        An unfiltered read within one segment is one span: the segment's map, the consume
        queue's units and the segment's start offset, with no Python work per record.
        ``max_bytes`` then bounds the commit-log range the records span (at least one).
        """
        if message_filter is None:
            fast = self._plain_span(topic, queue_id, offset, max_count, max_bytes)
            if fast is not None:
                return fast
        status, picked, next_offset, low, high = self._select(
            topic, queue_id, offset, max_count, max_bytes, message_filter
        )
        spans: list[Any] = []
        units: list[bytes] = []
        last: Any = None
        for buf, pos, size in picked:
            if buf is not last:
                if units:
                    spans.append((last, b"".join(units), 0))
                units, last = [], buf
            units.append(_pack_unit(pos, size, 0))
        if units:
            spans.append((last, b"".join(units), 0))
        return RawSpans(status, spans, len(picked), next_offset, low, high)

    def _plain_span(
        self, topic: str, queue_id: int, offset: int, max_count: int, max_bytes: int
    ) -> RawSpans | None:
        """An unfiltered read as one span, or None when :meth:`_select` must answer (an
        offset outside the queue, records over two segments or in a transient buffer)."""
        self._check_open()
        if self._check_crc:
            return None  # every record is looked at: the general path
        cq, low, high = self._bounds(topic, queue_id)
        if cq is None or max_count < 1 or max_bytes < 1 or position_status(offset, low, high):
            return None
        view = cq.read_units(offset, min(max_count, high - offset))
        try:
            units = bytes(view)  # a copy: a view would pin the consume-queue file's map
        finally:
            view.release()
        n = len(units) // UNIT_SIZE
        if n == 0:
            return None
        first = _I64.unpack_from(units, 0)[0]
        phys, size, _ = UNIT.unpack_from(units, (n - 1) * UNIT_SIZE)
        if phys + size - first > max_bytes:
            # Keep the records whose end lies within max_bytes of the first's start.
            lo, hi = 1, n - 1
            while lo < hi:
                mid = (lo + hi + 1) // 2
                phys, size, _ = UNIT.unpack_from(units, (mid - 1) * UNIT_SIZE)
                lo, hi = (mid, hi) if phys + size - first <= max_bytes else (lo, mid - 1)
            n = lo
            units = units[: n * UNIT_SIZE]
            phys, size, _ = UNIT.unpack_from(units, (n - 1) * UNIT_SIZE)
        file_for = self._parts.commitlog.file_for
        mf = file_for(first)
        if mf is None or mf.uses_buffer or file_for(phys) is not mf:
            return None
        self._parts.commitlog.note_io(phys + size - first)
        span = (mf.view, units, mf.file_from_offset)
        return RawSpans(GetStatus.FOUND, [span], n, offset + n, low, high)

    def get_units(self, topic: str, queue_id: int, offset: int, max_count: int = 32) -> UnitsResult:
        """Up to ``max_count`` consume-queue units from ``offset`` (see
        :class:`~mqcore.store.UnitsResult`), without reading the records."""
        self._check_open()
        if max_count < 1:
            raise InvalidArgumentError(f"max_count ({max_count}) must be >= 1")
        cq, low, high = self._bounds(topic, queue_id)
        if cq is None or high == 0:
            return UnitsResult(GetStatus.NO_MESSAGE_IN_QUEUE, b"", 0, low, high)
        early = position_status(offset, low, high)
        if early is not None:
            return UnitsResult(early[0], b"", early[1], low, high)
        view = cq.read_units(offset, min(max_count, high - offset))
        try:
            units = bytes(view)  # a copy: a view would pin the consume-queue file's map
        finally:
            view.release()
        if not units:
            return UnitsResult(GetStatus.OFFSET_TOO_SMALL, b"", cq.min_offset, cq.min_offset, high)
        return UnitsResult(GetStatus.FOUND, units, offset + len(units) // UNIT_SIZE, low, high)

    def min_offset(self, topic: str, queue_id: int) -> int:
        """Smallest queue offset still stored (0 for an unknown queue)."""
        return self._bounds(topic, queue_id)[1]

    def max_offset(self, topic: str, queue_id: int) -> int:
        """Queue offset the next message gets (0 for an unknown queue)."""
        return self._bounds(topic, queue_id)[2]

    def _record_at(self, phys: int) -> memoryview | None:
        """The complete, published record starting at ``phys`` (validated), else None."""
        head = self._parts.commitlog.read(phys, 8)
        if head is None:
            return None
        size, magic = SIZE_MAGIC.unpack(head)
        if magic != MESSAGE_MAGIC_CODE or size < HEADER_SIZE:
            return None
        rec = self._parts.commitlog.read(phys, size)
        if rec is None:
            return None
        try:
            check_record(rec, 0, check_crc=self.read_only)
        except CodecError:
            return None
        return rec

    def _verify_crc(self, mf: Any, buf: Any, pos: int, size: int, phys: int) -> None:
        """``check_crc_on_read``: raise :class:`StoreCorruptedError` unless the record at
        ``pos`` of ``buf`` (commit-log offset ``phys``) is whole and its body CRC matches."""
        try:
            check_record(buf, pos, pos + size, base_offset=phys - pos, check_crc=True)
        except CodecError as exc:
            path = str(mf.path) if mf is not None else str(self._parts.commitlog.directory)
            raise StoreCorruptedError(
                f"commit-log file {path!r} holds a damaged record at offset {phys} ({exc}); "
                "restore the file from a replica or backup, or move the store aside",
                path=path,
                offset=phys,
            ) from exc

    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """First queue offset whose store timestamp is >= ``timestamp_ms`` (max if none)."""
        cq, low, high = self._bounds(topic, queue_id)
        if cq is None or low >= high:
            return high
        found = cq.offset_for_timestamp(timestamp_ms, self._parts.store_timestamp, "lower")
        return max(low, min(found, high))

    def message_at(self, commitlog_offset: int) -> MessageExt | None:
        """The message whose record starts at ``commitlog_offset``, or None."""
        self._check_open()
        if commitlog_offset < 0:
            return None
        rec = self._record_at(commitlog_offset)
        if rec is None:
            return None
        if self._check_crc:
            mf = self._parts.commitlog.file_for(commitlog_offset)
            self._verify_crc(mf, rec, 0, len(rec), commitlog_offset)
        msg = MessageExt(bytes(rec))
        # Only dispatched records exist for readers: the unit must be published.
        cq, low, high = self._bounds(msg.topic, msg.queue_id)
        if cq is None or not low <= msg.queue_offset < high:
            return None
        return msg

    def lookup(self, topic: str, key: str, max_count: int = 32) -> list[MessageExt]:
        """Messages of ``topic`` carrying ``key``, oldest first (at most ``max_count``)."""
        self._check_open()
        if max_count <= 0 or not key:
            return []
        # Hashes collide, so ask for more than needed and check topic and keys.
        offsets = self._parts.index.query(topic, key, max_count * 4 + 16)
        found: list[MessageExt] = []
        for phys in sorted(set(offsets)):
            msg = self.message_at(phys)
            if msg is not None and msg.topic == topic and key in record_index_keys(msg):
                found.append(msg)
        return found[-max_count:]

    def topics(self) -> list[str]:
        """Topics with at least one queue in the store."""
        self._check_open()
        return sorted({topic for topic, _ in self._parts.queues})

    def queue_ids(self, topic: str) -> list[int]:
        """Queue ids of ``topic`` present in the store."""
        self._check_open()
        return sorted(qid for t, qid in self._parts.queues if t == topic)

    # --- durability -------------------------------------------------------------------

    def _flush_log(self) -> int:
        commitlog = self._parts.commitlog
        commitlog.commit()
        return commitlog.flush()

    def _flush_all(self) -> None:
        """Flush commit log, consume queues and index, then record progress in the checkpoint."""
        # The flush thread and flush()/close() may both get here; the checkpoint is one file.
        with self._flush_lock:
            self._flush_all_locked()

    def _flush_all_locked(self) -> None:
        ts = self._parts.last_store_ts
        self._parts.flush()
        cp = self._checkpoint
        if cp is not None and ts and ts != cp.physic_msg_timestamp:
            cp.physic_msg_timestamp = cp.logics_msg_timestamp = cp.index_msg_timestamp = ts
            cp.save()

    def flush(self) -> None:
        """Make everything appended so far durable (commit log, consume queues, index)."""
        self._check_open()
        if self.read_only:
            return
        with self._write_lock:
            self._flush_all()

    def refresh(self) -> None:
        """Read-only: map new segments and queues, and verify what the writer published."""
        self._check_open()
        if not self.read_only:
            return
        parts = self._parts
        parts.commitlog.refresh()
        parts.load_queues()
        for cq in list(parts.queues.values()):
            cq.refresh()
        parts.index.refresh()
        parts.correct_min_offsets()
        self._verify_visible()

    def _verify_visible(self) -> None:
        """Read-only: per queue, the highest offset whose record is complete and CRC-valid.

        The writer writes a record before its unit, so everything before a verified unit is
        complete; only the last units can be torn, and they are checked from the end.
        """
        visible = dict(self._visible)
        for key, cq in list(self._parts.queues.items()):
            cq_max = cq.max_offset
            floor = max(cq.min_offset, visible.get(key, 0))
            end = cq_max
            while end > floor:
                unit = cq.unit_at(end - 1)
                if unit is not None and self._unit_matches(key, end - 1, unit):
                    break
                end -= 1
            visible[key] = max(end, visible.get(key, 0))
        self._visible = visible

    def _unit_matches(self, key: tuple[str, int], queue_offset: int, unit: Any) -> bool:
        phys, size, _ = unit
        rec = self._parts.commitlog.read(phys, size)
        if rec is None:
            return False
        try:
            check_record(rec, 0, check_crc=True)
        except CodecError:
            return False
        msg = MessageExt(rec)
        return msg.queue_offset == queue_offset and msg.queue_id == key[1]

    # --- progress (metrics) -------------------------------------------------------------

    def log_positions(self) -> LogPositions:
        """Commit-log offsets appended, flushed to disk and dispatched to the consume queues
        and the index (see :class:`~mqcore.storecaps.LogPositions`); read without a lock.

        ``flushed`` trails ``written`` by what the flush service has not synced yet (up to a
        flush interval in ASYNC_FLUSH; with the transient pool, also what is not committed
        into the files yet). A put dispatches its own records before it returns, so
        ``dispatched`` trails only during a put, while recovery runs, and on a slave by the
        replicated bytes whose records are not complete yet. After a reopen, ``flushed``
        starts at the log's first byte until the first flush (nothing is known synced).
        """
        self._check_open()
        parts = self._parts
        commitlog = parts.commitlog
        # The trailing positions first: ``written`` then covers them.
        flushed = commitlog.flushed_offset
        rep = self._replica
        if rep is not None and rep.dispatched >= 0:
            dispatched = rep.dispatched
        else:
            dispatched = max(parts.dispatched_end(), commitlog.min_offset)
        written = commitlog.max_offset
        segment = self.segment_size
        if written % segment == 0 and dispatched // segment == written // segment - 1:
            # A roll ended the last segment with a blank, and no record follows yet.
            dispatched = written
        return LogPositions(written, min(flushed, written), min(dispatched, written))

    # --- replication (see mqcore.broker.ha) --------------------------------------------

    def commitlog_max_offset(self) -> int:
        """Offset one past the last commit-log byte appended."""
        self._check_open()
        return int(self._parts.commitlog.max_offset)

    def commitlog_min_offset(self) -> int:
        """Offset of the first commit-log byte still stored."""
        self._check_open()
        return int(self._parts.commitlog.min_offset)

    def read_commitlog(self, offset: int, max_bytes: int) -> bytes | None:
        """Master side: commit-log bytes from ``offset`` (see :func:`replica.read`)."""
        self._check_open()
        return replica.read(self._parts.commitlog, offset, max_bytes)

    def append_commitlog(self, offset: int, data: bytes | memoryview) -> set[tuple[str, int]]:
        """Slave side: append a master's commit-log bytes at ``offset`` and dispatch the
        complete records; returns the ``(topic, queue_id)`` pairs with new messages."""
        if self.read_only:
            raise StoreError(f"mmap store {str(self.path)!r} is open read-only; cannot replicate")
        with self._write_lock:
            self._check_open()
            if self._replica is None:
                self._replica = replica.Replica(self._dispatcher)
            self._replica.append(offset, data)
            return self._replica.dispatch()

    # --- retention --------------------------------------------------------------------

    def delete_expired_files(self, now: float | None = None, *, scheduled: bool = False) -> int:
        """Retention pass; returns segments deleted. A direct call is a manual delete:
        expired segments go at any hour. The cleaner thread runs a ``scheduled`` pass every
        10 s, which deletes expired segments only in the ``delete_when`` hours or above
        ``disk_max_used_space_ratio`` (see :mod:`mqcore.retentionrules`).

        ``now`` (seconds since the epoch) is for tests.
        """
        if self._closed or self.read_only:
            return 0
        count = retention.expired_count(
            self._parts, time.time() if now is None else now, self.options, manual=not scheduled
        )
        if not count:
            return 0
        with self._write_lock:
            if self._closed:
                return 0
            return retention.delete_oldest(self._parts, count)

    # --- closing ----------------------------------------------------------------------

    def close(self) -> None:
        """Stop the background threads, flush, and release the files and the writer lock.

        A clean close removes the abort marker: the next open skips crash recovery.
        """
        if self._closed:
            return
        if not self.read_only:
            # Stop the cleaner first: it takes the write lock.
            if self._cleaner is not None:
                self._cleaner.stop()
            with self._write_lock:
                self._closed = True
        self._closed = True
        self._release_all(clean=not self.read_only)

    def _release_all(self, clean: bool = False) -> None:
        for service in (self._cleaner, self._warmer, self._committer, self._flusher):
            if service is not None:
                service.stop()
        error: BaseException | None = None
        if clean:
            try:
                self._flush_all()
                # Before the marker goes: the next open trusts the queues only with it.
                queueends.save(
                    self.path, self._parts.queues.values(), self._parts.commitlog.max_offset
                )
                remove_abort_marker(self.path)
            except BaseException as exc:  # still release everything, then report
                error = exc
        parts = getattr(self, "_parts", None)  # None when opening failed before them
        if parts is not None:
            parts.close()
        if self._lock is not None:
            self._lock.release()
        self._closed = True
        if error is not None:
            raise error
        log.info("mmap_store_closed", path=str(self.path))

    def __enter__(self) -> MmapStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("read-only" if self.read_only else "open")
        return f"MmapStore({str(self.path)!r}, {state})"
