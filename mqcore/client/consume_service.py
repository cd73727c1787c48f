"""Consume services: hand pulled messages to the listener, concurrently or in queue order."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from mqcore.client.process_queue import ProcessQueue
from mqcore.client.scheduler import Scheduler
from mqcore.logs import get_logger
from mqcore.message import (
    ConsumeConcurrentlyStatus,
    ConsumeOrderlyStatus,
    MessageExt,
    MessageModel,
    MessageQueue,
)

if TYPE_CHECKING:
    from mqcore.interfaces import OffsetStore
    from mqcore.kernel import Kernel

__all__ = [
    "ConcurrentlyService",
    "ConsumeConcurrentlyContext",
    "ConsumeHost",
    "ConsumeOrderlyContext",
    "OrderlyService",
]

log = get_logger(__name__)

#: RocketMQ's ConsumeMessageOrderlyService.MAX_TIME_CONSUME_CONTINUOUSLY: an orderly task
#: hands its queue back to the pool after this long, so other queues get a thread too.
MAX_TIME_CONSUME_CONTINUOUSLY_S = 60.0


@attrs.define
class ConsumeConcurrentlyContext:
    """Passed to a concurrent listener.

    ``delay_level_when_next_consume``: 0 lets the broker pick (3 + retries), -1 sends the
    message straight to the DLQ. ``ack_index``: with CONSUME_SUCCESS, messages after this
    index in the batch are still sent back for retry.
    """

    message_queue: MessageQueue
    delay_level_when_next_consume: int = 0
    ack_index: int = 2**31 - 1


@attrs.define
class ConsumeOrderlyContext:
    """Passed to an orderly listener, new for each batch.

    ``auto_commit`` (True): SUCCESS commits, and COMMIT or ROLLBACK are taken as SUCCESS with
    a warning. Set it to False to commit only on COMMIT; ROLLBACK then consumes again every
    message since the last commit. ``suspend_current_queue_time_millis``: the pause after
    SUSPEND_CURRENT_QUEUE_A_MOMENT or ROLLBACK (-1: the consumer's setting, 1 s).
    """

    message_queue: MessageQueue
    auto_commit: bool = True
    suspend_current_queue_time_millis: int = -1


class ConsumeHost(Protocol):
    """What a consume service needs of the consumer it serves (a push consumer is one).

    Settings are read when used, never copied: a consumer may change them while it runs, and
    its scheduler and offset store exist only once it has started.
    """

    @property
    def group(self) -> str:
        """The consumer group."""
        ...

    @property
    def kernel(self) -> Kernel:
        """Whose hooks hear of each batch consumed."""
        ...

    @property
    def message_model(self) -> MessageModel:
        """Clustering (failed messages are sent back) or broadcasting (they are dropped)."""
        ...

    @property
    def consume_thread_max(self) -> int:
        """Threads of the consume pool."""
        ...

    @property
    def consume_message_batch_max_size(self) -> int:
        """Messages handed to the listener at once."""
        ...

    @property
    def max_reconsume_times(self) -> int | None:
        """Attempts before the dead-letter queue (None: unlimited)."""
        ...

    @property
    def suspend_current_queue_time_millis(self) -> int:
        """Orderly: the pause after SUSPEND_CURRENT_QUEUE_A_MOMENT."""
        ...

    @property
    def max_time_consume_continuously(self) -> float:
        """Orderly: seconds one task keeps its thread on one queue."""
        ...

    @property
    def scheduler(self) -> Scheduler | None:
        """Where delayed work is scheduled (None before start)."""
        ...

    @property
    def offset_store(self) -> OffsetStore:
        """Where consumed offsets are recorded."""
        ...

    def send_message_back(self, msg: MessageExt, delay_level: int) -> bool:
        """Have the broker redeliver ``msg`` later (or dead-letter it); False on failure."""
        ...

    def lock_queue(self, mq: MessageQueue) -> bool:
        """Lock ``mq`` on its broker again for this consumer (orderly, clustering)."""
        ...


class _ServiceBase:
    def __init__(self, consumer: ConsumeHost, listener: Callable[..., Any]) -> None:
        self.consumer = consumer
        self.listener = listener
        self.executor = ThreadPoolExecutor(
            consumer.consume_thread_max, thread_name_prefix=f"mqcore-consume-{consumer.group}"
        )
        self._stop = threading.Event()

    def shutdown(self) -> None:
        """Let running listeners finish and drop the tasks not started."""
        self._stop.set()
        self.executor.shutdown(wait=True, cancel_futures=True)

    def _later(self, delay_s: float, fn: Callable[[], object]) -> None:
        # Waiting happens on the consumer's scheduler thread, never in a consume thread.
        scheduler = self.consumer.scheduler
        if scheduler is not None and not self._stop.is_set():
            scheduler.schedule(delay_s, fn)

    def _call_listener(self, msgs: Sequence[MessageExt], mq: MessageQueue, ctx: Any) -> Any:
        hook = self.consumer.kernel.hook
        hook.mqcore_consume_before(
            consumer_group=self.consumer.group, message_queue=mq, messages=msgs
        )
        try:
            status = self.listener(list(msgs), ctx)
        except Exception as exc:
            log.warning(
                "consume_listener_failed", group=self.consumer.group, queue=str(mq), error=repr(exc)
            )
            status = exc
        hook.mqcore_consume_after(
            consumer_group=self.consumer.group, message_queue=mq, messages=msgs, status=status
        )
        return status


class ConcurrentlyService(_ServiceBase):
    """RocketMQ's ConsumeMessageConcurrentlyService."""

    #: Messages whose send-back failed are consumed again locally after this long (RocketMQ's
    #: submitConsumeRequestLater, 5 s).
    consume_later_delay_s = 5.0

    def submit(
        self,
        msgs: Sequence[MessageExt],
        pq: ProcessQueue,
        mq: MessageQueue,
        dispatch_to_consume: bool = True,
    ) -> None:
        """Queue ``msgs`` for consumption in batches of ``consume_message_batch_max_size``."""
        size = self.consumer.consume_message_batch_max_size
        for i in range(0, len(msgs), size):
            try:
                self.executor.submit(self._consume, msgs[i : i + size], pq, mq)
            except RuntimeError:  # shutting down
                return

    def _consume(self, msgs: Sequence[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        if pq.dropped:
            return
        ctx = ConsumeConcurrentlyContext(mq)
        pq.mark_consuming(msgs)
        status = self._call_listener(msgs, mq, ctx)
        if pq.dropped:
            # The queue moved to another member while we consumed; it will redeliver.
            return
        ok = status is ConsumeConcurrentlyStatus.CONSUME_SUCCESS
        ack = min(ctx.ack_index, len(msgs) - 1) if ok else -1
        failed = list(msgs[ack + 1 :])
        retry_here: list[MessageExt] = []
        if failed and self.consumer.message_model is MessageModel.CLUSTERING:
            for m in failed:
                if not self.consumer.send_message_back(m, ctx.delay_level_when_next_consume):
                    # Consumed again here later; it counts as a retry, as in RocketMQ.
                    m._set_reconsume_times(m.reconsume_times + 1)
                    retry_here.append(m)
        elif failed:
            log.warning(
                "broadcast_consume_failed_dropped", group=self.consumer.group, count=len(failed)
            )
        keep = {id(m) for m in retry_here}
        done = [m for m in msgs if id(m) not in keep]
        offset = pq.remove_messages(done)
        if offset >= 0 and not pq.dropped:
            self.consumer.offset_store.update_offset(mq, offset, True)
        if retry_here:
            self._later(self.consume_later_delay_s, lambda: self.submit(retry_here, pq, mq))


class OrderlyService(_ServiceBase):
    """RocketMQ's ConsumeMessageOrderlyService: one queue, one thread at a time, in offset order.

    A queue gets one consume task at a time (the process queue's dispatch gate); the task
    runs while messages wait, under the queue's broker lock (clustering), and yields its
    thread after ``consumer.max_time_consume_continuously`` seconds. Pauses (a suspended
    queue, a lock to retry) are scheduled, never slept in a consume thread.
    """

    def __init__(self, consumer: ConsumeHost, listener: Callable[..., Any]) -> None:
        super().__init__(consumer, listener)
        self._queue_locks: dict[MessageQueue, threading.Lock] = {}
        self._queue_locks_guard = threading.Lock()

    def submit(
        self,
        msgs: Sequence[MessageExt],
        pq: ProcessQueue,
        mq: MessageQueue,
        dispatch_to_consume: bool = True,
    ) -> None:
        """Start a consume task for the queue (messages are already in ``pq``)."""
        if not dispatch_to_consume:
            return  # a task already owns the queue and will see the new messages
        try:
            self.executor.submit(self._consume_queue, pq, mq)
        except RuntimeError:  # shutting down
            return

    def submit_later(self, pq: ProcessQueue, mq: MessageQueue, delay_ms: int) -> None:
        """Start a consume task after ``delay_ms`` (-1: ``suspend_current_queue_time_millis``)."""
        if delay_ms == -1:
            delay_ms = self.consumer.suspend_current_queue_time_millis
        delay_ms = min(max(delay_ms, 10), 30_000)  # RocketMQ's bounds
        self._later(delay_ms / 1000, lambda: self.submit([], pq, mq))

    def _try_lock_later(self, pq: ProcessQueue, mq: MessageQueue, delay_ms: int) -> None:
        def relock() -> None:
            if self._stop.is_set() or pq.dropped:
                return
            self.submit_later(pq, mq, 10 if self.consumer.lock_queue(mq) else 3000)

        self._later(delay_ms / 1000, relock)

    def _queue_lock(self, mq: MessageQueue) -> threading.Lock:
        with self._queue_locks_guard:
            lock = self._queue_locks.get(mq)
            if lock is None:
                lock = self._queue_locks[mq] = threading.Lock()
            return lock

    def _clustering(self) -> bool:
        return self.consumer.message_model is MessageModel.CLUSTERING

    def _consume_queue(self, pq: ProcessQueue, mq: MessageQueue) -> None:
        if pq.dropped:
            return
        # Two tasks of one queue can meet (a scheduled retry and a fresh dispatch): the
        # second waits for the first, so messages still go out one at a time, in order.
        with self._queue_lock(mq):
            if self._clustering() and (not pq.locked or pq.is_lock_expired()):
                if not pq.dropped:
                    self._try_lock_later(pq, mq, 100)
                return
            try:
                self._consume_locked(pq, mq)
            except Exception:  # keep the queue going: the gate is still closed, so retry
                log.exception("orderly_consume_failed", group=self.consumer.group, queue=str(mq))
                self.submit_later(pq, mq, -1)

    def _consume_locked(self, pq: ProcessQueue, mq: MessageQueue) -> None:
        begin = time.monotonic()
        while not pq.dropped and not self._stop.is_set():
            if self._clustering() and (not pq.locked or pq.is_lock_expired()):
                self._try_lock_later(pq, mq, 10)
                return
            if time.monotonic() - begin > self.consumer.max_time_consume_continuously:
                self.submit_later(pq, mq, 10)  # let other queues have this thread
                return
            msgs = pq.take_messages(self.consumer.consume_message_batch_max_size)
            if not msgs:
                return  # take_messages opened the gate
            ctx = ConsumeOrderlyContext(mq)
            with pq.consume_lock:
                # Rebalance may have taken the queue away while this task waited.
                if pq.dropped:
                    return
                status = self._call_listener(msgs, mq, ctx)
            if not isinstance(status, ConsumeOrderlyStatus):  # None or an exception
                status = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
            if not self._process_result(pq, mq, msgs, status, ctx):
                return

    def _process_result(
        self,
        pq: ProcessQueue,
        mq: MessageQueue,
        msgs: Sequence[MessageExt],
        status: ConsumeOrderlyStatus,
        ctx: ConsumeOrderlyContext,
    ) -> bool:
        """RocketMQ's processConsumeResult; False when the task must stop for now."""
        commit = False
        if status is ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT:
            if self._check_reconsume_times(msgs):
                pq.make_message_to_consume_again(msgs)
                self.submit_later(pq, mq, ctx.suspend_current_queue_time_millis)
                return False
            # Every message went to the dead-letter queue.
            commit = ctx.auto_commit
        elif ctx.auto_commit:
            if status is not ConsumeOrderlyStatus.SUCCESS:
                log.warning(
                    "orderly_status_needs_auto_commit_off", group=self.consumer.group,
                    queue=str(mq), status=status.name,
                )  # fmt: skip
            commit = True  # SUCCESS, and COMMIT or ROLLBACK taken as an acknowledgement
        elif status is ConsumeOrderlyStatus.COMMIT:
            commit = True
        elif status is ConsumeOrderlyStatus.ROLLBACK:
            pq.rollback()
            self.submit_later(pq, mq, ctx.suspend_current_queue_time_millis)
            return False
        # Auto-commit off and SUCCESS: consumed, but committed only by a later COMMIT.
        if commit:
            offset = pq.commit()
            if offset >= 0 and not pq.dropped:
                self.consumer.offset_store.update_offset(mq, offset, False)
        return True

    def _check_reconsume_times(self, msgs: Sequence[MessageExt]) -> bool:
        """Count another attempt on each message, or dead-letter those out of attempts.

        True when the batch must be consumed again (RocketMQ's checkReconsumeTimes).
        """
        limit = self.consumer.max_reconsume_times
        limit = 2**31 - 1 if limit is None else limit
        suspend = False
        for m in msgs:
            if m.reconsume_times < limit or not self.consumer.send_message_back(m, -1):
                suspend = True
                m._set_reconsume_times(m.reconsume_times + 1)
        return suspend
