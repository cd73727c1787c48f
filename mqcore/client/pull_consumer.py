"""PullConsumer: the application chooses queues and offsets and pulls (DefaultMQPullConsumer)."""

from __future__ import annotations

import threading
from typing import Any

from mqcore.client.common import ClientBase
from mqcore.errors import InvalidArgumentError
from mqcore.logs import get_logger
from mqcore.message import MessageExt, MessageModel, MessageQueue, PullResult, PullStatus
from mqcore.protocol.codes import ResponseCode
from mqcore.protocol.heartbeat import ConsumerData, SubscriptionData
from mqcore.protocol.names import validate_group

__all__ = ["PullConsumer"]

log = get_logger(__name__)

_STATUS = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


class PullConsumer(ClientBase):
    """Pulls from queues the application picks; offsets kept by an offset-store plugin.

    :param group: consumer group.
    :param broker: an in-process :class:`~mqcore.broker.Broker`, or the ``"host:port"`` of a
        name server or of ``mqcore serve`` (several separated by ``;``).
    :param message_model: CLUSTERING keeps offsets on the broker (offset store ``broker``),
        BROADCASTING in a local file (offset store ``local_file``).
    :param offset_store: name of another registered offset store, or options via
        ``offset_store_options``.
    :param persist_consumer_offset_interval: seconds between offset commits (5).
    :param broker_suspend_max_time: how long a blocking pull waits for messages, seconds (20).
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
        instance_name: str | None = None,
        credentials: Any = None,
        tls: Any = None,
        message_model: MessageModel = MessageModel.CLUSTERING,
        offset_store: str | None = None,
        offset_store_options: dict[str, Any] | None = None,
        persist_consumer_offset_interval: float = 5.0,
        broker_suspend_max_time: float = 20.0,
    ) -> None:
        validate_group(group)
        super().__init__(group, broker, instance_name, namesrv_addr, credentials, tls)
        self.message_model = message_model
        self.persist_consumer_offset_interval = persist_consumer_offset_interval
        self.broker_suspend_max_time = broker_suspend_max_time
        if offset_store is None:
            offset_store = "broker" if message_model is MessageModel.CLUSTERING else "local_file"
        options = {"group": group, **(offset_store_options or {})}
        if offset_store == "broker":
            options.setdefault("broker", self.broker)
        elif offset_store == "local_file":
            options.setdefault("client_id", self.client_id)
        self.offset_store = self.kernel.offset_store(offset_store, **options)
        self._topics: set[str] = set()
        self._filters: dict[tuple[str, str], Any] = {}
        self._touched: set[MessageQueue] = set()
        self._stop = threading.Event()
        self._persister: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Load offsets, register with the broker and start committing offsets periodically."""
        with self._state_lock:
            if self._started:
                return
            self._claim_client_id(unique=self.message_model is MessageModel.CLUSTERING)
            try:
                self.offset_store.load()
                self._heartbeat()
            except BaseException:
                self._release_client_id()
                raise
            self._persister = threading.Thread(
                target=self._persist_loop, name=f"mqcore-pull-offsets-{self.group}", daemon=True
            )
            self._persister.start()
            self._started = True

    def shutdown(self) -> None:
        """Commit offsets one last time, leave the group and stop."""
        if not self._claim_shutdown():
            return
        self._stop.set()
        self.broker.cancel_pulls()  # a blocking pull in another thread returns now
        if self._persister is not None:
            self._persister.join(timeout=10)
        self._persist()
        try:
            self.broker.unregister_client(self.client_id, consumer_group=self.group)
        finally:
            self._release_client_id()
            self.broker.close()

    def _heartbeat(self) -> None:
        data = ConsumerData(
            group_name=self.group,
            consume_type="CONSUME_ACTIVELY",
            message_model=self.message_model,
            subscriptions=[SubscriptionData(topic=t) for t in sorted(self._topics)],
        )
        self.broker.heartbeat(self.client_id, consumer_data=[data])

    def _persist(self) -> None:
        mqs = list(self._touched)
        if mqs:
            try:
                self.offset_store.persist_all(mqs)
            except Exception:  # the broker may be gone; the next round retries
                log.exception("consumer_offsets_persist_failed", group=self.group)

    def _persist_loop(self) -> None:
        while not self._stop.wait(self.persist_consumer_offset_interval):
            self._persist()

    # -- queues and offsets ------------------------------------------------------------------

    def fetch_subscribe_message_queues(self, topic: str) -> set[MessageQueue]:
        """Every readable queue of ``topic``."""
        self._check_running()
        queues = set(self.route(topic).read_queues())
        if topic not in self._topics:
            self._topics.add(topic)
            self._heartbeat()
        return queues

    def update_consume_offset(self, mq: MessageQueue, offset: int) -> None:
        """Record ``offset`` as the next to consume in ``mq`` (committed within 5 s)."""
        self._check_running()
        self.offset_store.update_offset(mq, offset, False)
        self._touched.add(mq)

    def fetch_consume_offset(self, mq: MessageQueue, from_store: bool = False) -> int:
        """The next offset to consume in ``mq`` (-1 when the group has none)."""
        self._check_running()
        return int(self.offset_store.read_offset(mq, from_store))

    def min_offset(self, mq: MessageQueue) -> int:
        """Smallest offset stored in ``mq``."""
        return self.broker.get_min_offset(mq)

    def max_offset(self, mq: MessageQueue) -> int:
        """One past the last offset of ``mq``."""
        return self.broker.get_max_offset(mq)

    def search_offset(self, mq: MessageQueue, timestamp: int) -> int:
        """First offset of ``mq`` stored at or after ``timestamp`` (ms)."""
        return self.broker.search_offset_by_timestamp(mq, timestamp)

    def view_message(self, msg_id: str, topic: str | None = None) -> MessageExt:
        """The message with offset id ``msg_id`` or, given its ``topic``, with unique id
        ``msg_id`` (what :attr:`SendResult.msg_id <mqcore.message.SendResult.msg_id>` and
        ``MessageExt.msg_id`` show)."""
        return self.broker.view_message_by_id(msg_id, topic)

    def query_message(self, topic: str, key: str, max_num: int = 32) -> list[MessageExt]:
        """Messages of ``topic`` carrying ``key``."""
        return self.broker.query_message(topic, key, max_num)

    # -- pulling -----------------------------------------------------------------------------

    def _pull(
        self,
        mq: MessageQueue,
        sub_expression: str | None,
        offset: int,
        max_nums: int,
        expression_type: str,
        suspend_ms: int | None,
    ) -> PullResult:
        self._check_running()
        if offset < 0:
            raise InvalidArgumentError(f"offset must be >= 0, got {offset}")
        if not 0 < max_nums <= 1024:
            raise InvalidArgumentError(f"max_nums must be 1..1024, got {max_nums}")
        # Compiled here first, as the broker will: a bad expression or an unknown type fails
        # with the same error on every transport, before anything is sent.
        flt = self._compiled(expression_type, (sub_expression or "*").strip())
        resp = self.broker.pull_message(
            mq,
            self.group,
            offset,
            max_nums,
            sub_expression=sub_expression or "*",
            expression_type=expression_type,
            suspend_timeout_ms=suspend_ms or 0,
            client_id=self.client_id,
        )
        status = _STATUS[resp.code]
        msgs = resp.messages
        if status is PullStatus.FOUND and msgs and flt is not None and flt.expression_type == "TAG":
            # The broker matched tag hash codes; the client checks the tag strings (RocketMQ).
            msgs = [m for m in msgs if flt.matches(m)]
        return PullResult(status, resp.next_begin_offset, resp.min_offset, resp.max_offset, msgs)

    def _compiled(self, expression_type: str, expression: str) -> Any:
        """The filter for an expression (None for TAG ``*``), compiled once per expression."""
        if expression_type.upper() == "TAG" and expression in ("", "*"):
            return None
        key = (expression_type, expression)
        flt = self._filters.get(key)
        if flt is None:
            if len(self._filters) >= 64:  # bounded, whatever expressions a caller cycles through
                self._filters.clear()
            flt = self._filters[key] = self.kernel.filter(expression_type, expression)
        return flt

    def pull(
        self,
        mq: MessageQueue,
        sub_expression: str | None,
        offset: int,
        max_nums: int = 32,
        *,
        expression_type: str = "TAG",
    ) -> PullResult:
        """Pull up to ``max_nums`` messages from ``offset`` at once (no waiting)."""
        return self._pull(mq, sub_expression, offset, max_nums, expression_type, None)

    def pull_blocking_if_not_found(
        self,
        mq: MessageQueue,
        sub_expression: str | None,
        offset: int,
        max_nums: int = 32,
        *,
        expression_type: str = "TAG",
        timeout: float | None = None,
    ) -> PullResult:
        """Like :meth:`pull`, but when nothing is there yet the broker holds the pull until a
        message arrives or ``timeout`` (``broker_suspend_max_time``) passes (long polling)."""
        wait = self.broker_suspend_max_time if timeout is None else timeout
        return self._pull(mq, sub_expression, offset, max_nums, expression_type, int(wait * 1000))
