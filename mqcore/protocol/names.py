"""Topic and group names both sides check: reserved prefixes, system topics, validation.

The broker checks every name it is sent; clients check first, so a bad name fails before
anything goes over the wire, with the same error on every transport.
"""

from __future__ import annotations

from mqcore.errors import MessageIllegalError
from mqcore.protocol.codes import ResponseCode
from mqcore.store import SCHEDULE_TOPIC, TIMER_TOPIC
from mqcore.validation import VALID_NAME

__all__ = [
    "AUTO_CREATE_TOPIC_KEY_TOPIC",
    "DLQ_GROUP_TOPIC_PREFIX",
    "GROUP_MAX_LENGTH",
    "NOT_ALLOWED_SEND_TOPICS",
    "RETRY_GROUP_TOPIC_PREFIX",
    "SYSTEM_TOPICS",
    "TOPIC_MAX_LENGTH",
    "validate_group",
    "validate_topic",
]

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
