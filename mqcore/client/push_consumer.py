"""PushConsumer: rebalanced queues, long-polling pulls and a listener (DefaultMQPushConsumer)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from mqcore.allocation import sorted_cids, sorted_queues
from mqcore.client.common import ClientBase
from mqcore.client.consume_service import (
    MAX_TIME_CONSUME_CONTINUOUSLY_S,
    ConcurrentlyService,
    OrderlyService,
)
from mqcore.client.process_queue import ProcessQueue
from mqcore.client.running_info import consumer_running_info
from mqcore.client.scheduler import Scheduler
from mqcore.errors import MQClientError
from mqcore.logs import get_logger
from mqcore.message import (
    PROPERTY_RETRY_TOPIC,
    ConsumeFromWhere,
    MessageExt,
    MessageModel,
    MessageQueue,
)
from mqcore.protocol.admin_bodies import ConsumerRunningInfo
from mqcore.protocol.codes import NOT_FOUND_TOPIC_EXCEPTION, ResponseCode
from mqcore.protocol.heartbeat import ConsumerData, SubscriptionData
from mqcore.protocol.names import RETRY_GROUP_TOPIC_PREFIX, validate_group

__all__ = ["PushConsumer"]

log = get_logger(__name__)

_FLOW_CONTROL_DELAY_S = 0.05  # RocketMQ's PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL
_PULL_ERROR_DELAY_S = 1.0  # ClientConfig.pullTimeDelayMillsWhenException (RocketMQ 4.7+)
_BROKER_SUSPEND_MAX_TIME_MS = 15_000  # BROKER_SUSPEND_MAX_TIME_MILLIS: a long poll's hold
_HEARTBEAT_S = 30.0
_REBALANCE_LOCK_INTERVAL_S = 20.0  # ProcessQueue.REBALANCE_LOCK_INTERVAL: orderly lock renewal
_CONSUME_LOCK_WAIT_S = 1.0  # how long rebalance waits for a running orderly listener
_UNLOCK_DELAY_S = 20.0  # RebalancePushImpl.UNLOCK_DELAY_TIME_MILLS


class PushConsumer(ClientBase):
    """Consumes subscribed topics through a listener; queues are shared by the group.

    Defaults are RocketMQ's (snake case). ``allocate_strategy`` is a registered strategy name
    (or a strategy object); ``allocate_options`` are passed to its factory.

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
        allocate_strategy: Any = "avg",
        allocate_options: dict[str, Any] | None = None,
        message_model: MessageModel = MessageModel.CLUSTERING,
        consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        consume_timestamp: str | None = None,
        consume_thread_min: int = 20,
        consume_thread_max: int = 20,
        consume_concurrently_max_span: int = 2000,
        pull_threshold_for_queue: int = 1000,
        pull_threshold_size_for_queue: int = 100 * 1024 * 1024,
        pull_batch_size: int = 32,
        consume_message_batch_max_size: int = 1,
        max_reconsume_times: int | None = None,
        consume_timeout: float = 15 * 60.0,
        rebalance_interval: float = 20.0,
        persist_consumer_offset_interval: float = 5.0,
        suspend_current_queue_time_millis: int = 1000,
        offset_store: str | None = None,
        offset_store_options: dict[str, Any] | None = None,
    ) -> None:
        validate_group(group)
        super().__init__(group, broker, instance_name, namesrv_addr, credentials, tls)
        self.allocate_strategy = allocate_strategy
        self.allocate_options = dict(allocate_options or {})
        self.message_model = message_model
        self.consume_from_where = consume_from_where
        # RocketMQ's default: half an hour ago, as yyyyMMddHHmmss.
        self.consume_timestamp = consume_timestamp or (
            datetime.now() - timedelta(minutes=30)
        ).strftime("%Y%m%d%H%M%S")
        self.consume_thread_min = consume_thread_min
        self.consume_thread_max = max(consume_thread_max, consume_thread_min, 1)
        self.consume_concurrently_max_span = consume_concurrently_max_span
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self.pull_threshold_size_for_queue = pull_threshold_size_for_queue
        self.pull_batch_size = pull_batch_size
        self.consume_message_batch_max_size = consume_message_batch_max_size
        self._max_reconsume_times = max_reconsume_times
        self.consume_timeout = consume_timeout
        self.rebalance_interval = rebalance_interval
        self.persist_consumer_offset_interval = persist_consumer_offset_interval
        self.suspend_current_queue_time_millis = suspend_current_queue_time_millis
        #: Orderly: a consume task yields its thread after this many seconds on one queue.
        self.max_time_consume_continuously = MAX_TIME_CONSUME_CONTINUOUSLY_S
        #: Orderly, clustering: how often the queue locks are renewed on the broker.
        self.rebalance_lock_interval = _REBALANCE_LOCK_INTERVAL_S
        self.scheduler: Scheduler | None = None
        # Orderly queues given away whose broker lock is released later (UNLOCK_DELAY).
        self._unlock_pending: set[MessageQueue] = set()
        # Queues an operator reset while this member owned them -> the offset to restart at
        # (see reset_offset): taken by the rebalance that follows instead of the broker's.
        self._reset_to: dict[MessageQueue, int] = {}
        self._offset_store_name = offset_store
        self._offset_store_options = dict(offset_store_options or {})
        self.offset_store: Any = None
        self._subscriptions: dict[str, SubscriptionData] = {}
        # Subscribed topics found not to exist, warned of once (until they appear).
        self._missing_topics: set[str] = set()
        self._listener: Callable[..., Any] | None = None
        self._orderly = False
        self._service: ConcurrentlyService | OrderlyService | None = None
        self._strategy: Any = None
        self._table: dict[MessageQueue, tuple[ProcessQueue, threading.Thread]] = {}
        self._table_lock = threading.Lock()
        self._stop = threading.Event()
        self._rebalance_now = threading.Event()
        self._worker: threading.Thread | None = None

    # -- configuration -----------------------------------------------------------------------

    @property
    def max_reconsume_times(self) -> int | None:
        """Retries before the DLQ: 16 for concurrent listeners, unlimited (None) for orderly."""
        if self._max_reconsume_times is not None:
            return self._max_reconsume_times
        return None if self._orderly else 16

    def subscribe(
        self, topic: str, sub_expression: str = "*", expression_type: str = "TAG"
    ) -> None:
        """Consume ``topic`` filtered by ``sub_expression`` (TAG syntax, or SQL92)."""
        if sub_expression not in ("", "*") or expression_type.upper() != "TAG":
            # Compile now so that a bad expression fails here, not in a background thread.
            self.kernel.filter(expression_type, sub_expression)
        self._subscriptions[topic] = SubscriptionData(
            topic=topic, sub_string=sub_expression or "*", expression_type=expression_type.upper()
        )
        if self._started:
            self._heartbeat()
            self._rebalance_now.set()

    def unsubscribe(self, topic: str) -> None:
        """Stop consuming ``topic``."""
        self._subscriptions.pop(topic, None)
        if self._started:
            self._heartbeat()
            self._rebalance_now.set()

    def register_message_listener(self, listener: Callable[..., Any]) -> None:
        """``listener(msgs, ctx) -> ConsumeConcurrentlyStatus``; called from consume threads."""
        self._listener, self._orderly = listener, False

    register_message_listener_concurrently = register_message_listener

    def register_message_listener_orderly(self, listener: Callable[..., Any]) -> None:
        """``listener(msgs, ctx) -> ConsumeOrderlyStatus``; one thread per queue, in order."""
        self._listener, self._orderly = listener, True

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Check the configuration, join the group and start consuming."""
        with self._state_lock:
            if self._started:
                return
            if self._shutdown:
                raise MQClientError(f"consumer {self.group!r} was shut down; create a new one")
            if self._listener is None:
                raise MQClientError("register a message listener before start()")
            if not self._subscriptions:
                raise MQClientError("subscribe to at least one topic before start()")
            strategy = self.allocate_strategy
            if isinstance(strategy, str):
                # An unknown name fails here, listing the registered strategies.
                strategy = self.kernel.allocator(strategy, **self.allocate_options)
            self._strategy = strategy
            self._claim_client_id(unique=self.message_model is MessageModel.CLUSTERING)
            try:
                self._start_locked()
            except BaseException:
                self._release_client_id()
                raise

    def _start_locked(self) -> None:
        # start() under the state lock, once the client id is claimed.
        assert self._listener is not None
        name = self._offset_store_name or (
            "broker" if self.message_model is MessageModel.CLUSTERING else "local_file"
        )
        options = {"group": self.group, **self._offset_store_options}
        if name == "broker":
            options.setdefault("broker", self.broker)
        elif name == "local_file":
            options.setdefault("client_id", self.client_id)
        self.offset_store = self.kernel.offset_store(name, **options)
        self.offset_store.load()
        if self.message_model is MessageModel.CLUSTERING:
            retry = RETRY_GROUP_TOPIC_PREFIX + self.group
            self._subscriptions.setdefault(retry, SubscriptionData(topic=retry))
        service = OrderlyService if self._orderly else ConcurrentlyService
        self._service = service(self, self._listener)
        self._heartbeat()
        # After the last step that can fail: shutdown() stops it only once started.
        self.scheduler = Scheduler(f"mqcore-schedule-{self.group}")
        self._worker = threading.Thread(
            target=self._run, name=f"mqcore-rebalance-{self.group}", daemon=True
        )
        self._started = True
        self._worker.start()
        self._rebalance_now.set()

    def shutdown(self) -> None:
        """Stop pulling, let listeners finish, commit offsets and leave the group."""
        if not self._claim_shutdown():
            return
        self._stop.set()
        self._rebalance_now.set()
        if self._worker is not None:
            self._worker.join(timeout=30)
        with self._table_lock:
            entries = list(self._table.items())
            self._table.clear()
        # The pull threads stop on self._stop; the process queues are not dropped yet, so a
        # listener still running commits its offsets (a dropped queue's results are discarded,
        # which would redeliver what was consumed), as RocketMQ's shutdown lets the consume
        # service finish before it persists.
        self.broker.cancel_pulls()  # the pull threads must not wait out their long polls
        for _, (_, thread) in entries:
            thread.join(timeout=30)
        if self.scheduler is not None:
            self.scheduler.shutdown()  # first: its tasks hand work to the consume pool
        if self._service is not None:
            self._service.shutdown()
        for _, (pq, _) in entries:
            pq.dropped = True
        mqs = [mq for mq, _ in entries]
        with self._table_lock:
            # No listener runs any more: delayed unlocks are done now.
            unlock = sorted(set(mqs) | self._unlock_pending)
            self._unlock_pending.clear()
        try:
            if mqs:
                self.offset_store.persist_all(mqs)
            if not self.broker.closed:
                if self._orderly and unlock:
                    self.broker.unlock_batch_mq(self.group, self.client_id, unlock)
                self.broker.unregister_client(self.client_id, consumer_group=self.group)
        except Exception:  # the broker may already be gone
            log.exception("push_consumer_shutdown_incomplete", group=self.group)
        finally:
            self._release_client_id()
            self.broker.close()

    def assigned_queues(self, topic: str) -> set[MessageQueue]:
        """Queues of ``topic`` this consumer owns right now."""
        with self._table_lock:
            return {
                mq for mq, (pq, _) in self._table.items() if mq.topic == topic and not pq.dropped
            }

    # -- group membership and rebalance ------------------------------------------------------

    def _heartbeat(self) -> None:
        data = ConsumerData(
            group_name=self.group,
            consume_type="CONSUME_PASSIVELY",
            message_model=self.message_model,
            consume_from_where=self.consume_from_where,
            subscriptions=list(self._subscriptions.values()),
        )
        self.broker.heartbeat(self.client_id, consumer_data=[data], channel=self)

    def consumer_ids_changed(self, group: str) -> None:
        """The broker's notice that the group's membership changed: rebalance now."""
        self._rebalance_now.set()

    def reset_offset(self, group: str, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """The broker's notice that an operator moved the group's offsets in ``topic``
        (RESET_CONSUMER_CLIENT_OFFSET, RocketMQ's ``MQClientInstance.resetOffset``).

        Each owned queue named in ``offsets`` is dropped with what it holds (listeners still
        running on it commit nothing), its offset set to the new one, and the queue is given
        up; the rebalance that follows at once takes it back and pulls from the new offset.
        So the consumer's next offset commit cannot undo the reset. The queue restarts at the
        offset this notice names, not at the one read back from the broker: an offset commit
        of this member's sent before the notice arrived but stored after the reset (its
        periodic persist) would otherwise win and the reset would be lost.
        """
        if group != self.group or self._stop.is_set() or self.offset_store is None:
            return
        with self._table_lock:
            hit = [
                (mq, pq)
                for mq, (pq, _) in self._table.items()
                if mq.topic == topic and mq in offsets
            ]
        for mq, pq in hit:
            pq.dropped = True
            pq.clear()
            with self._table_lock:
                self._reset_to[mq] = offsets[mq]
            self.offset_store.update_offset(mq, offsets[mq], False)
            if self._remove_unnecessary(mq, pq):
                with self._table_lock:
                    if self._table.get(mq, (None,))[0] is pq:
                        del self._table[mq]
        log.info("offsets_reset", group=group, topic=topic, queues=len(hit))
        self._rebalance_now.set()

    def consumer_running_info(self, group: str) -> ConsumerRunningInfo:
        """The queues this consumer owns now, what it holds of each, and its settings (the
        broker asks for them on an operator's behalf: GET_CONSUMER_RUNNING_INFO)."""
        with self._table_lock:
            owned = [(mq, pq) for mq, (pq, _) in self._table.items() if not pq.dropped]
        return consumer_running_info(
            self, owned, list(self._subscriptions.values()), orderly=self._orderly
        )

    def _run(self) -> None:
        # Separate schedules, as RocketMQ's: rebalance every rebalance_interval (and at once on
        # a membership notice), offsets every persist_consumer_offset_interval, orderly lock
        # renewal every rebalance_lock_interval.
        start = time.monotonic()
        next_heartbeat = next_persist = next_expire = next_rebalance = start
        next_lock = start + min(1.0, self.rebalance_lock_interval)
        orderly_clustering = self._orderly and self.message_model is MessageModel.CLUSTERING
        while not self._stop.is_set():
            try:
                now = time.monotonic()
                if now >= next_heartbeat:
                    next_heartbeat = now + _HEARTBEAT_S
                    self._heartbeat()
                if self._rebalance_now.is_set() or now >= next_rebalance:
                    self._rebalance_now.clear()
                    next_rebalance = now + self.rebalance_interval
                    self._rebalance()
                if orderly_clustering and now >= next_lock:
                    next_lock = now + self.rebalance_lock_interval
                    self._lock_all()
                if now >= next_persist:
                    next_persist = now + self.persist_consumer_offset_interval
                    self._persist()
                if now >= next_expire:
                    next_expire = now + min(self.consume_timeout, 60.0)
                    self._clean_expired()
            except Exception:  # keep the consumer alive; the next round retries
                log.exception("push_consumer_round_failed", group=self.group)
                if self._stop.wait(1.0):
                    break
            due = min(next_rebalance, next_persist, next_expire, next_heartbeat)
            if orderly_clustering:
                due = min(due, next_lock)
            self._rebalance_now.wait(max(0.0, due - time.monotonic()))

    def _persist(self) -> None:
        with self._table_lock:
            mqs = list(self._table)
        if mqs:
            self.offset_store.persist_all(mqs)

    def _rebalance(self) -> None:
        for topic, sub in list(self._subscriptions.items()):
            if self._stop.is_set():
                return
            try:
                mqs = self.route(topic).read_queues()
            except MQClientError as exc:
                self._no_route(topic, exc)
                continue
            self._missing_topics.discard(topic)
            cids: list[str] | None = None  # broadcasting: every queue, whoever else consumes
            if self.message_model is MessageModel.BROADCASTING:
                mine = set(mqs)
            else:
                cids = self.broker.get_consumer_list_by_group(self.group, topic)
                if not cids:
                    continue
                # RocketMQ's rebalance sorts queues and consumer ids (Java string order)
                # before it asks the strategy.
                mine = set(
                    self._strategy.allocate(
                        self.group, self.client_id, sorted_queues(mqs), sorted_cids(cids)
                    )
                )
            self._update_table(topic, sub, mine, cids)

    def _no_route(self, topic: str, exc: MQClientError) -> None:
        """Log a topic the rebalance found no route for: once per absence as a warning when
        it does not exist (a misspelt name, say), never for the group's own retry topic."""
        if exc.code != NOT_FOUND_TOPIC_EXCEPTION:
            log.warning("rebalance_no_route", group=self.group, topic=topic, error=str(exc))
        elif topic == RETRY_GROUP_TOPIC_PREFIX + self.group:
            # Normal for a new group: the broker creates it at the first heartbeat, and a
            # name server learns of it at the broker's next registration.
            log.debug("rebalance_no_route", group=self.group, topic=topic)
        elif topic in self._missing_topics:
            log.debug("rebalance_no_route", group=self.group, topic=topic)
        else:
            self._missing_topics.add(topic)
            log.warning(
                "consumer_topic_not_exist",
                group=self.group,
                topic=topic,
                hint="nothing is consumed from it until it is created; check the name, or "
                "create it (`mqcore topic create`)",
            )

    def _update_table(
        self,
        topic: str,
        sub: SubscriptionData,
        mine: set[MessageQueue],
        cids: list[str] | None = None,
    ) -> None:
        """Apply one allocation of ``topic``'s queues, reckoned from the member list
        ``cids``: give up the queues not in ``mine``, then take the new ones.

        Both halves change the table in one step each, so that :meth:`assigned_queues` never
        shows a part of an allocation: a member taking four queues, two of them already
        pulled by a newer member, must not look as if it held two. And the new queues are not
        taken when the group's members changed while they were prepared: the allocation was
        reckoned from an older list, and would pull queues another member now owns; the
        membership notice has asked for the rebalance on the new list.
        """
        orderly_clustering = self._orderly and self.message_model is MessageModel.CLUSTERING
        with self._table_lock:
            for mq in [mq for mq in self._reset_to if mq.topic == topic and mq not in mine]:
                del self._reset_to[mq]  # reset, then given to another member: theirs now
            # A dropped entry still here waits for its listener (orderly): retry its removal.
            gone = [
                (mq, pq)
                for mq, (pq, _) in self._table.items()
                if mq.topic == topic and (mq not in mine or pq.dropped)
            ]
            for _, pq in gone:
                pq.dropped = True
        for mq, pq in gone:
            if self._remove_unnecessary(mq, pq):
                with self._table_lock:
                    if self._table.get(mq, (None,))[0] is pq:
                        del self._table[mq]
                log.info("queue_released", group=self.group, queue=str(mq))
        taken: list[tuple[MessageQueue, ProcessQueue, int, int]] = []  # (mq, pq, offset, reset)
        for mq in sorted(mine):
            with self._table_lock:
                if mq in self._table:
                    continue
            # Orderly: own the queue's broker lock before reading where to start, so the
            # offset read is the one the previous owner left (RocketMQ's order).
            if orderly_clustering and not self.broker.lock_batch_mq(
                self.group, self.client_id, [mq]
            ):
                log.info("queue_lock_busy", group=self.group, queue=str(mq))
                continue  # another member still holds it; retried next round
            self.offset_store.remove_offset(mq)  # RocketMQ's removeDirtyOffset
            with self._table_lock:
                reset = offset = self._reset_to.pop(mq, -1)
            if offset < 0:
                offset = self._compute_pull_from_where(mq)
            if offset < 0:
                continue
            pq = ProcessQueue()
            pq.locked, pq.last_lock_time = True, time.monotonic()
            taken.append((mq, pq, offset, reset))
        if not taken:
            return
        try:
            outdated = cids is not None and set(
                self.broker.get_consumer_list_by_group(self.group, topic)
            ) != set(cids)
        except Exception:
            self._abandon(taken)
            raise
        threads: list[tuple[MessageQueue, int, threading.Thread]] = []
        with self._table_lock:
            if not self._stop.is_set() and not outdated:
                for mq, pq, offset, _ in taken:
                    thread = threading.Thread(
                        target=self._pull_loop,
                        args=(mq, sub, pq, offset),
                        name=f"mqcore-pull-{self.group}-{mq.topic}-{mq.queue_id}",
                        daemon=True,
                    )
                    self._table[mq] = (pq, thread)
                    self._unlock_pending.discard(mq)
                    threads.append((mq, offset, thread))
        if not threads:
            if not self._stop.is_set():
                log.info("allocation_outdated", group=self.group, topic=topic, queues=len(taken))
            self._abandon(taken)
            return
        for mq, offset, thread in threads:
            thread.start()
            log.info("queue_assigned", group=self.group, queue=str(mq), offset=offset)

    def _abandon(self, taken: list[tuple[MessageQueue, ProcessQueue, int, int]]) -> None:
        """Undo the preparations for queues an allocation did not take after all: a reset
        offset waits for the next rebalance again, and an orderly queue's broker lock taken
        for it is released (unless an earlier owner's delayed unlock still covers it)."""
        with self._table_lock:
            for mq, _, _, reset in taken:
                if reset >= 0:
                    self._reset_to.setdefault(mq, reset)
            unlock = [mq for mq, _, _, _ in taken if mq not in self._unlock_pending]
        if unlock and self._orderly and self.message_model is MessageModel.CLUSTERING:
            try:
                self.broker.unlock_batch_mq(self.group, self.client_id, unlock)
            except Exception as exc:  # the broker lets the lock expire then
                log.warning("queue_unlock_failed", group=self.group, error=repr(exc))

    def _remove_unnecessary(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        """Give a queue up (RocketMQ's removeUnnecessaryMessageQueue); False to retry later.

        Orderly: the broker lock is kept until the listener running on the queue returns
        (waiting up to a second here); with messages still cached, the unlock is delayed by
        20 s, so the next owner cannot start while this member may still be consuming.
        """
        # persist(mq), not persist_all([mq]): the latter forgets every other queue.
        self.offset_store.persist(mq)
        self.offset_store.remove_offset(mq)
        if not (self._orderly and self.message_model is MessageModel.CLUSTERING):
            return True
        if not pq.consume_lock.acquire(timeout=_CONSUME_LOCK_WAIT_S):
            log.warning("queue_still_consuming", group=self.group, queue=str(mq))
            return False  # kept (and its lock renewed) until the listener returns
        try:
            if pq.has_temp_message():
                with self._table_lock:
                    self._unlock_pending.add(mq)
                assert self.scheduler is not None
                self.scheduler.schedule(_UNLOCK_DELAY_S, lambda: self._unlock_later(mq))
            else:
                self.broker.unlock_batch_mq(self.group, self.client_id, [mq])
        finally:
            pq.consume_lock.release()
        return True

    def _unlock_later(self, mq: MessageQueue) -> None:
        with self._table_lock:
            if mq not in self._unlock_pending:
                return  # assigned back to this member meanwhile, or shut down
            self._unlock_pending.discard(mq)
        self.broker.unlock_batch_mq(self.group, self.client_id, [mq])

    def _lock_all(self) -> None:
        """Renew the broker locks of every queue in the table (RocketMQ's lockAll)."""
        with self._table_lock:
            # Dropped entries too: their listener still runs, so their lock must not expire.
            entries = dict(self._table)
        if not entries:
            return
        locked = self.broker.lock_batch_mq(self.group, self.client_id, list(entries))
        now = time.monotonic()
        for mq, (pq, _) in entries.items():
            pq.locked = mq in locked
            if pq.locked:
                pq.last_lock_time = now

    def lock_queue(self, mq: MessageQueue) -> bool:
        """Lock ``mq`` on its broker again for this consumer; True when it holds the lock.

        An orderly consume task that found its queue's lock lost or expired asks for it here
        (RocketMQ's ``RebalanceImpl.lock``). False once the consumer is shutting down.
        """
        if self._stop.is_set():
            return False
        with self._table_lock:
            entry = self._table.get(mq)
        ok = mq in self.broker.lock_batch_mq(self.group, self.client_id, [mq])
        if entry is not None:
            entry[0].locked = ok
            if ok:
                entry[0].last_lock_time = time.monotonic()
        return ok

    def _compute_pull_from_where(self, mq: MessageQueue) -> int:
        """Where a newly assigned queue starts (RocketMQ's computePullFromWhere)."""
        last = int(self.offset_store.read_offset(mq, True))
        if last >= 0:
            return last
        if last < -1:
            return -1  # the broker could not be asked (-2): try again next round
        retry = mq.topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
        where = self.consume_from_where
        if where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET or (
            retry and (where is ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET)
        ):
            return 0
        if where is ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET:
            return self.broker.get_max_offset(mq)
        if retry:
            return self.broker.get_max_offset(mq)
        ts = datetime.strptime(self.consume_timestamp, "%Y%m%d%H%M%S").timestamp() * 1000
        return self.broker.search_offset_by_timestamp(mq, int(ts))

    def _clean_expired(self) -> None:
        """Send back messages whose listener has run longer than ``consume_timeout``."""
        if self._orderly or self.message_model is not MessageModel.CLUSTERING:
            return
        with self._table_lock:
            entries = list(self._table.items())
        for mq, (pq, _) in entries:
            for m in pq.expired(self.consume_timeout):
                if self.send_message_back(m, 3):
                    offset = pq.remove_messages([m])
                    if offset >= 0:
                        self.offset_store.update_offset(mq, offset, True)
                    log.warning(
                        "consume_timeout", group=self.group, queue=str(mq), offset=m.queue_offset
                    )

    # -- pulling -----------------------------------------------------------------------------

    def _flow_controlled(self, pq: ProcessQueue) -> bool:
        if pq.msg_count > self.pull_threshold_for_queue:
            return True
        if pq.msg_size > self.pull_threshold_size_for_queue:
            return True
        return not self._orderly and pq.max_span() > self.consume_concurrently_max_span

    def _pull_loop(
        self, mq: MessageQueue, sub: SubscriptionData, pq: ProcessQueue, offset: int
    ) -> None:
        tag_filter = None
        if sub.expression_type == "TAG" and sub.sub_string.strip() not in ("", "*"):
            tag_filter = self.kernel.filter("TAG", sub.sub_string)
        while not pq.dropped and not self._stop.is_set():
            if self._flow_controlled(pq):
                self._stop.wait(_FLOW_CONTROL_DELAY_S)
                continue
            try:
                resp = self.broker.pull_message(
                    mq,
                    self.group,
                    offset,
                    self.pull_batch_size,
                    sub_expression=sub.sub_string,
                    expression_type=sub.expression_type,
                    suspend_timeout_ms=_BROKER_SUSPEND_MAX_TIME_MS,
                    client_id=self.client_id,
                )
            except Exception as exc:
                if self.broker.closed or self._stop.is_set():
                    return
                log.warning("pull_failed", group=self.group, queue=str(mq), error=repr(exc))
                self._stop.wait(_PULL_ERROR_DELAY_S)
                continue
            if pq.dropped:
                return
            if resp.code is ResponseCode.PULL_OFFSET_MOVED:
                log.warning(
                    "pull_offset_moved", group=self.group, queue=str(mq), offset=offset,
                    next=resp.next_begin_offset,
                )  # fmt: skip
                self.offset_store.update_offset(mq, resp.next_begin_offset, False)
            offset = resp.next_begin_offset
            msgs = resp.messages
            if resp.code is not ResponseCode.SUCCESS or not msgs:
                if resp.code is not ResponseCode.PULL_OFFSET_MOVED and pq.msg_count == 0:
                    # RocketMQ's correctTagsOffset: filtered-out messages still count as
                    # progress once nothing is in flight.
                    self.offset_store.update_offset(mq, offset, True)
                continue
            if tag_filter is not None:
                # The broker matched tag hash codes; the client checks the strings (RocketMQ).
                msgs = [m for m in msgs if tag_filter.matches(m)]
                if not msgs:
                    # Nothing to consume, but progress must still be committable.
                    if pq.msg_count == 0:
                        self.offset_store.update_offset(mq, offset, True)
                    continue
            if mq.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                # Only a retry queue's messages carry their original topic (RocketMQ's
                # resetRetryAndNamespace); others are not decoded here at all.
                for m in msgs:
                    retry_topic = m.get_property(PROPERTY_RETRY_TOPIC)
                    if retry_topic:
                        m._show_under_topic(retry_topic)
            dispatch = pq.put_messages(msgs)
            assert self._service is not None
            self._service.submit(msgs, pq, mq, dispatch)

    # -- retries -----------------------------------------------------------------------------

    def send_message_back(self, msg: MessageExt, delay_level: int) -> bool:
        """Ask the broker to redeliver ``msg`` later (or dead-letter it); False on failure."""
        try:
            self.broker.consumer_send_msg_back(
                self.group,
                msg,
                delay_level,
                self.max_reconsume_times if self.max_reconsume_times is not None else 2**31 - 1,
            )
        except Exception as exc:
            log.warning("send_back_failed", group=self.group, error=repr(exc))
            return False
        return True
