"""What an open mmap store is made of: its commit log, consume queues, key index, the delay
table it stamps held messages with, and the store time of its last record.

:class:`StoreParts` holds them for :class:`~.store.MmapStore` and lends them to the store's
other modules (recovery, replication, retention, the dispatcher), which see the parts and
never the store: the store keeps its lifecycle (the writer lock, the write lock, the
background services, closing) and calls them with the write lock held where they write.
"""

from __future__ import annotations

import re
import struct
import threading
from pathlib import Path

from mqcore.errors import InvalidArgumentError
from mqcore.record.layout import HEADER_SIZE, POS_STORE_TIMESTAMP

from .commitlog import CommitLog
from .consumequeue import ConsumeQueue
from .indexfile import IndexService
from .mappedfile import TransientStorePool
from .options import MmapStoreOptions

__all__ = ["QueueKey", "StoreParts"]

#: A consume queue's name: (topic, queue id).
QueueKey = tuple[str, int]

_I64 = struct.Struct(">q")
_BAD_TOPIC = re.compile(r"[/\\\x00]")


class StoreParts:
    """The commit log, consume queues and key index of one store directory, opened together.

    ``queues`` maps (topic, queue id) to its consume queue. Readers look it up without a
    lock, so a new queue replaces the dict rather than changing it. ``last_store_ts`` is the
    store time of the newest record dispatched (store times never go back). ``delays`` is the
    delay table (ms per level) that turns a held message's level into its deliver time.
    """

    def __init__(
        self,
        path: Path,
        options: MmapStoreOptions,
        *,
        delays: tuple[int, ...],
        pool: TransientStorePool | None = None,
    ) -> None:
        self.path = path
        self.read_only = bool(options.read_only)
        self.delays = delays
        self.units_per_file = int(options.consume_queue_units)
        self.queues: dict[QueueKey, ConsumeQueue] = {}
        self.last_store_ts = 0
        self._queue_lock = threading.Lock()
        self.commitlog = CommitLog(
            path, int(options.segment_size), read_only=self.read_only, pool=pool
        )
        try:
            self.load_queues()
            self.index = IndexService(
                path,
                max_hash_slots=int(options.index_hash_slots),
                max_index_count=int(options.index_max_entries),
                read_only=self.read_only,
            )
        except BaseException:
            self._close_queues_and_log()
            raise

    # --- consume queues ---------------------------------------------------------------

    def load_queues(self) -> None:
        """Open the consume queues found on disk that are not open yet."""
        root = self.path / "consumequeue"
        if not root.is_dir():
            return
        for topic_dir in sorted(root.iterdir()):
            if not topic_dir.is_dir():
                continue
            for queue_dir in sorted(topic_dir.iterdir()):
                if queue_dir.is_dir() and queue_dir.name.isdigit():
                    key = (topic_dir.name, int(queue_dir.name))
                    if key not in self.queues:
                        self.queues[key] = self._new_queue(*key)

    def _new_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        return ConsumeQueue(
            self.path,
            topic,
            queue_id,
            units_per_file=self.units_per_file,
            read_only=self.read_only,
            # Real blocks: a write through the map into a hole on a full disk is a SIGBUS.
            preallocate=not self.read_only,
        )

    def queue_for_write(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The consume queue of ``topic``/``queue_id``, created when it does not exist.

        Raises :class:`~mqcore.errors.InvalidArgumentError` for a topic that cannot name a
        directory or a negative queue id.
        """
        cq = self.queues.get((topic, queue_id))
        if cq is None:
            bad = not topic or len(topic.encode()) > 127 or topic in (".", "..")
            if bad or _BAD_TOPIC.search(topic):
                raise InvalidArgumentError(
                    f"topic {topic!r} cannot be stored: use 1..127 bytes without '/', '\\' "
                    "or NUL, and not '.' or '..'"
                )
            if not isinstance(queue_id, int) or queue_id < 0:
                raise InvalidArgumentError(f"queue id {queue_id!r} must be an int >= 0")
            with self._queue_lock:
                cq = self.queues.get((topic, queue_id))
                if cq is None:
                    cq = self._new_queue(topic, queue_id)
                    # Replace the dict: readers iterate it without a lock.
                    self.queues = {**self.queues, (topic, queue_id): cq}
        return cq

    def dispatched_end(self) -> int:
        """The furthest commit-log offset any consume queue accounts for (-1: none).

        Records are dispatched in commit-log order, so every record before it was
        dispatched.
        """
        return max((cq.max_physical_offset for cq in self.queues.values()), default=-1)

    def newest_unit(self, end: int | None = None) -> tuple[int, int] | None:
        """``(commit-log offset, size)`` of the newest record a consume queue points at
        (ending at or before ``end`` when given), or None when no queue holds a unit."""
        newest: tuple[int, int] | None = None
        for cq in self.queues.values():
            unit = cq.unit_at(cq.max_offset - 1) if cq.max_offset > cq.min_offset else None
            if unit is None or (end is not None and unit[0] + unit[1] > end):
                continue
            if newest is None or unit[0] > newest[0]:
                newest = (unit[0], unit[1])
        return newest

    def correct_min_offsets(self) -> None:
        """Move each queue's minimum past units that point below the commit log's start."""
        low = self.commitlog.min_offset
        for cq in list(self.queues.values()):
            cq.correct_min_offset(low)

    # --- records ----------------------------------------------------------------------

    def store_timestamp(self, phys: int, size: int = 0) -> int:
        """Store time of the record at commit-log offset ``phys`` (0 once retention deleted
        it: older than anything still stored). ``size`` is not needed (the header holds the
        time): it is taken so that this serves as ``timestamp_of`` of
        :meth:`.consumequeue.ConsumeQueue.offset_for_timestamp`."""
        rec = self.commitlog.read(phys, HEADER_SIZE)
        if rec is None:
            return 0
        return int(_I64.unpack_from(rec, POS_STORE_TIMESTAMP)[0])

    # --- durability -------------------------------------------------------------------

    def flush(self) -> None:
        """Commit and flush the commit log, then every consume queue and the index."""
        self.commitlog.commit()
        self.commitlog.flush()
        for cq in list(self.queues.values()):
            cq.flush()
        self.index.flush()
        self.commitlog.release_cold_pages()

    def rollback(self, cq: ConsumeQueue, start_phys: int) -> None:
        """Remove what a failed batch left from ``start_phys`` on: its units in ``cq``, its
        index entries and its records (the caller holds the write lock)."""
        cq.truncate_dirty(start_phys)
        self.index.truncate(start_phys)
        self.commitlog.truncate(start_phys)

    def close(self) -> None:
        """Close the index, the commit log and every consume queue."""
        self.index.close()
        self._close_queues_and_log()

    def _close_queues_and_log(self) -> None:
        self.commitlog.close()
        for cq in list(self.queues.values()):
            cq.close()
