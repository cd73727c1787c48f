"""Consume services: hand pulled messages to the listener, concurrently or in queue order."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import attrs

from mqcore.client.process_queue import ProcessQueue
from mqcore.logs import get_logger
from mqcore.message import (
    ConsumeConcurrentlyStatus,
    ConsumeOrderlyStatus,
    MessageExt,
    MessageModel,
    MessageQueue,
)

if TYPE_CHECKING:
    from mqcore.client.push_consumer import PushConsumer

__all__ = [
    "ConcurrentlyService",
    "ConsumeConcurrentlyContext",
    "ConsumeOrderlyContext",
    "OrderlyService",
]

log = get_logger(__name__)

_SEND_BACK_RETRY_S = 5.0  # RocketMQ re-submits locally when a send-back fails


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
    """Passed to an orderly listener; ``suspend_current_queue_time_millis`` -1 = default."""

    message_queue: MessageQueue
    auto_commit: bool = True
    suspend_current_queue_time_millis: int = -1


class _ServiceBase:
    def __init__(self, consumer: PushConsumer, listener: Callable[..., Any]) -> None:
        self.consumer = consumer
        self.listener = listener
        self.executor = ThreadPoolExecutor(
            consumer.consume_thread_max, thread_name_prefix=f"mqcore-consume-{consumer.group}"
        )
        self._stop = threading.Event()

    def shutdown(self) -> None:
        self._stop.set()
        self.executor.shutdown(wait=True, cancel_futures=True)

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

    def submit(self, msgs: Sequence[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
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
        if retry_here and not self._stop.wait(_SEND_BACK_RETRY_S):
            self.submit(retry_here, pq, mq)


class OrderlyService(_ServiceBase):
    """RocketMQ's ConsumeMessageOrderlyService: one queue, one thread, in offset order."""

    def __init__(self, consumer: PushConsumer, listener: Callable[..., Any]) -> None:
        super().__init__(consumer, listener)
        self._attempts: dict[tuple[MessageQueue, int], int] = {}

    def submit(self, msgs: Sequence[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        """Wake the queue's consumer task (messages are already in ``pq``)."""
        try:
            self.executor.submit(self._consume_queue, pq, mq)
        except RuntimeError:  # shutting down
            return

    def _may_consume(self, pq: ProcessQueue) -> bool:
        if self.consumer.message_model is MessageModel.BROADCASTING:
            return True
        return pq.locked and time.monotonic() - pq.last_lock_time < 30.0

    def _consume_queue(self, pq: ProcessQueue, mq: MessageQueue) -> None:
        # The per-queue lock keeps one thread on a queue, so messages go out in order.
        with pq.consume_lock:
            while not pq.dropped and not self._stop.is_set():
                if not self._may_consume(pq):
                    # Re-tried when the rebalance (re)locks the queue.
                    return
                msgs = pq.take_messages(self.consumer.consume_message_batch_max_size)
                if not msgs:
                    return
                ctx = ConsumeOrderlyContext(mq)
                status = self._call_listener(msgs, mq, ctx)
                if status in (ConsumeOrderlyStatus.SUCCESS, ConsumeOrderlyStatus.COMMIT):
                    self._commit(pq, mq, msgs)
                    continue
                # Failure: consume the same messages again after a pause, in order, or give
                # up on them (DLQ) after max_reconsume_times attempts.
                if self._exhausted(mq, msgs) and all(
                    self.consumer.send_message_back(m, -1) for m in msgs
                ):
                    self._commit(pq, mq, msgs)
                    continue
                pq.make_message_to_consume_again(msgs)
                pause = ctx.suspend_current_queue_time_millis
                if self._stop.wait(pause / 1000 if pause > 0 else 1.0):
                    return

    def _exhausted(self, mq: MessageQueue, msgs: Sequence[MessageExt]) -> bool:
        limit = self.consumer.max_reconsume_times
        exhausted = False
        for m in msgs:
            key = (mq, m.queue_offset)
            self._attempts[key] = n = self._attempts.get(key, 0) + 1
            exhausted = exhausted or (limit is not None and n > limit)
        return exhausted

    def _commit(self, pq: ProcessQueue, mq: MessageQueue, msgs: Sequence[MessageExt]) -> None:
        for m in msgs:
            self._attempts.pop((mq, m.queue_offset), None)
        offset = pq.commit()
        if offset >= 0 and not pq.dropped:
            self.consumer.offset_store.update_offset(mq, offset, False)
