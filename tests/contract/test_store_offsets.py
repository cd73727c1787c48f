"""Hypothesis: offsets strictly increase across segment rolls and reopenings."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqcore import Message

_put = st.tuples(
    st.just("put"),
    st.integers(0, 2),  # queue id
    st.lists(st.integers(0, 1200), min_size=1, max_size=4),  # body sizes of one batch
)
_ops = st.lists(st.one_of(_put, st.just(("reopen",))), min_size=1, max_size=25)
_counter = itertools.count()


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=_ops)
def test_offsets_strictly_increase_across_rolls_and_reopenings(harness, ops):
    """Commit-log offsets only grow, queue offsets count up from 0, nothing is lost."""
    # One directory per example: the harness's tmp_path is shared by every example.
    harness.path = harness.path.with_name(f"store-{next(_counter)}")
    store = harness.open()
    expected: dict[int, list[bytes]] = {0: [], 1: [], 2: []}
    last_commitlog = -1
    try:
        for op in ops:
            if op[0] == "reopen":
                store = harness.reopen(store)
                continue
            _, qid, sizes = op
            bodies = [bytes([len(expected[qid]) % 251]) * size for size in sizes]
            results = store.put("HY", qid, [Message(topic="HY", body=b) for b in bodies])
            for i, r in enumerate(results):
                assert r.commitlog_offset > last_commitlog
                last_commitlog = r.commitlog_offset
                assert r.queue_offset == len(expected[qid]) + i
            expected[qid].extend(bodies)
        store = harness.reopen(store)
        everything: list[Any] = []
        for qid, bodies in expected.items():
            msgs = harness.read_queue(store, "HY", qid)
            assert [m.body for m in msgs] == bodies
            everything += msgs
        harness.assert_log_contiguous(everything)
    finally:
        harness.close_all()
