"""Producer: queue choice, retries, ordered/async/oneway/batch sends and input errors."""

from __future__ import annotations

import itertools
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqcore import Broker, Message, Producer, SendStatus
from mqcore.broker import ResponseCode
from mqcore.errors import (
    BrokerClosedError,
    BrokerError,
    MessageIllegalError,
    MQClientError,
    NoRouteInfoError,
)
from mqcore.protocol.codes import NOT_FOUND_TOPIC_EXCEPTION


@pytest.fixture
def broker_options() -> dict[str, Any]:
    # Topics are created here, and a send to any other is refused (the refusal is tested).
    return {"auto_create_topic_enable": False}


def test_round_robin_over_writable_queues(broker: Broker) -> None:
    with Producer("pg", broker=broker) as p:
        queues = [p.send(Message(topic="T", body=b"x")).message_queue.queue_id for _ in range(8)]
    assert sorted(queues) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert all((b - a) % 4 == 1 for a, b in itertools.pairwise(queues))


def test_send_result_fields(broker: Broker) -> None:
    with Producer("pg", broker=broker) as p:
        r1 = p.send(Message(topic="T", body=b"a", tags="A", keys="k", properties={"x": "1"}))
        r2 = p.send(Message(topic="T", body=b"b"), selector=lambda mqs, m, a: mqs[0])
    assert r1.send_status is SendStatus.SEND_OK and r1.message_queue.topic == "T"
    assert r1.message_queue.broker_name == "broker-a"
    # msg_id is the producer's unique id (UNIQ_KEY); the stored copy is found by its offset id.
    stored = broker.view_message_by_id(r1.offset_msg_id)
    assert (stored.body, stored.tags, stored.keys, stored.properties) == (
        b"a",
        "A",
        "k",
        {"x": "1", "UNIQ_KEY": r1.msg_id},
    )
    assert stored.msg_id == r1.msg_id
    assert stored.queue_offset == r1.queue_offset
    assert r2.message_queue.queue_id == 0


def test_ordered_send_with_selector(broker: Broker) -> None:
    def by_order_id(mqs, msg, arg):  # type: ignore[no-untyped-def]
        return mqs[arg % len(mqs)]

    with Producer("pg", broker=broker) as p:
        for i in range(12):
            r = p.send(Message(topic="T", body=b"%d" % i), selector=by_order_id, arg=i % 3)
            assert r.message_queue.queue_id == i % 3
    got = broker.pull_message("g", "T", 1, 0)
    assert [m.body for m in got.messages] == [b"1", b"4", b"7", b"10"]


def test_failed_send_is_retried_on_another_queue(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []

    def flaky(real):  # type: ignore[no-untyped-def]
        def store(topic, queue_id, *args, **kw):  # type: ignore[no-untyped-def]
            calls.append(queue_id)
            if len(calls) < 3:
                # A refusal the producer retries elsewhere (a SYSTEM_BUSY is waited out on
                # the same broker by the remote transport, within the call's timeout).
                raise BrokerError("failed", code=ResponseCode.SYSTEM_ERROR)
            return real(topic, queue_id, *args, **kw)

        return store

    # Both ways the broker stores a send: send_message, and send_prepared (which a server
    # uses for a plain single send or batch).
    monkeypatch.setattr(broker, "send_message", flaky(broker.send_message))
    monkeypatch.setattr(broker, "send_prepared", flaky(broker.send_prepared))
    with Producer("pg", broker=broker) as p:
        r = p.send(Message(topic="T", body=b"x"))
    assert len(calls) == 3 and len(set(calls)) == 3 and r.message_queue.queue_id == calls[-1]
    calls.clear()
    with (
        Producer("pg", broker=broker, retry_times_when_send_failed=1) as p,
        pytest.raises(MQClientError, match="failed after 2 attempts"),
    ):
        p.send(Message(topic="T", body=b"x"))


def test_illegal_message_is_not_retried(broker: Broker) -> None:
    with Producer("pg", broker=broker) as p:
        with pytest.raises(MessageIllegalError, match="body length is zero"):
            p.send(Message(topic="T", body=b""))
        with pytest.raises(MessageIllegalError, match="over max value"):
            p.send(Message(topic="T", body=bytes(4 * 1024 * 1024 + 1)))
        with pytest.raises(MessageIllegalError, match="illegal characters"):
            p.send(Message(topic="bad topic", body=b"x"))
        with pytest.raises(MQClientError, match="No route info of this topic: Missing"):
            p.send(Message(topic="Missing", body=b"x"))
    assert sum(broker.get_max_offset("T", q) for q in range(4)) == 0


@pytest.mark.timeout(30)
def test_send_async_future_and_callback(broker: Broker) -> None:
    done = threading.Event()
    seen: list[object] = []

    def callback(result, error):  # type: ignore[no-untyped-def]
        seen.append(result if error is None else error)
        done.set()

    with Producer("pg", broker=broker) as p:
        futures = [p.send_async(Message(topic="T", body=b"%d" % i)) for i in range(50)]
        p.send_async(Message(topic="T", body=b"cb"), callback)
        results = [f.result(timeout=10) for f in futures]
        assert done.wait(10)
        bad = p.send_async(Message(topic="Missing", body=b"x"))
        with pytest.raises(MQClientError):
            bad.result(timeout=10)
    assert all(r.send_status is SendStatus.SEND_OK for r in results)
    assert seen and seen[0].send_status is SendStatus.SEND_OK  # type: ignore[attr-defined]


def test_send_oneway_and_batch(broker: Broker) -> None:
    with Producer("pg", broker=broker) as p:
        p.send_oneway(Message(topic="T", body=b"one"))
        r = p.send_batch([Message(topic="T", body=b"%d" % i) for i in range(5)])
        with pytest.raises(MessageIllegalError):
            p.send_oneway(Message(topic="T", body=b""))
        with pytest.raises(MQClientError, match="one topic"):
            p.send_batch([Message(topic="T", body=b"a"), Message(topic="U", body=b"b")])
    assert len(r.msg_id.split(",")) == 5
    got = broker.pull_message("g", "T", r.message_queue.queue_id, r.queue_offset, 5)
    assert [m.body for m in got.messages] == [b"0", b"1", b"2", b"3", b"4"]


def test_send_before_start_and_after_shutdown(broker: Broker) -> None:
    p = Producer("pg", broker=broker)
    with pytest.raises(MQClientError, match="not started"):
        p.send(Message(topic="T", body=b"x"))
    p.start()
    p.shutdown()
    with pytest.raises(MQClientError, match="shut down"):
        p.send(Message(topic="T", body=b"x"))


def test_closed_broker(tmp_path: Path, store_name: str) -> None:
    b = Broker(tmp_path, store=store_name)
    b.create_topic("T")
    with Producer("pg", broker=b) as p:
        b.close()
        with pytest.raises(BrokerClosedError, match="closed") as info:
            p.send(Message(topic="T", body=b"x"))
    assert info.value.code == ResponseCode.SERVICE_NOT_AVAILABLE


def test_hooks_are_called_once_per_batch(tmp_path: Path, store_name: str) -> None:
    from mqcore import Kernel, hookimpl

    events: list[tuple[str, int]] = []

    class Tracer:
        __name__ = "tracer"

        @hookimpl
        def mqcore_send_after(self, producer_group, messages, results):  # type: ignore[no-untyped-def]
            events.append(("sent", len(messages)))

        @hookimpl
        def mqcore_messages_stored(self, topic, queue_id, results):  # type: ignore[no-untyped-def]
            events.append(("stored", len(results)))

    kernel = Kernel(plugins=[Tracer()])
    with Broker(tmp_path, store=store_name, kernel=kernel) as b:
        b.create_topic("T")
        with Producer("pg", broker=b) as p:
            p.send_batch([Message(topic="T", body=b"x")] * 10)
    assert events == [("stored", 10), ("sent", 10)]


_FIELD = st.one_of(
    st.none(), st.text(max_size=6), st.sampled_from(["a\x01b", "é", "ok", "", "\ud800"])
)


_ANY_MESSAGE = st.fixed_dictionaries(
    {
        "topic": st.sampled_from(["T", "U", "bad topic"]),
        "body": st.sampled_from([b"x", b"", b"y" * 40, bytearray(b"z")]),
        "tags": _FIELD,
        "keys": _FIELD,
        "properties": st.dictionaries(
            st.sampled_from(["p", "UNIQ_KEY", "TAGS", "DELAY", "MIN_OFFSET", "x\x02"]),
            st.text(max_size=4),
            max_size=2,
        ),
        "delay_level": st.sampled_from([0, 3]),
    }
)
# Mostly plain messages, so that batches often begin with some (the shortcut's case).
_PLAIN_MESSAGE = st.fixed_dictionaries(
    {
        "topic": st.just("T"),
        "body": st.sampled_from([b"x", b"y" * 32]),
        "tags": st.sampled_from([None, "ok"]),
        "keys": st.sampled_from([None, "k1 k2"]),
        "properties": st.sampled_from([{}, {"p": "v"}, {"UNIQ_KEY": "ABC123"}]),
        "delay_level": st.sampled_from([0, 2]),
    }
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=st.lists(_PLAIN_MESSAGE | _PLAIN_MESSAGE | _ANY_MESSAGE, min_size=1, max_size=5))
def test_batch_checks_shortcut_agrees_with_the_checks_one_by_one(
    broker: Broker, batch: list[dict[str, object]]
) -> None:
    """send_batch checks its leading plain messages in one C call: it refuses the same batches
    with the same error and gives the same messages unique ids as checking one by one."""
    import mqcore.client.producer as producer_module

    def build() -> list[Message]:
        out = []
        for fields in batch:
            m = Message(topic="T", body=b"-")
            for name, value in fields.items():  # as a caller may, after building it
                object.__setattr__(m, name, dict(value) if name == "properties" else value)  # type: ignore[call-overload]
            out.append(m)
        return out

    def outcome() -> tuple[object, list[bool]]:
        msgs = build()
        p = Producer("pg", broker=broker, max_message_size=32)
        try:
            p._check_batch(msgs)
            error: object = None
        except Exception as exc:
            error = (type(exc), str(exc))
        return error, ["UNIQ_KEY" in m.properties for m in msgs]

    shortcut = outcome()
    saved, producer_module.SPEEDUPS = producer_module.SPEEDUPS, False
    try:  # (not monkeypatch: Hypothesis runs every example inside one test)
        assert outcome() == shortcut
    finally:
        producer_module.SPEEDUPS = saved


def test_a_selector_that_changes_its_list_leaves_later_sends_alone(broker: Broker) -> None:
    """The producer keeps a route's writable queues between sends; the list a selector gets
    is its own, so clearing it changes nothing for the next sends."""

    def greedy(mqs, msg, arg):  # type: ignore[no-untyped-def]
        first = mqs[0]
        mqs.clear()
        return first

    with Producer("pg", broker=broker) as p:
        assert p.send(Message(topic="T", body=b"x"), selector=greedy).message_queue.queue_id == 0
        queues = {p.send(Message(topic="T", body=b"y")).message_queue.queue_id for _ in range(8)}
        assert p.send(Message(topic="T", body=b"z"), selector=greedy).message_queue.queue_id == 0
    assert queues == {0, 1, 2, 3}


def test_no_writable_queue_raises_no_route_info_and_recovers(broker: Broker) -> None:
    """A topic no master can take (here: read-only) fails every send, synchronous,
    asynchronous and selected, with NoRouteInfoError, not a ZeroDivisionError from the
    round robin; once it is writable again, the next send succeeds (the route is asked for
    again on each send while it has no writable queue)."""
    from mqcore.protocol.route import PERM_READ

    broker.create_topic("R", queue_nums=2, perm=PERM_READ)
    with Producer("pg", broker=broker) as p:
        for _ in range(3):
            with pytest.raises(NoRouteInfoError, match="No route info of this topic: R") as info:
                p.send(Message(topic="R", body=b"x"))
            assert info.value.topic == "R" and info.value.code == NOT_FOUND_TOPIC_EXCEPTION
        with pytest.raises(NoRouteInfoError):
            p.send(
                Message(topic="R", body=b"x"), selector=lambda mqs, m, a: mqs[a % len(mqs)], arg=1
            )
        future = p.send_async(Message(topic="R", body=b"x"))
        assert isinstance(future.exception(timeout=10), NoRouteInfoError)
        future = p.send_async(
            Message(topic="R", body=b"x"), selector=lambda mqs, m, a: mqs[a % len(mqs)], arg=1
        )
        assert isinstance(future.exception(timeout=10), NoRouteInfoError)
        broker.create_topic("R", queue_nums=2)  # writable again
        assert p.send(Message(topic="R", body=b"x")).send_status is SendStatus.SEND_OK


def test_send_to_an_unknown_topic_says_how_to_create_it(tmp_path: Path, store_name: str) -> None:
    """RocketMQ's "No route info" error, and what to do about it (the case of a broker that
    does not create topics on first send)."""
    with (
        Broker(tmp_path, store=store_name, auto_create_topic_enable=False) as b,
        Producer("pg", broker=b) as p,
        pytest.raises(MQClientError, match="No route info of this topic: Missing") as info,
    ):
        p.send(Message(topic="Missing", body=b"x"))
    assert "`mqcore topic create Missing`" in str(info.value)
    assert "auto_create_topic_enable" in str(info.value)
