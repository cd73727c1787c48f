"""The sender behind ``Producer.send_async``: queued sends stored a batch at a time.

An embedded broker has no network round trip for asynchronous sends to hide, so handing
each message to a thread only adds a hand-off to a synchronous send. Instead the sender
thread drains everything queued since its last round and stores the sends that go to the
same place as one batch: one ``put``, one encode, one write. Each send still gets its own
:class:`~mqcore.message.SendResult` (its own message id and queue offset), future and
callback.

What goes into one batch: sends of one topic, in submission order, without a selector
(they take one queue, chosen round-robin per batch) or whose selector picked the same
queue, up to ``max_batch`` messages and ``max_bytes`` of bodies. A message with a delay
level goes alone (RocketMQ refuses delay levels in batches). A send whose timeout ran out
while it waited fails with :class:`~mqcore.errors.SendTimeoutError` without being stored.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future

import attrs

from mqcore.errors import MQClientError, SendTimeoutError
from mqcore.message import Message, MessageQueue, SendResult

__all__ = ["AsyncSender", "PendingSend"]

#: ``send_group(sends) -> results``: stores the sends of one group, a result per send
#: (or raises for the whole group).
SendGroup = Callable[[Sequence["PendingSend"]], list[SendResult]]


@attrs.define(eq=False)
class PendingSend:
    """One queued asynchronous send."""

    message: Message
    deadline: float  # time.monotonic() after which it is not sent any more
    queue: MessageQueue | None  # chosen by the caller's selector, or None (round-robin)
    future: Future[SendResult]


class AsyncSender:
    """Threads that drain queued sends and store them in groups (see the module docstring).

    :param send_group: stores one group; called on a sender thread.
    :param threads: sender threads (owned: :meth:`shutdown` stops them).
    :param max_batch: most messages in one group.
    :param max_bytes: most body bytes in one group (a larger message goes alone).
    """

    def __init__(
        self,
        send_group: SendGroup,
        *,
        threads: int = 1,
        max_batch: int = 256,
        max_bytes: int = 4 * 1024 * 1024,
        name: str = "mqcore-producer",
    ) -> None:
        self._send_group = send_group
        self.max_batch = max(1, max_batch)
        self.max_bytes = max_bytes
        self._pending: deque[PendingSend] = deque()
        self._cond = threading.Condition()
        self._stopping = False
        self._threads = [
            threading.Thread(target=self._run, name=f"{name}-async-{i}", daemon=True)
            for i in range(max(1, threads))
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, send: PendingSend) -> None:
        """Queue ``send``; its future completes when it is stored or has failed."""
        with self._cond:
            if self._stopping:
                raise MQClientError("the producer is shutting down; the send was not queued")
            self._pending.append(send)
            self._cond.notify()

    def _take(self) -> list[PendingSend] | None:
        """Everything queued (up to a few groups' worth); None once stopped and drained."""
        with self._cond:
            while not self._pending:
                if self._stopping:
                    return None
                self._cond.wait(1.0)
            pending = self._pending
            count = min(len(pending), 4 * self.max_batch)
            return [pending.popleft() for _ in range(count)]

    def _groups(self, sends: list[PendingSend]) -> list[list[PendingSend]]:
        """Split drained sends into groups that can be stored as one batch."""
        open_groups: dict[tuple[str, MessageQueue | None], tuple[list[PendingSend], int]] = {}
        groups: list[list[PendingSend]] = []  # in the order of their first send
        for send in sends:
            msg = send.message
            if msg.delay_level:
                groups.append([send])
                continue
            key = (msg.topic, send.queue)
            body = len(msg.body)
            group, size = open_groups.get(key, (None, 0))
            if group is None or len(group) >= self.max_batch or size + body > self.max_bytes:
                group, size = [], 0
                groups.append(group)
            group.append(send)
            open_groups[key] = (group, size + body)
        return groups

    def _run(self) -> None:
        while True:
            sends = self._take()
            if sends is None:
                return
            for group in self._groups(sends):
                self._serve(group)

    def _serve(self, group: list[PendingSend]) -> None:
        now = time.monotonic()
        live = []
        for send in group:
            if not send.future.set_running_or_notify_cancel():
                continue  # cancelled while it waited
            if now > send.deadline:
                send.future.set_exception(
                    SendTimeoutError(f"send to {send.message.topic} timed out while queued")
                )
            else:
                live.append(send)
        if not live:
            return
        try:
            results = self._send_group(live)
        except BaseException as exc:
            for send in live:
                send.future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for send, result in zip(live, results, strict=True):
            send.future.set_result(result)

    def shutdown(self, timeout: float = 30.0) -> None:
        """Store everything queued, then stop the threads (waits up to ``timeout``)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        for thread in self._threads:
            if thread.is_alive():
                thread.join(timeout)
        with self._cond:
            left = list(self._pending)
            self._pending.clear()
        for send in left:  # only when the threads did not finish in time
            if send.future.set_running_or_notify_cancel():
                send.future.set_exception(MQClientError("the producer shut down before sending"))
