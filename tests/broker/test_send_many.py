"""Broker.send_many on a store without MultiQueuePut: each plain send is stored by a put of
its own, with what send_message would give it (results or error), in order."""

from __future__ import annotations

import zlib
from typing import Any

import pytest

from mqcore import Broker
from mqcore.broker.groupcommit import SendRequest
from mqcore.errors import MQError
from mqcore.message import Message
from mqcore.storecaps import MultiQueuePut


class _PutOnly:
    """The broker's store with Store's operations only (no put_many); counts its puts."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.puts: list[int] = []

    def __getattr__(self, name: str) -> Any:
        if name == "put_many":
            raise AttributeError(name)
        return getattr(self._inner, name)

    def put(self, topic: str, queue_id: int, messages: Any, **kw: Any) -> Any:
        self.puts.append(len(messages))
        return self._inner.put(topic, queue_id, messages, **kw)


def test_a_store_without_put_many_gets_a_put_per_send(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _PutOnly(broker.store)
    assert not isinstance(store, MultiQueuePut)
    monkeypatch.setattr(broker, "store", store)
    requests = [
        SendRequest("T", 1, [Message(topic="T", body=b"a")]),
        SendRequest("T", 9, [Message(topic="T", body=b"bad queue")]),  # T has 4 queues
        SendRequest("T", 2, [Message(topic="T", body=zlib.compress(b"b"))], sys_flag=1),
        SendRequest("T", 1, [Message(topic="T", body=b"c")]),
    ]
    out = broker.send_many(requests)
    assert store.puts == [1, 1, 1]  # the refused one never reached the store
    assert isinstance(out[1], MQError) and "queueId[9]" in str(out[1])
    offsets = [o[0].queue_offset for o in out if not isinstance(o, MQError)]
    assert offsets == [0, 0, 1]  # queues 1, 2, 1
    for (queue_id, offset), body in [((1, 0), b"a"), ((2, 0), b"b"), ((1, 1), b"c")]:
        got = broker.pull_message("check", "T", queue_id, offset, 1)
        assert got.messages[0].body == body
