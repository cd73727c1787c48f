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
from mqcore.protocol.validation import VALID_NAME
from mqcore.store import SCHEDULE_TOPIC, TIMER_TOPIC

__all__ = [
    "DLQ_GROUP_TOPIC_PREFIX",
    "PERM_READ",
    "PERM_WRITE",
    "RETRY_GROUP_TOPIC_PREFIX",
    "SCHEDULE_TOPIC",
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

RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
AUTO_CREATE_TOPIC_KEY_TOPIC = "TBW102"
TOPIC_MAX_LENGTH = 127
GROUP_MAX_LENGTH = 120
# A whole-string match: with re.match and "$", "T\n" would pass.
_VALID_NAME = VALID_NAME

#: Topics the broker keeps for itself (TopicValidator's system topics).
SYSTEM_TOPICS = frozenset(
    {
        AUTO_CREATE_TOPIC_KEY_TOPIC,
        SCHEDULE_TOPIC,
        TIMER_TOPIC,
        "BenchmarkTest",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRACE_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
    }
)
#: System topics a producer may never send to.
NOT_ALLOWED_SEND_TOPICS = frozenset(
    {
        SCHEDULE_TOPIC,
        TIMER_TOPIC,
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
    }
)


# Names that passed validate_topic: every send validates its topic, and a process sends
# to few topics. Cleared when full, so any number of names stays bounded.
_VALID_TOPICS: set[str] = set()


def validate_topic(topic: str) -> None:
    """Raise :class:`MessageIllegalError` unless ``topic`` is a legal RocketMQ topic name."""
    if topic.__class__ is str and topic in _VALID_TOPICS:
        return
    _check_topic(topic)
    if len(_VALID_TOPICS) >= 4096:
        _VALID_TOPICS.clear()
    _VALID_TOPICS.add(topic)


def _check_topic(topic: str) -> None:
    if not isinstance(topic, str) or not topic.strip():
        raise MessageIllegalError(
            "The specified topic is blank.", code=ResponseCode.MESSAGE_ILLEGAL
        )
    if _VALID_NAME.fullmatch(topic) is None:
        raise MessageIllegalError(
            f"The specified topic[{topic}] contains illegal characters, "
            "allowing only ^[%|a-zA-Z0-9_-]+$",
            code=ResponseCode.MESSAGE_ILLEGAL,
        )
    # Retry and DLQ topics may reach 255 characters in RocketMQ, but a version-1 commit-log
    # record holds at most 127 bytes of topic, so mqcore caps every topic at 127.
    if len(topic) > TOPIC_MAX_LENGTH:
        raise MessageIllegalError(
            f"The specified topic[{topic[:20]}...] is longer than topic max length "
            f"{TOPIC_MAX_LENGTH}.",
            code=ResponseCode.MESSAGE_ILLEGAL,
        )


def validate_group(group: str) -> None:
    """Raise :class:`MessageIllegalError` unless ``group`` is a legal group name."""
    if not isinstance(group, str) or not group.strip():
        raise MessageIllegalError(
            "The specified group is blank.", code=ResponseCode.MESSAGE_ILLEGAL
        )
    if _VALID_NAME.fullmatch(group) is None:
        raise MessageIllegalError(
            f"the specified group[{group}] contains illegal characters, "
            "allowing only ^[%|a-zA-Z0-9_-]+$",
            code=ResponseCode.MESSAGE_ILLEGAL,
        )
    if len(group) > GROUP_MAX_LENGTH:
        raise MessageIllegalError(
            f"the specified group is longer than group max length {GROUP_MAX_LENGTH}.",
            code=ResponseCode.MESSAGE_ILLEGAL,
        )


@attrs.frozen(kw_only=True)
class TopicConfig:
    """One topic: read/write queue counts and permission bits (RocketMQ's TopicConfig)."""

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_RW
    order: bool = False

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
        return {
            "topicName": self.topic_name,
            "readQueueNums": self.read_queue_nums,
            "writeQueueNums": self.write_queue_nums,
            "perm": self.perm,
            "order": self.order,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TopicConfig:
        """Inverse of :meth:`to_json`."""
        return cls(
            topic_name=data["topicName"],
            read_queue_nums=int(data["readQueueNums"]),
            write_queue_nums=int(data["writeQueueNums"]),
            perm=int(data.get("perm", PERM_RW)),
            order=bool(data.get("order", False)),
        )


class TopicManager:
    """The broker's topic table, persisted to ``<data_dir>/config/topics.json`` atomically."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._topics: dict[str, TopicConfig] = {}
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
            self._persist()
        log.info("topic_updated" if old else "topic_created", topic=cfg.topic_name)
        return cfg

    def ensure(self, topic: str, queue_nums: int, perm: int = PERM_RW) -> TopicConfig:
        """The topic's config, creating it with ``queue_nums`` queues when missing."""
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
                self._persist()
                log.info("topic_created", topic=topic, queue_nums=queue_nums)
        return cfg

    def delete(self, topic: str) -> bool:
        """Remove a topic from the table (its stored messages age out with retention)."""
        with self._lock:
            found = self._topics.pop(topic, None) is not None
            if found:
                self._persist()
        return found

    def all(self) -> list[TopicConfig]:
        """Every topic, sorted by name."""
        return [self._topics[name] for name in sorted(self._topics)]
