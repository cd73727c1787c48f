"""The broker hosting its delay scheduler: choice by name, delivery thread, restarts, crashes."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import pytest
from mqtest import FakeClock, wait_until

from mqcore import Broker, Kernel, Message
from mqcore.atomicfile import backup_path
from mqcore.broker.topics import SCHEDULE_TOPIC
from mqcore.errors import NotRegisteredError
from mqcore.hookspecs import hookimpl
from mqcore.plugins.delay_levels import DELAY_OFFSET_FILE, DelayLevelScheduler

pytestmark = pytest.mark.timeout(60)


def _open(path: Path, store_name: str, clock: FakeClock, **kw: Any) -> Broker:
    b = Broker(path, store=store_name, delay_scheduler_options={"clock": clock}, **kw)
    b.create_topic("T", queue_nums=2)
    return b


def _bodies(b: Broker, topic: str = "T", queue_id: int = 0) -> list[bytes]:
    return [m.body for m in b.pull_message("g", topic, queue_id, 0, 1000).messages]


def test_default_scheduler_is_delay_levels(tmp_path: Path, store_name: str) -> None:
    with Broker(tmp_path, store=store_name) as b:
        assert isinstance(b.delay_scheduler, DelayLevelScheduler)
        assert b.delay_scheduler.max_level == 18
        names = {t.name for t in __import__("threading").enumerate()}
        assert "mqcore-delay-broker-a" in names


def test_unknown_scheduler_lists_the_registered_ones(tmp_path: Path, store_name: str) -> None:
    with pytest.raises(NotRegisteredError, match="registered delay_schedulers: delay_levels"):
        Broker(tmp_path / "b", store=store_name, delay_scheduler="wheel")
    assert not (tmp_path / "b" / "store").exists()  # failed before opening anything


class _Mine(DelayLevelScheduler):
    name = "twice"

    def delay_ms(self, delay_level: int) -> int:
        return 2 * super().delay_ms(delay_level)


class _Plugin:
    @hookimpl
    def mqcore_register_delay_schedulers(self, register: Any) -> None:
        register("twice", _Mine)


def test_scheduler_is_chosen_by_name(tmp_path: Path, store_name: str) -> None:
    kernel = Kernel(plugins=[_Plugin()])
    assert kernel.names("delay_scheduler") == ["delay_levels", "twice"]
    assert kernel.names("timer_scheduler") == ["timer"]
    with Broker(
        tmp_path, store=store_name, kernel=kernel, delay_scheduler="twice",
        message_delay_level="3s 7s",
    ) as b:  # fmt: skip
        assert type(b.delay_scheduler) is _Mine and b.delay_scheduler.delays == (3000, 7000)
        assert b.delay_scheduler.deliver_at(5, 0) == 14_000


def test_configured_levels_and_clamping(tmp_path: Path, store_name: str) -> None:
    clock = FakeClock()
    with _open(tmp_path, store_name, clock, message_delay_level="2s 4s") as b:
        store: Any = b.store
        # The store stamps deliver times by it too (the mmap store keeps it with its parts).
        assert (store._parts.delays if store_name == "mmap" else store._delays) == (2000, 4000)
        (r,) = b.send_message("T", 1, [Message(topic="T", body=b"x", delay_level=9)])
        assert b.get_max_offset(SCHEDULE_TOPIC, 1) == 1 and _bodies(b, "T", 1) == []
        clock.now = r.store_timestamp + 3999
        b.delay_scheduler.run_due()
        assert _bodies(b, "T", 1) == [] and b.get_max_offset("T", 1) == 0
        clock.now = r.store_timestamp + 4000
        b.delay_scheduler.run_due()
        assert _bodies(b, "T", 1) == [b"x"]


def test_sending_to_the_schedule_topic_is_forbidden(tmp_path: Path, store_name: str) -> None:
    with _open(tmp_path, store_name, FakeClock()) as b, pytest.raises(Exception, match="forbidden"):
        b.send_message(SCHEDULE_TOPIC, 0, [Message(topic=SCHEDULE_TOPIC, body=b"x")])


def test_delivery_thread_delivers_wakes_pulls_and_persists(tmp_path: Path, store_name: str) -> None:
    clock = FakeClock()
    with _open(tmp_path, store_name, clock, flush_delay_offset_interval_ms=50) as b:
        (r,) = b.send_message("T", 0, [Message(topic="T", body=b"x", delay_level=2)])
        got: list[Any] = []

        def pull() -> None:
            got.append(b.pull_message("g", "T", 0, 0, suspend_timeout_ms=10_000))

        import threading

        t = threading.Thread(target=pull)
        t.start()
        time.sleep(0.3)  # the thread has had three passes: nothing is due yet
        assert not got
        started = time.monotonic()
        clock.now = r.store_timestamp + 5000
        t.join(timeout=10)
        assert got and [m.body for m in got[0].messages] == [b"x"]
        assert time.monotonic() - started < 5
        path = tmp_path / "config" / DELAY_OFFSET_FILE
        assert wait_until(lambda: path.exists() and '"2": 1' in path.read_text())


def test_exactly_once_across_restarts_at_any_point(tmp_path: Path, store_name: str) -> None:
    """Restart after every few deliveries, mid-level included; each message arrives once."""
    rnd = random.Random(7)
    clock = FakeClock()
    sent: dict[int, list[bytes]] = {1: [], 2: [], 3: []}
    b = _open(tmp_path, store_name, clock)
    # Half a second ahead from here: opening a broker on a loaded machine took longer than that.
    clock.now = int(time.time() * 1000) + 500
    try:
        for i in range(30):
            level = rnd.choice([1, 2, 3])
            body = b"L%d-%02d" % (level, i)
            (r,) = b.send_message("T", 0, [Message(topic="T", body=body, delay_level=level)])
            assert r.store_timestamp < clock.now
            sent[level].append(body)
        # Each round delivers at most `budget` messages (a put failure stops a level where it
        # is), then the broker restarts; the clock moves on in 2-second steps.
        for rounds in range(1, 60):  # noqa: B007 - reported on failure
            budget = [rnd.randint(0, 4)]
            real = b.delay.deliver

            def limited(*a: Any, _real: Any = real, _budget: list[int] = budget, **kw: Any) -> None:
                if _budget[0] <= 0:
                    raise OSError("stop here")
                _budget[0] -= 1
                _real(*a, **kw)

            b.delay.deliver = limited  # type: ignore[method-assign]
            b.delay_scheduler.run_due()
            b.close()
            clock.now += 3000
            b = _open(tmp_path, store_name, clock)
            if len(_bodies(b)) == 30:
                break
        got = _bodies(b)
        everything = [x for bodies in sent.values() for x in bodies]
        assert sorted(got) == sorted(everything), rounds  # all, and each once
        for level, bodies in sent.items():
            assert [x for x in got if x.startswith(b"L%d-" % level)] == bodies  # in order
        b.delay_scheduler.run_due()
        assert len(_bodies(b)) == 30
    finally:
        b.close()


def test_after_a_crash_only_the_unpersisted_window_repeats(tmp_path: Path, store_name: str) -> None:
    clock = FakeClock()
    path = tmp_path / "config" / DELAY_OFFSET_FILE
    expected = [b"%d" % i for i in range(6)]
    with _open(tmp_path, store_name, clock) as b:
        budget = [2]
        real = b.delay.deliver

        def limited(*a: Any, **kw: Any) -> None:
            if budget[0] <= 0:
                raise OSError("stop here")
            budget[0] -= 1
            real(*a, **kw)

        # The delivery thread runs too: whoever delivers, the budget holds.
        b.delay.deliver = limited  # type: ignore[method-assign]
        b.send_message("T", 0, [Message(topic="T", body=x, delay_level=1) for x in expected])
        clock.now += 60_000
        b.delay_scheduler.run_due()
        assert _bodies(b) == expected[:2]
        b.delay_scheduler.persist()  # the last periodic write before the "crash"
        snapshot = path.read_bytes()
        assert b'"1": 2' in snapshot
        b.delay.deliver = real  # type: ignore[method-assign]
        b.delay_scheduler.run_due()
        assert _bodies(b) == expected
    # A crash leaves the file as it was at the last write: restore that state.
    path.write_bytes(snapshot)
    backup_path(path).unlink(missing_ok=True)
    with _open(tmp_path, store_name, clock) as b:
        b.delay_scheduler.run_due()
        # Messages 2..5 were delivered after the last write: they come again, none is lost.
        assert _bodies(b) == expected + expected[2:]
        assert b.delay_scheduler.offsets()[1] == 6


class _FailingHook:
    @hookimpl
    def mqcore_messages_stored(self, topic: str, queue_id: int, results: Any) -> None:
        if topic == "T":
            raise RuntimeError("hook broke")


def test_a_failing_hook_after_delivery_does_not_deliver_twice(
    tmp_path: Path, store_name: str
) -> None:
    clock = FakeClock()
    kernel = Kernel(plugins=[_FailingHook()])
    with Broker(
        tmp_path, store=store_name, kernel=kernel, delay_scheduler_options={"clock": clock}
    ) as b:
        b.create_topic("T", queue_nums=1)
        b.send_message("T", 0, [Message(topic="T", body=b"x", delay_level=1)])
        clock.now += 60_000
        b.delay_scheduler.run_due()
        b.delay_scheduler.run_due()
        assert _bodies(b) == [b"x"] and b.delay_scheduler.offsets()[1] == 1
