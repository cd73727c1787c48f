"""The client/broker seam: every call a producer or consumer makes to a broker.

Clients hold a :class:`BrokerAPI` and nothing else of the broker. Two transports implement
it: :class:`~mqcore.client.transport_embedded.EmbeddedTransport` calls an in-process
:class:`~mqcore.broker.Broker` through its operation table, and
:class:`~mqcore.client.transport_remote.RemoteTransport` sends RocketMQ remoting frames over
TCP. One client code path; only the transport differs.

Calls that concern one queue take its :class:`~mqcore.message.MessageQueue`: its
``broker_name`` says which broker group serves it, so a route spanning several groups needs
no other change.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

from mqcore.message import Message, MessageExt, MessageQueue
from mqcore.protocol.channel import ClientChannel
from mqcore.protocol.heartbeat import ConsumerData
from mqcore.protocol.pop import BatchAck, PopResult
from mqcore.protocol.pull import PullResponse
from mqcore.protocol.route import TopicRoute
from mqcore.protocol.transaction import EndTransactionRequestHeader
from mqcore.store import PutResult

if TYPE_CHECKING:
    from mqcore.kernel import Kernel

__all__ = ["BrokerAPI", "ClientChannel", "PullResponse"]


class BrokerAPI(Protocol):
    """Every broker call a client makes (RocketMQ's ``MQClientAPIImpl``, snake case)."""

    @property
    def closed(self) -> bool:
        """True once the transport (or the broker behind it) can serve no more calls."""

    @property
    def kernel(self) -> Kernel:
        """The kernel whose plugins the client uses (allocators, filters, offset stores)."""

    def close(self) -> None:
        """Release what the transport owns (connections, threads); idempotent."""

    # -- routes and membership ----------------------------------------------------------------

    def get_route_info_by_topic(self, topic: str) -> TopicRoute:
        """The topic's route; :class:`~mqcore.errors.TopicNotExistError` when unknown."""

    def refresh_route(self, topic: str) -> TopicRoute:
        """The topic's route asked again now, whatever a cache holds (a producer whose route
        has no writable queue asks on every send, as RocketMQ's tryToFindTopicPublishInfo)."""

    def heartbeat(
        self,
        client_id: str,
        consumer_data: Iterable[ConsumerData] = (),
        producer_groups: Iterable[str] = (),
        channel: ClientChannel | None = None,
    ) -> None:
        """Register or refresh a client with every broker it uses."""

    def unregister_client(
        self, client_id: str, producer_group: str | None = None, consumer_group: str | None = None
    ) -> None:
        """Tell the brokers a client left its group."""

    def get_consumer_list_by_group(self, consumer_group: str, topic: str) -> list[str]:
        """Client ids of the group's live members (asked of the masters serving ``topic``)."""

    # -- messages -------------------------------------------------------------------------------

    def send_message(
        self,
        mq: MessageQueue,
        messages: Sequence[Message],
        *,
        producer_group: str,
        born_timestamp: int,
    ) -> list[PutResult]:
        """Store a batch in ``mq``; where each message was stored."""

    def end_transaction(
        self, broker_name: str, header: EndTransactionRequestHeader, remark: str | None = None
    ) -> None:
        """Commit, roll back or leave undecided a half message stored by ``broker_name``
        (END_TRANSACTION, oneway: a refusal is the broker's to log)."""

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
        """Read up to ``max_msg_nums`` records of ``mq`` from ``queue_offset``.

        With ``suspend_timeout_ms`` the broker holds a pull that finds nothing new until a
        message arrives or the time passes (long polling).
        """

    def cancel_pulls(self) -> None:
        """End this client's held pulls at once (they return with nothing new) and hold no
        later one: the client is shutting down and must not wait out its own long polls."""

    def consumer_send_msg_back(
        self,
        consumer_group: str,
        msg: MessageExt,
        delay_level: int,
        max_reconsume_times: int,
    ) -> None:
        """Send a message the group failed to consume back for a later retry (or the DLQ)."""

    def view_message_by_id(self, msg_id: str, topic: str | None = None) -> MessageExt:
        """The message with offset id ``msg_id`` (or unique id, looked up in ``topic``)."""

    def query_message(
        self,
        topic: str,
        key: str,
        max_num: int = 32,
        begin_timestamp: int = 0,
        end_timestamp: int = 2**63 - 1,
    ) -> list[MessageExt]:
        """Messages of ``topic`` indexed under ``key``, stored within the time range."""

    # -- offsets --------------------------------------------------------------------------------

    def query_consumer_offset(self, consumer_group: str, mq: MessageQueue) -> int:
        """The group's committed offset in ``mq``, or -1 when it has none."""

    def update_consumer_offset(self, consumer_group: str, mq: MessageQueue, offset: int) -> None:
        """Commit the group's next offset to consume in ``mq``."""

    def get_min_offset(self, mq: MessageQueue) -> int:
        """Smallest offset stored in ``mq``."""

    def get_max_offset(self, mq: MessageQueue) -> int:
        """One past the last offset of ``mq``."""

    def search_offset_by_timestamp(self, mq: MessageQueue, timestamp: int) -> int:
        """First offset of ``mq`` stored at or after ``timestamp`` (ms)."""

    # -- orderly consumption ----------------------------------------------------------------------

    def lock_batch_mq(
        self, consumer_group: str, client_id: str, mqs: Iterable[MessageQueue]
    ) -> set[MessageQueue]:
        """Lock queues for ``client_id``; the ones it now holds."""

    def unlock_batch_mq(
        self, consumer_group: str, client_id: str, mqs: Iterable[MessageQueue]
    ) -> None:
        """Release queue locks held by ``client_id``."""

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
        """Receive messages of ``mq`` (``queue_id`` -1: any queue of its broker), invisible
        to the group for ``invisible_time_ms`` (POP_MESSAGE), held up to ``poll_time_ms``."""

    def ack_message(
        self, mq: MessageQueue, consumer_group: str, extra_info: str, offset: int
    ) -> None:
        """Ack a popped message by its receipt handle (ACK_MESSAGE)."""

    def batch_ack_message(self, broker_name: str, acks: Sequence[BatchAck]) -> None:
        """Ack many popped messages of one broker at once (BATCH_ACK_MESSAGE)."""

    def change_invisible_time(
        self,
        mq: MessageQueue,
        consumer_group: str,
        extra_info: str,
        offset: int,
        invisible_time_ms: int,
    ) -> tuple[int, int, int]:
        """New invisible time for a popped message (CHANGE_MESSAGE_INVISIBLETIME): the new
        handle's popTime, invisibleTime and reviveQid."""
