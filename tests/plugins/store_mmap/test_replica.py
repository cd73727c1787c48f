"""Replication primitives of the mmap store: read a master's log, append it to a slave."""

from __future__ import annotations

import pytest

from mqcore import Kernel, Message
from mqcore.errors import InvalidArgumentError

SEGMENT = 64 * 1024


def _copy(master, slave, chunk: int) -> None:
    """Move the master's log to the slave in chunks of ``chunk`` bytes (cut mid-record)."""
    while True:
        offset = slave.commitlog_max_offset()
        data = master.read_commitlog(offset, chunk)
        assert data is not None
        if not data:
            return
        slave.append_commitlog(offset, data)


def _whole(store) -> bytes:
    out, offset = [], 0
    while data := store.read_commitlog(offset, 1 << 30):
        out.append(data)
        offset += len(data)
    return b"".join(out)


@pytest.mark.parametrize("chunk", [97, 4096, 1 << 20])
def test_slave_log_is_byte_identical_and_dispatched(tmp_path, chunk):
    """Bytes land at the same offsets; queues, lookups and ids work on the slave."""
    k = Kernel()
    opts = {"segment_size": SEGMENT, "consume_queue_units": 1000}
    with (
        k.open_store("mmap", tmp_path / "m", **opts) as master,
        k.open_store("mmap", tmp_path / "s", **opts) as slave,
    ):
        sent = []
        for i in range(1000):  # several segments: blank markers and rolls are copied too
            msg = Message(topic=f"T{i % 3}", body=b"x" * (i % 50 + 150), keys=f"k{i}")
            sent += master.put(f"T{i % 3}", i % 2, [msg])
        _copy(master, slave, chunk)
        end = master.commitlog_max_offset()
        assert end > 3 * SEGMENT
        assert slave.commitlog_max_offset() == end
        assert _whole(master) == _whole(slave)
        for topic in ("T0", "T1", "T2"):
            for q in (0, 1):
                assert slave.max_offset(topic, q) == master.max_offset(topic, q)
                got = slave.get_raw(topic, q, 0, max_count=1000).records
                want = master.get_raw(topic, q, 0, max_count=1000).records
                assert [bytes(r) for r in got] == [bytes(r) for r in want]
        r = sent[123]
        found = slave.lookup("T0", "k123")
        assert [m.commitlog_offset for m in found] == [r.commitlog_offset]
        assert slave.message_at(r.commitlog_offset).msg_id == r.msg_id


def test_slave_timer_units_hold_the_deliver_time(tmp_path, tags_codes):
    """A slave dispatches the timer topic's units as the master's put wrote them."""
    from mqcore.message import system_message
    from mqcore.store import TIMER_TOPIC

    k = Kernel()
    with (
        k.open_store("mmap", tmp_path / "m") as master,
        k.open_store("mmap", tmp_path / "s") as slave,
    ):
        master.put(TIMER_TOPIC, 0, [
            system_message(topic=TIMER_TOPIC, body=b"x", properties={"TIMER_OUT_MS": t})
            for t in ("1800000000123", "5")
        ])  # fmt: skip
        _copy(master, slave, 4096)
        slave.get(TIMER_TOPIC, 0, 0, message_filter=tags_codes)
        assert tags_codes.codes == [1800000000123, 5]


def test_append_refuses_a_hole(tmp_path):
    k = Kernel()
    with (
        k.open_store("mmap", tmp_path / "s") as slave,
        pytest.raises(InvalidArgumentError, match="ends at 0"),
    ):
        slave.append_commitlog(100, b"\0" * 8)


def test_torn_tail_is_cut_on_reopen_and_fetched_again(tmp_path):
    """A chunk ending mid-record: after a restart the slave resumes from its last whole record."""
    k = Kernel()
    with k.open_store("mmap", tmp_path / "m") as master:
        master.put("T", 0, [Message(topic="T", body=b"a" * 500) for _ in range(3)])
        data = master.read_commitlog(0, 1 << 20)
        with k.open_store("mmap", tmp_path / "s") as slave:
            touched = slave.append_commitlog(0, data[: len(data) - 10])
            assert touched == {("T", 0)}
            assert slave.max_offset("T", 0) == 2  # the third record is incomplete
        with k.open_store("mmap", tmp_path / "s") as slave:
            offset = slave.commitlog_max_offset()
            assert offset == len(data) // 3 * 2
            slave.append_commitlog(offset, master.read_commitlog(offset, 1 << 20))
            assert slave.max_offset("T", 0) == 3
            assert slave.read_commitlog(0, 1 << 20) == data
