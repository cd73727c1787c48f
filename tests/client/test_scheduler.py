"""Scheduler: a client's delayed tasks run in due order on one thread, and stop with it."""

from __future__ import annotations

import threading
import time

import pytest
from mqtest import wait_until

from mqcore.client.scheduler import Scheduler

pytestmark = pytest.mark.timeout(30)


def test_tasks_run_in_due_order_after_their_delay() -> None:
    s = Scheduler("test-scheduler")
    ran: list[tuple[str, float]] = []
    begin = time.monotonic()
    try:
        s.schedule(0.3, lambda: ran.append(("late", time.monotonic() - begin)))
        s.schedule(0.1, lambda: ran.append(("early", time.monotonic() - begin)))
        s.schedule(0.0, lambda: 1 / 0)  # a failing task does not stop the others
        assert wait_until(lambda: len(ran) == 2, timeout=5)
    finally:
        s.shutdown()
    assert [name for name, _ in ran] == ["early", "late"]
    assert ran[0][1] >= 0.1 and ran[1][1] >= 0.3


def test_shutdown_drops_pending_tasks_and_stops_the_thread() -> None:
    s = Scheduler("test-scheduler")
    ran = threading.Event()
    s.schedule(0.2, ran.set)
    assert s.pending() == 1
    s.shutdown()
    assert not s.schedule(0.0, ran.set)  # refused once shut down
    time.sleep(0.3)
    assert not ran.is_set()
    assert all(t.name != "test-scheduler" for t in threading.enumerate())
