"""``max_transfer_count_on_message_in_memory``: the most messages one pull returns."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqcore import Broker, Message
from mqcore.protocol.codes import ResponseCode


@pytest.mark.parametrize(("cap", "asked", "got"), [(0, 100, 100), (32, 100, 32), (32, 10, 10)])
def test_a_pull_returns_at_most_the_cap(tmp_path: Path, cap: int, asked: int, got: int) -> None:
    """Capped at 32 (Apache RocketMQ's figure), a pull of 100 gets 32 and its nextBeginOffset
    says where the next pull starts; 0 caps nothing."""
    with Broker(tmp_path, max_transfer_count_on_message_in_memory=cap) as broker:
        broker.create_topic("T", queue_nums=1)
        broker.send_message("T", 0, [Message(topic="T", body=b"%d" % i) for i in range(200)])
        resp = broker.pull_message("g", "T", 0, 0, asked)
        assert resp.code is ResponseCode.SUCCESS
        assert len(resp.records) == got
        assert resp.next_begin_offset == got


def test_a_filtered_pull_is_capped_too(tmp_path: Path) -> None:
    """The cap counts the messages that matched, not those scanned."""
    with Broker(tmp_path, max_transfer_count_on_message_in_memory=32) as broker:
        broker.create_topic("T", queue_nums=1)
        msgs = [Message(topic="T", body=b"x", tags="A" if i % 2 else "B") for i in range(200)]
        broker.send_message("T", 0, msgs)
        resp = broker.pull_message("g", "T", 0, 0, 100, sub_expression="A")
        assert len(resp.messages) == 32
        assert {m.tags for m in resp.messages} == {"A"}
        assert resp.next_begin_offset == 64
