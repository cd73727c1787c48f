"""Broker.send_many on a store without MultiQueuePut: each plain send is stored by a put of
its own, with what send_message would give it (results or error), in order. Prepared sends
(PreparedSend): one put_many_prepared with the message sends beside them on a store that
takes it, one put_prepared each on one that does not."""

from __future__ import annotations

import zlib
from typing import Any

import pytest

from mqcore import Broker
from mqcore.broker.groupcommit import PreparedSend, SendRequest
from mqcore.codec import prepare
from mqcore.errors import InvalidArgumentError, MQError
from mqcore.message import PROPERTY_UNIQ_KEY, Message, system_message
from mqcore.storecaps import MultiQueuePut, PreparedMultiPut


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


class _Prepared:
    """The broker's store with put_prepared and put_many_prepared counted; without
    put_many_prepared (nor put_many) unless ``many``."""

    def __init__(self, inner: Any, many: bool) -> None:
        self._inner = inner
        self._many = many
        self.calls: list[tuple[str, int]] = []

    def __getattr__(self, name: str) -> Any:
        if name in ("put_many", "put_many_prepared") and not self._many:
            raise AttributeError(name)
        if name in ("put", "put_prepared", "put_many", "put_many_prepared"):
            real = getattr(self._inner, name)

            def counted(first: Any, *args: Any, **kw: Any) -> Any:
                self.calls.append((name, len(first) if isinstance(first, list) else 1))
                return real(first, *args, **kw)

            return counted
        return getattr(self._inner, name)


def _prepared(topic: str, queue_id: int, body: bytes, uniq: str | None = None) -> PreparedSend:
    if uniq is None:
        msg = Message(topic=topic, body=body)
    else:
        msg = system_message(topic=topic, body=body, properties={PROPERTY_UNIQ_KEY: uniq})
    (record,) = prepare([msg], 1_700_000_000_000, topic=topic)
    return PreparedSend(topic, queue_id, record, uniq, "10.0.0.1:5000")


@pytest.mark.parametrize("many", [True, False])
def test_prepared_sends_are_stored_with_the_others(
    broker: Broker, monkeypatch: pytest.MonkeyPatch, many: bool
) -> None:
    """A run of prepared and message sends: one put_many_prepared for all of it on a store
    that takes it (a delayed send stored alone in its place), one put_prepared or put each
    on one that does not; a prepared send to a queue out of range gets the broker's error
    and never reaches the store. Each is stored where its results say, unique id indexed."""
    store = _Prepared(broker.store, many)
    assert isinstance(store, PreparedMultiPut) is many
    monkeypatch.setattr(broker, "store", store)
    requests: list[Any] = [
        _prepared("T", 1, b"a", uniq="U-a"),
        SendRequest("T", 1, [Message(topic="T", body=b"b")], born_timestamp=5),
        _prepared("T", 9, b"bad queue"),
        _prepared("T", 2, b"c"),
        SendRequest("T", 2, [Message(topic="T", body=b"held", delay_level=1)]),
        _prepared("T", 1, b"d"),
    ]
    out = broker.send_many(requests)
    assert isinstance(out[2], MQError) and "queueId[9]" in str(out[2])
    if many:
        assert store.calls[0] == ("put_many_prepared", 3)
        assert store.calls[-1] == ("put_many_prepared", 1)
    else:
        names = [name for name, _ in store.calls]
        assert names[:3] == ["put_prepared", "put", "put_prepared"]
        assert names[-1] == "put_prepared"
        assert "put_many_prepared" not in names and "put_many" not in names
    for slot, body in [(0, b"a"), (1, b"b"), (3, b"c"), (5, b"d")]:
        result = out[slot]
        assert isinstance(result, list)
        qid = requests[slot].queue_id
        got = broker.pull_message("check", "T", qid, result[0].queue_offset, 1).messages
        assert got[0].body == body and got[0].offset_msg_id == result[0].msg_id
    assert [r.queue_offset for r in out[0] + out[1] + out[5]] == [0, 1, 2]  # type: ignore[operator]
    assert broker.query_message_by_uniq_key("T", "U-a").body == b"a"


def test_prepared_sends_on_a_store_without_put_prepared_are_refused(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store that takes no prepared records: a prepared send gets an InvalidArgumentError
    naming the store, the message sends beside it are stored."""
    monkeypatch.setattr(broker, "store", _PutOnly(broker.store))
    monkeypatch.setattr(broker, "takes_prepared", lambda: False)
    monkeypatch.setattr(broker, "takes_prepared_many", lambda: False)
    out = broker.send_many(
        [_prepared("T", 0, b"p"), SendRequest("T", 0, [Message(topic="T", body=b"m")])]
    )
    assert isinstance(out[0], InvalidArgumentError) and "put_prepared" in str(out[0])
    assert isinstance(out[1], list) and out[1][0].queue_offset == 0
