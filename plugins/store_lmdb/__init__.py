"""The LMDB store (``store = "lmdb"``): the store contract on one LMDB environment.

See :mod:`.store` for the store itself, :mod:`.layout` for what is kept where and
:mod:`.environment` for map growth and flushing.
"""

from __future__ import annotations

from mqcore.hookspecs import RegisterStores, hookimpl
from mqcore.plugins.store_lmdb.store import LmdbStore

__all__ = ["LmdbStore"]


@hookimpl(trylast=True)
def mqcore_register_stores(register: RegisterStores) -> None:
    """Register the ``lmdb`` store."""
    register("lmdb", LmdbStore)
