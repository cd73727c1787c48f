"""LmdbStore: the store contract (:class:`mqcore.store.Store`) on one LMDB environment.

A ``put`` encodes its batch once with :func:`mqcore.codec.prepare` and :func:`~mqcore.codec.pack`
(records are byte-identical to the mmap store's) and writes it in one write transaction:
the packed buffer as one commit-log item, the batch's consume-queue units as one item (see
:mod:`.layout`), the key index and, for a new queue, its meta entry. LMDB commits a
transaction atomically, so a killed writer leaves either the whole batch or none of it:
there is no torn tail to cut.

A writable store takes the directory's writer lock (:class:`mqcore.lockfile.StoreLock`).
A ``read_only`` store reads one snapshot (a long-lived read transaction), a consistent
prefix of what the writer committed, until :meth:`LmdbStore.refresh` starts a new one.

A writable store runs retention (:mod:`.retention`) on a cleaner thread every 10 seconds,
with the mmap store's options and defaults (``file_reserved_time_hours``, ``delete_when``,
``disk_max_used_space_ratio``, ``disk_space_clean_forcibly_ratio``).
"""

from __future__ import annotations

import functools
import os
import struct
import threading
import time
from collections.abc import Callable, Sequence
from itertools import repeat
from operator import add
from pathlib import Path
from typing import Any, NamedTuple, NoReturn, TypeVar, cast

import lmdb

from mqcore import batch, codec
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
from mqcore.lockfile import StoreLock, no_write_access, writer_alive
from mqcore.logs import get_logger
from mqcore.message import PROPERTY_UNIQ_KEY, Message, MessageExt
from mqcore.plugins.store_lmdb import layout, retention, scan
from mqcore.plugins.store_lmdb.environment import SLACK_PAGES, Environment, Syncer, corrupted
from mqcore.record.layout import HEADER_SIZE, POS_STORE_TIMESTAMP
from mqcore.record.prepared import Prepared, keys_of
from mqcore.retentionrules import normalize_delete_when
from mqcore.spans import RawSpans
from mqcore.store import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MESSAGE_DELAY_LEVEL,
    SCHEDULE_TOPIC,
    FlushMode,
    GetResult,
    GetStatus,
    PutResult,
    RawGetResult,
    UnitsResult,
    parse_delay_levels,
)
from mqcore.storecaps import LogPositions, PreparedPutRequest, PutRequest
from mqcore.storekind import KIND_FILE_NAME, check_store_kind
from mqcore.uniqkey import index_keys, uniq_ids

__all__ = ["OPTIONS", "LmdbStore"]

log = get_logger(__name__)

#: Options accepted by :class:`LmdbStore`, with their defaults.
OPTIONS: dict[str, Any] = {
    "flush_mode": FlushMode.ASYNC_FLUSH,
    "read_only": False,
    "store_host": "127.0.0.1:10911",
    "map_size": 64 * 1024 * 1024,
    "flush_interval_ms": 500,
    "max_readers": 126,
    "writemap": True,
    "message_delay_level": DEFAULT_MESSAGE_DELAY_LEVEL,
    "file_reserved_time_hours": 72,
    "disk_max_used_space_ratio": 75,
    "disk_space_clean_forcibly_ratio": 85,
    "delete_when": "04",
    "check_crc_on_read": False,
}

F = TypeVar("F", bound=Callable[..., Any])

_OFFSET = layout.OFFSET
_OFFSET_PACK = layout.OFFSET.pack
_TIMESTAMP = struct.Struct(">q")
_QUEUE_ID_SIZE = layout.QUEUE_ID.size
_KEYS = keys_of


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _reads(func: F) -> F:
    """Report a damaged page LMDB finds while reading as :class:`StoreCorruptedError`."""

    @functools.wraps(func)
    def checked(self: LmdbStore, *args: Any, **kwargs: Any) -> Any:
        try:
            return func(self, *args, **kwargs)
        except (lmdb.CorruptedError, lmdb.PageNotFoundError, lmdb.BadTxnError) as exc:
            raise corrupted(self.path, exc) from exc

    return cast(F, checked)


class LmdbStore:
    """The store contract on LMDB; open it with ``Kernel().open_store("lmdb", path, ...)``."""

    def __init__(self, path: str | os.PathLike[str], **options: Any) -> None:
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise InvalidArgumentError(
                f"unknown option(s) {', '.join(map(repr, unknown))} for the lmdb store; "
                f"valid options: {', '.join(sorted(OPTIONS))}"
            )
        opts = {**OPTIONS, **options}
        self.path = Path(path)
        try:
            self.flush_mode = FlushMode.parse(opts["flush_mode"])
        except ValueError as exc:
            raise InvalidArgumentError(str(exc)) from None
        self.read_only = bool(opts["read_only"])
        self.store_host = str(opts["store_host"])
        self._host = codec.host_bytes(self.store_host)
        self._id_prefix = codec.message_id_prefix(self._host)
        map_size = _positive_int("map_size", opts["map_size"])
        interval = _positive_int("flush_interval_ms", opts["flush_interval_ms"])
        max_readers = _positive_int("max_readers", opts["max_readers"])
        self._delays = parse_delay_levels(opts["message_delay_level"])
        writemap = opts["writemap"]
        #: Check each record's body CRC as it is read (see :meth:`_verify_crc`).
        self.check_crc_on_read = bool(opts["check_crc_on_read"])
        if not isinstance(writemap, bool):
            raise InvalidArgumentError(f"option writemap={writemap!r} must be True or False")
        #: Batches older than this are deleted by retention (RocketMQ's fileReservedTime).
        self.file_reserved_time_hours = _number(
            "file_reserved_time_hours", opts["file_reserved_time_hours"]
        )
        #: Above this disk usage (percent), the cleaner deletes expired batches at any hour
        #: (RocketMQ's diskMaxUsedSpaceRatio).
        self.disk_max_used_space_ratio = _ratio(
            "disk_max_used_space_ratio", opts["disk_max_used_space_ratio"]
        )
        #: Above this disk usage (percent), retention deletes the oldest batches regardless
        #: of age (RocketMQ's diskSpaceCleanForciblyRatio).
        self.disk_space_clean_forcibly_ratio = _ratio(
            "disk_space_clean_forcibly_ratio", opts["disk_space_clean_forcibly_ratio"]
        )
        #: Hours (local time) in which the cleaner deletes expired batches, "HH;HH"
        #: (RocketMQ's deleteWhen).
        self.delete_when = normalize_delete_when(opts["delete_when"])

        self._lock = threading.RLock()
        self._closed = False
        self._stopping = threading.Event()  # set first thing on close: retention stops
        self._cleaner: retention.Cleaner | None = None
        self._writer_lock: StoreLock | None = None
        self._syncer: Syncer | None = None
        self._snapshot: Any = None
        self._queue_next: dict[bytes, int] = {}  # queue prefix -> next queue offset (writer)
        self._cq_tail = b""  # queue prefix of the last consume-queue key (writer)
        # Before anything is created here: what the directory held, and whether its last
        # writer is live (a reader may then see its unwritten free pages) or died.
        held_data = (self.path / KIND_FILE_NAME).exists()
        alive = writer_alive(self.path)
        if self.read_only:
            slack = SLACK_PAGES if alive else 0  # a live writer's unwritten free pages
        else:
            slack = SLACK_PAGES if alive is False else 0  # those of a writer that died
        if not self.read_only:
            try:
                self.path.mkdir(parents=True, exist_ok=True)
                self._writer_lock = StoreLock(self.path).acquire()
            except OSError as exc:
                raise (no_write_access(self.path, exc) or exc) from exc
        env = None
        try:
            check_store_kind(self.path, "lmdb", read_only=self.read_only)
            env = self._env = Environment(
                self.path,
                read_only=self.read_only,
                sync=self.flush_mode is FlushMode.SYNC_FLUSH,
                map_size=map_size,
                max_readers=max_readers,
                writemap=writemap,
                slack_pages=slack,
                held_data=held_data,
            )
            if self.read_only:
                self._snapshot = env.begin()
                version = self._snapshot.get(layout.VERSION_KEY, db=env.meta)
                self._check_version(None if version is None else bytes(version))
                self._next_cl = 0
                self._last_ts = 0
            else:
                self._next_cl, self._last_ts = env.write(self._recover)
        except BaseException:
            if env is not None:
                env.close()
            if self._writer_lock is not None:
                self._writer_lock.release()
            raise
        # Commit-log end known synced (log_positions); what an earlier process left unsynced
        # before this open is not known, and not counted.
        self._synced_cl = self._next_cl
        if not self.read_only and self.flush_mode is FlushMode.ASYNC_FLUSH:
            self._syncer = Syncer(env, interval, sync=self._sync)
        if not self.read_only:
            # Module attributes read here, so tests can shorten the interval or fake the clock.
            self._cleaner = retention.Cleaner(
                self, retention.CLEAN_INTERVAL, retention.CLOCK
            ).start()
        log.debug(
            "lmdb_store_opened",
            path=str(self.path),
            read_only=self.read_only,
            flush_mode=self.flush_mode.name,
            commitlog_offset=self._next_cl,
        )

    def _recover(self, txn: Any) -> tuple[int, int]:
        """Check the format version and find where the commit log ends."""
        version = txn.get(layout.VERSION_KEY, db=self._env.meta)
        if version is None:
            txn.put(layout.VERSION_KEY, layout.FORMAT_VERSION, db=self._env.meta)
        self._check_version(version)
        cur = txn.cursor(db=self._env.cq)
        self._cq_tail = cur.key()[: -_OFFSET.size] if cur.last() else b""
        cur = txn.cursor(db=self._env.log)
        if not cur.last():
            return 0, 0
        batch = cur.value()  # the last put's records: they share one store timestamp
        end = _OFFSET.unpack(cur.key())[0] + len(batch)
        return end, _TIMESTAMP.unpack_from(batch, POS_STORE_TIMESTAMP)[0]

    def _check_version(self, version: bytes | None) -> None:
        """Refuse a directory written in another format (``None``: a new, empty store)."""
        if version is not None and version != layout.FORMAT_VERSION:
            raise StoreError(
                f"LMDB store at {str(self.path)!r} has format version "
                f"{version.decode(errors='replace')}; this mqcore reads version "
                f"{layout.FORMAT_VERSION.decode()} only (version 1 kept one item per message "
                f"and is not converted): read it with the mqcore that wrote it, or move the "
                f"directory away and start a new store"
            )

    # -- writing ------------------------------------------------------------------------

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
                f"LMDB store: put_prepared() cannot write {topic!r}; put() the messages"
            )
        if self.read_only:
            self._refuse_write()
        prefix = layout.queue_prefix(topic, queue_id)
        if not prepared:
            return []
        return self._append(prefix, topic, queue_id, prepared, uniqs, (), born_host, _now_ms())

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
        """Append a batch to one queue in one write transaction; honours the flush mode."""
        if self.read_only:
            self._refuse_write()
        prefix = layout.queue_prefix(topic, queue_id)
        if not messages:
            return []
        now = _now_ms()
        prepared = codec.prepare(
            messages,
            now if born_timestamp is None else born_timestamp,
            topic=topic,
            reconsume_times=reconsume_times,
            sys_flag=sys_flag,
        )
        uniqs = uniq_ids(messages)
        return self._append(prefix, topic, queue_id, prepared, uniqs, messages, born_host, now)

    def _refuse_write(self) -> NoReturn:
        raise StoreError(f"store {str(self.path)!r} was opened read_only; it cannot put")

    def _append(
        self,
        prefix: bytes,
        topic: str,
        queue_id: int,
        prepared: list[Any],
        uniqs: list[str | None] | None,
        messages: Sequence[Message],
        born_host: str | None,
        now: int,
    ) -> list[PutResult]:
        """Write ``prepared`` (of ``messages``, when a put gave them) in one transaction
        under the queue's key ``prefix``."""
        born = codec.cached_host_bytes(born_host) if born_host else None
        with self._lock:
            self._check_open()
            tail = _Tail(self)
            staged = self._stage(
                tail, prefix, topic, queue_id, prepared, uniqs, messages, born, now
            )
            self._commit([staged], tail)
        return staged.results

    def put_many(self, requests: Sequence[PutRequest]) -> list[list[PutResult] | MQError]:
        """Store each request as :meth:`put` stores it, all in one write transaction (one
        flush-mode wait; see :class:`~mqcore.storecaps.MultiQueuePut`).

        A request the store refuses (a topic or properties it cannot encode) gets its error
        in its slot, the others are stored. When the disk is too full for the transaction,
        the requests are written one transaction each: a request that meets the full disk
        gets the :class:`DiskFullError`, nothing of it is stored, and every later request
        gets the same error; the earlier ones stay stored.
        """
        if self.read_only:
            self._refuse_write()
        slots: list[list[PutResult] | MQError] = []
        todo: list[_PutTodo] = []
        for request in requests:
            slots.append([])
            try:
                # put refuses a bad topic before it looks at the messages
                prefix = layout.queue_prefix(request.topic, request.queue_id)
                if not request.messages:
                    continue
                now = _now_ms()
                prepared = codec.prepare(
                    request.messages,
                    now if request.born_timestamp is None else request.born_timestamp,
                    topic=request.topic,
                    reconsume_times=request.reconsume_times,
                    sys_flag=request.sys_flag,
                )
            except (CodecError, InvalidArgumentError) as exc:
                slots[-1] = exc
                continue
            born = codec.cached_host_bytes(request.born_host) if request.born_host else None
            msgs = request.messages
            todo.append(
                (len(slots) - 1, prefix, request.topic, request.queue_id, prepared,
                 uniq_ids(msgs), msgs, born, now)
            )  # fmt: skip
        return self._put_todo(todo, slots)

    def put_many_prepared(
        self, requests: Sequence[PreparedPutRequest]
    ) -> list[list[PutResult] | MQError]:
        """Store each request as :meth:`put_prepared` stores it, in one write transaction as
        :meth:`put_many` stores its requests, with the same errors per request (see
        :class:`~mqcore.storecaps.PreparedMultiPut`). A request for ``SCHEDULE_TOPIC_XXXX``
        gets an :class:`InvalidArgumentError` in its slot."""
        if self.read_only:
            self._refuse_write()
        slots: list[list[PutResult] | MQError] = []
        todo: list[_PutTodo] = []
        now = _now_ms()  # one clock read: the requests came together
        for request in requests:
            slots.append([])
            topic = request.topic
            try:
                if topic == SCHEDULE_TOPIC:
                    raise InvalidArgumentError(
                        f"LMDB store: put_many_prepared() cannot write {topic!r}; put_many() "
                        "the messages"
                    )
                prefix = layout.queue_prefix(topic, request.queue_id)
            except InvalidArgumentError as exc:
                slots[-1] = exc
                continue
            if not request.prepared:
                continue
            host = request.born_host
            todo.append(
                (len(slots) - 1, prefix, topic, request.queue_id, request.prepared,
                 request.uniqs, (), codec.cached_host_bytes(host) if host else None, now)
            )  # fmt: skip
        return self._put_todo(todo, slots)

    def _put_todo(
        self, todo: list[_PutTodo], slots: list[list[PutResult] | MQError]
    ) -> list[list[PutResult] | MQError]:
        """Write the checked requests ``todo`` in one transaction (one per request when the
        disk is too full for all) and fill their ``slots``; see :meth:`put_many`."""
        if not todo:
            return slots
        with self._lock:
            self._check_open()
            tail = _Tail(self)
            staged = [self._stage(tail, *entry[1:]) for entry in todo]
            try:
                self._commit(staged, tail)
            except DiskFullError:
                # One transaction each, so that what fits is stored and the rest refused
                # as a put would be.
                full: DiskFullError | None = None
                for entry in todo:
                    slot = entry[0]
                    if full is not None:
                        slots[slot] = full
                        continue
                    try:
                        alone = _Tail(self)
                        one = self._stage(alone, *entry[1:])
                        self._commit([one], alone)
                    except DiskFullError as exc:
                        full = exc
                        slots[slot] = exc
                    else:
                        slots[slot] = one.results
                return slots
        for (slot, *_rest), done in zip(todo, staged, strict=True):
            slots[slot] = done.results
        return slots

    def _stage(
        self,
        tail: _Tail,
        prefix: bytes,
        topic: str,
        queue_id: int,
        prepared: list[Any],
        uniqs: list[str | None] | None,
        messages: Sequence[Message],
        born: tuple[bytes, int] | None,
        now: int,
    ) -> _Staged:
        """Encode one queue's records at the ends ``tail`` holds (lock held) and move
        ``tail`` past them; nothing is written yet."""
        next_q = tail.queue_next.get(prefix)
        new_queue = False
        if next_q is None:
            next_q = self._queue_next.get(prefix)
            if next_q is None:
                next_q = self._load_queue_next(prefix)
                new_queue = next_q == 0
        start_cl = tail.next_cl
        # Store timestamps never go backwards, so offset_for_timestamp can bisect a queue.
        ts = max(now, tail.last_ts)
        if topic == SCHEDULE_TOPIC:  # held messages: their deliver time as tags code
            prepared = batch.with_deliver_times(prepared, messages, self._delays, ts)
        buf = codec.pack(
            prepared,
            queue_id=queue_id,
            queue_offset=next_q,
            commitlog_offset=start_cl,
            store_timestamp=ts,
            store_host=self._host,
            born_host=born,
        )
        units, key_items, results = _batch_items(
            prepared,
            prefix,
            start_cl,
            next_q,
            ts,
            self._id_prefix,
            uniqs,
        )
        # MDB_APPEND skips the B-tree search, but only for keys past the database's last.
        cq_append = prefix >= tail.cq_tail
        staged = _Staged(
            topic,
            queue_id,
            prefix,
            _OFFSET_PACK(start_cl),
            buf,
            prefix + _OFFSET_PACK(next_q + len(prepared) - 1),
            units,
            key_items,
            cq_append,
            new_queue,
            results,
        )
        tail.next_cl = start_cl + len(buf)
        tail.queue_next[prefix] = next_q + len(prepared)
        tail.last_ts = ts
        if cq_append:
            tail.cq_tail = prefix
        return staged

    def _commit(self, staged: list[_Staged], tail: _Tail) -> None:
        """Write staged batches in one transaction (lock held) and move the store's ends
        to ``tail``, past them."""
        env = self._env

        def work(txn: Any) -> None:
            log_db, cq_db = env.log, env.cq
            for one in staged:
                # An out-of-order MDB_APPEND is refused (put returns False): check, so that
                # a bug aborts the transaction instead of storing half a batch.
                if not (
                    txn.put(one.log_key, one.buf, append=True, db=log_db)
                    and txn.put(
                        one.cq_key, one.units, append=one.cq_append, overwrite=False, db=cq_db
                    )
                ):
                    raise StoreError(
                        f"LMDB store {str(self.path)!r}: a batch for {one.topic!r} queue "
                        f"{one.queue_id} did not append cleanly; nothing of it was stored"
                    )
                if one.key_items:
                    txn.cursor(db=env.keyindex).putmulti(one.key_items, dupdata=True)
                if one.new_queue:
                    txn.put(layout.QUEUE_META + one.prefix, b"", db=env.meta)

        # The new pages this transaction may take (writemap reserves disk blocks for
        # them first): the records and units twice over, a page or two per key entry,
        # and the B-tree paths and free list.
        room = 65536
        written = 0
        for one in staged:
            room += 2 * (len(one.buf) + len(one.units)) + 8192 * len(one.key_items)
            written += len(one.buf)
        env.write(work, room=room)
        env.touched(written)
        env.release_pages()
        self._next_cl = tail.next_cl
        self._queue_next.update(tail.queue_next)
        self._last_ts = tail.last_ts
        self._cq_tail = tail.cq_tail

    def _load_queue_next(self, prefix: bytes) -> int:
        with self._env.begin() as txn:
            return scan.queue_bounds(txn, self._env, prefix)[1]

    # -- reading ------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"LMDB store {str(self.path)!r} is closed")

    def _txn(self) -> Any:
        """A read transaction: the snapshot (read-only stores) or a fresh one (writers)."""
        return self._snapshot if self.read_only else self._env.begin()

    def _end_txn(self, txn: Any) -> None:
        if not self.read_only:
            txn.abort()

    @_reads
    def _read(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        max_bytes: int,
        message_filter: MessageFilter | None,
    ) -> tuple[GetStatus, list[scan.Chunk], int, int, int]:
        prefix = layout.queue_prefix(topic, queue_id)
        if max_count < 1 or max_bytes < 1:
            raise InvalidArgumentError(
                f"max_count ({max_count}) and max_bytes ({max_bytes}) must be >= 1"
            )
        with self._lock:
            self._check_open()
            txn = self._txn()
            try:
                found = scan.read_queue(
                    txn, self._env, prefix, offset, max_count, max_bytes, message_filter
                )
            finally:
                self._end_txn(txn)
            for chunk in found[1]:
                self._env.touched(len(chunk[0]))
                if self.check_crc_on_read:
                    data, starts, sizes = chunk
                    view = memoryview(data)
                    for start, size in zip(starts, sizes, strict=True):
                        if not codec.body_crc_ok(view, start):
                            self._verify_crc(data, start, size)  # says what is wrong
            if not self.read_only:  # a read-only store's snapshot pins the map until refresh
                self._env.release_pages()
            return found

    def get(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int = 32,
        max_bytes: int = DEFAULT_MAX_BYTES,
        message_filter: MessageFilter | None = None,
    ) -> GetResult:
        """Up to ``max_count`` messages from ``offset`` that pass ``message_filter``."""
        status, chunks, nxt, low, high = self._read(
            topic, queue_id, offset, max_count, max_bytes, message_filter
        )
        if len(chunks) == 1:
            data, starts, _ = chunks[0]
            messages = list(map(MessageExt, repeat(data, len(starts)), starts))
        else:
            messages = []
            for data, starts, _ in chunks:
                messages.extend(map(MessageExt, repeat(data, len(starts)), starts))
        return GetResult(status, messages, nxt, low, high)

    def get_raw(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int = 32,
        max_bytes: int = DEFAULT_MAX_BYTES,
        message_filter: MessageFilter | None = None,
    ) -> RawGetResult:
        """Like :meth:`get`, returning the encoded records as memoryviews (copied out of LMDB)."""
        status, chunks, nxt, low, high = self._read(
            topic, queue_id, offset, max_count, max_bytes, message_filter
        )
        records: list[memoryview] = []
        for data, starts, sizes in chunks:
            # One copy of the records read (taken in the read transaction); the views share it.
            view = memoryview(data)
            records.extend(map(view.__getitem__, map(slice, starts, map(add, starts, sizes))))
        return RawGetResult(status, records, nxt, low, high)

    @_reads
    def get_spans(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int = 32,
        max_bytes: int = DEFAULT_MAX_BYTES,
        message_filter: MessageFilter | None = None,
    ) -> RawSpans:
        """Like :meth:`get_raw`, the records as spans (see :mod:`mqcore.spans`): each copy
        taken out of LMDB is one span of records back to back."""
        status, chunks, nxt, low, high = self._read(
            topic, queue_id, offset, max_count, max_bytes, message_filter
        )
        spans = [(data, None, 0) for data, _, _ in chunks]
        return RawSpans(status, spans, sum(len(c[1]) for c in chunks), nxt, low, high)

    @_reads
    def get_units(self, topic: str, queue_id: int, offset: int, max_count: int = 32) -> UnitsResult:
        """Up to ``max_count`` consume-queue units from ``offset`` (see
        :class:`~mqcore.store.UnitsResult`), without reading the records."""
        if max_count < 1:
            raise InvalidArgumentError(f"max_count ({max_count}) must be >= 1")
        prefix = layout.queue_prefix(topic, queue_id)
        with self._lock:
            self._check_open()
            txn = self._txn()
            try:
                return UnitsResult(*scan.read_units(txn, self._env, prefix, offset, max_count))
            finally:
                self._end_txn(txn)

    def min_offset(self, topic: str, queue_id: int) -> int:
        """Smallest offset stored in the queue (0 for an empty queue)."""
        return self._bounds(topic, queue_id)[0]

    def max_offset(self, topic: str, queue_id: int) -> int:
        """Offset the next message of the queue will get."""
        return self._bounds(topic, queue_id)[1]

    @_reads
    def _bounds(self, topic: str, queue_id: int) -> tuple[int, int]:
        prefix = layout.queue_prefix(topic, queue_id)
        with self._lock:
            self._check_open()
            txn = self._txn()
            try:
                return scan.queue_bounds(txn, self._env, prefix)
            finally:
                self._end_txn(txn)

    @_reads
    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first offset whose store timestamp is >= ``timestamp_ms`` (max offset if none)."""
        prefix = layout.queue_prefix(topic, queue_id)
        with self._lock:
            self._check_open()
            txn = self._txn()
            try:
                lo, hi = scan.queue_bounds(txn, self._env, prefix)
                cq = txn.cursor(db=self._env.cq)
                log_db = self._env.log
                # Store timestamps are non-decreasing along a queue: bisect on them. A batch's
                # records share one timestamp, so the item holding ``mid`` answers for it.
                while lo < hi:
                    mid = (lo + hi) // 2
                    cq.set_range(prefix + _OFFSET_PACK(mid))
                    ts = scan.batch_timestamp(txn, log_db, cq.value())
                    if ts < timestamp_ms:
                        lo = mid + 1
                    else:
                        hi = mid
                return lo
            finally:
                self._end_txn(txn)

    @_reads
    def lookup(self, topic: str, key: str, max_count: int = 32) -> list[MessageExt]:
        """Messages of ``topic`` carrying ``key`` (oldest first)."""
        tprefix = layout.topic_prefix(topic)
        out: list[MessageExt] = []
        with self._lock:
            self._check_open()
            txn = self._txn()
            try:
                cur = txn.cursor(db=self._env.keyindex)
                if not cur.set_key(layout.index_key(tprefix, key)):
                    return out
                log_db = self._env.log
                for value in cur.iternext_dup():
                    record = scan.record_at(txn, log_db, _OFFSET.unpack(value)[0])
                    if record is None:
                        continue
                    if self.check_crc_on_read:
                        self._verify_crc(record, 0, len(record))
                    msg = MessageExt(record)
                    # The index may hold a digest of a long key: confirm on the record.
                    if key in msg.key_list or msg.get_property(PROPERTY_UNIQ_KEY) == key:
                        out.append(msg)
                        if len(out) >= max_count:
                            break
            finally:
                self._end_txn(txn)
        return out

    @_reads
    def message_at(self, commitlog_offset: int) -> MessageExt | None:
        """The message whose record starts at ``commitlog_offset``, or ``None``."""
        if commitlog_offset < 0:
            return None
        with self._lock:
            self._check_open()
            txn = self._txn()
            try:
                record = scan.record_at(txn, self._env.log, commitlog_offset)
            finally:
                self._end_txn(txn)
        if record is not None and self.check_crc_on_read:
            self._verify_crc(record, 0, len(record))
        return None if record is None else MessageExt(record)

    def _verify_crc(self, data: Any, start: int, size: int) -> None:
        """``check_crc_on_read``: raise :class:`StoreCorruptedError` unless the record at
        ``start`` of ``data`` is whole and its body CRC matches (damage LMDB cannot see:
        its pages carry no checksums)."""
        try:
            codec.check_record(data, start, start + size, check_crc=True)
        except CodecError as exc:
            offset = MessageExt(data, start).commitlog_offset if size >= HEADER_SIZE else -1
            raise StoreCorruptedError(
                f"the LMDB store at {str(self.path)!r} holds a damaged record at commit-log "
                f"offset {offset} ({exc}); restore data.mdb from a copy, or move the "
                "directory aside",
                path=str(self.path / "data.mdb"),
                offset=offset,
            ) from exc

    @_reads
    def _queues(self, start: bytes) -> list[tuple[str, int]]:
        out = []
        with self._lock:
            self._check_open()
            txn = self._txn()
            try:
                cur = txn.cursor(db=self._env.meta)
                if cur.set_range(start):
                    for view in cur.iternext(keys=True, values=False):
                        key = bytes(view)  # a view into the map: copy it to compare and decode
                        if not key.startswith(start):
                            break
                        out.append(layout.split_queue_meta_key(key))
            finally:
                self._end_txn(txn)
        return out

    def topics(self) -> list[str]:
        """Topics with at least one queue in the store (sorted)."""
        return sorted({topic for topic, _ in self._queues(layout.QUEUE_META)})

    def queue_ids(self, topic: str) -> list[int]:
        """Queue ids of ``topic`` present in the store (sorted)."""
        start = layout.QUEUE_META + layout.topic_prefix(topic)
        return sorted(qid for _, qid in self._queues(start))

    # -- retention ----------------------------------------------------------------------

    def delete_expired_files(self, now: float | None = None, *, scheduled: bool = False) -> int:
        """One retention pass; returns the number of batches deleted. Named as the mmap
        store's method; LMDB deletes batches, not files. A direct call is a manual delete:
        expired batches go at any hour. The cleaner thread runs a ``scheduled`` pass every
        10 s, which deletes expired batches only in the ``delete_when`` hours or above
        ``disk_max_used_space_ratio`` (see :mod:`mqcore.retentionrules`).

        ``now`` (seconds since the epoch, default the current time) is for tests.
        """
        if self._closed or self.read_only:
            return 0
        now = time.time() if now is None else now
        return retention.delete_expired(self, now, manual=not scheduled).batches

    # -- lifecycle ----------------------------------------------------------------------

    def flush(self) -> None:
        """fsync everything committed so far (a no-op for a read-only store)."""
        with self._lock:
            self._check_open()
            if not self.read_only:
                self._sync()

    def _sync(self) -> None:
        """fsync the environment; what was committed before it is then known on disk."""
        end = self._next_cl  # read first: a put committing meanwhile may miss this sync
        self._env.sync()
        self._synced_cl = max(self._synced_cl, end)

    def log_positions(self) -> LogPositions:
        """Commit-log offsets committed, synced to disk and dispatched (see
        :class:`~mqcore.storecaps.LogPositions`); read without a lock.

        A put stores its records and their queue entries in one transaction, so
        ``dispatched`` is always ``written``. In SYNC_FLUSH every commit is synced, so
        ``flushed`` is too; in ASYNC_FLUSH ``flushed`` trails by what was committed since the
        last background sync (up to ``flush_interval_ms``). Offsets are those of the records'
        virtual commit log (each record's ``commitlog_offset``), counted from this open.
        """
        self._check_open()
        written = self._next_cl
        if self.read_only or self.flush_mode is FlushMode.SYNC_FLUSH:
            return LogPositions(written, written, written)
        return LogPositions(written, min(self._synced_cl, written), written)

    def refresh(self) -> None:
        """Read-only stores: start a new snapshot that includes the writer's newer commits."""
        with self._lock:
            self._check_open()
            if self.read_only:
                self._snapshot.abort()
                self._snapshot = None
                self._env.release_pages()
                self._snapshot = self._env.begin()

    def close(self) -> None:
        """Stop the cleaner and the background sync, sync, close the environment and
        release the lock."""
        self._stopping.set()
        if self._cleaner is not None:
            # Outside the lock: a pass under way takes it for each of its transactions.
            self._cleaner.stop()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                if self._syncer is not None:
                    self._syncer.stop()
                if self._snapshot is not None:
                    self._snapshot.abort()
                    self._snapshot = None
                if not self.read_only:
                    self._sync()
                self._env.close()
            finally:
                if self._writer_lock is not None:
                    self._writer_lock.release()
        log.debug("lmdb_store_closed", path=str(self.path))

    def __enter__(self) -> LmdbStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "read_only" if self.read_only else self.flush_mode.name
        return f"LmdbStore({str(self.path)!r}, {mode})"


class _Tail:
    """The ends a write transaction being built has reached (next commit-log offset, next
    queue offsets, last store time, last consume-queue prefix), from the store's."""

    __slots__ = ("cq_tail", "last_ts", "next_cl", "queue_next")

    def __init__(self, store: LmdbStore) -> None:
        self.next_cl: int = store._next_cl
        self.last_ts: int = store._last_ts
        self.cq_tail: bytes = store._cq_tail
        self.queue_next: dict[bytes, int] = {}


# A request put_many or put_many_prepared stages: its slot, then _stage's arguments after
# the tail (queue key prefix, topic, queue id, prepared records, unique ids, messages (empty
# when prepared ahead), born host bytes and store time).
_PutTodo = tuple[
    int, bytes, str, int, list[Any], list[str | None] | None, Sequence[Message],
    tuple[bytes, int] | None, int,
]  # fmt: skip


class _Staged(NamedTuple):
    """One queue's records encoded for a write transaction, and their results."""

    topic: str
    queue_id: int
    prefix: bytes
    log_key: bytes
    buf: bytes
    cq_key: bytes
    units: bytes
    key_items: list[tuple[bytes, bytes]]
    cq_append: bool
    new_queue: bool
    results: list[PutResult]


def _batch_items(
    prepared: list[Prepared],
    prefix: bytes,
    start_cl: int,
    next_q: int,
    ts: int,
    id_prefix: str,
    uniqs: list[str | None] | None = None,
) -> tuple[bytes, list[tuple[bytes, bytes]], list[PutResult]]:
    """The consume-queue item, key-index items and results of one packed batch.

    ``uniqs`` are the messages' unique ids (:func:`mqcore.uniqkey.uniq_ids`), indexed as keys.

    The per-message loops run in :mod:`mqcore.batch` (in C when it was built): at several
    hundred thousand messages a second, a Python loop body is the bottleneck.
    """
    units, offsets, _end = batch.units(prepared, start_cl)
    key_items: list[tuple[bytes, bytes]] = []
    if len(prepared) == 1:  # one message per put is common: no per-message machinery
        keys: str | None = _KEYS(prepared[0])
        uniq = uniqs[0] if uniqs else None
        if keys or uniq:
            log_key, tprefix = _OFFSET_PACK(start_cl), prefix[:-_QUEUE_ID_SIZE]
            index_key = layout.index_key
            if keys:
                key_items = [(index_key(tprefix, k), log_key) for k in keys.split()]
            if uniq:  # after the keys, as index_keys orders them
                key_items.append((index_key(tprefix, uniq), log_key))
    elif uniqs is not None or any(map(_KEYS, prepared)):
        tprefix = prefix[: -layout.QUEUE_ID.size]
        for keys, uniq, cl in zip(
            map(_KEYS, prepared), uniqs or repeat(None), offsets, strict=False
        ):
            if keys or uniq:
                log_key = _OFFSET_PACK(cl)
                key_items.extend(
                    (layout.index_key(tprefix, k), log_key) for k in index_keys(keys, uniq)
                )
    return units, key_items, batch.put_results(id_prefix, prepared, offsets, next_q, ts)


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise InvalidArgumentError(f"option {name}={value!r} must be a number >= 0 (hours)")
    return float(value)


def _ratio(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 100:
        raise InvalidArgumentError(
            f"option {name}={value!r} must be a percentage in (0, 100] (disk usage)"
        )
    return float(value)


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidArgumentError(f"option {name}={value!r} must be a positive integer")
    return value
