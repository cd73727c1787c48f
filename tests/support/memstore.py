"""A store written against the declared store protocol alone: :class:`MemoryStore` keeps its
records in memory and implements exactly the :class:`mqcore.store.Store` operations, none of
the optional capabilities of :mod:`mqcore.storecaps`. :class:`UnitsMemoryStore` adds one of
them, :class:`~mqcore.storecaps.UnitReader`, and counts its calls.

Register them with :class:`MemoryStorePlugin` (``Kernel(plugins=[MemoryStorePlugin()])``) under
the names ``memory`` and ``memory_units``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mqcore import batch, codec
from mqcore.hookspecs import hookimpl
from mqcore.interfaces import MessageFilter
from mqcore.message import Message, MessageExt
from mqcore.record.prepared import size_of, tags_code_of
from mqcore.record.unit import UNIT
from mqcore.store import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MESSAGE_DELAY_LEVEL,
    SCHEDULE_TOPIC,
    GetResult,
    GetStatus,
    PutResult,
    RawGetResult,
    UnitsResult,
    parse_delay_levels,
    position_status,
)
from mqcore.uniqkey import record_index_keys

__all__ = ["MemoryStore", "MemoryStorePlugin", "UnitsMemoryStore"]

#: One stored record: (commit-log offset, the record's bytes, its tags code).
_Record = tuple[int, bytes, int]


class MemoryStore:
    """Every :class:`~mqcore.store.Store` operation over lists in memory; nothing more."""

    def __init__(self, path: str | Path, **options: Any) -> None:
        self.path = Path(path)
        self._host = codec.host_bytes(options.pop("store_host", "127.0.0.1:10911"))
        self._delays = parse_delay_levels(
            options.pop("message_delay_level", DEFAULT_MESSAGE_DELAY_LEVEL)
        )
        options.pop("flush_mode", None)
        options.pop("read_only", None)
        if options:
            raise TypeError(f"unknown options {sorted(options)}")
        self._prefix = codec.message_id_prefix(self._host)
        self._queues: dict[tuple[str, int], list[_Record]] = {}
        self._at: dict[int, bytes] = {}
        self._next = 0
        self._last_ts = 0
        self._lock = threading.Lock()

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
        """Append a batch to one queue."""
        if not messages:
            return []
        now = time.time_ns() // 1_000_000
        prepared = codec.prepare(
            messages,
            now if born_timestamp is None else born_timestamp,
            topic=topic,
            reconsume_times=reconsume_times,
            sys_flag=sys_flag,
        )
        with self._lock:
            queue = self._queues.setdefault((topic, queue_id), [])
            ts = self._last_ts = max(now, self._last_ts)
            if topic == SCHEDULE_TOPIC:
                prepared = batch.with_deliver_times(prepared, messages, self._delays, ts)
            data = codec.pack(
                prepared,
                queue_id=queue_id,
                queue_offset=len(queue),
                commitlog_offset=self._next,
                store_timestamp=ts,
                store_host=self._host,
                born_host=codec.host_bytes(born_host) if born_host else None,
            )
            results = []
            pos = 0
            for p in prepared:
                size, code = size_of(p), tags_code_of(p)
                record = data[pos : pos + size]
                phys = self._next + pos
                results.append(PutResult(f"{self._prefix}{phys:016X}", len(queue), phys, ts, size))
                queue.append((phys, record, code))
                self._at[phys] = record
                pos += size
            self._next += len(data)
        return results

    def _pick(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        max_bytes: int,
        message_filter: MessageFilter | None,
    ) -> tuple[GetStatus, list[bytes], int, int, int]:
        queue = self._queues.get((topic, queue_id), [])
        high = len(queue)
        early = position_status(offset, 0, high)
        if early is not None:
            return early[0], [], early[1], 0, high
        picked: list[bytes] = []
        total = 0
        scanned = 0
        for _, record, code in queue[offset:]:
            if len(picked) >= max_count or (picked and total + len(record) > max_bytes):
                break
            scanned += 1
            if message_filter is not None:
                if not message_filter.matches_tags_code(code):
                    continue
                props = codec.record_properties(record, 0)
                if message_filter.uses_properties and not message_filter.matches_properties(props):
                    continue
            picked.append(record)
            total += len(record)
        status = GetStatus.FOUND if picked else GetStatus.NO_MATCHED_MSG
        return status, picked, offset + scanned, 0, high

    def get(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int = 32,
        max_bytes: int = DEFAULT_MAX_BYTES,
        message_filter: MessageFilter | None = None,
    ) -> GetResult:
        """Up to ``max_count`` messages from ``offset``."""
        status, picked, nxt, low, high = self._pick(
            topic, queue_id, offset, max_count, max_bytes, message_filter
        )
        return GetResult(status, [MessageExt(r) for r in picked], nxt, low, high)

    def get_raw(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int = 32,
        max_bytes: int = DEFAULT_MAX_BYTES,
        message_filter: MessageFilter | None = None,
    ) -> RawGetResult:
        """Like :meth:`get`, the encoded records."""
        status, picked, nxt, low, high = self._pick(
            topic, queue_id, offset, max_count, max_bytes, message_filter
        )
        return RawGetResult(status, [memoryview(r) for r in picked], nxt, low, high)

    def min_offset(self, topic: str, queue_id: int) -> int:
        """Nothing is ever deleted: 0."""
        return 0

    def max_offset(self, topic: str, queue_id: int) -> int:
        """The queue's length."""
        return len(self._queues.get((topic, queue_id), []))

    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first offset stored at ``timestamp_ms`` or later."""
        queue = self._queues.get((topic, queue_id), [])
        for i, (_, record, _) in enumerate(queue):
            if MessageExt(record).store_timestamp >= timestamp_ms:
                return i
        return len(queue)

    def lookup(self, topic: str, key: str, max_count: int = 32) -> list[MessageExt]:
        """Messages of ``topic`` with ``key`` (a scan of every queue of the topic)."""
        found = [
            MessageExt(record)
            for (t, _), queue in sorted(self._queues.items())
            if t == topic
            for _, record, _ in queue
            if key in record_index_keys(MessageExt(record))
        ]
        found.sort(key=lambda m: m.commitlog_offset)
        return found[-max_count:]

    def message_at(self, commitlog_offset: int) -> MessageExt | None:
        """The message stored at ``commitlog_offset``."""
        record = self._at.get(commitlog_offset)
        return None if record is None else MessageExt(record)

    def topics(self) -> list[str]:
        """Topics with a queue."""
        return sorted({t for t, _ in self._queues})

    def queue_ids(self, topic: str) -> list[int]:
        """Queue ids of ``topic``."""
        return sorted(q for t, q in self._queues if t == topic)

    def flush(self) -> None:
        """Nothing to make durable."""

    def refresh(self) -> None:
        """Nothing to pick up."""

    def close(self) -> None:
        """Nothing to release."""

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class UnitsMemoryStore(MemoryStore):
    """A :class:`MemoryStore` that is also a :class:`~mqcore.storecaps.UnitReader`."""

    def __init__(self, path: str | Path, **options: Any) -> None:
        super().__init__(path, **options)
        #: ``(topic, queue_id, offset)`` of every ``get_units`` call
        self.unit_reads: list[tuple[str, int, int]] = []

    def get_units(self, topic: str, queue_id: int, offset: int, max_count: int = 32) -> UnitsResult:
        """The queue's units from ``offset`` (commit-log offset, size, tags code)."""
        self.unit_reads.append((topic, queue_id, offset))
        queue = self._queues.get((topic, queue_id), [])
        high = len(queue)
        early = position_status(offset, 0, high)
        if early is not None:
            return UnitsResult(early[0], b"", early[1], 0, high)
        chosen = queue[offset : offset + max_count]
        units = b"".join(UNIT.pack(phys, len(rec), code) for phys, rec, code in chosen)
        return UnitsResult(GetStatus.FOUND, units, offset + len(chosen), 0, high)


class MemoryStorePlugin:
    """Registers ``memory`` (:class:`MemoryStore`) and ``memory_units``
    (:class:`UnitsMemoryStore`)."""

    @hookimpl
    def mqcore_register_stores(self, register: Any) -> None:
        """Register both stores."""
        register("memory", MemoryStore)
        register("memory_units", UnitsMemoryStore)
