"""MultiQueuePut (mqcore.storecaps): a put to several queues at once stores what the same puts
one after another store, on every store that declares it."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqcore import Message, errors
from mqcore.message import PROPERTY_UNIQ_KEY, system_message
from mqcore.store import SCHEDULE_TOPIC
from mqcore.storecaps import MultiQueuePut, PutRequest, UnitReader

BORN_TS = 1_700_000_000_123
_FIELDS = (
    "topic",
    "queue_id",
    "queue_offset",
    "commitlog_offset",
    "store_size",
    "body",
    "tags",
    "keys",
    "properties",
    "flag",
    "sys_flag",
    "born_timestamp",
    "born_host",
    "reconsume_times",
    "msg_id",
)
_counter = itertools.count()


def _need(store: Any) -> None:
    if not isinstance(store, MultiQueuePut):
        pytest.skip(f"{type(store).__name__} is no MultiQueuePut")


def _message(topic: str, n: int, size: int, keyed: bool, uniq: bool) -> Message:
    fields: dict[str, Any] = {
        "topic": topic,
        "body": bytes([n % 251]) * size,
        "tags": "AB"[n % 2],
        "keys": f"k{n} shared" if keyed else "",
    }
    if uniq:  # as a producer sets it
        return system_message(properties={PROPERTY_UNIQ_KEY: f"U{topic}{n:06d}"}, **fields)
    return Message(**fields)


_request = st.tuples(
    st.sampled_from(["MA", "MB"]),  # topic
    st.integers(0, 2),  # queue id
    st.lists(  # messages: body size, keyed, with a unique id
        st.tuples(st.integers(0, 1500), st.booleans(), st.booleans()), min_size=0, max_size=4
    ),
    st.sampled_from([None, "10.1.2.3:4567"]),  # born host
    st.integers(0, 3),  # reconsume times
    st.sampled_from([0, 2]),  # sys flag (2: multiple tags; 1 would mark a zlib body)
)


def _requests(spec: list[Any]) -> list[PutRequest]:
    out = []
    n = 0
    for topic, qid, msgs, born_host, reconsume, sys_flag in spec:
        messages = []
        for size, keyed, uniq in msgs:
            messages.append(_message(topic, n, size, keyed, uniq))
            n += 1
        out.append(
            PutRequest(
                topic,
                qid,
                messages,
                born_timestamp=BORN_TS + n,
                born_host=born_host,
                reconsume_times=reconsume,
                sys_flag=sys_flag,
            )
        )
    return out


def _put_each(store: Any, requests: list[PutRequest]) -> list[Any]:
    return [
        store.put(
            r.topic,
            r.queue_id,
            r.messages,
            born_timestamp=r.born_timestamp,
            born_host=r.born_host,
            reconsume_times=r.reconsume_times,
            sys_flag=r.sys_flag,
        )
        for r in requests
    ]


def _contents(harness: Any, store: Any) -> dict[tuple[str, int], list[tuple[Any, ...]]]:
    out = {}
    for topic in ("MA", "MB"):
        for qid in range(3):
            out[topic, qid] = [
                tuple(getattr(m, f) for f in _FIELDS) for m in harness.read_queue(store, topic, qid)
            ]
    return out


def _without_time(results: list[Any]) -> list[Any]:
    return [
        r if isinstance(r, Exception) else [p._replace(store_timestamp=0) for p in r]
        for r in results
    ]


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(specs=st.lists(st.lists(_request, max_size=6), min_size=1, max_size=3))
def test_put_many_stores_what_sequential_puts_store(harness: Any, specs: list[Any]) -> None:
    """Random request lists across topics and queues (keys, unique ids, born hosts,
    reconsume times, sys flags, empty requests): put_many and the same puts one by one give
    the same results and the same records, queue offsets, commit-log offsets, key and
    unique-id lookups, before and after the store is closed and opened again."""
    base = harness.path.with_name(f"many-{next(_counter)}")
    harness.path = base / "many"
    many = harness.open()
    _need(many)
    harness.path = base / "each"
    each = harness.open()
    try:
        for spec in specs:
            requests = _requests(spec)
            got = many.put_many(requests)
            want = _put_each(each, requests)
            assert len(got) == len(requests)
            assert _without_time(got) == _without_time(want)
            for slot, r in zip(got, requests, strict=True):
                assert isinstance(slot, list) and len(slot) == len(r.messages)
        for _ in range(2):  # live, then closed and opened again
            assert _contents(harness, many) == _contents(harness, each)
            for key in ("shared", "k3", "UMA000002", "UMB000001"):
                for topic in ("MA", "MB"):
                    found = sorted(m.commitlog_offset for m in many.lookup(topic, key))
                    assert found == sorted(m.commitlog_offset for m in each.lookup(topic, key))
            harness.path = base / "many"
            many = harness.reopen(many)
            harness.path = base / "each"
            each = harness.reopen(each)
    finally:
        harness.close_all()


def test_put_many_of_nothing_stores_nothing(store: Any) -> None:
    _need(store)
    assert store.put_many([]) == []
    assert store.put_many([PutRequest("E", 0, [])]) == [[]]
    assert store.max_offset("E", 0) == 0


def test_a_refused_request_gets_its_error_and_the_others_are_stored(harness: Any) -> None:
    """A request put would refuse (a topic too long to encode) holds that error in its slot;
    the requests before and after it are stored and readable after reopening."""
    store = harness.open()
    _need(store)
    bad = "T" * 300
    with pytest.raises(errors.MQError) as refused:
        store.put(bad, 0, [Message(topic=bad, body=b"x")])
    requests = [
        PutRequest("R", 0, [Message(topic="R", body=b"first", keys="one")]),
        PutRequest(bad, 0, [Message(topic=bad, body=b"refused")]),
        PutRequest("R", 1, [Message(topic="R", body=b"second"), Message(topic="R", body=b"3")]),
        PutRequest("R", 0, [Message(topic="R", body=b"fourth")]),
    ]
    slots = store.put_many(requests)
    assert type(slots[1]) is type(refused.value)
    assert isinstance(slots[1], errors.MQError)
    assert [r.queue_offset for r in slots[0]] == [0]
    assert [r.queue_offset for r in slots[2]] == [0, 1]
    assert [r.queue_offset for r in slots[3]] == [1]
    store = harness.reopen(store)
    assert [m.body for m in harness.read_queue(store, "R", 0)] == [b"first", b"fourth"]
    assert [m.body for m in harness.read_queue(store, "R", 1)] == [b"second", b"3"]
    assert [m.body for m in store.lookup("R", "one")] == [b"first"]


def test_put_many_holds_delayed_messages_as_put_does(harness: Any) -> None:
    """Into the schedule topic each delayed message's unit holds its deliver time (the
    store time plus its level's delay), as put stores it."""
    store = harness.open()
    _need(store)
    if not isinstance(store, UnitReader):
        pytest.skip(f"{type(store).__name__} is no UnitReader")
    held = [Message(topic=SCHEDULE_TOPIC, body=b"held", delay_level=level) for level in (1, 3, 0)]
    (slot,) = store.put_many([PutRequest(SCHEDULE_TOPIC, 2, held)])
    assert isinstance(slot, list)
    store.put(SCHEDULE_TOPIC, 3, held)
    units = {}
    for qid in (2, 3):
        got = store.get_units(SCHEDULE_TOPIC, qid, 0, 10)
        msgs = harness.read_queue(store, SCHEDULE_TOPIC, qid)
        codes = [code for _, _, code in _iter_units(got.units)]
        units[qid] = [
            code - m.store_timestamp if m.delay_level else None
            for code, m in zip(codes, msgs, strict=True)
        ]
    assert units[2] == units[3] == [1000, 10_000, None]


def _iter_units(data: bytes) -> list[tuple[int, int, int]]:
    from mqcore.record.unit import UNIT

    return list(UNIT.iter_unpack(data))


def test_put_many_on_a_closed_store_raises(harness: Any) -> None:
    store = harness.open()
    _need(store)
    store.close()
    with pytest.raises(errors.StoreClosedError):
        store.put_many([PutRequest("C", 0, [Message(topic="C", body=b"x")])])
