"""Recovery of the mmap store: torn tails, corruption in the middle, re-dispatch.

A crash is simulated by copying the directory of a store that is still open: the copy is
what a SIGKILL would leave (the page cache is shared), abort marker included. The contract
suite kills real processes; these tests damage the copy in precise ways.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path
from typing import Any

import pytest

from mqcore import Kernel, codec
from mqcore.errors import StoreCorruptedError
from mqcore.message import Message
from mqcore.plugins.store_mmap import recovery
from mqcore.plugins.store_mmap.consumequeue import UNIT_SIZE
from mqcore.plugins.store_mmap.mappedfile import segment_name
from mqcore.record.layout import POS_QUEUE_OFFSET

OPTIONS = {
    "segment_size": 4096,
    "consume_queue_units": 16,
    "index_hash_slots": 64,
    "index_max_entries": 1024,
}


@pytest.fixture
def kernel() -> Kernel:
    """A kernel with the bundled plugins only."""
    return Kernel(autoload=False)


def _crashed_copy(kernel: Kernel, tmp_path: Path, batches: int = 20) -> tuple[Path, list[Any]]:
    """Write ``batches`` batches (keys ``k<n>``), then copy the open store's directory."""
    live = tmp_path / "live"
    acked = []
    with kernel.open_store("mmap", live, **OPTIONS) as store:
        for b in range(batches):
            msgs = [
                Message(topic="R", body=b"body-%d-%d" % (b, i) * 5, tags="t", keys=f"k{b}")
                for i in range(3)
            ]
            acked += store.put("R", b % 2, msgs)
        crashed = tmp_path / "crashed"
        shutil.copytree(live, crashed, ignore=shutil.ignore_patterns("LOCK"))
    assert (crashed / "abort").exists()
    return crashed, acked


def _segments(path: Path) -> list[Path]:
    return sorted((path / "commitlog").iterdir())


def _last_record(path: Path) -> tuple[Path, int, int]:
    """(segment, position, size) of the last valid record."""
    found = None
    for segment in _segments(path):
        data = segment.read_bytes()
        pos = 0
        while pos + 8 <= len(data):
            try:
                kind, size = codec.check_record(data, pos)
            except codec.CodecError:
                break
            if kind == codec.BLANK:
                break
            found = (segment, pos, size)
            pos += size
    assert found is not None
    return found


def _flip(path: Path, pos: int) -> None:
    data = bytearray(path.read_bytes())
    data[pos] ^= 0xFF
    path.write_bytes(bytes(data))


def _all(store: Any) -> list[Any]:
    out = []
    for qid in store.queue_ids("R"):
        out += store.get("R", qid, store.min_offset("R", qid), max_count=1000).messages
    return sorted(out, key=lambda m: m.commitlog_offset)


def test_crash_copy_recovers_everything(kernel, tmp_path):
    """With nothing damaged, every acknowledged message is there and writing continues."""
    crashed, acked = _crashed_copy(kernel, tmp_path)
    with kernel.open_store("mmap", crashed, **OPTIONS) as store:
        got = _all(store)
        assert [m.msg_id for m in got] == [r.msg_id for r in acked]
        more = store.put("R", 0, [Message(topic="R", body=b"after")])
        assert more[0].queue_offset == store.max_offset("R", 0) - 1
    assert not (crashed / "abort").exists()


def test_torn_tail_is_cut(kernel, tmp_path):
    """A half-written record after the last one is cut; the next put overwrites its place."""
    crashed, acked = _crashed_copy(kernel, tmp_path)
    segment, pos, size = _last_record(crashed)
    data = bytearray(segment.read_bytes())
    torn = data[pos : pos + size]
    struct.pack_into(">q", torn, POS_QUEUE_OFFSET, 10_000)  # any later record
    cut_at = pos + size
    half = bytes(torn[: size // 2])
    data[cut_at : cut_at + len(half)] = half
    segment.write_bytes(bytes(data))
    with kernel.open_store("mmap", crashed, **OPTIONS) as store:
        assert [m.msg_id for m in _all(store)] == [r.msg_id for r in acked]
        result = store.put("R", 1, [Message(topic="R", body=b"next")])
        assert result[0].commitlog_offset == int(segment.name) + cut_at


def test_flipped_byte_in_the_last_record_is_cut_with_its_unit(kernel, tmp_path):
    """A CRC failure in the last record: that record goes, and so does its queue unit."""
    crashed, acked = _crashed_copy(kernel, tmp_path)
    segment, pos, _ = _last_record(crashed)
    _flip(segment, pos + codec.HEADER_SIZE + 2)  # inside the body
    with kernel.open_store("mmap", crashed, **OPTIONS) as store:
        got = _all(store)
        assert [m.msg_id for m in got] == [r.msg_id for r in acked[:-1]]
        last = acked[-1]
        qid = (len(acked) // 3 - 1) % 2
        assert store.max_offset("R", qid) == last.queue_offset
        assert store.message_at(last.commitlog_offset) is None


def test_corruption_in_the_middle_is_refused(kernel, tmp_path):
    """A bad record followed by valid ones: StoreCorruptedError naming file and offset."""
    crashed, acked = _crashed_copy(kernel, tmp_path)
    victim = acked[len(acked) // 2]
    segment = crashed / "commitlog" / segment_name(victim.commitlog_offset // 4096 * 4096)
    pos = victim.commitlog_offset % 4096
    _flip(segment, pos + codec.HEADER_SIZE + 1)
    with pytest.raises(StoreCorruptedError) as info:
        kernel.open_store("mmap", crashed, **OPTIONS)
    assert info.value.path == str(segment)
    assert info.value.offset == victim.commitlog_offset
    assert str(victim.commitlog_offset) in str(info.value)
    assert segment.name in str(info.value)


def test_zeroed_block_in_the_middle_is_refused(kernel, tmp_path):
    """Zeros where records should be, with records after them, are not an end of data."""
    crashed, acked = _crashed_copy(kernel, tmp_path)
    victim = acked[3]
    segment = crashed / "commitlog" / segment_name(victim.commitlog_offset // 4096 * 4096)
    data = bytearray(segment.read_bytes())
    pos = victim.commitlog_offset % 4096
    data[pos : pos + victim.size] = bytes(victim.size)
    segment.write_bytes(bytes(data))
    with pytest.raises(StoreCorruptedError, match="valid records follow"):
        kernel.open_store("mmap", crashed, **OPTIONS)


def test_lost_consume_queue_units_are_redispatched(kernel, tmp_path):
    """Units missing at the end of a consume queue are rebuilt from the commit log."""
    crashed, acked = _crashed_copy(kernel, tmp_path)
    queue_dir = crashed / "consumequeue" / "R" / "0"
    last_file = sorted(queue_dir.iterdir())[-1]
    data = bytearray(last_file.read_bytes())
    used = len(data.rstrip(b"\0"))
    used += -used % UNIT_SIZE
    drop = min(2, used // UNIT_SIZE)
    data[used - drop * UNIT_SIZE : used] = bytes(drop * UNIT_SIZE)
    last_file.write_bytes(bytes(data))
    with kernel.open_store("mmap", crashed, **OPTIONS) as store:
        assert [m.msg_id for m in _all(store)] == [r.msg_id for r in acked]


def test_deleted_consume_queues_and_index_are_rebuilt(kernel, tmp_path):
    """Without consume queues (and index), the whole commit log is dispatched again."""
    crashed, acked = _crashed_copy(kernel, tmp_path)
    shutil.rmtree(crashed / "consumequeue")
    shutil.rmtree(crashed / "index")
    with kernel.open_store("mmap", crashed, **OPTIONS) as store:
        assert [m.msg_id for m in _all(store)] == [r.msg_id for r in acked]
        assert store.queue_ids("R") == [0, 1]
        found = store.lookup("R", "k7")
        assert [m.msg_id for m in found] == [r.msg_id for r in acked[21:24]]
        msg = store.get("R", 1, 0).messages[0]
        assert msg.tags == "t"


def test_deleted_index_alone_is_rebuilt_after_a_clean_shutdown(kernel, tmp_path):
    """Deleting index/ of a cleanly closed store re-indexes every key; queues are untouched."""
    path = tmp_path / "store"
    with kernel.open_store("mmap", path, **OPTIONS) as store:
        acked = [
            store.put("R", b % 2, [Message(topic="R", body=b"%d" % b, keys=f"k{b} all")])[0]
            for b in range(40)
        ]
    shutil.rmtree(path / "index")
    with kernel.open_store("mmap", path, **OPTIONS) as store:
        assert [m.msg_id for m in store.lookup("R", "k17")] == [acked[17].msg_id]
        assert len(store.lookup("R", "all", max_count=100)) == 40
        assert [m.msg_id for m in _all(store)] == [r.msg_id for r in acked]
        assert store.max_offset("R", 0) == store.max_offset("R", 1) == 20
    # A third open does not index anything twice.
    with kernel.open_store("mmap", path, **OPTIONS) as store:
        assert len(store.lookup("R", "all", max_count=100)) == 40


def test_clean_shutdown_then_flipped_tail_is_cut(kernel, tmp_path):
    """Even after a clean close, the last segments are validated on open."""
    path = tmp_path / "s"
    with kernel.open_store("mmap", path, **OPTIONS) as store:
        acked = store.put("R", 0, [Message(topic="R", body=b"m%d" % i) for i in range(5)])
    segment, pos, _ = _last_record(path)
    _flip(segment, pos + codec.HEADER_SIZE)
    with kernel.open_store("mmap", path, **OPTIONS) as store:
        assert store.max_offset("R", 0) == 4
        assert [m.msg_id for m in _all(store)] == [r.msg_id for r in acked[:4]]


def test_safe_start_follows_rocketmq(tmp_path, kernel):
    """Normal: the third-last segment. Abnormal: the newest segment older than the checkpoint."""
    path = tmp_path / "s"
    with kernel.open_store("mmap", path, **OPTIONS) as store:
        for _ in range(40):
            store.put("R", 0, [Message(topic="R", body=b"x" * 300)])
        files = store._parts.commitlog.files
        assert len(files) >= 4
        assert recovery.safe_start(files, False, 0) == len(files) - 3
        assert recovery.safe_start(files, True, 0) == 0  # no checkpoint: everything
        third_ts = recovery._first_timestamp(files[2])
        assert recovery.safe_start(files, True, third_ts) >= 2
        assert recovery.safe_start(files, True, 10**15) == len(files) - 1


def _copy_killed_before_its_head(segment: Path, end: int, unstored: int) -> bytes:
    """Write an unacknowledged batch of three records at ``end`` of ``segment``, its first
    ``unstored`` bytes left zero (what memcpy had not stored when the writer died); returns
    the segment's new bytes."""
    batch = codec.pack(
        codec.prepare([Message(topic="R", body=b"late-%d" % i) for i in range(3)], 1),
        queue_id=0,
        queue_offset=6,
        commitlog_offset=int(segment.name) + end,
        store_timestamp=2,
        store_host=codec.host_bytes("127.0.0.1:10911"),
    )
    data = bytearray(segment.read_bytes())
    assert end + len(batch) < len(data)
    data[end : end + len(batch)] = batch
    data[end : end + unstored] = bytes(unstored)
    segment.write_bytes(bytes(data))
    return bytes(data)


def test_interrupted_batch_copy_with_zero_head_is_a_torn_tail(kernel, tmp_path):
    """memcpy may store a batch's first bytes last: records after a zero head, never
    dispatched, are an unacknowledged batch and are cut, not reported as corruption."""
    crashed, acked = _crashed_copy(kernel, tmp_path, batches=4)
    segment, pos, size = _last_record(crashed)
    end = pos + size
    _copy_killed_before_its_head(segment, end, 32)
    with kernel.open_store("mmap", crashed, **OPTIONS) as store:
        assert [m.msg_id for m in _all(store)] == [r.msg_id for r in acked]
        assert store._parts.commitlog.max_offset == int(segment.name) + end


def test_interrupted_batch_copy_with_a_partly_stored_head_is_a_torn_tail(kernel, tmp_path):
    """The copy's aligned loop may have stored the last bytes of the first header's magic code
    before its unaligned head: a zero size, then the tail of the magic code, up to a 16-byte
    boundary. That too is the head of an unacknowledged batch, cut on open."""
    for batches in range(1, 40):  # a batch end whose next 16-byte boundary is 4..7 bytes on
        crashed, acked = _crashed_copy(kernel, tmp_path / str(batches), batches=batches)
        segment, pos, size = _last_record(crashed)
        end = pos + size
        if 4 <= -end % 16 < 8:
            break
    else:
        pytest.fail("no batch end 4 to 7 bytes before a 16-byte boundary")
    data = _copy_killed_before_its_head(segment, end, -end % 16)
    assert data[end + 4 : end + 8] != bytes(4)  # some of the magic code is there
    with kernel.open_store("mmap", crashed, **OPTIONS) as store:
        assert [m.msg_id for m in _all(store)] == [r.msg_id for r in acked]
        assert store._parts.commitlog.max_offset == int(segment.name) + end


@pytest.mark.parametrize(
    ("head", "pos", "acked_before", "torn"),
    [
        (bytes(8), 3, True, True),  # nothing of the header stored yet
        (bytes(7) + b"\xa7", 9, True, True),  # zero up to 16, then the magic's last byte
        (bytes(5) + b"\xa3\x20\xa7", 11, True, True),
        (bytes(7) + b"\xa7", 10, True, False),  # the zeros do not end on a boundary
        (bytes(6) + b"\xa3\xa7", 10, True, False),  # not the magic code's tail
        (bytes(2) + b"\x01\x00\xda\xa3\x20\xa7", 14, True, False),  # a size is there
        (bytes(7) + b"\xa7", 9, False, False),  # a unit points at the record
    ],
)
def test_torn_batch_head_shapes(head: bytes, pos: int, acked_before: bool, torn: bool) -> None:
    view = memoryview(bytes(pos) + head + bytes(64))
    acked_start = 100 + pos - 1 if acked_before else 100 + pos
    assert recovery._torn_batch_head(view, pos, 100, acked_start) is torn


def test_rebuilt_schedule_queue_keeps_deliver_times(kernel, tmp_path, tags_codes):
    """Rebuilding SCHEDULE_TOPIC_XXXX's consume queue from the log writes the same tags codes
    as the put did (deliver times, under the store's own delay table)."""
    from mqcore.store import SCHEDULE_TOPIC

    opts = {**OPTIONS, "message_delay_level": "1s 7s"}
    path = tmp_path / "s"
    with kernel.open_store("mmap", path, **opts) as store:
        held = [Message(topic=SCHEDULE_TOPIC, body=b"x%d" % i, delay_level=2) for i in range(5)]
        results = store.put(SCHEDULE_TOPIC, 1, held)
    shutil.rmtree(path / "consumequeue")
    with kernel.open_store("mmap", path, **opts) as store:
        assert len(store.get(SCHEDULE_TOPIC, 1, 0, message_filter=tags_codes).messages) == 5
    assert tags_codes.codes == [r.store_timestamp + 7000 for r in results]


def test_rebuilt_timer_queue_keeps_deliver_times(kernel, tmp_path, tags_codes):
    """Rebuilding rmq_sys_wheel_timer's consume queue from the log writes the deliver times
    the put wrote as tags codes."""
    from mqcore.message import system_message
    from mqcore.store import TIMER_TOPIC

    path = tmp_path / "s"
    times = ["1800000000123", "1800000000007", "not a time"]
    held = [
        system_message(topic=TIMER_TOPIC, body=b"x", tags="A", properties={"TIMER_OUT_MS": t})
        for t in times
    ]
    with kernel.open_store("mmap", path, **OPTIONS) as store:
        store.put(TIMER_TOPIC, 0, held)
        store.get(TIMER_TOPIC, 0, 0, message_filter=tags_codes)
    put_codes = list(tags_codes.codes)
    assert put_codes == [1800000000123, 1800000000007, codec.tags_hash_code("A")]
    tags_codes.codes.clear()
    shutil.rmtree(path / "consumequeue")
    with kernel.open_store("mmap", path, **OPTIONS) as store:
        assert len(store.get(TIMER_TOPIC, 0, 0, message_filter=tags_codes).messages) == 3
    assert tags_codes.codes == put_codes


def test_a_bad_delay_table_is_refused(kernel, tmp_path):
    from mqcore.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="message_delay_level"):
        kernel.open_store("mmap", tmp_path / "s", message_delay_level="1x")
