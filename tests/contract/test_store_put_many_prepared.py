"""PreparedMultiPut (mqcore.storecaps): records prepared ahead, put to several queues at once,
store what ``put_many`` of the messages they stand for stores, on every store that declares
it."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqcore import Message, codec, errors
from mqcore.store import SCHEDULE_TOPIC
from mqcore.storecaps import MultiQueuePut, PreparedMultiPut, PreparedPutRequest, PutRequest
from mqcore.uniqkey import uniq_ids

from .test_store_put_many import _contents, _request, _requests, _without_time

_counter = itertools.count()


def _need(store: Any) -> None:
    if not isinstance(store, PreparedMultiPut):
        pytest.skip(f"{type(store).__name__} is no PreparedMultiPut")


def prepared_requests(requests: list[PutRequest]) -> list[PreparedPutRequest]:
    """Each put request as the records :func:`mqcore.codec.prepare` makes of its messages."""
    return [
        PreparedPutRequest(
            r.topic,
            r.queue_id,
            codec.prepare(
                r.messages,
                r.born_timestamp or 0,
                topic=r.topic,
                reconsume_times=r.reconsume_times,
                sys_flag=r.sys_flag,
            )
            if r.messages
            else [],
            uniq_ids(r.messages),
            r.born_host,
        )
        for r in requests
    ]


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(specs=st.lists(st.lists(_request, max_size=6), min_size=1, max_size=3))
def test_put_many_prepared_stores_what_put_many_stores(harness: Any, specs: list[Any]) -> None:
    """Random request lists across topics and queues (keys, unique ids, born hosts,
    reconsume times, sys flags, empty requests): put_many_prepared of the prepared records
    and put_many of the messages give the same results and store the same records, queue
    and commit-log offsets, key and unique-id lookups (apart from the store time), before
    and after the store is closed and opened again."""
    base = harness.path.with_name(f"prep-{next(_counter)}")
    harness.path = base / "prepared"
    prepared = harness.open()
    _need(prepared)
    harness.path = base / "many"
    many = harness.open()
    assert isinstance(many, MultiQueuePut)
    try:
        for spec in specs:
            requests = _requests(spec)
            got = prepared.put_many_prepared(prepared_requests(requests))
            want = many.put_many(requests)
            assert len(got) == len(requests)
            assert _without_time(got) == _without_time(want)
            for slot, r in zip(got, requests, strict=True):
                assert isinstance(slot, list) and len(slot) == len(r.messages)
        for _ in range(2):  # live, then closed and opened again
            stored = _contents(harness, prepared)
            assert stored == _contents(harness, many)
            for key in ("shared", "k3", "UMA000002", "UMB000001"):
                for topic in ("MA", "MB"):
                    found = sorted(m.commitlog_offset for m in prepared.lookup(topic, key))
                    assert found == sorted(m.commitlog_offset for m in many.lookup(topic, key))
            harness.path = base / "prepared"
            prepared = harness.reopen(prepared)
            harness.path = base / "many"
            many = harness.reopen(many)
    finally:
        harness.close_all()


def test_put_many_prepared_offsets_follow_each_queue(store: Any) -> None:
    """Requests to the same queue, interleaved with another queue's, take consecutive queue
    offsets in order and increasing commit-log offsets; each result names its record."""
    _need(store)
    msgs = [Message(topic="P", body=b"m%d" % i) for i in range(5)]
    reqs = [PutRequest("P", i % 2, [m], born_timestamp=1) for i, m in enumerate(msgs)]
    slots = store.put_many_prepared(prepared_requests(reqs))
    assert [s[0].queue_offset for s in slots] == [0, 0, 1, 1, 2]
    phys = [s[0].commitlog_offset for s in slots]
    assert phys == sorted(phys) and len(set(phys)) == 5
    for s, r in zip(slots, reqs, strict=True):
        got = store.get("P", r.queue_id, s[0].queue_offset, max_count=1).messages
        assert [m.body for m in got] == [r.messages[0].body]
        assert got[0].msg_id == s[0].msg_id
    assert (store.max_offset("P", 0), store.max_offset("P", 1)) == (3, 2)


def test_put_many_prepared_of_nothing_stores_nothing(store: Any) -> None:
    _need(store)
    assert store.put_many_prepared([]) == []
    assert store.put_many_prepared([PreparedPutRequest("E", 0, [])]) == [[]]
    assert store.max_offset("E", 0) == 0


def test_a_refused_request_gets_its_error_and_the_others_are_stored(harness: Any) -> None:
    """A request for the schedule topic (whose records need their messages) holds an
    InvalidArgumentError in its slot, as put_prepared raises it; the requests before and
    after it are stored and readable after reopening."""
    store = harness.open()
    _need(store)
    held = [Message(topic=SCHEDULE_TOPIC, body=b"held", delay_level=1)]
    with pytest.raises(errors.InvalidArgumentError):
        store.put_prepared(SCHEDULE_TOPIC, 0, codec.prepare(held, 1, topic=SCHEDULE_TOPIC))
    requests = [
        PutRequest("R", 0, [Message(topic="R", body=b"first", keys="one")]),
        PutRequest(SCHEDULE_TOPIC, 0, held),
        PutRequest("R", 1, [Message(topic="R", body=b"second"), Message(topic="R", body=b"3")]),
        PutRequest("R", 0, [Message(topic="R", body=b"fourth")]),
    ]
    slots = store.put_many_prepared(prepared_requests(requests))
    assert isinstance(slots[1], errors.InvalidArgumentError)
    assert SCHEDULE_TOPIC in str(slots[1])
    assert [r.queue_offset for r in slots[0]] == [0]
    assert [r.queue_offset for r in slots[2]] == [0, 1]
    assert [r.queue_offset for r in slots[3]] == [1]
    assert store.max_offset(SCHEDULE_TOPIC, 0) == 0
    store = harness.reopen(store)
    assert [m.body for m in harness.read_queue(store, "R", 0)] == [b"first", b"fourth"]
    assert [m.body for m in harness.read_queue(store, "R", 1)] == [b"second", b"3"]
    assert [m.body for m in store.lookup("R", "one")] == [b"first"]


def test_put_many_prepared_on_a_closed_store_raises(harness: Any) -> None:
    store = harness.open()
    _need(store)
    store.close()
    (request,) = prepared_requests([PutRequest("C", 0, [Message(topic="C", body=b"x")])])
    with pytest.raises(errors.StoreClosedError):
        store.put_many_prepared([request])
