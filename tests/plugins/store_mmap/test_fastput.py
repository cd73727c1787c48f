"""The C write of a put (``fastput``, ``_put.c``) against the Python path it stands in for.

The same puts go into two stores, one with the C write turned off: with a fixed clock the
files they leave (commit log, consume queues, key index) are the same bytes, and everything
reads back the same, before and after a reopen. Small segments, queue files and index files
make the puts roll often, so both paths and the switches between them are exercised.
"""

from __future__ import annotations

import itertools
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqcore import Kernel, codec
from mqcore.message import PROPERTY_UNIQ_KEY, Message
from mqcore.plugins.store_mmap import fastput, indexfile
from mqcore.plugins.store_mmap import store as store_module
from mqcore.record.unit import UNIT
from mqcore.store import PutResult
from mqcore.storecaps import PreparedPutRequest, PutRequest
from mqcore.uniqkey import uniq_ids

pytestmark = pytest.mark.skipif(
    not fastput.SPEEDUPS, reason="the C write of a put is not built or turned off"
)

NOW_MS = 1_700_000_000_000
_dirs = itertools.count()


class _FixedClock:
    """The store's and the index's clock, stopped: both paths stamp the same times."""

    @staticmethod
    def time_ns() -> int:
        return NOW_MS * 1_000_000

    @staticmethod
    def time() -> float:
        return NOW_MS / 1000


_text = st.text(
    st.characters(codec="utf-8", exclude_characters="\x00\x01\x02"), min_size=1, max_size=8
)


def _message(topic: str, spec: tuple[bytes, Any, Any, int | None, int]) -> Message:
    body, tags, keys, uniq, flag = spec
    msg = Message(topic=topic, body=body, tags=tags, keys=keys, flag=flag)
    if uniq is not None:  # as a producer sets it (not a user property)
        msg.properties[PROPERTY_UNIQ_KEY] = f"0A0B0C0D{uniq:024X}"
    return msg


#: A message's (body, tags, keys, unique id, flag), built for its put's topic
messages = st.tuples(
    st.binary(max_size=600),
    st.none() | _text,
    st.none() | st.lists(_text, min_size=1, max_size=3).map(" ".join),
    st.none() | st.integers(0, 1 << 40),
    st.integers(0, 3),
)

#: One put: (how, [(topic, queue id, messages, born host)]): ``put`` of each, or a group
#: of them in one ``put_many`` or ``put_many_prepared``
puts = st.tuples(
    st.sampled_from(["put", "put_many", "put_many_prepared"]),
    st.lists(
        st.tuples(
            st.sampled_from(["T", "U", "Überall"]),
            st.integers(0, 2),
            st.lists(messages, min_size=1, max_size=5),
            st.sampled_from([None, "10.1.2.3:4567", "192.168.0.9:1"]),
        ),
        min_size=1,
        max_size=6,
    ),
)

options = st.fixed_dictionaries(
    {
        "segment_size": st.sampled_from([4096, 8192, 1 << 16, 1 << 20]),
        "consume_queue_units": st.sampled_from([3, 16, 1000]),
        "index_hash_slots": st.sampled_from([7, 64]),
        "index_max_entries": st.sampled_from([5, 256]),
    }
)


def _files(path: Path) -> dict[str, bytes]:
    """Every file of the store's data directories, by relative path."""
    found = {}
    for sub in ("commitlog", "consumequeue", "index"):
        for f in sorted((path / sub).rglob("*")):
            if f.is_file():
                found[str(f.relative_to(path))] = f.read_bytes()
    return found


def _run(path: Path, opts: dict[str, Any], ops: list[Any], c_write: Any) -> list[Any]:
    """Open a store at ``path``, apply ``ops`` with the C write ``c_write`` (None: off)."""
    fastput._c = c_write
    results: list[Any] = []
    store = Kernel(autoload=False).open_store("mmap", path, **opts)
    try:
        for how, requests in ops:
            if how == "put_many":
                slots = store.put_many(
                    [
                        PutRequest(t, q, [_message(t, m) for m in ms], born_host=h)
                        for t, q, ms, h in requests
                    ]
                )
            elif how == "put_many_prepared":
                slots = store.put_many_prepared([_prepared_request(*r) for r in requests])
            else:
                for t, q, ms, h in requests:
                    results.append(store.put(t, q, [_message(t, m) for m in ms], born_host=h))
                continue
            results.append([s if isinstance(s, list) else repr(s) for s in slots])
    finally:
        store.close()
    return results


def _prepared_request(topic: str, queue_id: int, specs: list[Any], host: str | None) -> Any:
    """The put of ``specs`` as records prepared ahead (as the server prepares a send)."""
    msgs = [_message(topic, m) for m in specs]
    prepared = codec.prepare(msgs, NOW_MS, topic=topic)
    return PreparedPutRequest(topic, queue_id, prepared, uniq_ids(msgs), host)


def _read_all(path: Path, opts: dict[str, Any], ops: list[Any]) -> list[Any]:
    """Everything a reader sees: messages and raw bytes per queue, offsets, key lookups."""
    seen: list[Any] = []
    store = Kernel(autoload=False).open_store("mmap", path, **opts)
    try:
        for topic in store.topics():
            for q in store.queue_ids(topic):
                low, high = store.min_offset(topic, q), store.max_offset(topic, q)
                got = store.get(topic, q, low, max_count=1000, max_bytes=1 << 30)
                raw = store.get_raw(topic, q, low, max_count=1000, max_bytes=1 << 30)
                seen.append((topic, q, low, high, got.status, got.next_offset))
                seen.append(
                    [
                        (m.body, m.properties, m.queue_offset, m.commitlog_offset, m.msg_id)
                        for m in got.messages
                    ]
                )
                seen.append((raw.status, [bytes(r) for r in raw.records]))
        keys = {
            (t, k)
            for _, requests in ops
            for t, _, ms, _ in requests
            for m in map(partial(_message, t), ms)
            for k in [*(m.keys or "").split(), m.properties.get(PROPERTY_UNIQ_KEY)]
            if k
        }
        for topic, key in sorted(keys):
            seen.append(sorted(m.commitlog_offset for m in store.lookup(topic, key, 1000)))
    finally:
        store.close()
    return seen


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(opts=options, ops=st.lists(puts, min_size=1, max_size=8))
def test_c_write_leaves_the_bytes_of_the_python_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, opts: dict[str, Any], ops: list[Any]
) -> None:
    """Same puts, C write on and off: same results, same files, same reads, after a reopen."""
    c_write = fastput._c
    monkeypatch.setattr(store_module, "time", _FixedClock)
    monkeypatch.setattr(indexfile, "time", _FixedClock)
    monkeypatch.setattr(fastput, "_c", c_write)
    n = next(_dirs)
    py_path, c_path = tmp_path / f"py{n}", tmp_path / f"c{n}"
    py_results = _run(py_path, opts, ops, None)
    c_results = _run(c_path, opts, ops, c_write)
    assert c_results == py_results
    assert _files(c_path) == _files(py_path)
    assert _read_all(c_path, opts, ops) == _read_all(py_path, opts, ops)
    # Writing on after a reopen (where files are mapped again) still matches.
    _run(py_path, opts, ops[:1], None)
    _run(c_path, opts, ops[:1], c_write)
    assert _files(c_path) == _files(py_path)


def test_the_c_write_serves_a_common_put(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A put that fits its segment and its queue file is written by a C call: as a group
    of one into a queue file already there, else (a new queue) after the file is made."""
    calls: list[tuple[str, int]] = []
    real = fastput._c

    class Counting:
        @staticmethod
        def append(*args: Any) -> Any:
            calls.append(("append", len(args[2])))
            return real.append(*args)

        @staticmethod
        def append_group(*args: Any) -> Any:
            calls.append(("group", sum(len(job[0]) for job in args[7])))
            return real.append_group(*args)

    monkeypatch.setattr(fastput, "_c", Counting)
    indexed: list[int] = []
    put_keys = indexfile.IndexService.put_keys

    def counted(self: Any, records: Any) -> int:
        indexed.append(len(records))
        return put_keys(self, records)

    monkeypatch.setattr(indexfile.IndexService, "put_keys", counted)
    store = Kernel(autoload=False).open_store("mmap", tmp_path / "s", segment_size=1 << 20)
    try:
        store.put("T", 0, [Message(topic="T", body=b"a")])  # a fresh segment: allocated
        store.put("T", 0, [Message(topic="T", body=b"b"), Message(topic="T", body=b"c")])
        store.put_many([PutRequest("T", 1, [Message(topic="T", body=b"d")])])
        # The first key creates the index file (the Python path); the next is the C call's.
        store.put("T", 2, [Message(topic="T", body=b"e", keys="k1")])
        store.put("T", 2, [Message(topic="T", body=b"f", keys="k2 k3")])
        assert [m.body for m in store.get("T", 0, 0).messages] == [b"a", b"b", b"c"]
        assert [m.body for m in store.lookup("T", "k3")] == [b"f"]
        assert [m.body for m in store.lookup("T", "k1")] == [b"e"]
    finally:
        store.close()
    assert calls == [("append", 1), ("group", 2), ("append", 1), ("group", 1)]
    assert indexed == [1]


def test_a_group_is_written_in_one_c_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A group that rolls nothing is one C call, records, units and index entries; from a
    request that would roll (here a new queue) on, the Python path writes the rest."""
    calls: list[int] = []
    real = fastput._c

    class Counting:
        append = real.append

        @staticmethod
        def append_group(*args: Any) -> Any:
            calls.append(len(args[7]))
            return real.append_group(*args)

    monkeypatch.setattr(fastput, "_c", Counting)
    specs = [(b"body%d" % i, None, f"k{i}", i, 0) for i in range(6)]
    store = Kernel(autoload=False).open_store("mmap", tmp_path / "s", segment_size=1 << 20)
    try:
        # Each queue's first file and the index file come on the Python path.
        store.put_many_prepared([_prepared_request("T", q, [specs[q]], None) for q in range(3)])
        assert calls == []
        slots = store.put_many_prepared(
            [_prepared_request("T", i % 3, [specs[i]], "10.1.2.3:4567") for i in range(6)]
        )
        assert calls == [6]
        assert [[r.queue_offset for r in s] for s in slots] == [[1], [1], [1], [2], [2], [2]]  # type: ignore[union-attr]
        slots = store.put_many_prepared(
            [_prepared_request("T", q, [specs[q]], None) for q in (0, 5, 1)]
        )
        assert calls == [6, 1]  # queue 5 is new: the C call took the head, Python the rest
        assert [[r.queue_offset for r in s] for s in slots] == [[3], [0], [3]]  # type: ignore[union-attr]
        bodies = [m.body for m in store.get("T", 1, 0).messages]
        assert bodies == [b"body1", b"body1", b"body4", b"body1"]
        assert [(m.queue_id, m.queue_offset) for m in store.lookup("T", "k4")] == [(1, 2)]
        uniq = _message("T", specs[2]).properties[PROPERTY_UNIQ_KEY]
        assert sorted(m.queue_offset for m in store.lookup("T", uniq)) == [0, 1]
    finally:
        store.close()


def _prepared(n: int) -> list[Any]:
    return codec.prepare([Message(topic="T", body=b"b%d" % i) for i in range(n)], 1, topic="T")


HOSTS = (b"\x7f\x00\x00\x01", 10911, b"\x7f\x00\x00\x01", 10911)


@pytest.mark.parametrize(
    "lie",
    ["size", "not_a_tuple", "mixed", "segment_too_small", "queue_too_small", "empty"],
)
def test_the_c_write_refuses_what_does_not_hold_and_writes_nothing(lie: str) -> None:
    """Lying sizes, foreign items, a batch of two prepare() calls or maps too small are
    refused with nothing written."""
    prepared = _prepared(3)
    segment, units = bytearray(4096), bytearray(100)
    if lie == "size":
        prepared[1] = (prepared[1][0] + 1, *prepared[1][1:])
    elif lie == "not_a_tuple":
        prepared[2] = list(prepared[2])
    elif lie == "mixed":
        one = _prepared(1)[0]
        prepared[2] = (*one[:6], 7, *one[7:])  # another born timestamp
    elif lie == "segment_too_small":
        segment = bytearray(sum(p[0] for p in prepared) - 1)
    elif lie == "queue_too_small":
        units = bytearray(3 * 20 - 1)
    elif lie == "empty":
        prepared = []
    with pytest.raises((ValueError, TypeError)):
        fastput._c.append(segment, 0, prepared, 0, 0, 0, 5, *HOSTS, units, 0)
    assert not any(segment) and not any(units)


def test_the_c_write_lays_records_out_as_codec_pack() -> None:
    """The same arguments, told the truth, write codec.pack's records and their units."""
    prepared = _prepared(3)
    segment, units = bytearray(4096), bytearray(100)
    offsets, end, state = fastput._c.append(segment, 10, prepared, 2, 7, 1000, 5, *HOSTS, units, 20)
    assert state is None
    packed = codec.pack(
        prepared,
        queue_id=2,
        queue_offset=7,
        commitlog_offset=1000,
        store_timestamp=5,
        store_host=(HOSTS[0], HOSTS[1]),
    )
    assert bytes(segment[10 : 10 + len(packed)]) == packed
    assert end == 1000 + len(packed) and offsets[0] == 1000
    want = b"".join(UNIT.pack(o, p[0], p[9]) for o, p in zip(offsets, prepared, strict=True))
    assert bytes(units[20:80]) == want


def test_the_c_write_indexes_keys_as_py_put_entries() -> None:
    """The index entries of the C write are py_put_entries' bytes and header values."""
    prepared = _prepared(4)
    keys = [["a", "Ünï", "\U0001f600"], None, [""], ["a", "0A0B0C0D" + "E" * 24]]
    slots, limit = 5, 16
    entries_at = indexfile.HEADER_SIZE + slots * 4
    c_map = bytearray(entries_at + limit * indexfile.ENTRY_SIZE)
    c_map[entries_at - 4 : entries_at] = b"\x00\x00\x00\x09"  # a stale slot head
    py_map = bytearray(c_map)
    segment, units = bytearray(4096), bytearray(100)
    index = (c_map, "T", keys, slots, entries_at, limit, 3, 900, 4000, 950, 4000)
    offsets, _, state = fastput._c.append(
        segment, 0, prepared, 0, 0, 1000, 9000, *HOSTS, units, 0, index
    )
    records = [("T", k, o, 9000) for k, o in zip(keys, offsets, strict=True) if k]
    want = indexfile.py_put_entries(
        py_map, records, 0, -1, 950, slots, entries_at, limit, 3, 900, 4000, 950, 4000
    )
    assert c_map == py_map
    count, new_slots, *ends = state
    assert (count, new_slots, *ends) == (want[2], want[4], *want[5:])


def test_the_c_write_refuses_index_entries_past_the_file() -> None:
    """Entries that would fill the index file are refused with nothing written."""
    prepared = _prepared(2)
    entries_at = indexfile.HEADER_SIZE + 4
    imap = bytearray(entries_at + 4 * indexfile.ENTRY_SIZE)
    segment, units = bytearray(4096), bytearray(100)
    index = (imap, "T", [["a", "b"], ["c"]], 1, entries_at, 4, 2, 0, 0, 0, 0)
    with pytest.raises(ValueError, match="index"):
        fastput._c.append(segment, 0, prepared, 0, 0, 0, 5, *HOSTS, units, 0, index)
    assert not any(segment) and not any(units) and not any(imap)


def _group_jobs(units: bytearray, uniq: Any = "U1") -> list[Any]:
    """Two puts of one group: three records into ``units`` at 0, one more after them."""
    ip, port = HOSTS[:2]
    return [
        (_prepared(3), 0, 0, 5, ip, port, units, 0, "T", None, None),
        (_prepared(1), 0, 3, 5, ip, port, units, 60, "T", None, [uniq]),
    ]


@pytest.mark.parametrize(
    "lie", ["size", "uniq", "units_too_small", "segment_too_small", "index_full", "no_index"]
)
def test_the_group_write_refuses_what_does_not_hold_and_writes_nothing(lie: str) -> None:
    """A group with a lie in its last put, or maps too small, is refused as a whole: not
    even its first put is written."""
    segment, units = bytearray(4096), bytearray(80)
    entries_at = indexfile.HEADER_SIZE + 4
    imap = bytearray(entries_at + 4 * indexfile.ENTRY_SIZE)
    index: Any = (imap, 1, entries_at, 4, 1, 0, 0, 0, 0)
    jobs = _group_jobs(units)
    if lie == "size":
        record = jobs[1][0][0]
        jobs[1][0][0] = (record[0] + 1, *record[1:])
    elif lie == "uniq":
        jobs = _group_jobs(units, uniq=b"U1")
    elif lie == "units_too_small":
        units = bytearray(79)
        jobs = _group_jobs(units)
    elif lie == "segment_too_small":
        segment = bytearray(sum(p[0] for job in jobs for p in job[0]) - 1)
    elif lie == "index_full":
        index = (imap, 1, entries_at, 4, 4, 0, 0, 0, 0)  # 3 entries in a file of 4
    elif lie == "no_index":
        index = None
    with pytest.raises((ValueError, TypeError)):
        fastput._c.append_group(segment, 0, 0, *HOSTS[:2], "P" * 16, PutResult, jobs, index)
    assert not any(segment) and not any(units) and not any(imap)


def test_the_group_write_lays_out_each_put_as_append() -> None:
    """A group's records, units and index entries are those of its puts' append() calls
    one after the other, and its results those the store builds in Python."""
    entries_at = indexfile.HEADER_SIZE + 5 * 4
    c_seg, c_units = bytearray(4096), bytearray(100)
    c_map = bytearray(entries_at + 16 * indexfile.ENTRY_SIZE)
    py_seg, py_units, py_map = bytearray(c_seg), bytearray(c_units), bytearray(c_map)
    jobs = _group_jobs(c_units)
    jobs[0] = (*jobs[0][:9], [["a", "b"], None, ["c"]], None)
    results, end, state = fastput._c.append_group(
        c_seg, 8, 1000, *HOSTS[:2], "P" * 16, PutResult, jobs,
        (c_map, 5, entries_at, 16, 1, 0, 0, 0, 0),
    )  # fmt: skip
    at, index_state = 1000, (1, 0, 0, 0, 0)
    want = []
    for prepared, q, qoff, ts, ip, port, _, qpos, topic, keys, uniqs in jobs:
        if keys is None:
            keys = [[u] for u in uniqs]
        index = (py_map, topic, keys, 5, entries_at, 16, *index_state[:1], *index_state[1:])
        offsets, at_end, got = fastput._c.append(
            py_seg, 8 + at - 1000, prepared, q, qoff, at, ts, *HOSTS[:2], ip, port, py_units,
            qpos, index,
        )  # fmt: skip
        index_state = (got[0], got[2], got[3], got[4], got[5])
        want.append(
            store_module.batch.py_put_results(PutResult, "P" * 16, prepared, offsets, qoff, ts)
        )
        at = at_end
    assert (c_seg, c_units, c_map) == (py_seg, py_units, py_map)
    assert results == want and end == at
    assert (state[0], *state[2:]) == index_state


def test_a_group_takes_unique_ids_as_the_python_path_does(tmp_path: Path) -> None:
    """Fewer unique ids than records, or none in a list, are read as the Python path reads
    them (the missing ones are None), not refused."""
    store = Kernel(autoload=False).open_store("mmap", tmp_path / "s", segment_size=1 << 20)
    try:
        store.put_many_prepared([_prepared_request("T", 0, [(b"a", None, "k", 1, 0)], None)])
        two = codec.prepare([Message(topic="T", body=b"b"), Message(topic="T", body=b"c")], 1)
        one = codec.prepare([Message(topic="T", body=b"d")], 1)
        slots = store.put_many_prepared(
            [PreparedPutRequest("T", 0, two, ["U2"]), PreparedPutRequest("T", 0, one, [])]
        )
        assert [[r.queue_offset for r in s] for s in slots] == [[1, 2], [3]]  # type: ignore[union-attr]
        assert [m.body for m in store.get("T", 0, 0).messages] == [b"a", b"b", b"c", b"d"]
    finally:
        store.close()


def test_a_put_on_a_new_queue_takes_unique_ids_as_the_python_path_does(tmp_path: Path) -> None:
    """A put the group write leaves to the one-put write (the first on a new queue) with
    fewer unique ids than records: the missing ones are None, as the Python path reads them."""
    store = Kernel(autoload=False).open_store("mmap", tmp_path / "s", segment_size=1 << 20)
    try:
        first = _message("T", (b"a", None, None, 1, 0))
        uniq = first.properties[PROPERTY_UNIQ_KEY]
        two = codec.prepare([first, Message(topic="T", body=b"b")], 1)
        # Each record has its keys' slot in what the one-put C write is given.
        assert fastput._keys(two, [uniq]) == [[uniq], None]
        got = store.put_prepared("T", 0, two, uniqs=[uniq])
        assert [r.queue_offset for r in got] == [0, 1]
        assert [m.body for m in store.get("T", 0, 0).messages] == [b"a", b"b"]
        assert [m.body for m in store.lookup("T", uniq)] == [b"a"]
    finally:
        store.close()
