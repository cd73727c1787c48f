"""RocketMQ 5's topic attributes on the wire: ``+name=value`` pairs joined by commas.

The one attribute mqcore knows is ``message.type`` (``TopicAttributes``): which messages a
topic takes, as the RocketMQ 5 clients are told in their routes and the gRPC endpoint checks
on every send. Admin clients send it with UPDATE_AND_CREATE_TOPIC (17).
"""

from __future__ import annotations

from collections.abc import Mapping

from mqcore.errors import MessageIllegalError
from mqcore.protocol.codes import ResponseCode

__all__ = [
    "MESSAGE_TYPE",
    "TOPIC_MESSAGE_TYPES",
    "format_topic_attributes",
    "parse_topic_attributes",
]

#: The attribute's name.
MESSAGE_TYPE = "message.type"
#: Its values (``TopicMessageType``); a topic without it is NORMAL.
TOPIC_MESSAGE_TYPES = ("UNSPECIFIED", "NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED")


def _illegal(text: str) -> MessageIllegalError:
    return MessageIllegalError(text, code=ResponseCode.INVALID_PARAMETER)


def parse_topic_attributes(text: str | None) -> dict[str, str] | None:
    """``+message.type=FIFO,...`` as a dict; None for no attributes (the topic's kept)."""
    if not text:
        return None
    out: dict[str, str] = {}
    for item in text.split(","):
        name, sep, value = item.strip().partition("=")
        if not name.startswith("+") or not sep or not name[1:]:
            raise _illegal(f"topic attribute {item!r} is not +NAME=VALUE (e.g. +message.type=FIFO)")
        name = name[1:]
        if name != MESSAGE_TYPE:
            raise _illegal(f"unknown topic attribute {name!r}; the one known is {MESSAGE_TYPE}")
        if value not in TOPIC_MESSAGE_TYPES:
            raise _illegal(
                f"topic attribute {MESSAGE_TYPE}={value!r} is not one of "
                f"{', '.join(TOPIC_MESSAGE_TYPES)}"
            )
        out[name] = value
    return out


def format_topic_attributes(attributes: Mapping[str, str]) -> str | None:
    """The inverse of :func:`parse_topic_attributes`."""
    if not attributes:
        return None
    return ",".join(f"+{k}={v}" for k, v in sorted(attributes.items()))
