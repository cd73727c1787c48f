"""The key index's C loop (``mqcore.plugins.store_mmap._keyindex``) against the Python reference.

``py_put_entries`` is the reference: for the same records, map and header values, the C
``put_entries`` must return the same tuple and leave the same bytes in the map.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqcore.codec import string_hash_code
from mqcore.plugins.store_mmap import indexfile
from mqcore.plugins.store_mmap.indexfile import ENTRY_SIZE, HEADER_SIZE, py_put_entries
from mqcore.uniqkey import create_uniq_id

keyindex = pytest.importorskip(
    "mqcore.plugins.store_mmap._keyindex", reason="built without a C compiler"
)

SLOTS = 7
LIMIT = 12
ENTRIES_AT = HEADER_SIZE + SLOTS * 4
SIZE = ENTRIES_AT + LIMIT * ENTRY_SIZE

keys_st = st.lists(
    st.one_of(
        st.text(max_size=6),
        st.builds(lambda: create_uniq_id()),
        st.text(alphabet=st.characters(min_codepoint=0x80), max_size=4),
    ),
    max_size=3,
)
records_st = st.lists(
    st.tuples(
        st.sampled_from(["T", "TopicA", "\u00e9t\u00e9", "\U0001f600q"]),
        keys_st,
        st.integers(min_value=-5, max_value=40),  # phy deltas; some go back (skipped)
        st.integers(min_value=-3000, max_value=5000),  # store time deltas
    ),
    max_size=8,
)


def _records(raw: list[tuple[str, list[str], int, int]]) -> list[tuple[str, list[str], int, int]]:
    out = []
    phy, ts = 0, 1_700_000_000_000
    for topic, keys, dphy, dts in raw:
        phy += dphy
        ts += dts
        out.append((topic, keys, phy, ts))
    return out


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    raw=records_st,
    garbage=st.binary(min_size=SIZE, max_size=SIZE),
    count=st.integers(min_value=1, max_value=LIMIT),
    last_phy=st.integers(min_value=-1, max_value=30),
    begin_ts=st.sampled_from([0, 1_700_000_000_000, 1_700_000_004_321]),
    resume=st.integers(min_value=-1, max_value=2),
)
def test_c_loop_writes_what_the_python_loop_writes(raw, garbage, count, last_phy, begin_ts, resume):
    """Same result tuple and same bytes, from any slot contents (stale links included)."""
    records = _records(raw)
    key_pos = resume if records and resume < len(records[0][1]) else -1
    args = (0, key_pos, last_phy, SLOTS, ENTRIES_AT, LIMIT, count, 5, begin_ts, 7, 9)
    want_map = bytearray(garbage)
    want = py_put_entries(want_map, records, *args)
    got_map = bytearray(garbage)
    got = keyindex.put_entries(got_map, records, *args)
    assert got == want
    assert got_map == want_map


@given(topic=st.text(min_size=1, max_size=8), key=st.text(max_size=40))
def test_c_hash_is_java_string_hash(topic, key):
    """abs(String.hashCode("topic#key")), over UTF-16 code units, 0 for Integer.MIN_VALUE."""
    h = string_hash_code(f"{topic}#{key}")
    assert keyindex.key_hash(topic, key) == (0 if h == -(1 << 31) else abs(h))
    assert keyindex.key_hash(topic, key) == indexfile.index_key_hash(topic, key)


def test_c_loop_stops_when_the_file_is_full_and_resumes():
    """A full file returns where to resume; the next file takes the rest."""
    records = [("T", ["a", "b", "c"], 10, 1000), ("T", ["d"], 20, 2000)]
    for put in (py_put_entries, keyindex.put_entries):
        mm = bytearray(SIZE)
        pos, key_pos, count, last_phy, *_ = put(
            mm, records, 0, -1, -1, SLOTS, ENTRIES_AT, LIMIT, LIMIT - 2, 0, 0, 0, 0
        )
        assert (pos, key_pos, count, last_phy) == (0, 2, LIMIT, 10)
        mm2 = bytearray(SIZE)
        got = put(mm2, records, pos, key_pos, last_phy, SLOTS, ENTRIES_AT, LIMIT, 1, 0, 0, 0, 0)
        assert got == (2, -1, 3, 20, 2, 10, 1000, 20, 2000)


def test_c_loop_refuses_bad_input():
    """Bad records or a map too small raise instead of writing out of bounds."""
    mm = bytearray(SIZE)
    args = (0, -1, -1, SLOTS, ENTRIES_AT, LIMIT, 1, 0, 0, 0, 0)
    with pytest.raises(TypeError):
        keyindex.put_entries(mm, [("T", ["a"], 1)], *args)
    with pytest.raises(TypeError):
        keyindex.put_entries(mm, [("T", [5], 1, 1)], *args)
    with pytest.raises(TypeError):
        keyindex.put_entries(mm, [(b"T", ["a"], 1, 1)], *args)
    with pytest.raises(ValueError):
        keyindex.put_entries(bytearray(SIZE - 1), [("T", ["a"], 1, 1)], *args)
    with pytest.raises(BufferError):
        keyindex.put_entries(bytes(SIZE), [("T", ["a"], 1, 1)], *args)


def test_no_speedups_environment_variable_selects_python():
    """MQCORE_NO_SPEEDUPS=1 runs the Python loop."""
    code = "from mqcore.plugins.store_mmap import indexfile as i; print(i.SPEEDUPS)"
    env = {**os.environ, "MQCORE_NO_SPEEDUPS": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr
    env.pop("MQCORE_NO_SPEEDUPS")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "True", out.stderr


INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    records=st.lists(
        st.tuples(st.sampled_from(["T", "\U0001f600q"]), keys_st, INT64, INT64), max_size=6
    ),
    count=st.integers(min_value=1, max_value=LIMIT),
    last_phy=INT64,
    begin_ts=st.sampled_from([0, 1, 1_700_000_000_000, 2**63 - 1]) | INT64,
)
def test_c_loop_agrees_at_the_ends_of_a_java_long(records, count, last_phy, begin_ts):
    """Offsets and store times anywhere in a Java long (a damaged commit log holds any):
    the C loop's time difference does not overflow, and it writes what the Python loop
    writes."""
    args = (0, -1, last_phy, SLOTS, ENTRIES_AT, LIMIT, count, 5, begin_ts, 7, 9)
    want_map = bytearray(SIZE)
    want = py_put_entries(want_map, records, *args)
    got_map = bytearray(SIZE)
    got = keyindex.put_entries(got_map, records, *args)
    assert got == want
    assert got_map == want_map
