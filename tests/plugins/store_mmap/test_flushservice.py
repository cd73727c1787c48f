"""FlushService's group commit: one flush per round, delayed only for concurrent writers."""

from __future__ import annotations

import threading
import time

import pytest

from mqcore.errors import FlushTimeoutError
from mqcore.plugins.store_mmap.flushservice import FlushService


class FakeLog:
    """A commit log whose flush covers everything written so far and counts its calls."""

    def __init__(self) -> None:
        self.written = 0
        self.flushes = 0
        self.lock = threading.Lock()

    def write(self, size: int) -> int:
        with self.lock:
            self.written += size
            return self.written

    def flush(self) -> int:
        with self.lock:
            self.flushes += 1
            return self.written


def _service(log: FakeLog, **kwargs: float) -> FlushService:
    params = {"interval": 10.0, "sync": True, "timeout": 20.0, **kwargs}
    return FlushService(log.flush, lambda: None, **params).start()


@pytest.mark.timeout(30)
def test_a_lone_writer_is_never_held():
    """A single writer's flush starts at once, however long the configured delay."""
    log = FakeLog()
    service = _service(log, group_delay=30.0)
    try:
        started = time.monotonic()
        for _ in range(20):
            service.wait_flushed(log.write(100))
        assert time.monotonic() - started < 5
        assert log.flushes == 20
    finally:
        service.stop()


@pytest.mark.timeout(30)
def test_concurrent_writers_share_one_flush():
    """Four writers that have been waiting together are served by one flush per round."""
    log = FakeLog()
    service = _service(log, group_delay=1.0)
    rounds = 25
    gate = threading.Barrier(4, timeout=10)
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            gate.wait()
            for _ in range(rounds):
                service.wait_flushed(log.write(10))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer) for _ in range(4)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=25)
    finally:
        service.stop()
    assert not errors
    # Held for the siblings, most flushes serve all four writers (about `rounds` flushes on a
    # quiet machine); without the delay an instant flush serves one or two. Half the writes
    # leaves room for a loaded machine, where a slow writer can miss a round now and then.
    assert log.flushes <= 2 * rounds
    assert log.written == 4 * rounds * 10


@pytest.mark.timeout(30)
def test_the_siblings_count_decays_when_writers_leave(monkeypatch):
    """After concurrency ends, a remaining writer stops being held within two windows."""
    monkeypatch.setattr(FlushService, "SIBLINGS_WINDOW", 0.05)
    log = FakeLog()
    service = _service(log, group_delay=0.5)
    try:
        threads = [
            threading.Thread(target=lambda: [service.wait_flushed(log.write(1)) for _ in range(5)])
            for _ in range(4)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=20)
        time.sleep(0.2)  # two windows pass with no writer
        started = time.monotonic()
        for _ in range(5):
            service.wait_flushed(log.write(1))
        # Held for absent siblings, five flushes would take 2.5 s; even the first is not held
        # once a whole window passed without a request.
        assert time.monotonic() - started < 0.4
    finally:
        service.stop()


@pytest.mark.timeout(30)
def test_a_timed_out_writer_leaves_the_pending_list():
    """A writer that times out no longer counts as waiting for the next group commit."""
    gate = threading.Event()
    log = FakeLog()

    def slow_flush() -> int:
        gate.wait(10)
        return log.flush()

    service = FlushService(
        slow_flush, lambda: None, interval=10.0, sync=True, timeout=0.05, group_delay=0.01
    ).start()
    try:
        with pytest.raises(FlushTimeoutError):
            service.wait_flushed(log.write(1))
        gate.set()
        deadline = time.monotonic() + 10
        while service._pending and time.monotonic() < deadline:
            time.sleep(0.01)
        assert service._pending == []
    finally:
        gate.set()
        service.stop()
