"""The store contract's shared rules."""

from __future__ import annotations

import pytest

from mqcore.store import FlushMode, GetStatus, position_status


@pytest.mark.parametrize(
    ("offset", "low", "high", "expected"),
    [
        (0, 0, 0, (GetStatus.NO_MESSAGE_IN_QUEUE, 0)),
        (5, 0, 0, (GetStatus.NO_MESSAGE_IN_QUEUE, 0)),
        (2, 3, 9, (GetStatus.OFFSET_TOO_SMALL, 3)),
        (9, 3, 9, (GetStatus.NO_NEW_MSG, 9)),
        (12, 0, 9, (GetStatus.OFFSET_OVERFLOW_BADLY, 0)),
        (12, 3, 9, (GetStatus.OFFSET_OVERFLOW_BADLY, 9)),
        (3, 3, 9, None),
        (8, 3, 9, None),
    ],
)
def test_position_status_follows_rocketmq(
    offset: int, low: int, high: int, expected: tuple[GetStatus, int] | None
) -> None:
    assert position_status(offset, low, high) == expected


def test_flush_mode_parse() -> None:
    assert FlushMode.parse("sync") is FlushMode.SYNC_FLUSH
    assert FlushMode.parse("ASYNC_FLUSH") is FlushMode.ASYNC_FLUSH
    with pytest.raises(ValueError, match="unknown flush mode"):
        FlushMode.parse("sometimes")
