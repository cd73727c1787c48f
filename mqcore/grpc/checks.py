"""The request checks of the Java proxy's ``GrpcValidator``, with its codes."""

from __future__ import annotations

import re
from typing import Any

from mqcore.errors import MQError
from mqcore.grpc.convert import GrpcStatusError
from mqcore.grpc.pb import definition
from mqcore.protocol.names import (
    DLQ_GROUP_TOPIC_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    SYSTEM_TOPICS,
    validate_group,
    validate_topic,
)

__all__ = [
    "check_group",
    "check_invisible_ms",
    "check_tag",
    "check_topic",
    "has_control_character",
]

Code = definition.Code

# Java's Character.isISOControl: U+0000..U+001F and U+007F..U+009F.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
#: The proxy's maxInvisibleTimeMills (12 h) and minInvisibleTimeMillsForRecv (10 s).
MAX_INVISIBLE_MS = 12 * 3600 * 1000
MIN_INVISIBLE_MS_FOR_RECEIVE = 10 * 1000


def has_control_character(text: str) -> bool:
    """Whether ``text`` holds an ISO control character (``CharMatcher.javaIsoControl``)."""
    return _CONTROL.search(text) is not None


def check_topic(resource: Any) -> str:
    """The topic a ``Resource`` names; ILLEGAL_TOPIC for a bad or system topic."""
    name = resource.name if resource is not None else ""
    if not name:
        raise GrpcStatusError(Code.ILLEGAL_TOPIC, "topic name cannot be empty")
    try:
        validate_topic(name)
    except MQError as exc:
        raise GrpcStatusError(Code.ILLEGAL_TOPIC, str(exc)) from None
    if name in SYSTEM_TOPICS or name.startswith("rmq_sys_"):
        raise GrpcStatusError(Code.ILLEGAL_TOPIC, f"cannot access system topic {name!r}")
    return str(name)


def check_group(resource: Any) -> str:
    """The consumer group a ``Resource`` names; ILLEGAL_CONSUMER_GROUP for a bad one."""
    name = resource.name if resource is not None else ""
    if not name:
        raise GrpcStatusError(Code.ILLEGAL_CONSUMER_GROUP, "consumer group cannot be empty")
    try:
        validate_group(name)
    except MQError as exc:
        raise GrpcStatusError(Code.ILLEGAL_CONSUMER_GROUP, str(exc)) from None
    if name.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
        raise GrpcStatusError(Code.ILLEGAL_CONSUMER_GROUP, f"cannot use system group {name!r}")
    return str(name)


def check_tag(tag: str) -> None:
    """ILLEGAL_MESSAGE_TAG for a blank tag, one with ``|`` or a control character."""
    if not tag:
        return
    if not tag.strip():
        raise GrpcStatusError(
            Code.ILLEGAL_MESSAGE_TAG, "tag cannot be the char sequence of whitespace"
        )
    if "|" in tag:
        raise GrpcStatusError(Code.ILLEGAL_MESSAGE_TAG, f"tag {tag!r} cannot contain '|'")
    if has_control_character(tag):
        raise GrpcStatusError(Code.ILLEGAL_MESSAGE_TAG, "tag cannot contain control character")


def check_invisible_ms(invisible_ms: int, minimum: int = 0) -> None:
    """ILLEGAL_INVISIBLE_TIME outside ``minimum``..12 h."""
    if invisible_ms < minimum:
        raise GrpcStatusError(
            Code.ILLEGAL_INVISIBLE_TIME, f"the invisibleTime is too small. min is {minimum}"
        )
    if invisible_ms > MAX_INVISIBLE_MS:
        raise GrpcStatusError(
            Code.ILLEGAL_INVISIBLE_TIME,
            f"the invisibleTime is too large. max is {MAX_INVISIBLE_MS}",
        )
