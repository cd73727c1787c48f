"""Scheduler: runs a client's delayed tasks on one thread (RocketMQ's ScheduledExecutorService)."""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable

from mqcore.logs import get_logger

__all__ = ["Scheduler"]

log = get_logger(__name__)


class Scheduler:
    """Calls each scheduled function once its delay has passed, one at a time, in due order.

    Tasks must be short (they hand work to a consume pool, or send one request): a consume
    thread never sleeps to wait for a retry, it schedules the retry here instead.
    """

    def __init__(self, name: str) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Callable[[], object]]] = []
        self._seq = itertools.count()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def schedule(self, delay_s: float, fn: Callable[[], object]) -> bool:
        """Run ``fn()`` in ``delay_s`` seconds; False (and nothing scheduled) once shut down."""
        with self._cond:
            if self._stopped:
                return False
            heapq.heappush(self._heap, (time.monotonic() + delay_s, next(self._seq), fn))
            self._cond.notify()
            return True

    def pending(self) -> int:
        """How many tasks wait to run."""
        with self._cond:
            return len(self._heap)

    def shutdown(self) -> None:
        """Drop the tasks not yet due and stop the thread (waits for a running task)."""
        with self._cond:
            self._stopped = True
            self._heap.clear()
            self._cond.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=30)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped:
                    if self._heap:
                        wait = self._heap[0][0] - time.monotonic()
                        if wait <= 0:
                            break
                        self._cond.wait(wait)
                    else:
                        self._cond.wait()
                if self._stopped:
                    return
                _, _, fn = heapq.heappop(self._heap)
            try:
                fn()
            except Exception:  # one failing task must not stop the others
                log.exception("scheduled_task_failed")
