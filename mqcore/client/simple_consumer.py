"""SimpleConsumer: RocketMQ 5's pop consumer, in snake case.

Any number of consumers of a group receive from the same queues: :meth:`SimpleConsumer.receive`
pops messages, which stay invisible to the group for the time asked; :meth:`ack` removes one
for good; a message not acked in time is delivered again, with ``delivery_attempt`` + 1, and
after the broker's ``max_reconsume_times`` retries it goes to ``%DLQ%<group>``.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from mqcore.client.common import ClientBase
from mqcore.errors import InvalidArgumentError
from mqcore.logs import get_logger
from mqcore.message import PROPERTY_RETRY_TOPIC, MessageExt, MessageQueue
from mqcore.protocol import pop as wire
from mqcore.protocol.names import RETRY_GROUP_TOPIC_PREFIX, validate_group

__all__ = ["FilterExpression", "ReceivedMessage", "SimpleConsumer"]

log = get_logger(__name__)

MAX_RECEIVE = 32  # RocketMQ's broker pops at most 32 messages a call


@attrs.frozen
class FilterExpression:
    """A subscription's filter: ``expression`` of ``expression_type`` (``TAG`` or ``SQL92``)."""

    expression: str = "*"
    expression_type: str = "TAG"


class ReceivedMessage(MessageExt):
    """A received message: a stored record with its ``receipt_handle`` (the ``POP_CK`` extra
    info an ack names) and its ``delivery_attempt`` (1 the first time)."""

    __slots__ = ("_broker_name", "_stored_topic", "delivery_attempt", "receipt_handle")

    def __init__(self, record: bytes | bytearray | memoryview) -> None:
        super().__init__(record)
        self.receipt_handle = ""
        self.delivery_attempt = 1
        self._broker_name = ""
        self._stored_topic = ""


class SimpleConsumer(ClientBase):
    """Receives messages by popping them (RocketMQ 5's ``SimpleConsumer``).

    :param group: consumer group (a group pops or pulls, not both).
    :param broker: an in-process :class:`~mqcore.broker.Broker`, or ``"host:port"`` of
        ``mqcore serve`` or a name server; ``namesrv_addr=`` is accepted too.
    :param subscriptions: topic -> a TAG expression, or a :class:`FilterExpression`.
    :param await_duration: seconds a :meth:`receive` waits for messages when there are none
        (the pop's ``pollTime``; RocketMQ 5's default is 30 s, mqcore's 20 s to stay under the
        broker's 30 s hold).
    :param fifo: pop orderly: the next messages of a queue are not delivered while earlier
        ones of the same queue are invisible and unacked.
    :param credentials: ``(access_key, secret_key)`` of an account of the server's ACL
        (``mqcore serve --acl``): every request is signed (docs/security.md).
    :param tls: True (TLS, checking the server against the system's CAs) or an
        :class:`ssl.SSLContext`, for a server with TLS.
    """

    role = "consumer"

    def __init__(
        self,
        group: str,
        broker: Any = None,
        *,
        namesrv_addr: str | None = None,
        subscriptions: Mapping[str, str | FilterExpression] | None = None,
        await_duration: float = 20.0,
        fifo: bool = False,
        instance_name: str | None = None,
        credentials: Any = None,
        tls: Any = None,
    ) -> None:
        validate_group(group)
        super().__init__(group, broker, instance_name, namesrv_addr, credentials, tls)
        if await_duration < 0:
            raise InvalidArgumentError(f"await_duration={await_duration} is negative")
        self.await_duration = await_duration
        self.fifo = fifo
        self._subs: dict[str, FilterExpression] = {}
        for topic, exp in (subscriptions or {}).items():
            self.subscribe(topic, exp)
        self._turn = itertools.count()
        self._lock = threading.Lock()

    # -- lifecycle ----------------------------------------------------------------------------

    def __enter__(self) -> SimpleConsumer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def start(self) -> None:
        """Start the consumer (its subscriptions' routes are looked up here)."""
        with self._state_lock:
            if self._started:
                return
            self._claim_client_id(True)
            self._started = True
        for topic in self._subs:
            self.route(topic)

    def shutdown(self) -> None:
        """Stop: a :meth:`receive` waiting for messages returns at once."""
        if not self._claim_shutdown():
            return
        self.broker.cancel_pulls()
        self._release_client_id()
        self.broker.close()

    def subscribe(self, topic: str, expression: str | FilterExpression = "*") -> None:
        """Add (or replace) a subscription."""
        if isinstance(expression, str):
            expression = FilterExpression(expression)
        if expression.expression_type.upper() != "TAG":
            self.kernel.filter(expression.expression_type, expression.expression)  # compiles
        self._subs[topic] = expression

    def unsubscribe(self, topic: str) -> None:
        """Drop a subscription."""
        self._subs.pop(topic, None)

    # -- receive, ack ---------------------------------------------------------------------------

    def receive(self, max_message_num: int, invisible_duration: float) -> list[ReceivedMessage]:
        """Up to ``max_message_num`` messages (1..32), invisible to the group for
        ``invisible_duration`` seconds; waits up to ``await_duration`` for one to arrive,
        then returns an empty list."""
        self._check_running()
        if not 0 < max_message_num <= MAX_RECEIVE:
            raise InvalidArgumentError(
                f"max_message_num={max_message_num}: receive 1 to {MAX_RECEIVE} at a time"
            )
        invisible_ms = round(invisible_duration * 1000)
        if not wire.MIN_INVISIBLE_TIME_MS <= invisible_ms <= wire.MAX_INVISIBLE_TIME_MS:
            raise InvalidArgumentError(
                f"invisible_duration={invisible_duration} s is out of range: give 1 s to 12 h"
            )
        if not self._subs:
            raise InvalidArgumentError("the consumer has no subscription: subscribe() first")
        targets = self._targets()
        if not targets:
            return []
        start = next(self._turn) % len(targets)
        order = targets[start:] + targets[:start]
        # One quick look at each, then a held pop on the first.
        for i, (mq, exp) in enumerate(order + order[:1]):
            poll = round(self.await_duration * 1000) if i == len(order) else 0
            got = self._pop(mq, exp, max_message_num, invisible_ms, poll)
            if got or self._shutdown:
                return got
        return []

    def _targets(self) -> list[tuple[MessageQueue, FilterExpression]]:
        out = []
        for topic, exp in self._subs.items():
            route = self.route(topic)
            for name in sorted({q.broker_name for q in route.queue_datas if q.read_queue_nums}):
                out.append((MessageQueue(topic, name, -1), exp))
        return out

    def _pop(
        self, mq: MessageQueue, exp: FilterExpression, num: int, invisible_ms: int, poll_ms: int
    ) -> list[ReceivedMessage]:
        res = self.broker.pop_message(
            mq, self.group, num, invisible_ms, poll_time_ms=poll_ms,
            expression=exp.expression, expression_type=exp.expression_type, order=self.fifo,
        )  # fmt: skip
        if not res.records:
            return []
        starts = wire.parse_offset_info(res.start_offset_info)
        counts = wire.parse_offset_info(res.order_count_info)
        out = []
        for record in res.records:
            m = ReceivedMessage(record)
            stored = m.topic
            mark = "1" if stored.startswith(RETRY_GROUP_TOPIC_PREFIX) else "0"
            key = f"{mark}@{m.queue_id}"
            start = starts.get(key, [m.queue_offset])[0]
            m.receipt_handle = str(
                wire.ExtraInfo.build(
                    start, res.pop_time, res.invisible_time, res.revive_qid, stored,
                    mq.broker_name, m.queue_id, m.queue_offset,
                )
            )  # fmt: skip
            count = counts.get(f"{mark}@qo{m.queue_id}%{m.queue_offset}") or [0]
            m.delivery_attempt = m.reconsume_times + 1 + count[0]
            m._broker_name = mq.broker_name
            m._stored_topic = stored
            if mark == "1":
                m._show_under_topic(m.get_property(PROPERTY_RETRY_TOPIC) or mq.topic)
            out.append(m)
        return out

    def _queue(self, msg: ReceivedMessage) -> MessageQueue:
        if not msg.receipt_handle:
            raise InvalidArgumentError(
                "the message has no receipt handle: ack messages receive() returned"
            )
        return MessageQueue(msg.topic, msg._broker_name, msg.queue_id)

    def ack(self, msg: ReceivedMessage) -> None:
        """Ack ``msg``: it is never delivered to the group again.

        :raises ReceiptHandleError: its handle expired (the message comes back) or was
            replaced by :meth:`change_invisible_duration`.
        """
        self._check_running()
        self.broker.ack_message(self._queue(msg), self.group, msg.receipt_handle,
                                msg.queue_offset)  # fmt: skip

    def ack_batch(self, msgs: Iterable[ReceivedMessage]) -> None:
        """Ack many messages at once: one BATCH_ACK_MESSAGE per broker, one ack record per
        receive's checkpoint (RocketMQ 5's AckMessage of many entries).

        :raises ReceiptHandleError: for the first handle refused; the others are acked.
        """
        self._check_running()
        batches: dict[str, dict[tuple[Any, ...], list[int]]] = {}
        for m in msgs:
            self._queue(m)
            info = wire.ExtraInfo.parse(m.receipt_handle)
            key = (m.topic, info.retry, info.ck_queue_offset, info.queue_id, info.revive_qid,
                   info.pop_time, info.invisible_time)  # fmt: skip
            batches.setdefault(m._broker_name, {}).setdefault(key, []).append(m.queue_offset)
        for broker_name, cks in batches.items():
            acks = [
                wire.BatchAck(self.group, t, r, so, q, rq, pt, it,
                              sum(1 << (o - so) for o in offsets if o >= so))
                for (t, r, so, q, rq, pt, it), offsets in cks.items()
            ]  # fmt: skip
            self.broker.batch_ack_message(broker_name, acks)

    def change_invisible_duration(self, msg: ReceivedMessage, seconds: float) -> str:
        """Make ``msg`` invisible for ``seconds`` from now; installs and returns its new
        receipt handle (the old one is dead)."""
        self._check_running()
        ms = round(seconds * 1000)
        if not wire.MIN_INVISIBLE_TIME_MS <= ms <= wire.MAX_INVISIBLE_TIME_MS:
            raise InvalidArgumentError(f"seconds={seconds} is out of range: give 1 s to 12 h")
        old = wire.ExtraInfo.parse(msg.receipt_handle)
        pop_time, invisible, revive_qid = self.broker.change_invisible_time(
            self._queue(msg), self.group, msg.receipt_handle, msg.queue_offset, ms
        )
        new = attrs.evolve(
            old,
            ck_queue_offset=msg.queue_offset,
            pop_time=pop_time,
            invisible_time=invisible,
            revive_qid=revive_qid,
        )
        msg.receipt_handle = str(new)
        return msg.receipt_handle
