"""RocketMQ 5's topic attributes: the ``+name=value`` wire form, kept by the broker's topic
table across a reopen, and set by the admin client (``mqcore topic create --message-type``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqcore import Broker
from mqcore.client.admin import MQAdmin
from mqcore.errors import MessageIllegalError
from mqcore.protocol.attributes import format_topic_attributes, parse_topic_attributes
from mqcore.server import Server


def test_wire_form_round_trip():
    assert parse_topic_attributes("+message.type=FIFO") == {"message.type": "FIFO"}
    assert parse_topic_attributes(None) is None and parse_topic_attributes("") is None
    assert format_topic_attributes({"message.type": "DELAY"}) == "+message.type=DELAY"
    assert format_topic_attributes({}) is None


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("message.type=FIFO", "is not \\+NAME=VALUE"),
        ("+message.type", "is not \\+NAME=VALUE"),
        ("+colour=red", "unknown topic attribute 'colour'"),
        ("+message.type=ORDERED", "'ORDERED' is not one of"),
    ],
)
def test_bad_attributes_are_refused_naming_them(text, match):
    with pytest.raises(MessageIllegalError, match=match):
        parse_topic_attributes(text)


def test_the_broker_keeps_attributes_across_reopen_and_updates(tmp_path: Path):
    with Broker(tmp_path) as broker:
        broker.create_topic("F", 4, attributes={"message.type": "FIFO"})
        broker.create_topic("F", 8)  # an update that says nothing of them keeps them
        assert broker.topics.get("F").attributes == {"message.type": "FIFO"}
    with Broker(tmp_path) as broker:
        cfg = broker.topics.get("F")
        assert (cfg.read_queue_nums, cfg.attributes) == (8, {"message.type": "FIFO"})


def test_admin_create_topic_sets_the_message_type(tmp_path: Path):
    with Server(tmp_path, "127.0.0.1:0") as srv, MQAdmin(srv.address) as admin:
        admin.create_topic("TX", 2, message_type="TRANSACTION")
        assert srv.broker.topics.get("TX").attributes == {"message.type": "TRANSACTION"}
        admin.create_topic("N", 2)
        assert srv.broker.topics.get("N").attributes == {}
