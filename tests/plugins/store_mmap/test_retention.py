"""Retention of the mmap store: expired and disk-pressure deletions, queues trimmed to match."""

from __future__ import annotations

import os
import shutil
import time
from collections import namedtuple
from pathlib import Path
from typing import Any

import attrs
import pytest
from structlog.testing import capture_logs

from mqcore import Kernel
from mqcore.errors import InvalidArgumentError
from mqcore.message import Message
from mqcore.plugins.store_mmap import retention
from mqcore.store import GetStatus

OPTIONS = {
    "segment_size": 4096,
    "consume_queue_units": 8,
    "index_hash_slots": 64,
    "index_max_entries": 1024,
    # The real disk is shared with other processes: only the tests that fake its usage
    # may trigger disk-pressure deletions.
    "disk_max_used_space_ratio": 100,
    "disk_space_clean_forcibly_ratio": 100,
}
HOUR = 3600.0
Usage = namedtuple("Usage", "total used free")


def _fake_disk(monkeypatch: pytest.MonkeyPatch, used: int, capacity: int) -> None:
    """The disk holding the store has ``used`` of ``capacity`` bytes in use. Its total is
    larger, as on file systems that reserve blocks: those count as neither."""
    monkeypatch.setattr(
        retention.shutil,
        "disk_usage",
        lambda path: Usage(capacity + 10**9, used, capacity - used),
    )


def _at_hour(hour: int) -> float:
    """Tomorrow at ``hour``:30 local time, in seconds since the epoch (what passes take)."""
    t = time.localtime(time.time() + 24 * HOUR)
    return time.mktime((t.tm_year, t.tm_mon, t.tm_mday, hour, 30, 0, 0, 0, -1))


def _rules(store: Any, **options: Any) -> None:
    """RocketMQ's default ratios (75, 85) and delete hour (04) unless given otherwise."""
    defaults = {
        "disk_max_used_space_ratio": 75,
        "disk_space_clean_forcibly_ratio": 85,
        "delete_when": "04",
    }
    store.options = attrs.evolve(store.options, **{**defaults, **options})


@pytest.fixture
def store(tmp_path: Path) -> Any:
    """An mmap store of tiny segments holding 60 messages in queue 0 and 60 in queue 1."""
    s = Kernel(autoload=False).open_store("mmap", tmp_path / "s", **OPTIONS)
    for i in range(20):
        for qid in (0, 1):
            s.put(
                "R",
                qid,
                [Message(topic="R", body=b"m%d-%d" % (i, j) * 20, keys=f"k{i}") for j in range(3)],
            )
    yield s
    s.close()


def _age(store: Any, count: int, hours: float) -> list[Path]:
    """Make the ``count`` oldest segments ``hours`` old."""
    segments = [mf.path for mf in store._parts.commitlog.files[:count]]
    old = time.time() - hours * HOUR
    for path in segments:
        os.utime(path, (old, old))
    return segments


def test_young_files_are_kept(store):
    """Nothing is older than file_reserved_time_hours: nothing is deleted."""
    before = len(store._parts.commitlog.files)
    assert store.delete_expired_files() == 0
    assert len(store._parts.commitlog.files) == before
    assert store.min_offset("R", 0) == 0


def test_expired_segments_go_and_queues_follow(store):
    """Old segments are deleted oldest first; min offsets and statuses move forward."""
    old_view = store.get_raw("R", 0, 0).records[0]
    old_message = store.get("R", 0, 0).messages[0]
    first_kept = store._parts.commitlog.files[3].file_from_offset
    gone = _age(store, 3, 100)
    assert store.delete_expired_files() == 3
    assert not any(path.exists() for path in gone)
    assert store._parts.commitlog.min_offset == first_kept
    for qid in (0, 1):
        low = store.min_offset("R", qid)
        assert low > 0
        first = store.get("R", qid, low).messages[0]
        assert first.commitlog_offset >= first_kept
        # Every message still listed is readable; older offsets are too small.
        result = store.get("R", qid, 0)
        assert result.status is GetStatus.OFFSET_TOO_SMALL and result.next_offset == low
        everything = store.get("R", qid, low, max_count=1000).messages
        assert [m.queue_offset for m in everything] == list(range(low, 60))
    # What readers took before the deletion is still intact.
    assert bytes(old_view) == bytes(old_message.record)
    assert old_message.body.startswith(b"m0-0")
    # Keys of deleted messages are no longer found; recent ones are.
    assert store.lookup("R", "k0") == []
    assert len(store.lookup("R", "k19")) == 6


def test_expiry_stops_at_the_first_young_segment(store):
    """Deletion is oldest first: an old segment after a young one waits its turn."""
    files = store._parts.commitlog.files
    old = time.time() - 100 * HOUR
    os.utime(files[1].path, (old, old))
    assert store.delete_expired_files() == 0
    assert store.delete_expired_files(now=time.time() + 100 * HOUR) == len(files) - 1


def test_the_segment_being_written_is_never_deleted(store):
    """Even when everything is expired, the last segment stays and writing continues."""
    files = store._parts.commitlog.files
    _age(store, len(files), 1000)
    assert store.delete_expired_files() == len(files) - 1
    assert len(store._parts.commitlog.files) == 1
    result = store.put("R", 0, [Message(topic="R", body=b"later")])
    assert store.get("R", 0, result[0].queue_offset).messages[0].body == b"later"


def test_disk_above_the_forcible_ratio_deletes_regardless_of_age(store, monkeypatch):
    """Over disk_space_clean_forcibly_ratio, the oldest segments go until usage is within it."""
    starts = [mf.file_from_offset for mf in store._parts.commitlog.files]
    capacity = 1000 * 4096
    # 85 % of used + free is the limit; pretend to be two segments above it.
    _fake_disk(monkeypatch, capacity * 85 // 100 + 2 * 4096 - 1, capacity)
    _rules(store)
    assert retention.disk_used_ratio(store.path) > 85
    assert store.delete_expired_files() == 2
    assert store._parts.commitlog.min_offset == starts[2]
    # The cleaner's pass, at an hour that is not a delete hour, forces segments out too
    # (the faked disk is as full as before).
    _rules(store, delete_when="10")
    assert store.delete_expired_files(_at_hour(3), scheduled=True) == 2
    assert store._parts.commitlog.min_offset == starts[4]


def test_disk_between_the_ratios_deletes_nothing_young(store, monkeypatch):
    """A disk at 78 % (over 75, under 85) deletes no segment younger than the reserved time,
    whether the pass is manual or the cleaner's."""
    capacity = 1000 * 4096
    _fake_disk(monkeypatch, capacity * 78 // 100, capacity)
    _rules(store)
    before = len(store._parts.commitlog.files)
    assert store.delete_expired_files() == 0
    assert store.delete_expired_files(_at_hour(10), scheduled=True) == 0
    assert store.delete_expired_files(_at_hour(4), scheduled=True) == 0
    assert len(store._parts.commitlog.files) == before
    assert store.min_offset("R", 0) == 0


def test_the_cleaner_deletes_expired_segments_in_the_delete_hours(store, monkeypatch):
    """Under disk_max_used_space_ratio, the cleaner's pass deletes expired segments only in
    a delete_when hour; a manual pass at any hour."""
    capacity = 1000 * 4096
    _fake_disk(monkeypatch, capacity // 2, capacity)
    _rules(store, delete_when="04;16")
    starts = [mf.file_from_offset for mf in store._parts.commitlog.files]
    _age(store, 3, 100)
    assert store.delete_expired_files(_at_hour(10), scheduled=True) == 0
    assert store.delete_expired_files(_at_hour(3), scheduled=True) == 0
    assert store._parts.commitlog.min_offset == starts[0]
    assert store.delete_expired_files(_at_hour(16), scheduled=True) == 3
    _age(store, 1, 100)
    assert store.delete_expired_files(_at_hour(4), scheduled=True) == 1
    _age(store, 1, 100)
    assert store.delete_expired_files(_at_hour(10)) == 1  # manual
    assert store._parts.commitlog.min_offset == starts[5]


def test_the_cleaner_deletes_expired_segments_at_any_hour_above_the_ratio(store, monkeypatch):
    """Over disk_max_used_space_ratio (and under the forcible one), the cleaner's pass
    deletes the expired segments at any hour, and no young one."""
    capacity = 1000 * 4096
    _fake_disk(monkeypatch, capacity * 78 // 100, capacity)
    _rules(store)
    files = store._parts.commitlog.files
    kept = files[3].file_from_offset
    _age(store, 3, 100)
    with capture_logs() as logs:
        assert store.delete_expired_files(_at_hour(10), scheduled=True) == 3
    assert store._parts.commitlog.min_offset == kept
    expiring = [e for e in logs if e["event"] == "segment_expiring"]
    assert [(e["reason"], e["expired_by"]) for e in expiring] == [("expired", "disk_ratio")] * 3


def test_retention_options_are_validated(tmp_path):
    """The ratios and delete_when have RocketMQ's defaults; wrong values fail at open."""
    with Kernel(autoload=False).open_store("mmap", tmp_path / "s", segment_size=4096) as s:
        assert s.options.disk_max_used_space_ratio == 75
        assert s.options.disk_space_clean_forcibly_ratio == 85
        assert s.options.delete_when == "04"
    with Kernel(autoload=False).open_store(
        "mmap", tmp_path / "s", segment_size=4096, delete_when=" 16;4 "
    ) as s:
        assert s.options.delete_when == "04;16"
    for name, value in [
        ("disk_space_clean_forcibly_ratio", 0),
        ("disk_space_clean_forcibly_ratio", 101),
        ("disk_space_clean_forcibly_ratio", "85"),
        ("delete_when", "24"),
        ("delete_when", "4am"),
        ("delete_when", ""),
        ("delete_when", 4.0),
        ("delete_when", True),
    ]:
        with pytest.raises(InvalidArgumentError, match=name):
            Kernel(autoload=False).open_store("mmap", tmp_path / "bad", **{name: value})


def test_reopen_after_retention_keeps_min_offsets(store, tmp_path):
    """A store reopened after deletions starts its queues where retention left them."""
    _age(store, 4, 100)
    store.delete_expired_files()
    lows = [store.min_offset("R", q) for q in (0, 1)]
    highs = [store.max_offset("R", q) for q in (0, 1)]
    store.close()
    with Kernel(autoload=False).open_store("mmap", tmp_path / "s", **OPTIONS) as again:
        assert [again.min_offset("R", q) for q in (0, 1)] == lows
        assert [again.max_offset("R", q) for q in (0, 1)] == highs
        msgs = again.get("R", 0, lows[0], max_count=100).messages
        assert [m.queue_offset for m in msgs] == list(range(lows[0], highs[0]))


@pytest.mark.timeout(30)
def test_cleaner_thread_runs_and_stops_with_the_store(tmp_path, monkeypatch):
    """The background cleaner runs delete_expired_files periodically; close() joins it."""
    monkeypatch.setattr(retention, "CLEAN_INTERVAL", 0.01)
    monkeypatch.setattr(retention.CleanService.__init__, "__defaults__", (0.01,))
    calls = []
    real = retention.expired_count

    def counting(parts: Any, now: float, options: Any, *, manual: bool = True) -> int:
        calls.append(manual)
        return real(parts, now, options, manual=manual)

    monkeypatch.setattr(retention, "expired_count", counting)
    with Kernel(autoload=False).open_store("mmap", tmp_path / "s", **OPTIONS) as s:
        s.put("R", 0, [Message(topic="R", body=b"x")])
        deadline = time.monotonic() + 10
        while not calls:
            assert time.monotonic() < deadline, "the cleaner never ran"
            time.sleep(0.01)
    assert not calls[0]  # the cleaner's pass is a scheduled one, not a manual delete
    thread_names = [t.name for t in __import__("threading").enumerate()]
    assert "mqcore-mmap-clean" not in thread_names


def test_disk_used_ratio_is_a_percentage(tmp_path):
    """The ratio of the real disk is between 0 and 100."""
    assert 0 <= retention.disk_used_ratio(tmp_path) <= 100
    assert shutil.disk_usage(tmp_path).total > 0


@pytest.mark.timeout(60)
def test_readers_writer_and_retention_run_together(tmp_path):
    """Lock-free readers keep working while a writer appends and retention deletes."""
    import threading

    from mqcore import codec

    s = Kernel(autoload=False).open_store("mmap", tmp_path / "c", **OPTIONS)
    stop = threading.Event()
    errors: list[BaseException] = []
    seen = [0]

    def writer() -> None:
        try:
            i = 0
            while not stop.is_set():
                s.put("C", 0, [Message(topic="C", body=b"w%d" % (i + j) * 30) for j in range(4)])
                i += 4
        except BaseException as exc:
            errors.append(exc)

    def reader() -> None:
        try:
            offset = 0
            while not stop.is_set():
                result = s.get_raw("C", 0, offset, max_count=16)
                if result.status is GetStatus.OFFSET_TOO_SMALL:
                    offset = result.next_offset
                    continue
                for record in result.records:
                    codec.check_record(record, 0)  # complete and CRC-valid
                    msg = codec.decode(record)
                    assert msg.queue_offset == offset, (msg.queue_offset, offset)
                    offset += 1
                    seen[0] += 1
                if result.status is GetStatus.FOUND:
                    assert result.next_offset == offset
        except BaseException as exc:
            errors.append(exc)

    def cleaner() -> None:
        try:
            while not stop.is_set():
                s.delete_expired_files(now=time.time() + 1000 * HOUR)  # everything is old
                time.sleep(0.005)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=f) for f in (writer, reader, reader, cleaner)]
    try:
        for t in threads:
            t.start()
        time.sleep(1.5)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
        s.close()
    assert not errors, errors
    assert seen[0] > 0


def test_consume_queues_rebuilt_after_retention_start_at_the_first_stored_record(store, tmp_path):
    """Without its consume queues, a trimmed log rebuilds queues that start past offset 0."""
    _age(store, 3, 100)
    store.delete_expired_files()
    lows = [store.min_offset("R", q) for q in (0, 1)]
    store.close()
    shutil.rmtree(tmp_path / "s" / "consumequeue")
    with Kernel(autoload=False).open_store("mmap", tmp_path / "s", **OPTIONS) as again:
        for qid, low in zip((0, 1), lows, strict=True):
            assert again.min_offset("R", qid) == low > 0
            assert again.max_offset("R", qid) == 60
            first = again.get("R", qid, low).messages[0]
            assert first.queue_offset == low
            assert again.get("R", qid, 0).status is GetStatus.OFFSET_TOO_SMALL
