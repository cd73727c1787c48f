"""What the dashboard's forms send, read and checked: times, counts, names."""

from __future__ import annotations

import re
import time
from datetime import datetime

from mqcore.errors import InvalidArgumentError

__all__ = ["parse_count", "parse_time"]

_RELATIVE = re.compile(r"^-(\d+)(ms|s|m|h|d)$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_time(text: str, field: str, now_ms: int | None = None) -> int:
    """Milliseconds since the epoch from a form field: ``now``, ``-10m`` (ms, s, m, h, d),
    milliseconds, or a local time as a browser's date-time input sends it
    (``2026-01-31T12:00``, seconds optional).

    :raises InvalidArgumentError: none of those, naming the field.
    """
    value = text.strip()
    now = int(time.time() * 1000) if now_ms is None else now_ms
    if value.lower() == "now":
        return now
    rel = _RELATIVE.match(value)
    if rel:
        return now - int(rel.group(1)) * _UNIT_MS[rel.group(2)]
    if value.isdigit():
        return int(value)
    try:
        return int(datetime.fromisoformat(value).timestamp() * 1000)
    except ValueError:
        raise InvalidArgumentError(
            f"{field} {text!r} is not a time: give now, -10m, milliseconds since the epoch "
            f"or 2026-01-31T12:00:00"
        ) from None


def parse_count(text: str, field: str, *, low: int = 1, high: int = 1024) -> int:
    """A whole number from ``low`` to ``high`` from a form field.

    :raises InvalidArgumentError: anything else, naming the field.
    """
    try:
        value = int(text.strip())
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise InvalidArgumentError(f"{field} {text!r} is not a number from {low} to {high}")
    return value
