"""Protocols that plugins implement (besides stores, see :mod:`mqcore.store`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from mqcore.message import Message, MessageQueue

__all__ = [
    "AllocateStrategy",
    "DelayHost",
    "DelayScheduler",
    "MessageFilter",
    "OffsetStore",
    "SchedulerState",
    "TimerHost",
    "TimerScheduler",
]


@runtime_checkable
class AllocateStrategy(Protocol):
    """Decides which queues one member of a consumer group owns.

    Every member computes its share locally from the same inputs, so a strategy must be
    deterministic. The caller (the rebalance) sorts ``mq_all`` and ``cid_all`` first, as
    RocketMQ does; a strategy keeps the order it is given.
    """

    @property
    def name(self) -> str:
        """The strategy's registered name (a class attribute in the bundled strategies)."""
        ...

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        """The queues ``current_cid`` owns."""
        ...


@runtime_checkable
class MessageFilter(Protocol):
    """A compiled filter expression.

    The broker filters in two stages, as RocketMQ does: first on the tags hash code kept in
    the consume queue (:meth:`matches_tags_code`), then on the stored properties without
    decoding the body (:meth:`matches_properties`). Clients call :meth:`matches`.
    ``uses_properties`` tells the store whether the second stage is needed at all.
    """

    expression_type: str
    expression: str
    uses_properties: bool

    def matches(self, message: Any) -> bool:
        """Whether ``message`` (a Message or MessageExt) passes; never raises."""
        ...

    def matches_tags_code(self, tags_code: int) -> bool:
        """Consume-queue stage: may the message with this tags hash code pass?"""
        ...

    def matches_properties(self, properties: Mapping[str, str]) -> bool:
        """Commit-log stage: ``properties`` are all stored properties, TAGS included."""
        ...


@runtime_checkable
class OffsetStore(Protocol):
    """Where a consumer keeps its progress per queue."""

    def load(self) -> None:
        """Read persisted offsets (local stores); a no-op for remote ones."""
        ...

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool = False) -> None:
        """Record ``offset`` as the next offset to consume in ``mq`` (cached)."""
        ...

    def read_offset(self, mq: MessageQueue, from_store: bool = False) -> int:
        """The next offset to consume in ``mq``; -1 when unknown."""
        ...

    def persist_all(self, mqs: Sequence[MessageQueue]) -> None:
        """Write cached offsets of ``mqs`` to where they persist (and forget other queues)."""
        ...

    def persist(self, mq: MessageQueue) -> None:
        """Write the cached offset of one queue to where it persists."""
        ...

    def remove_offset(self, mq: MessageQueue) -> None:
        """Forget ``mq`` (it was rebalanced away)."""
        ...


@runtime_checkable
class DelayHost(Protocol):
    """What a broker lends its delay scheduler: the schedule topic to read, a put to deliver.

    Held messages live in the broker's store under the schedule topic
    (``SCHEDULE_TOPIC_XXXX``), one queue per delay level; the scheduler reads them back and
    hands each due one to :meth:`deliver`, which stores it in its real topic and wakes the
    consumers waiting on that queue.
    """

    def read_scheduled(self, queue_id: int, offset: int, max_count: int) -> Any:
        """Up to ``max_count`` held messages of one schedule queue from ``offset`` (a
        :class:`mqcore.store.GetResult`)."""
        ...

    def scheduled_max_offset(self, queue_id: int) -> int:
        """One past the last offset of a schedule queue."""
        ...

    def deliver(
        self,
        message: Message,
        queue_id: int,
        *,
        born_timestamp: int,
        born_host: str,
        reconsume_times: int,
    ) -> None:
        """Store a due message in queue ``queue_id`` of ``message.topic``; raises on failure."""
        ...

    def state_path(self, name: str) -> Path:
        """Where the scheduler keeps its file ``name`` (in the broker's config directory)."""
        ...


@runtime_checkable
class DelayScheduler(Protocol):
    """Holds messages until their delivery time, then hands them back for delivery.

    The broker stores a message with a delay level in queue :meth:`schedule_queue` of the
    schedule topic, calls :meth:`start` once, :meth:`run_due` from its delivery thread (and
    whenever it likes: calls are serialised), :meth:`persist` periodically and :meth:`stop`
    at shutdown. Factories are called as ``factory(message_delay_level=..., **options)``.
    Timer messages go to a :class:`TimerScheduler` instead (registered through its own hook).
    """

    name: str

    def deliver_at(self, delay_level: int, store_timestamp: int) -> int:
        """The delivery time (ms) of a message stored at ``store_timestamp``."""
        ...

    def schedule_queue(self, delay_level: int) -> tuple[int, int]:
        """``(queue id in the schedule topic, effective level)`` for a requested level > 0."""
        ...

    def start(self, host: DelayHost) -> None:
        """Load persisted progress and begin serving ``host``."""
        ...

    def run_due(self) -> int:
        """Deliver every held message that is due; returns ms until the next check is useful."""
        ...

    def persist(self) -> bool:
        """Write progress if it changed; returns whether a write happened."""
        ...

    def stop(self) -> None:
        """Persist progress and stop delivering (``run_due`` then does nothing)."""
        ...


class TimerHost(DelayHost, Protocol):
    """What a broker lends its timer scheduler, besides the :class:`DelayHost` operations.

    Timer messages are held in the broker's store under the timer topic
    (``rmq_sys_wheel_timer``, queue 0), in arrival order, with the deliver time in the
    ``TIMER_OUT_MS`` property. ``deliver`` stores a due one in its real topic.

    .. versionadded:: 0.1
    """

    def read_timers(self, offset: int, max_count: int) -> Any:
        """Encoded records of the timer topic from ``offset`` (a
        :class:`mqcore.store.RawGetResult`)."""
        ...

    def timer_max_offset(self) -> int:
        """One past the last offset of the timer topic."""
        ...

    def read_timer_units(self, offset: int, max_count: int) -> Any:
        """The timer topic's consume-queue units from ``offset`` (a
        :class:`mqcore.store.UnitsResult`; each unit's tags code is the held message's
        deliver time when it is at least 2**31, see :func:`mqcore.codec.timer_tags_code`),
        or None when the store cannot read units alone: then use :meth:`read_timers`.
        A scheduler written before this method may ignore it."""
        ...

    def timer_message(self, queue_offset: int) -> Any:
        """The held message at ``queue_offset`` of the timer topic (a MessageExt), or None."""
        ...

    def data_path(self, name: str) -> Path:
        """Where the scheduler keeps its data file or directory ``name`` (the broker's data
        directory)."""
        ...


@runtime_checkable
class TimerScheduler(Protocol):
    """Holds timer messages (any deliver time) until due: RocketMQ 5's timer messages.

    Registered through ``mqcore_register_timer_schedulers`` (a :class:`DelayScheduler` has
    its own hook), and run by the broker the same way (:meth:`start` once, :meth:`run_due`
    from its timer thread, :meth:`persist` periodically, :meth:`stop` at shutdown), but
    chosen by the broker setting
    ``timer_scheduler``: the broker stores every timer message in the timer topic, and the
    scheduler reads them from there through its :class:`TimerHost`. Factories are called as
    ``factory(precision_ms=..., max_delay_sec=..., **options)``.

    .. versionadded:: 0.1
    """

    name: str
    #: The furthest ahead a timer may be set; the broker refuses one beyond it at send.
    max_delay_ms: int
    #: Width of a slot: deliveries come at most this much (plus a wake-up) after their time.
    precision_ms: int

    def start(self, host: TimerHost) -> None:
        """Load or recover its state and begin serving ``host``."""
        ...

    def run_due(self) -> int:
        """Take in newly held messages and deliver what is due; ms until the next useful call."""
        ...

    def persist(self) -> bool:
        """Make its state durable; returns whether anything was written."""
        ...

    def stop(self) -> None:
        """Persist and stop delivering."""
        ...

    def stats(self) -> Any:
        """Pending timers, next due time, lag (an object with ``as_dict()``)."""
        ...


@runtime_checkable
class SchedulerState(Protocol):
    """A scheduler whose progress follows its broker to a slave (optional, for either kind).

    Replication copies the held messages with the commit log; which of them were delivered
    is the scheduler's own knowledge. A master's broker asks its running scheduler for
    :meth:`export_state` every ``slave_synchronize_interval_ms`` and sends it to its slaves;
    a slave's broker hands it to its own scheduler (of the same name, never started on a
    slave) with :meth:`import_state`, once the slave's log holds every record the state
    counts. When that slave's data directory is started as a master, the scheduler's
    :meth:`~DelayScheduler.start` resumes from the imported state: what was delivered is not
    delivered again, what was pending is delivered on time. A scheduler without these
    methods starts on a promoted slave from whatever its files there say (none: from the
    first held message), delivering again what its old master had delivered.

    .. versionadded:: 0.1
    """

    name: str

    def export_state(self) -> Any:
        """The running scheduler's progress as JSON-compatible data (dicts, lists, strings,
        numbers), or None when it has none to give (not started)."""
        ...

    def import_state(self, host: Any, state: Any) -> None:
        """Make ``state`` (another broker's :meth:`export_state`) what the next
        ``start(host)`` resumes from: write it where ``host`` keeps this scheduler's files.
        Called on a scheduler that is not started; raises
        :class:`~mqcore.errors.InvalidArgumentError` on a state it cannot read."""
        ...
