"""RocketMQ's unique message id: the ``UNIQ_KEY`` property a producer sets on each message.

A message has two ids, as in RocketMQ. The *offset id* (``offset_msg_id``) names where a
broker stored a record (store host and commit-log offset): each retry or delayed copy has its
own. The *unique id* (``msg_id``) is made by the producer before sending and travels with the
message as the ``UNIQ_KEY`` property, through delay-level holds, retries and the dead-letter
queue, so consumers can deduplicate on it.

The layout is ``MessageClientIDSetter``'s, 16 bytes as 32 upper-case hex digits:

=====  ======================================================================
bytes  field
=====  ======================================================================
4      the producer host's IPv4 address
2      the process id (low 16 bits)
4      a random number drawn when this module is imported, standing in for the hash code
       of the Java class loader (it tells apart id generators sharing a pid)
4      milliseconds since the start of the current month (local time), a signed int
2      a counter, wrapping at 65536
=====  ======================================================================

Stores index the unique id like a key (``topic#id``), so a message is found by it with
:meth:`~mqcore.broker.Broker.query_message_by_uniq_key`, as RocketMQ's
``queryMessageByUniqKey``.
"""

from __future__ import annotations

import itertools
import os
import random
import socket
import threading
import time
from collections.abc import Sequence
from datetime import datetime
from operator import attrgetter
from typing import Any

from mqcore.message import PROPERTY_UNIQ_KEY

__all__ = ["PROPERTY_UNIQ_KEY", "create_uniq_id", "index_keys", "record_index_keys", "uniq_ids"]


def _host_ip() -> bytes:
    try:
        return socket.inet_aton(socket.gethostbyname(socket.gethostname()))
    except OSError:
        # RocketMQ's createFakeIP: four bytes of the current time in ms.
        return (time.time_ns() // 1_000_000).to_bytes(8, "big")[4:]


def _month_bounds(now_ms: int) -> tuple[int, int]:
    """Start of the month holding ``now_ms`` and of the next one (local time, ms)."""
    now = datetime.fromtimestamp(now_ms / 1000)
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    nxt = (
        start.replace(year=start.year + 1, month=1)
        if start.month == 12
        else start.replace(month=start.month + 1)
    )
    return int(start.timestamp() * 1000), int(nxt.timestamp() * 1000)


class _Generator:
    """Makes unique ids; one per process (module-level), safe to share between threads."""

    def __init__(self) -> None:
        fixed = _host_ip() + (os.getpid() & 0xFFFF).to_bytes(2, "big")
        fixed += random.SystemRandom().getrandbits(32).to_bytes(4, "big")
        self.prefix = fixed.hex().upper()
        # next() on itertools.count is atomic under the GIL: no lock per id.
        self._counter = itertools.count()
        self._lock = threading.Lock()
        self._start, self._next_start = _month_bounds(time.time_ns() // 1_000_000)
        self._head: tuple[int, str] = (-1, "")

    def _roll(self, now_ms: int) -> None:
        with self._lock:
            if now_ms >= self._next_start:
                self._start, self._next_start = _month_bounds(now_ms)

    def create(self) -> str:
        """A new unique id."""
        now = time.time_ns() // 1_000_000
        head = self._head  # (ms, prefix and time digits): ids made in one ms share them
        if head[0] != now:
            if now >= self._next_start:
                self._roll(now)
            diff = now - self._start
            if -1_000_000 < diff < 0:  # the clock stepped back a little (NTP), as RocketMQ
                diff = 0
            head = self._head = (now, f"{self.prefix}{diff & 0xFFFFFFFF:08X}")
        return f"{head[1]}{next(self._counter) & 0xFFFF:04X}"


# Made on first use (resolving the host name is not for import time).
_GENERATOR: _Generator | None = None
_GENERATOR_LOCK = threading.Lock()


def _after_fork() -> None:
    global _GENERATOR
    _GENERATOR = None  # a child has another pid (and must not share the counter)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def create_uniq_id() -> str:
    """A new unique message id (32 upper-case hex digits, ``MessageClientIDSetter``'s layout)."""
    generator = _GENERATOR
    if generator is None:
        generator = _make_generator()
    return generator.create()


def _make_generator() -> _Generator:
    global _GENERATOR
    with _GENERATOR_LOCK:
        if _GENERATOR is None:
            _GENERATOR = _Generator()
        return _GENERATOR


_properties = attrgetter("properties")


def uniq_ids(messages: Sequence[Any]) -> list[str | None] | None:
    """Each message's ``UNIQ_KEY`` (None where it has none), or None when no message has
    properties at all (the common case of plain messages costs one pass, no lookups)."""
    if len(messages) == 1:  # a single send
        props = messages[0].properties
        return [props.get(PROPERTY_UNIQ_KEY)] if props else None
    if not any(map(_properties, messages)):
        return None
    return [p.get(PROPERTY_UNIQ_KEY) if p else None for p in map(_properties, messages)]


def index_keys(keys: str | None, uniq: str | None) -> list[str]:
    """What a store indexes for one message: its keys, then its unique id (RocketMQ's
    IndexService indexes both under ``topic#key``)."""
    out = keys.split() if keys else []
    if uniq:
        out.append(uniq)
    return out


def record_index_keys(message: Any) -> list[str]:
    """:func:`index_keys` of a stored message (a :class:`~mqcore.message.MessageExt`)."""
    return index_keys(message.keys, message.get_property(PROPERTY_UNIQ_KEY))
