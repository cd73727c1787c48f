"""Producer: sends messages to a broker, round-robin over writable queues, with retries."""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

import attrs

from mqcore.batch import SPEEDUPS, plain_prefix
from mqcore.client.async_sender import AsyncSender, PendingSend
from mqcore.client.common import ClientBase
from mqcore.errors import (
    BrokerError,
    MessageIllegalError,
    MQClientError,
    NoRouteInfoError,
    RemotingConnectError,
    SendTimeoutError,
    SlaveNotAcknowledgedError,
)
from mqcore.logs import get_logger
from mqcore.message import PROPERTY_UNIQ_KEY, Message, MessageQueue, SendResult, SendStatus
from mqcore.protocol.codes import NOT_FOUND_TOPIC_EXCEPTION, ResponseCode
from mqcore.protocol.names import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    NOT_ALLOWED_SEND_TOPICS,
    validate_group,
    validate_topic,
)
from mqcore.protocol.route import TopicRoute
from mqcore.store import PutResult
from mqcore.uniqkey import create_uniq_id
from mqcore.validation import check_sent_message

__all__ = ["MessageQueueSelector", "Producer"]

log = get_logger(__name__)

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


# Queues per broker a producer writes to in a topic not created yet (RocketMQ's
# DefaultMQProducer.defaultTopicQueueNums); its first send creates the topic with as many.
DEFAULT_TOPIC_QUEUE_NUMS = 4

#: Response codes of a SYNC_MASTER that stored a send without a slave's confirmation.
_SLAVE_STATUS = {
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
}


def _uniq_id(msg: Message) -> str:
    """``msg``'s unique id, set now unless the message already has one (RocketMQ's
    ``MessageClientIDSetter.setUniqID``: the caller's message carries it afterwards)."""
    props = msg.properties
    uniq = props.get(PROPERTY_UNIQ_KEY)
    if not uniq:
        uniq = props[PROPERTY_UNIQ_KEY] = create_uniq_id()
    return uniq


def _batch_result(
    mq: MessageQueue, msgs: Sequence[Message], results: list[PutResult]
) -> list[SendResult]:
    """One SendResult for a batch, as RocketMQ: the ids joined with commas, the first offset."""
    if len(msgs) == 1:  # a single send
        ids, offset_ids = msgs[0].properties[PROPERTY_UNIQ_KEY], results[0].msg_id
    else:
        ids = ",".join([m.properties[PROPERTY_UNIQ_KEY] for m in msgs])
        offset_ids = ",".join([r.msg_id for r in results])
    return [SendResult(SendStatus.SEND_OK, ids, mq, results[0].queue_offset, offset_ids)]


def _message_results(
    mq: MessageQueue, msgs: Sequence[Message], results: list[PutResult]
) -> list[SendResult]:
    """One SendResult per message of a batch."""
    return [
        SendResult(
            SendStatus.SEND_OK, m.properties[PROPERTY_UNIQ_KEY], mq, r.queue_offset, r.msg_id
        )
        for m, r in zip(msgs, results, strict=True)
    ]


class Producer(ClientBase):
    """Sends messages (RocketMQ's DefaultMQProducer, snake case).

    :param group: producer group.
    :param broker: an in-process :class:`~mqcore.broker.Broker`, or the ``"host:port"`` of a
        name server or of ``mqcore serve`` (several separated by ``;``).
    :param credentials: ``(access_key, secret_key)`` of an account of the server's ACL
        (``mqcore serve --acl``): every request is signed (docs/security.md).
    :param tls: True (TLS, checking the server against the system's CAs) or an
        :class:`ssl.SSLContext`, for a server with TLS.
    :param retry_times_when_send_failed: extra attempts of a synchronous send (2).
    :param retry_times_when_send_async_failed: extra attempts of an asynchronous send (2).
    :param send_msg_timeout: default timeout of a send, seconds (3).
    :param max_message_size: largest body accepted, bytes (4 MiB).
    :param async_send_threads: threads serving ``send_async`` (owned and stopped by shutdown).
        One by default: an in-process broker does no network waiting, so more threads only
        contend for the store's write lock. The thread stores the sends queued meanwhile a
        batch at a time (see :mod:`mqcore.client.async_sender`).
    """

    role = "producer"

    def __init__(
        self,
        group: str,
        broker: Any = None,
        *,
        namesrv_addr: str | None = None,
        instance_name: str | None = None,
        credentials: Any = None,
        tls: Any = None,
        retry_times_when_send_failed: int = 2,
        retry_times_when_send_async_failed: int = 2,
        send_msg_timeout: float = 3.0,
        max_message_size: int = 4 * 1024 * 1024,
        async_send_threads: int = 1,
    ) -> None:
        validate_group(group)
        super().__init__(group, broker, instance_name, namesrv_addr, credentials, tls)
        self.retry_times_when_send_failed = retry_times_when_send_failed
        self.retry_times_when_send_async_failed = retry_times_when_send_async_failed
        self.send_msg_timeout = send_msg_timeout
        self.max_message_size = max_message_size
        self.async_send_threads = async_send_threads
        # Round-robin position: next() of a count is atomic, so sends from several threads
        # each take their own (RocketMQ's sendWhichQueue).
        self._index = itertools.count(random.randrange(1 << 16) + 1)
        # topic -> (route, its writable queues): a route object is immutable, so its queue
        # list is made once per route the broker hands out, not once per send.
        self._write_queues: dict[str, tuple[Any, list[MessageQueue]]] = {}
        self._sender: AsyncSender | None = None

    def route(self, topic: str, *, fresh: bool = False) -> TopicRoute:
        """The topic's route; for a topic its name servers do not know yet, the route of
        the brokers' template topic ``TBW102`` (which they serve while auto-creation is on),
        cut to 4 queues per broker: the first send creates the topic there. As RocketMQ's
        ``getDefaultTopicRouteInfoFromNameServer``; without a template,
        :class:`NoRouteInfoError` for ``topic``."""
        try:
            return super().route(topic, fresh=fresh)
        except NoRouteInfoError as exc:
            if topic == AUTO_CREATE_TOPIC_KEY_TOPIC:
                raise
            missing = exc
        try:
            template = super().route(AUTO_CREATE_TOPIC_KEY_TOPIC, fresh=fresh)
        except (BrokerError, MQClientError):
            raise missing from None
        n = DEFAULT_TOPIC_QUEUE_NUMS
        queues = [
            attrs.evolve(q, read_queue_nums=min(n, q.read_queue_nums),
                         write_queue_nums=min(n, q.write_queue_nums))
            for q in template.queue_datas
        ]  # fmt: skip
        return TopicRoute(topic, template.broker_datas, queues)

    def start(self) -> None:
        """Register with the broker and start the async-send pool."""
        with self._state_lock:
            if self._started:
                return
            if self._shutdown:
                raise MQClientError(f"producer {self.group!r} was shut down; create a new one")
            self._claim_client_id(unique=True)
            try:
                self._heartbeat()
            except BaseException:
                self._release_client_id()
                raise
            self._sender = AsyncSender(
                self._send_group,
                threads=self.async_send_threads,
                max_bytes=self.max_message_size,
                name=f"mqcore-producer-{self.group}",
            )
            self._started = True

    def _heartbeat(self) -> None:
        """Register the producer's group with its brokers."""
        self.broker.heartbeat(self.client_id, producer_groups=[self.group])

    def shutdown(self) -> None:
        """Finish queued async sends and stop."""
        if not self._claim_shutdown():
            return
        sender, self._sender = self._sender, None
        try:
            if sender is not None:
                sender.shutdown()
            self.broker.unregister_client(self.client_id, producer_group=self.group)
        finally:
            self._release_client_id()
            self.broker.close()

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
        # The broker's own rules, checked here first (a Message's properties dict can still
        # be changed after it was built).
        check_sent_message(msg, msg.topic)
        _uniq_id(msg)

    def _writable(self, topic: str) -> list[MessageQueue]:
        """The topic's writable queues; never empty (:class:`NoRouteInfoError` instead).

        A route with none (every master of the topic is down) is asked for again on each
        send, as RocketMQ's tryToFindTopicPublishInfo does, so sends resume as soon as a
        master is back rather than when the cached route expires.
        """
        route = self.route(topic)
        cached = self._write_queues.get(topic)
        if cached is not None and cached[0] is route:  # the broker's cached route
            return cached[1]
        mqs = route.write_queues()
        if not mqs:
            route = self.route(topic, fresh=True)
            mqs = route.write_queues()
        if not mqs:
            groups = ", ".join(sorted(b.broker_name for b in route.broker_datas)) or "none"
            raise NoRouteInfoError(
                f"No route info of this topic: {topic}: no master of the topic is writable "
                f"(its broker groups: {groups}; each master is down, or the topic is "
                "read-only); sends succeed again once a master is back (`mqcore cluster "
                "status` shows each group's members)",
                topic=topic,
                code=NOT_FOUND_TOPIC_EXCEPTION,
            )
        self._write_queues[topic] = (route, mqs)
        return mqs

    def _next_queue(self, mqs: list[MessageQueue], last: MessageQueue | None) -> MessageQueue:
        if not mqs:  # _writable never gives an empty list; guarded all the same
            raise NoRouteInfoError(
                "No route info of this topic: no writable queue to choose from",
                topic=last.topic if last is not None else "",
                code=NOT_FOUND_TOPIC_EXCEPTION,
            )
        index = next(self._index)
        if last is not None:
            # Retry on another broker when the topic spans several (RocketMQ's
            # selectOneMessageQueue(lastBrokerName)); otherwise the next queue round-robin.
            others = [mq for mq in mqs if mq.broker_name != last.broker_name]
            if others:
                return others[index % len(others)]
        return mqs[index % len(mqs)]

    # -- sending -----------------------------------------------------------------------------

    def _store(
        self,
        msgs: Sequence[Message],
        timeout: float,
        begin: float,
        pick: Callable[[list[MessageQueue], MessageQueue | None], MessageQueue] | None,
        retries: int,
    ) -> tuple[MessageQueue, list[PutResult], SendStatus]:
        """Store ``msgs`` (one topic) as one batch, with retries; the queue, the results and
        the send status.

        ``pick(mqs, last)`` chooses the queue (a selector: then no retry), else round-robin.
        """
        topic = msgs[0].topic
        attempts = 1 if pick is not None else 1 + retries
        last_mq: MessageQueue | None = None
        error: Exception | None = None
        born = int(time.time() * 1000)
        for attempt in range(attempts):
            if time.monotonic() - begin > timeout:
                raise SendTimeoutError(
                    f"send to {topic} timed out after {timeout}s ({attempt} attempts)"
                ) from error
            mqs = self._writable(topic)
            mq = pick(mqs, last_mq) if pick is not None else self._next_queue(mqs, last_mq)
            last_mq = mq
            try:
                results = self.broker.send_message(
                    mq, msgs, producer_group=self.group, born_timestamp=born
                )
            except SlaveNotAcknowledgedError as exc:
                # Stored on the master, not (yet) confirmed by a slave: a result, not an
                # error (RocketMQ's FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE send status).
                return mq, list(exc.results), _SLAVE_STATUS[ResponseCode(exc.code)]
            except BrokerError as exc:
                if exc.code not in _RETRY_CODES:
                    raise
                error = exc
                log.warning("send_retry", topic=topic, queue_id=mq.queue_id, attempt=attempt + 1)
                continue
            except RemotingConnectError as exc:
                # The broker is unreachable (a dead master): nothing was stored, so try the
                # next queue, on another broker group when there is one (as RocketMQ).
                error = exc
                log.warning(
                    "send_retry_unreachable",
                    topic=topic,
                    broker=mq.broker_name,
                    attempt=attempt + 1,
                    error=str(exc),
                )
                continue
            return mq, results, SendStatus.SEND_OK
        assert error is not None
        raise MQClientError(
            f"send to {topic} failed after {attempts} attempts: {error}",
            code=getattr(error, "code", -1),
        ) from error

    def _check_batch(self, msgs: Sequence[Message]) -> None:
        topic = msgs[0].topic
        start = 0
        if SPEEDUPS and len(msgs) > 1:
            # The leading messages that pass every check below on the plain rules alone
            # (validation.sent_fast_ok, the broker's own shortcut) are told apart in one C
            # call; they only need their unique ids. The rest are checked one by one.
            validate_topic(topic)
            if topic not in NOT_ALLOWED_SEND_TOPICS:
                start = plain_prefix(msgs, topic, self.max_message_size)
                for m in msgs[:start]:  # _uniq_id inlined: a call per message costs more
                    props = m.properties
                    if not props.get(PROPERTY_UNIQ_KEY):
                        props[PROPERTY_UNIQ_KEY] = create_uniq_id()
        for m in msgs[start:] if start else msgs:
            self._check_message(m)
            if m.topic != topic:
                raise MQClientError(
                    f"a batch goes to one topic: {m.topic!r} differs from {topic!r}"
                )

    def _selected(
        self, selector: MessageQueueSelector, msg: Message, arg: Any
    ) -> Callable[[list[MessageQueue], MessageQueue | None], MessageQueue]:
        def pick(mqs: list[MessageQueue], last: MessageQueue | None) -> MessageQueue:
            if not mqs:  # a selector's own modulo must never see an empty list
                raise NoRouteInfoError(
                    f"No route info of this topic: {msg.topic}: no writable queue",
                    topic=msg.topic,
                    code=NOT_FOUND_TOPIC_EXCEPTION,
                )
            mq = selector(list(mqs), msg, arg)  # a copy: the selector may reorder its list
            if mq not in mqs:
                raise MQClientError(f"selector returned {mq}, not a writable queue of {msg.topic}")
            return mq

        return pick

    def _store_traced(
        self,
        msgs: Sequence[Message],
        timeout: float,
        begin: float,
        pick: Callable[[list[MessageQueue], MessageQueue | None], MessageQueue] | None,
        retries: int,
        results_of: Callable[[MessageQueue, Sequence[Message], list[PutResult]], list[SendResult]],
    ) -> list[SendResult]:
        """:meth:`_store` between the send hooks; ``results_of`` makes the SendResults."""
        hooks = self.kernel.hook
        traced = bool(
            hooks.mqcore_send_before.get_hookimpls() or hooks.mqcore_send_after.get_hookimpls()
        )
        if traced:
            hooks.mqcore_send_before(producer_group=self.group, messages=msgs)
        mq, results, status = self._store(msgs, timeout, begin, pick, retries)
        out = results_of(mq, msgs, results)
        if status is not SendStatus.SEND_OK:
            out = [attrs.evolve(r, send_status=status) for r in out]
        if traced:
            hooks.mqcore_send_after(producer_group=self.group, messages=msgs, results=out)
        return out

    def _send(
        self,
        msgs: Sequence[Message],
        timeout: float | None,
        selector: MessageQueueSelector | None,
        arg: Any,
        retries: int,
    ) -> SendResult:
        self._check_running()
        self._check_batch(msgs)
        timeout = self.send_msg_timeout if timeout is None else timeout
        pick = self._selected(selector, msgs[0], arg) if selector is not None else None
        return self._store_traced(msgs, timeout, time.monotonic(), pick, retries, _batch_result)[0]

    def _send_group(self, sends: Sequence[PendingSend]) -> list[SendResult]:
        """Store queued async sends of one topic (and queue, if selected) as one batch."""
        fixed = sends[0].queue
        pick = (lambda mqs, last: fixed) if fixed is not None else None
        # The group may wait until its earliest send's deadline.
        now = time.monotonic()
        timeout = max(0.0, min(s.deadline for s in sends) - now)
        return self._store_traced(
            [s.message for s in sends],
            timeout,
            now,
            pick,
            self.retry_times_when_send_async_failed,
            _message_results,
        )

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
        if selector is not None:
            return self._send([msg], timeout, selector, arg, self.retry_times_when_send_failed)
        # _send for one message and no selector, with what it does for a batch left out
        # (the checks of a batch of one are the message's own).
        self._check_running()
        self._check_message(msg)
        msgs = [msg]
        timeout = self.send_msg_timeout if timeout is None else timeout
        return self._store_traced(
            msgs, timeout, time.monotonic(), None, self.retry_times_when_send_failed, _batch_result
        )[0]

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
        """Send in the background; returns a Future, and calls ``callback(result, error)``.

        Sends queued while the sender thread was busy are stored together, a batch per
        topic and queue (each still gets its own result). An invalid message, or a selector
        that fails, fails the future (and calls ``callback``) without being queued.
        """
        self._check_running()
        sender = self._sender
        assert sender is not None
        future: Future[SendResult] = Future()
        if callback is not None:

            def done(f: Future[SendResult]) -> None:
                exc = f.exception()
                callback(None if exc else f.result(), exc)

            future.add_done_callback(done)
        timeout = self.send_msg_timeout if timeout is None else timeout
        try:
            self._check_message(msg)
            queue = None
            if selector is not None:
                queue = self._selected(selector, msg, arg)(self._writable(msg.topic), None)
            sender.submit(PendingSend(msg, time.monotonic() + timeout, queue, future))
        except Exception as exc:
            if future.set_running_or_notify_cancel():
                future.set_exception(exc)
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
