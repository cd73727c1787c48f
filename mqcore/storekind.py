"""Which store wrote a directory: a ``STORE_KIND`` file, so another store refuses to open it.

A writer records its store name (``mmap``, ``lmdb``...) in ``<path>/STORE_KIND`` when it
opens a directory that holds no store yet. Opening the directory with another store then
fails with an error naming the store that wrote it, instead of adding that store's files
next to the others and showing an empty store.

Directories written before the file existed are recognised by the files each bundled store
always creates (``commitlog/`` for mmap, ``data.mdb`` for lmdb); a writer adds the file to
them on its next open.
"""

from __future__ import annotations

import os
from pathlib import Path

from mqcore.atomicfile import write_atomic
from mqcore.errors import StoreError

__all__ = ["KIND_FILE_NAME", "check_store_kind", "detect_store_kind"]

KIND_FILE_NAME = "STORE_KIND"

#: A file or directory each bundled store always creates, for directories without the file.
_SIGNATURES = (("mmap", "commitlog"), ("lmdb", "data.mdb"))


def detect_store_kind(path: str | os.PathLike[str]) -> str | None:
    """The store that wrote ``path`` (its ``STORE_KIND``, else its files), or ``None``."""
    base = Path(path)
    try:
        recorded = (base / KIND_FILE_NAME).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        recorded = ""
    except NotADirectoryError:
        return None
    if recorded:
        return recorded
    for kind, signature in _SIGNATURES:
        if (base / signature).exists():
            return kind
    return None


def check_store_kind(path: str | os.PathLike[str], kind: str, *, read_only: bool) -> None:
    """Refuse ``path`` when another store wrote it; a writer records ``kind`` there.

    Raises :class:`~mqcore.errors.StoreError` naming both stores. A writer calls this
    holding the directory's writer lock, before it creates any file of its own.
    """
    found = detect_store_kind(path)
    if found is not None and found != kind:
        raise StoreError(
            f"{str(path)!r} holds a {found!r} store, written by the {found} store plugin; "
            f"open it with store={found!r}, or give the {kind} store another directory"
        )
    if read_only or (Path(path) / KIND_FILE_NAME).exists():
        return
    write_atomic(Path(path) / KIND_FILE_NAME, f"{kind}\n".encode())
