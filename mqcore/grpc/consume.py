"""ReceiveMessage, AckMessage, ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue on
the broker's pop contract (see :mod:`mqcore.broker.pop`).

A received message's ``receipt_handle`` is its ``POP_CK`` extra info, its
``delivery_attempt`` the pop's (reconsume times + 1, with the orderly count), and its
``invisible_duration`` the one asked. An empty receive answers MESSAGE_NOT_FOUND after the
long-polling time, as the proxy does; a malformed, expired or forged handle answers
INVALID_RECEIPT_HANDLE.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable
from typing import Any

import attrs
from google.protobuf import duration_pb2, timestamp_pb2

from mqcore.broker import Broker
from mqcore.errors import ReceiptHandleError
from mqcore.grpc.checks import (
    MIN_INVISIBLE_MS_FOR_RECEIVE,
    check_group,
    check_invisible_ms,
    check_topic,
)
from mqcore.grpc.convert import GrpcStatusError, message_type_of, status, status_of
from mqcore.grpc.pb import definition, service
from mqcore.grpc.settings import LONG_POLLING_TIMEOUT_MS, RECEIVE_BATCH_SIZE
from mqcore.message import MessageExt
from mqcore.protocol import pop as pop_wire
from mqcore.protocol.names import RETRY_GROUP_TOPIC_PREFIX
from mqcore.validation import SYSTEM_PROPERTY_NAMES

__all__ = ["Consumer"]

Code = definition.Code

#: The proxy's longPollingReserveTimeInMillis: a held receive answers this much before the
#: client's deadline.
RESERVE_MS = 100
_HIDDEN = SYSTEM_PROPERTY_NAMES | {"__SHARDINGKEY", "POP_CK", "TRACE_CONTEXT"}


def _timestamp(ms: int) -> Any:
    return timestamp_pb2.Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def now_ms() -> int:
    """The time in ms since the epoch."""
    return int(time.time() * 1000)


def _duration(ms: int) -> Any:
    return duration_pb2.Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def _ms(duration: Any) -> int:
    return int(duration.seconds) * 1000 + int(duration.nanos) // 1_000_000


def to_proto(m: MessageExt, topic: Any, handle: str, attempt: int, invisible_ms: int) -> Any:
    """A stored message as the ``apache.rocketmq.v2.Message`` a consumer receives."""
    props = m.properties
    sysp = definition.SystemProperties(
        message_id=m.msg_id,
        message_type=definition.MessageType.Value(message_type_of(props)),
        body_encoding=definition.Encoding.IDENTITY,
        born_timestamp=_timestamp(m.born_timestamp),
        born_host=m.born_host,
        store_timestamp=_timestamp(m.store_timestamp),
        store_host=m.store_host,
        receipt_handle=handle,
        queue_id=m.queue_id,
        queue_offset=m.queue_offset,
        invisible_duration=_duration(invisible_ms),
        delivery_attempt=attempt,
    )
    body = m.body
    # The 5.x clients refuse a message without a body digest; the proxy's is a CRC32.
    sysp.body_digest.type = definition.DigestType.CRC32
    sysp.body_digest.checksum = f"{zlib.crc32(body) & 0xFFFFFFFF:08X}"
    if m.tags:
        sysp.tag = m.tags
    if m.keys:
        sysp.keys.extend(k for k in m.keys.split(" ") if k)
    if "__SHARDINGKEY" in props:
        sysp.message_group = props["__SHARDINGKEY"]
    if "TRACE_CONTEXT" in props:
        sysp.trace_context = props["TRACE_CONTEXT"]
    deliver = props.get("TIMER_DELIVER_MS")
    if deliver and deliver.isdigit():
        sysp.delivery_timestamp.CopyFrom(_timestamp(int(deliver)))
    user = {k: v for k, v in props.items() if k not in _HIDDEN}
    return definition.Message(topic=topic, user_properties=user, system_properties=sysp, body=body)


def _handle(text: str) -> pop_wire.ExtraInfo:
    try:
        return pop_wire.ExtraInfo.parse(text)
    except ReceiptHandleError as exc:
        raise GrpcStatusError(Code.INVALID_RECEIPT_HANDLE, str(exc)) from None


class Consumer:
    """Answers the consuming calls for one broker."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    # -- receive -----------------------------------------------------------------------------

    def receive(
        self, request: Any, fifo: bool, remaining_s: float | None, cancelled: Callable[[], bool]
    ) -> list[Any]:
        """The responses of one ReceiveMessage: OK and the messages, or one status."""
        group = check_group(request.group)
        topic = check_topic(request.message_queue.topic)
        batch = request.batch_size
        if not 0 < batch <= RECEIVE_BATCH_SIZE:
            raise GrpcStatusError(
                Code.BAD_REQUEST,
                f"batch_size {batch} is out of range: give 1..{RECEIVE_BATCH_SIZE}",
            )
        if request.HasField("invisible_duration"):
            invisible_ms = _ms(request.invisible_duration)
            check_invisible_ms(invisible_ms, MIN_INVISIBLE_MS_FOR_RECEIVE)
        elif request.auto_renew:
            invisible_ms = pop_wire.MIN_INVISIBLE_TIME_MS * 30
        else:
            raise GrpcStatusError(
                Code.ILLEGAL_INVISIBLE_TIME,
                "the invisible duration is missing (and not auto renew)",
            )
        poll_ms = (
            _ms(request.long_polling_timeout)
            if request.HasField("long_polling_timeout")
            else LONG_POLLING_TIMEOUT_MS
        )
        if poll_ms < 0:
            raise GrpcStatusError(Code.ILLEGAL_POLLING_TIME, f"long polling time {poll_ms} ms < 0")
        if remaining_s is not None:
            poll_ms = min(poll_ms, int(remaining_s * 1000) - RESERVE_MS)
        poll_ms = max(0, min(poll_ms, LONG_POLLING_TIMEOUT_MS))
        exp = request.filter_expression
        kind = "SQL92" if exp.type == definition.FilterType.SQL else "TAG"
        res = self.broker.pop_message(
            group, topic, -1, batch, invisible_ms,
            poll_time_ms=poll_ms, expression=exp.expression or "*", expression_type=kind,
            order=fifo, cancelled=cancelled,
        )  # fmt: skip
        if not res.records:
            return [
                service.ReceiveMessageResponse(
                    status=status(Code.MESSAGE_NOT_FOUND, "no new message")
                )
            ]
        starts = pop_wire.parse_offset_info(res.start_offset_info)
        counts = pop_wire.parse_offset_info(res.order_count_info)
        out = [service.ReceiveMessageResponse(status=status(Code.OK))]
        name = self.broker.config.broker_name
        for record in res.records:
            m = MessageExt(bytes(record))
            stored = m.topic
            mark = "1" if stored.startswith(RETRY_GROUP_TOPIC_PREFIX) else "0"
            start = starts.get(f"{mark}@{m.queue_id}", [m.queue_offset])[0]
            handle = str(
                pop_wire.ExtraInfo.build(
                    start, res.pop_time, res.invisible_time, res.revive_qid, stored, name,
                    m.queue_id, m.queue_offset,
                )
            )  # fmt: skip
            count = counts.get(f"{mark}@qo{m.queue_id}%{m.queue_offset}") or [0]
            attempt = m.reconsume_times + 1 + count[0]
            proto = to_proto(m, request.message_queue.topic, handle, attempt, invisible_ms)
            out.append(service.ReceiveMessageResponse(message=proto))
        # When the messages left (the clients measure their receive latency from it).
        out.append(service.ReceiveMessageResponse(delivery_timestamp=_timestamp(now_ms())))
        return out

    # -- ack and invisibility ------------------------------------------------------------------

    def ack(self, request: Any) -> Any:
        """The ``AckMessageResponse``: each entry's status, and one for all."""
        group = check_group(request.group)
        topic = check_topic(request.topic)
        entries = []
        for entry in request.entries:
            try:
                info = _handle(entry.receipt_handle)
                self.broker.ack_message(
                    group, topic, info.queue_id, entry.receipt_handle, info.queue_offset
                )
                st = status(Code.OK)
            except Exception as exc:
                st = _handle_status(exc)
            entries.append(
                service.AckMessageResultEntry(
                    message_id=entry.message_id, receipt_handle=entry.receipt_handle, status=st
                )
            )
        return service.AckMessageResponse(status=_overall(entries), entries=entries)

    def change_invisible_duration(self, request: Any) -> Any:
        """The ``ChangeInvisibleDurationResponse`` with the message's new receipt handle."""
        group = check_group(request.group)
        topic = check_topic(request.topic)
        ms = _ms(request.invisible_duration)
        check_invisible_ms(ms)
        info = _handle(request.receipt_handle)
        try:
            pop_time, invisible, revive_qid = self.broker.change_invisible_time(
                group, topic, info.queue_id, request.receipt_handle, info.queue_offset, ms
            )
        except ReceiptHandleError as exc:
            raise GrpcStatusError(Code.INVALID_RECEIPT_HANDLE, str(exc)) from None
        new = attrs.evolve(
            info,
            ck_queue_offset=info.queue_offset,
            pop_time=pop_time,
            invisible_time=invisible,
            revive_qid=revive_qid,
        )
        return service.ChangeInvisibleDurationResponse(
            status=status(Code.OK), receipt_handle=str(new)
        )

    def forward_to_dead_letter_queue(self, request: Any) -> Any:
        """Store the message in ``%DLQ%<group>`` and ack it (the client gave up on it)."""
        group = check_group(request.group)
        topic = check_topic(request.topic)
        info = _handle(request.receipt_handle)
        stored = info.real_topic(topic, group)
        got = self.broker.store.get(stored, info.queue_id, info.queue_offset, max_count=1)
        messages = list(got.messages)
        if not messages:
            raise GrpcStatusError(
                Code.MESSAGE_NOT_FOUND, f"no message at offset {info.queue_offset} of {stored}"
            )
        self.broker.consumer_send_msg_back(
            group, messages[0].commitlog_offset, delay_level=-1, origin_topic=topic
        )
        try:
            self.broker.ack_message(
                group, topic, info.queue_id, request.receipt_handle, info.queue_offset
            )
        except ReceiptHandleError as exc:
            raise GrpcStatusError(Code.INVALID_RECEIPT_HANDLE, str(exc)) from None
        return service.ForwardMessageToDeadLetterQueueResponse(status=status(Code.OK))


def _handle_status(exc: BaseException) -> Any:
    if isinstance(exc, ReceiptHandleError):
        return status(Code.INVALID_RECEIPT_HANDLE, str(exc))
    return status_of(exc)


def _overall(entries: list[Any]) -> Any:
    codes = {e.status.code for e in entries}
    if not codes:
        return status(Code.OK)
    if len(codes) > 1:
        return status(Code.MULTIPLE_RESULTS)
    return status(codes.pop())
