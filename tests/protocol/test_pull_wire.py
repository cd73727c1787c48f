"""A pull response body cut into its stored records, as the remote consumer reads it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqcore.client.transport_remote import split_records
from mqcore.errors import MQClientError


def _reference(body: bytes) -> list[bytes] | str:
    out, pos = [], 0
    while pos + 4 <= len(body):
        size = int.from_bytes(body[pos : pos + 4], "big")
        if size <= 0 or pos + size > len(body):
            return f"malformed record in the response at byte {pos} (size {size})"
        out.append(body[pos : pos + size])
        pos += size
    return out


_RECORDS = st.lists(st.binary(max_size=20), max_size=5).map(
    lambda parts: b"".join((len(p) + 4).to_bytes(4, "big") + p for p in parts)
)


@given(body=_RECORDS | st.binary(max_size=40) | _RECORDS.map(lambda b: b[:-1] + b"\xff"))
def test_split_records_cuts_as_the_size_words_say(body: bytes) -> None:
    expected = _reference(body)
    if isinstance(expected, str):
        with pytest.raises(MQClientError) as info:
            split_records(body)
        assert str(info.value) == expected
    else:
        assert [bytes(r) for r in split_records(body)] == expected
