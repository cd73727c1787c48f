"""Producer: sends messages to a broker, round-robin over writable queues, with retries."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import structlog

from mqcore.broker.codes import ResponseCode
from mqcore.broker.topics import NOT_ALLOWED_SEND_TOPICS, validate_group, validate_topic
from mqcore.client.common import ClientBase
from mqcore.errors import BrokerError, MessageIllegalError, MQClientError, SendTimeoutError
from mqcore.message import Message, MessageQueue, SendResult, SendStatus

__all__ = ["MessageQueueSelector", "Producer"]

log = structlog.get_logger(__name__)

#: ``selector(mqs, msg, arg) -> MessageQueue``: picks the queue of an ordered message.
MessageQueueSelector = Callable[[list[MessageQueue], Message, Any], MessageQueue]

# Broker answers worth retrying elsewhere (RocketMQ's DefaultMQProducer.retryResponseCodes).
_RETRY_CODES = frozenset(
    {
        ResponseCode.TOPIC_NOT_EXIST,
        ResponseCode.SERVICE_NOT_AVAILABLE,
        ResponseCode.SYSTEM_ERROR,
        ResponseCode.SYSTEM_BUSY,
        ResponseCode.NO_PERMISSION,
    }
)


class Producer(ClientBase):
    """Sends messages (RocketMQ's DefaultMQProducer, snake case).

    :param group: producer group.
    :param broker: an in-process :class:`~mqcore.broker.Broker`.
    :param retry_times_when_send_failed: extra attempts of a synchronous send (2).
    :param retry_times_when_send_async_failed: extra attempts of an asynchronous send (2).
    :param send_msg_timeout: default timeout of a send, seconds (3).
    :param max_message_size: largest body accepted, bytes (4 MiB).
    :param async_send_threads: threads serving ``send_async`` (owned and stopped by shutdown).
        One by default: an in-process broker does no network waiting, so more threads only
        contend for the store's write lock (two halve the rate, measured in bench/client.py).
    """

    def __init__(
        self,
        group: str,
        broker: Any,
        *,
        instance_name: str | None = None,
        retry_times_when_send_failed: int = 2,
        retry_times_when_send_async_failed: int = 2,
        send_msg_timeout: float = 3.0,
        max_message_size: int = 4 * 1024 * 1024,
        async_send_threads: int = 1,
    ) -> None:
        validate_group(group)
        super().__init__(group, broker, instance_name)
        self.retry_times_when_send_failed = retry_times_when_send_failed
        self.retry_times_when_send_async_failed = retry_times_when_send_async_failed
        self.send_msg_timeout = send_msg_timeout
        self.max_message_size = max_message_size
        self.async_send_threads = async_send_threads
        self._index = random.randrange(1 << 16)
        self._index_lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None

    def start(self) -> None:
        """Register with the broker and start the async-send pool."""
        with self._state_lock:
            if self._started:
                return
            if self._shutdown:
                raise MQClientError(f"producer {self.group!r} was shut down; create a new one")
            self.broker.heartbeat(self.client_id, producer_groups=[self.group])
            self._executor = ThreadPoolExecutor(
                self.async_send_threads, thread_name_prefix=f"mqcore-producer-{self.group}"
            )
            self._started = True

    def shutdown(self) -> None:
        """Finish queued async sends and stop."""
        if not self._claim_shutdown():
            return
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)

    # -- validation and queue choice ---------------------------------------------------------

    def _check_message(self, msg: Message) -> None:
        validate_topic(msg.topic)
        if msg.topic in NOT_ALLOWED_SEND_TOPICS:
            raise MQClientError(f"Sending message to topic[{msg.topic}] is forbidden.")
        if not isinstance(msg.body, (bytes, bytearray, memoryview)):
            raise MessageIllegalError(
                f"the message body must be bytes, got {type(msg.body).__name__}",
                code=ResponseCode.MESSAGE_ILLEGAL,
            )
        if len(msg.body) == 0:
            raise MessageIllegalError(
                "the message body length is zero", code=ResponseCode.MESSAGE_ILLEGAL
            )
        if len(msg.body) > self.max_message_size:
            raise MessageIllegalError(
                f"the message body size over max value, MAX: {self.max_message_size}",
                code=ResponseCode.MESSAGE_ILLEGAL,
            )

    def _next_queue(self, mqs: list[MessageQueue], last: MessageQueue | None) -> MessageQueue:
        with self._index_lock:
            self._index += 1
            index = self._index
        if last is not None:
            # Retry on another broker when the topic spans several (RocketMQ's
            # selectOneMessageQueue(lastBrokerName)); otherwise the next queue round-robin.
            others = [mq for mq in mqs if mq.broker_name != last.broker_name]
            if others:
                return others[index % len(others)]
        return mqs[index % len(mqs)]

    # -- sending -----------------------------------------------------------------------------

    def _send(
        self,
        msgs: Sequence[Message],
        timeout: float | None,
        selector: MessageQueueSelector | None,
        arg: Any,
        retries: int,
    ) -> SendResult:
        self._check_running()
        topic = msgs[0].topic
        for m in msgs:
            self._check_message(m)
            if m.topic != topic:
                raise MQClientError(
                    f"a batch goes to one topic: {m.topic!r} differs from {topic!r}"
                )
        timeout = self.send_msg_timeout if timeout is None else timeout
        begin = time.monotonic()
        born = int(time.time() * 1000)
        hooks = self.kernel.hook
        traced = bool(
            hooks.mqcore_send_before.get_hookimpls() or hooks.mqcore_send_after.get_hookimpls()
        )
        if traced:
            hooks.mqcore_send_before(producer_group=self.group, messages=msgs)
        attempts = 1 if selector is not None else 1 + retries
        last_mq: MessageQueue | None = None
        error: Exception | None = None
        for attempt in range(attempts):
            if time.monotonic() - begin > timeout:
                raise SendTimeoutError(
                    f"send to {topic} timed out after {timeout}s ({attempt} attempts)"
                ) from error
            mqs = self.route(topic).write_queues()
            if selector is not None:
                mq = selector(mqs, msgs[0], arg)
                if mq not in mqs:
                    raise MQClientError(f"selector returned {mq}, not a writable queue of {topic}")
            else:
                mq = self._next_queue(mqs, last_mq)
            last_mq = mq
            try:
                results = self.broker.send_message(
                    topic, mq.queue_id, msgs, producer_group=self.group, born_timestamp=born
                )
            except BrokerError as exc:
                if exc.code not in _RETRY_CODES:
                    raise
                error = exc
                log.warning("send_retry", topic=topic, queue_id=mq.queue_id, attempt=attempt + 1)
                continue
            ids = ",".join(r.msg_id for r in results)
            result = SendResult(SendStatus.SEND_OK, ids, mq, results[0].queue_offset, ids)
            if traced:
                hooks.mqcore_send_after(producer_group=self.group, messages=msgs, results=[result])
            return result
        assert error is not None
        raise MQClientError(
            f"send to {topic} failed after {attempts} attempts: {error}",
            code=getattr(error, "code", -1),
        ) from error

    def send(
        self,
        msg: Message,
        timeout: float | None = None,
        *,
        selector: MessageQueueSelector | None = None,
        arg: Any = None,
    ) -> SendResult:
        """Send one message and wait for the broker to store it.

        With ``selector`` (ordered messages) the queue is ``selector(mqs, msg, arg)`` and a
        failed send is not retried on another queue, as RocketMQ.
        """
        return self._send([msg], timeout, selector, arg, self.retry_times_when_send_failed)

    def send_batch(self, msgs: Sequence[Message], timeout: float | None = None) -> SendResult:
        """Send messages of one topic as one batch into one queue (one write).

        As RocketMQ, one :class:`SendResult` comes back: ``msg_id`` joins the ids with commas
        and ``queue_offset`` is the first message's offset (the others follow it).
        """
        if not msgs:
            raise MQClientError("send_batch needs at least one message")
        return self._send(list(msgs), timeout, None, None, self.retry_times_when_send_failed)

    def send_async(
        self,
        msg: Message,
        callback: Callable[[SendResult | None, BaseException | None], None] | None = None,
        timeout: float | None = None,
        *,
        selector: MessageQueueSelector | None = None,
        arg: Any = None,
    ) -> Future[SendResult]:
        """Send in the background; returns a Future, and calls ``callback(result, error)``."""
        self._check_running()
        executor = self._executor
        assert executor is not None
        future = executor.submit(
            self._send, [msg], timeout, selector, arg, self.retry_times_when_send_async_failed
        )
        if callback is not None:

            def done(f: Future[SendResult]) -> None:
                exc = f.exception()
                callback(None if exc else f.result(), exc)

            future.add_done_callback(done)
        return future

    def send_oneway(self, msg: Message) -> None:
        """Send without waiting for the result; a broker failure is logged, not raised.

        An invalid message still raises at once, as RocketMQ's client validates before sending.
        """
        self._check_running()
        self._check_message(msg)
        try:
            self._send([msg], None, None, None, 0)
        except Exception as exc:  # one-way means the caller never hears back
            log.warning("send_oneway_failed", topic=msg.topic, error=str(exc))
