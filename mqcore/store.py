"""The store contract: what every storage backend (hook ``mqcore_register_stores``) provides.

A store is opened with ``Kernel().open_store(name, path, **options)`` and used as a context
manager. Common options every backend accepts:

- ``flush_mode``: :class:`FlushMode` (or its name); ``put`` returns only once it is met.
- ``read_only``: open without writing; see newer data after :meth:`Store.refresh`.
- ``store_host``: ``"ip:port"`` written into records and message ids.

What a store may offer besides these operations is declared in :mod:`mqcore.storecaps`.
The contract test suite in ``tests/contract/`` runs against every registered store.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

import attrs

from mqcore.errors import InvalidArgumentError
from mqcore.interfaces import MessageFilter
from mqcore.message import Message, MessageExt

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MESSAGE_DELAY_LEVEL",
    "SCHEDULE_TOPIC",
    "TIMER_TOPIC",
    "FlushMode",
    "GetResult",
    "GetStatus",
    "PutResult",
    "RawGetResult",
    "Store",
    "UnitsResult",
    "deliver_timestamp",
    "parse_delay_levels",
    "position_status",
]

DEFAULT_MAX_BYTES = 256 * 1024  # RocketMQ's maxTransferBytesOnMessageInMemory

#: RocketMQ's topic for delayed messages (``RMQ_SYS_SCHEDULE_TOPIC``): queue ``i`` holds the
#: messages of delay level ``i + 1``.
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"

#: RocketMQ 5's topic for timer messages (``TimerMessageStore.TIMER_TOPIC``): queue 0 holds
#: every timer message, in arrival order, until it is due.
TIMER_TOPIC = "rmq_sys_wheel_timer"

#: RocketMQ's ``messageDelayLevel`` default: level 1 is 1 s ... level 18 is 2 h.
DEFAULT_MESSAGE_DELAY_LEVEL = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"

_DELAY_UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels(text: str) -> tuple[int, ...]:
    """``"1s 5s 10m 2h"`` -> delays in ms, level 1 first (units s, m, h, d, as RocketMQ)."""
    delays: list[int] = []
    for item in str(text).split():
        unit = _DELAY_UNITS.get(item[-1:])
        number = item[:-1]
        if unit is None or not number.isdigit():
            raise InvalidArgumentError(
                f"delay level {len(delays) + 1} {item!r} in message_delay_level {text!r} is not "
                "a whole number followed by s, m, h or d (e.g. '1s 5s 10s 30s 1m 2h')"
            )
        delays.append(int(number) * unit)
    if not delays:
        raise InvalidArgumentError(
            f"message_delay_level {text!r} defines no level; give e.g. '1s 5s 10s 30s 1m'"
        )
    return tuple(delays)


def deliver_timestamp(delays: Sequence[int], delay_level: int, store_timestamp: int) -> int:
    """When a message held in :data:`SCHEDULE_TOPIC` at ``delay_level`` is due (ms).

    Stores keep this as the message's consume-queue tags code, as RocketMQ's commit log does
    (``computeDeliverTimestamp``): a level past the last counts as the last.
    """
    level = min(delay_level, len(delays))
    return store_timestamp + delays[level - 1] if level > 0 else store_timestamp


class FlushMode(enum.Enum):
    """When ``put`` returns: after a background flush is *scheduled*, or after fsync."""

    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"

    @classmethod
    def parse(cls, value: FlushMode | str) -> FlushMode:
        """Accept a member, its name, or ``async``/``sync``."""
        if isinstance(value, FlushMode):
            return value
        text = str(value).strip().upper()
        if text in ("ASYNC", "SYNC"):
            text += "_FLUSH"
        try:
            return cls[text]
        except KeyError:
            raise InvalidArgumentError(
                f"unknown flush mode {value!r}; use ASYNC_FLUSH or SYNC_FLUSH"
            ) from None


class GetStatus(enum.Enum):
    """Outcome of :meth:`Store.get` (RocketMQ's GetMessageStatus)."""

    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"  # offset == max offset: nothing new yet
    NO_MATCHED_MSG = "NO_MATCHED_MSG"  # messages were scanned, none passed the filter
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"  # the queue has never held a message
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"  # below min offset (retention deleted it)
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"  # kept for RocketMQ parity; == NO_NEW_MSG case
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"  # beyond max offset
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"  # the consume-queue unit points at deleted data


class PutResult(NamedTuple):
    """Where one message was stored."""

    msg_id: str
    queue_offset: int
    commitlog_offset: int
    store_timestamp: int
    size: int


def position_status(offset: int, low: int, high: int) -> tuple[GetStatus, int] | None:
    """RocketMQ's getMessage rules for where ``offset`` falls in a queue holding
    ``[low, high)``: ``(status, next offset)`` when there is nothing to read there, or
    ``None`` when the offset is readable. Every store answers these cases the same way.
    """
    if high == 0:
        return GetStatus.NO_MESSAGE_IN_QUEUE, 0
    if offset < low:
        return GetStatus.OFFSET_TOO_SMALL, low
    if offset == high:
        return GetStatus.NO_NEW_MSG, offset
    if offset > high:
        return GetStatus.OFFSET_OVERFLOW_BADLY, low if low == 0 else high
    return None


@attrs.frozen
class GetResult:
    """Messages read from one queue, and where to continue."""

    status: GetStatus
    messages: list[MessageExt]
    next_offset: int
    min_offset: int
    max_offset: int


@attrs.frozen
class RawGetResult:
    """Like :class:`GetResult`, with the encoded records instead of decoded messages.

    ``records`` are memoryviews of the stored bytes; they stay valid while the store is
    open (copy them to keep them longer).
    """

    status: GetStatus
    records: list[memoryview]
    next_offset: int
    min_offset: int
    max_offset: int


@attrs.frozen
class UnitsResult:
    """A queue's consume-queue units from an offset (``get_units`` of the
    :class:`~mqcore.storecaps.UnitReader` capability, which a store may offer besides the
    :class:`Store` operations; both bundled stores do).

    ``units`` holds them back to back, 20 bytes each as RocketMQ lays them out: commit-log
    offset (8), record size (4), tags code (8), big-endian; the first is the unit at the
    offset asked for. ``status`` and ``next_offset`` follow :meth:`Store.get`'s rules for
    an offset outside the queue.
    """

    status: GetStatus
    units: bytes
    next_offset: int
    min_offset: int
    max_offset: int


@runtime_checkable
class Store(Protocol):
    """The operations every storage backend implements."""

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
        """Append a batch to one queue (one encode, one write); honours the flush mode.

        ``sys_flag`` is stored in every record of the batch (RocketMQ's ``MessageSysFlag``:
        bit 0 marks a body a client sent zlib-compressed). The broker passes it only when it
        is not 0, so a store that predates it keeps working for everything else.
        """
        ...

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
        ...

    def get_raw(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int = 32,
        max_bytes: int = DEFAULT_MAX_BYTES,
        message_filter: MessageFilter | None = None,
    ) -> RawGetResult:
        """Like :meth:`get`, returning encoded records (never re-encoded)."""
        ...

    def min_offset(self, topic: str, queue_id: int) -> int:
        """Smallest offset still stored in the queue."""
        ...

    def max_offset(self, topic: str, queue_id: int) -> int:
        """Offset the next message of the queue will get (one past the last)."""
        ...

    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first offset whose store timestamp is >= ``timestamp_ms`` (max offset if none)."""
        ...

    def lookup(self, topic: str, key: str, max_count: int = 32) -> list[MessageExt]:
        """Messages of ``topic`` carrying ``key`` (oldest first)."""
        ...

    def message_at(self, commitlog_offset: int) -> MessageExt | None:
        """The message whose record starts at ``commitlog_offset``, or ``None``."""
        ...

    def topics(self) -> list[str]:
        """Topics with at least one queue in the store."""
        ...

    def queue_ids(self, topic: str) -> list[int]:
        """Queue ids of ``topic`` present in the store."""
        ...

    def flush(self) -> None:
        """Make everything appended so far durable."""
        ...

    def refresh(self) -> None:
        """Read-only stores: pick up what the writer appended since opening."""
        ...

    def close(self) -> None:
        """Flush and release files; a clean close leaves no abort marker."""
        ...

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: object) -> None: ...
