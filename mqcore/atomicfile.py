"""Small files replaced atomically, with the previous version kept as ``<name>.bak``.

Offsets, checkpoints and other small metadata files are rewritten whole every few seconds.
:func:`write_atomic` makes each rewrite all-or-nothing: a reader (or a process restarted after
``kill -9`` or a power cut) sees either the old content or the new content, never a mix and
never an empty file. The steps are:

1. write the new content to a temporary file in the same directory, flush and fsync it;
2. hard-link the current file to ``<name>.bak`` (a copy where the file system has no hard
   links), replacing the previous backup atomically;
3. rename the temporary file over ``<name>`` (atomic on POSIX within one file system);
4. fsync the directory so both renames survive a power cut.

:func:`read_with_backup` reads ``<name>`` and falls back to ``<name>.bak`` when the file is
missing, empty or rejected by the caller's validation, which covers a file damaged by the
disk or by a writer that did not go through :func:`write_atomic`.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from mqcore.errors import StoreCorruptedError
from mqcore.logs import get_logger

__all__ = [
    "BACKUP_SUFFIX",
    "backup_path",
    "read_json",
    "read_with_backup",
    "write_atomic",
    "write_json_atomic",
]

log = get_logger(__name__)

BACKUP_SUFFIX = ".bak"

T = TypeVar("T")

#: ``validate(data)`` rejects ``data`` by returning ``False`` or by raising.
Validator = Callable[[bytes], object]


def backup_path(path: str | os.PathLike[str]) -> Path:
    """The backup of ``path``: the same name with ``.bak`` appended."""
    p = Path(path)
    return p.with_name(p.name + BACKUP_SUFFIX)


def _temp_sibling(path: Path, tag: str) -> Path:
    # A random part keeps two writers of the same file (threads, processes) from sharing one
    # temporary file; the leading dot keeps it out of casual listings.
    return path.with_name(f".{path.name}.{tag}.{os.getpid()}.{secrets.token_hex(4)}")


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _keep_backup(path: Path) -> None:
    """Make ``<path>.bak`` the current content of ``path`` without a moment where it is missing."""
    staged = _temp_sibling(path, "bak")
    try:
        try:
            os.link(path, staged)
        except FileNotFoundError:
            return  # first write: nothing to keep
        except OSError:
            # No hard links here (some network and FUSE file systems): copy instead.
            shutil.copyfile(path, staged)
            with open(staged, "rb+") as f:
                os.fsync(f.fileno())
        os.replace(staged, backup_path(path))
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(staged)


def write_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace the file at ``path`` with ``data`` atomically and durably.

    The previous content, if any, is kept as ``<path>.bak``. The parent directory is created
    when missing. On any error the file at ``path`` still holds its previous content and no
    temporary file is left behind.

    :param path: the file to write.
    :param data: its new content.
    :raises OSError: when the directory cannot be written (disk full, permissions...).
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_sibling(target, "tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        _keep_backup(target)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(target.parent)


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _accepts(validate: Validator | None, data: bytes, path: Path) -> bool:
    if validate is None:
        return True
    try:
        return validate(data) is not False
    except Exception as exc:
        log.warning("atomic_file_invalid", path=str(path), error=f"{type(exc).__name__}: {exc}")
        return False


def read_with_backup(
    path: str | os.PathLike[str], validate: Validator | None = None
) -> bytes | None:
    """The content of ``path``, or of ``<path>.bak`` when ``path`` is unusable.

    ``path`` is unusable when it is missing, empty, or rejected by ``validate`` (which gets the
    bytes and rejects them by returning ``False`` or raising). Falling back logs a warning
    ``atomic_file_fallback_to_backup``. The backup is validated the same way.

    :param path: the file to read.
    :param validate: optional check of the content, typically a parser.
    :returns: the bytes read, or ``None`` when neither file has any content.
    :raises StoreCorruptedError: when a file has content but neither passes ``validate``; the
        files are left untouched for inspection.
    """
    main = Path(path)
    bak = backup_path(main)
    data = _read(main)
    if data and _accepts(validate, data, main):
        return data
    main_reason = "missing" if data is None else ("empty" if not data else "invalid")
    backup = _read(bak)
    if backup and _accepts(validate, backup, bak):
        log.warning(
            "atomic_file_fallback_to_backup", path=str(main), backup=str(bak), reason=main_reason
        )
        return backup
    if main_reason == "invalid" or backup:
        raise StoreCorruptedError(
            f"{str(main)!r} is {main_reason} and its backup {str(bak)!r} is "
            f"{'invalid' if backup else 'missing or empty'}; restore one of them from a copy, "
            "or delete both to start from nothing",
            path=str(main),
        )
    return None


def write_json_atomic(path: str | os.PathLike[str], obj: Any) -> None:
    """Write ``obj`` as pretty-printed UTF-8 JSON with :func:`write_atomic`."""
    text = json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False)
    write_atomic(path, (text + "\n").encode("utf-8"))


def read_json(path: str | os.PathLike[str], default: T) -> Any | T:
    """The JSON value in ``path`` (or its backup); ``default`` when neither can be read.

    Never raises for missing or corrupt files: a corrupt main file falls back to the backup,
    and when both are unusable the error is logged (``atomic_file_unreadable``) and ``default``
    is returned.

    :param path: the JSON file.
    :param default: what to return when there is nothing usable.
    """
    parsed: list[Any] = []

    def parse(data: bytes) -> bool:
        parsed.append(json.loads(data))
        return True

    try:
        data = read_with_backup(path, parse)
    except StoreCorruptedError as exc:
        log.error("atomic_file_unreadable", path=str(path), error=str(exc))
        return default
    if data is None:
        return default
    # The value parsed last is the one read_with_backup accepted.
    return parsed[-1]
