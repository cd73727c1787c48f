"""Queue locks for orderly consumption (RocketMQ's RebalanceLockManager)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

from mqcore.message import MessageQueue

__all__ = ["RebalanceLockManager"]


class RebalanceLockManager:
    """Which client of a group holds each queue; a lock expires unless renewed."""

    def __init__(self, max_live_time_ms: int = 60_000) -> None:
        self.max_live_time_ms = max_live_time_ms
        self._lock = threading.Lock()
        self._table: dict[tuple[str, MessageQueue], tuple[str, int]] = {}

    def try_lock_batch(
        self, group: str, mqs: Iterable[MessageQueue], client_id: str, now_ms: int | None = None
    ) -> set[MessageQueue]:
        """Lock (or renew) each queue free or already held by ``client_id``; returns those held."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        locked: set[MessageQueue] = set()
        with self._lock:
            for mq in mqs:
                holder = self._table.get((group, mq))
                if (
                    holder is None
                    or holder[0] == client_id
                    or now - holder[1] > self.max_live_time_ms
                ):
                    self._table[(group, mq)] = (client_id, now)
                    locked.add(mq)
        return locked

    def unlock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> None:
        """Release the queues ``client_id`` holds."""
        with self._lock:
            for mq in mqs:
                holder = self._table.get((group, mq))
                if holder is not None and holder[0] == client_id:
                    del self._table[(group, mq)]

    def is_locked(
        self, group: str, mq: MessageQueue, client_id: str, now_ms: int | None = None
    ) -> bool:
        """Whether ``client_id`` holds a live lock on ``mq``."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        with self._lock:
            holder = self._table.get((group, mq))
        return (
            holder is not None
            and holder[0] == client_id
            and now - holder[1] <= self.max_live_time_ms
        )
