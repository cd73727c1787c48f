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
        # Callbacks of pulls parked without a thread (the remoting server's event loop).
        self._callbacks: dict[Hashable, set[Callable[[], None]]] = {}
        self._closed = False

    def sequence(self, key: Hashable) -> int:
        """How many times ``key`` was notified (read it before checking for messages)."""
        with self._lock:
            return self._seq.get(key, 0)

    def waiting(self, key: Hashable) -> int:
        """How many pulls are held on ``key`` now: threads in :meth:`wait_for` and callbacks
        registered with :meth:`park`."""
        with self._lock:
            entry = self._conds.get(key)
            return (entry[1][0] if entry is not None else 0) + len(self._callbacks.get(key, ()))

    def park(self, key: Hashable, seq: int, callback: Callable[[], None]) -> bool:
        """Call ``callback()`` (once, from the notifying thread) at the next notice for ``key``.

        Returns False, registering nothing, when ``key`` was notified since ``seq`` was read
        or the waiters are closed: the caller should check for messages again instead.
        """
        with self._lock:
            if self._closed or self._seq.get(key, 0) != seq:
                return False
            self._callbacks.setdefault(key, set()).add(callback)
            return True

    def unpark(self, key: Hashable, callback: Callable[[], None]) -> None:
        """Forget a callback registered with :meth:`park` (its pull timed out or went away)."""
        with self._lock:
            waiting = self._callbacks.get(key)
            if waiting is not None:
                waiting.discard(callback)
                if not waiting:
                    del self._callbacks[key]

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
            parked = self._callbacks.pop(key, None)
        if parked:
            for callback in parked:
                callback()

    def close(self) -> None:
        """Wake every waiter; later waits return False at once."""
        with self._lock:
            self._closed = True
            for cond, _ in self._conds.values():
                cond.notify_all()
            parked = [cb for cbs in self._callbacks.values() for cb in cbs]
            self._callbacks.clear()
        for callback in parked:
            callback()
