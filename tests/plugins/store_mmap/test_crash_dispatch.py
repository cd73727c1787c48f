"""SIGKILL between a put's commit-log append and its dispatch (units, key index).

A writer process, on the Python path (``MQCORE_NO_SPEEDUPS=1``), has its dispatch step
patched to kill the process right after the records of a put reached the commit log and
before any unit or index entry of them was written. Reopening recovers: every record in the
log gets its unit and its index entries, every acknowledged put reads back, and nothing
half-written shows. Runs accumulate on one directory, alternating flush modes and
``put`` / ``put_many``.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mqcore import Kernel, codec
from mqcore.message import MessageExt
from mqcore.record.layout import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE, SIZE_MAGIC
from mqcore.store import GetStatus

OPTIONS = {"segment_size": 8192, "consume_queue_units": 16, "index_max_entries": 64}

WRITER = r"""
import json, os, signal, sys
from mqcore import Kernel
from mqcore.message import PROPERTY_UNIQ_KEY, Message
from mqcore.plugins.store_mmap import fastput
from mqcore.plugins.store_mmap.dispatch import Dispatcher
from mqcore.storecaps import PutRequest

path, kill_at, first, flush_mode, many = sys.argv[1:6]
kill_at, n, many = int(kill_at), int(first), many == "1"
assert not fastput.SPEEDUPS, "the Python path must be the one taken"
real = Dispatcher.put_batch
calls = 0

def put_batch(self, *args, **kwargs):
    global calls
    calls += 1
    if calls == kill_at:  # the records are in the log; no unit, no index entry yet
        os.kill(os.getpid(), signal.SIGKILL)
    return real(self, *args, **kwargs)

Dispatcher.put_batch = put_batch

def message(topic, i):
    msg = Message(topic=topic, body=b"m%d-" % i + b"x" * (i % 300), keys=f"k{i}", tags="t")
    msg.properties[PROPERTY_UNIQ_KEY] = f"{i:032X}"
    return msg

store = Kernel(autoload=False).open_store(
    "mmap", path, flush_mode=flush_mode, **json.loads(sys.argv[6])
)
while True:
    requests = []
    for _ in range(3 if many else 1):
        topic, qid, count = ("A", "B")[n % 2], n % 3, 1 + n % 3
        requests.append((topic, qid, list(range(n, n + count))))
        n += count
    if many:
        slots = store.put_many(
            [PutRequest(t, q, [message(t, i) for i in ids]) for t, q, ids in requests]
        )
    else:
        slots = [store.put(t, q, [message(t, i) for i in ids]) for t, q, ids in requests]
    for (topic, qid, ids), results in zip(requests, slots):
        for i, r in zip(ids, results):
            print(json.dumps([i, topic, qid, r.queue_offset, r.commitlog_offset]), flush=True)
"""


def _kill_during_dispatch(path: Path, rnd: random.Random, run: int) -> list[list[Any]]:
    """Run the writer until its dispatch kills it; returns the acknowledged messages."""
    kill_at = rnd.randint(1, 25)
    env = {**os.environ, "MQCORE_NO_SPEEDUPS": "1"}
    flush_mode = "SYNC_FLUSH" if run % 2 else "ASYNC_FLUSH"
    many = "1" if run % 3 == 2 else "0"
    args = [str(path), str(kill_at), str(run * 100_000), flush_mode, many]
    proc = subprocess.run(
        [sys.executable, "-c", WRITER, *args, json.dumps(OPTIONS)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == -signal.SIGKILL, f"the writer died on its own:\n{proc.stderr}"
    return [json.loads(line) for line in proc.stdout.splitlines()]


def _log_records(store: Any) -> list[tuple[int, MessageExt]]:
    """Every complete record of the commit log, in log order, with its offset."""
    found = []
    segment = OPTIONS["segment_size"]
    phys, end = store.commitlog_min_offset(), store.commitlog_max_offset()
    while phys < end:
        head = store.read_commitlog(phys, 8)
        if head is None or len(head) < 8:
            break
        size, magic = SIZE_MAGIC.unpack(head)
        if magic == BLANK_MAGIC_CODE:
            phys += segment - phys % segment
            continue
        if (size, magic) == (0, 0) and store.read_only:
            break  # a read-only opener sees whole segments: the unwritten rest is zeros
        assert magic == MESSAGE_MAGIC_CODE, f"no record at commit-log offset {phys}"
        record = store.read_commitlog(phys, size)
        assert record is not None and len(record) == size
        assert codec.check_record(record, 0, check_crc=True) == (codec.RECORD, size)
        found.append((phys, MessageExt(bytes(record))))
        phys += size
    return found


def _in_queues(store: Any) -> int:
    return sum(
        store.max_offset(t, q) - store.min_offset(t, q)
        for t in store.topics()
        for q in store.queue_ids(t)
    )


def _undispatched(path: Path) -> int:
    """Records the log holds beyond its queues' units, as the kill left them (no recovery)."""
    store = Kernel(autoload=False).open_store("mmap", path, read_only=True, **OPTIONS)
    try:
        return len(_log_records(store)) - _in_queues(store)
    finally:
        store.close()


def _verify(path: Path, acked: list[list[Any]]) -> int:
    """Reopen (recovery) and check the store; returns the number of records in the log."""
    store = Kernel(autoload=False).open_store("mmap", path, **OPTIONS)
    try:
        for i, topic, qid, qoff, phys in acked:
            got = store.get(topic, qid, qoff, max_count=1)
            assert got.status is GetStatus.FOUND, (i, topic, qid, qoff)
            (msg,) = got.messages
            assert (msg.commitlog_offset, msg.keys) == (phys, f"k{i}")
        records = _log_records(store)
        for phys, rec in records:
            # Recovery gave every record of the log its unit and its index entries.
            got = store.get(rec.topic, rec.queue_id, rec.queue_offset, max_count=1)
            assert got.status is GetStatus.FOUND, (phys, rec.topic, rec.queue_offset)
            assert got.messages[0].commitlog_offset == phys
            for key in (rec.keys, rec.msg_id):
                assert phys in [m.commitlog_offset for m in store.lookup(rec.topic, key)], key
        # Nothing else is readable: each queue holds exactly the log's records.
        assert _in_queues(store) == len(records)
        return len(records)
    finally:
        store.close()


@pytest.mark.timeout(600)
def test_sigkill_between_append_and_dispatch_loses_nothing(tmp_path: Path) -> None:
    """Several kills in a row, each right after a put's append: recovery dispatches what
    the dispatch never got to, and every acknowledged put stays."""
    rnd = random.Random(int(os.environ.get("MQCORE_CRASH_SEED", "36")))
    path = tmp_path / "s"
    acked: list[list[Any]] = []
    for run in range(1, 6):
        new = _kill_during_dispatch(path, rnd, run)
        acked += new
        # The kill came between the append and the dispatch: the log holds records that
        # no unit points at yet.
        assert _undispatched(path) > 0
        in_log = _verify(path, acked)
        # Each killed put's records reached the log (and now their queues) unacknowledged.
        assert in_log >= len(acked) + run
