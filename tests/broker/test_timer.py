"""Timer messages on the broker: hold, delivery time, errors, restarts, stats, with levels."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from mqtest import FakeClock

from mqcore import Broker, Message, Producer
from mqcore.errors import InvalidArgumentError, MessageIllegalError, TimerMessageError
from mqcore.message import system_message
from mqcore.plugins.delay_timer_wheel import CHECKPOINT_FILE, IMPORT_FILE, TimerScheduler
from mqcore.store import SCHEDULE_TOPIC, TIMER_TOPIC

pytestmark = pytest.mark.timeout(60)


def _open(path: Path, store_name: str, clock: FakeClock, **kw: Any) -> Broker:
    b = Broker(
        path, store=store_name, delay_scheduler_options={"clock": clock},
        timer_scheduler_options={"clock": clock, **kw.pop("timer_options", {})}, **kw,
    )  # fmt: skip
    b.create_topic("T", queue_nums=2)
    return b


def _pulled(b: Broker, topic: str = "T", queue_id: int = 0) -> list[Any]:
    out: list[Any] = []
    while True:
        got = b.pull_message("g", topic, queue_id, len(out), 1000).messages
        if not got:
            return out
        out += got


def _bodies(b: Broker, topic: str = "T", queue_id: int = 0) -> list[bytes]:
    return [m.body for m in _pulled(b, topic, queue_id)]


def _step(b: Broker, clock: FakeClock, to: int) -> None:
    clock.now = to
    b.timer_scheduler.run_due()


def test_timer_scheduler_runs_beside_the_level_one(tmp_path: Path, store_name: str) -> None:
    with Broker(tmp_path, store=store_name) as b:
        assert isinstance(b.timer_scheduler, TimerScheduler)
        assert b.timer_scheduler.max_delay_ms == 3 * 24 * 3600 * 1000  # timerMaxDelaySec
        assert b.timer_scheduler.precision_ms == 1000
        names = {t.name for t in threading.enumerate()}
        assert {"mqcore-delay-broker-a", "mqcore-timer-broker-a"} <= names
        assert (tmp_path / "timerwheel").exists() and (
            tmp_path / "config" / CHECKPOINT_FILE
        ).exists()


def test_held_in_the_timer_topic_then_delivered_never_early(
    tmp_path: Path, store_name: str
) -> None:
    clock = FakeClock()
    with _open(tmp_path, store_name, clock) as b:
        t0 = clock.now
        dues = [t0 + d for d in (1500, 1501, 2999, 3000, 5250, 700)]
        results = b.send_message(
            "T",
            1,
            [Message(topic="T", body=b"%d" % i, deliver_time_ms=d) for i, d in enumerate(dues)],
        )
        assert [r.queue_offset for r in results] == list(range(6))  # offsets in the timer topic
        assert b.get_max_offset(TIMER_TOPIC, 0) == 6 and b.get_max_offset("T", 1) == 0
        seen: dict[bytes, int] = {}
        for now in range(t0, t0 + 7000, 50):
            _step(b, clock, now)
            for m in _pulled(b, "T", 1):
                seen.setdefault(m.body, now)
        assert sorted(seen) == [b"%d" % i for i in range(6)]
        for i, due in enumerate(dues):
            at = seen[b"%d" % i]
            # No earlier than due; within one slot (1 s) plus one step of this loop.
            assert due <= at <= due + 1000 + 50, (i, due, at)


def test_delivered_copy_keeps_everything_and_gains_the_timer_properties(
    tmp_path: Path, store_name: str
) -> None:
    clock = FakeClock()
    with _open(tmp_path, store_name, clock) as b, Producer("pg", broker=b) as p:
        due = clock.now + 2000
        msg = Message(
            topic="T", body=b"order-17", tags="TagA", keys="k1 k2", properties={"x": "1"},
            flag=7, deliver_time_ms=due,
        )  # fmt: skip
        r = p.send(msg)
        held = b.view_message_by_id(r.offset_msg_id or r.msg_id)
        assert held.topic == TIMER_TOPIC
        assert held.get_property("REAL_TOPIC") == "T"
        assert held.get_property("TIMER_OUT_MS") == str(due)
        _step(b, clock, due + 1000)
        got = [m for q in (0, 1) for m in _pulled(b, "T", q)]
        assert len(got) == 1
        m = got[0]
        assert (m.body, m.tags, m.keys, m.flag) == (b"order-17", "TagA", "k1 k2", 7)
        assert m.properties["x"] == "1"
        assert m.deliver_time_ms == due and m.get_property("TIMER_DELIVER_MS") == str(due)
        assert int(m.get_property("TIMER_DEQUEUE_MS")) >= due
        assert m.get_property("TIMER_ENQUEUE_MS") is not None
        # The message id the producer returned (UNIQ_KEY) survives the hold.
        uniq = held.get_property("UNIQ_KEY") or held.get_property("UNIQ_CLIENT_MESSAGE_ID_KEYIDX")
        assert uniq and uniq == r.msg_id
        assert uniq in (m.get_property("UNIQ_KEY"), m.get_property("UNIQ_CLIENT_MESSAGE_ID_KEYIDX"))


def test_delay_helpers_count_from_arrival(tmp_path: Path, store_name: str) -> None:
    clock = FakeClock()
    with _open(tmp_path, store_name, clock) as b:
        t0 = clock.now
        b.send_message("T", 0, [Message(topic="T", body=b"s", delay_sec=2)])
        b.send_message("T", 0, [Message(topic="T", body=b"m", delay_ms=1200)])
        _step(b, clock, t0 + 1199)
        assert _bodies(b) == []
        _step(b, clock, t0 + 1999)
        assert b"s" not in _bodies(b)
        _step(b, clock, t0 + 3000)
        assert sorted(_bodies(b)) == [b"m", b"s"]


def test_the_wheel_reads_deliver_times_from_units_or_records(
    tmp_path: Path, store_name: str
) -> None:
    """The wheel takes deliver times from the timer topic's consume-queue units; a unit
    whose tags code is no deliver time (written before the stores kept it there) and a
    store without ``get_units`` make it read the records instead: same deliveries."""
    from mqcore import codec
    from mqcore.record.unit import UNIT

    clock = FakeClock()
    with _open(tmp_path, store_name, clock) as b:
        t0 = clock.now
        sched = b.timer_scheduler
        with sched._lock:  # the wheel takes them in below, one way after the other
            b.send_message("T", 0, [Message(topic="T", body=b"unit", deliver_time_ms=t0 + 1500)])
            units = b.store.get_units(TIMER_TOPIC, 0, 0, 10)
            assert UNIT.unpack_from(units.units, 0)[2] == t0 + 1500
            sched._enqueue(clock.now)
            # A unit as written before: the tag's hash code, not the deliver time.
            old = system_message(
                topic=TIMER_TOPIC, body=b"old unit", tags="TagA",
                properties={"TIMER_OUT_MS": str(t0 + 2500), "REAL_TOPIC": "T", "REAL_QID": "0"},
            )  # fmt: skip
            (prepared,) = codec.prepare([old], t0, topic=TIMER_TOPIC)
            assert prepared[9] == t0 + 2500
            prepared = (*prepared[:9], codec.tags_hash_code("TagA"), *prepared[10:])
            b.store.put_prepared(TIMER_TOPIC, 0, [prepared])
            sched._enqueue(clock.now)
            b.delay.read_timer_units = lambda offset, count: None  # type: ignore[method-assign]
            b.send_message("T", 0, [Message(topic="T", body=b"record", deliver_time_ms=t0 + 3500)])
            sched._enqueue(clock.now)
            assert b.timer_stats().in_wheel == 3
        seen: dict[bytes, int] = {}
        for now in range(t0, t0 + 5000, 100):
            _step(b, clock, now)
            for m in _pulled(b):
                seen.setdefault(m.body, now)
        assert list(seen) == [b"unit", b"old unit", b"record"]
        for body, due in zip(seen, (1500, 2500, 3500), strict=True):
            assert t0 + due <= seen[body] <= t0 + due + 1100


def test_a_past_deliver_time_is_delivered_at_once(tmp_path: Path, store_name: str) -> None:
    clock = FakeClock()
    with _open(tmp_path, store_name, clock) as b:
        (r,) = b.send_message("T", 0, [Message(topic="T", body=b"late", deliver_time_ms=1)])
        assert b.get_max_offset(TIMER_TOPIC, 0) == 0
        assert _bodies(b) == [b"late"] and r.queue_offset == 0


def test_a_remote_client_sets_only_the_property(tmp_path: Path, store_name: str) -> None:
    """A RocketMQ client sends TIMER_DELIVER_MS as a plain property: same behaviour."""
    clock = FakeClock()
    with _open(tmp_path, store_name, clock) as b:
        due = clock.now + 1500
        msg = system_message(topic="T", body=b"rmq", properties={"TIMER_DELIVER_MS": str(due)})
        b.send_message("T", 0, [msg])
        assert b.get_max_offset(TIMER_TOPIC, 0) == 1
        _step(b, clock, due - 1)
        assert _bodies(b) == []
        _step(b, clock, due + 1000)
        assert _bodies(b) == [b"rmq"]


def test_timer_and_delay_level_together_is_an_error(tmp_path: Path, store_name: str) -> None:
    clock = FakeClock()
    with _open(tmp_path, store_name, clock) as b:
        msg = Message(topic="T", body=b"x", delay_level=3, deliver_time_ms=clock.now + 5000)
        with pytest.raises(InvalidArgumentError, match="delay level 3 and a timer"):
            b.send_message("T", 0, [msg])
        with Producer("pg", broker=b) as p, pytest.raises(InvalidArgumentError, match="timer"):
            p.send(msg)
        assert b.get_max_offset(TIMER_TOPIC, 0) == 0 and b.get_max_offset(SCHEDULE_TOPIC, 2) == 0


def test_beyond_the_max_delay_is_refused_at_send(tmp_path: Path, store_name: str) -> None:
    clock = FakeClock()
    with _open(tmp_path, store_name, clock, timer_max_delay_sec=60) as b:
        b.send_message("T", 0, [Message(topic="T", body=b"ok", delay_sec=60)])
        with pytest.raises(TimerMessageError, match=r"timer_max_delay_sec \(60 s\)") as info:
            b.send_message("T", 0, [Message(topic="T", body=b"x", delay_ms=60_001)])
        assert isinstance(info.value, InvalidArgumentError)
        assert isinstance(info.value, MessageIllegalError)
        assert b.get_max_offset(TIMER_TOPIC, 0) == 1


def test_a_deliver_time_that_is_not_a_number_is_refused(tmp_path: Path, store_name: str) -> None:
    with _open(tmp_path, store_name, FakeClock()) as b:
        msg = system_message(topic="T", body=b"x", properties={"TIMER_DELIVER_MS": "soon"})
        with pytest.raises(TimerMessageError, match="TIMER_DELIVER_MS='soon'"):
            b.send_message("T", 0, [msg])


def test_timers_turned_off(tmp_path: Path, store_name: str) -> None:
    clock = FakeClock()
    with _open(tmp_path, store_name, clock, timer_scheduler=None) as b:
        assert b.timer_scheduler is None
        with pytest.raises(TimerMessageError, match="not enabled"):
            b.send_message("T", 0, [Message(topic="T", body=b"x", delay_sec=5)])
        with pytest.raises(InvalidArgumentError, match="turned off"):
            b.timer_stats()
        assert not (tmp_path / "timerwheel").exists()


def test_a_level_scheduler_cannot_hold_timers(tmp_path: Path, store_name: str) -> None:
    """Each kind has its own registry; a name of the other kind is refused by name, with the
    setting it belongs in, before anything is built or opened."""
    with pytest.raises(
        InvalidArgumentError,
        match="timer_scheduler 'delay_levels' is a delay scheduler .* set it as delay_scheduler, "
        "and timer_scheduler to one of: timer",
    ):
        Broker(tmp_path / "a", store=store_name, timer_scheduler="delay_levels")
    with pytest.raises(InvalidArgumentError, match="does not hold delay levels; set it as timer"):
        Broker(tmp_path / "b", store=store_name, delay_scheduler="timer")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b" / "store").exists()


def test_pending_timers_survive_a_restart_and_arrive_once(tmp_path: Path, store_name: str) -> None:
    clock = FakeClock()
    t0 = clock.now
    b = _open(tmp_path, store_name, clock)
    try:
        for i in range(40):
            b.send_message(
                "T", i % 2, [Message(topic="T", body=b"%d" % i, deliver_time_ms=t0 + 500 + 100 * i)]
            )
        for stop in (1200, 2000, 2400, 3100, 5000):
            _step(b, clock, t0 + stop)
            b.close()
            b = _open(tmp_path, store_name, clock)
        got = sorted(m.body for q in (0, 1) for m in _pulled(b, "T", q))
        assert got == sorted(b"%d" % i for i in range(40))  # each once
        assert b.timer_stats().pending == 0
    finally:
        b.close()


def test_stats_pending_next_due_and_lag(tmp_path: Path, store_name: str) -> None:
    clock = FakeClock()
    with _open(tmp_path, store_name, clock) as b:
        t0 = clock.now - clock.now % 1000 + 10_000
        b.send_message("T", 0, [Message(topic="T", body=b"a", deliver_time_ms=t0 + 100)])
        b.send_message("T", 0, [Message(topic="T", body=b"b", deliver_time_ms=t0 + 5000)])
        s = b.timer_stats()
        assert s.pending == 2
        b.timer_scheduler.run_due()
        s = b.timer_stats()
        assert (s.pending, s.in_wheel, s.enqueue_backlog) == (2, 2, 0)
        assert s.next_due_ms == t0 + 100 and s.lag_ms == 0
        with b.timer_scheduler._lock:  # the timer thread is held up: stats show the lag
            clock.now = t0 + 100 + 3000
            assert b.timer_stats().lag_ms == 3000
        b.timer_scheduler.run_due()
        s = b.timer_stats()
        assert s.pending == 1 and s.next_due_ms == t0 + 5000 and s.lag_ms == 0
        assert s.as_dict()["pending"] == 1


def test_levels_timers_and_retries_in_one_broker(tmp_path: Path, store_name: str) -> None:
    clock = FakeClock()
    with _open(tmp_path, store_name, clock) as b:
        t0 = clock.now
        b.send_message("T", 0, [Message(topic="T", body=b"level", delay_level=1)])
        b.send_message("T", 0, [Message(topic="T", body=b"timer", deliver_time_ms=t0 + 1500)])
        clock.now = t0 + 3000
        b.delay_scheduler.run_due()
        b.timer_scheduler.run_due()
        got = {m.body: m for m in _pulled(b)}
        assert set(got) == {b"level", b"timer"}
        # The delivered timer message fails in a consumer and is sent back: it is retried by
        # its delay level (3: 10 s), not held as a timer again.
        b.topics.ensure("%RETRY%g", 1)
        r = b.consumer_send_msg_back("g", got[b"timer"].commitlog_offset)
        assert b.get_max_offset(SCHEDULE_TOPIC, 2) == 1 and r.queue_offset == 0
        held_timers = b.get_max_offset(TIMER_TOPIC, 0)
        clock.now = t0 + 3000 + 10_500
        b.delay_scheduler.run_due()
        b.timer_scheduler.run_due()
        retried = _pulled(b, "%RETRY%g", 0)
        assert [m.body for m in retried] == [b"timer"] and retried[0].reconsume_times == 1
        assert b.get_max_offset(TIMER_TOPIC, 0) == held_timers


def test_log_segments_roll_and_delivered_ones_are_removed(tmp_path: Path, store_name: str) -> None:
    clock = FakeClock()
    opts = {"segment_bytes": 56 * 8}
    with _open(tmp_path, store_name, clock, timer_options=opts) as b:
        t0 = clock.now
        for i in range(40):
            b.send_message(
                "T", 0, [Message(topic="T", body=b"%d" % i, deliver_time_ms=t0 + 1000 + 250 * i)]
            )
        b.timer_scheduler.run_due()
        assert len(list((tmp_path / "timerlog").iterdir())) == 5
        _step(b, clock, t0 + 8000)
        b.timer_scheduler.persist()
        left = sorted(p.name for p in (tmp_path / "timerlog").iterdir())
        assert 1 <= len(left) < 5  # delivered segments gone, pending ones kept
        _step(b, clock, t0 + 20_000)
        assert sorted(_bodies(b)) == sorted(b"%d" % i for i in range(40))


def test_an_uncommitted_tail_is_cut_and_taken_in_again(
    tmp_path: Path, store_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process dies after writing log and wheel, before the checkpoint: nothing is lost
    or doubled."""
    from mqcore.plugins import delay_timer_files

    clock = FakeClock()
    t0 = clock.now
    b = _open(tmp_path, store_name, clock)
    try:
        sched = b.timer_scheduler
        with sched._lock:  # the timer thread waits: this test decides what is written
            for i in range(20):
                due = t0 + 1000 + 10 * i
                b.send_message("T", 0, [Message(topic="T", body=b"%d" % i, deliver_time_ms=due)])
                if i == 9:
                    sched.run_due()  # committed: 10 in the wheel
            real_write = delay_timer_files.TimerCheckpoint.write

            def dies(self: Any, cp: Any) -> None:
                raise OSError("killed")

            monkeypatch.setattr(delay_timer_files.TimerCheckpoint, "write", dies)
            monkeypatch.setattr(sched, "_rollback", lambda before: None)  # killed: no clean-up
            with pytest.raises(OSError):
                sched._enqueue(clock.now)  # log and slots written, not committed
            sched._running = False  # as if killed: no more writes from it
            assert sched._cp.log_end == 10 * 56
        monkeypatch.setattr(delay_timer_files.TimerCheckpoint, "write", real_write)
        b.close()
        assert (tmp_path / "timerlog" / f"{0:020d}").stat().st_size == 20 * 56
        b = _open(tmp_path, store_name, clock)  # cuts the tail, takes the 10 in again
        _step(b, clock, t0 + 3000)
        _step(b, clock, t0 + 4000)
        assert sorted(_bodies(b)) == sorted(b"%d" % i for i in range(20))
        s = b.timer_stats()
        assert (s.pending, s.in_wheel) == (0, 0)
        assert (tmp_path / "timerlog" / f"{0:020d}").stat().st_size == 20 * 56
    finally:
        b.close()


def test_a_failed_commit_is_rolled_back_and_retried(
    tmp_path: Path, store_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint write that fails in a running broker: the batch is undone, then taken in
    again by the next pass, and each timer arrives once."""
    from mqcore.plugins import delay_timer_files

    clock = FakeClock()
    t0 = clock.now
    with _open(tmp_path, store_name, clock) as b:
        sched = b.timer_scheduler
        with sched._lock:
            for i in range(8):
                due = t0 + 1000 + 10 * i
                b.send_message("T", 0, [Message(topic="T", body=b"%d" % i, deliver_time_ms=due)])
            real_write = delay_timer_files.TimerCheckpoint.write
            monkeypatch.setattr(
                delay_timer_files.TimerCheckpoint, "write",
                lambda self, cp: (_ for _ in ()).throw(OSError("disk full")),
            )  # fmt: skip
            with pytest.raises(OSError):
                sched._enqueue(clock.now)
            monkeypatch.setattr(delay_timer_files.TimerCheckpoint, "write", real_write)
            assert (tmp_path / "timerlog" / f"{0:020d}").stat().st_size == 0
            sched.run_due()
        _step(b, clock, t0 + 3000)
        assert sorted(_bodies(b)) == sorted(b"%d" % i for i in range(8))


def test_a_torn_checkpoint_copy_falls_back_to_the_other(tmp_path: Path, store_name: str) -> None:
    clock = FakeClock()
    t0 = clock.now
    with _open(tmp_path, store_name, clock) as b:
        b.send_message("T", 0, [Message(topic="T", body=b"x", deliver_time_ms=t0 + 1500)])
        b.timer_scheduler.run_due()
        seq = b.timer_scheduler._cp.seq
    path = tmp_path / "config" / CHECKPOINT_FILE
    data = bytearray(path.read_bytes())
    newest = (seq % 2) * 64
    data[newest + 10] ^= 0xFF  # the newest copy fails its CRC
    path.write_bytes(bytes(data))
    with _open(tmp_path, store_name, clock) as b:
        _step(b, clock, t0 + 3000)
        assert _bodies(b) == [b"x"]


def test_a_crowded_slot_is_delivered_over_several_passes(tmp_path: Path, store_name: str) -> None:
    """One pass delivers a bounded number (stats and close need not wait for thousands)."""
    clock = FakeClock()
    with _open(tmp_path, store_name, clock) as b:
        due = clock.now + 1000
        sched = b.timer_scheduler
        with sched._lock:
            for i in range(0, 1300, 100):
                msgs = [
                    Message(topic="T", body=b"%d" % (i + j), deliver_time_ms=due)
                    for j in range(100)
                ]
                b.send_message("T", 0, msgs)
            sched.run_due()
            clock.now = due + 1000
            assert sched.run_due() == 0  # more to do at once
            assert b.get_max_offset("T", 0) == 512
            while sched.run_due() == 0:
                pass
        bodies = _bodies(b)
        assert len(bodies) == 1300 and bodies == [b"%d" % i for i in range(1300)]  # send order


def test_the_wheel_layout_is_kept_across_setting_changes(tmp_path: Path, store_name: str) -> None:
    clock = FakeClock()
    t0 = clock.now
    with _open(tmp_path, store_name, clock, timer_max_delay_sec=60) as b:
        b.send_message("T", 0, [Message(topic="T", body=b"x", deliver_time_ms=t0 + 30_000)])
    with _open(tmp_path, store_name, clock, timer_max_delay_sec=3600, timer_precision_ms=100) as b:
        sched = b.timer_scheduler
        assert (sched.precision_ms, sched.slots) == (1000, 2 * 61)  # as created
        assert sched.max_delay_ms <= 60_000  # what this wheel can place
        with pytest.raises(TimerMessageError, match="beyond"):
            b.send_message("T", 0, [Message(topic="T", body=b"y", delay_sec=600)])
        _step(b, clock, t0 + 31_000)
        assert _bodies(b) == [b"x"]


class _Files:
    """Where a broker's scheduler keeps its files (the host of a scheduler not started)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir

    def state_path(self, name: str) -> Path:
        return self.data_dir / "config" / name

    def data_path(self, name: str) -> Path:
        return self.data_dir / name


def test_imported_progress_resumes_a_crowded_slot_half_delivered(
    tmp_path: Path, store_name: str
) -> None:
    """Exported in the middle of a crowded slot (512 of 1300 delivered) and imported into the
    same data directory (its own timer files then dropped): the rest arrives once, in order,
    nothing delivered before is delivered again, and the later slot stays pending."""
    clock = FakeClock()
    with _open(tmp_path, store_name, clock) as b:
        due = clock.now + 1000
        sched = b.timer_scheduler
        with sched._lock:
            for i in range(0, 1300, 100):
                msgs = [
                    Message(topic="T", body=b"%d" % (i + j), deliver_time_ms=due)
                    for j in range(100)
                ]
                b.send_message("T", 0, msgs)
            later = Message(topic="T", body=b"later", deliver_time_ms=due + 5000)
            b.send_message("T", 1, [later])
            sched.run_due()
            clock.now = due + 1000
            assert sched.run_due() == 0 and b.get_max_offset("T", 0) == 512
            state = sched.export_state()
            clock.now = due - 500  # the delivery thread delivers nothing more
        assert state is not None and state == json.loads(json.dumps(state))  # JSON as it is
        assert state["enqueue_offset"] == 1301 and len(state["cursor_pending"]) == 1300 - 512
        assert _bodies(b) == [b"%d" % i for i in range(512)]
    TimerScheduler().import_state(_Files(tmp_path), state)
    assert (tmp_path / "config" / IMPORT_FILE).exists()
    with _open(tmp_path, store_name, clock) as b:
        with b.timer_scheduler._lock:
            clock.now = due + 1000
            while b.timer_scheduler.run_due() == 0:
                pass
        assert _bodies(b) == [b"%d" % i for i in range(1300)]  # once each, send order
        assert b.timer_stats().pending == 1 and _bodies(b, "T", 1) == []
        _step(b, clock, due + 6000)
        assert _bodies(b, "T", 1) == [b"later"]
        assert not (tmp_path / "config" / IMPORT_FILE).exists()  # done with it


def test_a_state_that_is_not_timer_progress_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="timer progress"):
        TimerScheduler().import_state(_Files(tmp_path), {"enqueue_offset": "x"})
    assert not (tmp_path / "config" / IMPORT_FILE).exists()
