"""Where a topic lives on disk: a store directory, or a broker data directory holding one.

A :class:`~mqcore.broker.Broker` keeps its messages in ``<data_dir>/store`` and its topic
table in ``<data_dir>/config/topics.json``. The Spark source and sink accept either path:

- a *store directory* (it holds ``data.mdb`` for the ``lmdb`` store or ``commitlog/`` for the
  ``mmap`` store) is read and written as it is;
- a *broker data directory* (it holds ``store/``) is read through its store, and a topic
  written into it is also created in its topic table, so that a broker opened there serves it;
- a new or empty directory that is written to becomes a broker data directory.
"""

from __future__ import annotations

import os
from pathlib import Path

import attrs

from mqcore.errors import InvalidArgumentError
from mqcore.kernel import Kernel
from mqcore.lockfile import LOCK_FILE_NAME
from mqcore.storekind import detect_store_kind

__all__ = ["Location", "detect_store", "resolve_read", "resolve_write"]


@attrs.frozen
class Location:
    """A resolved path: the store directory, its backend, and the broker data dir if any."""

    store_dir: str
    store: str
    data_dir: str | None = None

    @property
    def topics_file(self) -> Path | None:
        """The broker topic table, when the store belongs to a broker data directory."""
        if self.data_dir is None:
            return None
        return Path(self.data_dir) / "config" / "topics.json"


def detect_store(store_dir: str | os.PathLike[str]) -> str | None:
    """The backend that wrote ``store_dir`` (its ``STORE_KIND`` file, else its files), or None."""
    return detect_store_kind(store_dir)


def _check_store(store: str, where: Path) -> str:
    known = Kernel().names("store")
    if store not in known:
        raise InvalidArgumentError(
            f"store {store!r} for {str(where)!r} is not registered; registered stores: "
            f"{', '.join(known) or 'none'}"
        )
    return store


def resolve_read(path: str | os.PathLike[str] | None, store: str | None = None) -> Location:
    """Resolve a path to read: it must be an existing store or broker data directory."""
    if not path:
        raise InvalidArgumentError("option 'path' is required: a store or broker data directory")
    base = Path(path).absolute()
    if not base.is_dir():
        raise InvalidArgumentError(
            f"path {str(base)!r} does not exist or is not a directory; give a store directory "
            f"or a broker data directory (one holding store/)"
        )
    if (base / "store").is_dir() and detect_store(base) is None:
        data_dir: str | None = str(base)
        store_dir = base / "store"
    else:
        data_dir, store_dir = None, base
    found = detect_store(store_dir)
    if found is None:
        raise InvalidArgumentError(
            f"path {str(base)!r} is not an mqcore store: no data.mdb (lmdb) or commitlog/ "
            f"(mmap) in {str(store_dir)!r}"
        )
    if store and store != found:
        raise InvalidArgumentError(
            f"path {str(store_dir)!r} holds a {found!r} store, but option store={store!r}; "
            f"drop the option or give the right backend"
        )
    return Location(str(store_dir), _check_store(found, store_dir), data_dir)


def _default_store(store: str | None, where: Path) -> str:
    if store is None:
        known = Kernel().names("store")
        if not known:
            raise InvalidArgumentError("no store backend is registered; install one")
        store = "mmap" if "mmap" in known else known[0]
    return _check_store(store, where)


def _is_new(path: Path) -> bool:
    """Nothing but (maybe) a writer lock file in ``path``: a store that is yet to be made."""
    return not path.exists() or all(p.name == LOCK_FILE_NAME for p in path.iterdir())


def resolve_write(path: str | os.PathLike[str] | None, store: str | None = None) -> Location:
    """Resolve a path to write: an existing store, a broker data dir, or a new directory.

    A new (or empty) directory, or a broker data directory without messages yet, gets a new
    store in ``store/`` of backend ``store`` (default: ``mmap`` when registered, else the
    first registered store).
    """
    if not path:
        raise InvalidArgumentError("option 'path' is required: a store or broker data directory")
    base = Path(path).absolute()
    if base.exists() and not base.is_dir():
        raise InvalidArgumentError(f"path {str(base)!r} is a file, not a directory")
    inner = base / "store"
    if detect_store(base) is not None or detect_store(inner) is not None:
        return resolve_read(base, store)
    # A new directory, or a broker data directory whose store is yet to be written.
    if _is_new(base) or (base / "config").is_dir() or (inner.is_dir() and _is_new(inner)):
        return Location(str(inner), _default_store(store, base), str(base))
    return resolve_read(base, store)  # something else: fails, saying what it expected
