"""The timer scheduler's files: segmented timer log, wheel slots, two-copy checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqcore.errors import StoreCorruptedError
from mqcore.plugins.delay_timer_files import (
    UNIT,
    UNIT_MAGIC,
    UNIT_SIZE,
    Checkpoint,
    TimerCheckpoint,
    TimerLog,
    TimerWheel,
)


def _unit(i: int, prev: int = -1) -> bytes:
    return UNIT.pack(prev, 1000 + i, 1000, i, 10 * i, 5, 100 + i, UNIT_MAGIC)


def test_log_appends_across_segments_reads_scans_and_truncates(tmp_path: Path) -> None:
    log = TimerLog(tmp_path / "timerlog", segment_bytes=3 * UNIT_SIZE)
    log.append(0, b"".join(_unit(i) for i in range(7)))  # segments of 3, 3, 1 units
    assert log.segments() == [0, 3 * UNIT_SIZE, 6 * UNIT_SIZE]
    assert log.end() == 7 * UNIT_SIZE
    unit = log.read(4 * UNIT_SIZE)
    assert unit is not None and (unit.queue_offset, unit.size) == (4, 104)
    assert [u.queue_offset for _, u in log.scan(2 * UNIT_SIZE, 6 * UNIT_SIZE)] == [2, 3, 4, 5]
    assert log.read(7 * UNIT_SIZE) is None  # past the end
    log.truncate(4 * UNIT_SIZE)
    assert log.end() == 4 * UNIT_SIZE and log.segments() == [0, 3 * UNIT_SIZE]
    log.delete(0)
    log.close()
    reopened = TimerLog(tmp_path / "timerlog", segment_bytes=3 * UNIT_SIZE)
    assert reopened.segments() == [3 * UNIT_SIZE] and reopened.read(0) is None
    reopened.close()


def test_a_unit_with_a_bad_magic_is_not_read(tmp_path: Path) -> None:
    log = TimerLog(tmp_path / "timerlog")
    log.append(0, UNIT.pack(-1, 1, 1, 1, 1, 1, 1, 0x1234))
    assert log.read(0) is None and list(log.scan(0, UNIT_SIZE)) == []
    log.close()


def test_wheel_slots_persist_and_map_read_only(tmp_path: Path) -> None:
    wheel = TimerWheel(tmp_path / "timerwheel", 10)
    wheel.put(3, 3000, 3999, 112, 2)
    wheel.flush()
    wheel.close()
    again = TimerWheel(tmp_path / "timerwheel", 10, read_only=True)
    assert again.get(3) == (3000, 3999, 112, 2) and again.get(4) == (0, 0, 0, 0)
    assert [s[0] for s in again.iter_slots() if s[4]] == [3]
    again.close()
    assert (tmp_path / "timerwheel").stat().st_size == 10 * 32


def test_checkpoint_keeps_the_newest_valid_copy(tmp_path: Path) -> None:
    path = tmp_path / "config" / "timercheck"
    ckpt = TimerCheckpoint(path)
    assert ckpt.load() is None  # a new file
    for seq in (1, 2, 3):
        ckpt.write(Checkpoint(seq, 10 * seq, 56 * seq, 1000, 0, seq, 1000, 100))
    assert ckpt.load() == Checkpoint(3, 30, 168, 1000, 0, 3, 1000, 100)
    ckpt.close()
    data = bytearray(path.read_bytes())
    data[64 + 5] ^= 0x01  # copy of seq 3 (odd: second place) torn
    path.write_bytes(bytes(data))
    ckpt = TimerCheckpoint(path)
    assert ckpt.load() == Checkpoint(2, 20, 112, 1000, 0, 2, 1000, 100)
    ckpt.close()
    data[5] ^= 0x01  # both torn
    path.write_bytes(bytes(data))
    ckpt = TimerCheckpoint(path, read_only=True)
    with pytest.raises(StoreCorruptedError, match="both copies fail their CRC"):
        ckpt.load()
    ckpt.close()
