"""The writer lock of a store directory: one writing process at a time.

A store directory holds a lock file (``LOCK``) that names the pid of the process writing it.
The lock itself is an ``fcntl.flock`` on that file, so the kernel releases it when the holder
dies, however it dies: a process killed with SIGKILL never leaves a stale lock behind, and the
next writer simply takes it over. The pid in the file is only there to tell a second writer
*who* holds the lock.

Read-only opens take no lock at all; any number of readers may share a directory with its
writer::

    with StoreLock(path):
        ...  # write the store
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path
from types import TracebackType

from mqcore.errors import StoreError, StoreLockedError
from mqcore.logs import get_logger

__all__ = ["LOCK_FILE_NAME", "StoreLock", "no_write_access", "writer_alive"]

log = get_logger(__name__)

LOCK_FILE_NAME = "LOCK"


class StoreLock:
    """An exclusive, process-wide writer lock on ``directory`` (a context manager).

    :meth:`acquire` raises :class:`~mqcore.errors.StoreLockedError` naming the directory and
    the holder's pid when another live process holds it. The lock is tied to an open file
    descriptor; it is released by :meth:`release` or when the process exits.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.path = self.directory / LOCK_FILE_NAME
        self._fd: int | None = None

    @property
    def locked(self) -> bool:
        """Whether this object currently holds the lock."""
        return self._fd is not None

    def acquire(self) -> StoreLock:
        """Take the lock or raise :class:`StoreLockedError`; returns ``self``."""
        if self._fd is not None:
            return self
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read_pid(fd)
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            who = f"process {holder}" if holder is not None else "another process"
            error = StoreLockedError(
                f"store directory {str(self.directory)!r} is locked by {who} "
                f"(lock file {str(self.path)!r}); stop that writer first, or open the store "
                f"with read_only=True"
            )
            error.directory = str(self.directory)  # type: ignore[attr-defined]
            error.pid = holder  # type: ignore[attr-defined]
            raise error from None
        # We own the lock now; whatever pid the file names is a dead holder's.
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        log.debug("store_lock_acquired", directory=str(self.directory), pid=os.getpid())
        return self

    def release(self) -> None:
        """Give the lock up (idempotent). The lock file stays; it is reused by the next writer."""
        fd = self._fd
        if fd is None:
            return
        self._fd = None
        try:
            # Clear our pid first, so that a reader of the file never blames a gone process.
            os.ftruncate(fd, 0)
        except OSError:
            pass
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
        log.debug("store_lock_released", directory=str(self.directory))

    def holder_pid(self) -> int | None:
        """The pid written in the lock file, if any (it may belong to a dead process)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            return _read_pid(fd)
        finally:
            os.close(fd)

    def __enter__(self) -> StoreLock:
        return self.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "held" if self.locked else "free"
        return f"StoreLock({str(self.directory)!r}, {state})"


#: errno values that mean "this process may not write here"
_NO_WRITE = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})


def no_write_access(directory: str | os.PathLike[str], exc: OSError) -> StoreError | None:
    """The error to raise when opening a store for writing failed with ``exc`` because the
    directory (or a file in it) may not be written; None for any other failure."""
    if exc.errno not in _NO_WRITE:
        return None
    where = f" ({exc.filename})" if exc.filename else ""
    return StoreError(
        f"cannot open the store at {str(directory)!r} for writing: {exc.strerror}{where}; "
        "open it with read_only=True to read it, or run the writer as a user who may write "
        "the directory"
    )


def writer_alive(directory: str | os.PathLike[str]) -> bool | None:
    """Whether the lock file of ``directory`` names a live process (its writer): True, False
    (a pid whose process is gone: the last writer died), or None (no writer named)."""
    pid = StoreLock(directory).holder_pid()
    if pid is None:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, owned by someone else
    return True


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
