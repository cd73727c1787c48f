"""Page warmer: fault in the pages ahead of the commit-log writer, on another thread.

Writing into a freshly mapped segment costs a page fault per 4 KiB page, paid by the
producer while it holds the GIL and the store's write lock. RocketMQ warms a new segment by
writing zeros into every page (``warmMappedFileEnable``). Here a background thread keeps a
window ahead of the write position populated with ``madvise(MADV_POPULATE_WRITE)`` (Linux
5.14+), called through ctypes so the GIL is released meanwhile: the producer's copy then
lands on mapped pages, and the faults happen on another core. Pages behind the flush point
are dropped again by :meth:`CommitLog.release_cold_pages`, so the resident set stays flat.

Where the call is unavailable (another OS, an older kernel), warming turns itself off and
writes simply take their faults.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import threading
from collections.abc import Callable
from typing import Any

from mqcore.logs import get_logger

__all__ = ["MADV_POPULATE_WRITE", "PageWarmer", "populate_write"]

log = get_logger(__name__)

MADV_POPULATE_WRITE = 23  # linux/mman.h
WINDOW = 32 * 1024 * 1024  # bytes kept populated ahead of the writer
STEP = 4 * 1024 * 1024  # bytes per madvise call (keeps close() waiting briefly at most)

_madvise: Any = None
try:
    _libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    _madvise = _libc.madvise
    _madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    _madvise.restype = ctypes.c_int
except (OSError, AttributeError):  # pragma: no cover - not a glibc/musl system
    _madvise = None


def populate_write(address: int, length: int) -> bool:
    """Prefault ``length`` bytes at ``address`` writable; False when the kernel cannot."""
    if _madvise is None or length <= 0:
        return False
    if _madvise(address, length, MADV_POPULATE_WRITE) == 0:
        return True
    err = ctypes.get_errno()
    if err not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        log.debug("page_warming_failed", errno=err)
    return False


class PageWarmer:
    """The warming thread of a commit log.

    :param target: returns the segment being written (a MappedFile) or None; called on the
        warmer thread, so it must only read attributes.
    """

    def __init__(self, target: Callable[[], Any], window: int = WINDOW) -> None:
        self._target = target
        self.window = window
        self._wake = threading.Event()
        self._stop = False
        self.enabled = _madvise is not None
        self._thread = threading.Thread(target=self._run, name="mqcore-mmap-warm", daemon=True)

    def start(self) -> PageWarmer:
        """Start the thread (a no-op where warming is unavailable); returns ``self``."""
        if self.enabled:
            self._thread.start()
        return self

    def wake(self) -> None:
        """The writer moved on: warm further ahead."""
        self._wake.set()

    def _run(self) -> None:
        while not self._stop:
            self._wake.wait(0.5)
            self._wake.clear()
            if self._stop:
                return
            mf = self._target()
            if mf is None:
                continue
            goal = min(mf.file_size, mf.wrote_position + self.window)
            while not self._stop and mf.warmed_position < goal:
                if not mf.warm(min(goal, mf.warmed_position + STEP)):
                    if mf.warm_failed:
                        self.enabled = False
                        log.info("page_warming_unavailable")
                        return
                    break

    def stop(self) -> None:
        """Stop and join the thread."""
        self._stop = True
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
