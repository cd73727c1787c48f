"""A bounded pool of worker threads for request handlers.

Lighter than :class:`concurrent.futures.ThreadPoolExecutor` per job (no future, no result
object): the server hands a handler's result back to its event loop itself. Threads start on
demand up to ``size`` and are joined by :meth:`WorkerPool.shutdown`.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from mqcore.errors import InvalidArgumentError, RemotingError
from mqcore.logs import get_logger

__all__ = ["WorkerPool"]

log = get_logger(__name__)

_Job = tuple[Callable[..., Any], tuple[Any, ...]] | None


class WorkerPool:
    """``size`` threads named ``name-N`` running submitted calls in submission order."""

    def __init__(self, size: int, name: str) -> None:
        if size < 1:
            raise InvalidArgumentError(f"a worker pool needs at least one thread, got {size}")
        self.size = size
        self.name = name
        self._queue: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._idle = 0
        self._closed = False

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on a worker; exceptions are logged, never raised here.

        :raises RuntimeError: the pool is shut down.
        """
        if self._closed:
            raise RemotingError("the worker pool is shut down")
        self._queue.put((fn, args))
        if self._idle <= 0 and len(self._threads) < self.size:
            with self._lock:
                if self._idle <= 0 and len(self._threads) < self.size and not self._closed:
                    thread = threading.Thread(
                        target=self._run, name=f"{self.name}-{len(self._threads)}", daemon=True
                    )
                    self._threads.append(thread)
                    thread.start()

    def _run(self) -> None:
        get = self._queue.get
        while True:
            with self._lock:
                self._idle += 1
            job = get()
            with self._lock:
                self._idle -= 1
            if job is None:
                return
            fn, args = job
            try:
                fn(*args)
            except Exception:
                log.exception("remoting_worker_job_failed")

    def shutdown(self, timeout: float | None = 10.0) -> None:
        """Drop queued jobs, stop every thread after its current job, and join them."""
        with self._lock:
            self._closed = True
            threads = list(self._threads)
        try:
            while True:
                self._queue.get_nowait()
        except queue.Empty:
            pass
        for _ in threads:
            self._queue.put(None)
        current = threading.current_thread()
        for thread in threads:
            if thread is not current:
                thread.join(timeout)
