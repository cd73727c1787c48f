"""Optional store capabilities: what a store may offer besides the :class:`~mqcore.store.Store`
operations, and who uses it.

A store implements :class:`~mqcore.store.Store` and is complete with it: the broker, the
clients and the Spark source work with any such store. A store that also has the methods of
one of these protocols gets the faster or wider path that uses them; users test for it with
``isinstance(store, Capability)`` (each protocol is runtime-checkable) and fall back when it
is missing. Both bundled stores offer :class:`PreparedWriter`, :class:`MultiQueuePut`,
:class:`PreparedMultiPut`, :class:`UnitReader`, :class:`SpanReader`, :class:`ExpiringStore` and
:class:`LogPositionReporter`; the mmap
store also the commit-log ones
(:class:`CommitLogBounds`, :class:`CommitLogSource`, :class:`CommitLogReplica`), which
replication needs. The contract suite (``tests/contract/``) checks each capability a store
declares this way.

.. versionadded:: 0.1
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, runtime_checkable

from mqcore.errors import MQError
from mqcore.interfaces import MessageFilter
from mqcore.message import Message
from mqcore.spans import RawSpans
from mqcore.store import DEFAULT_MAX_BYTES, PutResult, UnitsResult

__all__ = [
    "CommitLogBounds",
    "CommitLogReplica",
    "CommitLogSource",
    "ExpiringStore",
    "LogPositionReporter",
    "LogPositions",
    "MultiQueuePut",
    "PreparedMultiPut",
    "PreparedPutRequest",
    "PreparedWriter",
    "PutRequest",
    "SpanReader",
    "UnitReader",
]


@runtime_checkable
class PreparedWriter(Protocol):
    """Stores records prepared ahead (the broker's batched timer hold, the Spark sink)."""

    def put_prepared(
        self,
        topic: str,
        queue_id: int,
        prepared: list[Any],
        uniqs: list[str | None] | None = None,
        *,
        born_host: str | None = None,
    ) -> list[PutResult]:
        """Append records prepared ahead as ``put`` stores the messages they stand for.

        ``prepared`` holds the tuples :func:`mqcore.codec.prepare` returns for ``topic`` (or
        tuples built the same way); ``uniqs`` the records' ``UNIQ_KEY`` properties (None
        where one has none; None for none at all), indexed as ``put`` indexes them. Not for
        ``SCHEDULE_TOPIC_XXXX``: raises :class:`~mqcore.errors.InvalidArgumentError`.
        """
        ...


@dataclass(frozen=True, slots=True)
class PutRequest:
    """One queue's share of a :meth:`MultiQueuePut.put_many`: the arguments of one
    :meth:`~mqcore.store.Store.put` call."""

    topic: str
    queue_id: int
    messages: Sequence[Message]
    born_timestamp: int | None = None
    born_host: str | None = None
    reconsume_times: int = 0
    sys_flag: int = 0


@runtime_checkable
class MultiQueuePut(Protocol):
    """Stores puts to several queues at once (the served broker's group commit)."""

    def put_many(self, requests: Sequence[PutRequest]) -> list[list[PutResult] | MQError]:
        """Each request stored as ``put`` stores it, all in one write under one lock and one
        flush-mode wait; a request the store refuses (InvalidArgumentError: too large...)
        gets its error in its slot and the others are stored. DiskFullError for a request:
        nothing of that request stored (later ones: the same error).

        Returns one slot per request, in order: the request's put results, or the error
        that refused it. Errors that are not about one request (the store is closed, an
        I/O error) are raised as ``put`` raises them.
        """
        ...


class PreparedPutRequest(NamedTuple):
    """One queue's share of a :meth:`PreparedMultiPut.put_many_prepared`: the arguments of
    one :meth:`PreparedWriter.put_prepared` call. (A named tuple, unlike
    :class:`PutRequest`: the group commit makes one per send, and it is made in a third of
    the time.)"""

    topic: str
    queue_id: int
    prepared: list[Any]
    uniqs: list[str | None] | None = None
    born_host: str | None = None


@runtime_checkable
class PreparedMultiPut(Protocol):
    """Stores records prepared ahead into several queues at once (the served broker's group
    commit of plain single sends, which never builds a message object)."""

    def put_many_prepared(
        self, requests: Sequence[PreparedPutRequest]
    ) -> list[list[PutResult] | MQError]:
        """Each request stored as :meth:`PreparedWriter.put_prepared` stores it, with
        :meth:`MultiQueuePut.put_many`'s semantics: all in one write under one lock and one
        flush-mode wait; a request the store refuses (a record too large, the schedule
        topic: InvalidArgumentError) gets its error in its slot and the others are stored;
        DiskFullError for a request: nothing of that request stored (later ones: the same
        error). Errors that are not about one request (the store is closed, an I/O error)
        are raised as ``put_prepared`` raises them, with nothing of the call kept.
        """
        ...


@runtime_checkable
class UnitReader(Protocol):
    """Reads a queue's consume-queue units alone (the timer scheduler's scan)."""

    def get_units(self, topic: str, queue_id: int, offset: int, max_count: int = 32) -> UnitsResult:
        """Up to ``max_count`` units from ``offset`` (see :class:`~mqcore.store.UnitsResult`),
        without reading the records."""
        ...


@runtime_checkable
class SpanReader(Protocol):
    """Reads records as spans (see :mod:`mqcore.spans`; the Spark source)."""

    def get_spans(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int = 32,
        max_bytes: int = DEFAULT_MAX_BYTES,
        message_filter: MessageFilter | None = None,
    ) -> RawSpans:
        """Like :meth:`~mqcore.store.Store.get_raw`, the records as spans."""
        ...


@runtime_checkable
class ExpiringStore(Protocol):
    """Deletes old data on demand as well as on its own schedule (retention)."""

    def delete_expired_files(self, now: float | None = None) -> int:
        """One retention pass; returns how many units of storage (segments, batches) went.
        A direct call is a manual delete: expired data goes at any hour (the store's own
        cleaner waits for its delete hours; see :mod:`mqcore.retentionrules`).

        ``now`` (seconds since the epoch, default the current time) is for tests.
        """
        ...


@dataclass(frozen=True)
class LogPositions:
    """How far a store's writes have got, as commit-log byte offsets (one past the last byte).

    ``written``: appended (readers may see it); ``flushed``: known to be on disk (fsynced);
    ``dispatched``: in the consume queues and the key index, so consumers can find it.
    ``written - flushed`` is what a power loss could take (the flush lag), ``written -
    dispatched`` what consumers cannot see yet (the dispatch lag). A store whose puts are
    durable when they return reports ``flushed == written``; one that writes a record and
    its queue entry in one transaction reports ``dispatched == written``.
    """

    written: int
    flushed: int
    dispatched: int


@runtime_checkable
class LogPositionReporter(Protocol):
    """Reports its write, flush and dispatch positions (the served broker's metrics)."""

    def log_positions(self) -> LogPositions:
        """The positions now; cheap (no lock taken, no I/O), for reading at any time.

        The three are read one after another while puts go on: each is exact, but they are
        not one snapshot (``flushed`` and ``dispatched`` never exceed ``written``).
        """
        ...


@runtime_checkable
class CommitLogBounds(Protocol):
    """Has one commit log for every queue, addressed by byte offset (the broker's runtime
    facts and its rule for sending a lagging reader to a slave)."""

    def commitlog_min_offset(self) -> int:
        """Offset of the first commit-log byte still stored."""
        ...

    def commitlog_max_offset(self) -> int:
        """Offset one past the last commit-log byte appended."""
        ...


@runtime_checkable
class CommitLogSource(CommitLogBounds, Protocol):
    """Hands out its commit log as it lies on disk: a replication master."""

    def read_commitlog(self, offset: int, max_bytes: int) -> bytes | None:
        """Up to ``max_bytes`` from ``offset``; ``b""`` when nothing lies past it yet,
        ``None`` when ``offset`` is not stored (below the oldest byte, or past the end)."""
        ...


@runtime_checkable
class CommitLogReplica(CommitLogBounds, Protocol):
    """Appends a master's commit-log bytes unchanged and dispatches them: a replication
    slave."""

    def append_commitlog(self, offset: int, data: bytes | memoryview) -> set[tuple[str, int]]:
        """Append ``data`` at ``offset`` (this store's commit-log end) and dispatch the
        complete records; returns the ``(topic, queue_id)`` pairs with new messages."""
        ...
