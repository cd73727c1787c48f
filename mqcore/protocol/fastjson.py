"""Reading the JSON that RocketMQ's Java side writes with fastjson, which is not always JSON.

fastjson writes a map's keys as they are: ``Map<Long, String>`` (``brokerAddrs``) gets bare
numbers as keys (``{0:"host:10911"}``) and ``Map<MessageQueue, Long>`` (``ResetOffsetBody``)
gets objects as keys. :func:`loads` reads standard JSON at the speed of :mod:`json` and falls
back to a small parser for those two extensions: a number key becomes its decimal string (as
a standard-JSON writer would have quoted it), an object key becomes a tuple of its sorted
``(name, value)`` pairs, so it can be a dict key.
"""

from __future__ import annotations

import json
import re
from typing import Any

from mqcore.errors import ProtocolError

__all__ = ["dumps", "loads"]

_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?")
_CONSTANTS = {"true": True, "false": False, "null": None}
_MAX_DEPTH = 64


def dumps(obj: Any) -> bytes:
    """Compact standard JSON, UTF-8 (what RocketMQ's decoders and the C++ client read)."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse a JSON body, accepting fastjson's number and object map keys.

    :raises ProtocolError: the body is not JSON even with those extensions.
    """
    text = bytes(data).decode("utf-8", "replace") if not isinstance(data, str) else data
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        pass  # the parser below accepts fastjson's keys and bounds the nesting
    parser = _Parser(text)
    value = parser.value(0)
    parser.skip()
    if parser.pos != len(text):
        raise parser.error("trailing characters")
    return value


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.decoder = json.JSONDecoder()

    def error(self, what: str) -> ProtocolError:
        return ProtocolError(f"bad JSON body at character {self.pos}: {what}")

    def skip(self) -> None:
        self.pos = _WS.match(self.text, self.pos).end()  # type: ignore[union-attr]

    def value(self, depth: int) -> Any:
        if depth > _MAX_DEPTH:
            raise self.error(f"nested deeper than {_MAX_DEPTH}")
        self.skip()
        text, pos = self.text, self.pos
        if pos >= len(text):
            raise self.error("unexpected end")
        ch = text[pos]
        if ch == "{":
            return self.obj(depth)
        if ch == "[":
            return self.array(depth)
        if ch == '"':
            try:
                value, self.pos = json.decoder.scanstring(text, pos + 1)  # type: ignore[attr-defined]
            except ValueError as exc:
                raise self.error(str(exc)) from None
            return value
        for word, const in _CONSTANTS.items():
            if text.startswith(word, pos):
                self.pos = pos + len(word)
                return const
        m = _NUMBER.match(text, pos)
        if m is None:
            raise self.error(f"unexpected {ch!r}")
        self.pos = m.end()
        return float(m.group()) if m.group(1) or m.group(2) else int(m.group())

    def array(self, depth: int) -> list[Any]:
        self.pos += 1
        out: list[Any] = []
        self.skip()
        if self.text.startswith("]", self.pos):
            self.pos += 1
            return out
        while True:
            out.append(self.value(depth + 1))
            self.skip()
            if self.text.startswith(",", self.pos):
                self.pos += 1
            elif self.text.startswith("]", self.pos):
                self.pos += 1
                return out
            else:
                raise self.error("expected ',' or ']'")

    def obj(self, depth: int) -> dict[Any, Any]:
        self.pos += 1
        out: dict[Any, Any] = {}
        self.skip()
        if self.text.startswith("}", self.pos):
            self.pos += 1
            return out
        while True:
            key = self.value(depth + 1)
            if isinstance(key, dict):
                try:
                    key = tuple(sorted(key.items()))
                    hash(key)
                except TypeError:
                    raise self.error("an object key holds a list or an object") from None
            elif isinstance(key, int | float):
                key = str(key)
            elif not isinstance(key, str):
                raise self.error(f"unusable key {key!r}")
            self.skip()
            if not self.text.startswith(":", self.pos):
                raise self.error("expected ':'")
            self.pos += 1
            out[key] = self.value(depth + 1)
            self.skip()
            if self.text.startswith(",", self.pos):
                self.pos += 1
            elif self.text.startswith("}", self.pos):
                self.pos += 1
                return out
            else:
                raise self.error("expected ',' or '}'")
