"""Retention on every store: a pass deletes the oldest data, queues and lookups follow."""

from __future__ import annotations

import time
from typing import Any

import pytest

from mqcore import Message
from mqcore.store import GetStatus
from mqcore.storecaps import ExpiringStore

HOUR = 3600.0


def _expiring(harness: Any) -> Any:
    """A store of the variant that deletes on demand; the test is skipped for others."""
    store = harness.open()
    if not isinstance(store, ExpiringStore):
        pytest.skip(f"{type(store).__name__} is no ExpiringStore (mqcore.storecaps)")
    return store


def test_retention_moves_min_offsets_and_keeps_the_rest(harness, reopen_mode):
    """Everything expired: old messages go, min offsets move, the rest is intact."""
    store = _expiring(harness)
    for i in range(40):
        for qid in (0, 1):
            batch = [
                Message(topic="RT", body=bytes([i]) * 300, keys=f"k{i} q{qid}") for _ in range(3)
            ]
            store.put("RT", qid, batch)
    before = {q: [bytes(m.record) for m in harness.read_queue(store, "RT", q)] for q in (0, 1)}
    deleted = store.delete_expired_files(now=time.time() + 1000 * HOUR)
    store = harness.readback(store)
    lows = []
    for qid in (0, 1):
        low = store.min_offset("RT", qid)
        lows.append(low)
        assert store.max_offset("RT", qid) == 120
        assert 0 <= low <= 120
        if low:
            result = store.get("RT", qid, low - 1)
            assert result.status is GetStatus.OFFSET_TOO_SMALL
            assert result.next_offset == low
        kept = [bytes(m.record) for m in harness.read_queue(store, "RT", qid)]
        assert kept == before[qid][low:]
        # Lookups find no deleted message.
        assert all(m.queue_offset >= low for m in store.lookup("RT", f"q{qid}", 200))
    # Some data is deleted whenever there is more than what is being written (one
    # segment of a segmented log; one batch of LMDB), and the newest always stays.
    if harness.segment_size is None or harness.segment_size <= 64 * 1024:
        assert deleted > 0 and max(lows) > 0
    assert min(lows) < 120
    # The last batches' keys are found for as many of their messages as are kept.
    assert len(store.lookup("RT", "k39")) == sum(120 - max(low, 117) for low in lows)
    # Writing goes on after the offsets retention left.
    assert store.put("RT", 0, [Message(topic="RT", body=b"x")])[0].queue_offset == 120
