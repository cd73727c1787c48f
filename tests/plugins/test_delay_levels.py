"""The ``delay_levels`` scheduler over a real store, driven by a fake clock (no thread)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mqcore import Kernel, Message
from mqcore.atomicfile import backup_path
from mqcore.broker.schedule import DelayService
from mqcore.broker.topics import SCHEDULE_TOPIC
from mqcore.errors import InvalidArgumentError, StoreCorruptedError
from mqcore.interfaces import DelayHost, DelayScheduler
from mqcore.plugins.delay_levels import (
    DEFAULT_MESSAGE_DELAY_LEVEL,
    DELAY_OFFSET_FILE,
    DelayLevelScheduler,
    parse_delay_levels,
)
from mqcore.store import PutResult

S, M, H = 1000, 60_000, 3_600_000


class FakeClock:
    """A settable clock in ms."""

    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


class Rig:
    """A store, a scheduler and its host, without the broker's thread."""

    def __init__(self, path: Path, store_name: str, levels: str = DEFAULT_MESSAGE_DELAY_LEVEL):
        self.path = path
        self.store_name = store_name
        self.levels = levels
        self.clock = FakeClock(0)
        self.stored: list[tuple[str, int, list[PutResult]]] = []
        self.fail_puts = False
        self._open()

    def _open(self) -> None:
        self.store = Kernel().open_store(self.store_name, self.path / "store")
        self.scheduler = DelayLevelScheduler(self.levels, clock=self.clock)
        self.service = DelayService(
            self.store, self.scheduler, self.path / "config", self._on_stored
        )
        real_deliver = self.service.deliver

        def deliver(*a: Any, **kw: Any) -> None:
            if self.fail_puts:
                raise OSError("disk full")
            real_deliver(*a, **kw)

        self.service.deliver = deliver  # type: ignore[method-assign]
        self.scheduler.start(self.service)

    def _on_stored(self, topic: str, queue_id: int, results: list[PutResult]) -> None:
        self.stored.append((topic, queue_id, results))

    def restart(self) -> None:
        self.scheduler.stop()
        self.store.close()
        self._open()

    def close(self) -> None:
        self.scheduler.stop()
        self.store.close()

    def send(self, topic: str, queue_id: int, *msgs: Message) -> list[PutResult]:
        return self.service.put(topic, queue_id, list(msgs))

    def bodies(self, topic: str, queue_id: int = 0) -> list[bytes]:
        got = self.store.get(topic, queue_id, 0, max_count=1000)
        return [m.body for m in got.messages]


@pytest.fixture
def rig(tmp_path: Path, store_name: str) -> Iterator[Rig]:
    r = Rig(tmp_path, store_name)
    try:
        yield r
    finally:
        r.close()


def test_default_levels_are_rocketmqs() -> None:
    delays = parse_delay_levels(DEFAULT_MESSAGE_DELAY_LEVEL)
    assert len(delays) == 18
    assert delays[:4] == (1 * S, 5 * S, 10 * S, 30 * S)
    assert delays[4:14] == tuple(n * M for n in range(1, 11))
    assert delays[14:] == (20 * M, 30 * M, 1 * H, 2 * H)
    assert parse_delay_levels("2d 7s") == (2 * 86_400_000, 7 * S)


@pytest.mark.parametrize("text", ["", "1s 5x", "s", "1.5s", "-1s", "10"])
def test_bad_level_strings_are_refused(text: str) -> None:
    with pytest.raises(InvalidArgumentError, match="message_delay_level"):
        parse_delay_levels(text)


def test_levels_map_to_queues_and_clamp() -> None:
    s = DelayLevelScheduler("1s 5s 10s")
    as_protocol: object = s
    assert isinstance(as_protocol, DelayScheduler) and s.name == "delay_levels"
    assert s.max_level == 3
    queues = [s.schedule_queue(n) for n in (1, 2, 3, 4, 99)]
    assert queues == [(0, 1), (1, 2), (2, 3), (2, 3), (2, 3)]
    assert s.deliver_at(1, 1000) == 2000 and s.deliver_at(3, 1000) == 11_000
    assert s.deliver_at(7, 1000) == 11_000  # clamped to the max level's delay
    assert s.deliver_at(0, 1000) == 1000
    with pytest.raises(InvalidArgumentError):
        s.schedule_queue(0)


def test_registered_under_its_name() -> None:
    k = Kernel()
    assert "delay_levels" in k.names("delay_scheduler")
    s = k.delay_scheduler("delay_levels", message_delay_level="1s 2s")
    assert isinstance(s, DelayLevelScheduler) and s.delays == (1000, 2000)


def test_delayed_message_is_held_in_the_schedule_topic(rig: Rig) -> None:
    (r,) = rig.send("T", 2, Message(topic="T", body=b"x", tags="A", keys="k1", delay_level=3,
                                    properties={"p": "v"}))  # fmt: skip
    assert isinstance(rig.service, DelayHost)
    assert rig.bodies("T", 2) == []
    held = rig.store.get(SCHEDULE_TOPIC, 2, 0).messages
    assert len(held) == 1 and r.queue_offset == 0
    h = held[0]
    assert h.topic == SCHEDULE_TOPIC and h.queue_id == 2 and h.delay_level == 3
    assert h.properties == {"p": "v", "REAL_TOPIC": "T", "REAL_QID": "2"}
    assert (h.tags, h.keys) == ("A", "k1")


def test_levels_above_the_max_are_clamped(rig: Rig) -> None:
    rig.send("T", 0, Message(topic="T", body=b"x", delay_level=40))
    held = rig.store.get(SCHEDULE_TOPIC, 17, 0).messages
    assert [m.delay_level for m in held] == [18]


def test_mixed_batch_keeps_result_order(rig: Rig) -> None:
    results = rig.send(
        "T", 0,
        Message(topic="T", body=b"a", delay_level=1),
        Message(topic="T", body=b"b"),
        Message(topic="T", body=b"c", delay_level=2),
        Message(topic="T", body=b"d"),
        Message(topic="T", body=b"e", delay_level=1),
    )  # fmt: skip
    assert [r.queue_offset for r in results] == [0, 0, 0, 1, 1]
    assert rig.bodies("T") == [b"b", b"d"]
    assert [m.body for m in rig.store.get(SCHEDULE_TOPIC, 0, 0).messages] == [b"a", b"e"]
    assert [t for t, _, _ in rig.stored] == ["T", SCHEDULE_TOPIC, SCHEDULE_TOPIC]


@pytest.mark.parametrize("level", range(1, 19))
def test_every_level_delivers_on_time(rig: Rig, level: int) -> None:
    (r,) = rig.send("T", 1, Message(topic="T", body=b"x", tags="t", delay_level=level))
    due = r.store_timestamp + parse_delay_levels(DEFAULT_MESSAGE_DELAY_LEVEL)[level - 1]
    assert rig.scheduler.deliver_at(level, r.store_timestamp) == due
    rig.clock.now = due - 1
    assert rig.scheduler.run_due() == 1  # the next check is useful in 1 ms
    assert rig.bodies("T", 1) == []
    rig.clock.now = due
    rig.scheduler.run_due()
    (m,) = rig.store.get("T", 1, 0).messages
    assert m.body == b"x" and m.tags == "t" and m.delay_level == 0
    assert m.get_property("DELAY") is None
    assert m.properties == {"REAL_TOPIC": "T", "REAL_QID": "1"}  # RocketMQ leaves these
    assert rig.scheduler.offsets()[level] == 1
    rig.scheduler.run_due()
    assert rig.bodies("T", 1) == [b"x"]  # once


def test_delivery_keeps_born_time_and_reconsume_times(rig: Rig) -> None:
    rig.service.put(
        "T", 0, [Message(topic="T", body=b"x", delay_level=1)],
        born_timestamp=1234, born_host="10.0.0.9:5555", reconsume_times=4,
    )  # fmt: skip
    rig.clock.now = 2**50
    rig.scheduler.run_due()
    (m,) = rig.store.get("T", 0, 0).messages
    assert (m.born_timestamp, m.born_host, m.reconsume_times) == (1234, "10.0.0.9:5555", 4)


def test_order_within_a_level_and_independence_of_levels(rig: Rig) -> None:
    base = rig.send("T", 0, Message(topic="T", body=b"L2-0", delay_level=2))[0].store_timestamp
    for i in range(1, 40):
        rig.send("T", 0, Message(topic="T", body=b"L2-%d" % i, delay_level=2))
    rig.send("T", 0, Message(topic="T", body=b"L1", delay_level=1))
    rig.clock.now = base + 1000 + 1000  # level 1 is due, level 2 (5 s) is not
    rig.scheduler.run_due()
    assert rig.bodies("T") == [b"L1"]
    rig.clock.now = base + 60_000
    rig.scheduler.run_due()
    assert rig.bodies("T") == [b"L1"] + [b"L2-%d" % i for i in range(40)]


def test_a_clock_gone_back_delivers_now(rig: Rig) -> None:
    (r,) = rig.send("T", 0, Message(topic="T", body=b"x", delay_level=3))
    # The wall clock jumped back an hour: the due time is more than one delay away.
    rig.clock.now = r.store_timestamp - H
    rig.scheduler.run_due()
    assert rig.bodies("T") == [b"x"]


def test_a_failed_put_is_retried_in_place(rig: Rig) -> None:
    rig.send("T", 0, Message(topic="T", body=b"a", delay_level=1))
    rig.send("T", 0, Message(topic="T", body=b"b", delay_level=1))
    rig.clock.now = 2**50
    rig.fail_puts = True
    rig.scheduler.run_due()
    assert rig.bodies("T") == [] and rig.scheduler.offsets()[1] == 0
    rig.fail_puts = False
    rig.scheduler.run_due()
    assert rig.bodies("T") == [b"a", b"b"]


def test_a_message_without_real_topic_is_skipped(rig: Rig) -> None:
    rig.store.put(SCHEDULE_TOPIC, 0, [Message(topic=SCHEDULE_TOPIC, body=b"?", delay_level=1)])
    rig.send("T", 0, Message(topic="T", body=b"ok", delay_level=1))
    rig.clock.now = 2**50
    rig.scheduler.run_due()
    assert rig.bodies("T") == [b"ok"] and rig.scheduler.offsets()[1] == 2


def test_progress_is_persisted_and_resumed(rig: Rig) -> None:
    for i in range(3):
        rig.send("T", 0, Message(topic="T", body=b"%d" % i, delay_level=1))
    rig.clock.now = 2**50
    rig.scheduler.run_due()
    assert rig.scheduler.persist() is True
    assert rig.scheduler.persist() is False  # nothing changed since
    path = rig.path / "config" / DELAY_OFFSET_FILE
    table = json.loads(path.read_text())["offsetTable"]
    assert table["1"] == 3 and table["2"] == 0 and len(table) == 18
    rig.restart()
    assert rig.scheduler.offsets()[1] == 3
    rig.scheduler.run_due()
    assert rig.bodies("T") == [b"0", b"1", b"2"]


def test_an_offset_beyond_the_queue_is_corrected(rig: Rig) -> None:
    rig.send("T", 0, Message(topic="T", body=b"a", delay_level=1))
    rig.close()
    path = rig.path / "config" / DELAY_OFFSET_FILE
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({"offsetTable": {"1": 99}}))
    rig._open()
    assert rig.scheduler.offsets()[1] == 1


def test_progress_written_by_apache_rocketmq_is_read(rig: Rig) -> None:
    """Apache RocketMQ writes delayOffset.json with fastjson: levels are bare numbers."""
    rig.send("T", 0, Message(topic="T", body=b"a", delay_level=1))
    rig.close()
    path = rig.path / "config" / DELAY_OFFSET_FILE
    path.parent.mkdir(exist_ok=True)
    path.write_text('{\n\t"dataVersion":{"counter":1},\n\t"offsetTable":{\n\t\t1:1\n\t}\n}')
    rig._open()
    assert rig.scheduler.offsets()[1] == 1
    rig.clock.now = 2**50
    rig.scheduler.run_due()
    assert rig.bodies("T") == []  # level 1's one message was delivered before the restart


def test_a_corrupt_progress_file_falls_back_or_refuses(rig: Rig) -> None:
    rig.send("T", 0, Message(topic="T", body=b"a", delay_level=1))
    rig.clock.now = 2**50
    rig.scheduler.run_due()
    rig.scheduler.persist()
    rig.send("T", 0, Message(topic="T", body=b"b", delay_level=1))
    rig.scheduler.run_due()
    rig.close()  # writes the file again; the first version is now the backup
    path = rig.path / "config" / DELAY_OFFSET_FILE
    path.write_text("{not json")
    rig._open()
    assert rig.scheduler.offsets()[1] == 1  # from the backup
    rig.close()
    path.write_text("{not json")
    backup_path(path).write_text("[]")
    with pytest.raises(StoreCorruptedError, match="delayOffset.json"):
        rig._open()
    rig.store.close()
    path.unlink()
    backup_path(path).unlink()
    rig._open()  # both removed: start from the queue's beginning
    assert rig.scheduler.offsets()[1] == 0


def test_stopped_scheduler_delivers_nothing(rig: Rig) -> None:
    rig.send("T", 0, Message(topic="T", body=b"a", delay_level=1))
    rig.scheduler.stop()
    rig.clock.now = 2**50
    rig.scheduler.run_due()
    assert rig.bodies("T") == []


def test_progress_exported_from_memory_and_imported_where_start_reads_it(
    rig: Rig, tmp_path: Path
) -> None:
    """The export counts deliveries not yet persisted; the import is the file start reads."""
    assert DelayLevelScheduler().export_state() is None  # not started
    for i in range(3):
        rig.send("T", 0, Message(topic="T", body=b"%d" % i, delay_level=2))
    rig.clock.now = 2**50
    rig.scheduler.run_due()
    state = rig.scheduler.export_state()
    assert state is not None and state["offsetTable"]["2"] == 3
    assert not (rig.path / "config" / DELAY_OFFSET_FILE).exists()  # not persisted yet
    other = DelayService(rig.store, DelayLevelScheduler(), tmp_path / "other", rig._on_stored)
    other.scheduler.import_state(other, json.loads(json.dumps(state)))
    copied = json.loads((tmp_path / "other" / DELAY_OFFSET_FILE).read_text())
    assert copied == state
    with pytest.raises(InvalidArgumentError, match="not a table of level offsets"):
        other.scheduler.import_state(other, {"offsetTable": {"2": -1}})
    assert json.loads((tmp_path / "other" / DELAY_OFFSET_FILE).read_text()) == state
