"""send_async: queued sends are stored a batch at a time, each with its own result."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from mqcore import Broker, Message, Producer, SendStatus
from mqcore.errors import MessageIllegalError, MQClientError, SendTimeoutError


@pytest.fixture
def broker_options() -> dict[str, Any]:
    # Topics are created here, and a send to any other is refused (the refusal is tested).
    return {"auto_create_topic_enable": False}


@pytest.fixture
def broker_topics() -> dict[str, int]:
    return {"T": 4, "U": 2}


class Gate:
    """Wraps the broker's two ways of storing what a producer sent (``send_message``, and
    ``send_prepared``, which a server uses for a batch of plain messages): records batch
    sizes; the first call waits for release."""

    def __init__(self, broker: Broker, monkeypatch: Any) -> None:
        self.real = broker.send_message
        self.real_prepared = broker.send_prepared
        self.release = threading.Event()
        self.entered = threading.Event()
        self.batches: list[tuple[str, int, int]] = []  # topic, queue id, size
        monkeypatch.setattr(broker, "send_message", self)
        monkeypatch.setattr(broker, "send_prepared", self.prepared)

    def _enter(self, topic: str, queue_id: int, size: int) -> None:
        self.entered.set()
        assert self.release.wait(20)
        self.batches.append((topic, queue_id, size))

    def __call__(self, topic: str, queue_id: int, messages: Any, **kw: Any) -> Any:
        self._enter(topic, queue_id, len(messages))
        return self.real(topic, queue_id, messages, **kw)

    def prepared(self, topic: str, queue_id: int, prepared: Any, *args: Any, **kw: Any) -> Any:
        self._enter(topic, queue_id, len(prepared))
        return self.real_prepared(topic, queue_id, prepared, *args, **kw)


def _body_at(broker: Broker, topic: str, queue_id: int, offset: int) -> bytes:
    got = broker.pull_message("check", topic, queue_id, offset, 1)
    return got.messages[0].body


@pytest.mark.timeout(60)
def test_sends_queued_meanwhile_are_stored_as_batches(broker, monkeypatch) -> None:
    gate = Gate(broker, monkeypatch)
    with Producer("pg", broker=broker) as p:
        first = p.send_async(Message(topic="T", body=b"first"))
        assert gate.entered.wait(10)  # the sender thread is busy with the first send
        futures = [p.send_async(Message(topic="T", body=b"m%d" % i)) for i in range(300)]
        gate.release.set()
        results = [f.result(timeout=20) for f in [first, *futures]]
    assert all(r.send_status is SendStatus.SEND_OK for r in results)
    assert len({r.msg_id for r in results}) == 301
    # 300 sends queued behind the first: a few batches (256 messages at most), not 300 puts.
    assert len(gate.batches) <= 3
    assert max(size for _, _, size in gate.batches) == 256
    for i, r in enumerate(results[1:]):
        body = _body_at(broker, "T", r.message_queue.queue_id, r.queue_offset)
        assert body == b"m%d" % i


@pytest.mark.timeout(60)
def test_groups_follow_topic_selected_queue_and_delay(broker, monkeypatch) -> None:
    gate = Gate(broker, monkeypatch)

    def to_queue(mqs: list[Any], msg: Message, arg: Any) -> Any:
        return mqs[arg]

    with Producer("pg", broker=broker) as p:
        p.send_async(Message(topic="T", body=b"first"))
        assert gate.entered.wait(10)
        futures = []
        for i in range(10):
            futures.append(p.send_async(Message(topic="T", body=b"t%d" % i)))
            futures.append(p.send_async(Message(topic="U", body=b"u%d" % i)))
            futures.append(
                p.send_async(Message(topic="T", body=b"o%d" % i), selector=to_queue, arg=2)
            )
        delayed = p.send_async(Message(topic="T", body=b"later", delay_level=1))
        gate.release.set()
        results = [f.result(timeout=20) for f in futures]
        delayed.result(timeout=20)
    sizes = sorted(gate.batches[1:], key=lambda b: (b[0], b[2]))
    assert [(t, n) for t, _, n in sizes] == [("T", 1), ("T", 10), ("T", 10), ("U", 10)]
    ordered = [r for i, r in enumerate(results) if i % 3 == 2]
    assert {r.message_queue.queue_id for r in ordered} == {2}
    assert [r.queue_offset for r in ordered] == sorted(r.queue_offset for r in ordered)
    for i, r in enumerate(results):
        topic = r.message_queue.topic
        expected = (b"t%d", b"u%d", b"o%d")[i % 3] % (i // 3)
        assert _body_at(broker, topic, r.message_queue.queue_id, r.queue_offset) == expected


@pytest.mark.timeout(60)
def test_a_send_that_times_out_while_queued_is_not_stored(broker, monkeypatch) -> None:
    gate = Gate(broker, monkeypatch)
    with Producer("pg", broker=broker) as p:
        p.send_async(Message(topic="U", body=b"first"))
        assert gate.entered.wait(10)
        late = p.send_async(Message(topic="T", body=b"late"), timeout=0.01)
        threading.Event().wait(0.1)  # the queued send's deadline passes
        gate.release.set()
        with pytest.raises(SendTimeoutError, match="queued"):
            late.result(timeout=20)
    assert all(topic == "U" for topic, _, _ in gate.batches)
    assert sum(broker.get_max_offset("T", q) for q in range(4)) == 0


@pytest.mark.timeout(60)
def test_invalid_sends_fail_their_own_future_only(broker) -> None:
    errors: list[BaseException | None] = []
    with Producer("pg", broker=broker) as p:
        bad = p.send_async(Message(topic="T", body=b""), lambda r, e: errors.append(e))
        missing = p.send_async(Message(topic="Missing", body=b"x"))
        good = p.send_async(Message(topic="T", body=b"ok"))
        assert good.result(timeout=20).send_status is SendStatus.SEND_OK
        with pytest.raises(MQClientError):
            missing.result(timeout=20)
    with pytest.raises(MessageIllegalError, match="zero"):
        bad.result(timeout=1)
    assert len(errors) == 1 and errors[0] is not None


@pytest.mark.timeout(60)
def test_shutdown_stores_everything_queued(broker) -> None:
    p = Producer("pg", broker=broker)
    p.start()
    futures = [p.send_async(Message(topic="T", body=b"%d" % i)) for i in range(2000)]
    p.shutdown()
    assert all(f.done() for f in futures)
    assert len({f.result().msg_id for f in futures}) == 2000
    assert sum(broker.get_max_offset("T", q) for q in range(4)) == 2000
    with pytest.raises(MQClientError):
        p.send_async(Message(topic="T", body=b"after"))
