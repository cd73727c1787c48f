"""Damaged commit logs after a crash (segmented stores: the mmap store's files).

A writer process is killed with SIGKILL (so the store is left with its abort marker), a byte
of a record is flipped, and the store is reopened: a damaged *last* record is a torn tail and
is cut; a damaged record followed by valid ones is acknowledged data, and opening fails with
``StoreCorruptedError`` naming the file and the offset. LMDB has no torn tails (a batch is
one transaction), so these tests apply to the mmap store only.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from mqcore import codec, errors
from mqcore.errors import CodecError


@pytest.fixture
def crashed(harness: Any) -> Any:
    """An mmap store directory whose writer was killed after acknowledging some batches."""
    if harness.name != "mmap":
        pytest.skip("commit-log segment files are the mmap store's")
    # Segments large enough to hold many records, so the last one has several.
    harness.options = {**harness.options, "segment_size": 64 * 1024}
    proc = harness.worker("write", topics=["CR"], queues=2, batches=-1, batch_max=4, seed=3)
    try:
        assert proc.stdout is not None
        for _ in range(30):
            assert proc.stdout.readline()
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=60)
    return harness


def _records(path: Path) -> list[tuple[Path, int, int, int]]:
    """(segment file, position, commit-log offset, size) of every valid record, in order."""
    out = []
    for segment in sorted((path / "commitlog").iterdir()):
        base = int(segment.name)
        data = segment.read_bytes()
        pos = 0
        while pos < len(data):
            try:
                kind, size = codec.check_record(data, pos, base_offset=base)
            except CodecError:
                break
            if kind == codec.BLANK:
                break
            out.append((segment, pos, base + pos, size))
            pos += size
    return out


def _flip(segment: Path, pos: int) -> None:
    """Flip the bits of the byte at ``pos`` (the body CRC field of a record there + 8)."""
    with segment.open("r+b") as f:
        f.seek(pos)
        byte = f.read(1)
        f.seek(pos)
        f.write(bytes([byte[0] ^ 0xFF]))


def test_flipped_bytes_in_the_last_record_are_cut(crashed):
    """A damaged last record is a torn tail: recovery cuts it and keeps everything before."""
    records = _records(crashed.path)
    assert len(records) > 30
    segment, pos, last_offset, _ = records[-1]
    # Every valid record but the last, per queue: what recovery must keep and dispatch.
    kept: dict[int, list[bytes]] = {0: [], 1: []}
    for seg, at, _, size in records[:-1]:
        record = seg.read_bytes()[at : at + size]
        kept[codec.decode(record).queue_id].append(record)
    victim = codec.decode(segment.read_bytes(), pos)
    _flip(segment, pos + 8)
    store = crashed.open()
    assert store.message_at(last_offset) is None
    for qid in (0, 1):
        assert [bytes(m.record) for m in crashed.read_queue(store, "CR", qid)] == kept[qid]
    assert store.max_offset("CR", victim.queue_id) == victim.queue_offset
    (again,) = store.put("CR", victim.queue_id, [victim.to_message()])
    assert again.queue_offset == victim.queue_offset
    assert again.commitlog_offset == last_offset


def test_corruption_in_the_middle_names_file_and_offset(crashed):
    """A damaged record followed by valid ones is not cut: StoreCorruptedError names it."""
    records = _records(crashed.path)
    last_segment = records[-1][0]
    in_last = [r for r in records if r[0] == last_segment]
    assert len(in_last) >= 2, "the last segment should hold several records"
    segment, pos, offset, _ = in_last[-2]
    _flip(segment, pos + 8)
    with pytest.raises(errors.StoreCorruptedError) as info:
        crashed.open()
    assert info.value.offset == offset
    assert info.value.path is not None and Path(info.value.path).name == segment.name
    assert segment.name in str(info.value) and str(offset) in str(info.value)
