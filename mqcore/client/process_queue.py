"""ProcessQueue: the messages of one queue pulled but not yet consumed (RocketMQ's ProcessQueue)."""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Sequence

from mqcore.message import MessageExt

__all__ = ["ProcessQueue"]

#: An orderly consumer stops using a queue lock not renewed for this long (RocketMQ's
#: REBALANCE_LOCK_MAX_LIVE_TIME); the broker keeps it twice as long, so a lock the client
#: still trusts is always one the broker still grants.
REBALANCE_LOCK_MAX_LIVE_TIME_S = 30.0


class ProcessQueue:
    """In-flight messages of one queue, ordered by queue offset.

    The offset a consumer may commit is the smallest offset still in flight (or one past the
    largest pulled when nothing is), so a crash re-delivers, never skips.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offsets: list[int] = []  # sorted queue offsets in flight
        self._msgs: dict[int, MessageExt] = {}
        self._started: dict[int, float] = {}  # offset -> monotonic time consumption began
        self.msg_size = 0
        self.queue_offset_max = -1
        self.dropped = False
        self.locked = False
        self.last_lock_time = 0.0
        self.last_pull_time = time.monotonic()
        self.last_consume_time = time.monotonic()
        # Orderly consumption: messages taken out for the listener, not yet committed.
        self._consuming: dict[int, MessageExt] = {}
        # Held while an orderly listener runs on this queue: rebalance waits on it before
        # giving the queue's broker lock away, so two members never consume one queue at once.
        self.consume_lock = threading.Lock()
        # Orderly dispatch gate: True while a consume task owns the queue's messages, so that
        # pulls do not queue more tasks for it (one backlogged queue, one consume thread).
        self.consuming = False

    @property
    def msg_count(self) -> int:
        """Messages in flight."""
        return len(self._msgs) + len(self._consuming)

    def put_messages(self, msgs: Sequence[MessageExt]) -> bool:
        """Add freshly pulled messages.

        Returns True when an orderly consume task must be dispatched for the queue (messages
        wait and no task owns them yet); the gate stays closed until a task finds none left.
        """
        with self._lock:
            for m in msgs:
                off = m.queue_offset
                if off in self._msgs:
                    continue
                self._msgs[off] = m
                bisect.insort(self._offsets, off)
                self.msg_size += m.body_size
                self.queue_offset_max = max(self.queue_offset_max, off)
            self.last_pull_time = time.monotonic()
            dispatch = bool(self._offsets) and not self.consuming
            if dispatch:
                self.consuming = True
            return dispatch

    def max_span(self) -> int:
        """Distance between the largest and smallest offset in flight (flow control)."""
        with self._lock:
            return self._offsets[-1] - self._offsets[0] if self._offsets else 0

    def mark_consuming(self, msgs: Sequence[MessageExt]) -> None:
        """Record when consumption of ``msgs`` began (for the consume timeout)."""
        now = time.monotonic()
        with self._lock:
            for m in msgs:
                self._started[m.queue_offset] = now

    def expired(self, timeout_s: float) -> list[MessageExt]:
        """Messages whose consumption began more than ``timeout_s`` ago."""
        now = time.monotonic()
        with self._lock:
            return [
                self._msgs[off]
                for off, began in self._started.items()
                if now - began > timeout_s and off in self._msgs
            ]

    def remove_messages(self, msgs: Sequence[MessageExt]) -> int:
        """Drop consumed messages; returns the offset to commit (-1 when nothing was pulled)."""
        with self._lock:
            for m in msgs:
                off = m.queue_offset
                found = self._msgs.pop(off, None)
                if found is not None:
                    i = bisect.bisect_left(self._offsets, off)
                    del self._offsets[i]
                    self.msg_size -= found.body_size
                self._started.pop(off, None)
            self.last_consume_time = time.monotonic()
            if self._offsets:
                return self._offsets[0]
            return self.queue_offset_max + 1 if self.queue_offset_max >= 0 else -1

    # -- orderly -----------------------------------------------------------------------------

    def take_messages(self, batch_size: int) -> list[MessageExt]:
        """Orderly: take the next ``batch_size`` messages out for the listener."""
        with self._lock:
            taken: list[MessageExt] = []
            while self._offsets and len(taken) < batch_size:
                off = self._offsets.pop(0)
                m = self._msgs.pop(off)
                self._consuming[off] = m
                taken.append(m)
            if not taken:
                self.consuming = False  # the task ends: the next pull dispatches a new one
            return taken

    def commit(self) -> int:
        """Orderly: the taken messages were consumed; returns the offset to commit (or -1)."""
        with self._lock:
            if not self._consuming:
                return -1
            last = max(self._consuming)
            for m in self._consuming.values():
                self.msg_size -= m.body_size
            self._consuming.clear()
            self.last_consume_time = time.monotonic()
            return last + 1

    def make_message_to_consume_again(self, msgs: Sequence[MessageExt]) -> None:
        """Orderly: put taken messages back to be consumed again, in order."""
        with self._lock:
            for m in msgs:
                off = m.queue_offset
                if self._consuming.pop(off, None) is not None:
                    self._msgs[off] = m
                    bisect.insort(self._offsets, off)

    def rollback(self) -> None:
        """Orderly, auto-commit off: every message taken since the last commit is consumed
        again, from the first."""
        with self._lock:
            for off, m in self._consuming.items():
                self._msgs[off] = m
                bisect.insort(self._offsets, off)
            self._consuming.clear()

    def is_lock_expired(self) -> bool:
        """Orderly: the queue lock was not renewed recently enough to consume under it."""
        return time.monotonic() - self.last_lock_time > REBALANCE_LOCK_MAX_LIVE_TIME_S

    def has_temp_message(self) -> bool:
        """Whether messages wait to be consumed."""
        with self._lock:
            return bool(self._offsets)

    def clear(self) -> None:
        """Forget everything (the queue was rebalanced away)."""
        with self._lock:
            self._offsets.clear()
            self._msgs.clear()
            self._consuming.clear()
            self._started.clear()
            self.msg_size = 0
