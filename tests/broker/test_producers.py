"""Producer groups on the broker: which member a transaction check can ask."""

from __future__ import annotations

import time

from mqcore.broker.producers import ProducerManager


class Channel:
    def __init__(self, connection: object = None) -> None:
        self.connection = connection

    def check_transaction_state(self, header: object, msg: object) -> None:
        """A producer that can be asked."""


def test_only_members_with_a_channel_that_answers_are_asked() -> None:
    m = ProducerManager()
    m.register("plain", "g")  # no channel: a plain producer
    assert m.channel("g", "check_transaction_state") is None
    asked = Channel()
    m.register("tx", "g", asked)
    m.register("tx", "g")  # a heartbeat without a channel keeps the one it left
    assert m.channel("g", "check_transaction_state") == ("tx", asked)
    assert m.client_ids("g") == ["plain", "tx"]
    assert m.unregister("tx", "g") and not m.unregister("tx", "g")
    assert m.channel("g", "check_transaction_state") is None


def test_expiry_and_closed_connections() -> None:
    m = ProducerManager(channel_expired_timeout_ms=1000)
    conn = object()
    m.register("a", "g", Channel(conn))
    m.register("b", "g", Channel(object()))
    assert m.unregister_connection("a", conn) == ["g"]
    assert m.client_ids("g") == ["b"]
    now = int(time.time() * 1000)
    assert m.scan_expired(now) == []
    assert m.scan_expired(now + 5000) == [("g", "b")]
    assert m.groups() == []
