"""The record and queue layout (mqcore.record): each name says what the bytes hold."""

from __future__ import annotations

import re
import struct
from pathlib import Path

from mqcore import Message, codec
from mqcore.record import layout, prepared, sysflag, unit

# The header's fields in order: (name, struct code). The positions and indexes of
# mqcore.record.layout must follow from it.
FIELDS = [
    ("TOTAL_SIZE", "i"),
    ("MAGIC_CODE", "i"),
    ("BODY_CRC", "i"),
    ("QUEUE_ID", "i"),
    ("FLAG", "i"),
    ("QUEUE_OFFSET", "q"),
    ("PHYSICAL_OFFSET", "q"),
    ("SYS_FLAG", "i"),
    ("BORN_TIMESTAMP", "q"),
    ("BORN_IP", "4s"),
    ("BORN_PORT", "i"),
    ("STORE_TIMESTAMP", "q"),
    ("STORE_IP", "4s"),
    ("STORE_PORT", "i"),
    ("RECONSUME_TIMES", "i"),
    ("PREPARED_TRANSACTION_OFFSET", "q"),
    ("BODY_LENGTH", "i"),
]
HOSTS = {"BORN_IP": "BORN_HOST", "STORE_IP": "STORE_HOST"}


def test_header_positions_and_indexes_follow_the_struct() -> None:
    """Each field's POS_ is where HEADER packs it and H_ its place in the unpacked tuple."""
    assert layout.HEADER.format == ">" + "".join(code for _, code in FIELDS)
    assert layout.HEADER_SIZE == 88 and layout.MIN_RECORD_SIZE == 91
    for i, (name, _) in enumerate(FIELDS):
        assert getattr(layout, f"H_{name}") == i
        at = struct.calcsize(">" + "".join(code for _, code in FIELDS[:i]))
        if name.endswith("_PORT"):
            continue  # a host has one position: its address, then the port
        assert getattr(layout, f"POS_{HOSTS.get(name, name)}") == at, name
    h_names = [n for n in dir(layout) if n.startswith("H_")]
    assert len(h_names) == len(FIELDS)


def test_a_record_reads_back_at_its_positions() -> None:
    """Fields written by the codec are found at the positions the layout names."""
    rec = codec.encode(
        Message(topic="T", body=b"body"),
        queue_id=3,
        queue_offset=7,
        commitlog_offset=1234,
        store_timestamp=99,
        reconsume_times=2,
    )
    q = struct.Struct(">q").unpack_from
    i = struct.Struct(">i").unpack_from
    assert i(rec, layout.POS_QUEUE_ID)[0] == 3
    assert q(rec, layout.POS_QUEUE_OFFSET)[0] == 7
    assert q(rec, layout.POS_PHYSICAL_OFFSET)[0] == 1234
    assert q(rec, layout.POS_STORE_TIMESTAMP)[0] == 99
    assert i(rec, layout.POS_RECONSUME_TIMES)[0] == 2
    assert i(rec, layout.POS_BODY_LENGTH)[0] == 4
    assert rec[layout.HEADER_SIZE : layout.HEADER_SIZE + 4] == b"body"
    assert layout.SIZE_MAGIC.unpack_from(rec) == (len(rec), layout.MESSAGE_MAGIC_CODE)


def test_unit_layout() -> None:
    """A unit packs offset, size and tags code at the positions the unit module names."""
    data = unit.UNIT.pack(1 << 40, 300, -5)
    assert len(data) == unit.UNIT_SIZE == 20
    assert int.from_bytes(data[unit.UNIT_POS_OFFSET : unit.UNIT_POS_SIZE], "big") == 1 << 40
    assert int.from_bytes(data[unit.UNIT_POS_SIZE : unit.UNIT_POS_TAGS_CODE], "big") == 300
    assert int.from_bytes(data[unit.UNIT_POS_TAGS_CODE :], "big", signed=True) == -5
    assert unit.units_struct(2).unpack(data * 2) == (1 << 40, 300, -5) * 2
    assert unit.sizes_struct(2).unpack(data * 2) == (300, 300)


def test_prepared_fields_by_name() -> None:
    """The P_ indexes are the fields of Prepared; the getters read what prepare() wrote."""
    for i, name in enumerate(prepared.Prepared._fields):
        assert getattr(prepared, f"P_{name.upper()}") == i
    (p,) = codec.prepare([Message(topic="T", body=b"xyz", tags="A", keys="k1 k2")], 5)
    assert prepared.size_of(p) == len(
        codec.encode(Message(topic="T", body=b"xyz", tags="A", keys="k1 k2"))
    )
    assert prepared.body_of(p) == b"xyz"
    assert prepared.keys_of(p) == "k1 k2"
    assert prepared.tags_code_of(p) == codec.tags_hash_code("A")
    assert p[prepared.BATCH_SHARED] == (0, 5, 0, 0)
    q = prepared.with_tags_code(p, 42)
    assert prepared.tags_code_of(q) == 42
    assert q[: prepared.P_TAGS_CODE] == p[: prepared.P_TAGS_CODE] and q[-1] == p[-1]


def _c_defines() -> dict[str, int]:
    """The integer #defines of the C extensions' record header."""
    header = Path(__file__).resolve().parents[1] / "mqcore" / "record" / "record.h"
    out: dict[str, int] = {}
    for line in header.read_text().splitlines():
        m = re.match(r"#define (\w+) (.+?)\s*(/\*.*)?$", line)
        if m and not m.group(1).endswith("_H"):
            expr = re.sub(r"(0x[0-9A-Fa-f]+)u\b", r"\1", m.group(2)).replace("LL", "")
            out[m.group(1)] = eval(expr, {}, dict(out))  # small integer expressions only
    return out


def test_the_c_header_says_what_mqcore_record_says() -> None:
    """Every constant of record.h equals its Python definition (magic codes as unsigned)."""
    c = _c_defines()
    modules = (layout, unit, prepared, sysflag)
    checked = 0
    for name, value in c.items():
        python = [getattr(m, name) for m in modules if hasattr(m, name)]
        if name == "P_FIELDS":
            python = [len(prepared.Prepared._fields)]
        assert python, f"record.h defines {name}, which mqcore.record does not"
        want = python[0] & 0xFFFFFFFF if name.endswith("MAGIC_CODE") else python[0]
        assert value == want, name
        checked += 1
    assert checked == len(c) >= 40
