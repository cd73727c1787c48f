"""The dispatcher: how records written to the commit log reach the consume queues and the key
index (RocketMQ's ``CommitLogDispatcher``s, building the consume queue and the index).

Three writers feed it. A ``put`` hands over the batch it has just written
(:meth:`Dispatcher.put_batch`), with the prepared records it wrote from, so that units and
index entries are built without reading the log back. Recovery (records the queues miss after
a crash) and a slave (records its master sent) read records back from the log and feed them
one by one to a :class:`LogDispatch` (:meth:`Dispatcher.from_log`), which gathers units per
queue and appends them in large batches. Either way a record's unit holds its commit-log
offset, its size and its tags code, where a message held for a delay level has its deliver
time instead, and a timer message its deliver time as :mod:`mqcore.codec` computes it.
"""

from __future__ import annotations

from itertools import accumulate, repeat
from typing import Any

from mqcore import batch
from mqcore.codec import record_tags_code
from mqcore.errors import StoreCorruptedError
from mqcore.message import MessageExt
from mqcore.record.prepared import keys_of, tags_code_of
from mqcore.record.unit import UNIT
from mqcore.store import SCHEDULE_TOPIC, deliver_timestamp
from mqcore.uniqkey import index_keys, record_index_keys

from .consumequeue import ConsumeQueue
from .parts import QueueKey, StoreParts

__all__ = ["Dispatcher", "Keyed", "LogDispatch"]

_pack_unit = UNIT.pack
_UNITS_PER_DRAIN = 1 << 20  # bytes of units gathered per queue before they are appended
_KEYS_PER_DRAIN = 65536  # index entries gathered before they are written (bounded memory)

#: An index entry waiting to be written: (topic, keys, commit-log offset, store time).
Keyed = tuple[str, list[str], int, int]


class Dispatcher:
    """Builds consume-queue units and index entries in the store's :class:`StoreParts`."""

    def __init__(self, parts: StoreParts) -> None:
        self.parts = parts

    def put_batch(
        self,
        topic: str,
        cq: ConsumeQueue,
        queue_offset: int,
        prepared: list[Any],
        uniqs: list[str | None] | None,
        chunks: list[tuple[int, int]],
        sizes: list[int],
        total: int,
        store_ts: int,
        deferred: list[Keyed] | None = None,
    ) -> tuple[list[int], int]:
        """Dispatch a batch ``put`` has just written (write lock held).

        ``chunks`` are :meth:`~.commitlog.CommitLog.put_batch`'s; ``sizes`` the records'
        sizes (unused for one record), ``total`` their sum. Returns each record's
        commit-log offset and the offset just past the last. With ``deferred``, the index
        entries are added to it instead of the index: the caller writes the entries of
        several batches in one call (an entry alone costs ten times its share of a batch).
        """
        keyed: list[Keyed] | None = None
        if len(prepared) == 1:  # one message per put is common: skip the batch machinery
            first = prepared[0]
            phys = chunks[0][0]
            if first[10] or uniqs:
                keys = index_keys(first[10], uniqs[0] if uniqs else None)
                if keys:
                    keyed = [(topic, keys, phys, store_ts)]
            cq.append_unit(queue_offset, phys, total, tags_code_of(first))
            offsets = [phys]
            end = phys + total
        else:
            if len(chunks) == 1:
                # Offsets and units for the whole batch in one call (C when built; see
                # mqcore.batch): no Python bytecode per message.
                units, offsets, end = batch.units(prepared, chunks[0][0])
            else:  # the batch rolled onto a new segment: a blank lies between
                offsets = []
                i = 0
                for phys, n in chunks:
                    part = list(accumulate(sizes[i : i + n], initial=phys))
                    end = part.pop()
                    offsets += part
                    i += n
                units = b"".join(map(_pack_unit, offsets, sizes, map(tags_code_of, prepared)))
            cq.append_units(queue_offset, units)
            keyed = _keyed(topic, prepared, uniqs, offsets, store_ts)
        # Keys last: recovery re-indexes what the index lags behind the queues.
        if keyed:
            if deferred is not None:
                deferred += keyed
            else:
                self.parts.index.put_keys(keyed)
        self.parts.last_store_ts = store_ts
        return offsets, end

    def put_written(
        self,
        topic: str,
        prepared: list[Any],
        uniqs: list[str | None] | None,
        offsets: list[int],
        store_ts: int,
        deferred: list[Keyed] | None = None,
    ) -> None:
        """Finish a batch whose records and units a put has written itself (see
        :mod:`.fastput`): its index entries (into ``deferred`` when given, as
        :meth:`put_batch` does) and the store's last store time."""
        keyed = _keyed(topic, prepared, uniqs, offsets, store_ts)
        if keyed:
            if deferred is not None:
                deferred += keyed
            else:
                self.parts.index.put_keys(keyed)
        self.parts.last_store_ts = store_ts

    def from_log(self, *, index_after: int = -1, advice: str) -> LogDispatch:
        """A dispatch of records read back from the commit log, in log order.

        Records at or before commit-log offset ``index_after`` are not indexed again.
        ``advice`` ends the error raised when a record does not follow its queue's end
        (what to do about it).
        """
        return LogDispatch(self.parts, index_after, advice)


def _keyed(
    topic: str,
    prepared: list[Any],
    uniqs: list[str | None] | None,
    offsets: list[int],
    store_ts: int,
) -> list[Keyed] | None:
    """The index entries of a batch written at ``offsets`` (None when it has no key)."""
    if len(prepared) == 1:
        keys = prepared[0][10]
        if not keys and not uniqs:
            return None
        found = index_keys(keys, uniqs[0] if uniqs else None)
        return [(topic, found, offsets[0], store_ts)] if found else None
    if uniqs is None and not any(map(keys_of, prepared)):
        return None
    return [
        (topic, index_keys(keys, uniq), phys, store_ts)
        for keys, uniq, phys in zip(
            map(keys_of, prepared), uniqs or repeat(None), offsets, strict=False
        )
        if keys or uniq
    ]


class LogDispatch:
    """Records read back from the commit log, fed in log order (:meth:`add`), dispatched
    in batches; :meth:`finish` appends what is left. One per pass, under the write lock."""

    def __init__(self, parts: StoreParts, index_after: int, advice: str) -> None:
        self._parts = parts
        self._index_after = index_after
        self._advice = advice
        self._pending: dict[QueueKey, tuple[int, bytearray]] = {}
        self._keyed: list[Keyed] = []
        #: queues that got units in this pass
        self.touched: set[QueueKey] = set()
        #: records dispatched (those already in their queue are not counted)
        self.count = 0
        #: store time of the last record fed (0: none)
        self.last_ts = 0

    def add(self, msg: MessageExt, phys: int) -> bool:
        """Dispatch the record ``msg`` found at commit-log offset ``phys``.

        Returns False when its queue already holds it. Raises
        :class:`~mqcore.errors.StoreCorruptedError` when it lies beyond its queue's next
        offset in a queue that holds units (a queue whose units are all gone restarts at it).
        """
        parts = self._parts
        ts = msg.store_timestamp
        self.last_ts = ts
        if phys > self._index_after:
            keys = record_index_keys(msg)  # the keys and the unique id
            if keys:
                self._keyed.append((msg.topic, keys, phys, ts))
                if len(self._keyed) >= _KEYS_PER_DRAIN:
                    parts.index.put_keys(self._keyed)
                    self._keyed.clear()
        key = (msg.topic, msg.queue_id)
        cq = parts.queues.get(key) or parts.queue_for_write(*key)
        queued = self._pending.get(key)
        next_offset = queued[0] if queued is not None else cq.max_offset
        qoff = msg.queue_offset
        if qoff < next_offset or phys < cq.max_physical_offset:
            return False
        if queued is None:
            if qoff > next_offset:
                if cq.min_offset != cq.max_offset:
                    self._gap(msg, cq, next_offset, phys)
                cq.append_units(qoff, b"", fill_gap=True)  # a queue whose head was deleted
            queued = (qoff, bytearray())
        elif qoff > next_offset:
            self._gap(msg, cq, next_offset, phys)
        units = queued[1]
        if msg.topic == SCHEDULE_TOPIC and msg.delay_level > 0:
            # As the put did: a held message's tags code is its deliver time.
            code = deliver_timestamp(parts.delays, msg.delay_level, ts)
        else:  # in the timer topic, the deliver time
            code = record_tags_code(msg)
        units += _pack_unit(phys, msg.store_size, code)
        self._pending[key] = (qoff + 1, units)
        self.count += 1
        if len(units) >= _UNITS_PER_DRAIN:
            self._drain()
        return True

    def _gap(self, msg: MessageExt, cq: ConsumeQueue, next_offset: int, phys: int) -> None:
        raise StoreCorruptedError(
            f"consume queue {msg.topic}-{msg.queue_id} ends at offset {next_offset} but the "
            f"commit log continues at queue offset {msg.queue_offset} (commit-log offset "
            f"{phys}); {self._advice}",
            path=str(cq.directory),
            offset=phys,
        )

    def _drain(self) -> None:
        queues = self._parts.queues
        for key, (next_offset, units) in self._pending.items():
            queues[key].append_units(next_offset - len(units) // UNIT.size, units)
            self.touched.add(key)
        self._pending.clear()

    def finish(self) -> set[QueueKey]:
        """Append the units and index entries gathered; returns the queues that got units.

        The store's last store time moves to the newest record fed, never back.
        """
        self._drain()
        if self._keyed:
            self._parts.index.put_keys(self._keyed)
            self._keyed.clear()
        if self.last_ts > self._parts.last_store_ts:
            self._parts.last_store_ts = self.last_ts
        return self.touched
