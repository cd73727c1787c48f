"""A slave's data directory restarted as the master after its master is lost (RocketMQ's
manual failover): the timer and delay-level messages pending on the old master are
delivered by the new one on time and once, and those the old master delivered are not
delivered again."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from mqtest import FakeClock, wait_until

from mqcore import Broker, Message
from mqcore.store import SCHEDULE_TOPIC

pytestmark = pytest.mark.timeout(120)

STORE = {"store_options": {"segment_size": 256 * 1024}}
FAST = {"slave_synchronize_interval_ms": 100, "ha_send_heartbeat_interval_ms": 500, **STORE}
STEP_MS = 50
LEVEL_MS = {1: 1000, 2: 5000, 3: 10_000}  # RocketMQ's first three delay levels


def _clocked(clock: FakeClock) -> dict[str, Any]:
    return {
        "delay_scheduler_options": {"clock": clock},
        "timer_scheduler_options": {"clock": clock},
    }


def _delivered(b: Broker) -> list[Any]:
    out: list[Any] = []
    for q in (0, 1):
        while got := b.pull_message("g", "T", q, sum(m.queue_id == q for m in out), 1000).messages:
            out += got
    return out


def _step(b: Broker, clock: FakeClock, to: int) -> None:
    """Move the clock and run both schedulers once (their threads may run them too)."""
    clock.now = to
    b.timer_scheduler.run_due()
    b.delay_scheduler.run_due()


def _level_dues(b: Broker) -> dict[bytes, int]:
    """When each held delay-level message is due: its store time plus its level's delay."""
    dues = {}
    for level, delay in LEVEL_MS.items():
        for m in b.store.get(SCHEDULE_TOPIC, level - 1, 0, max_count=100).messages:
            dues[m.body] = m.store_timestamp + delay
    return dues


def test_a_promoted_slave_delivers_pending_timers_and_levels_on_time_and_once(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    t0 = clock.now
    timers = {b"timer-%d" % i: t0 + 600 * i for i in range(1, 16)}  # 0.6 s to 9 s ahead
    levels = {b"level-%d-%d" % (lv, i): lv for lv in LEVEL_MS for i in range(3)}
    lost_at = t0 + 4000
    master = Broker(tmp_path / "m", ha_listen_port=0, **FAST, **_clocked(clock))
    try:
        master.create_topic("T", queue_nums=2)
        slave = Broker(
            tmp_path / "s", broker_role="SLAVE", broker_id=1,
            ha_master_address=f"127.0.0.1:{master.ha.port}", **FAST, **_clocked(clock),
        )  # fmt: skip
        try:
            for i, (body, due) in enumerate(timers.items()):
                held = Message(topic="T", body=body, deliver_time_ms=due)
                master.send_message("T", i % 2, [held])
            for i, (body, level) in enumerate(levels.items()):
                held = Message(topic="T", body=body, delay_level=level)
                master.send_message("T", i % 2, [held])
            dues = {**timers, **_level_dues(master)}
            # The old master delivers what is due before it is lost...
            for now in range(t0, lost_at + 1, STEP_MS):
                _step(master, clock, now)
            before = Counter(m.body for m in _delivered(master))
            assert before and set(before) < set(dues), "some delivered, some pending"
            assert all(dues[body] <= lost_at for body in before)
            # ... and its slave has those deliveries and the progress counting them.
            end = master.store.commitlog_max_offset()
            wait_until(lambda: slave.store.commitlog_max_offset() == end)
            wait_until(lambda: slave.metadata.schedulers_synced_at == end)
        finally:
            slave.close()
    finally:
        master.close()  # the master is lost
    promoted = Broker(
        tmp_path / "s", broker_role="ASYNC_MASTER", broker_id=0, **STORE, **_clocked(clock)
    )
    try:
        _step(promoted, clock, lost_at)
        assert Counter(m.body for m in _delivered(promoted)) == before  # nothing again
        seen: dict[bytes, int] = {}
        for now in range(lost_at, t0 + 12_000, STEP_MS):
            _step(promoted, clock, now)
            for m in _delivered(promoted):
                seen.setdefault(m.body, now)
        got = Counter(m.body for m in _delivered(promoted))
        twice = sorted(body for body, n in got.items() if n > 1)
        missing = sorted(set(dues) - set(got))
        assert (twice, missing) == ([], []), "each delivered once, none lost"
        for body, at in seen.items():
            if body in before:
                continue
            due = dues[body]
            # Never early; within a timer slot (1 s) or a level's pass, plus one step.
            assert due <= at <= due + 1000 + STEP_MS, (body, due, at)
        assert promoted.timer_stats().pending == 0
    finally:
        promoted.close()
