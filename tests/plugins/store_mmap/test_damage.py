"""Damage found when a writer opens the store: consume queues, missing or short segments.

Each test closes a store cleanly (or leaves it as a crash would), damages a file itself, and
asserts the exact outcome: repaired with every acknowledged message at its offset, or
refused with a StoreCorruptedError naming what is wrong.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from mqcore.errors import StoreCorruptedError
from mqcore.message import Message
from mqcore.plugins.store_mmap.checkpoint import ABORT_FILE
from mqcore.plugins.store_mmap.store import MmapStore

OPTS = {"segment_size": 4096, "consume_queue_units": 100}
UNIT = 20


def fill(path: Path, n: int = 50, queues: int = 2, **opts: int) -> dict[int, list[bytes]]:
    """``n`` messages per queue, interleaved, then a clean close; the bodies by queue."""
    bodies: dict[int, list[bytes]] = {q: [] for q in range(queues)}
    with MmapStore(path, **{**OPTS, **opts}) as store:
        for i in range(n):
            for q in range(queues):
                body = b"q%d-m%d" % (q, i)
                (r,) = store.put("T", q, [Message(topic="T", body=body)])
                assert r.queue_offset == i
                bodies[q].append(body)
    return bodies


def cq_file(path: Path, queue_id: int = 0) -> Path:
    (first,) = sorted((path / "consumequeue" / "T" / str(queue_id)).iterdir())[:1]
    return first


def overwrite(file: Path, pos: int, data: bytes) -> None:
    with file.open("r+b") as f:
        f.seek(pos)
        f.write(data)


def assert_whole(path: Path, bodies: dict[int, list[bytes]]) -> None:
    """Every acknowledged message at its offset, and new ones after them (no offset reused)."""
    with MmapStore(path, **OPTS) as store:
        for q, expected in bodies.items():
            assert store.max_offset("T", q) == len(expected)
            got = store.get("T", q, 0, max_count=1000)
            assert [m.body for m in got.messages] == expected
            assert [m.queue_offset for m in got.messages] == list(range(len(expected)))
            (r,) = store.put("T", q, [Message(topic="T", body=b"new")])
            assert r.queue_offset == len(expected)
    with MmapStore(path, **OPTS) as store:  # and the repair itself survives a reopen
        for q, expected in bodies.items():
            got = store.get("T", q, 0, max_count=1000)
            assert [m.body for m in got.messages] == [*expected, b"new"]


# -- 4: damaged consume queues on a clean reopen -------------------------------------------


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(bytes(5 * UNIT), id="zeroed-middle"),
        pytest.param(b"\x7f" * (5 * UNIT), id="garbage-middle"),
        pytest.param(b"\x00\x00\x00\x00\x00\x00\x00\x01" + bytes(12), id="small-offset-unit"),
        pytest.param(os.urandom(5 * UNIT - 1) + b"\x01", id="random-middle"),
    ],
)
def test_damaged_units_in_the_middle_are_rebuilt(tmp_path: Path, damage: bytes) -> None:
    bodies = fill(tmp_path)
    overwrite(cq_file(tmp_path), 30 * UNIT, damage)
    assert_whole(tmp_path, bodies)


@pytest.mark.parametrize("count", [1, 5, 50])
def test_zeroed_units_at_the_tail_are_rebuilt(tmp_path: Path, count: int) -> None:
    """Zeroed last units look like the queue's natural end; the end recorded at the clean
    close says otherwise."""
    bodies = fill(tmp_path)
    overwrite(cq_file(tmp_path), (50 - count) * UNIT, bytes(count * UNIT))
    assert_whole(tmp_path, bodies)


def test_a_deleted_queue_directory_is_rebuilt(tmp_path: Path) -> None:
    bodies = fill(tmp_path)
    shutil.rmtree(tmp_path / "consumequeue" / "T" / "1")
    assert_whole(tmp_path, bodies)


def test_units_pointing_past_the_log_are_rebuilt(tmp_path: Path) -> None:
    bodies = fill(tmp_path)
    overwrite(cq_file(tmp_path), 49 * UNIT, (10**9).to_bytes(8, "big") + b"\0\0\0\x40" + bytes(8))
    assert_whole(tmp_path, bodies)


def test_damaged_units_after_a_crash_are_rebuilt_too(tmp_path: Path) -> None:
    bodies = fill(tmp_path)
    (tmp_path / ABORT_FILE).touch()  # as if the writer had been killed
    overwrite(cq_file(tmp_path), 10 * UNIT, bytes(3 * UNIT))
    assert_whole(tmp_path, bodies)


# -- 5: missing commit-log data --------------------------------------------------------------


def segments(path: Path) -> list[Path]:
    return sorted((path / "commitlog").iterdir())


@pytest.mark.parametrize("crashed", [False, True], ids=["clean", "crashed"])
def test_a_missing_newest_segment_is_refused(tmp_path: Path, crashed: bool) -> None:
    fill(tmp_path)
    files = segments(tmp_path)
    assert len(files) >= 3
    files[-1].unlink()
    if crashed:
        (tmp_path / ABORT_FILE).touch()
    with pytest.raises(StoreCorruptedError, match=files[-1].name) as info:
        MmapStore(tmp_path, **OPTS)
    assert "missing" in str(info.value)
    assert info.value.path is not None and files[-1].name in info.value.path
    assert files[-2].exists()  # nothing was cut or deleted


def test_missing_newest_segments_are_refused(tmp_path: Path) -> None:
    fill(tmp_path)
    files = segments(tmp_path)
    for f in files[-2:]:
        f.unlink()
    with pytest.raises(StoreCorruptedError, match=f"{files[-2].name} or later.*missing"):
        MmapStore(tmp_path, **OPTS)


def test_a_missing_middle_segment_is_still_refused(tmp_path: Path) -> None:
    fill(tmp_path)
    files = segments(tmp_path)
    files[1].unlink()
    with pytest.raises(StoreCorruptedError, match="misses segments between offsets 4096"):
        MmapStore(tmp_path, **OPTS)


def test_a_commit_log_without_segments_is_refused(tmp_path: Path) -> None:
    fill(tmp_path)
    for f in segments(tmp_path):
        f.unlink()
    with pytest.raises(StoreCorruptedError, match="has no segment files.*T-0"):
        MmapStore(tmp_path, **OPTS)


def test_an_empty_checkpointed_log_without_queues_is_refused(tmp_path: Path) -> None:
    fill(tmp_path)
    for f in segments(tmp_path):
        f.unlink()
    shutil.rmtree(tmp_path / "consumequeue")
    with pytest.raises(StoreCorruptedError, match="checkpoint records messages flushed"):
        MmapStore(tmp_path, **OPTS)


def test_a_zeroed_header_is_never_skipped_by_a_rebuild(tmp_path: Path) -> None:
    """The consume queues are rebuilt from the log's start; a zeroed header in an old
    segment stops the rebuild with the file and offset, instead of dropping its tail."""
    fill(tmp_path)
    first = segments(tmp_path)[0]
    data = first.read_bytes()
    size = int.from_bytes(data[:4], "big")
    overwrite(first, size, bytes(8))  # the second record's size and magic code
    shutil.rmtree(tmp_path / "consumequeue")
    with pytest.raises(StoreCorruptedError, match=f"{first.name}.*at offset {size}") as info:
        MmapStore(tmp_path, **OPTS)
    assert info.value.offset == size and info.value.path == str(first)


# -- 6: a segment cut short -------------------------------------------------------------------


@pytest.mark.parametrize("which", [0, 1, -1])
@pytest.mark.parametrize("keep", [100, 2048, 4095])
def test_a_segment_cut_short_says_so(tmp_path: Path, which: int, keep: int) -> None:
    fill(tmp_path)
    victim = segments(tmp_path)[which]
    os.truncate(victim, keep)
    with pytest.raises(StoreCorruptedError, match=f"has {keep} bytes, expected 4096") as info:
        MmapStore(tmp_path, **OPTS)
    assert "cut short" in str(info.value) and "restore it" in str(info.value)
    assert "segment_size=" not in str(info.value)
    assert info.value.path == str(victim)


def test_a_single_segment_cut_short_says_so(tmp_path: Path) -> None:
    fill(tmp_path, n=10, queues=1, segment_size=8192)
    (only,) = segments(tmp_path)
    os.truncate(only, 300)  # inside the second record
    with pytest.raises(StoreCorruptedError, match="cut short") as info:
        MmapStore(tmp_path, **{**OPTS, "segment_size": 8192})
    assert "segment_size=" not in str(info.value)


def test_another_segment_size_is_named(tmp_path: Path) -> None:
    fill(tmp_path)
    with pytest.raises(StoreCorruptedError, match="written with segment_size=4096"):
        MmapStore(tmp_path, **{**OPTS, "segment_size": 2048})
    with pytest.raises(StoreCorruptedError, match="segment_size") as info:
        MmapStore(tmp_path, **{**OPTS, "segment_size": 8192})
    assert "cut short" not in str(info.value)


# -- 10: check_crc_on_read ---------------------------------------------------------------------


def test_check_crc_on_read_reports_damage_older_than_the_recovery_window(tmp_path: Path) -> None:
    """Recovery checks the last three segments; a body damaged in an older one is served as
    stored by default, and reported with file and offset when ``check_crc_on_read`` is on."""
    with MmapStore(tmp_path, **OPTS) as store:
        for i in range(200):
            store.put("T", 0, [Message(topic="T", body=b"body%03d" % i, keys=f"k{i}")])
    first = segments(tmp_path)[0]
    assert len(segments(tmp_path)) > 3
    overwrite(first, 88 + 4 + 1, b"\xff")  # a byte of the first record's body
    with MmapStore(tmp_path, **OPTS) as store:
        assert store.get("T", 0, 0, max_count=1).messages[0].body == b"body0\xff0"
    with MmapStore(tmp_path, **OPTS, check_crc_on_read=True) as store:
        assert store.get("T", 0, 1, max_count=5).messages[0].body == b"body001"
        for read in (
            lambda: store.get("T", 0, 0, max_count=5),
            lambda: store.get_raw("T", 0, 0, max_count=5),
            lambda: store.get_spans("T", 0, 0, max_count=5),
            lambda: store.message_at(0),
            lambda: store.lookup("T", "k0"),
        ):
            with pytest.raises(StoreCorruptedError, match="CRC mismatch") as info:
                read()
            assert info.value.path == str(first) and info.value.offset == 0


def test_check_crc_on_read_is_an_option_off_by_default(tmp_path: Path) -> None:
    from mqcore.plugins.store_mmap.options import MmapStoreOptions

    assert MmapStoreOptions().check_crc_on_read is False
    assert MmapStoreOptions(check_crc_on_read=True).check_crc_on_read is True
