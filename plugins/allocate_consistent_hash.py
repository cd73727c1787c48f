"""Queue allocation on a consistent-hash ring, exactly as RocketMQ's ``CONSISTENT_HASH``.

RocketMQ builds a ring (a ``TreeMap<Long, VirtualNode>``) from the consumer ids: each
consumer ``cid`` gets ``virtual_nodes`` points, hashed from the keys ``"<cid>-0"``,
``"<cid>-1"``... A queue is routed by hashing ``str(mq)`` (RocketMQ's
``MessageQueue.toString()``) and taking the first point at or after that hash, wrapping
around to the lowest point. The default hash is the first four bytes of the MD5 digest of the
key's UTF-8 bytes, read big-endian as an unsigned number (a Java ``long`` in 0..2**32-1).

The details below matter for agreeing with Java members of the same group:

- a later point with the same hash replaces the earlier one (``TreeMap.put``);
- a consumer id listed twice gets its second set of points numbered after the first
  (RocketMQ counts the points the ring already holds for that id);
- Java encodes a lone surrogate in a key as ``?``.
"""

from __future__ import annotations

import bisect
import hashlib
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import ClassVar

import attrs

from mqcore.allocation import check_allocate_args, strategy_factory
from mqcore.errors import InvalidArgumentError
from mqcore.hookspecs import RegisterAllocators, hookimpl
from mqcore.message import MessageQueue

__all__ = [
    "DEFAULT_VIRTUAL_NODES",
    "AllocateMessageQueueConsistentHash",
    "ConsistentHashRouter",
    "java_utf8",
    "md5_hash",
    "mqcore_register_allocators",
]

#: RocketMQ's default number of virtual nodes per consumer.
DEFAULT_VIRTUAL_NODES = 10

HashFunction = Callable[[str], int]


def java_utf8(text: str) -> bytes:
    """The bytes of Java's ``text.getBytes(UTF_8)``: surrogate pairs joined, lone ones ``?``."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        joined = text.encode("utf-16-be", "surrogatepass").decode("utf-16-be", "surrogatepass")
        return joined.encode("utf-8", "replace")


def md5_hash(key: str) -> int:
    """RocketMQ's default ring hash: the first 4 MD5 bytes of ``key``, big-endian, unsigned."""
    digest = hashlib.md5(java_utf8(key), usedforsecurity=False).digest()
    return int.from_bytes(digest[:4], "big")


class ConsistentHashRouter:
    """RocketMQ's ``ConsistentHashRouter`` over consumer ids (its physical node keys).

    :param nodes: physical node keys, added in this order.
    :param virtual_nodes: points per node; 0 leaves the ring empty (nothing is routed).
    :param hash_function: ``str -> int``; RocketMQ's MD5-based hash by default.
    """

    def __init__(
        self,
        nodes: Iterable[str] = (),
        virtual_nodes: int = DEFAULT_VIRTUAL_NODES,
        hash_function: HashFunction | None = None,
    ) -> None:
        self._hash = hash_function if hash_function is not None else md5_hash
        self._ring: dict[int, str] = {}
        # How many points each node holds now; kept in step with overwrites so that it
        # equals RocketMQ's getExistingReplicas (a count over the ring's current values).
        self._points: Counter[str] = Counter()
        self._keys: list[int] | None = None
        for node in nodes:
            self.add_node(node, virtual_nodes)

    def add_node(self, node: str, virtual_nodes: int) -> None:
        """Add ``virtual_nodes`` points for ``node``, numbered after any it already has."""
        if virtual_nodes < 0:
            raise InvalidArgumentError(
                f"virtual_nodes must be >= 0, got {virtual_nodes}; RocketMQ's default is "
                f"{DEFAULT_VIRTUAL_NODES}"
            )
        existing = self._points[node]
        for i in range(virtual_nodes):
            point = self._hash(f"{node}-{i + existing}")
            previous = self._ring.get(point)
            if previous is not None:
                self._points[previous] -= 1
            self._ring[point] = node
            self._points[node] += 1
        self._keys = None

    def route(self, object_key: str) -> str | None:
        """The node owning ``object_key``: the first point at or after its hash, wrapping."""
        if not self._ring:
            return None
        keys = self._keys
        if keys is None:
            keys = self._keys = sorted(self._ring)
        at = bisect.bisect_left(keys, self._hash(object_key))
        return self._ring[keys[at if at < len(keys) else 0]]

    def __len__(self) -> int:
        return len(self._ring)


def _virtual_nodes(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(
            f"virtual_nodes must be an int, got {value!r}; RocketMQ's default is "
            f"{DEFAULT_VIRTUAL_NODES}"
        )
    if value < 0:
        raise InvalidArgumentError(
            f"virtual_nodes must be >= 0, got {value}; RocketMQ's default is "
            f"{DEFAULT_VIRTUAL_NODES}"
        )
    return value


@attrs.define
class AllocateMessageQueueConsistentHash:
    """``consistent_hash``: each queue goes to the consumer after it on the hash ring.

    Adding or removing a consumer moves only the queues next to its points. Options:
    ``virtual_nodes`` (default 10, as RocketMQ; negative is an error) and ``hash_function``
    (``str -> int``, RocketMQ's ``HashFunction``; MD5-based by default).
    """

    name: ClassVar[str] = "consistent_hash"
    rocketmq_name: ClassVar[str] = "CONSISTENT_HASH"

    virtual_nodes: int = attrs.field(default=DEFAULT_VIRTUAL_NODES, converter=_virtual_nodes)
    hash_function: HashFunction | None = None
    # The ring of the last consumer list: every member, and a CLI that plans for all of them,
    # asks with the same list, so it is built once. One tuple, swapped whole (thread-safe).
    _last: tuple[tuple[str, ...], ConsistentHashRouter] | None = attrs.field(
        default=None, init=False, repr=False, eq=False
    )

    def router(self, cid_all: Sequence[str]) -> ConsistentHashRouter:
        """The ring for ``cid_all`` (cached for the last list seen)."""
        key = tuple(cid_all)
        last = self._last
        if last is not None and last[0] == key:
            return last[1]
        ring = ConsistentHashRouter(key, self.virtual_nodes, self.hash_function)
        self._last = (key, ring)
        return ring

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        """The queues of ``mq_all`` whose ``str(mq)`` routes to ``current_cid``."""
        checked = check_allocate_args(self.name, consumer_group, current_cid, mq_all, cid_all)
        if checked is None:
            return []
        mqs, cids = checked
        ring = self.router(cids)
        return [mq for mq in mqs if ring.route(str(mq)) == current_cid]


@hookimpl(trylast=True)
def mqcore_register_allocators(register: RegisterAllocators) -> None:
    """Register ``consistent_hash``."""
    register("consistent_hash", strategy_factory(AllocateMessageQueueConsistentHash))
