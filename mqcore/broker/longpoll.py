"""Long polling: pulls with nothing new wait here until a message arrives or time runs out."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable

__all__ = ["PullWaiters"]


class PullWaiters:
    """Parks pulling threads per queue; :meth:`notify` wakes those of one queue at once.

    A per-queue sequence number closes the race between a waiter checking for new messages
    and a producer notifying just before the waiter parks: the waiter only parks if the
    sequence it read before checking is still current.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seq: dict[Hashable, int] = {}
        self._conds: dict[Hashable, tuple[threading.Condition, list[int]]] = {}
        self._closed = False

    def wait_for(self, key: Hashable, check: Callable[[], bool], timeout_s: float) -> bool:
        """Block until ``check()`` is true (True) or ``timeout_s`` passes / close() (False)."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                seq = self._seq.get(key, 0)
            # check() may take store locks: never call it while holding ours.
            if check():
                return True
            with self._lock:
                if self._closed:
                    return False
                if self._seq.get(key, 0) != seq:
                    continue
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                entry = self._conds.get(key)
                if entry is None:
                    entry = self._conds[key] = (threading.Condition(self._lock), [0])
                cond, count = entry
                count[0] += 1
                try:
                    cond.wait(remaining)
                finally:
                    count[0] -= 1
                    if count[0] == 0:
                        del self._conds[key]

    def notify(self, key: Hashable) -> None:
        """Messages arrived for ``key``: wake its waiters."""
        with self._lock:
            self._seq[key] = self._seq.get(key, 0) + 1
            entry = self._conds.get(key)
            if entry is not None:
                entry[0].notify_all()

    def close(self) -> None:
        """Wake every waiter; later waits return False at once."""
        with self._lock:
            self._closed = True
            for cond, _ in self._conds.values():
                cond.notify_all()
