"""LMDB-specific behaviour of the lmdb store (the shared contract is in tests/contract)."""

from __future__ import annotations

import errno
import subprocess
import sys
import textwrap
from pathlib import Path

import lmdb
import pytest
from structlog.testing import capture_logs

from mqcore import Kernel, Message, codec, errors
from mqcore.plugins.store_lmdb import layout
from mqcore.plugins.store_lmdb.environment import Environment
from mqcore.plugins.store_lmdb.store import OPTIONS, LmdbStore
from mqcore.store import GetStatus
from mqcore.storecaps import PreparedPutRequest, PutRequest


def _open(path: Path, **options: object) -> LmdbStore:
    return Kernel().open_store("lmdb", path, **options)


def test_registered_as_lmdb(tmp_path):
    """The bundled plugin registers the store under "lmdb"."""
    assert "lmdb" in Kernel().names("store")
    with _open(tmp_path / "s") as store:
        assert isinstance(store, LmdbStore)


def test_map_grows_instead_of_map_full(tmp_path):
    """A 1 MiB map takes 6 MiB of messages: it doubles, MapFullError never surfaces."""
    with capture_logs() as logs, _open(tmp_path / "s", map_size=1 << 20) as store:
        for i in range(6):
            store.put("G", 0, [Message(topic="G", body=bytes([i]) * 100_000)] * 10)
        assert store._env.map_size >= 8 << 20
        assert store.max_offset("G", 0) == 60
        assert store.get("G", 0, 59).messages[0].body == bytes([5]) * 100_000
    grown = [e for e in logs if e["event"] == "lmdb_map_grown"]
    assert len(grown) >= 3
    assert all(e["new_size"] == 2 * e["old_size"] for e in grown)


def test_grown_map_survives_reopen_with_a_small_map_size(tmp_path):
    """Reopening with the initial map_size still reads a file grown past it."""
    with _open(tmp_path / "s", map_size=1 << 20) as store:
        store.put("G", 0, [Message(topic="G", body=b"x" * 500_000)] * 8)
    with _open(tmp_path / "s", map_size=1 << 20) as store:
        assert store.max_offset("G", 0) == 8
        store.put("G", 0, [Message(topic="G", body=b"y" * 500_000)] * 4)
        assert store.max_offset("G", 0) == 12


def test_disk_full_becomes_disk_full_error(tmp_path, monkeypatch):
    """ENOSPC from LMDB is a DiskFullError naming the store; the store stays readable."""
    with _open(tmp_path / "s") as store:
        store.put("D", 0, [Message(topic="D", body=b"kept")])
        real_env = store._env.env

        class FullTxn:
            """A write transaction whose commit fails as on a full disk."""

            def __init__(self, txn):
                self.txn = txn

            def __enter__(self):
                return self.txn.__enter__()

            def __exit__(self, *exc):
                self.txn.abort()
                if exc[0] is None:
                    raise lmdb.DiskError("mdb_txn_commit", errno.ENOSPC)

        class FullEnv:
            def __getattr__(self, name):
                return getattr(real_env, name)

            def begin(self, **kwargs):
                txn = real_env.begin(**kwargs)
                return FullTxn(txn) if kwargs.get("write") else txn

        monkeypatch.setattr(store._env, "env", FullEnv())
        with pytest.raises(errors.DiskFullError) as info:
            store.put("D", 0, [Message(topic="D", body=b"lost")])
        assert str(tmp_path / "s") in str(info.value)
        assert isinstance(info.value, OSError) and info.value.errno == errno.ENOSPC
        monkeypatch.undo()
        assert [m.body for m in store.get("D", 0, 0).messages] == [b"kept"]
        (again,) = store.put("D", 0, [Message(topic="D", body=b"after")])
        assert again.queue_offset == 1


def _prepared(requests: list[PutRequest]) -> list[PreparedPutRequest]:
    return [
        PreparedPutRequest(r.topic, r.queue_id, codec.prepare(r.messages, 1, topic=r.topic))
        for r in requests
    ]


@pytest.mark.parametrize("how", ["put_many", "put_many_prepared"])
def test_put_many_on_a_full_disk_stores_the_requests_before_it(tmp_path, monkeypatch, how):
    """The disk fills during a put_many (or a put_many_prepared, which shares its write):
    the requests before the one that met it are stored, that one and every later one hold
    the same DiskFullError, nothing of them is stored, and writing resumes once there is
    room."""
    with _open(tmp_path / "s") as store:
        real_env = store._env.env
        commits = []

        class MaybeFullTxn:
            """Write transactions 1 (all requests) and 3 (the second alone) fail at commit."""

            def __init__(self, txn):
                self.txn = txn

            def __enter__(self):
                return self.txn.__enter__()

            def __exit__(self, *exc):
                commits.append(1)
                if exc[0] is None and len(commits) in (1, 3):
                    self.txn.abort()
                    raise lmdb.DiskError("mdb_txn_commit", errno.ENOSPC)
                return self.txn.__exit__(*exc)

        class FullEnv:
            def __getattr__(self, name):
                return getattr(real_env, name)

            def begin(self, **kwargs):
                txn = real_env.begin(**kwargs)
                return MaybeFullTxn(txn) if kwargs.get("write") else txn

        monkeypatch.setattr(store._env, "env", FullEnv())
        requests = [
            PutRequest("F", 0, [Message(topic="F", body=b"a"), Message(topic="F", body=b"b")]),
            PutRequest("F", 1, [Message(topic="F", body=b"lost")]),
            PutRequest("F", 0, [Message(topic="F", body=b"lost too")]),
        ]
        if how == "put_many":
            slots = store.put_many(requests)
        else:
            slots = store.put_many_prepared(_prepared(requests))
        assert len(commits) == 3  # the later request is not tried on the full disk
        assert [r.queue_offset for r in slots[0]] == [0, 1]
        assert isinstance(slots[1], errors.DiskFullError) and slots[2] is slots[1]
        monkeypatch.undo()
        assert [m.body for m in store.get("F", 0, 0).messages] == [b"a", b"b"]
        assert store.max_offset("F", 1) == 0
        (again,) = store.put_many([PutRequest("F", 0, [Message(topic="F", body=b"c")])])
        assert [r.queue_offset for r in again] == [2]
    with _open(tmp_path / "s") as store:
        assert [m.body for m in store.get("F", 0, 0).messages] == [b"a", b"b", b"c"]
        assert store.get("F", 0, 0).messages[2].commitlog_offset == again[0].commitlog_offset


def test_put_many_is_one_write_transaction(tmp_path, monkeypatch):
    """Requests to several queues, some new, one refused: one write transaction holds
    them all, and a reopened store reads them back."""
    with _open(tmp_path / "s", flush_mode="sync") as store:
        store.put("W", 0, [Message(topic="W", body=b"before")])
        real = store._env.write
        calls = []

        def counted(work, room=0):
            calls.append(room)
            return real(work, room=room)

        monkeypatch.setattr(store._env, "write", counted)
        bad = "W" * 200
        slots = store.put_many(
            [PutRequest("W", q, [Message(topic="W", body=b"q%d" % q)]) for q in range(4)]
            + [PutRequest(bad, 0, [Message(topic=bad, body=b"no")])]
            + [PutRequest("W", 0, [Message(topic="W", body=b"again")])]
        )
        assert len(calls) == 1
        assert isinstance(slots[4], errors.InvalidArgumentError)
        assert [r.queue_offset for r in slots[0] + slots[5]] == [1, 2]
    with _open(tmp_path / "s") as store:
        assert [m.body for m in store.get("W", 0, 0).messages] == [b"before", b"q0", b"again"]
        assert [store.max_offset("W", q) for q in range(4)] == [3, 1, 1, 1]
        assert store.queue_ids("W") == [0, 1, 2, 3]


def _allocated(path: Path) -> int:
    return (path / "data.mdb").stat().st_blocks * 512


def test_writemap_reserves_disk_blocks_ahead_of_the_data(tmp_path):
    """With writemap (the default) the file's blocks are allocated ahead of the data before
    each transaction, so that no page written through the map lacks a block; a small store
    takes a few MiB, not its whole map."""
    from mqcore.plugins.store_lmdb import environment

    with _open(tmp_path / "s", map_size=8 * 1024 * 1024) as store:
        env = store._env
        assert env.writemap
        assert env.used_end() + 1024 * 1024 <= _allocated(tmp_path / "s") < 4 * 1024 * 1024
        body = bytes(30_000)
        for _ in range(400):
            store.put("W", 0, [Message(topic="W", body=body)] * 4)
            # Every page LMDB numbered is backed, and the reservation runs only a step ahead.
            allocated = _allocated(tmp_path / "s")
            assert env.used_end() <= allocated <= env.used_end() * 1.25 + 2 * 1024 * 1024
        assert env.map_size > 8 * 1024 * 1024  # it grew
        assert _allocated(tmp_path / "s") < env.map_size
        assert 0 < env.reserved_tail_bytes() <= environment.RESERVE_AHEAD_MAX + 1024 * 1024
    with _open(tmp_path / "s") as store:
        assert [len(m.body) for m in store.get("W", 0, 1596, max_count=8).messages] == [30_000] * 4


def test_full_disk_while_reserving(tmp_path, monkeypatch):
    """No room to reserve blocks for a batch: DiskFullError, nothing of the batch is stored,
    and batches that fit the blocks already reserved go on being accepted."""
    from mqcore.plugins.store_lmdb import environment

    with _open(tmp_path / "s") as store:
        store.put("F", 0, [Message(topic="F", body=b"kept")])
        reserved = _allocated(tmp_path / "s")

        def no_space(fd, offset, length):
            if length > reserved:
                raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(environment.os, "posix_fallocate", no_space)
        with pytest.raises(errors.DiskFullError, match="cannot reserve") as info:
            store.put("F", 0, [Message(topic="F", body=bytes(900_000))] * 2)
        assert info.value.errno == errno.ENOSPC
        assert store.max_offset("F", 0) == 1
        (again,) = store.put("F", 0, [Message(topic="F", body=b"small")])
        assert again.queue_offset == 1
        monkeypatch.undo()
        store.put("F", 0, [Message(topic="F", body=bytes(900_000))] * 2)  # room again
        assert [m.body[:5] for m in store.get("F", 0, 0).messages][:2] == [b"kept", b"small"]


def test_full_disk_at_open_names_the_way_out(tmp_path, monkeypatch):
    """No room for the initial map: opening fails with DiskFullError, holds no lock, and
    the same directory opens once there is room (or with writemap=False)."""
    from mqcore.plugins.store_lmdb import environment

    def no_space(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(environment.os, "posix_fallocate", no_space)
    with pytest.raises(errors.DiskFullError, match="writemap=False"):
        _open(tmp_path / "s")
    with _open(tmp_path / "s", writemap=False) as store:
        store.put("O", 0, [Message(topic="O", body=b"x")])
    monkeypatch.undo()
    with _open(tmp_path / "s") as store:
        assert store.get("O", 0, 0).messages[0].body == b"x"


def test_second_open_in_one_process_says_what_to_do(tmp_path):
    """LMDB refuses a second environment on one file in a process: the error says so."""
    with _open(tmp_path / "s") as store:
        store.put("T", 0, [Message(topic="T", body=b"x")])
        with pytest.raises(errors.StoreError, match="read through the store already open"):
            _open(tmp_path / "s", read_only=True)
        assert store.max_offset("T", 0) == 1


@pytest.mark.parametrize("writemap", [True, False], ids=["writemap", "pwrite"])
@pytest.mark.parametrize("read_only", [False, True], ids=["writer", "reader"])
def test_truncated_data_file_is_refused(tmp_path, writemap, read_only):
    """A data.mdb cut short is refused with an error naming it (LMDB itself would crash
    the process on the first page past the end), and the failed open leaves it as it is."""
    with _open(tmp_path / "s", writemap=writemap) as store:
        for _ in range(200):  # 6.4 MB: half of it is far more than the slack LMDB needs
            store.put("T", 0, [Message(topic="T", body=bytes(2000))] * 16)
        info = store._env.env.info()
        used = (info["last_pgno"] + 1) * store._env.env.stat()["psize"]
    data = tmp_path / "s" / "data.mdb"
    cut = used // 2  # with writemap the file is longer (the reserved map): cut into the data
    with open(data, "r+b") as f:
        f.truncate(cut)
    with pytest.raises(errors.StoreError, match=r"data\.mdb' is truncated: \d+ bytes"):
        _open(tmp_path / "s", read_only=read_only, writemap=writemap and not read_only)
    assert data.stat().st_size == cut


def test_a_file_that_is_not_lmdb_is_refused(tmp_path):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "data.mdb").write_bytes(bytes(range(256)) * 64)
    with pytest.raises(errors.StoreError, match="is not an LMDB file"):
        _open(tmp_path / "s")


def test_file_system_without_fallocate_writes_unreserved(tmp_path, monkeypatch):
    """Where fallocate is not supported, the store says so once and writes on."""
    from mqcore.plugins.store_lmdb import environment

    calls = []

    def unsupported(fd, offset, length):
        calls.append(length)
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")

    monkeypatch.setattr(environment.os, "posix_fallocate", unsupported)
    with capture_logs() as logs, _open(tmp_path / "s") as store:
        for _ in range(20):
            store.put("U", 0, [Message(topic="U", body=bytes(100_000))] * 4)
        assert store._env.reserved_tail_bytes() == 0
        assert store.max_offset("U", 0) == 80
    assert len(calls) == 1
    assert [e["event"] for e in logs].count("lmdb_reserve_unsupported") == 1


def test_without_writemap_nothing_is_reserved(tmp_path):
    with _open(tmp_path / "s", writemap=False) as store:
        assert not store._env.writemap
        store.put("P", 0, [Message(topic="P", body=b"x")])
        assert store._env.reserved_tail_bytes() == 0
        assert _allocated(tmp_path / "s") < store._env.map_size
        assert store.get("P", 0, 0).messages[0].body == b"x"


def test_options_are_validated(tmp_path):
    """Unknown options are listed; bad values name the option."""
    with pytest.raises(errors.InvalidArgumentError) as info:
        _open(tmp_path / "s", segment_size=4096)
    for name in OPTIONS:
        assert name in str(info.value)
    with pytest.raises(errors.InvalidArgumentError, match="map_size"):
        _open(tmp_path / "s", map_size=0)
    with pytest.raises(errors.InvalidArgumentError, match="writemap='yes' must be True or False"):
        _open(tmp_path / "s", writemap="yes")
    with pytest.raises(errors.InvalidArgumentError, match="'1x' in message_delay_level"):
        _open(tmp_path / "s", message_delay_level="1s 1x")
    with pytest.raises(errors.InvalidArgumentError, match="flush mode"):
        _open(tmp_path / "s", flush_mode="sometimes")
    assert not (tmp_path / "s" / "data.mdb").exists()


def test_read_only_needs_an_existing_store(tmp_path):
    """read_only on an empty directory explains how to create the store."""
    with pytest.raises(errors.StoreError, match="open it once without read_only"):
        _open(tmp_path / "nothing", read_only=True)


@pytest.mark.timeout(30)
def test_async_flush_runs_a_background_sync_and_stops_it(tmp_path, monkeypatch):
    """ASYNC_FLUSH syncs in the background; close stops the thread (no leak)."""
    calls = []
    real_sync = Environment.sync
    monkeypatch.setattr(Environment, "sync", lambda self: (calls.append(1), real_sync(self)))
    store = _open(tmp_path / "s", flush_interval_ms=10)
    store.put("A", 0, [Message(topic="A", body=b"x")])
    thread = store._syncer._thread
    while len(calls) < 3:
        thread.join(timeout=0.05)
    store.close()
    assert not thread.is_alive()
    with _open(tmp_path / "s", flush_mode="SYNC_FLUSH") as again:
        assert again._syncer is None


def test_long_keys_are_indexed_by_digest(tmp_path):
    """A key too long for an LMDB key is still found, and only by itself."""
    long_a = "a" * 600
    long_b = "a" * 599 + "b"
    with _open(tmp_path / "s") as store:
        store.put("L", 0, [Message(topic="L", body=b"A", keys=long_a)])
        store.put("L", 0, [Message(topic="L", body=b"B", keys=long_b)])
        assert [m.body for m in store.lookup("L", long_a)] == [b"A"]
        assert [m.body for m in store.lookup("L", long_b)] == [b"B"]
    assert len(layout.index_key(layout.topic_prefix("L"), long_a)) < 511


def test_records_are_read_when_queues_interleave(tmp_path):
    """Units of one queue point at records scattered between other queues' records."""
    with _open(tmp_path / "s") as store:
        for i in range(30):
            store.put("I", i % 3, [Message(topic="I", body=b"%d-%d" % (i % 3, i))])
        got = store.get("I", 1, 0, max_count=32)
        assert got.status is GetStatus.FOUND
        assert [m.body for m in got.messages] == [b"1-%d" % i for i in range(1, 30, 3)]
        small = store.get_raw("I", 2, 0, max_bytes=1)
        assert len(small.records) == 1 and small.next_offset == 1


def test_queue_ids_are_range_checked(tmp_path):
    """Queue ids outside 0..2**31-1 and impossible topics are refused."""
    with _open(tmp_path / "s") as store:
        with pytest.raises(errors.InvalidArgumentError, match="queue id"):
            store.put("Q", -1, [Message(topic="Q")])
        with pytest.raises(errors.InvalidArgumentError, match="topic"):
            store.get("", 0, 0)
        assert store.put("Q", 0, []) == []
        store.put("Q", 0, [Message(topic="Q", body=b"x")])
        with pytest.raises(errors.InvalidArgumentError, match="max_count"):
            store.get("Q", 0, 0, max_count=0)
        with pytest.raises(errors.InvalidArgumentError, match="max_bytes"):
            store.get_raw("Q", 0, 0, max_bytes=0)


_WRITER = textwrap.dedent(
    """
    import sys
    from mqcore import Kernel, Message
    with Kernel().open_store("lmdb", sys.argv[1], map_size=1 << 20) as store:
        for i in range(8):
            store.put("M", 0, [Message(topic="M", body=bytes([i]) * 200_000)] * 5)
    """
)


@pytest.mark.timeout(60)
def test_reader_adopts_a_map_grown_by_another_process(tmp_path):
    """A read-only store whose map is smaller than the writer's grown file still refreshes."""
    path = tmp_path / "s"
    with _open(path, map_size=1 << 20) as store:
        store.put("M", 0, [Message(topic="M", body=b"first")])
    reader = _open(path, read_only=True, map_size=1 << 20)
    try:
        assert reader.max_offset("M", 0) == 1
        done = subprocess.run(
            [sys.executable, "-c", _WRITER, str(path)], capture_output=True, timeout=60
        )
        assert done.returncode == 0, done.stderr.decode()
        assert reader.max_offset("M", 0) == 1  # still the old snapshot
        reader.refresh()
        assert reader.max_offset("M", 0) == 41
        assert reader.get("M", 0, 40).messages[0].body == bytes([7]) * 200_000
    finally:
        reader.close()


def test_a_refused_append_aborts_the_whole_batch(tmp_path):
    """If LMDB refuses an out-of-order append, the batch fails whole instead of in part."""
    with _open(tmp_path / "s") as store:
        store.put("Z", 1, [Message(topic="Z", body=b"one")])
        store._cq_tail = b""  # pretend queue 0 sorts last: its units cannot be appended
        with pytest.raises(errors.StoreError, match="did not append cleanly"):
            store.put("Z", 0, [Message(topic="Z", body=b"zero")])
        assert store.max_offset("Z", 0) == 0
        store._cq_tail = layout.queue_prefix("Z", 1)
        (result,) = store.put("Z", 0, [Message(topic="Z", body=b"zero")])
        assert store.message_at(result.commitlog_offset).body == b"zero"
        assert [m.body for m in store.get("Z", 1, 0).messages] == [b"one"]


def _rss_file_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssFile:"):
                return int(line.split()[1])
    return 0


@pytest.mark.timeout(60)
def test_mapped_pages_are_released_while_reading_and_syncing(tmp_path, monkeypatch):
    """The map is replaced every UNMAP_EVERY bytes, beside the background sync, safely."""
    from mqcore.plugins.store_lmdb import environment

    monkeypatch.setattr(environment, "UNMAP_EVERY", 256 * 1024)
    body = bytes(range(256)) * 40
    # Relative to what the process maps already (libraries loaded by other tests count too);
    # without the releases, reading the 16 MB back adds about 16 MB.
    baseline = _rss_file_kib()
    with _open(tmp_path / "s", flush_interval_ms=1) as store:
        for _ in range(100):
            store.put("R", 0, [Message(topic="R", body=body)] * 16)
        offset = 0
        while offset < 1600:
            got = store.get("R", 0, offset)
            assert all(m.body == body for m in got.messages)
            offset = got.next_offset
        assert _rss_file_kib() - baseline < 8 * 1024
    reader = _open(tmp_path / "s", read_only=True)
    try:
        assert len(reader.get("R", 0, 0, max_count=400, max_bytes=1 << 30).messages) == 400
        reader.refresh()  # releases the pages the snapshot pinned
        assert reader.get("R", 0, 1599).messages[0].body == body
    finally:
        reader.close()
