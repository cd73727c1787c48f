"""Arrow batches to prepared records: the same bytes as the message path, or that path."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pyarrow")

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from mqcore import Kernel, Message, codec
from mqcore.contrib.spark import writing
from mqcore.contrib.spark.writing import arrow_prepare, queue_rows, uniq_ids
from mqcore.errors import InvalidArgumentError
from mqcore.message import system_message
from mqcore.validation import check_copied_properties

needs_c = pytest.mark.skipif(not writing.SPEEDUPS, reason="C speedups not built or turned off")
PROPS = pa.map_(pa.string(), pa.string())
text = st.text(
    st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), max_size=10
)
names = text.map(str.lower).filter(bool)  # never a system name such as TAGS or UNIQ_KEY
rows = st.lists(
    st.tuples(
        st.one_of(st.none(), st.binary(max_size=40)),
        st.one_of(st.none(), text),
        st.one_of(st.none(), text),
        st.one_of(st.none(), st.dictionaries(names, text, max_size=3)),
        st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
    ),
    min_size=1,
    max_size=30,
)


def _batch(data: list[tuple[Any, ...]]) -> pa.RecordBatch:
    body, tags, keys, props, replay = zip(*data, strict=True)
    return pa.RecordBatch.from_pydict(
        {
            "body": pa.array(body, pa.binary()),
            "tags": pa.array(tags, pa.string()),
            "keys": pa.array(keys, pa.string()),
            "properties": pa.array([None if p is None else list(p.items()) for p in props], PROPS),
            "commitlog_offset": pa.array(replay, pa.int64()),
        }
    )


def _message(body: Any, tags: Any, keys: Any, props: Any, replay: Any) -> Message:
    """The message the sink's message path builds for such a row."""
    properties = dict(props or ())
    if replay is not None:
        properties.setdefault("REPLAY_ID", str(replay))
    return Message(topic="Out", body=body or b"", tags=tags, keys=keys, properties=properties)


@needs_c
@settings(max_examples=200, deadline=None)
@given(data=rows)
def test_prepared_rows_equal_prepared_messages(data: list[tuple[Any, ...]]) -> None:
    """Every tuple is what codec.prepare makes of the row's Message (same record bytes)."""
    got = arrow_prepare(_batch(data), "Out", 1234)
    want = codec.py_prepare([_message(*row) for row in data], 1234, topic="Out")
    assert got == [tuple(w) for w in want]


@needs_c
@pytest.mark.parametrize(
    ("column", "values", "kind"),
    [
        ("tags", ["a\x01b"], pa.string()),
        ("keys", ["k\x02"], pa.string()),
        ("properties", [[("TAGS", "x")]], PROPS),
        ("properties", [[("", "x")]], PROPS),
        ("properties", [[("a", None)]], PROPS),
        ("properties", [[("a", "1"), ("a", "2")]], PROPS),
        ("properties", [[("a", "x" * 40000)]], PROPS),
        ("body", [b"x"], pa.large_binary()),
    ],
)
def test_rows_needing_message_checks_take_the_message_path(
    column: str, values: list[Any], kind: pa.DataType
) -> None:
    """Separators, field or empty or repeated names, null values, an oversized property
    string, another Arrow type: None, so the sink builds Messages (whose checks say what is
    wrong)."""
    data = {"body": pa.array([b"b"], pa.binary()), column: pa.array(values, kind)}
    assert arrow_prepare(pa.RecordBatch.from_pydict(data), "Out", 1) is None


@given(
    n=st.integers(1, 50),
    first=st.integers(0, 100),
    queues=st.integers(1, 9),
    qids=st.one_of(st.none(), st.lists(st.one_of(st.none(), st.integers(-50, 50)))),
)
@settings(max_examples=100, deadline=None)
def test_rows_go_to_the_queues_the_message_path_picks(
    n: int, first: int, queues: int, qids: list[int | None] | None
) -> None:
    """Queue id column (or the running row number) modulo the queue count, rows in order."""
    columns: dict[str, Any] = {"body": pa.array([b"x"] * n, pa.binary())}
    if qids is not None:
        qids = (qids * n)[:n] if qids else [None] * n
        columns["queue_id"] = pa.array(qids, pa.int32())
    batch = pa.RecordBatch.from_pydict(columns)
    want: dict[int, list[int]] = {}
    for i in range(n):
        q = qids[i] if qids is not None and qids[i] is not None else first + i
        want.setdefault(q % queues, []).append(i)
    assert queue_rows(batch, first, queues, list(range(n))) == want


@needs_c
@pytest.mark.parametrize("name", ["UNIQ_KEY", "REAL_TOPIC", "RETRY_TOPIC", "TIMER_OUT_MS"])
def test_system_names_of_copied_records_stay_on_the_fast_path(name: str) -> None:
    """A replay copies records whose properties hold system names (every produced message
    has a UNIQ_KEY): kept as they are, with the same bytes as the library's own message."""
    data = [(b"b", "A", None, {name: "v", "x": "1"}, 7)]
    got = arrow_prepare(_batch(data), "Out", 1234)
    want = codec.py_prepare(
        [system_message(topic="Out", body=b"b", tags="A",
                        properties={name: "v", "x": "1", "REPLAY_ID": "7"})],
        1234,
        topic="Out",
    )  # fmt: skip
    assert got == [tuple(w) for w in want]


@pytest.mark.parametrize("name", ["TAGS", "KEYS", "DELAY", ""])
def test_field_names_are_refused_in_copied_properties(name: str) -> None:
    with pytest.raises(InvalidArgumentError, match="refused"):
        check_copied_properties({name: "x"})
    with pytest.raises(InvalidArgumentError, match="property separator"):
        check_copied_properties({"UNIQ_KEY": "a\x02TAGS\x01B"})
    check_copied_properties({"UNIQ_KEY": "u", "REAL_TOPIC": "T", "colour": "red"})


@needs_c
@pytest.mark.parametrize("store_name", Kernel(autoload=False).names("store"))
def test_unique_ids_of_prepared_rows_are_indexed(store_name: str, tmp_path: Any) -> None:
    """put_prepared indexes the rows' UNIQ_KEY values as put indexes the messages' ones."""
    uniq = "7F00000100002A9F0000000000000001"
    data = [(b"a", None, None, {"UNIQ_KEY": uniq}, None), (b"b", None, None, None, None)]
    batch = _batch(data)
    assert uniq_ids(batch) == [uniq, None]
    with Kernel().open_store(store_name, tmp_path) as store:
        store.put_prepared("Out", 0, arrow_prepare(batch, "Out", 1), uniq_ids(batch))
        (found,) = store.lookup("Out", uniq)
        assert found.body == b"a"
