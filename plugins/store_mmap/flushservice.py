"""Background services that move data to disk: flush (both modes) and commit (transient pool).

- ASYNC_FLUSH (RocketMQ's FlushRealTimeService): a thread flushes everything every
  ``interval`` seconds; ``put`` never waits. A killed process loses nothing (the data is in the
  kernel's page cache); a power loss may lose the last interval.
- SYNC_FLUSH (RocketMQ's GroupCommitService): a writer asks for its offset to be on disk and
  waits. The flush thread takes every request queued so far and serves them with *one*
  ``fdatasync``, so under concurrency fsyncs per second stay far below puts per second.
  Writers that were just served need a moment to come back with their next put, and an
  fsync started meanwhile serves only the few that made it; so when several writers have
  recently been waiting at once, the thread holds a flush for up to ``group_delay`` until
  as many wait again (PostgreSQL's ``commit_delay`` with ``commit_siblings``). A lone
  writer is never held.
  A wait longer than the timeout raises :class:`~mqcore.errors.FlushTimeoutError` (the data
  stays written; only its durability is unconfirmed).
- Transient pool (RocketMQ's CommitRealTimeService): a thread copies the in-memory write
  buffers into the files every 200 ms.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from mqcore.errors import FlushTimeoutError, StoreError
from mqcore.logs import get_logger

__all__ = ["CommitService", "FlushService"]

log = get_logger(__name__)

COMMIT_INTERVAL = 0.2  # RocketMQ's commitIntervalCommitLog


class FlushService:
    """The flush thread of a store.

    :param flush_log: flushes the commit log, returns the flushed commit-log offset.
    :param flush_all: flushes everything (commit log, consume queues, index, checkpoint).
    :param interval: seconds between periodic full flushes.
    :param sync: group commit for :meth:`wait_flushed`.
    :param timeout: seconds a SYNC_FLUSH writer waits before :class:`FlushTimeoutError`.
    :param group_delay: longest wait, in seconds, for the usual number of concurrent writers
        to queue up before a group commit (0 disables it).
    """

    #: seconds over which the usual number of concurrent writers is measured
    SIBLINGS_WINDOW = 1.0

    def __init__(
        self,
        flush_log: Callable[[], int],
        flush_all: Callable[[], object],
        *,
        interval: float,
        sync: bool,
        timeout: float,
        group_delay: float = 0.0,
        name: str = "mqcore-mmap-flush",
    ) -> None:
        self._flush_log = flush_log
        self._flush_all = flush_all
        self.interval = interval
        self.sync = sync
        self.timeout = timeout
        self.group_delay = group_delay
        lock = threading.Lock()
        # Two conditions on one lock: writers wait on ``_flushed_cond`` and wake only the
        # flush thread (``_work``), so a new request never wakes the other waiting writers.
        self._flushed_cond = threading.Condition(lock)
        self._work = threading.Condition(lock)
        self._requested = 0
        self._flushed = 0
        self._error: BaseException | None = None
        self._stopping = False
        # Offsets of the writers waiting for a flush that has not covered them yet, and the
        # most seen at once in the current and the previous window: the "siblings" a delayed
        # group commit waits for. (A count of blocked threads would include writers already
        # served but not yet scheduled.)
        self._pending: list[int] = []
        self._peak = 0
        self._peak_before = 0
        #: fsyncs of the commit log made for waiting writers (group commits)
        self.group_commits = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> FlushService:
        """Start the thread; returns ``self``."""
        self._thread.start()
        return self

    def wait_flushed(self, offset: int) -> None:
        """SYNC_FLUSH: block until the commit log is on disk up to ``offset``."""
        with self._flushed_cond:
            if self._flushed >= offset:
                return
            if offset > self._requested:
                self._requested = offset
            pending = self._pending
            pending.append(offset)
            if len(pending) > self._peak:
                self._peak = len(pending)
            self._work.notify()
            try:
                self._wait(offset, time.monotonic() + self.timeout)
            except BaseException:
                if offset in self._pending:
                    self._pending.remove(offset)
                raise

    def _wait(self, offset: int, deadline: float) -> None:
        """Wait (lock held) until ``offset`` is flushed; raise on error, close or timeout."""
        while self._flushed < offset:
            if self._error is not None:
                raise StoreError(f"flushing the commit log failed: {self._error}") from (
                    self._error
                )
            if self._stopping:
                raise StoreError("the store was closed while a put waited for its flush")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise FlushTimeoutError(
                    f"commit log not flushed up to offset {offset} within "
                    f"{self.timeout * 1000:.0f} ms (sync_flush_timeout_ms); the messages "
                    "are stored but their durability is not confirmed"
                )
            self._flushed_cond.wait(remaining)

    def wake(self) -> None:
        """Ask for a flush soon (used before waiting on an explicit ``flush()``)."""
        with self._work:
            self._work.notify()

    def _siblings(self, now: float, window_end: float) -> tuple[int, float]:
        """Writers to wait for before a group commit (lock held), and the window's new end."""
        if now >= window_end:
            # A whole window without a flush request: what was seen before it is stale.
            idle = now >= window_end + self.SIBLINGS_WINDOW
            self._peak_before = 0 if idle else self._peak
            self._peak = len(self._pending)
            window_end = now + self.SIBLINGS_WINDOW
        return max(self._peak, self._peak_before), window_end

    def _gather(self, siblings: int) -> None:
        """Hold the flush (lock held) until ``siblings`` writers wait, or ``group_delay``."""
        if siblings < 2 or len(self._pending) >= siblings:
            return
        deadline = time.monotonic() + self.group_delay
        while not self._stopping and len(self._pending) < siblings:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._work.wait(remaining)

    def _run(self) -> None:
        work = self._work
        next_full = time.monotonic() + self.interval
        window_end = time.monotonic() + self.SIBLINGS_WINDOW
        while True:
            with work:
                while not self._stopping and self._requested <= self._flushed:
                    remaining = next_full - time.monotonic()
                    if remaining <= 0:
                        break
                    work.wait(remaining)
                if self._stopping:
                    return
                want_log = self._requested > self._flushed
                if want_log and self.group_delay:
                    siblings, window_end = self._siblings(time.monotonic(), window_end)
                    self._gather(siblings)
            try:
                if want_log:
                    # Everything written by now is covered: one fsync for every waiter.
                    flushed = self._flush_log()
                    self.group_commits += 1
                    with work:
                        self._flushed = max(self._flushed, flushed)
                        self._pending = [o for o in self._pending if o > self._flushed]
                        self._flushed_cond.notify_all()
                if time.monotonic() >= next_full:
                    self._flush_all()
                    next_full = time.monotonic() + self.interval
            except BaseException as exc:  # keep serving: the next put will see the error
                log.error("flush_failed", error=str(exc))
                with work:
                    self._error = exc
                    self._flushed_cond.notify_all()
                time.sleep(min(self.interval, 0.5))
                with work:
                    self._error = None

    def stop(self) -> None:
        """Stop and join the thread (waiting writers get an error)."""
        with self._work:
            self._stopping = True
            self._work.notify_all()
            self._flushed_cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout=30)


class CommitService:
    """Transient pool: copies write buffers into the files every ``interval`` seconds."""

    def __init__(
        self,
        commit: Callable[[], object],
        *,
        interval: float = COMMIT_INTERVAL,
        name: str = "mqcore-mmap-commit",
    ) -> None:
        self._commit = commit
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> CommitService:
        """Start the thread; returns ``self``."""
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._commit()
            except BaseException as exc:
                log.error("commit_failed", error=str(exc))

    def stop(self) -> None:
        """Stop and join the thread."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
