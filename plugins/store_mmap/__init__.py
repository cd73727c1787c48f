"""The mmap store (``store = "mmap"``, the default): RocketMQ's storage engine over mmap.

A segmented commit log, a consume queue per (topic, queue), a key index and a checkpoint,
with crash recovery, retention and a read-only mode for other processes. See :mod:`.store`
for the store and its options, and ``docs/storage.md`` for the layout and guarantees.
"""

from __future__ import annotations

from mqcore.hookspecs import RegisterStores, hookimpl
from mqcore.plugins.store_mmap.store import MmapStore

__all__ = ["MmapStore"]


@hookimpl(trylast=True)
def mqcore_register_stores(register: RegisterStores) -> None:
    """Register the ``mmap`` store."""
    register("mmap", MmapStore)
