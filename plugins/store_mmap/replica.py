"""Replication support for the mmap store: commit-log bytes out of a master, into a slave.

A master hands out its commit log as it lies on disk (:func:`read`); a slave appends those
bytes unchanged at the same offsets (:meth:`Replica.append`) and dispatches the complete
records among them into its own consume queues and key index (:meth:`Replica.dispatch`, through
the store's :class:`~.dispatch.Dispatcher`), as RocketMQ's
ReputMessageService does on a slave. Records therefore sit at the same commit-log offsets on
both sides, and their message ids (store host + offset) stay valid on the slave.

A chunk may end in the middle of a record: the record is dispatched once its last byte has
arrived. After a restart, recovery cuts such a torn tail and the slave asks for the bytes
again from the end of its last complete record.
"""

from __future__ import annotations

from mqcore.errors import InvalidArgumentError, StoreCorruptedError
from mqcore.message import MessageExt
from mqcore.record.layout import BLANK_MAGIC_CODE, HEADER_SIZE, MESSAGE_MAGIC_CODE, SIZE_MAGIC

from .commitlog import CommitLog
from .dispatch import Dispatcher
from .parts import QueueKey

__all__ = ["Replica", "read"]


def read(commitlog: CommitLog, offset: int, max_bytes: int) -> bytes | None:
    """Up to ``max_bytes`` of ``commitlog`` from ``offset``, within one segment.

    Returns ``b""`` when nothing was appended past ``offset`` yet, ``None`` when ``offset``
    is not stored (below the oldest segment, or past the end).
    """
    end = commitlog.max_offset
    if offset == end:
        return b""
    mf = commitlog.file_for(offset)
    if mf is None or offset > end:
        return None
    stop = min(end, mf.file_end_offset, offset + max_bytes)
    view = commitlog.read(offset, stop - offset)
    if view is None:
        return b""  # retention or a roll moved under us: the caller asks again
    return bytes(view)


class Replica:
    """A slave's side: its master's commit-log bytes in, their records dispatched.

    The store calls both methods with its write lock held.
    """

    def __init__(self, dispatcher: Dispatcher) -> None:
        self._dispatcher = dispatcher
        self._commitlog = dispatcher.parts.commitlog
        #: the commit-log offset dispatched up to (-1 until the first call: recovery
        #: dispatched every complete record below the end at opening)
        self.dispatched = -1

    def append(self, offset: int, data: bytes | memoryview) -> int:
        """Append ``data`` (commit-log bytes of a master) at ``offset``; returns the new end.

        ``offset`` must be the end of this store's commit log: a replica never has holes.
        """
        end = self._commitlog.max_offset
        if offset != end:
            raise InvalidArgumentError(
                f"replicated bytes start at commit-log offset {offset}, but this store's "
                f"commit log ends at {end}; the slave must ask its master from its own end"
            )
        if self.dispatched < 0:
            self.dispatched = end
        return self._commitlog.append_copy(memoryview(data))

    def dispatch(self) -> set[QueueKey]:
        """Build consume-queue units and index entries for the complete records appended
        since the last call; returns the ``(topic, queue_id)`` pairs that got new messages."""
        log = self._commitlog
        frm = self.dispatched
        if frm < 0:
            frm = self.dispatched = log.max_offset
        end = log.max_offset
        feed = self._dispatcher.from_log(
            advice="move the slave's store aside and let it copy the log again"
        )
        while frm < end:
            mf = log.file_for(frm)
            if mf is None:
                break
            head = log.read(frm, 8)
            if head is None:
                break  # the header is not complete yet
            size, magic = SIZE_MAGIC.unpack(head)
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
            feed.add(MessageExt(rec), frm)
            frm += size
        touched = feed.finish()
        self.dispatched = frm
        return touched
