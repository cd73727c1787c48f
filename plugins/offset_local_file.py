"""``local_file``: consumer offsets in a file of the consumer (RocketMQ's LocalFileOffsetStore).

Broadcasting consumers each read every queue, so each keeps its own progress, next to itself:
``<store_dir>/<client_id>/<group>/offsets.json``. ``store_dir`` defaults to
``~/.mqcore_offsets``, or to the directory named by the ``MQCORE_OFFSETS_DIR`` environment
variable. The file is replaced atomically by :meth:`LocalFileOffsetStore.persist_all` (which
the consumer calls every 5 s and at shutdown) and keeps the previous version as
``offsets.json.bak``; a damaged file is read from the backup. A crash loses at most the
progress since the last persist, and those messages are consumed again (at-least-once).

The file::

    {"group": "g", "clientId": "10.0.0.1@c1",
     "offsetTable": [{"topic": "T", "brokerName": "broker-a", "queueId": 0, "offset": 42}, ...]}

Options: ``group``, ``client_id``, ``store_dir``.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar

import attrs

from mqcore.atomicfile import read_with_backup, write_json_atomic
from mqcore.errors import InvalidArgumentError, StoreCorruptedError
from mqcore.hookspecs import RegisterOffsetStores, hookimpl
from mqcore.logs import get_logger
from mqcore.message import MessageQueue
from mqcore.plugins.offset_cache import CachedOffsets, OffsetCache, offset_store_factory

__all__ = [
    "ENV_OFFSETS_DIR",
    "LocalFileOffsetStore",
    "default_store_dir",
    "mqcore_register_offset_stores",
]

log = get_logger(__name__)

ENV_OFFSETS_DIR = "MQCORE_OFFSETS_DIR"
OFFSETS_FILE = "offsets.json"


def default_store_dir() -> Path:
    """``$MQCORE_OFFSETS_DIR`` when set, else ``~/.mqcore_offsets``."""
    configured = os.environ.get(ENV_OFFSETS_DIR, "").strip()
    return Path(configured).expanduser() if configured else Path.home() / ".mqcore_offsets"


def _path_part(instance: Any, attribute: Any, value: Any) -> None:
    # Both names become directories: refuse anything that would leave store_dir.
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgumentError(f"{attribute.name} must be a non-empty string, got {value!r}")
    if value in (".", "..") or "/" in value or "\\" in value or "\0" in value:
        raise InvalidArgumentError(
            f"{attribute.name} {value!r} cannot be used as a directory name "
            "(no '/', '\\', NUL, '.' or '..'); choose another name"
        )


def _to_store_dir(value: str | os.PathLike[str] | None) -> Path:
    return default_store_dir() if value is None else Path(value).expanduser()


def _encode(group: str, client_id: str, offsets: dict[MessageQueue, int]) -> dict[str, Any]:
    return {
        "group": group,
        "clientId": client_id,
        "offsetTable": [
            {"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id, "offset": o}
            for mq, o in sorted(offsets.items())
        ],
    }


def _decode(data: bytes) -> dict[MessageQueue, int]:
    obj = json.loads(data)
    if not isinstance(obj, dict) or not isinstance(obj.get("offsetTable"), list):
        raise StoreCorruptedError("no 'offsetTable' list at the top level")
    offsets: dict[MessageQueue, int] = {}
    for entry in obj["offsetTable"]:
        offset = entry["offset"]
        queue_id = entry["queueId"]
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (offset, queue_id)):
            raise StoreCorruptedError(f"bad entry {entry!r}: queueId and offset must be integers")
        offsets[MessageQueue(str(entry["topic"]), str(entry["brokerName"]), queue_id)] = offset
    return offsets


@attrs.define(eq=False)
class LocalFileOffsetStore(CachedOffsets):
    """Offsets of one broadcasting consumer instance, cached here and kept in a local file.

    Thread-safe; one instance per (client id, group) and process.
    """

    name: ClassVar[str] = "local_file"

    group: str = attrs.field(validator=_path_part)
    client_id: str = attrs.field(validator=_path_part)
    store_dir: Path = attrs.field(factory=default_store_dir, converter=_to_store_dir)
    _cache: OffsetCache = attrs.field(init=False, factory=OffsetCache)
    # Serialises read-merge-write cycles on the file.
    _file_lock: threading.Lock = attrs.field(init=False, factory=threading.Lock)
    _last_written: dict[MessageQueue, int] | None = attrs.field(init=False, default=None)

    @property
    def path(self) -> Path:
        """The offsets file: ``<store_dir>/<client_id>/<group>/offsets.json``."""
        return self.store_dir / self.client_id / self.group / OFFSETS_FILE

    # -- the file --------------------------------------------------------------------------

    def _read_file(self) -> dict[MessageQueue, int] | None:
        """The file's offsets (or its backup's); None when there is no file.

        :raises StoreCorruptedError: when the file and its backup are both unusable.
        """
        parsed: list[dict[MessageQueue, int]] = []

        def validate(data: bytes) -> bool:
            parsed.append(_decode(data))
            return True

        if read_with_backup(self.path, validate) is None:
            return None
        return parsed[-1]

    def load(self) -> None:
        """Cache every offset in the file (or in its backup, if the file is damaged).

        :raises StoreCorruptedError: when both the file and its backup exist but neither can
            be read; the message names them. Restore a copy or delete both to start over.
        """
        with self._file_lock:
            offsets = self._read_file() or {}
            # Unknown until the next write: the file may have been read from the backup.
            self._last_written = None
        for mq, offset in offsets.items():
            self._cache.update(mq, offset)
        log.info("local_offsets_loaded", group=self.group, path=str(self.path), queues=len(offsets))

    def _write(self, offsets: dict[MessageQueue, int]) -> None:
        """Merge ``offsets`` into the file; logs instead of raising, as RocketMQ does."""
        with self._file_lock:
            try:
                stored = self._read_file() or {}
            except StoreCorruptedError as exc:
                # Unreadable both ways: what is cached now is the best there is.
                log.error("local_offsets_unreadable", path=str(self.path), error=str(exc))
                stored = {}
            merged = {**stored, **offsets}
            if merged == stored == self._last_written:
                return  # the file already holds exactly this: spare the fsyncs
            try:
                write_json_atomic(self.path, _encode(self.group, self.client_id, merged))
            except OSError as exc:
                log.error(
                    "local_offsets_persist_failed",
                    group=self.group,
                    path=str(self.path),
                    error=f"{type(exc).__name__}: {exc}",
                )
                return
            self._last_written = merged

    # -- the OffsetStore protocol ----------------------------------------------------------

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool = False) -> None:
        """Cache ``offset`` as the next offset to consume in ``mq``; written on persist.

        :param increase_only: ignore ``offset`` when it is lower than the cached one.
        """
        self._cache.update(mq, offset, increase_only)

    def read_offset(self, mq: MessageQueue, from_store: bool = False) -> int:
        """The next offset to consume in ``mq``; -1 when unknown.

        By default the cached offset, reading the file only when ``mq`` is not cached
        (MEMORY_FIRST_THEN_STORE); with ``from_store`` always the file's (READ_FROM_STORE).
        What the file holds is cached.
        """
        if not from_store:
            cached = self._cache.get(mq)
            if cached is not None:
                return cached
        try:
            with self._file_lock:
                stored = self._read_file() or {}
        except StoreCorruptedError as exc:
            log.warning("local_offsets_unreadable", path=str(self.path), error=str(exc))
            return -1
        offset = stored.get(mq)
        if offset is None:
            return -1
        self._cache.update(mq, offset)
        return offset

    def persist_all(self, mqs: Iterable[MessageQueue]) -> None:
        """Write the cached offsets of ``mqs`` to the file, keeping the file's other entries.

        An empty ``mqs`` does nothing; nothing is written when the file already holds these
        offsets. A write error is logged (``local_offsets_persist_failed``), not raised.
        """
        mqs = list(mqs)
        if not mqs:
            return
        owned, _ = self._cache.split(mqs)
        if owned:
            self._write(owned)

    def _write_one(self, mq: MessageQueue, offset: int) -> None:
        self._write({mq: offset})


@hookimpl(trylast=True)
def mqcore_register_offset_stores(register: RegisterOffsetStores) -> None:
    """Register ``local_file``."""
    register(
        LocalFileOffsetStore.name,
        offset_store_factory(
            LocalFileOffsetStore, LocalFileOffsetStore.name, ("group", "client_id")
        ),
    )
