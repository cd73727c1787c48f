"""The broker's consumer offset table (RocketMQ's ``ConsumerOffsetManager``).

Clustering consumers commit their progress to the broker: for every (group, topic, queue) the
offset of the next message to consume. The table lives in memory and is written to
``<data_dir>/config/consumerOffset.json`` by :meth:`ConsumerOffsetManager.persist`, in
RocketMQ's own JSON shape so RocketMQ's tools and people used to them recognise it::

    {"offsetTable": {"<topic>@<group>": {"<queue_id>": <offset>, ...}, ...}}

The broker calls :meth:`~ConsumerOffsetManager.persist` every 5 s and at shutdown; this class
has no timer of its own. Between two persists the newest commits exist only in memory: a
crash of the broker process loses at most the commits of the last interval, and consumers
then re-read those messages from the older offsets (at-least-once, never a lost message).
Commits that change nothing do not mark the table dirty, so an idle broker does not rewrite
the file.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from mqcore.atomicfile import read_with_backup, write_json_atomic
from mqcore.errors import InvalidArgumentError, StoreCorruptedError
from mqcore.logs import get_logger
from mqcore.protocol import fastjson

__all__ = ["CONSUMER_OFFSET_FILE", "TOPIC_GROUP_SEPARATOR", "ConsumerOffsetManager"]

log = get_logger(__name__)

#: RocketMQ's key is ``topic + "@" + group``; neither name may contain the separator.
TOPIC_GROUP_SEPARATOR = "@"

#: Where the table lives, relative to the broker's data directory (RocketMQ's layout).
CONSUMER_OFFSET_FILE = Path("config") / "consumerOffset.json"

_Key = tuple[str, str]  # (topic, group)


def _check_name(kind: str, value: str) -> None:
    if not isinstance(value, str) or not value:
        raise InvalidArgumentError(f"{kind} must be a non-empty string, got {value!r}")
    if TOPIC_GROUP_SEPARATOR in value:
        raise InvalidArgumentError(
            f"{kind} {value!r} contains {TOPIC_GROUP_SEPARATOR!r}, which separates topic and "
            "group in the offset table; choose a name without it"
        )


def _decode(data: bytes) -> tuple[dict[_Key, dict[int, int]], int]:
    """Parse the file's bytes; raises on anything that is not the expected shape."""
    # Apache RocketMQ writes this file with fastjson: queue ids are bare numbers ({0:5}).
    obj = fastjson.loads(data)
    if not isinstance(obj, dict) or not isinstance(obj.get("offsetTable"), dict):
        raise StoreCorruptedError("no 'offsetTable' object at the top level")
    table: dict[_Key, dict[int, int]] = {}
    for key, queues in obj["offsetTable"].items():
        topic, sep, group = str(key).partition(TOPIC_GROUP_SEPARATOR)
        if not sep or not topic or not group or TOPIC_GROUP_SEPARATOR in group:
            raise StoreCorruptedError(f"bad key {key!r}, expected '<topic>@<group>'")
        if not isinstance(queues, dict):
            raise StoreCorruptedError(f"offsets of {key!r} are not an object")
        offsets: dict[int, int] = {}
        for queue_id, offset in queues.items():
            if isinstance(offset, bool) or not isinstance(offset, int):
                raise StoreCorruptedError(
                    f"offset {offset!r} of {key!r} queue {queue_id!r} is not an int"
                )
            offsets[int(queue_id)] = offset
        table[(topic, group)] = offsets
    version = obj.get("dataVersion", {})
    counter = version.get("counter", 0) if isinstance(version, dict) else 0
    return table, counter if isinstance(counter, int) else 0


@attrs.define(eq=False)
class ConsumerOffsetManager:
    """Offsets of clustering consumer groups per (group, topic, queue id), persisted as JSON.

    Thread-safe: every method may be called from any thread. :meth:`persist` takes a snapshot
    under the lock and writes it outside, so commits are never blocked by an fsync.

    :param path: the JSON file, normally ``<data_dir>/config/consumerOffset.json``
        (see :meth:`in_data_dir`).
    """

    path: Path = attrs.field(converter=Path)
    _table: dict[_Key, dict[int, int]] = attrs.field(init=False, factory=dict)
    _lock: threading.Lock = attrs.field(init=False, factory=threading.Lock)
    # Serialises writers so that an older snapshot never lands after a newer one.
    _persist_lock: threading.Lock = attrs.field(init=False, factory=threading.Lock)
    _dirty: bool = attrs.field(init=False, default=False)
    _version: int = attrs.field(init=False, default=0)

    def __attrs_post_init__(self) -> None:
        if self.path.is_dir():
            raise InvalidArgumentError(
                f"consumer offset path {str(self.path)!r} is a directory; pass the JSON file, "
                "or use ConsumerOffsetManager.in_data_dir(data_dir)"
            )

    @classmethod
    def in_data_dir(cls, data_dir: str | os.PathLike[str]) -> ConsumerOffsetManager:
        """A manager for ``<data_dir>/config/consumerOffset.json`` (not loaded yet)."""
        return cls(Path(data_dir) / CONSUMER_OFFSET_FILE)

    # -- commits and queries ---------------------------------------------------------------

    def commit_offset(
        self,
        client_host: str,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        *,
        reset: bool = False,
    ) -> None:
        """Record ``offset`` as the next offset ``group`` will consume in ``topic``/``queue_id``.

        An offset lower than the stored one is accepted (a consumer may reset its progress)
        and logged as a ``consumer_offset_moved_back`` warning, as RocketMQ does.

        :param client_host: address of the committing client, for the log only.
        :param reset: an operator's or application's reset, not a member's commit: moving
            back is what was asked for, so it is logged at debug level only.
        :raises InvalidArgumentError: on an empty name, a name containing ``@``, or a
            negative queue id or offset.
        """
        _check_name("group", group)
        _check_name("topic", topic)
        if queue_id < 0 or offset < 0:
            raise InvalidArgumentError(
                f"queue_id and offset must be >= 0, got queue_id={queue_id!r} offset={offset!r} "
                f"(group={group!r}, topic={topic!r})"
            )
        with self._lock:
            queues = self._table.setdefault((topic, group), {})
            previous = queues.get(queue_id)
            if previous == offset:
                return
            queues[queue_id] = offset
            self._dirty = True
        if previous is not None and offset < previous:
            (log.debug if reset else log.warning)(
                "consumer_offset_moved_back",
                client_host=client_host,
                group=group,
                topic=topic,
                queue_id=queue_id,
                offset=offset,
                previous=previous,
            )

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset of ``group`` in ``topic``/``queue_id``; -1 when there is none."""
        with self._lock:
            queues = self._table.get((topic, group))
            if queues is None:
                return -1
            return queues.get(queue_id, -1)

    def query_group_offsets(self, group: str, topic: str) -> dict[int, int]:
        """Every committed offset of ``group`` in ``topic``: queue id -> offset (a copy)."""
        with self._lock:
            return dict(self._table.get((topic, group), {}))

    def groups_by_topic(self, topic: str) -> set[str]:
        """The groups that have committed offsets in ``topic`` (RocketMQ's whichGroupByTopic)."""
        with self._lock:
            return {g for (t, g) in self._table if t == topic}

    def topics_by_group(self, group: str) -> set[str]:
        """The topics ``group`` has committed offsets in (RocketMQ's whichTopicByConsumer)."""
        with self._lock:
            return {t for (t, g) in self._table if g == group}

    def group_topic_map(self) -> dict[str, set[str]]:
        """Every group with the topics it has offsets in."""
        result: dict[str, set[str]] = {}
        with self._lock:
            for topic, group in self._table:
                result.setdefault(group, set()).add(topic)
        return result

    # -- administration --------------------------------------------------------------------

    def remove_group(self, group: str) -> int:
        """Forget every offset of ``group``; returns how many topics it had offsets in."""
        with self._lock:
            keys = [k for k in self._table if k[1] == group]
            for key in keys:
                del self._table[key]
            if keys:
                self._dirty = True
        if keys:
            log.warning("consumer_offsets_removed", group=group, topics=sorted(k[0] for k in keys))
        return len(keys)

    def remove_topic(self, topic: str) -> int:
        """Forget every group's offsets in ``topic``; returns how many groups had offsets."""
        with self._lock:
            keys = [k for k in self._table if k[0] == topic]
            for key in keys:
                del self._table[key]
            if keys:
                self._dirty = True
        if keys:
            log.warning("consumer_offsets_removed", topic=topic, groups=sorted(k[1] for k in keys))
        return len(keys)

    def clone_offset(self, src_group: str, dst_group: str, topic: str) -> bool:
        """Give ``dst_group`` a copy of ``src_group``'s offsets in ``topic``.

        Replaces whatever ``dst_group`` had in ``topic``, as RocketMQ's cloneOffset does.
        Returns False (and changes nothing) when ``src_group`` has no offsets there.
        """
        _check_name("group", dst_group)
        with self._lock:
            source = self._table.get((topic, src_group))
            if source is None:
                return False
            self._table[(topic, dst_group)] = dict(source)
            self._dirty = True
        return True

    def offset_table(self) -> dict[str, dict[int, int]]:
        """A copy of the whole table keyed ``"<topic>@<group>"`` (for admin tools and slaves)."""
        with self._lock:
            return {
                f"{t}{TOPIC_GROUP_SEPARATOR}{g}": dict(queues)
                for (t, g), queues in self._table.items()
            }

    # -- persistence -----------------------------------------------------------------------

    @property
    def dirty(self) -> bool:
        """Whether anything changed since the last :meth:`persist` or :meth:`load`."""
        with self._lock:
            return self._dirty

    def encode(self) -> dict[str, Any]:
        """The table as RocketMQ's JSON object (``offsetTable`` and ``dataVersion``)."""
        with self._lock:
            return self._encode_locked()

    def _encode_locked(self) -> dict[str, Any]:
        table = {
            f"{t}{TOPIC_GROUP_SEPARATOR}{g}": {str(q): o for q, o in sorted(queues.items())}
            for (t, g), queues in sorted(self._table.items())
        }
        return {
            "offsetTable": table,
            "dataVersion": {"counter": self._version, "timestamp": int(time.time() * 1000)},
        }

    def persist(self) -> bool:
        """Write the table atomically if it changed; returns whether a write happened.

        The file is replaced with :func:`mqcore.atomicfile.write_json_atomic` (temporary file,
        fsync, the previous version kept as ``.bak``, rename, directory fsync).

        :raises OSError: when the file cannot be written; the table stays dirty, so the next
            call tries again.
        """
        with self._persist_lock:
            with self._lock:
                if not self._dirty:
                    return False
                self._version += 1
                snapshot = self._encode_locked()
                self._dirty = False
            try:
                write_json_atomic(self.path, snapshot)
            except BaseException:
                with self._lock:
                    self._dirty = True
                raise
        log.debug(
            "consumer_offsets_persisted", path=str(self.path), keys=len(snapshot["offsetTable"])
        )
        return True

    def load(self) -> bool:
        """Replace the table with the file's content (or its backup's, if the file is damaged).

        Returns False when neither the file nor its backup exists (a new broker), True when
        offsets were loaded. Leaves the table clean.

        :raises StoreCorruptedError: when the file and its backup both exist but neither is
            a valid offset table: starting with no offsets would make consumers skip or
            re-read whole queues, so the broker must not start silently. Restore a copy, or
            delete both files to start with no offsets.
        """
        parsed: list[tuple[dict[_Key, dict[int, int]], int]] = []

        def validate(data: bytes) -> bool:
            parsed.append(_decode(data))
            return True

        try:
            data = read_with_backup(self.path, validate)
        except StoreCorruptedError:
            log.error("consumer_offsets_unreadable", path=str(self.path))
            raise
        if data is None:
            with self._lock:
                self._table = {}
                self._dirty = False
            return False
        table, version = parsed[-1]
        with self._lock:
            self._table = table
            self._version = version
            self._dirty = False
        log.info("consumer_offsets_loaded", path=str(self.path), keys=len(table))
        return True

    def replace_table(self, table: Mapping[str, Mapping[int | str, int]]) -> None:
        """Replace the whole table with ``table`` (keyed ``"<topic>@<group>"``), marking it dirty.

        For a slave taking its master's offsets; the same shape :meth:`offset_table` returns.
        """
        decoded, _ = _decode(json.dumps({"offsetTable": table}).encode())
        with self._lock:
            self._table = decoded
            self._dirty = True
