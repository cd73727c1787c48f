"""A sticky queue allocation strategy for mqcore, shipped as a third-party plugin.

Each queue goes to the consumer with the highest rendezvous score
``blake2b(consumer id + queue)``, so when a consumer joins or leaves only the queues it
gains or loses move; every other queue stays where it was.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from mqcore import MessageQueue, hookimpl
from mqcore.errors import InvalidArgumentError


def _score(cid: str, mq: MessageQueue) -> bytes:
    return hashlib.blake2b(f"{cid}|{mq}".encode(), digest_size=8).digest()


class StickyStrategy:
    """Rendezvous hashing: a queue belongs to the consumer that scores it highest."""

    name = "STICKY"

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        """The queues ``current_cid`` owns, in ``mq_all``'s order."""
        if not current_cid:
            raise InvalidArgumentError("current_cid is empty")
        if not mq_all or not cid_all:
            raise InvalidArgumentError("mq_all and cid_all must not be empty")
        if current_cid not in cid_all:
            return []
        return [mq for mq in mq_all if max(cid_all, key=lambda c: _score(c, mq)) == current_cid]


@hookimpl
def mqcore_register_allocators(register):
    """Register the ``sticky`` strategy."""
    register("sticky", StickyStrategy)
