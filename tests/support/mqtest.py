"""Helpers shared by test modules (importable as ``mqtest``: pytest puts this folder on the path).

Fixtures live in ``tests/conftest.py``; plain functions and classes that tests call directly
live here, so that each test module does not define its own copy.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from typing import Any


def wait_until(cond: Callable[[], bool], timeout: float = 10.0, interval: float = 0.01) -> bool:
    """Poll ``cond`` every ``interval`` seconds until it is true or ``timeout`` seconds pass;
    returns its last value (tests assert on it, so a timeout fails the test)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(interval)
    return cond()


class FakeClock:
    """A settable clock in ms, starting half a second ahead of the wall time.

    Stores stamp messages with the wall time. A clock behind a store timestamp would make
    that message due at once (a due time more than one delay ahead means a clock gone back,
    for the scheduler as for RocketMQ), so the clock starts ahead of the messages a test
    sends soon after, and behind their first level's due time (1 s).
    """

    def __init__(self, now: int | None = None) -> None:
        self.now = int(time.time() * 1000) + 500 if now is None else now

    def __call__(self) -> int:
        return self.now


def fast_clock(speed: int = 10_000) -> Callable[[], int]:
    """Wall time (ms) running ``speed`` times faster from now: delays pass in milliseconds."""
    start = time.time()
    return lambda: int((start + (time.time() - start) * speed) * 1000)


def as_foreground() -> None:
    """``preexec_fn`` of a child a test stops with Ctrl-C: SIGINT at its default, as in a
    shell's foreground command. A runner started in the background ignores SIGINT, and its
    children would inherit that (Python then installs no KeyboardInterrupt handler)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def group_member(
    broker: Any, name: str, sink: list[Any], lock: threading.Lock, expression: str = "*"
) -> Any:
    """A push consumer of group ``cg`` on topic ``T`` from the first offset, named ``name``,
    that appends what it consumes to ``sink`` under ``lock``; not started."""
    from mqcore import ConsumeConcurrentlyStatus, ConsumeFromWhere, PushConsumer

    def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        with lock:
            sink.extend(msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    c = PushConsumer(
        "cg",
        broker=broker,
        instance_name=name,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    )
    c.subscribe("T", expression)
    c.register_message_listener(listener)
    return c
