"""Retention of the LMDB store: expired and disk-pressure deletions of whole batches."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from mqcore import Kernel, Message, errors
from mqcore.plugins.store_lmdb import retention
from mqcore.plugins.store_lmdb import store as store_module
from mqcore.store import GetStatus

HOUR_MS = 3_600_000
T0 = 1_700_000_000_000  # store timestamps of the first batches (ms)
HOURS = 6  # batches put at T0, T0 + 1 h, ... T0 + 5 h, in each of queues 0 and 1
PER_BATCH = 3


class Clock:
    """The store's clock (``_now_ms``), moved by hand."""

    def __init__(self) -> None:
        self.ms = T0

    def __call__(self) -> int:
        return self.ms

    def seconds_after(self, hours: float) -> float:
        """Seconds since the epoch ``hours`` after T0 (what retention passes take)."""
        return (T0 + hours * HOUR_MS) / 1000.0


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """A fake clock for store timestamps; the real disk never looks full."""
    fake = Clock()
    monkeypatch.setattr(store_module, "_now_ms", fake)
    monkeypatch.setattr(retention, "disk_space", lambda path: (0, 100))
    return fake


def _hour(seconds: float) -> int:
    """The local hour of ``seconds`` since the epoch (what delete_when is matched with)."""
    return time.localtime(seconds).tm_hour


def _at_hour(after: float, hour: int) -> float:
    """The first ``hour``:30 local time after ``after`` (seconds since the epoch)."""
    t = time.localtime(after)
    at = time.mktime((t.tm_year, t.tm_mon, t.tm_mday, hour, 30, 0, 0, 0, -1))
    return at if at >= after else at + 24 * 3600


def _open(path: Path, **options: Any) -> Any:
    return Kernel().open_store("lmdb", path, **options)


def _fill(store: Any, clock: Clock, body_size: int = 40) -> None:
    for hour in range(HOURS):
        clock.ms = T0 + hour * HOUR_MS
        for qid in (0, 1):
            store.put(
                "R",
                qid,
                [
                    Message(
                        topic="R",
                        body=bytes([hour]) * body_size,
                        tags=f"t{j}",
                        keys=f"k{hour} q{qid}-{hour}-{j}",
                    )
                    for j in range(PER_BATCH)
                ],
            )


@pytest.fixture
def store(tmp_path: Path, clock: Clock) -> Any:
    """An LMDB store with six hourly batches of three messages in each of two queues."""
    s = _open(tmp_path / "s")
    _fill(s, clock)
    yield s
    s.close()


def _keyindex_entries(store: Any) -> int:
    with store._env.begin() as txn:
        return int(txn.stat(store._env.keyindex)["entries"])


def test_options_are_validated(tmp_path):
    """Both options have RocketMQ's defaults and refuse wrong values with clear errors."""
    with _open(tmp_path / "s") as store:
        assert store.file_reserved_time_hours == 72
        assert store.disk_max_used_space_ratio == 75
        assert store.disk_space_clean_forcibly_ratio == 85
        assert store.delete_when == "04"
    with _open(tmp_path / "s", delete_when="4;16") as store:
        assert store.delete_when == "04;16"
    for name, value in [
        ("disk_space_clean_forcibly_ratio", 0),
        ("disk_space_clean_forcibly_ratio", 100.5),
        ("disk_space_clean_forcibly_ratio", None),
        ("delete_when", "25"),
        ("delete_when", "04;x"),
        ("delete_when", -1),
        ("delete_when", [4]),
        ("file_reserved_time_hours", -1),
        ("file_reserved_time_hours", "72"),
        ("file_reserved_time_hours", True),
        ("disk_max_used_space_ratio", 0),
        ("disk_max_used_space_ratio", 101),
        ("disk_max_used_space_ratio", float("nan")),
    ]:
        with pytest.raises(errors.InvalidArgumentError, match=name):
            _open(tmp_path / "bad", **{name: value})
    with pytest.raises(errors.InvalidArgumentError, match="file_reserved_time_hours"):
        _open(tmp_path / "bad", file_reserved_time=72)


def test_young_batches_are_kept(store, clock, monkeypatch):
    """Nothing is older than file_reserved_time_hours: nothing is deleted, and the pass
    does not even open a write transaction."""
    writes = []
    real = store._env.write
    monkeypatch.setattr(store._env, "write", lambda work: (writes.append(1), real(work))[1])
    assert store.delete_expired_files(clock.seconds_after(72)) == 0
    assert writes == []
    assert store.min_offset("R", 0) == 0
    assert store.get("R", 0, 0).status is GetStatus.FOUND


def test_expired_batches_go_and_queues_follow(store, clock):
    """Batches older than the reserved time go, with their queue items and index keys."""
    before = {q: store.get_raw("R", q, 0, max_count=100).records for q in (0, 1)}
    before = {q: [bytes(r) for r in records] for q, records in before.items()}
    first_kept = store.get("R", 0, 4 * PER_BATCH).messages[0]
    entries = _keyindex_entries(store)
    # Reserved time 72 h; at T0 + 75.5 h the batches of hours 0..3 are older than that.
    assert store.delete_expired_files(clock.seconds_after(75.5)) == 8
    for qid in (0, 1):
        low = 4 * PER_BATCH
        assert store.min_offset("R", qid) == low
        assert store.max_offset("R", qid) == HOURS * PER_BATCH
        for offset in (0, low - 1):
            result = store.get("R", qid, offset)
            assert result.status is GetStatus.OFFSET_TOO_SMALL
            assert result.next_offset == low and result.min_offset == low
        # What is left is byte for byte what was stored.
        kept = store.get_raw("R", qid, low, max_count=100)
        assert kept.status is GetStatus.FOUND
        assert [bytes(r) for r in kept.records] == before[qid][low:]
        filtered = store.get("R", qid, low, message_filter=Kernel().filter("TAG", "t1"))
        assert [m.queue_offset for m in filtered.messages] == [low + 1, low + 4]
    # Keys of deleted messages are gone from the index; recent ones are found.
    assert store.lookup("R", "k0") == []
    assert store.lookup("R", "q0-3-2") == []
    assert [m.queue_id for m in store.lookup("R", "k5")] == [0] * 3 + [1] * 3
    assert store.lookup("R", "q1-4-0")[0].body == bytes([4]) * 40
    assert _keyindex_entries(store) == entries - 8 * PER_BATCH * 2
    # message_at: a deleted record is gone, a kept one is there.
    assert store.message_at(0) is None
    assert store.message_at(first_kept.commitlog_offset - 1) is None
    assert store.message_at(first_kept.commitlog_offset).body == first_kept.body


def test_offset_for_timestamp_after_retention(store, clock):
    """Timestamps before the first kept batch answer the min offset, others as before."""
    store.delete_expired_files(clock.seconds_after(75.5))
    assert store.offset_for_timestamp("R", 0, T0) == 12
    assert store.offset_for_timestamp("R", 0, T0 + 4 * HOUR_MS) == 12
    assert store.offset_for_timestamp("R", 0, T0 + 4 * HOUR_MS + 1) == 15
    assert store.offset_for_timestamp("R", 1, T0 + 9 * HOUR_MS) == 18


def test_the_newest_batch_is_always_kept(store, clock, tmp_path):
    """Everything expired: only the newest batch stays; an emptied queue keeps its offsets."""
    assert store.delete_expired_files(clock.seconds_after(1000)) == 2 * HOURS - 1
    # The newest batch was queue 1's; queue 0 has no item left but keeps min == max.
    assert (store.min_offset("R", 1), store.max_offset("R", 1)) == (15, 18)
    assert (store.min_offset("R", 0), store.max_offset("R", 0)) == (18, 18)
    assert store.get("R", 0, 18).status is GetStatus.NO_NEW_MSG
    assert store.get("R", 0, 3).status is GetStatus.OFFSET_TOO_SMALL
    assert store.offset_for_timestamp("R", 0, T0) == 18
    assert store.queue_ids("R") == [0, 1]
    # Writing goes on from where the queues were, across a reopen too.
    clock.ms = T0 + 10 * HOUR_MS
    assert store.put("R", 0, [Message(topic="R", body=b"a")])[0].queue_offset == 18
    store.close()
    with _open(tmp_path / "s") as again:
        assert again.put("R", 0, [Message(topic="R", body=b"b")])[0].queue_offset == 19
        assert again.put("R", 1, [Message(topic="R", body=b"c")])[0].queue_offset == 18
        assert [m.body for m in again.get("R", 0, 18).messages] == [b"a", b"b"]
        assert again.min_offset("R", 0) == 18


def test_reopen_and_read_only_see_the_same(store, clock, tmp_path):
    """A reopened writer and a read-only store see the min offsets retention left."""
    store.delete_expired_files(clock.seconds_after(74.5))
    bounds = [(store.min_offset("R", q), store.max_offset("R", q)) for q in (0, 1)]
    assert bounds == [(9, 18), (9, 18)]
    kept = [bytes(r) for r in store.get_raw("R", 0, 9, max_count=100).records]
    store.close()
    with _open(tmp_path / "s", read_only=True) as reader:
        assert [(reader.min_offset("R", q), reader.max_offset("R", q)) for q in (0, 1)] == bounds
        assert reader.get("R", 0, 8).status is GetStatus.OFFSET_TOO_SMALL
        assert [bytes(r) for r in reader.get_raw("R", 0, 9, max_count=100).records] == kept
        assert reader.lookup("R", "k2") == []
    with _open(tmp_path / "s") as again:
        assert [(again.min_offset("R", q), again.max_offset("R", q)) for q in (0, 1)] == bounds
        assert len(again.lookup("R", "k3")) == 6


def test_reserved_hours_option(tmp_path, clock):
    """file_reserved_time_hours sets the age: at 2 h, batches over 2 h old go."""
    with _open(tmp_path / "s", file_reserved_time_hours=2) as store:
        _fill(store, clock)
        assert store.delete_expired_files(clock.seconds_after(5.5)) == 8
        assert store.min_offset("R", 0) == 12


def _fake_disk(monkeypatch: pytest.MonkeyPatch, used: float, capacity: float) -> None:
    monkeypatch.setattr(retention, "disk_space", lambda path: (used, capacity))
    monkeypatch.setattr(retention, "reusable_bytes", lambda env, txn: 0)


def _batch_size(store: Any) -> int:
    return len(store._env.begin().get(b"\0" * 8, db=store._env.log))


def test_disk_above_the_forcible_ratio_deletes_regardless_of_age(store, clock, monkeypatch):
    """Over disk_space_clean_forcibly_ratio, the oldest batches go until enough is freed."""
    batch = _batch_size(store)
    capacity = 1000 * batch
    # Two and a half batches over 85 %.
    _fake_disk(monkeypatch, capacity * 85 // 100 + 5 * batch // 2, capacity)
    # Nothing is expired (the newest batch is 1 h old), yet three batches go, in the
    # cleaner's pass too, at an hour that is not a delete hour.
    now = _at_hour(clock.seconds_after(6), 10)
    assert store.delete_expired_files(now, scheduled=True) == 3
    assert (store.min_offset("R", 0), store.min_offset("R", 1)) == (6, 3)
    # At a ratio the disk is within, nothing more goes.
    store.disk_space_clean_forcibly_ratio = 90
    assert store.delete_expired_files(now) == 0


def test_disk_between_the_ratios_deletes_nothing_young(store, clock, monkeypatch):
    """A disk at 78 % (over 75, under 85) deletes no batch younger than the reserved time,
    whether the pass is manual or the cleaner's."""
    batch = _batch_size(store)
    capacity = 1000 * batch
    _fake_disk(monkeypatch, capacity * 78 // 100, capacity)
    assert store.delete_expired_files(clock.seconds_after(6)) == 0
    for hour in (4, 10):
        assert (
            store.delete_expired_files(_at_hour(clock.seconds_after(6), hour), scheduled=True) == 0
        )
    assert (store.min_offset("R", 0), store.min_offset("R", 1)) == (0, 0)


def test_the_cleaner_deletes_expired_batches_in_the_delete_hours(store, clock):
    """Under disk_max_used_space_ratio, the cleaner's pass deletes expired batches only in a
    delete_when hour; a manual pass at any hour."""
    # At T0 + 74.5 h the batches of hours 0..2 are older than 72 h.
    now = clock.seconds_after(74.5)
    other = (_hour(now) + 12) % 24
    store.delete_when = f"{other:02d};{(other + 1) % 24:02d}"
    assert store.delete_expired_files(now, scheduled=True) == 0
    assert store.min_offset("R", 0) == 0
    store.delete_when = f"{other:02d};{_hour(now):02d}"
    assert store.delete_expired_files(now, scheduled=True) == 6
    assert (store.min_offset("R", 0), store.min_offset("R", 1)) == (9, 9)
    # A manual pass, at an hour that is no delete hour: the batches of hour 3 go too.
    later = clock.seconds_after(75.5)
    store.delete_when = f"{(_hour(later) + 12) % 24:02d}"
    assert store.delete_expired_files(later) == 2
    assert (store.min_offset("R", 0), store.min_offset("R", 1)) == (12, 12)


def test_the_cleaner_deletes_expired_batches_at_any_hour_above_the_ratio(store, clock, monkeypatch):
    """Over disk_max_used_space_ratio (and under the forcible one), the cleaner's pass
    deletes the expired batches at any hour, and no young one."""
    batch = _batch_size(store)
    capacity = 1000 * batch
    _fake_disk(monkeypatch, capacity * 78 // 100, capacity)
    store.delete_when = str((_hour(clock.seconds_after(75.5)) + 12) % 24)
    with capture_logs() as logs:
        # At T0 + 75.5 h the batches of hours 0..3 are older than 72 h.
        assert store.delete_expired_files(clock.seconds_after(75.5), scheduled=True) == 8
    assert (store.min_offset("R", 0), store.min_offset("R", 1)) == (12, 12)
    (event,) = [e for e in logs if e["event"] == "lmdb_retention_deleted"]
    assert (event["expired"], event["disk_full"], event["expired_by"]) == (8, 0, "disk_ratio")


def test_freed_pages_count_as_free_space(tmp_path, clock, monkeypatch):
    """Deleting does not shrink the file: its free pages count as free disk, so the next
    pass does not delete again, and later writes reuse them instead of growing the file."""
    with _open(tmp_path / "s") as store:
        _fill(store, clock, body_size=20_000)
        path = tmp_path / "s" / "data.mdb"
        size = path.stat().st_size
        batch = PER_BATCH * 20_000  # a batch's bodies; its records are a little larger
        with store._env.begin() as txn:
            free = retention.reusable_bytes(store._env, txn)
        capacity = 1000 * batch
        used = capacity * 85 // 100 + free + 3 * batch  # three batches over 85 %
        monkeypatch.setattr(retention, "disk_space", lambda path: (used, capacity))
        assert store.delete_expired_files(clock.seconds_after(6)) == 3
        with store._env.begin() as txn:
            assert retention.reusable_bytes(store._env, txn) >= free + 3 * batch
        # The disk looks just as full (the file did not shrink), but the freed pages are free.
        assert store.delete_expired_files(clock.seconds_after(6)) == 0
        assert path.stat().st_size == size
        # As much written again goes mostly into the freed pages (LMDB reuses a page once
        # no snapshot can still see it, a transaction or two later); without reuse the
        # file would grow by three batches.
        for qid in (0, 1, 0):
            store.put("R", qid, [Message(topic="R", body=b"n" * 20_000)] * PER_BATCH)
        assert path.stat().st_size < size + 2 * batch


def test_large_passes_run_in_bounded_transactions(tmp_path, clock, monkeypatch):
    """A pass deletes in several transactions when there is more than one may hold."""
    monkeypatch.setattr(retention, "MAX_TXN_ITEMS", 3)
    writes = []
    with _open(tmp_path / "s") as store:
        _fill(store, clock)
        real = store._env.write
        monkeypatch.setattr(store._env, "write", lambda work: (writes.append(1), real(work))[1])
        assert store.delete_expired_files(clock.seconds_after(1000)) == 11
        assert len(writes) == 4
        assert store.min_offset("R", 1) == 15


def test_read_only_and_closed_stores_do_not_clean(store, clock, tmp_path):
    """Only the writer deletes; a closed store's pass does nothing."""
    store.close()
    assert store.delete_expired_files(clock.seconds_after(1000)) == 0
    with _open(tmp_path / "s", read_only=True) as reader:
        assert reader._cleaner is None
        assert reader.delete_expired_files(clock.seconds_after(1000)) == 0
        assert reader.min_offset("R", 0) == 0


@pytest.mark.timeout(30)
def test_cleaner_thread_runs_and_stops_on_close(tmp_path, clock, monkeypatch):
    """The cleaner thread runs passes on its interval and clock; close joins it."""
    monkeypatch.setattr(retention, "CLEAN_INTERVAL", 0.02)
    monkeypatch.setattr(retention, "CLOCK", lambda: clock.seconds_after(1000))
    # The cleaner's passes delete expired batches in the delete hours: make it one.
    store = _open(tmp_path / "s", delete_when=_hour(clock.seconds_after(1000)))
    try:
        _fill(store, clock)
        thread = store._cleaner._thread
        assert thread.is_alive()
        done = threading.Event()
        for _ in range(500):
            if store.min_offset("R", 0) == 18:
                done.set()
                break
            done.wait(0.01)
        assert done.is_set(), "the cleaner thread never deleted the expired batches"
    finally:
        store.close()
    assert not thread.is_alive()


def test_infinite_reserved_hours_keep_everything(tmp_path, clock):
    """file_reserved_time_hours=inf: no batch ever expires."""
    with _open(tmp_path / "s", file_reserved_time_hours=float("inf")) as store:
        _fill(store, clock)
        assert store.delete_expired_files(clock.seconds_after(10**9)) == 0
        assert store.min_offset("R", 0) == 0


@pytest.mark.timeout(60)
def test_retention_while_writing_and_reading(tmp_path, clock, monkeypatch):
    """Passes between a producer's puts never break a reader: every pull is FOUND with
    contiguous offsets, or OFFSET_TOO_SMALL / NO_NEW_MSG.

    Each put is stamped an hour after the previous one and each pass keeps the last ten
    hours, so however fast the producer runs, the reader always has batches left to find
    (the test does not depend on the two threads' relative speed)."""
    monkeypatch.setattr(retention, "MAX_TXN_ITEMS", 4)
    errors_seen: list[BaseException] = []
    with _open(tmp_path / "s") as store:

        def produce() -> None:
            try:
                for i in range(300):
                    clock.ms = T0 + i * HOUR_MS
                    store.put("W", i % 2, [Message(topic="W", body=b"%d" % i, keys=f"k{i}")] * 4)
            except BaseException as exc:  # reported by the main thread
                errors_seen.append(exc)

        def keep_ten_hours() -> None:
            newest = (clock.ms - T0) / HOUR_MS
            # A pass at ``now`` deletes what is older than now - 72 h (the default).
            store.delete_expired_files(clock.seconds_after(newest - 10 + 72))

        producer = threading.Thread(target=produce, name="test-producer")
        producer.start()
        try:
            offset = 0
            statuses = set()
            while producer.is_alive() or offset < store.max_offset("W", 0):
                keep_ten_hours()
                result = store.get("W", 0, offset, max_count=16)
                statuses.add(result.status)
                if result.status is GetStatus.FOUND:
                    offsets = [m.queue_offset for m in result.messages]
                    assert offsets == list(range(offset, offset + len(offsets)))
                else:
                    assert result.status in (GetStatus.OFFSET_TOO_SMALL, GetStatus.NO_NEW_MSG)
                    assert result.status is GetStatus.NO_NEW_MSG or result.next_offset > offset
                offset = result.next_offset
                if result.status is GetStatus.NO_NEW_MSG:
                    producer.join(timeout=0.001)
        finally:
            producer.join(timeout=30)
        assert not errors_seen
        assert store.max_offset("W", 0) == store.max_offset("W", 1) == 600
        assert store.min_offset("W", 0) > 500  # the passes did delete (all but ~10 hours)
        assert GetStatus.FOUND in statuses
