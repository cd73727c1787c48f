"""The client/broker seam: an in-process broker is known by the calls the embedded transport
makes on it (the clients import nothing of mqcore.broker)."""

from __future__ import annotations

import pytest

from mqcore import Broker, Message, Producer
from mqcore.client.transport_embedded import EmbeddedTransport, InProcessBroker
from mqcore.client.transport_remote import RemoteTransport
from mqcore.errors import InvalidArgumentError


def test_a_broker_is_what_the_embedded_transport_calls(broker: Broker, transport: str) -> None:
    assert isinstance(broker, InProcessBroker)
    with Producer("pg", broker=broker) as p:
        expected = EmbeddedTransport if transport == "embedded" else RemoteTransport
        assert type(p.broker) is expected
        assert p.send(Message(topic="T", body=b"x")).queue_offset == 0


def test_an_object_lacking_a_call_is_no_broker(broker: Broker) -> None:
    """Something with a broker's state but not its calls is refused, naming what it is."""

    class Lookalike:
        closed = False
        kernel = broker.kernel
        config = broker.config
        waiters = broker.waiters

    assert not isinstance(Lookalike(), InProcessBroker)
    with pytest.raises(InvalidArgumentError, match="broker= must be a Broker .* got Lookalike"):
        Producer("pg", broker=Lookalike())
