"""TransactionProducer: transactional messages (RocketMQ's ``TransactionMQProducer``, snake case).

``send_message_in_transaction(msg, arg)`` sends ``msg`` as a *half* message, which no consumer
sees; then runs the listener's ``execute_local_transaction(msg, arg)`` and tells the broker
its answer (END_TRANSACTION): ``COMMIT_MESSAGE`` makes the message consumable,
``ROLLBACK_MESSAGE`` drops it, ``UNKNOW`` (or an exception) leaves it undecided. The broker
asks the group back about an undecided half (CHECK_TRANSACTION_STATE), and the listener's
``check_local_transaction(msg)`` answers; the producer stays reachable for that as long as it
runs (its heartbeat leaves the broker a channel: a Python call in-process, its own connection
over the network).
"""

from __future__ import annotations

import contextlib
import enum
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, runtime_checkable

import attrs

from mqcore.client.producer import Producer
from mqcore.client.scheduler import Scheduler
from mqcore.codec import decode_message_id
from mqcore.errors import MQClientError, MQError
from mqcore.logs import get_logger
from mqcore.message import (
    PROPERTY_UNIQ_KEY,
    TIMER_REQUEST_PROPERTIES,
    Message,
    MessageExt,
    MessageQueue,
    SendResult,
    SendStatus,
    system_message,
)
from mqcore.protocol.admin_bodies import ConsumerRunningInfo
from mqcore.protocol.names import AUTO_CREATE_TOPIC_KEY_TOPIC
from mqcore.protocol.transaction import (
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_TRANSACTION_PREPARED,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    CheckTransactionStateRequestHeader,
    EndTransactionRequestHeader,
)

__all__ = [
    "LocalTransactionState",
    "TransactionListener",
    "TransactionProducer",
    "TransactionSendResult",
]

log = get_logger(__name__)


class LocalTransactionState(enum.Enum):
    """What became of a local transaction (RocketMQ's spelling, ``UNKNOW`` included)."""

    COMMIT_MESSAGE = "COMMIT_MESSAGE"
    ROLLBACK_MESSAGE = "ROLLBACK_MESSAGE"
    UNKNOW = "UNKNOW"


_END_TYPE = {
    LocalTransactionState.COMMIT_MESSAGE: TRANSACTION_COMMIT_TYPE,
    LocalTransactionState.ROLLBACK_MESSAGE: TRANSACTION_ROLLBACK_TYPE,
    LocalTransactionState.UNKNOW: TRANSACTION_NOT_TYPE,
}


@runtime_checkable
class TransactionListener(Protocol):
    """The application's side of a transaction (RocketMQ's ``TransactionListener``)."""

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        """Run the local transaction of the half ``msg`` just stored (``arg``: what
        :meth:`TransactionProducer.send_message_in_transaction` was given); its outcome."""
        ...

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        """The broker asks about an undecided half (``msg.msg_id`` is the transaction id, as
        :attr:`TransactionSendResult.transaction_id`): what became of its local transaction?"""
        ...


@attrs.frozen
class TransactionSendResult(SendResult):
    """A :class:`~mqcore.SendResult` (of the half message) with the local transaction's
    outcome and the transaction id (the message's unique id)."""

    local_transaction_state: LocalTransactionState = attrs.field(
        default=LocalTransactionState.UNKNOW, kw_only=True
    )
    transaction_id: str | None = attrs.field(default=None, kw_only=True)


class _CheckChannel:
    """What the producer's heartbeat leaves the broker: the way to ask it about halves."""

    def __init__(self, producer: TransactionProducer) -> None:
        self._producer = producer

    def check_transaction_state(
        self, header: CheckTransactionStateRequestHeader, msg: MessageExt
    ) -> None:
        """CHECK_TRANSACTION_STATE: answered on the producer's check thread."""
        self._producer._check_requested(header, msg)

    # A producer is no consumer: the consumer notices do not concern it.
    def consumer_ids_changed(self, group: str) -> None:
        """Not a consumer: nothing to rebalance."""

    def reset_offset(self, group: str, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """Not a consumer: no offsets."""

    def consumer_running_info(self, group: str) -> ConsumerRunningInfo:
        """Not a consumer: refused."""
        raise MQClientError(f"{self._producer.client_id} is a producer, not a consumer of {group}")


class TransactionProducer(Producer):
    """Sends transactional messages (RocketMQ's ``TransactionMQProducer``).

    :param group: the producer group; the broker asks any live member of it about an
        undecided half, so every member must be able to answer for the others.
    :param broker: an in-process :class:`~mqcore.Broker`, or ``"host:port"`` of a name
        server or of ``mqcore serve``.
    :param listener: the :class:`TransactionListener` (required before a send).
    :param check_thread_pool_size: threads answering the broker's checks (1).
    :param check_request_hold_max: checks queued at most; more are dropped (and asked again
        by the broker's next pass) (2000).
    :param heartbeat_broker_interval: seconds between heartbeats (30), which keep the
        producer reachable for checks (a broker forgets a producer silent for 120 s).
    :param options: every other :class:`~mqcore.Producer` option.
    """

    def __init__(
        self,
        group: str,
        broker: Any = None,
        *,
        listener: TransactionListener | None = None,
        check_thread_pool_size: int = 1,
        check_request_hold_max: int = 2000,
        heartbeat_broker_interval: float = 30.0,
        **options: Any,
    ) -> None:
        super().__init__(group, broker, **options)
        self.listener = listener
        self.check_thread_pool_size = check_thread_pool_size
        self.check_request_hold_max = check_request_hold_max
        self.heartbeat_broker_interval = heartbeat_broker_interval
        self._channel = _CheckChannel(self)
        self._checks: ThreadPoolExecutor | None = None
        self._held = 0
        self._held_lock = threading.Lock()
        self._beats: Scheduler | None = None

    def set_transaction_listener(self, listener: TransactionListener) -> None:
        """Set the listener (RocketMQ's ``setTransactionListener``)."""
        self.listener = listener

    # -- lifecycle ---------------------------------------------------------------------

    def _heartbeat(self) -> None:
        self.broker.heartbeat(self.client_id, producer_groups=[self.group], channel=self._channel)

    def start(self) -> None:
        """Register with the brokers (leaving them the way to check back) and start the
        check thread and the periodic heartbeat."""
        with self._state_lock:
            if self._started:
                return
            self._checks = ThreadPoolExecutor(
                self.check_thread_pool_size, thread_name_prefix=f"mqcore-tx-check-{self.group}"
            )
            self._beats = Scheduler(f"mqcore-tx-heartbeat-{self.group}")
        # Learn the brokers before the first heartbeat, as RocketMQ's producer does through
        # its template topic's route: a producer restarted to answer checks may send nothing,
        # and a broker it never heartbeats cannot ask it.
        with contextlib.suppress(MQError):
            self.broker.get_route_info_by_topic(AUTO_CREATE_TOPIC_KEY_TOPIC)
        try:
            super().start()
        except BaseException:
            self._stop_threads()
            raise
        self._schedule_heartbeat()

    def _schedule_heartbeat(self) -> None:
        beats = self._beats
        if beats is not None:
            beats.schedule(self.heartbeat_broker_interval, self._beat)

    def _beat(self) -> None:
        try:
            self._heartbeat()
        except Exception as exc:  # the broker is away: the next beat tries again
            log.info("transaction_producer_heartbeat_failed", group=self.group, error=str(exc))
        self._schedule_heartbeat()

    def _stop_threads(self) -> None:
        beats, self._beats = self._beats, None
        checks, self._checks = self._checks, None
        if beats is not None:
            beats.shutdown()
        if checks is not None:
            checks.shutdown(wait=True, cancel_futures=True)

    def shutdown(self) -> None:
        """Stop answering checks, then stop as a :class:`~mqcore.Producer` does."""
        if not self._started or self._shutdown:
            super().shutdown()
            return
        self._stop_threads()
        super().shutdown()

    # -- sending -----------------------------------------------------------------------

    def send_message_in_transaction(
        self, msg: Message, arg: Any = None, timeout: float | None = None
    ) -> TransactionSendResult:
        """Send ``msg`` as a half, run the listener's local transaction, and end the
        transaction with its outcome; the half's send result with that outcome.

        :raises MQClientError: no listener, or a message with a delay level or a timer
            (a transactional message is delivered when it is committed).
        """
        self._check_running()
        listener = self.listener
        if listener is None:
            raise MQClientError(
                f"TransactionListener is null: producer group {self.group!r} has no "
                "listener; pass listener= or call set_transaction_listener() first"
            )
        if msg.delay_level > 0 or not TIMER_REQUEST_PROPERTIES.isdisjoint(msg.properties):
            raise MQClientError(
                f"a transactional message to {msg.topic} cannot be delayed (delay level "
                f"{msg.delay_level}); it is delivered when it is committed"
            )
        self._check_message(msg)  # gives msg its unique id, the transaction's id
        half = system_message(
            topic=msg.topic,
            body=msg.body,
            tags=msg.tags,
            keys=msg.keys,
            flag=msg.flag,
            properties={
                **msg.properties,
                PROPERTY_TRANSACTION_PREPARED: "true",
                PROPERTY_PRODUCER_GROUP: self.group,
            },
        )
        sent = self._send([half], timeout, None, None, self.retry_times_when_send_failed)
        state = LocalTransactionState.UNKNOW
        remark = None
        if sent.send_status is SendStatus.SEND_OK:
            try:
                state = listener.execute_local_transaction(half, arg) or state
            except Exception as exc:  # undecided: the broker will ask
                log.exception("local_transaction_failed", topic=msg.topic, msg_id=sent.msg_id)
                remark = f"executeLocalTransactionBranch exception: {exc!r}"
        else:  # stored without a slave: RocketMQ rolls such a half back
            state = LocalTransactionState.ROLLBACK_MESSAGE
        if state is not LocalTransactionState.COMMIT_MESSAGE:
            log.info("local_transaction_state", state=state.value, topic=msg.topic,
                     transaction_id=sent.msg_id)  # fmt: skip
        self._end(sent, msg.topic, state, remark)
        return TransactionSendResult(
            sent.send_status,
            sent.msg_id,
            sent.message_queue,
            sent.queue_offset,
            sent.offset_msg_id,
            local_transaction_state=state,
            transaction_id=sent.msg_id,
        )

    def _end(
        self, sent: SendResult, topic: str, state: LocalTransactionState, remark: str | None
    ) -> None:
        broker_name = sent.message_queue.broker_name
        header = EndTransactionRequestHeader(
            producer_group=self.group,
            tran_state_table_offset=sent.queue_offset,
            commit_log_offset=decode_message_id(sent.offset_msg_id or sent.msg_id)[1],
            commit_or_rollback=_END_TYPE[state],
            from_transaction_check=False,
            msg_id=sent.msg_id,
            transaction_id=sent.msg_id,
            topic=topic,
            broker_name=broker_name,
        )
        try:
            self.broker.end_transaction(broker_name, header, remark)
        except Exception as exc:  # the broker checks back an undecided half
            log.warning(
                "end_transaction_failed", state=state.value, transaction_id=sent.msg_id,
                error=str(exc),
            )  # fmt: skip

    # -- checks ------------------------------------------------------------------------

    def _check_requested(self, header: CheckTransactionStateRequestHeader, msg: MessageExt) -> None:
        checks = self._checks
        if checks is None:
            return
        with self._held_lock:
            if self._held >= self.check_request_hold_max:
                log.warning("transaction_check_dropped", group=self.group,
                            offset=header.tran_state_table_offset)  # fmt: skip
                return
            self._held += 1
        try:
            checks.submit(self._answer_check, header, msg)
        except RuntimeError:  # shut down meanwhile
            with self._held_lock:
                self._held -= 1

    def _answer_check(self, header: CheckTransactionStateRequestHeader, msg: MessageExt) -> None:
        try:
            self._answer(header, msg)
        finally:
            with self._held_lock:
                self._held -= 1

    def _answer(self, header: CheckTransactionStateRequestHeader, msg: MessageExt) -> None:
        listener = self.listener
        if listener is None:
            log.warning("transaction_check_without_listener", group=self.group)
            return
        state = LocalTransactionState.UNKNOW
        remark = None
        try:
            state = listener.check_local_transaction(msg) or state
        except Exception as exc:
            log.exception("check_local_transaction_failed", msg_id=header.msg_id)
            remark = f"checkLocalTransactionState Exception: {exc!r}"
        uniq = msg.properties.get(PROPERTY_UNIQ_KEY) or msg.msg_id
        broker_name = header.broker_name or ""
        end = EndTransactionRequestHeader(
            producer_group=self.group,
            tran_state_table_offset=header.tran_state_table_offset,
            commit_log_offset=header.commit_log_offset,
            commit_or_rollback=_END_TYPE[state],
            from_transaction_check=True,
            msg_id=uniq,
            transaction_id=header.transaction_id,
            topic=header.topic,
            broker_name=broker_name,
        )
        try:
            self.broker.end_transaction(broker_name, end, remark)
        except Exception as exc:  # asked again at the broker's next pass
            log.info("end_transaction_failed", state=state.value, transaction_id=uniq,
                     error=str(exc), from_check=True)  # fmt: skip
