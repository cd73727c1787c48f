"""Stores filter with the registered TAG and SQL92 filters exactly as clients would match."""

from __future__ import annotations

from typing import Any

import pytest

from mqcore import Kernel, Message
from mqcore.store import GetStatus


def _compile(expression_type: str, expression: str) -> Any:
    kernel = Kernel()
    if expression_type.lower() not in [n.lower() for n in kernel.names("filter")]:
        pytest.skip(f"filter {expression_type} is not registered yet")
    return kernel.filter(expression_type, expression)


def _messages() -> list[Message]:
    out = []
    for i in range(24):
        out.append(
            Message(
                topic="FL",
                body=b"%d" % i,
                tags=[None, "A", "B", "C"][i % 4],
                properties={"a": str(i), "b": "x" if i % 3 == 0 else "y", "n\u00e4me": "\u00e9"},
            )
        )
    return out


def _pull_all(store: Any, message_filter: Any, max_count: int) -> list[bytes]:
    """Every message passing the filter, pulling from 0 to the end."""
    bodies: list[bytes] = []
    offset = 0
    end = store.max_offset("FL", 0)
    while offset < end:
        result = store.get("FL", 0, offset, max_count=max_count, message_filter=message_filter)
        assert result.status in (GetStatus.FOUND, GetStatus.NO_MATCHED_MSG), result
        assert result.next_offset > offset
        assert len(result.messages) <= max_count
        bodies += [m.body for m in result.messages]
        offset = result.next_offset
    return bodies


@pytest.mark.parametrize(
    ("expression_type", "expression"),
    [
        ("TAG", "A || B"),
        ("TAG", "C"),
        ("TAG", "*"),
        ("TAG", "Z"),
        ("SQL92", "a > 5 AND b = 'x'"),
        ("SQL92", "TAGS = 'A' OR a BETWEEN 20 AND 22"),
        ("SQL92", "b IN ('y') AND a < 4"),
        ("SQL92", "nothing IS NOT NULL"),
    ],
)
def test_registered_filters_match_what_clients_match(
    harness, reopen_mode, expression_type, expression
):
    """The store returns exactly the messages the compiled filter's ``matches`` accepts."""
    message_filter = _compile(expression_type, expression)
    store = harness.open()
    sent = _messages()
    store.put("FL", 0, sent[:10])
    store.put("FL", 0, sent[10:])
    store = harness.readback(store)
    expected = [m.body for m in sent if message_filter.matches(m)]
    for max_count in (1, 3, 32):
        assert _pull_all(store, message_filter, max_count) == expected
    first = store.get("FL", 0, 0, max_count=32, message_filter=message_filter)
    if expected:
        assert first.status is GetStatus.FOUND
    else:
        # Units scanned count even when none matched (a store may stop at a file's end).
        assert first.status is GetStatus.NO_MATCHED_MSG
        assert 0 < first.next_offset <= 24
