"""The embedded transport: the client/broker seam as direct calls on an in-process broker.

The transport knows the broker only through :class:`InProcessBroker`, the calls it makes, so
the clients import nothing of :mod:`mqcore.broker`; a :class:`~mqcore.broker.Broker` is one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from mqcore.errors import BrokerError, InvalidArgumentError
from mqcore.message import Message, MessageExt, MessageQueue
from mqcore.protocol.channel import ClientChannel
from mqcore.protocol.heartbeat import ConsumerData
from mqcore.protocol.pop import BatchAck, PopResult
from mqcore.protocol.pull import PullResponse
from mqcore.protocol.route import TopicRoute
from mqcore.protocol.transaction import EndTransactionRequestHeader
from mqcore.store import PutResult

if TYPE_CHECKING:
    from mqcore.config import BrokerConfig
    from mqcore.kernel import Kernel

__all__ = ["EmbeddedTransport", "InProcessBroker", "PullWaking"]


class PullWaking(Protocol):
    """Wakes the pulls a broker holds for a queue."""

    def notify(self, key: Hashable) -> None:
        """Wake the pulls held for ``key`` (``(topic, queue_id)``)."""
        ...


@runtime_checkable
class InProcessBroker(Protocol):
    """What the embedded transport calls on a broker in this process."""

    @property
    def closed(self) -> bool:
        """True once the broker is closed."""
        ...

    @property
    def kernel(self) -> Kernel:
        """The broker's plugins."""
        ...

    @property
    def config(self) -> BrokerConfig:
        """The broker's settings (its name)."""
        ...

    @property
    def waiters(self) -> PullWaking:
        """The pulls it holds."""
        ...

    def get_route_info_by_topic(self, topic: str) -> TopicRoute:
        """The topic's route."""
        ...

    def heartbeat(
        self,
        client_id: str,
        consumer_data: Iterable[ConsumerData] = (),
        producer_groups: Iterable[str] = (),
        channel: ClientChannel | None = None,
    ) -> None:
        """Register or refresh a client."""
        ...

    def unregister_client(
        self,
        client_id: str,
        consumer_group: str | None = None,
        producer_group: str | None = None,
    ) -> None:
        """Remove a client."""
        ...

    def get_consumer_list_by_group(self, consumer_group: str) -> list[str]:
        """Client ids of a group's live members."""
        ...

    def send_message(
        self,
        topic: str,
        queue_id: int,
        messages: Sequence[Message],
        *,
        producer_group: str = "",
        born_timestamp: int | None = None,
    ) -> list[PutResult]:
        """Store a batch."""
        ...

    def end_transaction(
        self,
        producer_group: str,
        tran_state_table_offset: int,
        commit_log_offset: int,
        commit_or_rollback: int,
        *,
        from_transaction_check: bool = False,
        msg_id: str = "",
        remark: str | None = None,
    ) -> object:
        """Commit, roll back or leave undecided a half message."""
        ...

    def pull_message(
        self,
        consumer_group: str,
        topic: str,
        queue_id: int,
        queue_offset: int,
        max_msg_nums: int = 32,
        *,
        sub_expression: str | None = "*",
        expression_type: str = "TAG",
        suspend_timeout_ms: int | None = None,
        commit_offset: int | None = None,
        client_host: str = "",
        cancelled: Callable[[], bool] | None = None,
    ) -> PullResponse:
        """Read stored records (held up to ``suspend_timeout_ms``)."""
        ...

    def consumer_send_msg_back(
        self,
        group: str,
        offset: int,
        delay_level: int = 0,
        origin_msg_id: str | None = None,
        origin_topic: str | None = None,
        max_reconsume_times: int | None = None,
    ) -> PutResult:
        """Store a consumed message again for a later retry (or in the DLQ)."""
        ...

    def view_message_by_id(self, msg_id: str) -> MessageExt:
        """The message with offset id ``msg_id``."""
        ...

    def query_message_by_uniq_key(self, topic: str, uniq_key: str) -> MessageExt:
        """The message of ``topic`` with unique id ``uniq_key``."""
        ...

    def query_message(
        self,
        topic: str,
        key: str,
        max_num: int = 32,
        begin_timestamp: int = 0,
        end_timestamp: int = 2**63 - 1,
    ) -> list[MessageExt]:
        """Messages indexed under ``key``."""
        ...

    def query_consumer_offset(self, consumer_group: str, topic: str, queue_id: int) -> int:
        """A group's committed offset (-1: none)."""
        ...

    def update_consumer_offset(
        self,
        consumer_group: str,
        topic: str,
        queue_id: int,
        commit_offset: int,
        client_host: str = "",
        *,
        reset_clients: bool = True,
    ) -> None:
        """Commit a group's offset."""
        ...

    def get_min_offset(self, topic: str, queue_id: int) -> int:
        """Smallest offset stored in a queue."""
        ...

    def get_max_offset(self, topic: str, queue_id: int) -> int:
        """One past a queue's last offset."""
        ...

    def search_offset_by_timestamp(self, topic: str, queue_id: int, timestamp: int) -> int:
        """First offset stored at or after ``timestamp``."""
        ...

    def lock_batch_mq(
        self, consumer_group: str, client_id: str, mqs: Iterable[MessageQueue]
    ) -> set[MessageQueue]:
        """Lock queues for a client."""
        ...

    def unlock_batch_mq(
        self, consumer_group: str, client_id: str, mqs: Iterable[MessageQueue]
    ) -> None:
        """Release a client's queue locks."""
        ...

    def pop_message(
        self,
        consumer_group: str,
        topic: str,
        queue_id: int,
        max_msg_nums: int,
        invisible_time_ms: int,
        *,
        poll_time_ms: int = 0,
        born_time: int = 0,
        expression: str | None = "*",
        expression_type: str = "TAG",
        order: bool = False,
        init_mode: int = 1,
        cancelled: Callable[[], bool] | None = None,
    ) -> PopResult:
        """Pop messages (held up to ``poll_time_ms``)."""
        ...

    def ack_message(
        self, consumer_group: str, topic: str, queue_id: int, extra_info: str, offset: int
    ) -> None:
        """Ack a popped message."""
        ...

    def batch_ack_message(self, acks: Iterable[BatchAck]) -> int:
        """Ack many popped messages."""
        ...

    def change_invisible_time(
        self,
        consumer_group: str,
        topic: str,
        queue_id: int,
        extra_info: str,
        offset: int,
        invisible_time_ms: int,
    ) -> tuple[int, int, int]:
        """New invisible time for a popped message."""
        ...


class EmbeddedTransport:
    """:class:`~mqcore.client.api.BrokerAPI` over a :class:`~mqcore.broker.Broker` in this
    process. Nothing is encoded: messages go in as objects, pulled records come back as the
    stored bytes (copied out of the store's maps), decoded by the client when read.
    """

    def __init__(self, broker: InProcessBroker) -> None:
        self.broker = broker
        # Long polls in flight, per queue, so that cancel_pulls() can wake them.
        self._pulls_lock = threading.Lock()
        self._pulls: dict[tuple[object, ...], int] = {}
        self._pulls_cancelled = False

    @property
    def closed(self) -> bool:
        """True once the broker is closed."""
        return self.broker.closed

    @property
    def kernel(self) -> Kernel:
        """The broker's kernel: embedded clients share its plugins."""
        return self.broker.kernel

    def close(self) -> None:
        """Nothing to release: the broker belongs to the application."""

    def _check(self, mq: MessageQueue) -> None:
        name = self.broker.config.broker_name
        if mq.broker_name != name:
            raise InvalidArgumentError(f"{mq} is not served by broker {name!r}")

    # -- routes and membership ----------------------------------------------------------------

    def get_route_info_by_topic(self, topic: str) -> TopicRoute:
        """The topic's route (one broker group of one member)."""
        return self.broker.get_route_info_by_topic(topic)

    def refresh_route(self, topic: str) -> TopicRoute:
        """The topic's route: the broker's own, never cached here."""
        return self.broker.get_route_info_by_topic(topic)

    def heartbeat(
        self,
        client_id: str,
        consumer_data: Iterable[ConsumerData] = (),
        producer_groups: Iterable[str] = (),
        channel: ClientChannel | None = None,
    ) -> None:
        """Register or refresh the client."""
        self.broker.heartbeat(client_id, consumer_data, producer_groups, channel)

    def unregister_client(
        self, client_id: str, producer_group: str | None = None, consumer_group: str | None = None
    ) -> None:
        """Remove the client from its group."""
        if not self.broker.closed:
            self.broker.unregister_client(client_id, consumer_group, producer_group)

    def get_consumer_list_by_group(self, consumer_group: str, topic: str) -> list[str]:
        """Client ids of the group's live members."""
        return self.broker.get_consumer_list_by_group(consumer_group)

    # -- messages -------------------------------------------------------------------------------

    def send_message(
        self,
        mq: MessageQueue,
        messages: Sequence[Message],
        *,
        producer_group: str,
        born_timestamp: int,
    ) -> list[PutResult]:
        """Store a batch in ``mq``."""
        self._check(mq)
        return self.broker.send_message(
            mq.topic,
            mq.queue_id,
            messages,
            producer_group=producer_group,
            born_timestamp=born_timestamp,
        )

    def end_transaction(
        self, broker_name: str, header: EndTransactionRequestHeader, remark: str | None = None
    ) -> None:
        """Commit, roll back or leave undecided a half message (a refusal raises here, as
        nothing is sent one-way in-process)."""
        name = self.broker.config.broker_name
        if broker_name != name:
            raise InvalidArgumentError(f"broker {broker_name!r} is not served here ({name!r})")
        self.broker.end_transaction(
            header.producer_group,
            header.tran_state_table_offset,
            header.commit_log_offset,
            header.commit_or_rollback,
            from_transaction_check=header.from_transaction_check,
            msg_id=header.msg_id,
            remark=remark,
        )

    def pull_message(
        self,
        mq: MessageQueue,
        consumer_group: str,
        queue_offset: int,
        max_msg_nums: int,
        *,
        sub_expression: str = "*",
        expression_type: str = "TAG",
        suspend_timeout_ms: int = 0,
        commit_offset: int | None = None,
        client_id: str = "",
        timeout: float | None = None,
    ) -> PullResponse:
        """Read records of ``mq`` (the broker holds the call up to ``suspend_timeout_ms``)."""
        self._check(mq)
        key = (mq.topic, mq.queue_id)
        # Registered before the call and cancel_pulls() sets its flag before waking: a pull
        # is either woken or sees the flag on its first check, never held unnoticed.
        with self._pulls_lock:
            self._pulls[key] = self._pulls.get(key, 0) + 1
        try:
            return self.broker.pull_message(
                consumer_group,
                mq.topic,
                mq.queue_id,
                queue_offset,
                max_msg_nums,
                sub_expression=sub_expression,
                expression_type=expression_type,
                suspend_timeout_ms=suspend_timeout_ms or None,
                commit_offset=commit_offset,
                client_host=client_id,
                cancelled=self._pulls_are_cancelled,
            )
        finally:
            with self._pulls_lock:
                left = self._pulls[key] - 1
                if left:
                    self._pulls[key] = left
                else:
                    del self._pulls[key]

    def _pulls_are_cancelled(self) -> bool:
        return self._pulls_cancelled

    def cancel_pulls(self) -> None:
        """End this client's held pulls now (they find nothing); later pulls are not held."""
        with self._pulls_lock:
            self._pulls_cancelled = True
            keys = list(self._pulls)
        for key in keys:
            self.broker.waiters.notify(key)

    def consumer_send_msg_back(
        self,
        consumer_group: str,
        msg: MessageExt,
        delay_level: int,
        max_reconsume_times: int,
    ) -> None:
        """Send ``msg`` back for a later retry (or to the DLQ)."""
        self.broker.consumer_send_msg_back(
            consumer_group,
            msg.commitlog_offset,
            delay_level,
            origin_msg_id=msg.get_property("ORIGIN_MESSAGE_ID") or msg.offset_msg_id,
            origin_topic=msg.topic,
            max_reconsume_times=max_reconsume_times,
        )

    def view_message_by_id(self, msg_id: str, topic: str | None = None) -> MessageExt:
        """The message with offset id ``msg_id``; else, with ``topic``, the one whose unique
        id is ``msg_id`` (RocketMQ's ``viewMessage`` falling back to ``queryMessageByUniqKey``)."""
        try:
            return self.broker.view_message_by_id(msg_id)
        except BrokerError:
            if topic is None:
                raise
        return self.broker.query_message_by_uniq_key(topic, msg_id)

    def query_message(
        self,
        topic: str,
        key: str,
        max_num: int = 32,
        begin_timestamp: int = 0,
        end_timestamp: int = 2**63 - 1,
    ) -> list[MessageExt]:
        """Messages of ``topic`` indexed under ``key``."""
        return self.broker.query_message(topic, key, max_num, begin_timestamp, end_timestamp)

    # -- offsets --------------------------------------------------------------------------------

    def query_consumer_offset(self, consumer_group: str, mq: MessageQueue) -> int:
        """The group's committed offset in ``mq`` (-1: none)."""
        return self.broker.query_consumer_offset(consumer_group, mq.topic, mq.queue_id)

    def update_consumer_offset(self, consumer_group: str, mq: MessageQueue, offset: int) -> None:
        """Commit the group's next offset in ``mq``."""
        self.broker.update_consumer_offset(
            consumer_group, mq.topic, mq.queue_id, offset, reset_clients=False
        )

    def get_min_offset(self, mq: MessageQueue) -> int:
        """Smallest offset stored in ``mq``."""
        return self.broker.get_min_offset(mq.topic, mq.queue_id)

    def get_max_offset(self, mq: MessageQueue) -> int:
        """One past the last offset of ``mq``."""
        return self.broker.get_max_offset(mq.topic, mq.queue_id)

    def search_offset_by_timestamp(self, mq: MessageQueue, timestamp: int) -> int:
        """First offset of ``mq`` stored at or after ``timestamp``."""
        return self.broker.search_offset_by_timestamp(mq.topic, mq.queue_id, timestamp)

    # -- orderly consumption ----------------------------------------------------------------------

    def lock_batch_mq(
        self, consumer_group: str, client_id: str, mqs: Iterable[MessageQueue]
    ) -> set[MessageQueue]:
        """Lock queues for ``client_id``."""
        return self.broker.lock_batch_mq(consumer_group, client_id, mqs)

    def unlock_batch_mq(
        self, consumer_group: str, client_id: str, mqs: Iterable[MessageQueue]
    ) -> None:
        """Release queue locks held by ``client_id``."""
        if not self.broker.closed:
            self.broker.unlock_batch_mq(consumer_group, client_id, mqs)

    # -- pop consumption --------------------------------------------------------------------------

    def pop_message(
        self,
        mq: MessageQueue,
        consumer_group: str,
        max_msg_nums: int,
        invisible_time_ms: int,
        *,
        poll_time_ms: int = 0,
        expression: str = "*",
        expression_type: str = "TAG",
        order: bool = False,
        init_mode: int = 1,
    ) -> PopResult:
        """Pop from the broker (held up to ``poll_time_ms``; cancel_pulls ends the wait)."""
        self._check(mq)
        key = ("%POP_ORDER%", consumer_group, mq.topic)  # a key the held pop waits on
        with self._pulls_lock:
            self._pulls[key] = self._pulls.get(key, 0) + 1
        try:
            result: PopResult = self.broker.pop_message(
                consumer_group,
                mq.topic,
                mq.queue_id,
                max_msg_nums,
                invisible_time_ms,
                poll_time_ms=0 if self._pulls_cancelled else poll_time_ms,
                expression=expression,
                expression_type=expression_type,
                order=order,
                init_mode=init_mode,
                cancelled=self._pulls_are_cancelled,
            )
            return result
        finally:
            with self._pulls_lock:
                left = self._pulls[key] - 1
                if left:
                    self._pulls[key] = left
                else:
                    del self._pulls[key]

    def ack_message(
        self, mq: MessageQueue, consumer_group: str, extra_info: str, offset: int
    ) -> None:
        """Ack a popped message."""
        self._check(mq)
        self.broker.ack_message(consumer_group, mq.topic, mq.queue_id, extra_info, offset)

    def batch_ack_message(self, broker_name: str, acks: Sequence[BatchAck]) -> None:
        """Ack many popped messages."""
        self._check(MessageQueue("", broker_name, 0))
        self.broker.batch_ack_message(acks)

    def change_invisible_time(
        self,
        mq: MessageQueue,
        consumer_group: str,
        extra_info: str,
        offset: int,
        invisible_time_ms: int,
    ) -> tuple[int, int, int]:
        """New invisible time for a popped message."""
        self._check(mq)
        answer: tuple[int, int, int] = self.broker.change_invisible_time(
            consumer_group, mq.topic, mq.queue_id, extra_info, offset, invisible_time_ms
        )
        return answer
