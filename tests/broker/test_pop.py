"""The broker's pop state: what a restart rebuilds from the revive topic, how far its replay
starts, held notifications, and the one-consumption-kind-per-group rule."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mqcore import Broker, Message
from mqcore.broker.clients import ConsumerData
from mqcore.errors import BrokerError
from mqcore.message import MessageExt
from mqcore.protocol import pop as wire
from mqcore.protocol.codes import ResponseCode

pytestmark = pytest.mark.timeout(60)


def _send(b: Broker, n: int) -> None:
    for i in range(n):
        b.send_message("T", i % 4, [Message(topic="T", body=f"{i}".encode())])


def _handles(b: Broker, res: wire.PopResult) -> list[tuple[MessageExt, str]]:
    starts = wire.parse_offset_info(res.start_offset_info)
    out = []
    for r in res.records:
        m = MessageExt(r)
        mark = "1" if m.topic.startswith("%RETRY%") else "0"
        h = wire.ExtraInfo.build(
            starts[f"{mark}@{m.queue_id}"][0], res.pop_time, res.invisible_time,
            res.revive_qid, m.topic, b.config.broker_name, m.queue_id, m.queue_offset,
        )  # fmt: skip
        out.append((m, str(h)))
    return out


def test_a_reopened_broker_brings_back_the_unacked_only(tmp_path: Path, store_name: str) -> None:
    opts: dict[str, Any] = {"store": store_name, "revive_interval_ms": 100}
    with Broker(tmp_path, **opts) as b:
        b.create_topic("T", queue_nums=4)
        _send(b, 40)
        popped = _handles(b, b.pop_message("g", "T", -1, 32, 30_000))
        popped += _handles(b, b.pop_message("g", "T", -1, 32, 30_000))
        assert len(popped) == 40
        for m, h in popped[:25]:
            b.ack_message("g", "T", m.queue_id, h, m.queue_offset)
        unacked = {m.body for m, _ in popped[25:]}
    with Broker(tmp_path, **opts) as b:
        assert b.pop.invisible_counts() == {("g", "T"): 15}
        assert b.pop_message("g", "T", -1, 32, 5000).code == ResponseCode.POLLING_TIMEOUT
        # As if the 30 s had passed: the revive service brings the 15 back as retries.
        assert b.pop_revive.revive_due(int(time.time() * 1000) + 31_000) == 15
        back = b.pop_message("g", "T", -1, 32, 5000)
        assert {MessageExt(r).body for r in back.records} == unacked
        assert {MessageExt(r).reconsume_times for r in back.records} == {1}
        assert {MessageExt(r).topic for r in back.records} == {"%RETRY%g_T"}
        m, h = _handles(b, back)[0]
        b.ack_message("g", "T", m.queue_id, h, m.queue_offset)


def test_replay_starts_after_settled_checkpoints(tmp_path: Path, store_name: str) -> None:
    with Broker(tmp_path, store=store_name, revive_interval_ms=100) as b:
        b.create_topic("T", queue_nums=4)
        _send(b, 8)
        for m, h in _handles(b, b.pop_message("g", "T", -1, 32, 60_000)):
            b.ack_message("g", "T", m.queue_id, h, m.queue_offset)
        b.pop_revive.commit_progress()
        topic = b.pop.revive_topic
        committed = b.offsets.query_group_offsets(wire.REVIVE_GROUP, topic)
        ends = {q: b.get_max_offset(topic, q) for q in range(b.config.revive_queue_num)}
        # A checkpoint per queue the pop read (4), an ack per message (8).
        assert committed == ends and sum(ends.values()) == 12
        assert b.pop.revive_commit_offsets() == {}


def test_held_notification_wakes_on_a_message(broker: Broker) -> None:
    assert broker.notification("g", "T", -1, 0) is False
    answers: list[bool] = []
    t = threading.Thread(target=lambda: answers.append(broker.notification("g", "T", -1, 5000)))
    t.start()
    time.sleep(0.2)
    _send(broker, 1)
    t.join()
    assert answers == [True]


def test_a_group_with_classic_consumers_cannot_pop(broker: Broker) -> None:
    broker.heartbeat("c1", [ConsumerData(group_name="cg")])
    with pytest.raises(BrokerError) as info:
        broker.pop_message("cg", "T", -1, 1, 5000)
    assert info.value.code == ResponseCode.NO_PERMISSION


def test_a_pop_group_cannot_pull(broker: Broker) -> None:
    _send(broker, 1)
    broker.pop_message("pg1", "T", -1, 1, 5000)
    with pytest.raises(BrokerError) as info:
        broker.pull_message("pg1", "T", 0, 0)
    assert info.value.code == ResponseCode.NO_PERMISSION
    assert broker.pull_message("other", "T", 0, 0).code in (0, 19)


def test_revive_settings_below_one_are_refused(tmp_path: Path) -> None:
    from mqcore.errors import InvalidArgumentError

    for bad in ({"revive_queue_num": 0}, {"revive_interval_ms": 0}):
        with pytest.raises(InvalidArgumentError, match="at least 1"):
            Broker(tmp_path / "b", **bad)
    assert not (tmp_path / "b").exists()  # refused before anything was made
