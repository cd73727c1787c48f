"""The store directory writer lock."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from mqcore.errors import StoreLockedError
from mqcore.lockfile import LOCK_FILE_NAME, StoreLock

_HOLDER = textwrap.dedent(
    """
    import sys, time
    from mqcore.lockfile import StoreLock
    lock = StoreLock(sys.argv[1]).acquire()
    print("locked", flush=True)
    time.sleep(60)
    """
)


@pytest.fixture
def holder(tmp_path):
    """A child process holding the lock on ``tmp_path / "store"``; killed at teardown."""
    directory = tmp_path / "store"
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(directory)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        # structlog's default configuration also prints to stdout; wait for our marker.
        for line in proc.stdout:
            if line.strip() == "locked":
                break
        else:
            pytest.fail("lock holder exited before taking the lock")
        yield directory, proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


def test_lock_writes_pid_and_release_clears_it(tmp_path):
    """The lock file names the holder while held and is emptied on release."""
    lock = StoreLock(tmp_path / "d")
    with lock:
        assert lock.locked
        assert lock.holder_pid() == os.getpid()
        assert (tmp_path / "d" / LOCK_FILE_NAME).read_text().strip() == str(os.getpid())
    assert not lock.locked
    assert lock.holder_pid() is None
    lock.release()  # idempotent


def test_second_lock_in_same_process_is_refused(tmp_path):
    """flock conflicts between two opens even within one process."""
    with StoreLock(tmp_path), pytest.raises(StoreLockedError) as info:
        StoreLock(tmp_path).acquire()
    assert str(os.getpid()) in str(info.value)
    assert info.value.pid == os.getpid()
    # Once released, it can be taken again.
    with StoreLock(tmp_path) as again:
        assert again.locked


@pytest.mark.timeout(30)
def test_second_writer_gets_error_naming_directory_and_pid(holder):
    """A live holder in another process blocks us with a clear error."""
    directory, proc = holder
    with pytest.raises(StoreLockedError) as info:
        StoreLock(directory).acquire()
    message = str(info.value)
    assert str(directory) in message
    assert f"process {proc.pid}" in message
    assert "read_only=True" in message
    assert info.value.directory == str(directory)


@pytest.mark.timeout(30)
def test_killed_holder_lock_is_taken_over(holder):
    """SIGKILL leaves a stale pid in the file, but the lock itself is free."""
    directory, proc = holder
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    lock = StoreLock(directory)
    assert lock.holder_pid() == proc.pid  # stale
    with lock:
        assert lock.holder_pid() == os.getpid()


def test_repr_and_reentrant_acquire(tmp_path):
    """acquire() on a held lock is a no-op; repr shows the state."""
    lock = StoreLock(tmp_path)
    assert "free" in repr(lock)
    assert lock.acquire() is lock
    assert lock.acquire() is lock
    assert "held" in repr(lock)
    lock.release()
