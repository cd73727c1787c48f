"""Topic configuration: names, queue counts, permissions, validation and persistence."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import attrs

from mqcore.atomicfile import read_json, write_json_atomic
from mqcore.broker.codes import ResponseCode
from mqcore.errors import MessageIllegalError, NoPermissionError, TopicNotExistError
from mqcore.logs import get_logger

# Names and their checks are shared with the clients; kept importable from here.
from mqcore.protocol.names import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    DLQ_GROUP_TOPIC_PREFIX,
    GROUP_MAX_LENGTH,
    NOT_ALLOWED_SEND_TOPICS,
    RETRY_GROUP_TOPIC_PREFIX,
    SYSTEM_TOPICS,
    TOPIC_MAX_LENGTH,
    validate_group,
    validate_topic,
)
from mqcore.store import SCHEDULE_TOPIC

__all__ = [
    "AUTO_CREATE_TOPIC_KEY_TOPIC",
    "DLQ_GROUP_TOPIC_PREFIX",
    "GROUP_MAX_LENGTH",
    "NOT_ALLOWED_SEND_TOPICS",
    "PERM_READ",
    "PERM_WRITE",
    "RETRY_GROUP_TOPIC_PREFIX",
    "SCHEDULE_TOPIC",
    "SYSTEM_TOPICS",
    "TOPIC_MAX_LENGTH",
    "TopicConfig",
    "TopicManager",
    "validate_group",
    "validate_topic",
]

log = get_logger(__name__)

# PermName bits, as RocketMQ.
PERM_INHERIT = 0x1
PERM_WRITE = 0x2
PERM_READ = 0x4
PERM_RW = PERM_READ | PERM_WRITE


@attrs.frozen(kw_only=True)
class TopicConfig:
    """One topic: read/write queue counts and permission bits (RocketMQ's TopicConfig)."""

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_RW
    order: bool = False
    #: RocketMQ 5's topic attributes by name, e.g. ``{"message.type": "FIFO"}`` (what the 5.x
    #: clients are told the topic accepts); not part of the hash
    attributes: dict[str, str] = attrs.field(factory=dict, hash=False)

    @property
    def readable(self) -> bool:
        """Consumers may pull from this topic."""
        return bool(self.perm & PERM_READ)

    @property
    def writable(self) -> bool:
        """Producers may send to this topic."""
        return bool(self.perm & PERM_WRITE)

    def to_json(self) -> dict[str, Any]:
        """RocketMQ's JSON field names."""
        out: dict[str, Any] = {
            "topicName": self.topic_name,
            "readQueueNums": self.read_queue_nums,
            "writeQueueNums": self.write_queue_nums,
            "perm": self.perm,
            "order": self.order,
        }
        if self.attributes:
            out["attributes"] = dict(self.attributes)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TopicConfig:
        """Inverse of :meth:`to_json`."""
        return cls(
            topic_name=data["topicName"],
            read_queue_nums=int(data["readQueueNums"]),
            write_queue_nums=int(data["writeQueueNums"]),
            perm=int(data.get("perm", PERM_RW)),
            order=bool(data.get("order", False)),
            attributes={str(k): str(v) for k, v in (data.get("attributes") or {}).items()},
        )


class TopicManager:
    """The broker's topic table, persisted to ``<data_dir>/config/topics.json`` atomically."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._topics: dict[str, TopicConfig] = {}
        #: Counts the table's changes (a topic created, updated or deleted).
        self.version = 0
        data: dict[str, Any] = read_json(path, {})
        for item in data.get("topicConfigTable", {}).values():
            cfg = TopicConfig.from_json(item)
            self._topics[cfg.topic_name] = cfg

    def _persist(self) -> None:
        table = {name: cfg.to_json() for name, cfg in sorted(self._topics.items())}
        write_json_atomic(self.path, {"topicConfigTable": table})

    def get(self, topic: str) -> TopicConfig | None:
        """The topic's config, or ``None``."""
        return self._topics.get(topic)

    def require(self, topic: str, *, write: bool = False, read: bool = False) -> TopicConfig:
        """The topic's config; raises TOPIC_NOT_EXIST or NO_PERMISSION like RocketMQ."""
        cfg = self._topics.get(topic)
        if cfg is None:
            raise TopicNotExistError(
                f"topic[{topic}] not exist, apply first please!", code=ResponseCode.TOPIC_NOT_EXIST
            )
        if write and not cfg.writable:
            raise NoPermissionError(
                f"the topic[{topic}] sending message is forbidden", code=ResponseCode.NO_PERMISSION
            )
        if read and not cfg.readable:
            raise NoPermissionError(
                f"the topic[{topic}] pulling message is forbidden", code=ResponseCode.NO_PERMISSION
            )
        return cfg

    def put(self, cfg: TopicConfig) -> TopicConfig:
        """Create or update a topic (validated) and persist the table."""
        validate_topic(cfg.topic_name)
        for field, value in (("read", cfg.read_queue_nums), ("write", cfg.write_queue_nums)):
            if not 1 <= value <= 1024:
                raise MessageIllegalError(
                    f"{field} queue count {value} of topic {cfg.topic_name!r} must be 1..1024",
                    code=ResponseCode.INVALID_PARAMETER,
                )
        with self._lock:
            old = self._topics.get(cfg.topic_name)
            self._topics[cfg.topic_name] = cfg
            self.version += 1
            self._persist()
        log.info("topic_updated" if old else "topic_created", topic=cfg.topic_name)
        if old is not None and cfg.read_queue_nums < old.read_queue_nums:
            # Allowed, as RocketMQ's updateTopic, but never silent: the messages of the
            # queues past the new count are no longer read by any consumer.
            log.warning(
                "topic_read_queues_shrunk",
                topic=cfg.topic_name,
                read_queue_nums=cfg.read_queue_nums,
                previous=old.read_queue_nums,
            )
        return cfg

    def ensure(
        self, topic: str, queue_nums: int, perm: int = PERM_RW, *, auto: bool = False
    ) -> TopicConfig:
        """The topic's config, creating it with ``queue_nums`` queues when missing.

        :param auto: the topic is created because a client named it (auto-creation): logged
            as ``topic_auto_created``, once, by whichever caller created it.
        """
        cfg = self._topics.get(topic)
        if cfg is not None:
            return cfg
        with self._lock:
            cfg = self._topics.get(topic)
            if cfg is None:
                cfg = TopicConfig(
                    topic_name=topic,
                    read_queue_nums=queue_nums,
                    write_queue_nums=queue_nums,
                    perm=perm,
                )
                self._topics[topic] = cfg
                self.version += 1
                self._persist()
                event = "topic_auto_created" if auto else "topic_created"
                log.info(event, topic=topic, queue_nums=queue_nums)
        return cfg

    def delete(self, topic: str) -> bool:
        """Remove a topic from the table (its stored messages age out with retention)."""
        with self._lock:
            found = self._topics.pop(topic, None) is not None
            if found:
                self.version += 1
                self._persist()
        return found

    def all(self) -> list[TopicConfig]:
        """Every topic, sorted by name."""
        with self._lock:  # a topic created meanwhile must not break the iteration
            names = sorted(self._topics)
            return [self._topics[name] for name in names]
