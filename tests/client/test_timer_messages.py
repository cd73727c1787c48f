"""Timer messages through the client API, on both transports: send, hold, receive."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mqtest import FakeClock

from mqcore import Broker, Message, MessageQueue, Producer, PullConsumer, PullStatus
from mqcore.errors import InvalidArgumentError, MQError

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def clocked(tmp_path: Path, store_name: str) -> Any:
    clock = FakeClock()
    with Broker(
        tmp_path / "data", store=store_name, timer_scheduler_options={"clock": clock},
        timer_max_delay_sec=600,
    ) as b:  # fmt: skip
        b.create_topic("T", queue_nums=1)
        yield b, clock


def test_a_timer_sent_by_a_producer_arrives_when_due(clocked: Any) -> None:
    broker, clock = clocked
    mq = MessageQueue("T", broker.config.broker_name, 0)
    due = clock.now + 5000
    with Producer("pg", broker=broker) as p, PullConsumer("cg", broker=broker) as c:
        sent = p.send(Message(topic="T", body=b"later", keys="order-1", deliver_time_ms=due))
        p.send(Message(topic="T", body=b"now"))
        assert [m.body for m in c.pull(mq, "*", 0).msg_found_list] == [b"now"]
        clock.now = due
        broker.timer_scheduler.run_due()
        got = c.pull(mq, "*", 1)
        assert got.pull_status is PullStatus.FOUND
        (m,) = got.msg_found_list
        assert (m.body, m.keys, m.deliver_time_ms) == (b"later", "order-1", due)
        assert m.msg_id == sent.msg_id  # the unique id the send returned survives the hold


def test_refusals_reach_the_sender(clocked: Any) -> None:
    broker, _ = clocked
    with Producer("pg", broker=broker) as p:
        both = Message(topic="T", body=b"x", delay_level=2, delay_ms=3000)
        with pytest.raises(InvalidArgumentError, match="delay level 2 and a timer"):
            p.send(both)
        with pytest.raises(MQError, match="timer_max_delay_sec"):
            p.send(Message(topic="T", body=b"x", delay_sec=601))
    assert broker.get_max_offset("rmq_sys_wheel_timer", 0) == 0
